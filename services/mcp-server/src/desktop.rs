//! The desktop tools, for clients that bring their own model: each call names an executor of the
//! operator's registry and becomes one batch of executor commands (a window selection first where the
//! tool takes a window). The backend ([`crate::TaskApi::desktop`]) resolves the name, applies the consent
//! policy and runs the batch; the executor applies its own launch allow-list.

use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::api::ToolError;
use crate::tools::{executor_name, parse, tool};

/// `list_windows`.
pub const LIST_WINDOWS: &str = "list_windows";
/// `list_controls`.
pub const LIST_CONTROLS: &str = "list_controls";
/// `screenshot`.
pub const SCREENSHOT: &str = "screenshot";
/// `click`.
pub const CLICK: &str = "click";
/// `type_text`.
pub const TYPE_TEXT: &str = "type_text";
/// `press_keys`.
pub const PRESS_KEYS: &str = "press_keys";
/// `scroll`.
pub const SCROLL: &str = "scroll";
/// `launch_app`.
pub const LAUNCH_APP: &str = "launch_app";

/// `end_direct_session`: ends the caller's direct session on an executor (not an executor call).
pub const END_DIRECT_SESSION: &str = "end_direct_session";

/// Every desktop tool's name.
pub const NAMES: [&str; 8] = [
    LIST_WINDOWS,
    LIST_CONTROLS,
    SCREENSHOT,
    CLICK,
    TYPE_TEXT,
    PRESS_KEYS,
    SCROLL,
    LAUNCH_APP,
];

/// Longest text `type_text` and `press_keys` accept, in characters.
pub const MAX_TEXT_CHARS: usize = 10_000;

/// One executor command of a desktop call.
#[derive(Debug, Clone, PartialEq)]
pub struct DesktopCommand {
    /// The executor tool, e.g. `click_input`.
    pub tool: &'static str,
    /// Its parameters.
    pub parameters: Map<String, Value>,
    /// Whether it changes the desktop (else it observes).
    pub action: bool,
}

/// A desktop tool call, checked: the executor's name and the commands to run in order.
#[derive(Debug, Clone, PartialEq)]
pub struct DesktopCall {
    /// The MCP tool called (`click`, ...).
    pub tool: &'static str,
    /// A registered executor name (never an address).
    pub executor: String,
    /// The commands, in order (a window selection first where the tool takes a window).
    pub commands: Vec<DesktopCommand>,
    /// `screenshot` with set-of-marks: the commands list the window's controls, then capture it; the
    /// backend draws each control's id on the capture.
    pub marks: bool,
    /// The arguments as the caller gave them (a backend that forwards the call, `ufo mcp`, sends these
    /// and the agent checks them again).
    pub arguments: Map<String, Value>,
}

/// What a desktop call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct DesktopOutcome {
    /// The last command's structured result, plus where the call was recorded.
    pub result: Value,
    /// Screenshots the commands produced (with set-of-marks: the marked one).
    pub images: Vec<crate::api::Image>,
    /// Where the call was recorded: its direct session and step, when the backend records calls.
    pub recorded: Option<(String, u64)>,
    /// The time the executor reported spending on the call's commands, in microseconds, when it ran
    /// them (what the call costs beyond that is ufo's and the protocol's).
    pub executor_us: Option<u64>,
}

/// `end_direct_session`'s arguments, checked: the executor's name.
pub fn end_call(arguments: Option<&rmcp::model::JsonObject>) -> Result<String, ToolError> {
    let a: Bare = parse(END_DIRECT_SESSION, arguments)?;
    name(END_DIRECT_SESSION, a.executor)
}

const EXECUTOR: &str =
    "The name of an executor (a desktop) the operator registered. Never an address.";
const WINDOW: &str = "A window id from list_windows; it becomes the selected window.";
const CONTROL: &str = "A control id from the latest list_controls of the selected window.";

fn object(properties: Value, required: &[&str]) -> Value {
    let mut required: Vec<&str> = required.to_vec();
    required.insert(0, "executor");
    let mut props = json!({"executor": {"type": "string", "description": EXECUTOR}});
    if let (Some(p), Value::Object(extra)) = (props.as_object_mut(), properties) {
        p.extend(extra);
    }
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// The desktop tools.
pub fn catalogue() -> Vec<Tool> {
    vec![
        tool(
            LIST_WINDOWS,
            "The application windows on an executor's desktop, with ids for list_controls and screenshot.",
            object(json!({}), &[]),
            true,
        ),
        tool(
            LIST_CONTROLS,
            "Select a window and list its controls (id, name, type, rectangle, value) for click, type_text and scroll.",
            object(
                json!({"window": {"type": "string", "description": WINDOW}}),
                &["window"],
            ),
            true,
        ),
        tool(
            SCREENSHOT,
            "A screenshot of a window (selecting it) or, without window, of the whole desktop. With marks (a window only), each control's box is drawn with its id (the id click, type_text and scroll take), and the result lists those controls.",
            object(
                json!({"window": {"type": "string", "description": WINDOW},
                       "marks": {"type": "boolean", "description": "Set-of-marks: draw every control's id on the window's screenshot (default false)."}}),
                &[],
            ),
            true,
        ),
        tool(
            CLICK,
            "Click a control of the selected window.",
            object(
                json!({"control": {"type": "string", "description": CONTROL},
                       "button": {"type": "string", "enum": ["left", "right", "middle"]},
                       "double": {"type": "boolean"}}),
                &["control"],
            ),
            false,
        ),
        tool(
            TYPE_TEXT,
            "Set the text of an edit control of the selected window.",
            object(
                json!({"control": {"type": "string", "description": CONTROL},
                       "text": {"type": "string", "maxLength": MAX_TEXT_CHARS},
                       "clear": {"type": "boolean", "description": "Replace the current text (default true)."}}),
                &["control", "text"],
            ),
            false,
        ),
        tool(
            PRESS_KEYS,
            "Press keys (pywinauto syntax, e.g. \"^s\", \"{ENTER}\", \"hello\") in the selected window, or in a control of it.",
            object(
                json!({"keys": {"type": "string", "maxLength": MAX_TEXT_CHARS},
                       "control": {"type": "string", "description": CONTROL}}),
                &["keys"],
            ),
            false,
        ),
        tool(
            SCROLL,
            "Scroll a control of the selected window by wheel notches (negative: down).",
            object(
                json!({"control": {"type": "string", "description": CONTROL},
                       "distance": {"type": "integer", "minimum": -100, "maximum": 100}}),
                &["control", "distance"],
            ),
            false,
        ),
        tool(
            LAUNCH_APP,
            "Start a program from the executor's launch allow-list (no shell).",
            object(
                json!({"name": {"type": "string", "description": "A program name of the executor's allow-list."},
                       "args": {"type": "array", "items": {"type": "string"}, "description": "Absolute paths inside the executor's launch directories."}}),
                &["name"],
            ),
            false,
        ),
        tool(
            END_DIRECT_SESSION,
            "End your direct session on an executor: the session that records every desktop call you make there as a step (it also ends after the operator's idle time). The next call starts a new one.",
            object(json!({}), &[]),
            false,
        ),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Bare {
    executor: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaybeWindow {
    executor: String,
    window: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Shot {
    executor: String,
    window: Option<String>,
    marks: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Click {
    executor: String,
    control: String,
    button: Option<String>,
    double: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TypeText {
    executor: String,
    control: String,
    text: String,
    clear: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    executor: String,
    keys: String,
    control: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scroll {
    executor: String,
    control: String,
    distance: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Launch {
    executor: String,
    name: String,
    #[serde(default)]
    args: Vec<String>,
}

fn command(tool: &'static str, parameters: Value, action: bool) -> DesktopCommand {
    DesktopCommand {
        tool,
        parameters: match parameters {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        action,
    }
}

fn select(window: &str) -> DesktopCommand {
    command("select_application_window", json!({"id": window}), false)
}

/// Refuses NUL, empty ids and over-long text, naming the tool and the field.
fn text(tool: &str, field: &str, value: &str, allow_empty: bool) -> Result<(), ToolError> {
    if value.contains('\0') {
        return Err(ToolError::invalid(format!(
            "{tool}: {field} must not contain NUL"
        )));
    }
    if !allow_empty && value.trim().is_empty() {
        return Err(ToolError::invalid(format!(
            "{tool}: {field} must not be empty"
        )));
    }
    let chars = value.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(ToolError::invalid(format!(
            "{tool}: {field} has {chars} characters; at most {MAX_TEXT_CHARS} are accepted"
        )));
    }
    Ok(())
}

fn name(tool: &str, executor: String) -> Result<String, ToolError> {
    text(tool, "executor", &executor, false)?;
    executor_name(Some(executor))?
        .ok_or_else(|| ToolError::invalid(format!("{tool}: executor must not be empty")))
}

/// Parses and checks a desktop tool's arguments; `None` when `tool` is not a desktop tool.
pub fn call(
    tool: &str,
    arguments: Option<&rmcp::model::JsonObject>,
) -> Option<Result<DesktopCall, ToolError>> {
    let tool: &'static str = NAMES.into_iter().find(|n| *n == tool)?;
    Some(build(tool, arguments))
}

fn build(
    tool: &'static str,
    arguments: Option<&rmcp::model::JsonObject>,
) -> Result<DesktopCall, ToolError> {
    let mut marks = false;
    let (executor, commands) = match tool {
        LIST_WINDOWS => {
            let a: Bare = parse(tool, arguments)?;
            (
                a.executor,
                vec![command("get_desktop_app_target_info", json!({}), false)],
            )
        }
        LIST_CONTROLS => {
            let a: MaybeWindow = parse(tool, arguments)?;
            let mut commands = Vec::new();
            if let Some(w) = a.window {
                text(tool, "window", &w, false)?;
                commands.push(select(&w));
            }
            commands.push(command(
                "get_app_window_controls_target_info",
                json!({}),
                false,
            ));
            (a.executor, commands)
        }
        SCREENSHOT => {
            let a: Shot = parse(tool, arguments)?;
            marks = a.marks.unwrap_or(false);
            let commands = match a.window {
                Some(w) if marks => {
                    text(tool, "window", &w, false)?;
                    vec![
                        select(&w),
                        command("get_app_window_controls_target_info", json!({}), false),
                        command("capture_window_screenshot", json!({}), false),
                    ]
                }
                Some(w) => {
                    text(tool, "window", &w, false)?;
                    vec![
                        select(&w),
                        command("capture_window_screenshot", json!({}), false),
                    ]
                }
                None if marks => {
                    return Err(ToolError::invalid(format!(
                        "{tool}: marks needs a window (the controls marked are that window's)"
                    )));
                }
                None => vec![command("capture_desktop_screenshot", json!({}), false)],
            };
            (a.executor, commands)
        }
        CLICK => {
            let a: Click = parse(tool, arguments)?;
            text(tool, "control", &a.control, false)?;
            let button = a.button.unwrap_or_else(|| "left".to_owned());
            if !["left", "right", "middle"].contains(&button.as_str()) {
                return Err(ToolError::invalid(format!(
                    "{tool}: button must be left, right or middle"
                )));
            }
            (
                a.executor,
                vec![command(
                    "click_input",
                    json!({"id": a.control, "button": button, "double": a.double.unwrap_or(false)}),
                    true,
                )],
            )
        }
        TYPE_TEXT => {
            let a: TypeText = parse(tool, arguments)?;
            text(tool, "control", &a.control, false)?;
            text(tool, "text", &a.text, true)?;
            (
                a.executor,
                vec![command(
                    "set_edit_text",
                    json!({"id": a.control, "text": a.text, "clear_current_text": a.clear.unwrap_or(true)}),
                    true,
                )],
            )
        }
        PRESS_KEYS => {
            let a: Keys = parse(tool, arguments)?;
            text(tool, "keys", &a.keys, false)?;
            let mut p = json!({"keys": a.keys});
            if let Some(c) = a.control {
                text(tool, "control", &c, false)?;
                p["id"] = json!(c);
            }
            (a.executor, vec![command("keyboard_input", p, true)])
        }
        SCROLL => {
            let a: Scroll = parse(tool, arguments)?;
            text(tool, "control", &a.control, false)?;
            if !(-100..=100).contains(&a.distance) {
                return Err(ToolError::invalid(format!(
                    "{tool}: distance must be between -100 and 100"
                )));
            }
            (
                a.executor,
                vec![command(
                    "wheel_mouse_input",
                    json!({"id": a.control, "wheel_dist": a.distance}),
                    true,
                )],
            )
        }
        LAUNCH_APP => {
            let a: Launch = parse(tool, arguments)?;
            text(tool, "name", &a.name, false)?;
            for arg in &a.args {
                text(tool, "args", arg, false)?;
            }
            (
                a.executor,
                vec![command(
                    "launch_application",
                    json!({"name": a.name, "args": a.args}),
                    true,
                )],
            )
        }
        _ => {
            return Err(ToolError::new(
                "not_found",
                format!("no tool named {tool:?}"),
            ));
        }
    };
    Ok(DesktopCall {
        tool,
        executor: name(tool, executor)?,
        commands,
        marks,
        arguments: arguments.cloned().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> rmcp::model::JsonObject {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn calls_become_executor_commands() {
        let c = call(
            LIST_CONTROLS,
            Some(&args(json!({"executor": "local", "window": "1"}))),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.executor, "local");
        assert_eq!(c.commands[0].tool, "select_application_window");
        assert_eq!(c.commands[1].tool, "get_app_window_controls_target_info");
        assert!(call("run_task", None).is_none());
    }

    #[test]
    fn addresses_nul_and_huge_text_are_refused() {
        for bad in [
            json!({"executor": "http://10.0.0.1:50051"}),
            json!({"executor": "10.0.0.1:50051"}),
            json!({"executor": "lo\u{0}cal"}),
            json!({"executor": ""}),
            json!({"executor": "local", "surprise": 1}),
        ] {
            let e = call(LIST_WINDOWS, Some(&args(bad.clone())))
                .unwrap()
                .unwrap_err();
            assert_eq!(e.code, "invalid_argument", "{bad}: {e}");
        }
        let huge = "x".repeat(MAX_TEXT_CHARS + 1);
        let e = call(
            TYPE_TEXT,
            Some(&args(
                json!({"executor": "l", "control": "1", "text": huge}),
            )),
        )
        .unwrap()
        .unwrap_err();
        assert!(e.message.contains("at most"), "{e}");
    }
}
