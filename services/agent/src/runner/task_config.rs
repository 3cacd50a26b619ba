//! A task's configuration as the API resolves it at submission and the runner reads it back from the
//! session's `config` Struct: executor, limits, model overrides, confirm policy. Defaults are applied at
//! submission, so a task keeps its limits even if a replica's defaults change later.

use serde::{Deserialize, Serialize};

/// When the runner holds an action for a person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmPolicy {
    /// Hold an action only when the model marks it for confirmation.
    #[default]
    Sensitive,
    /// Hold every action.
    Always,
    /// Never hold.
    Never,
}

impl ConfirmPolicy {
    /// From the proto enum; UNSPECIFIED (and unknown values) mean the default.
    pub fn from_proto(value: i32) -> Self {
        match ufo_proto::v1::ConfirmPolicy::try_from(value) {
            Ok(ufo_proto::v1::ConfirmPolicy::Always) => Self::Always,
            Ok(ufo_proto::v1::ConfirmPolicy::Never) => Self::Never,
            _ => Self::Sensitive,
        }
    }
}

/// Resolved limits of one task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Steps the whole task (every round) may take.
    pub max_steps: u32,
    /// LLM cost the task may spend, in US dollars.
    pub max_cost: f64,
    /// Wall time from submission, in seconds.
    pub timeout_seconds: u32,
}

/// Model overrides; empty means the server default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelChoice {
    /// Model of the HostAgent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_model: String,
    /// Model of the AppAgents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app_model: String,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// Everything a runner needs to know about a task besides its request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Executor address (resolved from a registered name at submission).
    pub executor: String,
    /// The registered executor's name; empty for a caller-named address (which gets no token).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executor_name: String,
    /// Resolved limits.
    pub limits: Limits,
    /// Model overrides.
    #[serde(default)]
    pub model: ModelChoice,
    /// Confirm policy.
    #[serde(default)]
    pub confirm_policy: ConfirmPolicy,
    /// A replay's plan (`POST /v1/tasks` with `replay_of`); none for a model-driven task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::replay::ReplaySpec>,
}

/// The session's config does not hold a task configuration.
#[derive(Debug, thiserror::Error)]
#[error("the session's config is not a task configuration")]
pub struct BadTaskConfig(#[from] serde_json::Error);

impl TaskConfig {
    /// The protobuf Struct stored as the session's config.
    pub fn to_struct(&self) -> prost_types::Struct {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => ufo_proto::json::object_to_struct(map),
            // A struct of plain fields always serialises to an object.
            _ => prost_types::Struct::default(),
        }
    }

    /// A configuration for unit tests.
    #[cfg(test)]
    pub fn for_tests() -> Self {
        Self {
            executor: String::new(),
            executor_name: String::new(),
            limits: Limits {
                max_steps: 10,
                max_cost: 1.0,
                timeout_seconds: 60,
            },
            model: ModelChoice::default(),
            confirm_policy: ConfirmPolicy::default(),
            replay: None,
        }
    }

    /// Reads the configuration back from a session's config.
    pub fn from_struct(value: Option<prost_types::Struct>) -> Result<Self, BadTaskConfig> {
        Ok(serde_json::from_value(
            ufo_proto::json::from_optional_struct(value),
        )?)
    }
}
