//! Reading the prompt the agent sent, the only input the stand-in decides from: which agent asks (the
//! system prompt), the request, and the sections of the user message — the HostAgent's target list,
//! previous subtasks and its own previous actions; the AppAgent's subtask, the HostAgent's message, the
//! control list and previous actions with their outcomes (and texts read). Also the sizes the suite
//! reports per step: text bytes, image bytes and pixels.

use base64::Engine as _;
use serde_json::Value;

/// Which agent sent the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// The HostAgent.
    Host,
    /// An AppAgent.
    App,
    /// A third-party agent (an MCP server registered as an agent, or the shell): no window, its
    /// server's tools only.
    ThirdParty,
}

/// One entry of the AppAgent's control list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// The label to answer with.
    pub label: String,
    /// The control's name.
    pub name: String,
    /// Its type (`Button`, `Edit`, ...).
    pub kind: String,
}

/// One entry of the HostAgent's target list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The label to answer with.
    pub label: String,
    /// The window title.
    pub name: String,
    /// `APPLICATION` or `THIRD_PARTY_AGENT`.
    pub kind: String,
}

/// What happened to a previous action, as the prompt says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `[success]`.
    Success,
    /// `[failure: …]`, `[denied: …]`, `[skipped: …]`, `[not run: …]`, `[outcome unknown: …]` (sent by
    /// a runner that stopped before its result came back), with the text.
    NotDone(String),
    /// No outcome given.
    Unknown,
}

/// A previous action, parsed from its representation (`click_input on [12]Save [success]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastAction {
    /// The tool.
    pub function: String,
    /// The target's name, when the action had one.
    pub target: Option<String>,
    /// The arguments, when shown instead of a target (`keyboard_input {"keys":"^s"}`).
    pub arguments: Option<Value>,
    /// What happened.
    pub outcome: Outcome,
    /// A text it read (`→ "…"`).
    pub read: Option<String>,
}

/// A finished subtask `{subtask, status, result}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastSubtask {
    /// The subtask's words.
    pub subtask: String,
    /// `FINISH` or `FAIL`.
    pub status: String,
    /// Its result.
    pub result: String,
}

/// Sizes of what the model was sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptSize {
    /// Bytes of text (every text part and string content).
    pub text_bytes: u64,
    /// Bytes of images (decoded).
    pub image_bytes: u64,
    /// Pixels of images.
    pub image_pixels: u64,
    /// Number of images.
    pub images: u64,
}

/// Everything the stand-in reads from one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// Who asks.
    pub agent: AgentKind,
    /// The user's request.
    pub request: String,
    /// AppAgent: the current subtask.
    pub subtask: String,
    /// AppAgent: the HostAgent's message (empty when none).
    pub host_message: String,
    /// AppAgent: the control list.
    pub controls: Vec<Control>,
    /// HostAgent: the target list.
    pub windows: Vec<Window>,
    /// Previous actions (the AppAgent's, or the HostAgent's own), oldest first, repeats expanded.
    pub actions: Vec<PastAction>,
    /// Finished subtasks, oldest first.
    pub subtasks: Vec<PastSubtask>,
    /// The retrieved knowledge (`[Retrieved knowledge]`, "" when the prompt has none): earlier tasks'
    /// experiences a learning task follows ([`super::learn`]).
    pub knowledge: String,
    /// The functions the prompt offers (`- name(…): …` lines), e.g. an application's API actions
    /// `mcp__SERVER__TOOL` beside the GUI tools.
    pub functions: Vec<String>,
}

/// The names of the functions listed in `text` as `- name(params): description` lines.
fn function_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .filter_map(|l| l.split_once('(').map(|(name, _)| name))
        .filter(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(str::to_owned)
        .collect()
}

/// The text parts of the messages with this role, in order.
pub fn text_parts(body: &Value, role: &str) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == role)
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
        .collect()
}

/// The text after `[name]` up to the next section header, trimmed; None when there is no such section.
fn section<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let header = format!("[{name}]\n");
    let start = if text.starts_with(&header) {
        header.len()
    } else {
        text.find(&format!("\n{header}"))? + header.len() + 1
    };
    let rest = &text[start..];
    // A section ends at a blank line followed by a `[Header]` line.
    let end = rest
        .match_indices("\n\n[")
        .find(|(i, _)| {
            rest[i + 2..]
                .lines()
                .next()
                .is_some_and(|l| l.ends_with(']') && !l.contains('"'))
        })
        .map_or(rest.len(), |(i, _)| i);
    Some(rest[..end].trim())
}

fn none_is_empty(s: &str) -> &str {
    if s == "none" { "" } else { s }
}

/// Tools an action representation can start with (the executor's action tools).
const TOOLS: &[&str] = &[
    "click_input",
    "click_on_coordinates",
    "drag_on_coordinates",
    "set_edit_text",
    "keyboard_input",
    "wheel_mouse_input",
    "texts",
    "wait",
    "summary",
    "launch_application",
    "select_application_window",
    "close_application",
];

/// Splits a step's representation into its actions (a batch is joined by `; `; a control name may
/// contain `; ` too, so a split needs a tool name after it).
fn split_actions(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in line.match_indices("; ") {
        let next = &line[i + 2..];
        let starts_tool = TOOLS.iter().any(|t| {
            next.strip_prefix(t)
                .is_some_and(|after| after.is_empty() || after.starts_with(' '))
        }) || api_action(next.split(' ').next().unwrap_or(""));
        if starts_tool && i >= start {
            out.push(&line[start..i]);
            start = i + 2;
        }
    }
    out.push(&line[start..]);
    out
}

/// Whether `name` is an API action: an MCP tool (`mcp__SERVER__TOOL`) or the shell's (`shell__run`).
fn api_action(name: &str) -> bool {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    (name.starts_with("mcp__") || name.starts_with("shell__")) && ident(name)
}

/// Parses one action representation.
pub fn parse_action(repr: &str) -> PastAction {
    let mut s = repr.trim();
    let mut read = None;
    // A read text (`→ "…"`) or an API call's answer (`→ {…}`), after the outcome.
    if let Some(i) = s.rfind("] → ")
        && let Ok(v) = serde_json::from_str::<Value>(&s[i + "] → ".len()..])
    {
        if let Value::String(v) = v {
            read = Some(v);
        }
        s = &s[..=i];
    }
    let mut outcome = Outcome::Unknown;
    // A success with what the executor saw it change (`[success; effect: kind — description]`, issue
    // 31): a success; the agent itself holds a FINISH back when the effect was none_observed.
    if let Some(i) = s.find(" [success; effect: ").filter(|_| s.ends_with(']')) {
        outcome = Outcome::Success;
        s = &s[..i];
    }
    for marker in [
        " [success]",
        " [failure",
        " [denied",
        " [skipped",
        " [not run",
        " [outcome unknown",
    ] {
        if outcome != Outcome::Unknown {
            break;
        }
        if let Some(i) = s.rfind(marker).filter(|_| s.ends_with(']')) {
            outcome = if marker == " [success]" {
                Outcome::Success
            } else {
                let inner = &s[i + 2..s.len() - 1];
                Outcome::NotDone(inner.to_owned())
            };
            s = &s[..i];
            break;
        }
    }
    let (function, rest) = s.split_once(' ').unwrap_or((s, ""));
    let mut target = None;
    let mut arguments = None;
    if let Some(r) = rest.strip_prefix("on [") {
        target = r.split_once(']').map(|(_, name)| name.to_owned());
    } else if rest.starts_with('{') {
        arguments = serde_json::from_str(rest).ok();
    }
    PastAction {
        function: function.to_owned(),
        target,
        arguments,
        outcome,
        read,
    }
}

/// Expands `x (repeated 3 times)` and strips the HostAgent's `step N: ` prefix.
fn action_lines(section: &str) -> Vec<PastAction> {
    let mut out = Vec::new();
    for line in section.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut line = line;
        if let Some(rest) = line.strip_prefix("step ")
            && let Some((n, after)) = rest.split_once(": ")
            && n.chars().all(|c| c.is_ascii_digit())
        {
            line = after;
        }
        let mut times = 1;
        if let Some(i) = line.rfind(" (repeated ")
            && let Some(n) = line[i + 11..]
                .strip_suffix(" times)")
                .and_then(|n| n.parse::<usize>().ok())
        {
            times = n.min(1000);
            line = &line[..i];
        }
        for _ in 0..times {
            out.extend(split_actions(line).into_iter().map(parse_action));
        }
    }
    out
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

impl Prompt {
    /// A third-party agent's prompt: `User request: …`, `Current subtask: …`, `Message from the
    /// HostAgent: …`, `Previous subtasks:` and `Your previous actions for this subtask:` lines; its
    /// functions in the system prompt.
    fn third_party(system: &str, user: &str) -> Option<Self> {
        let request = between(user, "User request: ", "\nCurrent subtask: ")?;
        let subtask = between(user, "Current subtask: ", "\nMessage from the HostAgent: ")?;
        let message = between(
            user,
            "Message from the HostAgent: ",
            "\nPrevious subtasks:\n",
        )?;
        const ACTIONS: &str = "Your previous actions for this subtask:\n";
        let previous = user
            .find(ACTIONS)
            .map_or("", |i| user[i + ACTIONS.len()..].trim());
        Some(Self {
            agent: AgentKind::ThirdParty,
            request: request.trim().to_owned(),
            subtask: subtask.trim().to_owned(),
            host_message: none_is_empty(message.trim()).to_owned(),
            controls: Vec::new(),
            windows: Vec::new(),
            actions: action_lines(none_is_empty(previous)),
            subtasks: Vec::new(),
            knowledge: String::new(),
            functions: function_names(system),
        })
    }

    /// A prompt of `agent` for `request` with nothing else in it (tests build on it).
    #[cfg(test)]
    pub fn blank(agent: AgentKind, request: &str) -> Self {
        Self {
            agent,
            request: request.into(),
            subtask: String::new(),
            host_message: String::new(),
            controls: Vec::new(),
            windows: Vec::new(),
            actions: Vec::new(),
            subtasks: Vec::new(),
            knowledge: String::new(),
            functions: Vec::new(),
        }
    }

    /// Reads a chat-completions request body; None when it is not an agent's prompt.
    pub fn parse(body: &Value) -> Option<Self> {
        let system = text_parts(body, "system").join("\n");
        let agent = if system.contains("You are the HostAgent") {
            AgentKind::Host
        } else if system.contains("You are an AppAgent") {
            AgentKind::App
        } else if system.contains("a third-party agent of a desktop automation system") {
            return Self::third_party(&system, &text_parts(body, "user").join("\n"));
        } else {
            return None;
        };
        let user = text_parts(body, "user").join("\n");
        let request = section(&user, "Request")?.to_owned();
        let mut p = Self {
            agent,
            request,
            subtask: String::new(),
            host_message: String::new(),
            controls: Vec::new(),
            windows: Vec::new(),
            actions: Vec::new(),
            subtasks: Vec::new(),
            knowledge: section(&user, "Retrieved knowledge")
                .unwrap_or("")
                .to_owned(),
            functions: function_names(&format!("{system}\n{user}")),
        };
        p.subtasks = section(&user, "Previous subtasks")
            .unwrap_or("")
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .map(|v| PastSubtask {
                subtask: v["subtask"].as_str().unwrap_or("").to_owned(),
                status: v["status"].as_str().unwrap_or("").to_owned(),
                result: v["result"].as_str().unwrap_or("").to_owned(),
            })
            .collect();
        match agent {
            AgentKind::Host => {
                p.windows = section(&user, "Available targets")
                    .unwrap_or("")
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
                    .map(|v| Window {
                        label: v["label"].as_str().unwrap_or("").to_owned(),
                        name: v["name"].as_str().unwrap_or("").to_owned(),
                        kind: v["kind"].as_str().unwrap_or("").to_owned(),
                    })
                    .collect();
                p.actions = action_lines(none_is_empty(
                    section(&user, "Your previous actions").unwrap_or(""),
                ));
            }
            AgentKind::App => {
                p.subtask = section(&user, "Current subtask").unwrap_or("").to_owned();
                p.host_message =
                    none_is_empty(section(&user, "Message from the HostAgent").unwrap_or(""))
                        .to_owned();
                p.controls = section(&user, "Available controls")
                    .unwrap_or("")
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Vec<Value>>(l.trim()).ok())
                    .filter_map(|v| match v.as_slice() {
                        [
                            Value::String(label),
                            Value::String(name),
                            Value::String(kind),
                        ] => Some(Control {
                            label: label.clone(),
                            name: name.clone(),
                            kind: kind.clone(),
                        }),
                        _ => None,
                    })
                    .collect();
                p.actions = action_lines(none_is_empty(
                    section(&user, "Previous actions").unwrap_or(""),
                ));
            }
            // Read by `third_party` before this match.
            AgentKind::ThirdParty => {}
        }
        Some(p)
    }
}

/// The request text of any chat body (for tallying a real model's prompts by task).
pub fn request_of(body: &Value) -> Option<String> {
    section(&text_parts(body, "user").join("\n"), "Request").map(str::to_owned)
}

/// Text bytes, image bytes and pixels of a chat body.
pub fn size_of(body: &Value) -> PromptSize {
    let mut size = PromptSize::default();
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::String(s) => size.text_bytes += s.len() as u64,
            Value::Array(parts) => {
                for p in parts {
                    if let Some(t) = p["text"].as_str() {
                        size.text_bytes += t.len() as u64;
                    }
                    if let Some(url) = p["image_url"]["url"].as_str() {
                        let data = url.split_once(";base64,").map_or("", |(_, d)| d);
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(data)
                            .unwrap_or_default();
                        size.images += 1;
                        size.image_bytes += bytes.len() as u64;
                        if let Ok((w, h)) = image::ImageReader::new(std::io::Cursor::new(&bytes))
                            .with_guessed_format()
                            .map_err(image::ImageError::IoError)
                            .and_then(image::ImageReader::into_dimensions)
                        {
                            size.image_pixels += u64::from(w) * u64::from(h);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    size
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(system: &str, user: &str) -> Value {
        json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": "Current screenshot:"},
                                         {"type": "text", "text": user}]}
        ]})
    }

    #[test]
    fn an_app_prompt_is_read_by_section() {
        let user = "[Request]\nsave it\n\n[Application]\nmousepad\n\n[Current subtask]\nsave the file\n\n\
            [Message from the HostAgent]\nnone\n\n[Available controls]\n[\"1\", \"File\", \"Menu\"]\n\
            [\"2\", \"Name [x]\", \"Edit\"]\n\n[Previous actions]\nclick_input on [1]File [success] (repeated 2 times)\n\
            texts on [2]Name [x] [success] → \"a \\\"b\\\"\"\nkeyboard_input {\"keys\":\"^s\"} [failure: no; focus]\n\n\
            [Previous plan]\nnone\n\n[Previous subtasks]\n{\"subtask\":\"a\",\"status\":\"FINISH\",\"result\":\"42\"}\n";
        let p = Prompt::parse(&body("You are an AppAgent operating", user)).unwrap();
        assert_eq!(p.agent, AgentKind::App);
        assert_eq!(p.request, "save it");
        assert_eq!(p.subtask, "save the file");
        assert_eq!(p.host_message, "");
        assert_eq!(p.controls.len(), 2);
        assert_eq!(p.controls[1].name, "Name [x]");
        assert_eq!(p.actions.len(), 4);
        assert_eq!(p.actions[1].target.as_deref(), Some("File"));
        assert_eq!(p.actions[2].read.as_deref(), Some("a \"b\""));
        assert_eq!(p.actions[2].target.as_deref(), Some("Name [x]"));
        assert_eq!(
            p.actions[3].outcome,
            Outcome::NotDone("failure: no; focus".into())
        );
        assert_eq!(p.actions[3].arguments, Some(json!({"keys": "^s"})));
        assert_eq!(p.subtasks[0].result, "42");
    }

    #[test]
    fn a_host_prompt_lists_windows_and_its_own_actions() {
        let user = "[Request]\nr\n\n[Available targets]\n{\"label\":\"1\",\"name\":\"Untitled - Mousepad\",\"kind\":\"APPLICATION\",\"type\":\"Window\"}\n\n\
            [Launchable applications]\nmousepad\n\n[Previous subtasks]\nnone\n\n[Previous plan]\nnone\n\n\
            [Your previous actions]\nstep 1: launch_application {\"name\":\"mousepad\"} [denied: not allowed]\n";
        let p = Prompt::parse(&body("You are the HostAgent of a desktop", user)).unwrap();
        assert_eq!(p.agent, AgentKind::Host);
        assert_eq!(p.windows[0].name, "Untitled - Mousepad");
        assert_eq!(p.actions[0].function, "launch_application");
        assert_eq!(
            p.actions[0].outcome,
            Outcome::NotDone("denied: not allowed".into())
        );
        assert!(p.subtasks.is_empty());
    }

    #[test]
    fn api_actions_split_and_parse_with_their_answers() {
        let a = action_lines(
            "mcp__calc__set_cells {\"range\":\"A1:B1\",\"values\":[[1,2]]} [success] → \
             {\"text\":\"set 2 cells; ok\"}; mcp__calc__save {} [failure: MCP tool calc/save failed: gone]",
        );
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a[0].function, "mcp__calc__set_cells");
        assert_eq!(a[0].outcome, Outcome::Success);
        assert_eq!(a[0].arguments.as_ref().unwrap()["range"], "A1:B1");
        assert_eq!(a[0].read, None);
        assert_eq!(a[1].function, "mcp__calc__save");
        assert_eq!(
            a[1].outcome,
            Outcome::NotDone("failure: MCP tool calc/save failed: gone".into())
        );
        let system = "Functions:\n- click_input(id: string): Click.\n- mcp__calc__save(): [API calc] Saves.\n";
        let p = Prompt::parse(&body(
            &format!("You are an AppAgent operating\n{system}"),
            "[Request]\nr\n",
        ))
        .unwrap();
        assert_eq!(p.functions, ["click_input", "mcp__calc__save"]);
    }

    #[test]
    fn a_batch_splits_into_its_actions() {
        let a = action_lines(
            "click_input on [1]A; b [success]; keyboard_input on [2]B [skipped: earlier]",
        );
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a[0].target.as_deref(), Some("A; b"));
        assert_eq!(a[0].outcome, Outcome::Success);
    }

    #[test]
    fn a_success_with_its_effect_is_a_success() {
        let a = action_lines(
            "set_edit_text on [3]Name [success; effect: confirmed — text set in 'Name': 'Name' text \
             '' → 'a; b']; keyboard_input on [3]Name [success; effect: none_observed — keys \
             '{ENTER}' in 'Name': nothing changed]",
        );
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a[0].target.as_deref(), Some("Name"));
        assert_eq!(a[0].outcome, Outcome::Success);
        assert_eq!(a[1].function, "keyboard_input");
        assert_eq!(a[1].outcome, Outcome::Success);
    }

    #[test]
    fn not_an_agent_prompt() {
        assert!(Prompt::parse(&json!({"messages": []})).is_none());
        assert!(Prompt::parse(&json!("x")).is_none());
    }
}
