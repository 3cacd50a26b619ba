//! The TOML shapes of a task file as written (unknown fields refused) and the checks' conversion into
//! [`super::Check`], with a message saying what is wrong with a check.

use serde::Deserialize;

use super::{Check, ControlExpect, ControlRef, SetupApp, SetupFile, TextExpect, relative_inside};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTask {
    pub(super) name: Option<String>,
    pub(super) request: String,
    pub(super) max_steps: Option<u32>,
    pub(super) timeout_seconds: Option<u64>,
    /// A learning task: the task whose run (with its demonstration) teaches this one.
    pub(super) learn_from: Option<String>,
    /// A repeat (issue 33, reuse): the task done first; this one runs after it with `reuse` on.
    pub(super) repeat_of: Option<String>,
    #[serde(default)]
    pub(super) setup: RawSetup,
    #[serde(default, rename = "subtask")]
    pub(super) subtasks: Vec<RawSubtask>,
    #[serde(default, rename = "check")]
    pub(super) checks: Vec<RawCheck>,
    pub(super) replay: Option<RawReplay>,
    /// MCP servers the agent is given for this task (`[[mcp]]`).
    #[serde(default)]
    pub(super) mcp: Vec<RawMcp>,
    /// A task a person shows (`[person]`): no demonstration; the suite records it with `ufo record`.
    pub(super) person: Option<RawPerson>,
}

/// A task shown by a scripted person (`[person]`): the application the recording is for and the
/// person's steps, in the demonstration's wording.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPerson {
    pub(super) app: String,
    pub(super) window: String,
    pub(super) steps: Vec<String>,
}

/// An MCP server (stdio) the suite's agent gets for a task: bound to the windows whose title or process
/// contains one of `applications`, or a third-party agent with a `description`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    pub(super) name: String,
    pub(super) command: String,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) applications: Vec<String>,
    pub(super) agent: Option<String>,
}

/// An API call of the demonstration (`[[subtask.api]]`): `tool = "SERVER.TOOL"` and its arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApiCall {
    pub(super) tool: String,
    #[serde(default)]
    pub(super) arguments: toml::Table,
}

/// What differs when the task is replayed (`ufo-suite --replay`): the documents' text, and the checks
/// that then hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReplay {
    #[serde(default)]
    pub(super) files: Vec<SetupFile>,
    #[serde(default, rename = "check")]
    pub(super) checks: Vec<RawCheck>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSetup {
    #[serde(default)]
    pub(super) files: Vec<SetupFile>,
    #[serde(default)]
    pub(super) apps: Vec<RawApp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApp {
    pub(super) command: String,
    #[serde(default)]
    pub(super) args: Vec<String>,
    pub(super) window: String,
    pub(super) size: Option<[u32; 2]>,
    #[serde(default)]
    pub(super) output: bool,
    #[serde(default = "yes")]
    pub(super) accessible: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubtask {
    pub(super) app: String,
    pub(super) launch: Option<String>,
    #[serde(default)]
    pub(super) launch_args: Vec<String>,
    #[serde(rename = "do")]
    pub(super) what: String,
    #[serde(default)]
    pub(super) steps: Vec<String>,
    pub(super) result: Option<String>,
    /// The same subtask through the application's API, used when the AppAgent is offered those tools.
    #[serde(default)]
    pub(super) api: Vec<RawApiCall>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    pub(super) file: Option<String>,
    pub(super) control: Option<ControlRef>,
    pub(super) process: Option<String>,
    pub(super) equals: Option<String>,
    pub(super) contains: Option<String>,
    #[serde(default)]
    pub(super) state: Vec<String>,
    #[serde(default)]
    pub(super) not_state: Vec<String>,
    pub(super) text: Option<String>,
    pub(super) text_contains: Option<String>,
    pub(super) value: Option<f64>,
    pub(super) exit_code: Option<i32>,
    pub(super) stdout: Option<String>,
    pub(super) stdout_contains: Option<String>,
}

/// Why a `[[check]]` section (or its text expectations) cannot be used, in the words of the task file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct BadCheck(String);

impl From<&str> for BadCheck {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

impl From<String> for BadCheck {
    fn from(message: String) -> Self {
        Self(message)
    }
}

fn text_expect(
    equals: Option<String>,
    contains: Option<String>,
    what: &str,
) -> Result<Option<TextExpect>, BadCheck> {
    match (equals, contains) {
        (Some(_), Some(_)) => Err(BadCheck::from(format!(
            "give {what} one expectation, not both"
        ))),
        (Some(e), None) => Ok(Some(TextExpect::Equals(e))),
        (None, Some(c)) => Ok(Some(TextExpect::Contains(c))),
        (None, None) => Ok(None),
    }
}

pub(super) fn check(c: RawCheck, apps: &[SetupApp]) -> Result<Check, BadCheck> {
    let kinds = [c.file.is_some(), c.control.is_some(), c.process.is_some()]
        .iter()
        .filter(|k| **k)
        .count();
    if kinds != 1 {
        return Err(BadCheck::from(
            "say exactly one of `file`, `control` or `process`",
        ));
    }
    let control_fields = !c.state.is_empty()
        || !c.not_state.is_empty()
        || c.text.is_some()
        || c.text_contains.is_some()
        || c.value.is_some();
    let process_fields = c.exit_code.is_some() || c.stdout.is_some() || c.stdout_contains.is_some();
    let file_fields = c.equals.is_some() || c.contains.is_some();
    if let Some(path) = c.file {
        if control_fields || process_fields {
            return Err(BadCheck::from(
                "a file check takes only `equals` or `contains`",
            ));
        }
        if !relative_inside(&path) {
            return Err(BadCheck::from(format!(
                "file {path:?} must be a relative path inside the task directory"
            )));
        }
        let expect = text_expect(c.equals, c.contains, "a file check")?
            .ok_or_else(|| BadCheck::from("a file check needs `equals` or `contains`"))?;
        return Ok(Check::File { path, expect });
    }
    if let Some(target) = c.control {
        if file_fields || process_fields {
            return Err(BadCheck::from(
                "a control check takes `state`, `not_state`, `text`, `text_contains` or `value`",
            ));
        }
        if target.nth == 0 {
            return Err(BadCheck::from("`nth` counts from 1"));
        }
        if target.any && target.nth != 1 {
            return Err(BadCheck::from("say `nth` or `any`, not both"));
        }
        let expect = ControlExpect {
            state: c.state,
            not_state: c.not_state,
            text: text_expect(c.text, c.text_contains, "a control check")?,
            value: c.value,
        };
        if expect == ControlExpect::default() {
            return Err(BadCheck::from("a control check needs something to expect"));
        }
        return Ok(Check::Control { target, expect });
    }
    let command = c.process.unwrap_or_default();
    if file_fields || control_fields {
        return Err(BadCheck::from(
            "a process check takes `exit_code`, `stdout` or `stdout_contains`",
        ));
    }
    match apps.iter().find(|a| a.command == command) {
        None => {
            return Err(BadCheck::from(format!(
                "process {command:?} is not one of the setup apps' commands"
            )));
        }
        Some(a) if !a.output => {
            return Err(BadCheck::from(format!(
                "setup app {command:?} needs `output = true` for a process check"
            )));
        }
        Some(_) => {}
    }
    let stdout = text_expect(c.stdout, c.stdout_contains, "a process check")?;
    if c.exit_code.is_none() && stdout.is_none() {
        return Err(BadCheck::from(
            "a process check needs `exit_code` or a stdout expectation",
        ));
    }
    Ok(Check::Process {
        command,
        exit_code: c.exit_code,
        stdout,
    })
}
