//! The human-in-the-loop protocol over the session store, shared by the API (which writes answers and
//! decisions) and the runner (which asks, holds and waits). It lives entirely in the store, so any replica
//! can serve the person and any runner can resume the wait after a crash.
//!
//! - A question is a blackboard QUESTION entry `{question, answer: null}` written with the step that asks
//!   it, plus a QUESTION_ASKED event `{index, question}`.
//! - An answer is another QUESTION entry `{question, answer, answers: <index of the question>}` plus a
//!   QUESTION_ANSWERED event `{index, answer}`; the blackboard is append-only, so answers never rewrite.
//! - A held action is an ACTION_HELD event (payload: [`HeldAction`] fields) written with the step that
//!   proposed it; a decision is an ACTION_APPROVED / ACTION_REJECTED event `{step, reason}`.

use serde_json::{Value as Json, json};
use ufo_proto::v1::{
    Blackboard, BlackboardEntry, BlackboardKind, Event, EventDraft, EventKind, HeldAction,
    PendingQuestion,
};

fn field(entry: &BlackboardEntry, key: &str) -> Json {
    entry
        .value
        .as_ref()
        .and_then(|v| v.fields.get(key))
        .map(|v| ufo_proto::json::from_value(v.clone()))
        .unwrap_or(Json::Null)
}

/// The answer recorded for question `index`, if any (the first one wins).
pub fn answer_of(board: &Blackboard, index: u64) -> Option<String> {
    board.questions.iter().find_map(|e| {
        let covers = e.index == index || field(e, "answers").as_u64() == Some(index);
        match (covers, field(e, "answer")) {
            (true, Json::String(a)) => Some(a),
            _ => None,
        }
    })
}

/// The id a decision names for the action held at `step`. Decisions are keyed by the holding step, so a
/// newer held action (a later step) always has another id. (Derived here in one place so it can follow a
/// typed "held action" record once the runner stores one.)
pub fn held_action_id(step: u64) -> String {
    format!("held-{step}")
}

/// The id an answer names for the blackboard question at `index` (stable: the blackboard is append-only).
pub fn question_id(index: u64) -> String {
    format!("q-{index}")
}

/// Questions asked and not answered yet, in the order they were asked.
pub fn pending_questions(board: &Blackboard) -> Vec<PendingQuestion> {
    board
        .questions
        .iter()
        .filter(|e| field(e, "answers").is_null())
        .filter(|e| answer_of(board, e.index).is_none())
        .map(|e| PendingQuestion {
            index: e.index,
            question: field(e, "question").as_str().unwrap_or_default().to_owned(),
            id: question_id(e.index),
        })
        .collect()
}

/// Blackboard entries that ask `questions` (written with the asking step).
pub fn question_entries(questions: &[String]) -> Vec<BlackboardEntry> {
    questions
        .iter()
        .map(|q| entry(json!({ "question": q, "answer": null })))
        .collect()
}

/// Entries and events that answer `pending` with `answers` (same order).
pub fn answer_writes(
    pending: &[PendingQuestion],
    answers: &[String],
) -> (Vec<BlackboardEntry>, Vec<EventDraft>) {
    pending
        .iter()
        .zip(answers)
        .map(|(q, a)| {
            (
                entry(json!({ "question": q.question, "answer": a, "answers": q.index })),
                draft(
                    EventKind::QuestionAnswered,
                    json!({ "index": q.index, "answer": a }),
                    0,
                ),
            )
        })
        .unzip()
}

fn entry(value: Json) -> BlackboardEntry {
    BlackboardEntry {
        kind: BlackboardKind::Question as i32,
        value: ufo_proto::json::to_struct(value).ok(),
        ..Default::default()
    }
}

/// An event draft with a JSON payload.
pub fn draft(kind: EventKind, payload: Json, step: u64) -> EventDraft {
    EventDraft {
        kind: kind as i32,
        payload: ufo_proto::json::to_struct(payload).ok(),
        step,
        round: 0,
    }
}

/// The ACTION_HELD event for `held`.
pub fn held_event(held: &HeldAction) -> EventDraft {
    draft(
        EventKind::ActionHeld,
        json!({
            "agent_name": held.agent_name,
            "function": held.function,
            "arguments_json": held.arguments_json,
            "target_name": held.target_name,
            "reason": held.reason,
            "step": held.step,
        }),
        held.step,
    )
}

/// The decision event for the action held at `step`.
pub fn decision_event(step: u64, approve: bool, reason: &str) -> EventDraft {
    let kind = if approve {
        EventKind::ActionApproved
    } else {
        EventKind::ActionRejected
    };
    draft(kind, json!({ "step": step, "reason": reason }), step)
}

fn payload(event: &Event, key: &str) -> Json {
    event
        .payload
        .as_ref()
        .and_then(|p| p.fields.get(key))
        .map(|v| ufo_proto::json::from_value(v.clone()))
        .unwrap_or(Json::Null)
}

fn text(event: &Event, key: &str) -> String {
    payload(event, key).as_str().unwrap_or_default().to_owned()
}

/// Folds events into the held-action state: the newest held action without a decision, and decisions.
#[derive(Debug, Default, Clone)]
pub struct HoldState {
    held: Option<HeldAction>,
    decisions: Vec<(u64, bool)>,
}

impl HoldState {
    /// Applies one event (in sequence order).
    pub fn apply(&mut self, event: &Event) {
        match EventKind::try_from(event.kind) {
            Ok(EventKind::ActionHeld) => {
                let step = payload(event, "step").as_u64().unwrap_or(event.step);
                self.held = Some(HeldAction {
                    id: held_action_id(step),
                    agent_name: text(event, "agent_name"),
                    function: text(event, "function"),
                    arguments_json: text(event, "arguments_json"),
                    target_name: text(event, "target_name"),
                    reason: text(event, "reason"),
                    step,
                });
            }
            Ok(kind @ (EventKind::ActionApproved | EventKind::ActionRejected)) => {
                let step = payload(event, "step").as_u64().unwrap_or(event.step);
                if !self.decisions.iter().any(|(s, _)| *s == step) {
                    self.decisions
                        .push((step, kind == EventKind::ActionApproved));
                }
                if self.held.as_ref().is_some_and(|h| h.step == step) {
                    self.held = None;
                }
            }
            _ => {}
        }
    }

    /// The action waiting for a decision, if any.
    pub fn held(&self) -> Option<&HeldAction> {
        self.held.as_ref()
    }

    /// The decision on the action held at `step` (the first one wins).
    pub fn decision(&self, step: u64) -> Option<bool> {
        self.decisions
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, approve)| *approve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(entries: Vec<BlackboardEntry>) -> Blackboard {
        Blackboard {
            questions: entries
                .into_iter()
                .enumerate()
                .map(|(i, mut e)| {
                    e.index = i as u64;
                    e
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn answered_questions_are_not_pending() {
        let mut entries = question_entries(&["which file?".into(), "which format?".into()]);
        let pending = pending_questions(&board(entries.clone()));
        assert_eq!(pending.len(), 2);
        let (answers, events) = answer_writes(&pending[..1], &["a.txt".into()]);
        assert_eq!(events.len(), 1);
        entries.extend(answers);
        let b = board(entries);
        let pending = pending_questions(&b);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].question, "which format?");
        assert_eq!(answer_of(&b, 0).as_deref(), Some("a.txt"));
        assert_eq!(answer_of(&b, 1), None);
    }

    #[test]
    fn a_decision_clears_the_held_action() {
        let held = HeldAction {
            function: "click_input".into(),
            step: 3,
            ..Default::default()
        };
        let as_event = |d: EventDraft| Event {
            kind: d.kind,
            payload: d.payload,
            step: d.step,
            ..Default::default()
        };
        let mut state = HoldState::default();
        state.apply(&as_event(held_event(&held)));
        assert_eq!(state.held().map(|h| h.step), Some(3));
        assert_eq!(state.decision(3), None);
        state.apply(&as_event(decision_event(3, false, "no")));
        assert!(state.held().is_none());
        assert_eq!(state.decision(3), Some(false));
        state.apply(&as_event(decision_event(3, true, "")));
        assert_eq!(state.decision(3), Some(false), "the first decision wins");
    }
}
