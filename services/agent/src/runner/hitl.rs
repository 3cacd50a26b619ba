//! The human-in-the-loop protocol over the session store, shared by the API (which writes answers and
//! decisions) and the runner (which asks, holds and waits). It lives entirely in the store, so any replica
//! can serve the person and any runner can resume the wait after a crash. Each fact is written once:
//!
//! - What a task waits for is the newest step's control value ([`crate::control::Next::Ask`] or
//!   [`crate::control::Next::Hold`], with stable ids).
//! - A question is a blackboard QUESTION entry `{question, answer: null, id}` written by the runner with the
//!   step that asks it, plus one QUESTION_ASKED event `{id, question}`.
//! - An answer is one QUESTION entry `{question, answer, answers: <index of the question>, id}` plus one
//!   QUESTION_ANSWERED event `{index, id, answer}`, written by the API (or by the runner's timeout
//!   fallback); the blackboard is append-only, so answers never rewrite.
//! - A held action is one ACTION_HELD and one CONFIRMATION_REQUESTED event written by the runner with the
//!   step that proposed it; a decision is one ACTION_APPROVED / ACTION_REJECTED event `{step, id, reason}`
//!   written by the API (or by the runner when the confirmation times out).

use std::collections::HashMap;

use serde_json::{Value as Json, json};
use ufo_proto::v1::{
    Blackboard, BlackboardEntry, BlackboardKind, Event, EventDraft, EventKind, PendingQuestion,
};

use crate::control::{HeldAction, Question};
use crate::round::Decision;

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
            id: field(e, "id").as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

/// Blackboard entries that ask `questions` (written with the asking step).
pub fn question_entries(questions: &[Question]) -> Vec<BlackboardEntry> {
    questions
        .iter()
        .map(|q| entry(json!({ "question": q.text, "answer": null, "id": q.id })))
        .collect()
}

/// The QUESTION_ASKED events of `questions`.
pub fn question_events(questions: &[Question], step: u64) -> Vec<EventDraft> {
    questions
        .iter()
        .map(|q| {
            draft(
                EventKind::QuestionAsked,
                json!({ "id": q.id, "question": q.text }),
                step,
            )
        })
        .collect()
}

/// Entries and events that answer `pending` with `answers` (same order), one of each per answer.
pub fn answer_writes(
    board: &Blackboard,
    pending: &[PendingQuestion],
    answers: &[String],
) -> (Vec<BlackboardEntry>, Vec<EventDraft>) {
    let ids: HashMap<u64, String> = board
        .questions
        .iter()
        .filter_map(|e| Some((e.index, field(e, "id").as_str()?.to_owned())))
        .collect();
    pending
        .iter()
        .zip(answers)
        .map(|(q, a)| {
            let id = ids.get(&q.index).cloned().unwrap_or_default();
            (
                entry(json!({ "question": q.question, "answer": a, "answers": q.index, "id": id })),
                draft(
                    EventKind::QuestionAnswered,
                    json!({ "index": q.index, "id": id, "answer": a }),
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

/// The ACTION_HELD and CONFIRMATION_REQUESTED events for `held`.
pub fn held_events(held: &HeldAction) -> Vec<EventDraft> {
    vec![
        draft(
            EventKind::ActionHeld,
            json!({
                "id": held.id,
                "agent_name": held.agent_name,
                "function": held.function,
                "arguments_json": held.arguments_json,
                "target_name": held.target_name,
                "reason": held.reason,
                "step": held.step,
            }),
            held.step,
        ),
        draft(
            EventKind::ConfirmationRequested,
            json!({"id": held.id, "function": held.function, "reason": held.reason}),
            held.step,
        ),
    ]
}

/// The decision event for `held`.
pub fn decision_event(held: &HeldAction, approve: bool, reason: &str) -> EventDraft {
    let kind = if approve {
        EventKind::ActionApproved
    } else {
        EventKind::ActionRejected
    };
    draft(
        kind,
        json!({ "step": held.step, "id": held.id, "reason": reason }),
        held.step,
    )
}

fn payload(event: &Event, key: &str) -> Json {
    event
        .payload
        .as_ref()
        .and_then(|p| p.fields.get(key))
        .map(|v| ufo_proto::json::from_value(v.clone()))
        .unwrap_or(Json::Null)
}

/// The decisions seen in the event log, by the step that held the action (the first one wins).
#[derive(Debug, Default, Clone)]
pub struct Decisions(HashMap<u64, Decision>);

impl Decisions {
    /// Applies one event (in sequence order); true when it was a new decision.
    pub fn apply(&mut self, event: &Event) -> bool {
        let approve = match EventKind::try_from(event.kind) {
            Ok(EventKind::ActionApproved) => true,
            Ok(EventKind::ActionRejected) => false,
            _ => return false,
        };
        let step = payload(event, "step").as_u64().unwrap_or(event.step);
        if self.0.contains_key(&step) {
            return false;
        }
        let reason = payload(event, "reason")
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.0.insert(step, Decision { approve, reason });
        true
    }

    /// The decision on the action held at `step`.
    pub fn get(&self, step: u64) -> Option<&Decision> {
        self.0.get(&step)
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

    fn questions(texts: &[&str]) -> Vec<Question> {
        let mut next = crate::control::Next::ask(texts.iter().map(|t| (*t).to_owned()));
        next.assign_ids(2);
        match next {
            crate::control::Next::Ask { questions } => questions,
            _ => unreachable!(),
        }
    }

    #[test]
    fn answered_questions_are_not_pending() {
        let mut entries = question_entries(&questions(&["which file?", "which format?"]));
        let b = board(entries.clone());
        let pending = pending_questions(&b);
        assert_eq!(pending.len(), 2);
        let (answers, events) = answer_writes(&b, &pending[..1], &["a.txt".into()]);
        assert_eq!(events.len(), 1);
        assert_eq!(answers.len(), 1);
        assert_eq!(field(&answers[0], "id"), json!("q2-1"));
        entries.extend(answers);
        let b = board(entries);
        let pending = pending_questions(&b);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].question, "which format?");
        assert_eq!(answer_of(&b, 0).as_deref(), Some("a.txt"));
        assert_eq!(answer_of(&b, 1), None);
    }

    #[test]
    fn the_first_decision_wins_with_its_reason() {
        let held = HeldAction {
            id: "h3".into(),
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
        let mut seen = Decisions::default();
        assert_eq!(held_events(&held).len(), 2);
        assert!(!seen.apply(&as_event(held_events(&held).remove(0))));
        assert_eq!(seen.get(3), None);
        assert!(seen.apply(&as_event(decision_event(&held, false, "not that one"))));
        assert!(!seen.apply(&as_event(decision_event(&held, true, ""))));
        let first = seen.get(3).unwrap();
        assert!(!first.approve);
        assert_eq!(first.reason, "not that one");
    }
}
