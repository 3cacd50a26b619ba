//! What the runner and the API exchange through the session store, as stored: a step's typed control
//! value keeps a held action of either agent with what running it needs, and the human-in-the-loop
//! records (questions, answers, holds, decisions) read back as the protocol says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;

use serde_json::json;
use ufo_agent::agents::response::{ActionSpec, HostResponse};
use ufo_agent::agents::target::{Rect, TargetInfo, TargetKind};
use ufo_agent::round::control::{HeldAction, Next, StepControl};
use ufo_agent::round::state::{AppStatus, HostStatus};
use ufo_agent::round::{Held, RoundState};
use ufo_agent::runner::hitl::{
    answer_of, answer_writes, decision_event, decision_of, held_events, pending_questions, writes,
};
use ufo_proto::v1::{Blackboard, BlackboardEntry, Event, EventDraft};

fn control(label: &str, name: &str) -> TargetInfo {
    let mut c = TargetInfo::third_party(name);
    c.label = label.into();
    c.id = format!("id-{label}");
    c.kind = TargetKind::Control;
    c.control_type = "Button".into();
    c.rect = Some(Rect::new(1, 2, 30, 40));
    c
}

fn round_trip(held: Held) -> Held {
    let mut next = Next::Hold {
        action: HeldAction {
            function: "f".into(),
            ..Default::default()
        },
    };
    next.assign_ids(4);
    let stored = StepControl {
        next,
        round: Some(Box::new(RoundState {
            active: None,
            window: None,
            subtask: "s".into(),
            host_message: String::new(),
            replans: 1,
            held: Some(held),
            third_party: None,
        })),
    };
    let mut step = ufo_proto::v1::Step::default();
    stored.write(&mut step);
    let back = StepControl::of(&step).unwrap();
    assert_eq!(back, stored);
    back.round.unwrap().held.unwrap()
}

#[test]
fn a_held_app_action_round_trips() {
    let mut arguments = serde_json::Map::new();
    arguments.insert("id".into(), json!("2"));
    let held = Held::App {
        actions: vec![ActionSpec {
            function: "click_input".into(),
            arguments,
            status: AppStatus::Confirm,
        }],
        controls: vec![control("2", "Delete")],
        status: AppStatus::Confirm,
        result: "deleted".into(),
        questions: vec![],
    };
    assert_eq!(round_trip(held.clone()), held);
}

#[test]
fn a_held_host_action_keeps_its_targets() {
    let mut response = HostResponse {
        observation: "o".into(),
        thought: "t".into(),
        status: HostStatus::Confirm,
        function: "launch_application".into(),
        ..Default::default()
    };
    response.arguments.insert("name".into(), json!("notes"));
    let held = Held::Host {
        response: Box::new(response),
        targets: vec![control("x", "A"), control("y", "B")],
    };
    assert_eq!(round_trip(held.clone()), held);
}

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
    let mut next = Next::ask(["which file?".to_owned(), "which format?".to_owned()]);
    next.assign_ids(2);
    let (mut entries, asked) = writes(&next);
    assert_eq!(asked.len(), 2);
    let b = board(entries.clone());
    let pending = pending_questions(&b);
    assert_eq!(pending.len(), 2);
    let (answers, events) = answer_writes(&b, &pending[..1], &["a.txt".into()]);
    assert_eq!(events.len(), 1);
    assert_eq!(answers.len(), 1);
    let answer = ufo_proto::json::from_optional_struct(answers[0].value.clone());
    assert_eq!(answer["id"], json!("q2-1"));
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
    assert_eq!(held_events(&held).len(), 2);
    assert_eq!(decision_of(&as_event(held_events(&held).remove(0))), None);
    // The runner's event follower keeps the first decision per held step.
    let mut seen = HashMap::new();
    for decision in [
        decision_event(&held, false, "not that one"),
        decision_event(&held, true, ""),
    ] {
        let (step, d) = decision_of(&as_event(decision)).unwrap();
        seen.entry(step).or_insert(d);
    }
    let first = &seen[&3];
    assert!(!first.approve);
    assert_eq!(first.reason, "not that one");
}
