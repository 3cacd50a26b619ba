//! The tool catalogue: names, descriptions and JSON schemas, and each tool's arguments parsed strictly
//! (unknown fields refused, every field named in the error), so a client's mistake is an
//! `invalid_argument` tool error that says what to fix.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{TaskOrder, ToolError};

/// `run_task`.
pub const RUN_TASK: &str = "run_task";
/// `follow_task`.
pub const FOLLOW_TASK: &str = "follow_task";
/// `replay_task`.
pub const REPLAY_TASK: &str = "replay_task";
/// `answer_task`.
pub const ANSWER_TASK: &str = "answer_task";
/// `decide_action`.
pub const DECIDE_ACTION: &str = "decide_action";
/// `get_task`.
pub const GET_TASK: &str = "get_task";
/// `list_tasks`.
pub const LIST_TASKS: &str = "list_tasks";
/// `cancel_task`.
pub const CANCEL_TASK: &str = "cancel_task";
/// `task_screenshot`.
pub const TASK_SCREENSHOT: &str = "task_screenshot";

const TASK_ID: &str = "The task's id (a UUID, as run_task or list_tasks returned it).";

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

pub(crate) fn tool(
    name: &'static str,
    description: &'static str,
    input: Value,
    read_only: bool,
) -> Tool {
    Tool::new(name, description, schema(input)).with_annotations(
        ToolAnnotations::new()
            .read_only(read_only)
            .open_world(!read_only),
    )
}

/// Every task tool.
pub fn catalogue() -> Vec<Tool> {
    let limits = json!({
        "max_steps": {"type": "integer", "minimum": 1, "description": "Steps the task may take (default: the server's)."},
        "max_cost": {"type": "number", "minimum": 0, "description": "LLM cost the task may spend, in US dollars (default: the server's)."},
        "timeout_seconds": {"type": "integer", "minimum": 1, "description": "Wall-time limit in seconds (default: the server's)."}
    });
    let mut run_properties = json!({
        "request": {"type": "string", "minLength": 1, "description": "The desktop task in plain words, e.g. \"Open Mousepad and type hello\"."},
        "executor": {"type": "string", "description": "The name of an executor (a desktop) the operator registered; default: the server's default. Never an address."}
    });
    let mut replay_properties = json!({
        "task_id": {"type": "string", "description": "The finished task whose recorded actions run again without the model."},
        "on_mismatch": {"type": "string", "enum": ["fail", "model"], "description": "When a recorded target is missing: fail (default) or let the model decide that step."},
        "executor": {"type": "string", "description": "The name of a registered executor; default: the server's default."}
    });
    for properties in [&mut run_properties, &mut replay_properties] {
        if let (Some(p), Some(l)) = (properties.as_object_mut(), limits.as_object()) {
            p.extend(l.clone());
        }
    }
    vec![
        tool(
            RUN_TASK,
            "Run a whole desktop task and wait for its outcome. Sends a progress notification per step \
             (agent, action, status, cost). When the task asks a question or holds a risky action for \
             approval, asks you through elicitation if this client supports it; otherwise returns \
             \"waiting for you\" with the question or action ids (answer with answer_task or decide_action, \
             then follow_task). Returns the outcome, the summary and the final screenshot. Cancelling this \
             call cancels the task it started.",
            json!({"type": "object", "properties": run_properties, "required": ["request"], "additionalProperties": false}),
            false,
        ),
        tool(
            FOLLOW_TASK,
            "Follow a task already started (e.g. after answering it) like run_task does, until it ends or \
             waits for a person again.",
            json!({"type": "object", "properties": {"task_id": {"type": "string", "description": TASK_ID}},
                   "required": ["task_id"], "additionalProperties": false}),
            false,
        ),
        tool(
            REPLAY_TASK,
            "Run a finished task's recorded actions again without the model, and follow it like run_task.",
            json!({"type": "object", "properties": replay_properties, "required": ["task_id"], "additionalProperties": false}),
            false,
        ),
        tool(
            ANSWER_TASK,
            "Answer a task's pending questions: one answer per question id, in the same order.",
            json!({"type": "object", "properties": {
                "task_id": {"type": "string", "description": TASK_ID},
                "question_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "The ids of the pending questions answered."},
                "answers": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "One answer per question id."}
            }, "required": ["task_id", "question_ids", "answers"], "additionalProperties": false}),
            false,
        ),
        tool(
            DECIDE_ACTION,
            "Approve or reject the action a task holds for confirmation, named by its id.",
            json!({"type": "object", "properties": {
                "task_id": {"type": "string", "description": TASK_ID},
                "action_id": {"type": "string", "description": "The held action's id (held_action.id)."},
                "approve": {"type": "boolean", "description": "true runs the action; false rejects it."},
                "reason": {"type": "string", "description": "Why, for the record."}
            }, "required": ["task_id", "action_id", "approve"], "additionalProperties": false}),
            false,
        ),
        tool(
            GET_TASK,
            "A task: status, result, current state, pending questions, held action, totals.",
            json!({"type": "object", "properties": {"task_id": {"type": "string", "description": TASK_ID}},
                   "required": ["task_id"], "additionalProperties": false}),
            true,
        ),
        tool(
            LIST_TASKS,
            "Your tasks, newest first.",
            json!({"type": "object", "properties": {
                "status": {"type": "string", "enum": ["queued", "running", "waiting", "finished", "failed", "cancelled"]},
                "page_size": {"type": "integer", "minimum": 1},
                "page_token": {"type": "string", "description": "next_page_token of the previous page."}
            }, "additionalProperties": false}),
            true,
        ),
        tool(
            CANCEL_TASK,
            "Cancel a task (a queued task at once, a running one after its current step).",
            json!({"type": "object", "properties": {
                "task_id": {"type": "string", "description": TASK_ID},
                "reason": {"type": "string", "description": "Why, for the record."}
            }, "required": ["task_id"], "additionalProperties": false}),
            false,
        ),
        tool(
            TASK_SCREENSHOT,
            "A step's screenshot: clean (the window), annotated (with the labels the model saw), desktop, \
             selected (the control acted on), or after (the desktop after a task's last step, on its last step).",
            json!({"type": "object", "properties": {
                "task_id": {"type": "string", "description": TASK_ID},
                "step": {"type": "integer", "minimum": 1, "description": "The step number."},
                "kind": {"type": "string", "enum": ["clean", "annotated", "desktop", "selected", "after"], "description": "Default: the first the step has of desktop, clean."}
            }, "required": ["task_id", "step"], "additionalProperties": false}),
            true,
        ),
    ]
}

/// Parses a tool's arguments (an absent object is `{}`), naming the tool in the error.
pub fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Option<&JsonObject>,
) -> Result<T, ToolError> {
    let value = Value::Object(arguments.cloned().unwrap_or_default());
    serde_json::from_value(value).map_err(|e| ToolError::invalid(format!("{tool}: {e}")))
}

/// Refuses an executor given as an address: the tools take only names the operator registered.
pub(crate) fn executor_name(executor: Option<String>) -> Result<Option<String>, ToolError> {
    match executor {
        Some(name) if name.contains("://") || name.contains('/') || name.contains(':') => {
            Err(ToolError::invalid(format!(
                "executor must be the name of an executor the operator registered, not an address ({name:?})"
            )))
        }
        Some(name) if name.trim().is_empty() => Ok(None),
        other => Ok(other),
    }
}

/// `run_task`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The request.
    pub request: String,
    /// An executor name.
    #[serde(default)]
    pub executor: Option<String>,
    /// Step limit.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Cost limit.
    #[serde(default)]
    pub max_cost: Option<f64>,
    /// Wall-time limit.
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
}

impl RunArgs {
    /// The task to submit.
    pub fn order(self) -> Result<TaskOrder, ToolError> {
        if self.request.trim().is_empty() {
            return Err(ToolError::invalid("request must not be empty"));
        }
        Ok(TaskOrder {
            request: self.request,
            executor: executor_name(self.executor)?,
            max_steps: self.max_steps,
            max_cost: self.max_cost,
            timeout_seconds: self.timeout_seconds,
            replay_of: None,
            on_mismatch: None,
        })
    }
}

/// `replay_task`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayArgs {
    /// The task replayed.
    pub task_id: String,
    /// `fail` or `model`.
    #[serde(default)]
    pub on_mismatch: Option<String>,
    /// An executor name.
    #[serde(default)]
    pub executor: Option<String>,
    /// Step limit.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Cost limit.
    #[serde(default)]
    pub max_cost: Option<f64>,
    /// Wall-time limit.
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
}

impl ReplayArgs {
    /// The task to submit.
    pub fn order(self) -> Result<TaskOrder, ToolError> {
        Ok(TaskOrder {
            request: String::new(),
            executor: executor_name(self.executor)?,
            max_steps: self.max_steps,
            max_cost: self.max_cost,
            timeout_seconds: self.timeout_seconds,
            replay_of: Some(self.task_id),
            on_mismatch: self.on_mismatch,
        })
    }
}

/// Tools naming only a task.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// The task.
    pub task_id: String,
}

/// `answer_task`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerArgs {
    /// The task.
    pub task_id: String,
    /// The questions answered.
    pub question_ids: Vec<String>,
    /// One answer each.
    pub answers: Vec<String>,
}

/// `decide_action`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideArgs {
    /// The task.
    pub task_id: String,
    /// The held action.
    pub action_id: String,
    /// Approve or reject.
    pub approve: bool,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `list_tasks`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// One status only.
    #[serde(default)]
    pub status: Option<String>,
    /// Page size.
    #[serde(default)]
    pub page_size: Option<u32>,
    /// The next page.
    #[serde(default)]
    pub page_token: Option<String>,
}

/// `cancel_task`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    /// The task.
    pub task_id: String,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `task_screenshot`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotArgs {
    /// The task.
    pub task_id: String,
    /// The step.
    pub step: u64,
    /// Which image.
    #[serde(default)]
    pub kind: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_a_unique_name() {
        let tools = catalogue();
        let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), tools.len());
        for t in &tools {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn arguments_are_strict_and_errors_name_the_tool() {
        let args = json!({"request": "x", "surprise": 1});
        let e = parse::<RunArgs>(RUN_TASK, args.as_object()).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert!(
            e.message.starts_with("run_task: unknown field `surprise`"),
            "{e}"
        );
        let e = parse::<TaskArgs>(GET_TASK, None).unwrap_err();
        assert!(e.message.contains("missing field `task_id`"), "{e}");
    }

    #[test]
    fn an_executor_address_is_refused() {
        for address in ["http://10.0.0.5:50051", "10.0.0.5:50051", "host/x"] {
            let args = RunArgs {
                request: "x".into(),
                executor: Some(address.into()),
                max_steps: None,
                max_cost: None,
                timeout_seconds: None,
            };
            let e = args.order().unwrap_err();
            assert!(e.message.contains("not an address"), "{e}");
        }
    }
}
