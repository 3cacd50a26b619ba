//! REST request bodies and query parameters (documented in the OpenAPI schema), and the task status enum
//! they filter by.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use ufo_proto::v1::{self as pb, SessionStatus};
use utoipa::{IntoParams, ToSchema};

use crate::replay::OnMismatch;
use crate::runner::task_config::ConfirmPolicy;

/// `POST /v1/tasks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitTask {
    /// The task in plain words; with `replay_of` it may be absent (the replayed task's request is used)
    /// and only names the replay (the recording is what runs).
    #[serde(default)]
    #[schema(
        min_length = 1,
        pattern = r"^[^\x00]*[^\x00\s][^\x00]*$",
        example = "Open Mousepad and type hello"
    )]
    pub request: String,
    /// A registered executor name — a desktop of the pool, checked out to this task alone — or `any` (any
    /// free desktop); an `http(s)://host:port` address only for hosts the operator allows (outside the
    /// pool); absent means the default.
    #[serde(default)]
    pub executor: Option<String>,
    /// Any desktop of the pool whose labels include all of these (with `executor` absent or `any`).
    #[serde(default, deserialize_with = "object")]
    #[schema(schema_with = labels_schema)]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// Limits; absent fields take the server defaults.
    #[serde(default, deserialize_with = "object")]
    pub limits: Option<LimitsBody>,
    /// Model overrides.
    #[serde(default, deserialize_with = "object")]
    pub model: Option<ModelBody>,
    /// When actions are held for confirmation (default `sensitive`).
    #[serde(default)]
    pub confirm_policy: Option<ConfirmPolicy>,
    /// Run this finished task's recorded actions again without the model (the caller's own tasks; an
    /// admin's: any). See docs/replay.md.
    #[serde(default)]
    #[schema(format = Uuid, nullable = false)]
    pub replay_of: Option<String>,
    /// With `replay_of`: what a step whose recorded target is missing does (default `fail`).
    #[serde(default)]
    #[schema(nullable = false)]
    pub on_mismatch: Option<OnMismatch>,
    /// Follow the caller's closest earlier finished task when this request matches it (docs/knowledge.md
    /// "Reuse"): absent = the server's `--reuse`. Not with `replay_of`.
    #[serde(default)]
    #[schema(nullable = false)]
    pub reuse: Option<bool>,
}

/// JSON Schema counts `5.0` as an integer; serde does not. Accepts both, refusing fractions and
/// out-of-range values.
fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let value = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
            .map(|f| f as u64)
    });
    value
        .and_then(|v| u32::try_from(v).ok())
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "expected an integer from 0 to {}, found {n}",
                u32::MAX
            ))
        })
}

/// serde accepts a JSON array for a struct (as a tuple); the API takes objects only.
fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    match Option::<Json>::deserialize(d)? {
        None => Ok(None),
        Some(value @ Json::Object(_)) => serde_json::from_value(value)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(_) => Err(serde::de::Error::custom("expected an object")),
    }
}

/// Task limits; 0 or absent means the server default.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    /// Steps the task may take (all rounds).
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "integer")]
    pub max_steps: Option<u32>,
    /// LLM cost the task may spend, in US dollars.
    #[schema(minimum = 0)]
    pub max_cost: Option<f64>,
    /// Wall-time limit from submission, in seconds.
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "integer")]
    pub timeout_seconds: Option<u32>,
}

/// Model overrides; absent means the server default.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelBody {
    /// Model of the HostAgent.
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub host_model: Option<String>,
    /// Model of the AppAgents.
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub app_model: Option<String>,
    /// Sampling temperature.
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
}

impl SubmitTask {
    /// The gRPC form, validated by the shared service.
    pub fn into_proto(self) -> pb::SubmitTaskRequest {
        let limits = self.limits.unwrap_or_default();
        let model = self.model.unwrap_or_default();
        pb::SubmitTaskRequest {
            request: self.request,
            executor: self.executor.unwrap_or_default(),
            limits: Some(pb::TaskLimits {
                max_steps: limits.max_steps.unwrap_or(0),
                max_cost: limits.max_cost.unwrap_or(0.0),
                timeout_seconds: limits.timeout_seconds.unwrap_or(0),
            }),
            model: Some(pb::ModelOverrides {
                host_model: model.host_model.unwrap_or_default(),
                app_model: model.app_model.unwrap_or_default(),
                temperature: model.temperature,
            }),
            confirm_policy: match self.confirm_policy.unwrap_or_default() {
                ConfirmPolicy::Sensitive => pb::ConfirmPolicy::Sensitive,
                ConfirmPolicy::Always => pb::ConfirmPolicy::Always,
                ConfirmPolicy::Never => pb::ConfirmPolicy::Never,
            } as i32,
            replay_of: self.replay_of.unwrap_or_default(),
            labels: self.labels.unwrap_or_default().into_iter().collect(),
            on_mismatch: self
                .on_mismatch
                .map_or(pb::OnMismatch::Unspecified, OnMismatch::to_proto)
                as i32,
            reuse: self.reuse,
        }
    }
}

/// `POST /v1/tasks/{id}/answers`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswersBody {
    /// One answer per id in `question_ids`, in the same order.
    #[schema(min_items = 1, max_items = 16, inline)]
    pub answers: Vec<Answer>,
    /// The ids of the pending questions answered (`pending_questions[].id` of the task); a question that
    /// is not pending any more is 409.
    #[schema(min_items = 1, max_items = 16)]
    pub question_ids: Vec<String>,
}

/// One answer (any text without NUL characters).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(pattern = r"^[^\x00]*$")]
pub struct Answer(pub String);

/// `POST /v1/tasks/{id}/confirmation`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationBody {
    /// Approve (run the held action) or reject it.
    pub approve: bool,
    /// The id of the held action decided (`held_action.id` of the task); another id than the one held now
    /// is 409.
    pub action_id: String,
    /// Why, for the record.
    #[serde(default)]
    #[schema(pattern = r"^[^\x00]*$")]
    pub reason: Option<String>,
}

/// `POST /v1/tasks/{id}/requests`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowUpBody {
    /// The follow-up request in plain words.
    #[schema(min_length = 1, pattern = r"^[^\x00]*[^\x00\s][^\x00]*$")]
    pub request: String,
}

/// `POST /v1/tasks/{id}/cancel`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why, for the record.
    #[serde(default)]
    #[schema(pattern = r"^[^\x00]*$")]
    pub reason: Option<String>,
}

/// A task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Waiting for a runner.
    Queued,
    /// A runner is working on it.
    Running,
    /// Waiting for a person: answers or a confirmation.
    Waiting,
    /// Done.
    Finished,
    /// Failed (limit hit, error).
    Failed,
    /// Cancelled by a person.
    Cancelled,
}

impl TaskStatus {
    /// From the session status.
    pub fn from_proto(value: i32) -> Self {
        match SessionStatus::try_from(value) {
            Ok(SessionStatus::Running) => Self::Running,
            Ok(SessionStatus::Waiting) => Self::Waiting,
            Ok(SessionStatus::Finished) => Self::Finished,
            Ok(SessionStatus::Failed) => Self::Failed,
            Ok(SessionStatus::Cancelled) => Self::Cancelled,
            _ => Self::Queued,
        }
    }

    /// To the session status.
    pub fn to_proto(self) -> SessionStatus {
        match self {
            Self::Queued => SessionStatus::Queued,
            Self::Running => SessionStatus::Running,
            Self::Waiting => SessionStatus::Waiting,
            Self::Finished => SessionStatus::Finished,
            Self::Failed => SessionStatus::Failed,
            Self::Cancelled => SessionStatus::Cancelled,
        }
    }
}

/// `GET /v1/tasks` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Page size (server default when absent; clamped to the server cap).
    #[param(minimum = 1)]
    pub page_size: Option<u32>,
    /// `next_page_token` of the previous page.
    pub page_token: Option<String>,
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
}

/// `GET /v1/tasks/{id}/steps` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StepsQuery {
    /// First step to return (1-based).
    #[param(minimum = 1)]
    pub from: Option<u64>,
    /// How many steps (server default when absent; clamped to the server cap).
    #[param(minimum = 1)]
    pub limit: Option<u32>,
}

/// Which screenshot of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScreenshotKind {
    /// The application window as captured.
    #[default]
    Clean,
    /// The window with set-of-marks labels, as the model was sent it (drawn on read from the clean one).
    Annotated,
    /// The whole desktop.
    Desktop,
    /// The control the step acted on, cropped from the clean window screenshot.
    Selected,
    /// The whole desktop after the task's last step (the last step of a finished or failed task only).
    After,
}

/// `GET /v1/tasks/{id}/steps/{n}/screenshot` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScreenshotQuery {
    /// Which screenshot (default `clean`).
    pub kind: Option<ScreenshotKind>,
}

/// `labels`: at most 32 entries, keys of 1 to 32 characters with one that is not white space, values of at
/// most 32, no control characters (what `validate` checks; the store's own limit is 128 bytes).
fn labels_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let text = |min: Option<usize>, pattern: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(min)
            .max_length(Some(32))
            .pattern(Some(pattern))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(
            text(
                Some(1),
                r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f\s][^\x00-\x1f\x7f-\x9f]*$",
            )
            .build(),
        ))
        .additional_properties(Some(text(None, r"^[^\x00-\x1f\x7f-\x9f]*$")))
        .max_properties(Some(32))
        .build()
}
