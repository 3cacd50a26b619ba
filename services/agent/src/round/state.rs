//! The state machine's closed sets, spelled once: the HostAgent's and AppAgent's statuses as the model
//! writes them (seeds 000 and 001), the round's FSM state of the active agent, and how a subtask or a held
//! action ended. Every other module matches on these enums and writes them with `as_str`.
//!
//! A status outside the set is kept as written (`Other`), so the transition turns it into ERROR instead
//! of guessing ([`crate::round::transition`]).

use serde::{Deserialize, Serialize};

/// The HostAgent's status (seed 000).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum HostStatus {
    /// Hand the subtask to an AppAgent.
    Assign,
    /// Keep working.
    Continue,
    /// Ask the user.
    Pending,
    /// Hold the function for confirmation.
    Confirm,
    /// The request is done.
    Finish,
    /// Give up.
    Fail,
    /// A value outside the set, kept as given (upper-cased).
    Other(String),
}

impl HostStatus {
    /// The name as recorded.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Assign => "ASSIGN",
            Self::Continue => "CONTINUE",
            Self::Pending => "PENDING",
            Self::Confirm => "CONFIRM",
            Self::Finish => "FINISH",
            Self::Fail => "FAIL",
            Self::Other(s) => s,
        }
    }

    fn parse(name: String) -> Self {
        match name.as_str() {
            "ASSIGN" => Self::Assign,
            "CONTINUE" => Self::Continue,
            "PENDING" => Self::Pending,
            "CONFIRM" => Self::Confirm,
            "FINISH" => Self::Finish,
            "FAIL" => Self::Fail,
            _ => Self::Other(name),
        }
    }

    /// Whether the HostAgent runs its function now for this status (CONFIRM holds it).
    pub fn acts(&self) -> bool {
        matches!(self, Self::Assign | Self::Continue)
    }
}

/// The AppAgent's status (seed 001).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum AppStatus {
    /// Keep working.
    Continue,
    /// Run the actions (if any), then take a new screenshot before deciding; the subtask goes on.
    Screenshot,
    /// Ask the user.
    Pending,
    /// Hold the actions for confirmation.
    Confirm,
    /// The subtask is done.
    Finish,
    /// The subtask failed.
    Fail,
    /// A value outside the set, kept as given (upper-cased).
    Other(String),
}

impl AppStatus {
    /// The name as recorded.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Continue => "CONTINUE",
            Self::Screenshot => "SCREENSHOT",
            Self::Pending => "PENDING",
            Self::Confirm => "CONFIRM",
            Self::Finish => "FINISH",
            Self::Fail => "FAIL",
            Self::Other(s) => s,
        }
    }

    fn parse(name: String) -> Self {
        match name.as_str() {
            "CONTINUE" => Self::Continue,
            "SCREENSHOT" => Self::Screenshot,
            "PENDING" => Self::Pending,
            "CONFIRM" => Self::Confirm,
            "FINISH" => Self::Finish,
            "FAIL" => Self::Fail,
            _ => Self::Other(name),
        }
    }

    /// Whether the AppAgent runs its actions now for this status. CONFIRM holds them; PENDING and FAIL
    /// run nothing; SCREENSHOT runs them and then observes again (seed 001's `Status: SCREENSHOT` with a
    /// `click_input`).
    pub fn acts(&self) -> bool {
        matches!(self, Self::Continue | Self::Finish | Self::Screenshot)
    }
}

/// The round's FSM state of the active agent (a step's `state_before` / `state_after`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum AgentState {
    /// Acting.
    Continue,
    /// The HostAgent handed control to an AppAgent.
    Assign,
    /// Waiting for answers.
    Pending,
    /// Waiting for a decision on a held action.
    Confirm,
    /// Done (subtask or round).
    Finish,
    /// Failed (subtask or round).
    Fail,
    /// Ended by an error or an unknown status.
    Error,
    /// A value outside the set, kept as given (upper-cased).
    Other(String),
}

impl AgentState {
    /// The name as recorded.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Continue => "CONTINUE",
            Self::Assign => "ASSIGN",
            Self::Pending => "PENDING",
            Self::Confirm => "CONFIRM",
            Self::Finish => "FINISH",
            Self::Fail => "FAIL",
            Self::Error => "ERROR",
            Self::Other(s) => s,
        }
    }

    fn parse(name: String) -> Self {
        match name.as_str() {
            "CONTINUE" => Self::Continue,
            "ASSIGN" => Self::Assign,
            "PENDING" => Self::Pending,
            "CONFIRM" => Self::Confirm,
            "FINISH" => Self::Finish,
            "FAIL" => Self::Fail,
            "ERROR" => Self::Error,
            _ => Self::Other(name),
        }
    }
}

/// How a subtask or a held action ended, as recorded in memory and the finished-subtask list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Outcome {
    /// The subtask finished.
    Finish,
    /// The subtask failed.
    Fail,
    /// The subtask ended in an error (an unusable model reply, a failed observation); the HostAgent
    /// re-plans as after a FAIL.
    Error,
    /// The user rejected its held action.
    Rejected,
    /// The held action was approved and run.
    Approved,
    /// A value outside the set, kept as given (upper-cased).
    Other(String),
}

impl Outcome {
    /// The name as recorded.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Finish => "FINISH",
            Self::Fail => "FAIL",
            Self::Error => "ERROR",
            Self::Rejected => "REJECTED",
            Self::Approved => "APPROVED",
            Self::Other(s) => s,
        }
    }

    fn parse(name: String) -> Self {
        match name.as_str() {
            "FINISH" => Self::Finish,
            "FAIL" => Self::Fail,
            "ERROR" => Self::Error,
            "REJECTED" => Self::Rejected,
            "APPROVED" => Self::Approved,
            _ => Self::Other(name),
        }
    }
}

/// The conversions every state enum shares (the default is the empty name, an unknown one): parsed case-insensitively from what a model or a stored row
/// says, written back as its name.
macro_rules! conversions {
    ($($name:ident),+) => {$(
        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self::parse(s.trim().to_ascii_uppercase())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                s.to_owned().into()
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.as_str().to_owned()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::Other(String::new())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

conversions!(HostStatus, AppStatus, AgentState, Outcome);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_kept() {
        for s in ["ASSIGN", "CONTINUE", "PENDING", "CONFIRM", "FINISH", "FAIL"] {
            assert_eq!(HostStatus::from(s.to_lowercase()).as_str(), s);
        }
        for s in [
            "CONTINUE",
            "SCREENSHOT",
            "PENDING",
            "CONFIRM",
            "FINISH",
            "FAIL",
        ] {
            assert_eq!(AppStatus::from(format!(" {s} ")).as_str(), s);
        }
        assert_eq!(AgentState::from("error"), AgentState::Error);
        assert_eq!(Outcome::from("Approved"), Outcome::Approved);
        assert_eq!(AppStatus::from("MAYBE"), AppStatus::Other("MAYBE".into()));
        assert_eq!(AppStatus::from(""), AppStatus::Other(String::new()));
        assert_eq!(HostStatus::default().as_str(), "");
    }
}
