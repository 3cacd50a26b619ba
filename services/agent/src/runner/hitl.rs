//! The human-in-the-loop protocol over the session store, shared by the API (which writes answers and
//! decisions) and the runner (which asks, holds and waits). It lives entirely in the store, so any replica
//! can serve the person and any runner can resume the wait after a crash. Each fact is written once:
//!
//! - What a task waits for is the newest step's control value ([`crate::round::control::Next::Ask`] or
//!   [`crate::round::control::Next::Hold`], with stable ids).
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

use crate::round::Decision;
use crate::round::control::{HeldAction, Next};
use crate::round::output::draft;

/// The value of `key` in an entry's value or an event's payload.
fn get(value: &Option<prost_types::Struct>, key: &str) -> Json {
    value
        .as_ref()
        .and_then(|v| v.fields.get(key))
        .map(|v| ufo_proto::json::from_value(v.clone()))
        .unwrap_or(Json::Null)
}

/// The answer recorded for question `index`, if any (the first one wins).
pub fn answer_of(board: &Blackboard, index: u64) -> Option<String> {
    board.questions.iter().find_map(|e| {
        let covers = e.index == index || get(&e.value, "answers").as_u64() == Some(index);
        match (covers, get(&e.value, "answer")) {
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
        .filter(|e| get(&e.value, "answers").is_null())
        .filter(|e| answer_of(board, e.index).is_none())
        .map(|e| PendingQuestion {
            index: e.index,
            question: get(&e.value, "question")
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            id: get(&e.value, "id").as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

/// What a step whose control value is `next` writes with it: the entries and QUESTION_ASKED events of
/// the questions it asks, or the ACTION_HELD and CONFIRMATION_REQUESTED events of the action it holds.
pub fn writes(next: &Next) -> (Vec<BlackboardEntry>, Vec<EventDraft>) {
    match next {
        Next::Ask { questions } => questions
            .iter()
            .map(|q| {
                let asked = json!({ "id": q.id, "question": q.text });
                (
                    entry(json!({ "question": q.text, "answer": null, "id": q.id })),
                    draft(EventKind::QuestionAsked, asked, 0),
                )
            })
            .unzip(),
        Next::Hold { action } => (Vec::new(), held_events(action)),
        Next::Continue { .. } | Next::Finish { .. } | Next::Fail { .. } => Default::default(),
    }
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
        .filter_map(|e| Some((e.index, get(&e.value, "id").as_str()?.to_owned())))
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

/// The decision `event` records, with the step that held the action (the first one for a step wins).
pub fn decision_of(event: &Event) -> Option<(u64, Decision)> {
    let approve = match EventKind::try_from(event.kind) {
        Ok(EventKind::ActionApproved) => true,
        Ok(EventKind::ActionRejected) => false,
        _ => return None,
    };
    let step = get(&event.payload, "step").as_u64().unwrap_or(event.step);
    let reason = get(&event.payload, "reason");
    let reason = reason.as_str().unwrap_or_default().to_owned();
    Some((step, Decision { approve, reason }))
}

/// The decision on the action held at `step` among the session's events up to `seen` (its newest when
/// read), if one was made.
pub async fn decision_in_store(
    client: &crate::store::client::SessionClient,
    session_id: &str,
    step: u64,
    seen: u64,
) -> Result<Option<Decision>, tonic::Status> {
    use futures::StreamExt as _;
    if seen == 0 {
        return Ok(None);
    }
    let request = ufo_proto::v1::WatchEventsRequest {
        session_id: session_id.to_owned(),
        from_seq: 1,
        kinds: Vec::new(),
    };
    let mut events = client.clone().watch_events(request).await?.into_inner();
    while let Some(event) = events.next().await {
        let event = event?;
        if let Some((held_at, decision)) = decision_of(&event)
            && held_at == step
        {
            return Ok(Some(decision));
        }
        if event.seq >= seen {
            break;
        }
    }
    Ok(None)
}
