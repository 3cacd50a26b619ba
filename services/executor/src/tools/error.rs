//! Why a command failed. The text of each error is what the agent reads in `Result.error` (and shows its
//! model), so it says what was wrong and, where there is one, what to do instead.

use crate::backend::BackendError;
use crate::encode::EncodeError;
use crate::launch::LaunchArgError;
use crate::tree::ResolveError;

use super::Tool;

/// Why a tool failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No tool has this name.
    #[error("unknown tool '{0}'; known tools: {known}", known = known_tools())]
    UnknownTool(String),
    /// The parameters of a tool do not fit its parameter type (serde's error names the field).
    #[error("invalid parameters for {0}: {1}")]
    Parameters(&'static str, #[source] serde_json::Error),
    /// A parameter of a tool breaks one of its rules (a range, a limit, a known value); the text names
    /// the parameter and the rule.
    #[error("invalid parameters for {0}: {1}")]
    Invalid(&'static str, String),
    /// A launch argument breaks the launch rules.
    #[error("invalid parameters for launch_application: {0}")]
    LaunchArgs(#[from] LaunchArgError),
    /// The program (first) is not on the allow-list (second: the allowed ones, or "none").
    #[error("application '{0}' is not on the allow-list; allowed: {1}")]
    NotAllowed(String, String),
    /// The program could not be started.
    #[error("cannot start '{0}': {1}")]
    Spawn(String, #[source] std::io::Error),
    /// A tool that works on the selected window ran before any selection.
    #[error("no application window is selected; call select_application_window first")]
    NoSelection,
    /// The selected window (its title) closed.
    #[error("the selected window '{0}' no longer exists")]
    WindowGone(String),
    /// A window id (first) that is not in the last window listing (second: the valid ids).
    #[error("unknown window id '{0}'; valid ids are {1}")]
    UnknownWindow(String, String),
    /// The selected window has no area to point at.
    #[error("the selected window has no area")]
    NoArea,
    /// A screenshot of nothing.
    #[error("nothing to capture: the region is empty")]
    EmptyRegion,
    /// The screenshot encoding task was cancelled.
    #[error("screenshot encoding was interrupted")]
    EncodeInterrupted,
    /// The screenshot could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// A control id that cannot be used.
    #[error(transparent)]
    Control(#[from] ResolveError),
    /// The control (id, name) disappeared since it was listed.
    #[error("control {0} '{1}' no longer exists; list the controls again")]
    ControlGone(String, String),
    /// The control (id, name, type) cannot take an action now: it is disabled or not visible.
    #[error("control {id} '{name}' ({control_type}) is {why}{}", waited_note(.waited))]
    Unusable {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
        /// Its type.
        control_type: String,
        /// "disabled" or "not visible".
        why: &'static str,
        /// How long the action waited for it to become usable (`--action-wait-ms`).
        waited: std::time::Duration,
    },
    /// The desktop backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The command (its tool) ran out of time (the deadline in milliseconds).
    #[error("{0} exceeded its deadline of {1} ms")]
    Deadline(&'static str, u128),
    /// A recording cannot start or stop now (one already runs; none was started); the text says why.
    #[error("record_input: {0}")]
    Recording(String),
    /// The result could not be turned into JSON.
    #[error("cannot encode the result: {0}")]
    Result(#[source] serde_json::Error),
}

impl ToolError {
    /// A parameter of `tool` breaks a rule (`reason` names the parameter).
    pub(crate) fn invalid(tool: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid(tool, reason.into())
    }
}

fn known_tools() -> String {
    Tool::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// " (waited N ms)" when an action waited for its control, else nothing.
fn waited_note(waited: &std::time::Duration) -> String {
    if waited.is_zero() {
        String::new()
    } else {
        format!(" (waited {} ms)", waited.as_millis())
    }
}
