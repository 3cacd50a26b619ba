//! The LLM's answers, parsed and validated (seed 000 `HostAgentResponse`, seed 001 `AppAgentResponse`).
//!
//! Keys are accepted in the reference's spelling (`"Current Sub-Task"`, `"Args"`, `"ControlLabel"`) and in
//! snake case. Validation rejects what cannot be acted on (missing observation/thought/status, a
//! non-object `arguments`); an *unknown status value* is kept as is ([`HostStatus::Other`],
//! [`AppStatus::Other`]), so the FSM turns it into ERROR.
//!
//! The statuses themselves ([`HostStatus`], [`AppStatus`]) and the FSM's states live in
//! [`crate::round::state`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::llm::ResponseFormat;
use crate::round::state::{AppStatus, HostStatus};

/// The HostAgent's reply schema, sent as `response_format: json_schema` where the endpoint supports it
/// (otherwise the request degrades to `json_object`).
pub fn host_response_format() -> ResponseFormat {
    let s = |d: &str| json!({"type": "string", "description": d});
    ResponseFormat::JsonSchema {
        name: "host_agent_response".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "observation": s("what the desktop shows"),
                "thought": s("reasoning"),
                "current_subtask": s("the subtask to do now"),
                "message": s("advice for the AppAgent"),
                "control_label": s("label of the selected target"),
                "control_text": s("name of the selected target"),
                "plan": {"type": "array", "items": {"type": "string"}},
                "status": {"type": "string", "enum": ["ASSIGN", "CONTINUE", "PENDING", "CONFIRM", "FINISH", "FAIL"]},
                "comment": s("note for the user"),
                "questions": {"type": "array", "items": {"type": "string"}},
                "function": s("tool to run, or empty"),
                "arguments": {"type": "object"},
                "result": s("final answer or findings")
            },
            "required": ["observation", "thought", "status"]
        }),
    }
}

/// The AppAgent's reply schema (see [`host_response_format`]).
pub fn app_response_format() -> ResponseFormat {
    let s = |d: &str| json!({"type": "string", "description": d});
    let status = json!({"type": "string", "enum": ["CONTINUE", "SCREENSHOT", "PENDING", "CONFIRM", "FINISH", "FAIL"]});
    let action = json!({
        "type": "object",
        "properties": {"function": s("tool name"), "arguments": {"type": "object"}, "status": status},
        "required": ["function", "arguments"]
    });
    ResponseFormat::JsonSchema {
        name: "app_agent_response".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "observation": s("what the screenshots show"),
                "thought": s("reasoning"),
                "plan": {"type": "array", "items": {"type": "string"}},
                "comment": s("note for the user"),
                "action": {"anyOf": [action, {"type": "array", "items": action}]},
                "status": status,
                "save_screenshot": {"type": "object", "properties": {"save": {"type": "boolean"}, "reason": {"type": "string"}}},
                "result": s("the subtask's result"),
                "questions": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["observation", "thought"]
        }),
    }
}

fn field<'a>(m: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['_', '-', ' '], "");
    names.iter().find_map(|n| {
        let want = norm(n);
        m.iter().find(|(k, _)| norm(k) == want).map(|(_, v)| v)
    })
}

fn text(m: &Map<String, Value>, names: &[&str]) -> String {
    match field(m, names) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn list(m: &Map<String, Value>, names: &[&str]) -> Vec<String> {
    match field(m, names) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect(),
        Some(Value::String(s)) if !s.trim().is_empty() => s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => vec![],
    }
}

/// Why a model reply cannot be acted on. The text is what the model is told when it is asked again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyProblem {
    /// A field that must be an object is something else.
    #[error("'{0}' must be a JSON object")]
    NotAnObject(&'static str),
    /// A required field is missing or empty.
    #[error("the required field '{0}' is missing or empty")]
    Missing(&'static str),
    /// An entry of the action list is not an object.
    #[error("each action must be a JSON object")]
    ActionNotAnObject,
    /// `action` is neither an object nor a list.
    #[error("'action' must be an object or a list of objects")]
    ActionShape,
    /// A window selection without its target label.
    #[error("select_application_window needs arguments.id (the target label)")]
    SelectionWithoutLabel,
    /// ASSIGN without the selection that says where.
    #[error("status ASSIGN needs function select_application_window with arguments.id")]
    AssignWithoutSelection,
    /// A function the agent does not offer.
    #[error("function {function} is not available; the functions are: {offered}")]
    UnknownFunction {
        /// What the reply named.
        function: String,
        /// The functions offered, comma-separated.
        offered: String,
    },
    /// An action names a control that is not in the control list.
    #[error("action {function} names control {label}, which is not in the control list")]
    UnknownControl {
        /// The action's function.
        function: String,
        /// The label.
        label: String,
    },
    /// A selection names a target that is not in the registry.
    #[error("there is no target with label {0}")]
    UnknownTarget(String),
}

fn object(
    m: &Map<String, Value>,
    names: &[&'static str],
) -> Result<Map<String, Value>, ReplyProblem> {
    match field(m, names) {
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(Value::Null) | None => Ok(Map::new()),
        Some(_) => Err(ReplyProblem::NotAnObject(names[0])),
    }
}

fn require(value: &str, name: &'static str) -> Result<(), ReplyProblem> {
    if value.trim().is_empty() {
        Err(ReplyProblem::Missing(name))
    } else {
        Ok(())
    }
}

/// The HostAgent's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostResponse {
    /// What it sees.
    pub observation: String,
    /// Its reasoning.
    pub thought: String,
    /// The subtask to do now.
    pub current_subtask: String,
    /// Message for the AppAgent.
    pub message: String,
    /// Selected target label.
    pub control_label: String,
    /// Selected target name.
    pub control_text: String,
    /// Remaining subtasks.
    pub plan: Vec<String>,
    /// Next state.
    pub status: HostStatus,
    /// For the user.
    pub comment: String,
    /// Clarification questions (PENDING).
    pub questions: Vec<String>,
    /// Function to run (`select_application_window`, `launch_application`, ...).
    pub function: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
    /// Final result (FINISH).
    pub result: String,
}

impl HostResponse {
    /// Parses and validates.
    pub fn parse(m: &Map<String, Value>) -> Result<Self, ReplyProblem> {
        let mut r = Self {
            observation: text(m, &["observation"]),
            thought: text(m, &["thought"]),
            current_subtask: text(m, &["current_subtask", "Current Sub-Task", "subtask"]),
            message: text(m, &["message"]),
            control_label: text(m, &["control_label", "ControlLabel"]),
            control_text: text(m, &["control_text", "ControlText"]),
            plan: list(m, &["plan"]),
            status: text(m, &["status"]).into(),
            comment: text(m, &["comment"]),
            questions: list(m, &["questions"]),
            function: text(m, &["function"]),
            arguments: object(m, &["arguments", "args"])?,
            result: text(m, &["result"]),
        };
        require(&r.observation, "observation")?;
        require(&r.thought, "thought")?;
        require(r.status.as_str(), "status")?;
        // A selection may name its target by label only; make `arguments.id` the single source.
        if r.function == "select_application_window" && !r.arguments.contains_key("id") {
            if r.control_label.is_empty() {
                return Err(ReplyProblem::SelectionWithoutLabel);
            }
            r.arguments
                .insert("id".into(), Value::String(r.control_label.clone()));
        }
        if r.status == HostStatus::Assign && r.function.is_empty() {
            return Err(ReplyProblem::AssignWithoutSelection);
        }
        Ok(r)
    }
}

/// One action of the AppAgent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionSpec {
    /// Tool name, e.g. `click_input`.
    pub function: String,
    /// Arguments; `id` is a control label from the annotated screenshot.
    pub arguments: Map<String, Value>,
    /// The status proposed with this action.
    pub status: AppStatus,
}

/// `SaveScreenshot`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SaveScreenshot {
    /// Whether to save the screenshot to the blackboard.
    pub save: bool,
    /// Why.
    pub reason: String,
}

/// The AppAgent's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AppResponse {
    /// What it sees.
    pub observation: String,
    /// Its reasoning.
    pub thought: String,
    /// Remaining steps.
    pub plan: Vec<String>,
    /// For the user.
    pub comment: String,
    /// One action, or several for a speculative multi-action batch.
    pub actions: Vec<ActionSpec>,
    /// The step's status: the last action's status, else the top-level `status`.
    pub status: AppStatus,
    /// Save the screenshot to the blackboard.
    pub save_screenshot: SaveScreenshot,
    /// Result of the subtask (FINISH) or what was found.
    pub result: String,
    /// Clarification questions (PENDING).
    pub questions: Vec<String>,
}

fn action(v: &Value, default_status: &AppStatus) -> Result<ActionSpec, ReplyProblem> {
    let m = v.as_object().ok_or(ReplyProblem::ActionNotAnObject)?;
    let mut arguments = object(m, &["arguments", "args"])?;
    let label = text(m, &["control_label", "ControlLabel"]);
    if !label.is_empty() && !arguments.contains_key("id") {
        arguments.insert("id".into(), Value::String(label));
    }
    let status = text(m, &["status"]);
    Ok(ActionSpec {
        function: text(m, &["function"]),
        arguments,
        status: if status.trim().is_empty() {
            default_status.clone()
        } else {
            status.into()
        },
    })
}

impl AppResponse {
    /// Parses and validates.
    pub fn parse(m: &Map<String, Value>) -> Result<Self, ReplyProblem> {
        let top_status = AppStatus::from(text(m, &["status"]));
        let mut actions = match field(m, &["action", "actions"]) {
            Some(Value::Array(list)) => list
                .iter()
                .map(|a| action(a, &top_status))
                .collect::<Result<_, _>>()?,
            Some(v @ Value::Object(_)) => vec![action(v, &top_status)?],
            Some(Value::Null) | None => {
                // The reference's flat form: Function / Args / ControlLabel at the top level.
                let a = action(&Value::Object(m.clone()), &top_status)?;
                if a.function.is_empty() {
                    vec![]
                } else {
                    vec![a]
                }
            }
            Some(_) => return Err(ReplyProblem::ActionShape),
        };
        actions.retain(|a| !a.function.is_empty());
        let status = actions
            .last()
            .map_or(top_status.clone(), |a| a.status.clone());
        let save = match field(m, &["save_screenshot", "SaveScreenshot"]) {
            Some(Value::Object(o)) => SaveScreenshot {
                save: o.get("save").and_then(Value::as_bool).unwrap_or(false),
                reason: text(o, &["reason"]),
            },
            Some(Value::Bool(b)) => SaveScreenshot {
                save: *b,
                reason: String::new(),
            },
            _ => SaveScreenshot::default(),
        };
        let r = Self {
            observation: text(m, &["observation"]),
            thought: text(m, &["thought"]),
            plan: list(m, &["plan"]),
            comment: text(m, &["comment"]),
            actions,
            status,
            save_screenshot: save,
            result: text(m, &["result"]),
            questions: list(m, &["questions"]),
        };
        require(&r.observation, "observation")?;
        require(&r.thought, "thought")?;
        require(r.status.as_str(), "status")?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::state::{AgentState, Outcome};
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn host_reference_spelling_and_label_fallback() {
        let r = HostResponse::parse(&obj(json!({
            "Observation": "o", "Thought": "t", "Current Sub-Task": "write", "ControlLabel": "1",
            "Plan": ["a", "b"], "Status": "assign", "Function": "select_application_window", "Args": {}
        })))
        .unwrap();
        assert_eq!(r.status, HostStatus::Assign);
        assert_eq!(r.current_subtask, "write");
        assert_eq!(r.arguments["id"], json!("1"));
        assert_eq!(r.plan, ["a", "b"]);
        let err =
            HostResponse::parse(&obj(json!({"Observation": "o", "Status": "FINISH"}))).unwrap_err();
        assert_eq!(err, ReplyProblem::Missing("thought"), "{err}");
        assert!(
            HostResponse::parse(&obj(
                json!({"observation": "o", "thought": "t", "status": "ASSIGN"})
            ))
            .is_err()
        );
    }

    #[test]
    fn app_single_list_and_flat_actions() {
        let one = AppResponse::parse(&obj(json!({
            "observation": "o", "thought": "t",
            "action": {"function": "click_input", "arguments": {"id": "3"}, "status": "CONTINUE"}
        })))
        .unwrap();
        assert_eq!(one.actions.len(), 1);
        assert_eq!(one.status, AppStatus::Continue);
        let many = AppResponse::parse(&obj(json!({
            "observation": "o", "thought": "t", "status": "CONTINUE",
            "action": [{"function": "set_edit_text", "arguments": {"id": "1", "text": "x"}},
                       {"function": "click_input", "arguments": {"id": "2"}, "status": "FINISH"}],
            "SaveScreenshot": {"save": true, "reason": "evidence"}
        })))
        .unwrap();
        assert_eq!(many.actions.len(), 2);
        assert_eq!(many.actions[0].status, AppStatus::Continue);
        assert_eq!(many.status, AppStatus::Finish);
        assert!(many.save_screenshot.save);
        let flat = AppResponse::parse(&obj(json!({
            "Observation": "o", "Thought": "t", "ControlLabel": "12", "Function": "click_input",
            "Args": {"button": "left"}, "Status": "SCREENSHOT"
        })))
        .unwrap();
        assert_eq!(flat.status, AppStatus::Screenshot);
        assert_eq!(flat.actions[0].arguments["id"], json!("12"));
        assert!(
            AppResponse::parse(&obj(
                json!({"observation": "o", "thought": "t", "action": 3})
            ))
            .is_err()
        );
    }

    #[test]
    fn unknown_statuses_are_kept_and_names_round_trip() {
        let r = HostResponse::parse(&obj(
            json!({"observation": "o", "thought": "t", "status": "dance"}),
        ))
        .unwrap();
        assert_eq!(r.status, HostStatus::Other("DANCE".into()));
        assert_eq!(
            serde_json::to_value(AgentState::Confirm).unwrap(),
            json!("CONFIRM")
        );
        let back: AppStatus = serde_json::from_value(json!("screenshot")).unwrap();
        assert_eq!(back, AppStatus::Screenshot);
        assert!(HostStatus::Assign.acts() && !HostStatus::Confirm.acts());
        assert!(AppStatus::Finish.acts() && !AppStatus::Pending.acts());
        assert_eq!(Outcome::Rejected.to_string(), "REJECTED");
    }
}
