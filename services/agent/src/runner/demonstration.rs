//! A person's recording becomes a demonstration (issue 33, `ufo record`): the executor's recorded steps
//! (`record_input`: clicks, typed texts, keys, scrolls, each with its control's selector fields) are
//! turned into the functions an agent would call to do the same — `click_input`, `set_edit_text`,
//! `keyboard_input`, `wheel_mouse_input` on the control's selector — and summarised in the same
//! deterministic form as an experience ([`super::experience::summarise`]): the request (what the person
//! said they show), one subtask in the application, a HostAgent `select_application_window` line each
//! time the person moves to another window, and one AppAgent line per step. Retrieved like an
//! experience, a demonstration reads like a finished task of its owner.
//!
//! Its steps are also stored as a session (one step per action, `crate::api::recordings`), from which
//! [`from_rows`] reads them back and [`plan`] makes them the plan a reuse follows: a HostAgent
//! `select_application_window` step each time the person moved to another window, then one AppAgent
//! step per action on its control's selector, the last of each window FINISH, and a HostAgent FINISH.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::replay::plan::{RecordedAction, RecordedStep, StepAgent};
use crate::replay::selector::Selector;

/// Most characters of one typed text quoted in a summary.
const TEXT_CHARS: usize = 200;

/// One step of a demonstration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DemoStep {
    /// Milliseconds after the recording started.
    pub at_ms: u64,
    /// The function that does the same: `click_input`, `set_edit_text`, `keyboard_input` or
    /// `wheel_mouse_input`.
    pub action: String,
    /// Its arguments besides the control (`text`, `keys`, `button`, `double`, `wheel_dist`).
    #[schema(value_type = Object)]
    pub arguments: Map<String, Value>,
    /// The control, as a replay's selector (`type`, `name`, `ancestors`, `automation_id`,
    /// `sibling_index`); absent when nothing listed was there.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(value_type = Option<Object>)]
    pub selector: Option<Selector>,
    /// The text typed (`set_edit_text`) or the keys pressed (`keyboard_input`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub text: Option<String>,
    /// The window's title.
    pub window: String,
    /// The window's program.
    pub process: String,
    /// Where a click without a control landed, `[x, y]` in screen pixels.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub point: Option<[i64; 2]>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace('\0', "")
}

/// The selector of a recorded control (the listing's fields).
fn selector(control: &Value) -> Selector {
    Selector {
        control_type: text(control, "type"),
        name: text(control, "name"),
        ancestors: control
            .get("ancestors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|a| (text(a, "name"), text(a, "type")))
            .collect(),
        automation_id: text(control, "automation_id"),
        sibling_index: control
            .get("sibling_index")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        process: String::new(),
    }
}

/// The steps of recorded events (`record_input`'s `events`), in order; windows that opened are not
/// steps (the next step in them says where it happened).
pub fn steps(events: &[Value]) -> Vec<DemoStep> {
    indexed(events).into_iter().map(|(_, s)| s).collect()
}

/// [`steps`], each with the index of the event it comes from.
pub fn indexed(events: &[Value]) -> Vec<(usize, DemoStep)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| step(e).map(|s| (i, s)))
        .collect()
}

/// The demonstration's steps as its session recorded them (one action each, the window in
/// `extra.demonstration`).
pub fn from_rows(rows: &[ufo_proto::v1::Step]) -> Vec<DemoStep> {
    rows.iter()
        .filter_map(|row| {
            let extra = ufo_proto::json::from_optional_struct(row.extra.clone());
            let about = extra.get("demonstration")?;
            let action = row.actions.first()?;
            let arguments = match ufo_proto::json::from_optional_struct(action.arguments.clone()) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            let said = ["text", "keys"]
                .iter()
                .find_map(|k| arguments.get(*k).and_then(Value::as_str))
                .map(str::to_owned);
            Some(DemoStep {
                at_ms: about["at_ms"].as_u64().unwrap_or(0),
                action: action.function.clone(),
                selector: action.selector.as_ref().map(Selector::from_proto),
                text: said,
                window: text(about, "window"),
                process: text(about, "process"),
                point: about
                    .get("point")
                    .and_then(Value::as_array)
                    .and_then(|p| Some([p.first()?.as_i64()?, p.get(1)?.as_i64()?])),
                arguments,
            })
        })
        .collect()
}

/// A step of the plan: `agent`'s, with `status` and `subtask`, no action yet.
fn planned(n: u64, agent: StepAgent, status: &str, subtask: &str) -> RecordedStep {
    let mut step = RecordedStep::blank(n, agent, Vec::new());
    step.status = status.to_owned();
    step.subtask = subtask.to_owned();
    step
}

/// The plan a reuse follows for a demonstration of `description` (docs/knowledge.md "Reuse"): per
/// window the person worked in, a HostAgent step selecting it (by title and program) and assigning
/// `description`, then an AppAgent step per action (the control found again by its selector; a
/// click where nothing was listed has none, so the model decides that step), the window's last
/// FINISH; at the end a HostAgent FINISH whose result is `description`.
pub fn plan(description: &str, steps: &[DemoStep]) -> Vec<RecordedStep> {
    let mut out: Vec<RecordedStep> = Vec::new();
    let mut window: Option<(&str, &str)> = None;
    let finish_app = |out: &mut Vec<RecordedStep>| {
        if let Some(last) = out.last_mut().filter(|s| s.agent == StepAgent::App) {
            last.status = "FINISH".into();
        }
    };
    let next = |out: &Vec<RecordedStep>| out.len() as u64 + 1;
    for s in steps {
        let here = (s.window.as_str(), s.process.as_str());
        if window != Some(here) && !s.window.is_empty() {
            finish_app(&mut out);
            window = Some(here);
            let mut host = planned(next(&out), StepAgent::Host, "ASSIGN", description);
            host.function = "select_application_window".into();
            host.actions.push(RecordedAction {
                function: "select_application_window".into(),
                arguments: Map::from_iter([("id".to_owned(), json!("0"))]),
                status: "ASSIGN".into(),
                selector: Some(Selector {
                    control_type: "Window".into(),
                    name: s.window.clone(),
                    process: s.process.clone(),
                    ..Selector::default()
                }),
                failed: false,
            });
            out.push(host);
        }
        let mut arguments = s.arguments.clone();
        // The control is found again by its selector (the id is replaced); keys without a control
        // go to the focused one.
        if s.selector.is_some() || s.action != "keyboard_input" {
            arguments.insert("id".into(), json!("0"));
        }
        let mut app = planned(next(&out), StepAgent::App, "CONTINUE", description);
        app.actions.push(RecordedAction {
            function: s.action.clone(),
            arguments,
            status: "CONTINUE".into(),
            selector: s.selector.clone(),
            failed: false,
        });
        out.push(app);
    }
    finish_app(&mut out);
    let mut done = planned(next(&out), StepAgent::Host, "FINISH", description);
    done.result = description.to_owned();
    out.push(done);
    out
}

/// The step of one recorded event, if it is one.
fn step(e: &Value) -> Option<DemoStep> {
    let mut arguments = Map::new();
    let (action, said) = match e.get("kind").and_then(Value::as_str)? {
        "click" => {
            let button = text(e, "button");
            if !button.is_empty() && button != "left" {
                arguments.insert("button".into(), json!(button));
            }
            if e.get("double") == Some(&Value::Bool(true)) {
                arguments.insert("double".into(), json!(true));
            }
            ("click_input", None)
        }
        "text" => {
            let t = text(e, "text");
            arguments.insert("text".into(), json!(t));
            ("set_edit_text", Some(t))
        }
        "keys" => {
            let k = text(e, "keys");
            arguments.insert("keys".into(), json!(k));
            ("keyboard_input", Some(k))
        }
        "scroll" => {
            let n = e.get("notches").and_then(Value::as_i64).unwrap_or(0);
            arguments.insert("wheel_dist".into(), json!(n));
            ("wheel_mouse_input", None)
        }
        _ => return None,
    };
    let window = e.get("window").cloned().unwrap_or(Value::Null);
    let selector = e.get("control").filter(|c| c.is_object()).map(selector);
    let point = e
        .get("point")
        .and_then(Value::as_array)
        .filter(|_| selector.is_none())
        .and_then(|p| Some([p.first()?.as_i64()?, p.get(1)?.as_i64()?]));
    Some(DemoStep {
        at_ms: e.get("at_ms").and_then(Value::as_u64).unwrap_or(0),
        action: action.to_owned(),
        arguments,
        selector,
        text: said,
        window: text(&window, "title"),
        process: text(&window, "process"),
        point,
    })
}

fn quoted(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = flat.chars().take(TEXT_CHARS).collect();
    if cut.chars().count() < flat.chars().count() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// The deterministic summary of a demonstration, in an experience's form, at most `max_chars`
/// characters (whole lines; the lines left out are counted).
pub fn summarise(description: &str, app: &str, steps: &[DemoStep], max_chars: usize) -> String {
    let mut lines = vec![
        format!("Request: {}", quoted(description)),
        "Outcome: finished — \"demonstrated by a person (ufo record)\"".to_owned(),
        "Subtasks:".to_owned(),
        format!("1. {} (in {app})", quoted(description)),
        "Steps:".to_owned(),
    ];
    let mut n = 0;
    let mut window: Option<(&str, &str)> = None;
    for s in steps {
        if window != Some((s.window.as_str(), s.process.as_str())) && !s.window.is_empty() {
            window = Some((&s.window, &s.process));
            n += 1;
            let w = Selector {
                control_type: "Window".into(),
                name: s.window.clone(),
                process: s.process.clone(),
                ..Selector::default()
            };
            lines.push(format!(
                "{n}. HostAgent: select_application_window on {} → ok",
                w.describe()
            ));
        }
        n += 1;
        let agent = if s.process.is_empty() {
            app
        } else {
            &s.process
        };
        let mut line = format!("{n}. AppAgent/{agent}: {}", s.action);
        let mut keys: Vec<&String> = s.arguments.keys().collect();
        keys.sort();
        for key in keys {
            let v = &s.arguments[key];
            let shown = match v {
                Value::String(t) => quoted(t),
                other => other.to_string(),
            };
            let _ = write!(line, " {key}={shown}");
        }
        match (&s.selector, s.point) {
            (Some(sel), _) => {
                let _ = write!(line, " on {}", sel.describe());
            }
            (None, Some([x, y])) => {
                let _ = write!(line, " at ({x}, {y})");
            }
            (None, None) => {}
        }
        line.push_str(" → ok");
        lines.push(line);
    }
    if steps.is_empty() {
        lines.push("(no action)".to_owned());
    }
    super::experience::fit_lines(&lines, max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<Value> {
        let window = json!({"title": "New project", "process": "zenity", "handle": 7});
        let field = json!({"name": "Project name:", "type": "Edit", "rect": [1, 2, 3, 4],
            "automation_id": "", "ancestors": [{"name": "", "type": "Pane"},
            {"name": "New project", "type": "Dialog"}], "sibling_index": 0});
        let ok = json!({"name": "OK", "type": "Button", "rect": [5, 6, 7, 8],
            "automation_id": "", "ancestors": [{"name": "New project", "type": "Dialog"}],
            "sibling_index": 0});
        vec![
            json!({"at_ms": 10, "kind": "click", "button": "left", "point": [2, 3],
                   "window": window, "control": field, "resolved": "before"}),
            json!({"at_ms": 20, "kind": "text", "text": "Gemini 4", "window": window,
                   "control": field, "resolved": "focus"}),
            json!({"at_ms": 25, "kind": "window_opened", "window": window, "resolved": "none"}),
            json!({"at_ms": 30, "kind": "keys", "keys": "{ENTER}", "window": window,
                   "resolved": "none"}),
            json!({"at_ms": 40, "kind": "click", "button": "right", "double": true,
                   "point": [6, 7], "window": window, "control": ok, "resolved": "before"}),
            json!({"at_ms": 50, "kind": "click", "button": "left", "point": [600, 700],
                   "window": window, "resolved": "none"}),
        ]
    }

    #[test]
    fn recorded_events_become_functions_on_selectors() {
        let s = steps(&events());
        let actions: Vec<&str> = s.iter().map(|s| s.action.as_str()).collect();
        assert_eq!(
            actions,
            [
                "click_input",
                "set_edit_text",
                "keyboard_input",
                "click_input",
                "click_input"
            ]
        );
        let field = s[0].selector.as_ref().unwrap();
        assert_eq!(
            (field.control_type.as_str(), field.name.as_str()),
            ("Edit", "Project name:")
        );
        assert_eq!(field.ancestors[1], ("New project".into(), "Dialog".into()));
        assert_eq!(s[1].text.as_deref(), Some("Gemini 4"));
        assert_eq!(s[1].selector, s[0].selector);
        assert_eq!(s[2].arguments["keys"], "{ENTER}");
        assert!(s[2].selector.is_none());
        assert_eq!(s[3].arguments["button"], "right");
        assert_eq!(s[3].arguments["double"], true);
        assert_eq!(s[4].point, Some([600, 700]));
        assert_eq!(s[0].point, None, "a resolved click needs no point");
        assert_eq!(
            (s[0].window.as_str(), s[0].process.as_str()),
            ("New project", "zenity")
        );
    }

    #[test]
    fn a_demonstration_becomes_a_plan_of_host_and_app_steps() {
        let s = steps(&events());
        let plan = plan("Name the project Gemini 4", &s);
        let shape: Vec<(StepAgent, &str, Option<&str>)> = plan
            .iter()
            .map(|p| {
                (
                    p.agent,
                    p.status.as_str(),
                    p.actions.first().map(|a| a.function.as_str()),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (StepAgent::Host, "ASSIGN", Some("select_application_window")),
                (StepAgent::App, "CONTINUE", Some("click_input")),
                (StepAgent::App, "CONTINUE", Some("set_edit_text")),
                (StepAgent::App, "CONTINUE", Some("keyboard_input")),
                (StepAgent::App, "CONTINUE", Some("click_input")),
                (StepAgent::App, "FINISH", Some("click_input")),
                (StepAgent::Host, "FINISH", None),
            ]
        );
        let window = plan[0].actions[0].selector.as_ref().unwrap();
        assert_eq!(
            (window.name.as_str(), window.process.as_str()),
            ("New project", "zenity")
        );
        assert_eq!(plan[0].subtask, "Name the project Gemini 4");
        assert_eq!(plan[0].function, "select_application_window");
        // The control is found again by selector (the id replaced); keys without a control go to the
        // focused one; the typed text is an argument the fill may rewrite.
        assert_eq!(plan[2].actions[0].arguments["text"], "Gemini 4");
        assert!(plan[2].actions[0].arguments.contains_key("id"));
        assert!(!plan[3].actions[0].arguments.contains_key("id"));
        assert!(plan[5].actions[0].selector.is_none(), "a point-only click");
        assert_eq!(plan[6].result, "Name the project Gemini 4");
        let numbers: Vec<u64> = plan.iter().map(|p| p.step).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn the_summary_reads_like_an_experience_and_is_the_same_every_time() {
        let s = steps(&events());
        let body = summarise("Name the project Gemini 4", "zenity", &s, 10_000);
        assert_eq!(
            body,
            summarise("Name the project Gemini 4", "zenity", &s, 10_000)
        );
        assert!(
            body.starts_with(
                "Request: \"Name the project Gemini 4\"\nOutcome: finished — \"demonstrated by a person (ufo record)\"\nSubtasks:\n1. \"Name the project Gemini 4\" (in zenity)\nSteps:\n1. HostAgent: select_application_window on Window \"New project\" of process \"zenity\" → ok\n2. AppAgent/zenity: click_input on Edit \"Project name:\" in Pane \"\" › Dialog \"New project\" (sibling 0) → ok\n3. AppAgent/zenity: set_edit_text text=\"Gemini 4\" on Edit"
            ),
            "{body}"
        );
        assert!(
            body.contains("4. AppAgent/zenity: keyboard_input keys=\"{ENTER}\" → ok"),
            "{body}"
        );
        assert!(
            body.contains("6. AppAgent/zenity: click_input at (600, 700) → ok"),
            "{body}"
        );
        let short = summarise("Name the project Gemini 4", "zenity", &s, 200);
        assert!(short.contains("more lines left out"), "{short}");
        assert!(short.chars().count() <= 240, "{short}");
        assert!(summarise("x", "zenity", &[], 1000).ends_with("(no action)"));
    }
}
