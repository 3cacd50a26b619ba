//! How tasks, steps and events look in a terminal: one line per step (agent, state, action, cost), one per
//! notable event, and a short task summary. Reads JSON by field name and tolerates missing fields, so a
//! newer service never breaks an older CLI's output.

use serde_json::Value;
use ufo_proto::v1::{Event, EventKind};

/// A field as text ("" when absent); numbers and booleans in their usual form.
pub fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn number(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}

/// A status as users read it: `SESSION_STATUS_RUNNING` and `RUNNING` both become `running`.
pub fn status_word(raw: &str) -> String {
    raw.trim_start_matches("SESSION_STATUS_").to_lowercase()
}

/// Whether a status is final.
pub fn is_terminal(status: &str) -> bool {
    matches!(
        status_word(status).as_str(),
        "finished" | "failed" | "cancelled"
    )
}

/// Dollars with enough precision for per-step LLM costs.
pub fn cost(value: f64) -> String {
    format!("${value:.4}")
}

/// The progress line of one recorded step (a `GET /v1/tasks/{id}/steps` item).
pub fn step_line(step: &Value) -> String {
    let step_no = text(step, "step");
    let agent = text(step, "agent_name");
    let before = text(step, "state_before");
    let after = text(step, "state_after");
    let state = match (before.is_empty(), after.is_empty()) {
        (false, false) if before != after => format!("{before}→{after}"),
        (_, false) => after,
        _ => text(step, "status"),
    };
    let actions: Vec<String> = step
        .get("actions")
        .and_then(Value::as_array)
        .map(|actions| {
            actions
                .iter()
                .map(action_text)
                .filter(|a| !a.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let action = if actions.is_empty() {
        "-".to_owned()
    } else {
        actions.join("; ")
    };
    let step_cost = number(step, "cost").map(cost).unwrap_or_default();
    // A reuse task's step says whether the earlier task's plan decided it (docs/knowledge.md "Reuse").
    let reused = match step.get("reuse").map(|r| text(r, "source")).as_deref() {
        Some("reused") => "  [reused]",
        Some("model") => "  [reuse: screen differed, model]",
        _ => "",
    };
    format!("step {step_no:>3}  {agent:<24} {state:<20} {action}  {step_cost}{reused}")
        .trim_end()
        .to_owned()
}

/// The "knowledge used" line under a step (`ufo show --steps`): each item that reached its prompt, in
/// the prompt's order, as `source (kind, score)`; `None` when none did.
pub fn knowledge_line(step: &Value) -> Option<String> {
    let items = step.get("knowledge").and_then(Value::as_array)?;
    let shown: Vec<String> = items
        .iter()
        .map(|item| {
            let score = number(item, "score")
                .filter(|s| *s > 0.0)
                .map(|s| format!(", {s:.2}"))
                .unwrap_or_default();
            format!("{} ({}{score})", text(item, "source"), text(item, "kind"))
        })
        .collect();
    (!shown.is_empty()).then(|| format!("          knowledge used: {}", shown.join("; ")))
}

/// The screenshot line under a step (`ufo show --steps` of a demonstration): its kinds and size, and
/// the command that saves it; `None` when the step has none.
pub fn screenshot_line(task: &str, step: &Value) -> Option<String> {
    let kinds: Vec<&str> = step
        .get("screenshots")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let kind = kinds.first()?;
    let size = step
        .get("clean_size")
        .and_then(Value::as_array)
        .and_then(|s| Some(format!(" {}×{}", s.first()?.as_u64()?, s.get(1)?.as_u64()?)))
        .unwrap_or_default();
    Some(format!(
        "          screenshot: {}{size} (ufo screenshot {task} {} --kind {kind})",
        kinds.join(", "),
        text(step, "step")
    ))
}

fn action_text(action: &Value) -> String {
    let representation = text(action, "representation");
    let function = text(action, "function");
    let mut base = if representation.is_empty() {
        let target = text(action, "target_name");
        if target.is_empty() {
            function.clone()
        } else {
            format!("{function} on {target}")
        }
    } else {
        representation
    };
    // The keys of a keyboard_input are what a person wants to see; add them when the text lacks them.
    if function == "keyboard_input" {
        let keys = action
            .get("arguments")
            .map(|a| text(a, "keys"))
            .unwrap_or_default();
        if !keys.is_empty() && !base.contains(&keys) {
            base = format!("{base} {keys:?}");
        }
    }
    let result = action.get("result");
    let outcome = result.map(|r| text(r, "status")).unwrap_or_default();
    let outcome = outcome.trim_start_matches("RESULT_STATUS_").to_lowercase();
    let reason = result.map(|r| text(r, "error")).unwrap_or_default();
    match (outcome.as_str(), reason.is_empty()) {
        ("" | "success", _) => base,
        (_, true) => format!("{base} [{outcome}]"),
        (_, false) => format!("{base} [{outcome}: {reason}]"),
    }
}

/// The line of a step finished event when the step itself could not be read (its payload only).
pub fn step_event_line(event: &Event, payload: &Value) -> String {
    let before = text(payload, "state_before");
    let after = text(payload, "state_after");
    format!(
        "#{:<4} step {:>3}  {:<24} {before}→{after}",
        event.seq,
        event.step,
        text(payload, "agent_name")
    )
}

/// The line for an event other than STEP_FINISHED, prefixed with its sequence number (what
/// `ufo watch --from` takes); `None` for events too fine-grained to show.
pub fn event_line(event: &Event, payload: &Value) -> Option<String> {
    event_text(event, payload).map(|line| format!("#{:<4} {line}", event.seq))
}

fn event_text(event: &Event, payload: &Value) -> Option<String> {
    let kind = EventKind::try_from(event.kind).unwrap_or(EventKind::Unspecified);
    let line = match kind {
        EventKind::TaskCreated => "task created".to_owned(),
        EventKind::TaskClaimed => format!("claimed by {}", text(payload, "worker")),
        EventKind::RoundStarted => format!(
            "round {} started {}",
            event.round,
            quoted(payload, "request")
        ),
        EventKind::QuestionAsked => format!(
            "question: {}",
            first_text(payload, &["question", "questions"])
        ),
        EventKind::QuestionAnswered => {
            format!("answered: {}", first_text(payload, &["answer", "answers"]))
        }
        EventKind::ActionHeld => {
            format!("action held for confirmation: {}", held_text(payload))
        }
        EventKind::ActionApproved => "held action approved".to_owned(),
        EventKind::ActionRejected => "held action rejected".to_owned(),
        EventKind::RoundFinished => format!(
            "round {} finished {}",
            event.round,
            quoted(payload, "result")
        ),
        EventKind::TaskFinished => format!("task finished {}", quoted(payload, "result")),
        EventKind::TaskFailed => format!("task failed {}", quoted(payload, "result")),
        EventKind::TaskCancelled => format!("task cancelled {}", quoted(payload, "reason")),
        EventKind::RequestAdded => format!("follow-up request {}", quoted(payload, "request")),
        EventKind::CancelRequested => "cancel requested".to_owned(),
        EventKind::Warning => format!("warning: {}", text(payload, "message")),
        EventKind::KnowledgeRetrieved => format!(
            "knowledge retrieved for {}: {}",
            text(payload, "agent"),
            payload
                .get("sources")
                .and_then(Value::as_array)
                .map(|s| s
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
        EventKind::TaskReleased => {
            "task released by its runner (another will resume it)".to_owned()
        }
        EventKind::TaskParked => format!(
            "waiting for a person ({}): runner slot given up until then",
            match text(payload, "reason").as_str() {
                "approval" => "a decision on the held action",
                _ => "answers",
            }
        ),
        EventKind::TakeoverRequested => format!(
            "{} took the desktop over: the agents pause at the next step (`ufo handback`)",
            text(payload, "by")
        ),
        EventKind::PersonInput => format!("{}'s input queued for the desktop", text(payload, "by")),
        EventKind::HandedBack => format!(
            "{} handed the desktop back: the agents observe again",
            text(payload, "by")
        ),
        // Every hold is recorded twice (CONFIRMATION_REQUESTED and ACTION_HELD): one line is enough.
        EventKind::ConfirmationRequested
        | EventKind::StepStarted
        | EventKind::StepFinished
        | EventKind::PhaseTiming
        | EventKind::Unspecified => return None,
    };
    Some(line.trim_end().to_owned())
}

fn quoted(payload: &Value, key: &str) -> String {
    let value = text(payload, key);
    if value.is_empty() {
        String::new()
    } else {
        format!("— {value}")
    }
}

fn first_text(payload: &Value, keys: &[&str]) -> String {
    keys.iter()
        .map(|k| match payload.get(*k) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" | "),
            _ => text(payload, k),
        })
        .find(|t| !t.is_empty())
        .unwrap_or_default()
}

/// A held action in words: function, target, reason.
pub fn held_text(held: &Value) -> String {
    let function = text(held, "function");
    let target = text(held, "target_name");
    let reason = text(held, "reason");
    let mut out = if function.is_empty() {
        "an action".to_owned()
    } else {
        function
    };
    if !target.is_empty() {
        out.push_str(&format!(" on {target}"));
    }
    if !reason.is_empty() {
        out.push_str(&format!(" ({reason})"));
    }
    out
}

/// A multi-line summary of a task (`GET /v1/tasks/{id}`).
pub fn task_summary(task: &Value) -> String {
    let mut lines = vec![
        format!("task     {}", text(task, "id")),
        format!("request  {}", text(task, "request")),
        format!("status   {}", status_word(&text(task, "status"))),
    ];
    if text(task, "kind") == "direct" {
        lines.push("kind     direct: an MCP client's desktop calls, one step each".to_owned());
    }
    if text(task, "kind") == "demonstration" {
        lines.push(
            "kind     demonstration: a person's actions recorded by ufo record, one step each with \
             its screenshot"
                .to_owned(),
        );
    }
    if let Some(why) = waiting_text(task) {
        lines.push(format!("waiting  {why}"));
    }
    let state = text(task, "state");
    if !state.is_empty() {
        lines.push(format!("state    {state}"));
    }
    if let Some(totals) = task.get("totals") {
        lines.push(format!(
            "totals   {} steps, {}, {} input + {} output tokens",
            text(totals, "steps"),
            cost(number(totals, "cost").unwrap_or(0.0)),
            text(totals, "input_tokens"),
            text(totals, "output_tokens"),
        ));
    }
    if let Some(questions) = task.get("pending_questions").and_then(Value::as_array) {
        for q in questions {
            lines.push(format!("question {}", text(q, "question")));
        }
    }
    if let Some(held) = task.get("held_action").filter(|h| h.is_object()) {
        lines.push(format!("held     {}", held_text(held)));
    }
    if let Some(r) = task.get("replay").filter(|r| r.is_object()) {
        lines.push(format!(
            "replay   of {} (on mismatch: {}): {} steps replayed, {} fell back to the model",
            text(r, "of"),
            text(r, "on_mismatch"),
            text(r, "replayed"),
            text(r, "fell_back"),
        ));
    }
    if let Some(r) = task.get("reuse").filter(|r| r.is_object()) {
        lines.push(format!(
            "reuse    of {} (score {}): {} steps reused, {} fell back to the model",
            text(r, "of"),
            text(r, "score"),
            text(r, "reused"),
            text(r, "fell_back"),
        ));
    }
    let result = text(task, "result");
    if !result.is_empty() {
        lines.push(format!("result   {result}"));
    }
    let pruned = text(task, "images_pruned_at");
    if !pruned.is_empty() {
        lines.push(format!("images   pruned at {pruned} (steps kept)"));
    }
    lines.join("\n")
}

/// One line per task for `ufo tasks`.
/// What a queued or waiting task waits for (the API's `waiting_for`), in words.
pub fn waiting_text(task: &Value) -> Option<String> {
    let waiting = task.get("waiting_for").filter(|w| w.is_object())?;
    Some(match text(waiting, "reason").as_str() {
        "runner_slot" => match waiting.get("place").and_then(Value::as_u64) {
            Some(place) => format!("for a runner slot (place {place} in the queue)"),
            None => "for a runner slot".to_owned(),
        },
        "desktop" => match waiting.get("place").and_then(Value::as_u64) {
            Some(place) => format!("for a free desktop (place {place} in the queue)"),
            None => "for a free desktop".to_owned(),
        },
        "question" => "for a person to answer (no runner slot held; `ufo answer`)".to_owned(),
        "approval" => {
            "for a person to approve or reject the held action (no runner slot held; `ufo confirm --approve` or `--reject`)"
                .to_owned()
        }
        other => format!("for {other}"),
    })
}

pub fn task_row(task: &Value) -> String {
    let steps = task
        .get("totals")
        .map(|t| text(t, "steps"))
        .unwrap_or_default();
    let request: String = text(task, "request").chars().take(60).collect();
    format!(
        "{:<36}  {:<9}  {:>5} steps  {}",
        text(task, "id"),
        status_word(&text(task, "status")),
        steps,
        request
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_warning_event_is_a_line_with_its_message() {
        let event = Event {
            seq: 7,
            kind: EventKind::Warning as i32,
            ..Event::default()
        };
        let payload = json!({"source": "app_agent", "message": "visual grounding failed: timeout"});
        assert_eq!(
            event_line(&event, &payload).as_deref(),
            Some("#7    warning: visual grounding failed: timeout")
        );
    }

    #[test]
    fn a_step_line_shows_agent_state_action_and_cost() {
        let step = json!({
            "step": 4, "agent_name": "AppAgent/mousepad", "state_before": "CONTINUE", "state_after": "FINISH",
            "actions": [{"function": "set_edit_text", "target_name": "Text", "result": {"status": "success"}},
                        {"representation": "keyboard_input ctrl+s", "result": {"status": "failure", "error": "no window has focus"}},
                        {"function": "keyboard_input", "arguments": {"keys": "hello"}, "result": {"status": "success"}}],
            "cost": 0.00213
        });
        let line = step_line(&step);
        for part in [
            "step   4",
            "AppAgent/mousepad",
            "CONTINUE→FINISH",
            "set_edit_text on Text",
            "keyboard_input ctrl+s [failure: no window has focus]",
            "keyboard_input \"hello\"",
            "$0.0021",
        ] {
            assert!(line.contains(part), "{part:?} missing in {line:?}");
        }
    }

    #[test]
    fn knowledge_a_step_used_is_a_line_and_none_is_no_line() {
        let step = json!({"step": 2, "knowledge": [
            {"kind": "document", "source": "notes-help.md", "title": "Copying", "score": 3.04159},
            {"kind": "web", "source": "https://example.org/copy", "title": "Copy", "score": 0.0}]});
        assert_eq!(
            knowledge_line(&step).as_deref(),
            Some(
                "          knowledge used: notes-help.md (document, 3.04); https://example.org/copy (web)"
            )
        );
        assert_eq!(knowledge_line(&json!({"step": 2})), None);
        assert_eq!(knowledge_line(&json!({"knowledge": []})), None);
        let event = Event {
            seq: 9,
            kind: EventKind::KnowledgeRetrieved as i32,
            ..Event::default()
        };
        let payload = json!({"agent": "AppAgent/notes", "sources": ["notes-help.md", "task:1"]});
        assert_eq!(
            event_line(&event, &payload).as_deref(),
            Some("#9    knowledge retrieved for AppAgent/notes: notes-help.md, task:1")
        );
    }

    #[test]
    fn statuses_read_the_same_in_both_spellings() {
        assert_eq!(status_word("SESSION_STATUS_WAITING"), "waiting");
        assert!(is_terminal("FINISHED") && is_terminal("cancelled") && !is_terminal("running"));
    }

    #[test]
    fn fine_grained_events_are_not_shown() {
        let event = Event {
            kind: EventKind::PhaseTiming as i32,
            ..Event::default()
        };
        assert!(event_line(&event, &json!({})).is_none());
        let twin = Event {
            kind: EventKind::ConfirmationRequested as i32,
            ..Event::default()
        };
        assert!(
            event_line(&twin, &json!({})).is_none(),
            "ACTION_HELD says it"
        );
        let held = Event {
            kind: EventKind::ActionHeld as i32,
            seq: 17,
            ..Event::default()
        };
        let line = event_line(
            &held,
            &json!({"function": "click_input", "target_name": "Delete", "reason": "irreversible"}),
        )
        .unwrap();
        assert_eq!(
            line,
            "#17   action held for confirmation: click_input on Delete (irreversible)"
        );
    }
}
