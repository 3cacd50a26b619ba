//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, as rmcp serves it) for
//! `run_task` and `replay_task`. A client that declares the extension (in its `initialize` capabilities,
//! or per request in `_meta` `io.modelcontextprotocol/clientCapabilities`) gets, instead of the long call,
//! a task handle at once (`resultType: "task"`) whose `taskId` *is* the ufo task's id — durable (the
//! session store keeps it; any agent replica and a restarted agent answer for it) and owned by the
//! caller. Then:
//! - `tasks/get`: the ufo task as an MCP task — `working` while queued or running (the status message
//!   says how far), `input_required` with elicitation forms while it waits on a question or a held action,
//!   `completed` with `run_task`'s own result (text, structured outcome, final screenshot; `isError` when
//!   the task failed) once it ended, `cancelled` when it was cancelled.
//! - `tasks/update`: the answers or the decision, bound to the question ids or the held action's id in the
//!   request's key, as REST's answers and confirmations are.
//! - `tasks/cancel`: cancels the ufo task.
//!
//! Another caller's task id is "not found" (`-32602`) for all three, with the words a missing one gets.
//! SEP-2663 has no `tasks/result` or `tasks/list` (the result is inlined in `tasks/get`; `list_tasks`
//! lists).

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, ElicitRequest, ElicitRequestParams,
    GetTaskResult, InputRequest, InputRequests, InputResponses, Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;

use crate::api::{TaskApi, ToolError};
use crate::follow::{Wait, approval_form, is_terminal, questions_form, text, waiting_on};

/// The polling interval suggested to clients, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 1000;

/// The key prefixes of the input requests: answers to questions, a decision on a held action.
const ANSWER: &str = "answer:";
const DECIDE: &str = "decide:";

/// Whether the request's client declared the tasks extension (per request, or at `initialize` for a
/// client with a session).
pub fn requested(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// A refused task operation as a JSON-RPC error: a missing task, another caller's or bad parameters are
/// `-32602` (invalid params, as the extension asks), anything else an internal error; the data is the
/// REST body `{code, message}`.
pub fn rpc_error(error: &ToolError) -> McpError {
    let message = format!("{}: {}", error.code, error.message);
    match error.code.as_str() {
        "not_found" | "invalid_argument" | "failed_precondition" => {
            McpError::invalid_params(message, Some(error.body()))
        }
        _ => McpError::internal_error(message, Some(error.body())),
    }
}

/// The base [`Task`] of a ufo task's `TaskView`.
fn base(view: &Value) -> Result<Task, ToolError> {
    let id = text(view, "id");
    if id.is_empty() {
        return Err(ToolError::new(
            "internal",
            "the service answered a task without an id",
        ));
    }
    // No TTL: the task is kept as long as the session store keeps it (retention).
    Ok(Task::new(
        id,
        TaskStatus::Working,
        text(view, "created_at"),
        text(view, "updated_at"),
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS))
}

/// The handle `run_task` returns to a client that asked for a task: the submitted task, working.
pub fn created(view: &Value) -> Result<CreateTaskResult, ToolError> {
    let task = base(view)?;
    let message = format!(
        "task {} is {}; poll tasks/get for its steps and its result",
        task.task_id,
        text(view, "status")
    );
    Ok(CreateTaskResult::new(task.with_status_message(message)))
}

/// The task `id` of `caller` (another caller's is not found; a direct session or a person's recorded
/// demonstration is no tool call's task).
async fn view<A: TaskApi>(api: &A, caller: &A::Caller, id: &str) -> Result<Value, ToolError> {
    let view = api.get(caller, id).await?;
    tool_task(id, &view)?;
    Ok(view)
}

/// Refuses a task view that no tool call made: a direct session (an MCP client's desktop calls) or a
/// demonstration (`ufo record`), both recorded as they happened and never run, as not found.
fn tool_task(id: &str, view: &Value) -> Result<(), ToolError> {
    let what = match text(view, "kind").as_str() {
        "direct" => "a direct session",
        "demonstration" => "a person's recorded demonstration",
        _ => return Ok(()),
    };
    Err(ToolError::new(
        "not_found",
        format!("task {id} is {what}, not a tool call's task"),
    ))
}

fn progress(view: &Value) -> String {
    let totals = view.get("totals").cloned().unwrap_or(Value::Null);
    let steps = totals.get("steps").and_then(Value::as_u64).unwrap_or(0);
    let cost = totals.get("cost").and_then(Value::as_f64).unwrap_or(0.0);
    let state = text(view, "state");
    let state = if state.is_empty() {
        String::new()
    } else {
        format!(", {state}")
    };
    format!(
        "{} after {steps} steps (${cost:.4}){state}",
        text(view, "status")
    )
}

/// What the task waits on, as input requests keyed by the question ids or the held action's id.
fn input_requests(id: &str, view: &Value) -> Result<Option<InputRequests>, ToolError> {
    if view.get("cancel_requested").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    let (key, (message, schema)) = match waiting_on(view) {
        None => return Ok(None),
        Some(Wait::Questions(questions)) => {
            let ids: Vec<&str> = questions.iter().map(|(qid, _)| qid.as_str()).collect();
            (
                format!("{ANSWER}{}", ids.join(",")),
                questions_form(id, &questions),
            )
        }
        Some(Wait::Hold(held)) => (
            format!("{DECIDE}{}", text(&held, "id")),
            approval_form(id, &held),
        ),
    };
    let schema = schema
        .build()
        .map_err(|e| ToolError::new("internal", format!("elicitation schema: {e}")))?;
    let request = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    });
    Ok(Some(InputRequests::from([(
        key,
        InputRequest::Elicitation(request),
    )])))
}

fn object(result: CallToolResult) -> Result<serde_json::Map<String, Value>, ToolError> {
    match serde_json::to_value(result) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ToolError::new("internal", "a tool result is not an object")),
        Err(e) => Err(ToolError::new("internal", e.to_string())),
    }
}

/// `tasks/get`: task `id` of `caller`, with its result once it ended.
pub async fn get<A: TaskApi>(
    api: &A,
    caller: &A::Caller,
    id: &str,
) -> Result<GetTaskResult, ToolError> {
    let view = view(api, caller, id).await?;
    let task = base(&view)?;
    let status = text(&view, "status");
    let detailed = if status == "cancelled" {
        let result = text(&view, "result");
        DetailedTask::new(
            task.with_status_message(format!("cancelled: {result}")),
            TaskPayload::Cancelled,
        )
    } else if is_terminal(&status) {
        let result = crate::follow::outcome(api, caller, id).await?;
        DetailedTask::new(
            task.with_status_message(progress(&view)),
            TaskPayload::Completed {
                result: object(result)?,
            },
        )
    } else if let Some(input_requests) = input_requests(id, &view)? {
        DetailedTask::new(
            task.with_status_message(format!(
                "{}: waiting for you (answer through tasks/update)",
                progress(&view)
            )),
            TaskPayload::InputRequired { input_requests },
        )
    } else {
        DetailedTask::new(
            task.with_status_message(progress(&view)),
            TaskPayload::Working,
        )
    };
    Ok(GetTaskResult::new(detailed))
}

/// `tasks/update`: the answers or the decision in `responses` for what task `id` waits on now;
/// responses to anything else (answered meanwhile, never asked), and declined ones, are ignored.
pub async fn update<A: TaskApi>(
    api: &A,
    caller: &A::Caller,
    id: &str,
    responses: &InputResponses,
) -> Result<(), ToolError> {
    let view = view(api, caller, id).await?;
    let outstanding = input_requests(id, &view)?.unwrap_or_default();
    for (key, response) in responses {
        if !outstanding.contains_key(key) {
            tracing::info!(task_id = %id, key, "input response to nothing outstanding ignored");
            continue;
        }
        if response.get("action").and_then(Value::as_str) != Some("accept") {
            continue;
        }
        let content = response.get("content").cloned().unwrap_or(Value::Null);
        let taken = if let Some(ids) = key.strip_prefix(ANSWER) {
            let ids: Vec<String> = ids.split(',').map(str::to_owned).collect();
            let mut answers = Vec::with_capacity(ids.len());
            for i in 1..=ids.len() {
                let answer = content
                    .get(format!("answer{i}"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ToolError::invalid(format!("inputResponses.{key}: content lacks answer{i}"))
                    })?;
                answers.push(answer.to_owned());
            }
            api.answer(caller, id, &ids, &answers).await
        } else if let Some(action_id) = key.strip_prefix(DECIDE) {
            let approve = content
                .get("approve")
                .and_then(Value::as_bool)
                .ok_or_else(|| {
                    ToolError::invalid(format!("inputResponses.{key}: content lacks approve"))
                })?;
            let reason = content
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default();
            api.confirm(caller, id, action_id, approve, reason).await
        } else {
            continue;
        };
        match taken {
            Ok(_) => {}
            // Answered or decided meanwhile, or ended: nothing outstanding any more.
            Err(e) if e.code == "failed_precondition" => {
                tracing::info!(task_id = %id, error = %e, "input response not taken");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `tasks/cancel`: asks task `id` of `caller` to stop.
pub async fn cancel<A: TaskApi>(api: &A, caller: &A::Caller, id: &str) -> Result<(), ToolError> {
    view(api, caller, id).await?;
    api.cancel(caller, id, "cancelled by the MCP client (tasks/cancel)")
        .await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::tool_task;

    #[test]
    fn only_a_tasks_view_is_a_tool_calls_task() {
        assert!(tool_task("t", &json!({"id": "t", "kind": "task"})).is_ok());
        for (kind, says) in [
            ("direct", "a direct session"),
            ("demonstration", "a person's recorded demonstration"),
        ] {
            let refused = tool_task("t", &json!({"id": "t", "kind": kind})).unwrap_err();
            assert_eq!(refused.code, "not_found", "{kind}");
            assert!(
                refused.message.contains(says),
                "{kind}: {}",
                refused.message
            );
        }
    }
}
