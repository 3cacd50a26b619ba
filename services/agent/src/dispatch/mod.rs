//! The command layer: agents turn decisions into [`Command`]s and a [`CommandDispatcher`] runs them on a
//! desktop. The production dispatcher is the executor's gRPC client ([`grpc::GrpcDispatcher`]); tests at
//! unit level use `testing::FakeDesktop` (feature `testing`).

pub mod dialout;
pub mod grpc;
pub mod registry;
mod retry;
pub mod tools;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::vision::Screenshot;

/// What kind of tool a command calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolType {
    /// Observes without changing the desktop.
    DataCollection,
    /// Changes the desktop.
    Action,
}

impl ToolType {
    /// The kind a wire value (`ufo.v1.ToolType`) names: anything but ACTION observes.
    pub fn from_wire(value: i32) -> Self {
        if value == ufo_proto::v1::ToolType::Action as i32 {
            Self::Action
        } else {
            Self::DataCollection
        }
    }
}

impl From<ToolType> for ufo_proto::v1::ToolType {
    fn from(kind: ToolType) -> Self {
        match kind {
            ToolType::DataCollection => Self::DataCollection,
            ToolType::Action => Self::Action,
        }
    }
}

/// One tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Tool name, e.g. `click_input`.
    pub tool_name: String,
    /// Parameters object.
    pub parameters: Map<String, Value>,
    /// Observe or act.
    pub tool_type: ToolType,
    /// Caller-chosen id echoed in the result.
    pub call_id: String,
}

impl Command {
    /// A data-collection command.
    pub fn observe(tool_name: &str, parameters: Value) -> Self {
        Self::new(tool_name, parameters, ToolType::DataCollection)
    }

    /// An action command.
    pub fn act(tool_name: &str, parameters: Value) -> Self {
        Self::new(tool_name, parameters, ToolType::Action)
    }

    fn new(tool_name: &str, parameters: Value, tool_type: ToolType) -> Self {
        Self {
            tool_name: tool_name.to_owned(),
            parameters: match parameters {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            tool_type,
            call_id: String::new(),
        }
    }
}

/// Outcome of one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    /// Done.
    Success,
    /// Failed; the rest of the batch is skipped.
    Failure,
    /// Not run because an earlier command of the batch failed.
    Skipped,
    /// Nothing to do.
    None,
}

/// How an observation waited for the screen to settle after an action (executor.proto `Settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleOutcome {
    /// The screen changed after the action and then stayed unchanged for the quiet time.
    Settled,
    /// Nothing changed within the first-change time.
    NoChange,
    /// The screen kept changing until the timeout; observed anyway.
    Timeout,
    /// The desktop cannot report changes.
    Unsupported,
    /// The executor did not say.
    Unspecified,
}

/// The settle wait an observation reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// How the wait ended.
    pub outcome: SettleOutcome,
    /// Time waited, in microseconds.
    pub waited_us: u64,
    /// Drawings seen after the action.
    pub draws: u32,
    /// Accessibility events seen after the action.
    pub accessibility_events: u32,
    /// Animations not waited for.
    pub animations: u32,
    /// Drawings and events outside the observed window, not waited for.
    pub ignored: u32,
}

pub use ufo_common::effect::EffectKind;

/// What an action was observed to do (executor.proto `Effect`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Effect {
    /// Confirmed, none observed or unverifiable.
    pub kind: EffectKind,
    /// The action and what changed, e.g. "keys '{ENTER}' in 'Location': nothing changed".
    pub description: String,
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandResult {
    /// Outcome.
    pub status: ResultStatus,
    /// Why it failed or was skipped.
    pub error: String,
    /// The tool's structured result.
    pub result: Value,
    /// The command's call id.
    pub call_id: String,
    /// Screenshots the command produced.
    pub images: Vec<Screenshot>,
    /// Non-fatal remarks.
    pub warnings: Vec<String>,
    /// On the first observation after an action: how long it waited for the screen to settle.
    pub settle: Option<Settle>,
    /// On an action the executor ran: what it was observed to change.
    pub effect: Option<Effect>,
    /// Wall time the executor reported spending on the command, in microseconds (0 when the command
    /// did not reach an executor or the executor did not say).
    pub duration_us: u64,
}

impl CommandResult {
    /// A successful result.
    pub fn success(result: Value) -> Self {
        Self {
            status: ResultStatus::Success,
            error: String::new(),
            result,
            call_id: String::new(),
            images: vec![],
            warnings: vec![],
            settle: None,
            effect: None,
            duration_us: 0,
        }
    }

    /// A failed result.
    pub fn failure(error: impl Into<String>) -> Self {
        Self {
            status: ResultStatus::Failure,
            error: error.into(),
            ..Self::success(Value::Null)
        }
    }

    /// A skipped result.
    pub fn skipped(reason: impl Into<String>) -> Self {
        Self {
            status: ResultStatus::Skipped,
            error: reason.into(),
            ..Self::success(Value::Null)
        }
    }

    /// A no-op result.
    pub fn none() -> Self {
        Self {
            status: ResultStatus::None,
            ..Self::success(Value::Null)
        }
    }

    /// Whether it succeeded.
    pub fn is_success(&self) -> bool {
        self.status == ResultStatus::Success
    }

    /// Whether the executor watched this action and saw nothing change.
    pub fn none_observed(&self) -> bool {
        self.effect
            .as_ref()
            .is_some_and(|e| e.kind == EffectKind::NoneObserved)
    }

    /// As JSON for memory and prompts (images are not included).
    pub fn to_json(&self) -> Value {
        let mut v =
            serde_json::json!({"status": self.status, "error": self.error, "result": self.result});
        if let Some(e) = &self.effect {
            v["effect"] = serde_json::json!(e);
        }
        v
    }
}

/// Why a batch could not be dispatched at all (a failed *command* is a [`CommandResult`] instead).
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The executor could not be reached or refused the call.
    #[error("executor call failed: {code:?}: {message}")]
    Rpc {
        /// gRPC status code.
        code: tonic::Code,
        /// Status message.
        message: String,
    },
    /// The executor answered with a different number of results than commands.
    #[error("executor returned {got} results for {sent} commands")]
    Mismatch {
        /// Commands sent.
        sent: usize,
        /// Results received.
        got: usize,
    },
    /// The executor stayed unreachable for the whole retry budget (`--executor-retry-budget-ms`).
    #[error(
        "executor {executor} is unreachable: still failing after {:.1} s of retries ({cause})",
        *waited_ms as f64 / 1000.0
    )]
    Unreachable {
        /// The executor, as `host:port` (no URL).
        executor: String,
        /// Time spent retrying, in milliseconds.
        waited_ms: u64,
        /// What the last attempt ran into.
        cause: String,
    },
    /// The executor address is unusable.
    #[error("invalid executor address: {0}")]
    Address(String),
    /// The batch was not sent: its intent could not be recorded first (nothing may act unrecorded).
    #[error("the actions were not sent: {0}")]
    Unrecorded(String),
}

/// Runs command batches on one desktop.
///
/// Contract: results come back one per command in order; after the first `Failure` the remaining
/// commands are `Skipped` without running. A batch of observations may be retried while the executor is
/// unavailable; a batch with an action only when it provably was not delivered (see `retry`).
#[async_trait]
pub trait CommandDispatcher: Send + Sync {
    /// Runs `commands` in order.
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError>;

    /// The executor's tools and launch allow-list (cached; see [`tools`]).
    async fn catalog(&self) -> Result<std::sync::Arc<tools::ExecutorCatalog>, DispatchError>;
}

/// Runs one command and returns its result.
pub async fn execute_one(
    dispatcher: &dyn CommandDispatcher,
    command: Command,
) -> Result<CommandResult, DispatchError> {
    let mut results = dispatcher.execute(vec![command]).await?;
    match results.len() {
        1 => Ok(results.remove(0)),
        got => Err(DispatchError::Mismatch { sent: 1, got }),
    }
}
