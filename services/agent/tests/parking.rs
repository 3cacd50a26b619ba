//! Parked tasks free their runner slot (issue 35): with one runner slot, a task waiting for a person (a
//! question, or an action held for approval) gives its slot up, other tasks run meanwhile, and the answer
//! or the decision queues it again; the task JSON says why a task is queued (a runner slot, with its
//! place in the queue) or waiting (a question or an approval). The real session service on a fresh
//! Postgres database, the agent's REST API and runner in-process with one slot, the scripted
//! [`api_support::driver::ScriptDriver`] standing in for the agents (`ask=K`, `hold=K`, `block=K`).
//! `cli --test up_parking` shows the same under `ufo up` with the real agents and a stand-in model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::api_support;
use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, Api, Session, agent_config};
use serde_json::json;
use ufo_proto::v1::{EventKind, WaitReason, WaitingFor};

/// No executor runs here: the desktop pool checks the default desktop in without a reset.
const ONE_SLOT: &[&str] = &[
    "--no-desktop-reset",
    "--runner-slots",
    "1",
    "--lease-ms",
    "1500",
    "--claim-interval-ms",
    "50",
];

async fn start(session: &Session) -> (Agent, Api) {
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        honour_block: true,
        ..Default::default()
    });
    let agent = Agent::start(agent_config(&session.url, ONE_SLOT), Some(driver)).await;
    let api = Api::new(&agent);
    (agent, api)
}

/// Answers `task`'s (`id`'s) first pending question with "notes.txt".
async fn answer_notes_txt(api: &Api, id: &str, task: &serde_json::Value) {
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{id}/answers"),
            Some(json!({"answers": ["notes.txt"], "question_ids": [task["pending_questions"][0]["id"]]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

fn count(events: &[ufo_proto::v1::Event], kind: EventKind) -> usize {
    events.iter().filter(|e| e.kind == kind as i32).count()
}

/// The API says what each task waits for: the parked one a person (its question), the queued ones a
/// runner slot with their places — which change when the answer queues the parked one again, ahead of
/// those submitted after it. Then the slot frees and every task finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_says_what_a_task_waits_for_and_its_place_in_the_queue() {
    let session = Session::start().await;
    let (agent, api) = start(&session).await;

    let asks = api.submit(json!({"request": "steps=2 ask=1"})).await;
    let task = api.wait_status(&asks, "waiting").await;
    assert_eq!(task["waiting_for"], json!({"reason": "question"}), "{task}");
    // gRPC says the same.
    let waiting = api_support::grpc_task(&agent, &asks).await.waiting_for;
    assert_eq!(
        waiting,
        Some(WaitingFor {
            reason: WaitReason::Question as i32,
            place: 0
        })
    );
    // The slot is free again: a task that never ends its first step takes it.
    let blocks = api.submit(json!({"request": "steps=5 block=1"})).await;
    api.wait_status(&blocks, "running").await;
    assert!(api.task(&blocks).await.get("waiting_for").is_none());
    let first = api.submit(json!({"request": "steps=1 first"})).await;
    let second = api.submit(json!({"request": "steps=1 second"})).await;
    let task = api.task(&first).await;
    assert_eq!(task["status"], "queued");
    assert_eq!(
        task["waiting_for"],
        json!({"reason": "runner_slot", "place": 1})
    );
    assert_eq!(
        api.task(&second).await["waiting_for"],
        json!({"reason": "runner_slot", "place": 2})
    );
    let waiting = api_support::grpc_task(&agent, &second).await.waiting_for;
    assert_eq!(
        waiting,
        Some(WaitingFor {
            reason: WaitReason::RunnerSlot as i32,
            place: 2
        })
    );
    assert_eq!(
        api_support::grpc_task(&agent, &blocks).await.waiting_for,
        None
    );
    // The list says it too.
    let listed = api.list().await;
    let of = |id: &str| {
        listed
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()
            .get("waiting_for")
            .cloned()
    };
    assert_eq!(of(&asks), Some(json!({"reason": "question"})));
    assert_eq!(
        of(&second),
        Some(json!({"reason": "runner_slot", "place": 2}))
    );
    assert_eq!(of(&blocks), None);

    // The answer queues the parked task again, in its old place: first in line.
    let task = api.task(&asks).await;
    answer_notes_txt(&api, &asks, &task).await;
    let task = api.wait_status(&asks, "queued").await;
    assert_eq!(
        task["waiting_for"],
        json!({"reason": "runner_slot", "place": 1})
    );
    assert_eq!(api.task(&first).await["waiting_for"]["place"], 2);
    assert_eq!(api.task(&second).await["waiting_for"]["place"], 3);

    // The blocking task ends; the others run in queue order and finish.
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{blocks}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 202);
    for id in [&asks, &first, &second] {
        let task = api.wait_status(id, "finished").await;
        assert!(task.get("waiting_for").is_none(), "{task}");
    }
    let (status, steps) = api
        .call(
            reqwest::Method::GET,
            &format!("/v1/tasks/{asks}/steps"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        steps["steps"][1]["thought"],
        "the person answered notes.txt"
    );
    let events = session.events(&asks).await;
    assert_eq!(count(&events, EventKind::TaskParked), 1);
    assert_eq!(count(&events, EventKind::TaskClaimed), 2);
    agent.stop().await;
    session.stop().await;
}

/// An action held for approval parks the same way: another task runs to its end while the decision is
/// awaited, and the approval queues the held task again; it runs the action and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_action_parks_its_task_until_the_decision() {
    let session = Session::start().await;
    let (agent, api) = start(&session).await;

    let held = api.submit(json!({"request": "steps=2 hold=1"})).await;
    let other = api.submit(json!({"request": "steps=2 meanwhile"})).await;
    let task = api.wait_status(&held, "waiting").await;
    assert_eq!(task["waiting_for"], json!({"reason": "approval"}), "{task}");
    let waiting = api_support::grpc_task(&agent, &held).await.waiting_for;
    assert_eq!(waiting.map(|w| w.reason), Some(WaitReason::Approval as i32));
    assert_eq!(task["held_action"]["function"], "click_input");
    api.wait_status(&other, "finished").await;
    assert_eq!(
        api.task(&held).await["status"],
        "waiting",
        "no decision yet"
    );

    let (status, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{held}/confirmation"),
            Some(json!({"approve": true, "action_id": task["held_action"]["id"]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    api.wait_status(&held, "finished").await;
    let (_, steps) = api
        .call(
            reqwest::Method::GET,
            &format!("/v1/tasks/{held}/steps"),
            None,
        )
        .await;
    assert_eq!(steps["steps"][1]["thought"], "decision Some(true)");
    let events = session.events(&held).await;
    assert_eq!(count(&events, EventKind::TaskParked), 1);
    assert_eq!(count(&events, EventKind::TaskClaimed), 2);
    // The parked task held no lease while the other one ran: the other's claim came after the park.
    let others = session.events(&other).await;
    let parked_at = events
        .iter()
        .find(|e| e.kind == EventKind::TaskParked as i32)
        .unwrap()
        .created_at
        .unwrap();
    let claimed_at = others
        .iter()
        .find(|e| e.kind == EventKind::TaskClaimed as i32)
        .unwrap()
        .created_at
        .unwrap();
    assert!(
        (claimed_at.seconds, claimed_at.nanos) >= (parked_at.seconds, parked_at.nanos),
        "the other task ran only once the slot was free"
    );
    agent.stop().await;
    session.stop().await;
}

/// An idle runner claims a new task, and a parked task its answer queues again, at once: with a claim
/// interval of ten minutes, both still run to their end within the test's deadline (the session service
/// signals the pool for each; before, they waited for the runner's next interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runner_claims_a_new_task_and_an_answered_one_at_once() {
    let session = Session::start().await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    let flags = [
        "--no-desktop-reset",
        "--runner-slots",
        "1",
        "--claim-interval-ms",
        "600000",
    ];
    let agent = Agent::start(agent_config(&session.url, &flags), Some(driver)).await;
    let api = Api::new(&agent);

    // The runner's first claim, at its start, found nothing; this task is the only news.
    let asks = api.submit(json!({"request": "steps=2 ask=1"})).await;
    let task = api.wait_status(&asks, "waiting").await;
    answer_notes_txt(&api, &asks, &task).await;
    api.wait_status(&asks, "finished").await;
    let events = session.events(&asks).await;
    assert_eq!(count(&events, EventKind::TaskParked), 1);
    assert_eq!(count(&events, EventKind::TaskClaimed), 2);
    // How long each wait for a claim took, from the store's own event times.
    let at = |kind: EventKind, nth: usize| {
        let t = events
            .iter()
            .filter(|e| e.kind == kind as i32)
            .nth(nth)
            .unwrap()
            .created_at
            .unwrap();
        t.seconds as f64 + f64::from(t.nanos) / 1e9
    };
    let answered = events
        .iter()
        .find(|e| e.kind == EventKind::QuestionAnswered as i32)
        .unwrap()
        .created_at
        .unwrap();
    let answered = answered.seconds as f64 + f64::from(answered.nanos) / 1e9;
    let first = at(EventKind::TaskClaimed, 0) - at(EventKind::TaskCreated, 0);
    let again = at(EventKind::TaskClaimed, 1) - answered;
    println!("created → claimed {first:.3} s, answered → claimed again {again:.3} s");
    assert!(
        first < 10.0 && again < 10.0,
        "claimed long after: {first} s, {again} s"
    );
    agent.stop().await;
    session.stop().await;
}
