//! Task files: one TOML file per task, read and checked here into a [`Task`]. A task declares its setup
//! (files to create, applications to start, window sizes), the request in plain words, the demonstration
//! (per subtask: the application window, the steps a person would take, written by name — see
//! [`crate::demo`]) and the checks on real state afterwards (see [`crate::check`]).
//!
//! `{dir}` anywhere in a task's strings is the task's own scratch directory (absolute), so requests,
//! arguments, typed text and checks can name files there. Paths of setup files and file checks are
//! relative to that directory and may not leave it.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::demo::{Action, Step, StepError};

mod raw;

use raw::{RawTask, check};

/// Why a task file cannot be used; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The file or folder could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse or has unknown or missing fields.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A demonstration step is not understood.
    #[error("{path}: subtask {subtask}, step {step}: {source}")]
    Step {
        /// The file.
        path: PathBuf,
        /// 1-based subtask number.
        subtask: usize,
        /// 1-based step number.
        step: usize,
        /// Why.
        #[source]
        source: StepError,
    },
    /// The content is well-formed but not usable.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Two task files share a name or a request (the stand-in finds a task by its request).
    #[error("{first} and {second} have the same {what}")]
    Duplicate {
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
        /// `name` or `request`.
        what: &'static str,
    },
}

/// A file created in the task's directory before the task starts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupFile {
    /// Path relative to the task directory.
    pub path: String,
    /// Its content.
    pub content: String,
}

/// An application started before the task, on the suite's desktop.
#[derive(Debug, Clone)]
pub struct SetupApp {
    /// The program (looked up in PATH).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Ready when a window whose title contains this (case-insensitive) shows controls.
    pub window: String,
    /// Window size to set once it is ready.
    pub size: Option<(u32, u32)>,
    /// Keep its standard output and exit code for `process` checks.
    pub output: bool,
    /// Whether the program exposes an accessibility tree; `false` (Tk on Linux): ready as soon as its
    /// window is listed, and the agent grounds it visually.
    pub accessible: bool,
}

/// One subtask of the demonstration: what the HostAgent assigns and what the AppAgent then does.
#[derive(Debug, Clone)]
pub struct Subtask {
    /// The window to assign: its title contains this (case-insensitive).
    pub app: String,
    /// Launch this allow-listed program first when no such window is listed.
    pub launch: Option<String>,
    /// Arguments of that launch.
    pub launch_args: Vec<String>,
    /// The subtask in words (what the HostAgent hands over; unique within the task).
    pub what: String,
    /// The steps, by name.
    pub steps: Vec<Step>,
    /// What the AppAgent reports when done (default: the texts it read, else "done").
    pub result: Option<String>,
    /// The same subtask through the application's own API: the stand-in calls these, in one batch,
    /// when the AppAgent's function list offers every one of them, and follows `steps` otherwise.
    pub api: Vec<ApiCall>,
}

/// A call of an application's own API in a demonstration: the AppAgent's action `mcp__SERVER__TOOL`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCall {
    /// The MCP server's name.
    pub server: String,
    /// The tool's name on it.
    pub tool: String,
    /// Its arguments (`{dir}` filled in every string).
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl ApiCall {
    /// The action name the AppAgent's function list shows it under.
    pub fn function(&self) -> String {
        format!("mcp__{}__{}", self.server, self.tool)
    }
}

/// What an MCP server of a task serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpBind {
    /// Its tools join the AppAgents of windows whose title or process name contains one of these.
    Applications(Vec<String>),
    /// A third-party agent the HostAgent may assign a subtask to, described so.
    Agent(String),
}

/// An MCP server (stdio, started by the agent on first use) the suite's agent is given for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// Its name (unique in a suite run).
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments (`{dir}` and `{here}` filled).
    pub args: Vec<String>,
    /// What it serves.
    pub bind: McpBind,
}

impl McpServer {
    /// Its entry in the agent's `--mcp-servers` file (docs/mcp.md).
    pub fn config(&self) -> serde_json::Value {
        let bind = match &self.bind {
            McpBind::Applications(apps) => {
                serde_json::json!({"type": "applications", "applications": apps})
            }
            McpBind::Agent(description) => {
                serde_json::json!({"type": "agent", "description": description})
            }
        };
        serde_json::json!({
            "name": self.name,
            "transport": {"type": "stdio", "command": self.command, "args": self.args},
            "bind": bind,
        })
    }
}

/// How a text must look.
#[derive(Debug, Clone, PartialEq)]
pub enum TextExpect {
    /// Exactly this (a single trailing newline of the actual text is ignored).
    Equals(String),
    /// Contains this.
    Contains(String),
}

impl TextExpect {
    /// Whether `actual` meets it.
    pub fn holds(&self, actual: &str) -> bool {
        match self {
            Self::Equals(want) => {
                actual == want || actual.strip_suffix('\n') == Some(want.as_str())
            }
            Self::Contains(part) => actual.contains(part.as_str()),
        }
    }

    fn fill(&mut self, dir: &str) {
        match self {
            Self::Equals(s) | Self::Contains(s) => *s = fill(s, dir),
        }
    }
}

impl std::fmt::Display for TextExpect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Equals(s) => write!(f, "equal to {s:?}"),
            Self::Contains(s) => write!(f, "containing {s:?}"),
        }
    }
}

/// A control found by an independent accessibility walk (pyatspi), by application, role and name.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ControlRef {
    /// The application's accessible name (e.g. `gtk3-widget-factory`, `zenity`).
    pub app: String,
    /// The AT-SPI role name (e.g. `check box`, `text`, `slider`, `table cell`).
    pub role: String,
    /// The accessible name; empty matches unnamed controls.
    #[serde(default)]
    pub name: String,
    /// Which of the matching controls, 1-based in document order.
    #[serde(default = "first")]
    pub nth: u32,
    /// Any of the matching controls will do (for unnamed fields: "some text field now holds Grace").
    #[serde(default)]
    pub any: bool,
}

fn first() -> u32 {
    1
}

/// What a control must show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ControlExpect {
    /// States it must have (AT-SPI state names, e.g. `checked`, `selected`).
    pub state: Vec<String>,
    /// States it must not have.
    pub not_state: Vec<String>,
    /// Its text.
    pub text: Option<TextExpect>,
    /// Its numeric value (Value interface).
    pub value: Option<f64>,
}

/// A check on real state after the task.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// A file's content.
    File {
        /// Relative to the task directory.
        path: String,
        /// Its content.
        expect: TextExpect,
    },
    /// A control's state, text or value.
    Control {
        /// Which control.
        target: ControlRef,
        /// What it must show.
        expect: ControlExpect,
    },
    /// A setup application's exit code and output (it must have exited).
    Process {
        /// The setup app's command.
        command: String,
        /// Its exit code.
        exit_code: Option<i32>,
        /// Its standard output.
        stdout: Option<TextExpect>,
    },
}

/// A task, checked and ready to run.
#[derive(Debug, Clone)]
pub struct Task {
    /// Its name (the file stem unless the file says otherwise).
    pub name: String,
    /// The file it came from.
    pub path: PathBuf,
    /// The request in plain words.
    pub request: String,
    /// Step limit (None: the suite's default).
    pub max_steps: Option<u32>,
    /// Time limit (None: the suite's default).
    pub timeout: Option<Duration>,
    /// Files to create.
    pub files: Vec<SetupFile>,
    /// Applications to start.
    pub apps: Vec<SetupApp>,
    /// The demonstration (empty for a learning task).
    pub subtasks: Vec<Subtask>,
    /// A learning task (`learn_from`): the name of the task whose run teaches it. The learner carries no
    /// demonstration; the suite runs the teacher first, and the stand-in follows the teacher's
    /// experience retrieved into the learner's prompts.
    pub learn_from: Option<String>,
    /// A repeat (`repeat_of`, docs/knowledge.md "Reuse"): the task done first. The suite runs it first,
    /// then submits this one with `reuse: true`, so the agent follows the first run's steps; its own
    /// demonstration (optional) is what the stand-in follows where the agent falls back to the model.
    pub repeat_of: Option<String>,
    /// The checks.
    pub checks: Vec<Check>,
    /// For the replay (`[replay]`): files created instead of (or besides) the setup's — the document
    /// changed since the recording.
    pub replay_files: Vec<SetupFile>,
    /// For the replay: the checks instead of `checks` (empty: the same checks).
    pub replay_checks: Vec<Check>,
    /// MCP servers the agent is given (`[[mcp]]`): the suite starts its agent with every selected
    /// task's servers (`--mcp false`: none).
    pub mcp: Vec<McpServer>,
    /// A task a person shows (`[person]`): no agent runs it; `ufo record` records the suite's scripted
    /// person doing it, and learners (`learn_from`) follow the stored demonstration.
    pub person: Option<Person>,
}

/// A scripted person (`[person]`): what `ufo record` is told the recording is for, and the steps the
/// person does with the mouse and keyboard (xdotool), each on the control a step names.
#[derive(Debug, Clone)]
pub struct Person {
    /// The application (`ufo record --app`).
    pub app: String,
    /// The title of the window the person works in (its controls are looked up there).
    pub window: String,
    /// Clicks, double-clicks and typing, in the demonstration's wording.
    pub steps: Vec<Step>,
}

/// Replaces `{dir}` with the task directory.
pub fn fill(s: &str, dir: &str) -> String {
    s.replace("{dir}", dir)
}

/// `{dir}` filled in every string of a JSON value.
fn fill_json(v: &mut serde_json::Value, dir: &str) {
    match v {
        serde_json::Value::String(s) => *s = fill(s, dir),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| fill_json(x, dir)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| fill_json(x, dir)),
        _ => {}
    }
}

/// The folder a task file is in, absolute (`{here}` in setup commands and MCP servers: programs kept
/// beside the task files, like `services/suite/tests/mcp/calc_uno.py`).
fn here(path: &Path) -> String {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_owned())
        .display()
        .to_string()
}

/// Checks a `[person]`: an application, a window and at least one step, each a click, a double-click or
/// typing (what xdotool does as a person would; the recording turns them into the agent's functions).
fn person(raw: raw::RawPerson) -> Result<Person, String> {
    if raw.app.trim().is_empty() || raw.window.trim().is_empty() {
        return Err("[person] needs an app (for ufo record --app) and a window".into());
    }
    if raw.steps.is_empty() {
        return Err("[person] has no steps".into());
    }
    let steps = raw
        .steps
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let step = Step::parse(text).map_err(|e| format!("[person] step {}: {e}", i + 1))?;
            match (&step.action, &step.target) {
                (Action::Click | Action::DoubleClick, Some(_)) | (Action::Type(_), _) => Ok(step),
                _ => Err(format!(
                    "[person] step {}: a person clicks or double-clicks a named control, or types \
                     (into one or where the focus is): {text:?}",
                    i + 1
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Person {
        app: raw.app,
        window: raw.window,
        steps,
    })
}

fn relative_inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

impl Task {
    /// Runs in the first pass: neither a learner nor a repeat (those follow the task they name).
    pub fn first(&self) -> bool {
        self.learn_from.is_none() && self.repeat_of.is_none()
    }

    /// Reads and checks one task file.
    pub fn load(path: &Path) -> Result<Self, TaskError> {
        let text = std::fs::read_to_string(path).map_err(|source| TaskError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Checks the text of a task file (`path` names it in errors and gives the default name).
    pub fn parse(path: &Path, text: &str) -> Result<Self, TaskError> {
        let invalid = |message: String| TaskError::Invalid {
            path: path.to_owned(),
            message,
        };
        let raw: RawTask = toml::from_str(text).map_err(|e| TaskError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let name = raw.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        if name.trim().is_empty() {
            return Err(invalid("the task has no name".into()));
        }
        if raw.request.trim().is_empty() {
            return Err(invalid("request is empty".into()));
        }
        let learn_from = raw.learn_from.clone();
        let repeat_of = raw.repeat_of.clone();
        let person = match raw.person {
            None => None,
            Some(_) if learn_from.is_some() || repeat_of.is_some() || !raw.subtasks.is_empty() => {
                return Err(invalid(
                    "a task a person shows ([person]) has no [[subtask]], learn_from or repeat_of"
                        .into(),
                ));
            }
            Some(p) => Some(person(p).map_err(invalid)?),
        };
        match &repeat_of {
            Some(t) if t.trim().is_empty() || *t == name => {
                return Err(invalid("repeat_of names no other task".into()));
            }
            Some(_) if learn_from.is_some() => {
                return Err(invalid(
                    "a task is a repeat (repeat_of) or a learner (learn_from), not both".into(),
                ));
            }
            _ => {}
        }
        match &learn_from {
            Some(t) if t.trim().is_empty() => {
                return Err(invalid("learn_from names no task".into()));
            }
            Some(t) if *t == name => {
                return Err(invalid("a task cannot learn from itself".into()));
            }
            Some(_) if !raw.subtasks.is_empty() => {
                return Err(invalid(
                    "a learning task (learn_from) carries no demonstration: remove its [[subtask]]s"
                        .into(),
                ));
            }
            None if raw.subtasks.is_empty() && repeat_of.is_none() && person.is_none() => {
                return Err(invalid(
                    "the demonstration is empty: add at least one [[subtask]] (or learn_from, or \
                     [person])"
                        .into(),
                ));
            }
            _ => {}
        }
        for f in &raw.setup.files {
            if !relative_inside(&f.path) {
                return Err(invalid(format!(
                    "setup file {:?} must be a relative path inside the task directory",
                    f.path
                )));
            }
        }
        let mut apps = Vec::new();
        for a in raw.setup.apps {
            if a.command.trim().is_empty() || a.window.trim().is_empty() {
                return Err(invalid(
                    "each setup app needs a command and a window".into(),
                ));
            }
            if let Some([w, h]) = a.size
                && (!(100..=10_000).contains(&w) || !(100..=10_000).contains(&h))
            {
                return Err(invalid(format!(
                    "window size {w}x{h} of {} is out of range (100..=10000)",
                    a.command
                )));
            }
            apps.push(SetupApp {
                command: a.command,
                args: a.args,
                window: a.window,
                size: a.size.map(|[w, h]| (w, h)),
                output: a.output,
                accessible: a.accessible,
            });
        }
        let mut subtasks: Vec<Subtask> = Vec::new();
        for (i, s) in raw.subtasks.into_iter().enumerate() {
            if s.app.trim().is_empty() || s.what.trim().is_empty() {
                return Err(invalid(format!(
                    "subtask {} needs an app and a `do`",
                    i + 1
                )));
            }
            if subtasks.iter().any(|t| t.what == s.what) {
                return Err(invalid(format!(
                    "two subtasks say `do = {:?}`; each must be worded differently",
                    s.what
                )));
            }
            let steps = s
                .steps
                .iter()
                .enumerate()
                .map(|(j, text)| {
                    Step::parse(text).map_err(|source| TaskError::Step {
                        path: path.to_owned(),
                        subtask: i + 1,
                        step: j + 1,
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if steps.is_empty() && s.api.is_empty() {
                return Err(invalid(format!(
                    "subtask {} has no steps (nor [[subtask.api]] calls)",
                    i + 1
                )));
            }
            let mut api = Vec::new();
            for (j, call) in s.api.into_iter().enumerate() {
                let Some((server, tool)) = call
                    .tool
                    .split_once('.')
                    .filter(|(s, t)| !s.is_empty() && !t.is_empty())
                else {
                    return Err(invalid(format!(
                        "subtask {}, api call {}: tool {:?} must be SERVER.TOOL",
                        i + 1,
                        j + 1,
                        call.tool
                    )));
                };
                let arguments = match serde_json::to_value(&call.arguments) {
                    Ok(serde_json::Value::Object(m)) => m,
                    _ => {
                        return Err(invalid(format!(
                            "subtask {}, api call {}: arguments are not a table of JSON values",
                            i + 1,
                            j + 1
                        )));
                    }
                };
                api.push(ApiCall {
                    server: server.to_owned(),
                    tool: tool.to_owned(),
                    arguments,
                });
            }
            subtasks.push(Subtask {
                app: s.app,
                launch: s.launch.filter(|l| !l.trim().is_empty()),
                launch_args: s.launch_args,
                what: s.what,
                steps,
                result: s.result,
                api,
            });
        }
        let checks = raw
            .checks
            .into_iter()
            .enumerate()
            .map(|(i, c)| check(c, &apps).map_err(|m| invalid(format!("check {}: {m}", i + 1))))
            .collect::<Result<Vec<_>, _>>()?;
        if checks.is_empty() {
            return Err(invalid(
                "a task needs at least one [[check]] on real state".into(),
            ));
        }
        let mut mcp: Vec<McpServer> = Vec::new();
        for m in raw.mcp {
            let good = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
            if m.name.is_empty() || !m.name.chars().all(good) || m.name.contains("__") {
                return Err(invalid(format!(
                    "mcp server {:?}: the name must be letters, digits, '-' and single '_'",
                    m.name
                )));
            }
            if mcp.iter().any(|x| x.name == m.name) {
                return Err(invalid(format!(
                    "mcp server {:?} is declared twice",
                    m.name
                )));
            }
            if m.command.trim().is_empty() {
                return Err(invalid(format!("mcp server {:?} needs a command", m.name)));
            }
            let bind = match (m.applications.is_empty(), m.agent) {
                (false, None) => McpBind::Applications(m.applications),
                (true, Some(d)) if !d.trim().is_empty() => McpBind::Agent(d),
                _ => {
                    return Err(invalid(format!(
                        "mcp server {:?} needs either `applications` (window or process names) or \
                         `agent` (a description), not both",
                        m.name
                    )));
                }
            };
            mcp.push(McpServer {
                name: m.name,
                command: m.command,
                args: m.args,
                bind,
            });
        }
        for (i, sub) in subtasks.iter().enumerate() {
            if let Some(c) = sub
                .api
                .iter()
                .find(|c| !mcp.iter().any(|m| m.name == c.server))
            {
                return Err(invalid(format!(
                    "subtask {}: api call {}.{} names no [[mcp]] server of this task",
                    i + 1,
                    c.server,
                    c.tool
                )));
            }
        }
        let replay = raw.replay.unwrap_or_default();
        if let Some(f) = replay.files.iter().find(|f| !relative_inside(&f.path)) {
            return Err(invalid(format!(
                "replay file {:?} must be a relative path inside the task directory",
                f.path
            )));
        }
        let replay_checks = replay
            .checks
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                check(c, &apps).map_err(|m| invalid(format!("replay check {}: {m}", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name,
            path: path.to_owned(),
            request: raw.request,
            max_steps: raw.max_steps,
            timeout: raw.timeout_seconds.map(Duration::from_secs),
            files: raw.setup.files,
            apps,
            subtasks,
            learn_from,
            repeat_of,
            checks,
            replay_files: replay.files,
            replay_checks,
            mcp,
            person,
        })
    }

    /// The task as its replay runs it: the replay's files replace the setup's of the same path (or are
    /// added), and its checks replace the task's when it has any.
    pub fn for_replay(&self) -> Self {
        let mut t = self.clone();
        for f in &self.replay_files {
            t.files.retain(|x| x.path != f.path);
            t.files.push(f.clone());
        }
        if !self.replay_checks.is_empty() {
            t.checks = self.replay_checks.clone();
        }
        t
    }

    /// The task with `{dir}` replaced by `dir` everywhere (and `{here}`, the task file's folder, in
    /// setup commands and MCP servers).
    pub fn resolved(&self, dir: &Path) -> Self {
        let d = dir.display().to_string();
        let h = here(&self.path);
        let both = |s: &str| fill(s, &d).replace("{here}", &h);
        let mut t = self.clone();
        t.request = fill(&t.request, &d);
        for f in t.files.iter_mut().chain(&mut t.replay_files) {
            f.content = fill(&f.content, &d);
        }
        for a in &mut t.apps {
            a.command = both(&a.command);
            a.args = a.args.iter().map(|s| both(s)).collect();
            a.window = fill(&a.window, &d);
        }
        for m in &mut t.mcp {
            m.command = both(&m.command);
            m.args = m.args.iter().map(|s| both(s)).collect();
        }
        if let Some(p) = &mut t.person {
            p.window = fill(&p.window, &d);
            for step in &mut p.steps {
                step.fill(&d);
            }
        }
        for s in &mut t.subtasks {
            s.launch_args = s.launch_args.iter().map(|x| fill(x, &d)).collect();
            s.what = fill(&s.what, &d);
            s.result = s.result.as_deref().map(|r| fill(r, &d));
            for step in &mut s.steps {
                step.fill(&d);
            }
            for call in &mut s.api {
                call.arguments.values_mut().for_each(|v| fill_json(v, &d));
            }
        }
        for c in t.checks.iter_mut().chain(&mut t.replay_checks) {
            match c {
                Check::File { expect, .. } => expect.fill(&d),
                Check::Control { expect, .. } => {
                    if let Some(t) = &mut expect.text {
                        t.fill(&d);
                    }
                }
                Check::Process { stdout, .. } => {
                    if let Some(t) = stdout {
                        t.fill(&d);
                    }
                }
            }
        }
        t
    }

    /// Programs the HostAgent may launch in this task (the executor's allow-list needs them).
    pub fn launchable(&self) -> impl Iterator<Item = &str> {
        self.subtasks.iter().filter_map(|s| s.launch.as_deref())
    }
}

/// Every `*.toml` task under the given files and folders (folders are searched recursively), sorted by
/// path; names and requests must be unique.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Task>, TaskError> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    files.sort();
    files.dedup();
    let mut tasks: Vec<Task> = Vec::new();
    for f in files {
        let task = Task::load(&f)?;
        for other in &tasks {
            let what = if other.name == task.name {
                "name"
            } else if other.request == task.request {
                "request"
            } else if other
                .mcp
                .iter()
                .any(|m| task.mcp.iter().any(|n| n.name == m.name))
            {
                // One agent serves the whole run: its servers file names each server once.
                "mcp server name"
            } else {
                continue;
            };
            return Err(TaskError::Duplicate {
                first: other.path.clone(),
                second: task.path.clone(),
                what,
            });
        }
        tasks.push(task);
    }
    for t in &tasks {
        if let Some(first) = &t.repeat_of
            && !tasks
                .iter()
                .any(|x| &x.name == first && x.first() && x.person.is_none())
        {
            return Err(TaskError::Invalid {
                path: t.path.clone(),
                message: format!(
                    "repeat_of: no task named {first:?} with a demonstration among the task files"
                ),
            });
        }
        let Some(teacher) = &t.learn_from else {
            continue;
        };
        match tasks.iter().find(|x| &x.name == teacher) {
            None => {
                return Err(TaskError::Invalid {
                    path: t.path.clone(),
                    message: format!("learn_from: no task named {teacher:?} among the task files"),
                });
            }
            Some(x) if x.learn_from.is_some() => {
                return Err(TaskError::Invalid {
                    path: t.path.clone(),
                    message: format!(
                        "learn_from: {teacher:?} is itself a learning task; a teacher carries a demonstration"
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(tasks)
}

/// The tasks whose names contain one of `words` (all when `words` is empty), each learning task's
/// teacher added when it was not chosen itself, in run order: the tasks with a demonstration first,
/// then the learning tasks, so every teacher has run before its learners.
pub fn select(all: &[Task], words: &[String]) -> Vec<Task> {
    let chosen = |t: &Task| words.is_empty() || words.iter().any(|w| t.name.contains(w.as_str()));
    let teachers: Vec<&str> = all
        .iter()
        .filter(|t| chosen(t))
        .filter_map(|t| t.learn_from.as_deref().or(t.repeat_of.as_deref()))
        .collect();
    let run: Vec<&Task> = all
        .iter()
        .filter(|t| chosen(t) || teachers.contains(&t.name.as_str()))
        .collect();
    run.iter()
        .filter(|t| t.first())
        .chain(run.iter().filter(|t| !t.first()))
        .map(|t| (*t).clone())
        .collect()
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), TaskError> {
    let read = |source| TaskError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if meta.is_file() {
        out.push(path.to_owned());
        return Ok(());
    }
    for entry in std::fs::read_dir(path).map_err(read)? {
        let p = entry.map_err(read)?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "toml") {
            out.push(p);
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests;
