//! What the tools need from the agent: the task operations of its REST API, answering the REST API's JSON
//! views (`TaskView`, `TaskPage`, `StepPage`) and its `{code, message}` errors, and the task's event log.

use futures::stream::BoxStream;
use serde_json::{Value, json};
use ufo_proto::v1::Event;

/// A refused or failed operation, worded as the REST API words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// The REST error code (`not_found`, `invalid_argument`, `failed_precondition`, `unauthenticated`, ...).
    pub code: String,
    /// What is wrong, naming the field where there is one.
    pub message: String,
}

impl ToolError {
    /// An error of class `code`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// A caller's mistake in the arguments.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }

    /// The REST body `{code, message}`.
    pub fn body(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// A step's image as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `image/png` or `image/jpeg`.
    pub mime_type: String,
    /// The image bytes.
    pub bytes: Vec<u8>,
}

/// A task to submit (the fields of `POST /v1/tasks` the tools offer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOrder {
    /// The request in plain words (may be empty with `replay_of`).
    pub request: String,
    /// A registered executor name; `None`: the default.
    pub executor: Option<String>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Cost limit in US dollars.
    pub max_cost: Option<f64>,
    /// Wall-time limit in seconds.
    pub timeout_seconds: Option<u32>,
    /// A finished task whose recorded actions run again without the model.
    pub replay_of: Option<String>,
    /// With `replay_of`: `fail` or `model` when a recorded target is missing.
    pub on_mismatch: Option<String>,
}

/// The task operations, as one caller sees them. `Caller` is who calls (the HTTP transport's API key; the
/// stdio transport's configured token): every operation acts only on what that caller may see, and
/// another caller's task is "not found".
#[async_trait::async_trait]
pub trait TaskApi: Send + Sync + 'static {
    /// Who calls.
    type Caller: Send + Sync + 'static;

    /// The caller of one MCP request (from the request's extensions, e.g. the HTTP request's parts), or why
    /// the request is refused.
    fn caller(&self, extensions: &rmcp::model::Extensions) -> Result<Self::Caller, ToolError>;

    /// Queues a task: its `TaskView`.
    async fn submit(&self, caller: &Self::Caller, order: &TaskOrder) -> Result<Value, ToolError>;

    /// A task's `TaskView`.
    async fn get(&self, caller: &Self::Caller, id: &str) -> Result<Value, ToolError>;

    /// A page of tasks (`TaskPage`), newest first.
    async fn list(
        &self,
        caller: &Self::Caller,
        status: Option<&str>,
        page_size: Option<u32>,
        page_token: Option<&str>,
    ) -> Result<Value, ToolError>;

    /// Steps from `from` (1-based), at most `limit` (`StepPage`).
    async fn steps(
        &self,
        caller: &Self::Caller,
        id: &str,
        from: u64,
        limit: u32,
    ) -> Result<Value, ToolError>;

    /// Answers pending questions by id: the task's `TaskView` after.
    async fn answer(
        &self,
        caller: &Self::Caller,
        id: &str,
        question_ids: &[String],
        answers: &[String],
    ) -> Result<Value, ToolError>;

    /// Approves or rejects the held action `action_id`: the `TaskView` after.
    async fn confirm(
        &self,
        caller: &Self::Caller,
        id: &str,
        action_id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<Value, ToolError>;

    /// Asks the task to stop: the `TaskView` after.
    async fn cancel(
        &self,
        caller: &Self::Caller,
        id: &str,
        reason: &str,
    ) -> Result<Value, ToolError>;

    /// A step's screenshot of `kind` (`clean`, `annotated`, `desktop`, `selected`).
    async fn screenshot(
        &self,
        caller: &Self::Caller,
        id: &str,
        step: u64,
        kind: &str,
    ) -> Result<Image, ToolError>;

    /// The task's events from `from_seq`, replayed then live; the stream ends after the task ends.
    async fn events(
        &self,
        caller: &Self::Caller,
        id: &str,
        from_seq: u64,
    ) -> Result<BoxStream<'static, Result<Event, ToolError>>, ToolError>;

    /// Whether this backend serves the desktop tools ([`crate::desktop`]); `false` leaves them out of
    /// `tools/list`.
    fn desktop_tools(&self) -> bool {
        false
    }

    /// Runs a checked desktop call as `caller` on the named executor, recording it in the caller's
    /// direct session where the backend records them.
    async fn desktop(
        &self,
        _caller: &Self::Caller,
        call: &crate::desktop::DesktopCall,
    ) -> Result<crate::desktop::DesktopOutcome, ToolError> {
        Err(ToolError::new(
            "unimplemented",
            format!("{} is served on the agent's /mcp endpoint only", call.tool),
        ))
    }

    /// Ends `caller`'s direct session on the executor named `executor`: `{session_id, steps}`, or
    /// `{session_id: null}` when it has none open.
    async fn end_direct(&self, _caller: &Self::Caller, executor: &str) -> Result<Value, ToolError> {
        Err(ToolError::new(
            "unimplemented",
            format!("this backend records no direct session on {executor}"),
        ))
    }
}
