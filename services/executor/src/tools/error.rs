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
    /// The parameters do not fit the tool's parameter type.
    #[error("invalid parameters for {tool}: {source}")]
    Parameters {
        /// The tool.
        tool: &'static str,
        /// What serde found (names the field).
        source: serde_json::Error,
    },
    /// A parameter breaks one of the tool's rules (a range, a limit, a known value).
    #[error("invalid parameters for {tool}: {reason}")]
    Invalid {
        /// The tool.
        tool: &'static str,
        /// Which parameter and which rule.
        reason: String,
    },
    /// A launch argument breaks the launch rules.
    #[error("invalid parameters for launch_application: {0}")]
    LaunchArgs(#[from] LaunchArgError),
    /// The program is not on the allow-list.
    #[error("application '{name}' is not on the allow-list; allowed: {allowed}")]
    NotAllowed {
        /// The program asked for.
        name: String,
        /// The allowed programs, or "none".
        allowed: String,
    },
    /// The program could not be started.
    #[error("cannot start '{name}': {source}")]
    Spawn {
        /// The program.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// A tool that works on the selected window ran before any selection.
    #[error("no application window is selected; call select_application_window first")]
    NoSelection,
    /// The selected window closed.
    #[error("the selected window '{title}' no longer exists")]
    WindowGone {
        /// Its title.
        title: String,
    },
    /// A window id that is not in the last window listing.
    #[error("unknown window id '{id}'; valid ids are {valid}")]
    UnknownWindow {
        /// The id sent.
        id: String,
        /// The valid ids, e.g. "0-3" or "none (no application windows)".
        valid: String,
    },
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
    /// The control disappeared since it was listed.
    #[error("control {id} '{name}' no longer exists; list the controls again")]
    ControlGone {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
    },
    /// The control does not accept input now.
    #[error("control {id} '{name}' ({control_type}) is disabled")]
    Disabled {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
        /// Its type.
        control_type: String,
    },
    /// The control is not on screen.
    #[error("control {id} '{name}' ({control_type}) is not visible")]
    Invisible {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
        /// Its type.
        control_type: String,
    },
    /// The desktop backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The command ran out of time.
    #[error("{tool} exceeded its deadline of {ms} ms")]
    Deadline {
        /// The tool.
        tool: &'static str,
        /// The deadline.
        ms: u128,
    },
    /// The result could not be turned into JSON.
    #[error("cannot encode the result: {0}")]
    Result(#[source] serde_json::Error),
}

impl ToolError {
    /// A parameter of `tool` breaks a rule (`reason` names the parameter).
    pub(crate) fn invalid(tool: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            tool,
            reason: reason.into(),
        }
    }
}

fn known_tools() -> String {
    Tool::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}
