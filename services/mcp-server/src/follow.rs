//! `run_task`'s long call: follows the task's event log from the first event, sends a progress
//! notification per recorded step (agent, action, status, cost), turns a pending question or a held action
//! into an elicitation when the client supports form elicitation (the answer or decision goes back bound to
//! the question or action id, as REST does), and otherwise returns "waiting for you" with the ids. When
//! the task ends it returns the outcome, the summary and the final screenshot as image content.

use std::collections::HashSet;

use base64::Engine as _;
use futures::StreamExt as _;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{ElicitationMode, RequestContext};
use serde_json::{Value, json};
use ufo_proto::v1::{Event, EventKind};

use crate::api::{TaskApi, ToolError};

/// Steps looked back from the last one for a screenshot to return.
const SCREENSHOT_LOOKBACK: u64 = 5;

/// What the task waits on, as its `TaskView` says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Wait {
    /// Pending questions: `(id, question)`.
    Questions(Vec<(String, String)>),
    /// The held action's view.
    Hold(Value),
}

pub(crate) fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

pub(crate) fn waiting_on(task: &Value) -> Option<Wait> {
    let questions: Vec<(String, String)> = task
        .get("pending_questions")
        .and_then(Value::as_array)
        .map(|qs| {
            qs.iter()
                .map(|q| (text(q, "id"), text(q, "question")))
                .filter(|(id, _)| !id.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if !questions.is_empty() {
        return Some(Wait::Questions(questions));
    }
    task.get("held_action")
        .filter(|h| h.is_object())
        .map(|h| Wait::Hold(h.clone()))
}

fn held_text(held: &Value) -> String {
    let target = text(held, "target_name");
    let on = if target.is_empty() {
        String::new()
    } else {
        format!(" on {target:?}")
    };
    let reason = text(held, "reason");
    let why = if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    };
    format!("{}{on}{why}", text(held, "function"))
}

/// Whether a task status is final.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "finished" | "failed" | "cancelled")
}

/// The progress line of one recorded step (a `StepView`).
pub fn step_line(step: &Value) -> String {
    let before = text(step, "state_before");
    let after = text(step, "state_after");
    let state = if before.is_empty() || before == after {
        after
    } else {
        format!("{before}→{after}")
    };
    let actions: Vec<String> = step
        .get("actions")
        .and_then(Value::as_array)
        .map(|actions| {
            actions
                .iter()
                .map(|a| {
                    let repr = text(a, "representation");
                    let base = if repr.is_empty() {
                        let target = text(a, "target_name");
                        if target.is_empty() {
                            text(a, "function")
                        } else {
                            format!("{} on {target}", text(a, "function"))
                        }
                    } else {
                        repr
                    };
                    let outcome = a
                        .get("result")
                        .map(|r| text(r, "status"))
                        .unwrap_or_default()
                        .trim_start_matches("RESULT_STATUS_")
                        .to_lowercase();
                    match outcome.as_str() {
                        "" | "success" => base,
                        other => format!("{base} [{other}]"),
                    }
                })
                .filter(|a| !a.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let action = if actions.is_empty() {
        "-".to_owned()
    } else {
        actions.join("; ")
    };
    let cost = step.get("cost").and_then(Value::as_f64).unwrap_or(0.0);
    format!(
        "step {} · {} · {state} · {action} · ${cost:.4}",
        text(step, "step"),
        text(step, "agent_name")
    )
}

/// One follow of one task for one tool call.
pub struct Follower<'a, A: TaskApi> {
    api: &'a A,
    caller: &'a A::Caller,
    context: &'a RequestContext<RoleServer>,
    id: String,
    /// The call started the task: cancelling the call cancels it.
    owned: bool,
    handled: HashSet<String>,
    steps_seen: u64,
}

impl<'a, A: TaskApi> Follower<'a, A> {
    /// Follows task `id` for the call `context`; `owned` when this call created the task.
    pub fn new(
        api: &'a A,
        caller: &'a A::Caller,
        context: &'a RequestContext<RoleServer>,
        id: impl Into<String>,
        owned: bool,
    ) -> Self {
        Self {
            api,
            caller,
            context,
            id: id.into(),
            owned,
            handled: HashSet::new(),
            steps_seen: 0,
        }
    }

    /// Whether this client is asked through form elicitation: it declared the capability, and its
    /// protocol revision still lets a server send it requests (2026-07-28 forbids them).
    fn elicits(&self) -> bool {
        let modern = self
            .context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        !modern
            && self
                .context
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
    }

    /// Follows until the task ends (its outcome) or waits on a person who is not asked here ("waiting
    /// for you").
    pub async fn run(mut self) -> Result<CallToolResult, ToolError> {
        let ct = self.context.ct.clone();
        let finished = tokio::select! {
            result = self.follow() => Some(result),
            () = ct.cancelled() => None,
        };
        match finished {
            Some(result) => result,
            None => Err(self.abandoned().await),
        }
    }

    /// The call was cancelled: the task it started is cancelled too; a task it only followed is left alone.
    async fn abandoned(&self) -> ToolError {
        if self.owned {
            let reason = "the MCP client cancelled the call that started it";
            if let Err(e) = self.api.cancel(self.caller, &self.id, reason).await {
                tracing::warn!(task_id = %self.id, error = %e, "cannot cancel the abandoned task");
            }
        }
        ToolError::new(
            "cancelled",
            format!("the call following task {} was cancelled", self.id),
        )
    }

    async fn follow(&mut self) -> Result<CallToolResult, ToolError> {
        let mut events = self.api.events(self.caller, &self.id, 1).await?;
        while let Some(event) = events.next().await {
            let event = event?;
            if let Some(result) = self.on_event(&event).await? {
                return Ok(result);
            }
        }
        self.outcome().await
    }

    async fn on_event(&mut self, event: &Event) -> Result<Option<CallToolResult>, ToolError> {
        match EventKind::try_from(event.kind) {
            Ok(EventKind::StepFinished) => {
                self.progress(event).await;
                Ok(None)
            }
            Ok(
                EventKind::QuestionAsked | EventKind::ActionHeld | EventKind::ConfirmationRequested,
            ) => self.on_wait().await,
            _ => Ok(None),
        }
    }

    async fn progress(&mut self, event: &Event) {
        self.steps_seen += 1;
        let Some(token) = self.context.meta.get_progress_token() else {
            return;
        };
        let message = match self.api.steps(self.caller, &self.id, event.step, 1).await {
            Ok(page) => page
                .get("steps")
                .and_then(Value::as_array)
                .and_then(|s| {
                    s.iter()
                        .find(|s| s.get("step").and_then(Value::as_u64) == Some(event.step))
                })
                .map(step_line),
            Err(e) => {
                tracing::debug!(error = %e, "step not readable; progress from the event");
                None
            }
        };
        let message = message.unwrap_or_else(|| {
            let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
            format!(
                "step {} · {} · {} · -",
                event.step,
                text(&payload, "agent_name"),
                text(&payload, "state_after")
            )
        });
        let notification =
            ProgressNotificationParam::new(token, self.steps_seen as f64).with_message(message);
        if let Err(e) = self.context.peer.notify_progress(notification).await {
            tracing::debug!(error = %e, "progress notification not sent");
        }
    }

    /// The task may wait on a person: ask through elicitation, or return "waiting for you".
    async fn on_wait(&mut self) -> Result<Option<CallToolResult>, ToolError> {
        let task = self.api.get(self.caller, &self.id).await?;
        // A task asked to stop waits on nobody: follow it to its end.
        if task.get("cancel_requested").and_then(Value::as_bool) == Some(true) {
            return Ok(None);
        }
        let Some(wait) = waiting_on(&task) else {
            return Ok(None);
        };
        let key = match &wait {
            Wait::Questions(qs) => {
                let ids: Vec<&str> = qs.iter().map(|(id, _)| id.as_str()).collect();
                format!("q:{}", ids.join(","))
            }
            Wait::Hold(held) => format!("h:{}", text(held, "id")),
        };
        if !self.handled.insert(key) {
            return Ok(None);
        }
        if !self.elicits() {
            return Ok(Some(self.waiting(&task, None)));
        }
        let decided = match &wait {
            Wait::Questions(qs) => self.ask(qs).await?,
            Wait::Hold(held) => self.approve(held).await?,
        };
        match decided {
            None => Ok(None),
            Some(note) => Ok(Some(self.waiting(&task, Some(note)))),
        }
    }

    /// Elicits the answers; `Some(note)` when no answer was given (the call then returns waiting).
    async fn ask(&self, questions: &[(String, String)]) -> Result<Option<String>, ToolError> {
        let (message, schema) = questions_form(&self.id, questions);
        let content = match self.elicit(message, schema).await? {
            Ok(content) => content,
            Err(note) => return Ok(Some(note.to_string())),
        };
        let mut answers = Vec::with_capacity(questions.len());
        for i in 0..questions.len() {
            match content
                .get(format!("answer{}", i + 1))
                .and_then(Value::as_str)
            {
                Some(answer) => answers.push(answer.to_owned()),
                None => {
                    return Ok(Some(format!(
                        "the elicitation's reply lacks answer{}",
                        i + 1
                    )));
                }
            }
        }
        let ids: Vec<String> = questions.iter().map(|(id, _)| id.clone()).collect();
        match self.api.answer(self.caller, &self.id, &ids, &answers).await {
            Ok(_) => Ok(None),
            // Answered or ended meanwhile (409): the log says what happens next.
            Err(e) if e.code == "failed_precondition" => {
                tracing::info!(task_id = %self.id, error = %e, "answer not taken");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Elicits a decision on the held action; `Some(note)` when none was given.
    async fn approve(&self, held: &Value) -> Result<Option<String>, ToolError> {
        let action_id = text(held, "id");
        let (message, schema) = approval_form(&self.id, held);
        let content = match self.elicit(message, schema).await? {
            Ok(content) => content,
            Err(note) => return Ok(Some(note.to_string())),
        };
        let Some(approve) = content.get("approve").and_then(Value::as_bool) else {
            return Ok(Some("the elicitation's reply lacks approve".to_owned()));
        };
        let reason = content
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match self
            .api
            .confirm(self.caller, &self.id, &action_id, approve, reason)
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if e.code == "failed_precondition" => {
                tracing::info!(task_id = %self.id, error = %e, "decision not taken");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// One elicitation: the accepted content, or why there is none.
    async fn elicit(
        &self,
        message: String,
        schema: rmcp::model::ElicitationSchemaBuilder,
    ) -> Result<Result<Value, Unanswered>, ToolError> {
        let schema = schema
            .build()
            .map_err(|e| ToolError::new("internal", format!("elicitation schema: {e}")))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        match self.context.peer.create_elicitation(params).await {
            Ok(reply) => match reply.action {
                ElicitationAction::Accept => Ok(reply.content.ok_or(Unanswered::Empty)),
                ElicitationAction::Decline => Ok(Err(Unanswered::Declined)),
                _ => Ok(Err(Unanswered::Dismissed)),
            },
            Err(e) => {
                tracing::info!(error = %e, "elicitation failed");
                Ok(Err(Unanswered::Failed(e.to_string())))
            }
        }
    }

    /// "Waiting for you": what the task waits on, with the ids to answer or decide.
    fn waiting(&self, task: &Value, note: Option<String>) -> CallToolResult {
        let mut lines = vec![format!("Task {} is waiting for you.", self.id)];
        if let Some(note) = note {
            lines.push(format!("({note})"));
        }
        match waiting_on(task) {
            Some(Wait::Questions(qs)) => {
                for (id, q) in &qs {
                    lines.push(format!("Question {id}: {q}"));
                }
                lines.push(
                    "Answer with answer_task {task_id, question_ids, answers}, then follow_task."
                        .to_owned(),
                );
            }
            Some(Wait::Hold(held)) => {
                lines.push(format!(
                    "Held action {}: {}",
                    text(&held, "id"),
                    held_text(&held)
                ));
                lines.push(
                    "Decide with decide_action {task_id, action_id, approve}, then follow_task."
                        .to_owned(),
                );
            }
            None => {}
        }
        let structured = json!({
            "task_id": self.id,
            "status": "waiting",
            "pending_questions": task.get("pending_questions").cloned().unwrap_or(Value::Null),
            "held_action": task.get("held_action").cloned().unwrap_or(Value::Null),
            "steps": self.steps_seen,
        });
        let mut result = CallToolResult::success(vec![ContentBlock::text(lines.join("\n"))]);
        result.structured_content = Some(structured);
        result
    }

    /// The task ended: outcome, summary and the final screenshot.
    async fn outcome(&self) -> Result<CallToolResult, ToolError> {
        outcome(self.api, self.caller, &self.id).await
    }
}

/// The form asking `questions` (`(id, question)`) of task `id`: one required string per question
/// (`answer1`, `answer2`, ...).
pub(crate) fn questions_form(
    id: &str,
    questions: &[(String, String)],
) -> (String, rmcp::model::ElicitationSchemaBuilder) {
    let mut schema = ElicitationSchema::builder();
    for (i, (qid, question)) in questions.iter().enumerate() {
        let title = question.clone();
        let description = format!("answers question {qid}");
        schema = schema.required_string_property(format!("answer{}", i + 1), move |s| {
            s.title(title).description(description)
        });
    }
    let listed: Vec<String> = questions.iter().map(|(_, q)| format!("- {q}")).collect();
    (format!("Task {id} asks:\n{}", listed.join("\n")), schema)
}

/// The form asking for a decision on task `id`'s held action: `approve` (boolean), `reason`.
pub(crate) fn approval_form(
    id: &str,
    held: &Value,
) -> (String, rmcp::model::ElicitationSchemaBuilder) {
    let schema = ElicitationSchema::builder()
        .required_bool_property("approve", |b| {
            b.title("Approve")
                .description("true runs the action; false rejects it")
        })
        .string_property("reason", |s| {
            s.title("Reason").description("why, for the record")
        });
    let message = format!(
        "Task {id} wants to run {} (action {}, proposed by {}). Approve it?",
        held_text(held),
        text(held, "id"),
        text(held, "agent_name")
    );
    (message, schema)
}

/// Task `id`'s outcome as `run_task` returns it: the text `Task ID STATUS after N steps ($COST):
/// RESULT`, the structured outcome and the newest step's screenshot; an error result unless it finished.
pub async fn outcome<A: TaskApi>(
    api: &A,
    caller: &A::Caller,
    id: &str,
) -> Result<CallToolResult, ToolError> {
    let task = api.get(caller, id).await?;
    let status = text(&task, "status");
    let summary = text(&task, "result");
    let totals = task.get("totals").cloned().unwrap_or(Value::Null);
    let steps = totals.get("steps").and_then(Value::as_u64).unwrap_or(0);
    let cost = totals.get("cost").and_then(Value::as_f64).unwrap_or(0.0);
    let mut content = vec![ContentBlock::text(format!(
        "Task {id} {status} after {steps} steps (${cost:.4}): {summary}"
    ))];
    let screenshot = final_screenshot(api, caller, id, steps).await;
    let mut structured = json!({
        "task_id": id,
        "status": status,
        "result": summary,
        "steps": steps,
        "cost": cost,
    });
    if let Some((step, kind, image)) = screenshot {
        structured["screenshot"] = json!({"step": step, "kind": kind});
        content.push(ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(&image.bytes),
            image.mime_type,
        ));
    }
    let mut result = if is_terminal(&status) && status != "finished" {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(structured);
    Ok(result)
}

/// The newest step's screenshot (the desktop after it, else the step's desktop, else clean), looking
/// back a few steps.
async fn final_screenshot<A: TaskApi>(
    api: &A,
    caller: &A::Caller,
    id: &str,
    last: u64,
) -> Option<(u64, String, crate::api::Image)> {
    let first = last.saturating_sub(SCREENSHOT_LOOKBACK).max(1);
    let page = api
        .steps(
            caller,
            id,
            first,
            u32::try_from(last - first + 1).unwrap_or(1),
        )
        .await
        .ok()?;
    let steps = page.get("steps")?.as_array()?;
    for step in steps.iter().rev() {
        let kinds: Vec<&str> = step
            .get("screenshots")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // The desktop after the last step (kept when the task ended), else the step's own.
        let Some(kind) = ["after", "desktop", "clean"]
            .into_iter()
            .find(|k| kinds.contains(k))
        else {
            continue;
        };
        let n = step.get("step").and_then(Value::as_u64)?;
        match api.screenshot(caller, id, n, kind).await {
            Ok(image) => return Some((n, kind.to_owned(), image)),
            Err(e) => tracing::debug!(error = %e, "final screenshot not readable"),
        }
    }
    None
}

/// Why an elicitation brought no answer (told to the caller as the tool's note).
#[derive(Debug)]
enum Unanswered {
    /// Accepted without content.
    Empty,
    /// The person declined.
    Declined,
    /// The question was dismissed.
    Dismissed,
    /// The request failed (the client's words).
    Failed(String),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => f.write_str("the elicitation was accepted without content"),
            Self::Declined => f.write_str("you declined to answer now"),
            Self::Dismissed => f.write_str("the question was dismissed"),
            Self::Failed(e) => write!(f, "the elicitation failed ({e})"),
        }
    }
}

impl std::error::Error for Unanswered {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_step_line_names_agent_state_action_and_cost() {
        let step = json!({"step": 2, "agent_name": "AppAgent/notes", "state_before": "CONTINUE",
            "state_after": "FINISH", "cost": 0.0025,
            "actions": [{"function": "click_input", "target_name": "Copy", "result": {"status": "RESULT_STATUS_SUCCESS"}}]});
        assert_eq!(
            step_line(&step),
            "step 2 · AppAgent/notes · CONTINUE→FINISH · click_input on Copy · $0.0025"
        );
    }

    #[test]
    fn questions_come_before_a_hold() {
        let task = json!({"pending_questions": [{"id": "q1", "question": "Which?"}],
                          "held_action": {"id": "h2"}});
        assert_eq!(
            waiting_on(&task),
            Some(Wait::Questions(vec![("q1".into(), "Which?".into())]))
        );
        let task = json!({"pending_questions": [], "held_action": {"id": "h2"}});
        assert!(matches!(waiting_on(&task), Some(Wait::Hold(_))));
        assert_eq!(waiting_on(&json!({"held_action": null})), None);
    }
}
