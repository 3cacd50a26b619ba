//! The task runner and the gRPC stream end to end: the real session service on a fresh Postgres database,
//! the agent's REST + gRPC servers and runner in-process (or as separate processes: this test binary
//! re-executes itself as a runner child for the SIGKILL and two-runner tests), the scripted
//! [`api_support::driver::ScriptDriver`] standing in for the agents.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::api_support;
use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, Api, KEY, Session, agent_config, eventually};
use futures::StreamExt as _;
use serde_json::{Value, json};
use ufo_proto::v1::agent_service_client::AgentServiceClient;
use ufo_proto::v1::{Event, EventKind, ListStepsRequest, StreamStepsRequest};

/// No executor runs in these tests: the desktop pool checks the default desktop in without a reset.
const RUNNER_FLAGS: &[&str] = &[
    "--no-desktop-reset",
    "--lease-ms",
    "1500",
    "--claim-interval-ms",
    "50",
    "--drain-ms",
    "2000",
];

async fn grpc(agent: &Agent) -> AgentServiceClient<tonic::transport::Channel> {
    AgentServiceClient::connect(agent.grpc.clone())
        .await
        .unwrap()
}

fn authed<T>(message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    req
}

async fn stream(agent: &Agent, id: &str, from_seq: u64, take: Option<usize>) -> Vec<Event> {
    let mut client = grpc(agent).await;
    let mut s = client
        .stream_steps(authed(StreamStepsRequest {
            task_id: id.into(),
            from_seq,
        }))
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(event) = s.next().await {
        out.push(event.unwrap());
        if take.is_some_and(|n| out.len() >= n) {
            break;
        }
    }
    out
}

fn count(events: &[Event], kind: EventKind) -> usize {
    events.iter().filter(|e| e.kind == kind as i32).count()
}

fn assert_gapless(events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "events must have no gap");
    }
}

async fn start(session: &Session) -> Agent {
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        honour_block: true,
        ..Default::default()
    });
    Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await
}

#[tokio::test]
async fn a_task_runs_to_the_end_and_streams_its_steps_resumably() {
    let session = Session::start().await;
    let agent = start(&session).await;
    let api = Api::new(&agent);
    let id = api
        .submit(json!({"request": "steps=3 open the editor"}))
        .await;
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["result"], "done after 3 steps");
    assert_eq!(task["totals"]["steps"], 3);
    let steps = api.steps(&id).await;
    assert_eq!(
        steps
            .iter()
            .map(|s| s["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(steps[0]["screenshots"], json!(["clean"]));

    // The stream replays everything and ends with the task; resuming after seq N misses nothing.
    let full = stream(&agent, &id, 1, None).await;
    assert_gapless(&full);
    assert_eq!(full.last().unwrap().kind, EventKind::TaskFinished as i32);
    assert_eq!(count(&full, EventKind::StepFinished), 3);
    let head = stream(&agent, &id, 1, Some(4)).await;
    let tail = stream(&agent, &id, head.last().unwrap().seq + 1, None).await;
    let joined: Vec<u64> = head.iter().chain(&tail).map(|e| e.seq).collect();
    assert_eq!(joined, full.iter().map(|e| e.seq).collect::<Vec<_>>());

    // A follow-up request opens round 2 in the same session and runs it.
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{id}/requests"),
            Some(json!({"request": "steps=1 save it"})),
        )
        .await;
    assert_eq!(status, 202);
    let task = eventually(60, "round 2 finished", || async {
        let t = api.task(&id).await;
        (t["status"] == "finished" && t["rounds"][1]["status"] == "finished").then_some(t)
    })
    .await;
    assert_eq!(task["totals"]["steps"], 4);
    assert_eq!(task["result"], "done after 1 steps");

    // gRPC errors name the field.
    let err = grpc(&agent)
        .await
        .stream_steps(authed(StreamStepsRequest {
            task_id: "nope".into(),
            from_seq: 0,
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("task_id"));
    let err = grpc(&agent)
        .await
        .get_task(tonic::Request::new(ufo_proto::v1::GetTaskRequest {
            task_id: id.clone(),
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn questions_confirmations_cancel_and_limits() {
    let session = Session::start().await;
    let agent = start(&session).await;
    let api = Api::new(&agent);

    let asks = api.submit(json!({"request": "steps=3 ask=1"})).await;
    let held = api.submit(json!({"request": "steps=3 hold=1"})).await;
    let rejected = api.submit(json!({"request": "steps=3 hold=2"})).await;
    let limited = api
        .submit(json!({"request": "steps=9", "limits": {"max_steps": 2}}))
        .await;

    let task = api.wait_status(&asks, "waiting").await;
    assert_eq!(task["pending_questions"][0]["question"], "which name?");
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{asks}/answers"),
            Some(json!({"answers": ["notes.txt"], "question_ids": [task["pending_questions"][0]["id"]]})),
        )
        .await;
    assert_eq!(status, 200);
    api.wait_status(&asks, "finished").await;
    assert_eq!(
        api.steps(&asks).await[1]["thought"],
        "the person answered notes.txt"
    );

    let task = api.wait_status(&held, "waiting").await;
    assert_eq!(task["held_action"]["function"], "click_input");
    // Through gRPC this time.
    let t = grpc(&agent)
        .await
        .confirm(authed(ufo_proto::v1::ConfirmRequest {
            task_id: held.clone(),
            approve: true,
            reason: String::new(),
            action_id: task["held_action"]["id"].as_str().unwrap().to_owned(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(t.held_action.is_none());
    api.wait_status(&held, "finished").await;
    assert_eq!(api.steps(&held).await[1]["thought"], "decision Some(true)");

    let task = api.wait_status(&rejected, "waiting").await;
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{rejected}/confirmation"),
            Some(json!({"approve": false, "action_id": task["held_action"]["id"]})),
        )
        .await;
    assert_eq!(status, 200);
    let task = api.wait_status(&rejected, "finished").await;
    assert_eq!(task["result"], "rejected by a person");

    let task = api.wait_status(&limited, "failed").await;
    assert_eq!(task["result"], "step limit of 2 reached");
    assert_eq!(task["totals"]["steps"], 2);

    // Cancel a task whose step is in flight: the step is dropped, the task ends CANCELLED.
    let blocked = api.submit(json!({"request": "steps=5 block=2"})).await;
    eventually(60, "step 1 recorded", || async {
        (api.task(&blocked).await["totals"]["steps"] == 1).then_some(())
    })
    .await;
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{blocked}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 202);
    let task = api.wait_status(&blocked, "cancelled").await;
    assert_eq!(task["totals"]["steps"], 1);
    let events = session.events(&blocked).await;
    assert_gapless(&events);
    assert_eq!(events.last().unwrap().kind, EventKind::TaskCancelled as i32);
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn buf_curl_streams_a_tasks_steps_through_reflection() {
    let session = Session::start().await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        honour_block: true,
        ..Default::default()
    });
    let mut flags = RUNNER_FLAGS.to_vec();
    flags.push("--grpc-reflection");
    let agent = Agent::start(agent_config(&session.url, &flags), Some(driver)).await;
    let api = Api::new(&agent);
    let id = api.submit(json!({"request": "steps=2"})).await;
    api.wait_status(&id, "finished").await;
    let output = tokio::process::Command::new("buf")
        .args([
            "curl",
            "--protocol",
            "grpc",
            "--http2-prior-knowledge",
            "-H",
            &format!("authorization: Bearer {KEY}"),
            "-d",
            &json!({"task_id": id, "from_seq": 1}).to_string(),
            &format!("{}/ufo.v1.AgentService/StreamSteps", agent.grpc),
        ])
        .output()
        .await
        .expect("buf is installed (npm @bufbuild/buf)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    let expected = session.events(&id).await;
    assert_eq!(events.len(), expected.len());
    assert_eq!(events.last().unwrap()["kind"], "EVENT_KIND_TASK_FINISHED");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["kind"] == "EVENT_KIND_STEP_FINISHED")
            .count(),
        2
    );
    agent.stop().await;
    session.stop().await;
}

/// The entry point of a runner child process (see [`spawn_runner`]); does nothing unless started as one.
#[tokio::test]
#[ignore = "runs only as a child process of the process tests"]
async fn runner_child() {
    let Ok(session_url) = std::env::var("UFO_TEST_CHILD_SESSION_URL") else {
        return;
    };
    let log = std::env::var("UFO_TEST_CHILD_ACTION_LOG").unwrap();
    let honour_block = std::env::var("UFO_TEST_CHILD_BLOCK").is_ok();
    let mut config = agent_config(&session_url, RUNNER_FLAGS);
    config.runner.slots = 2;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        action_log: Some(log.into()),
        honour_block,
        executor: std::env::var("UFO_TEST_CHILD_EXECUTOR").ok(),
        ..Default::default()
    });
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = ufo_common::shutdown::signal_token();
    ufo_agent::run(
        config,
        ufo_agent::Listeners { grpc, http },
        Some(driver),
        shutdown,
    )
    .await
    .unwrap();
}

fn spawn_runner(session: &Session, log: &std::path::Path, block: bool) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "api_runner::runner_child",
        "--nocapture",
    ])
    .env("UFO_TEST_CHILD_SESSION_URL", &session.url)
    .env("UFO_TEST_CHILD_ACTION_LOG", log)
    .kill_on_drop(true)
    .stdout(std::process::Stdio::null());
    if block {
        cmd.env("UFO_TEST_CHILD_BLOCK", "1");
    }
    cmd.spawn().unwrap()
}

fn action_log(path: &std::path::Path) -> Vec<(String, u64, u32)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut parts = l.split(' ');
            (
                parts.next().unwrap().to_owned(),
                parts.next().unwrap().parse().unwrap(),
                parts.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_task_survives_sigkill_of_its_runner() {
    let session = Session::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("actions");
    // The API only (no runner in this process).
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let api = Api::new(&api_agent);
    let id = api.submit(json!({"request": "steps=5 block=3"})).await;

    let mut first = spawn_runner(&session, &log, true);
    let first_pid = first.id().unwrap();
    // Step 3 is in flight: its action ran, its result is not recorded.
    eventually(60, "step 3 in flight", || async {
        action_log(&log)
            .iter()
            .any(|(t, s, _)| *t == id && *s == 3)
            .then_some(())
    })
    .await;
    assert_eq!(api.task(&id).await["totals"]["steps"], 2);
    first.kill().await.unwrap();

    let mut second = spawn_runner(&session, &log, false);
    let second_pid = second.id().unwrap();
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["result"], "done after 5 steps");

    let steps = session
        .client()
        .list_steps(ListStepsRequest {
            session_id: id.clone(),
            from_step: 1,
            limit: 100,
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    assert_eq!(
        steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5],
        "each step once"
    );
    // Step 3's action ran and its result was never recorded: the new runner recorded it from its intent,
    // outcome unknown, and step 4 observed again (it saw the 3 recorded steps). Nothing ran twice.
    assert_eq!(steps[2].comment, ufo_agent::runner::intent::UNKNOWN);
    assert_eq!(steps[2].actions[0].function, "script_action");
    assert_eq!(
        steps[3].observation,
        format!("pid {second_pid} saw 3 steps")
    );
    let ran: Vec<(u64, u32)> = action_log(&log)
        .into_iter()
        .filter(|(t, _, _)| *t == id)
        .map(|(_, step, pid)| (step, pid))
        .collect();
    assert_eq!(
        ran,
        [
            (1, first_pid),
            (2, first_pid),
            (3, first_pid),
            (4, second_pid),
            (5, second_pid)
        ]
    );
    assert_eq!(steps[1].observation, format!("pid {first_pid} saw 1 steps"));

    let events = session.events(&id).await;
    assert_gapless(&events);
    assert_eq!(count(&events, EventKind::StepFinished), 5);
    assert_eq!(count(&events, EventKind::TaskClaimed), 2);
    let stream = stream(&api_agent, &id, 1, None).await;
    assert_eq!(stream.len(), events.len(), "the stream shows every event");
    assert_gapless(&stream);

    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn an_approved_action_interrupted_by_sigkill_is_not_run_again() {
    let session = Session::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("actions");
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let api = Api::new(&api_agent);
    // Step 1 holds an action; step 2 runs it once approved, and blocks there (the runner is killed).
    let id = api
        .submit(json!({"request": "steps=4 hold=1 block=2"}))
        .await;
    let mut first = spawn_runner(&session, &log, true);
    let first_pid = first.id().unwrap();
    let task = api.wait_status(&id, "waiting").await;
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/tasks/{id}/confirmation"),
            Some(json!({"approve": true, "action_id": task["held_action"]["id"]})),
        )
        .await;
    assert_eq!(status, 200);
    eventually(60, "the approved action running", || async {
        action_log(&log)
            .iter()
            .any(|(t, s, _)| *t == id && *s == 2)
            .then_some(())
    })
    .await;
    first.kill().await.unwrap();

    let mut second = spawn_runner(&session, &log, false);
    let second_pid = second.id().unwrap();
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["result"], "done after 4 steps");

    let ran: Vec<(u64, u32)> = action_log(&log)
        .into_iter()
        .filter(|(t, _, _)| *t == id)
        .map(|(_, step, pid)| (step, pid))
        .collect();
    assert_eq!(
        ran,
        [
            (1, first_pid),
            (2, first_pid),
            (3, second_pid),
            (4, second_pid)
        ],
        "the approved action ran once, under the first runner"
    );
    let steps = api.steps(&id).await;
    assert_eq!(steps.len(), 4);
    // The second runner found the intent of step 2 without its step: recorded with an unknown outcome.
    assert_eq!(
        steps[1]["comment"],
        ufo_agent::runner::intent::UNKNOWN,
        "{}",
        steps[1]
    );
    assert_eq!(steps[1]["actions"][0]["function"], "script_action");
    let events = session.events(&id).await;
    assert_gapless(&events);
    let started: Vec<u64> = events
        .iter()
        .filter(|e| e.kind == EventKind::StepStarted as i32)
        .map(|e| e.step)
        .collect();
    assert_eq!(
        started,
        [1, 2, 3, 4],
        "one intent before each step's action, none replayed"
    );
    assert_eq!(count(&events, EventKind::StepFinished), 4);

    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn two_runner_processes_run_twenty_tasks_exactly_once() {
    let session = Session::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("actions");
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let api = Api::new(&api_agent);
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            api.submit(json!({"request": format!("steps=3 task {i}")}))
                .await,
        );
    }
    let mut a = spawn_runner(&session, &log, false);
    let mut b = spawn_runner(&session, &log, false);
    for id in &ids {
        api.wait_status(id, "finished").await;
    }
    let mut per_task: HashMap<String, Vec<u64>> = HashMap::new();
    let mut per_pid: HashMap<u32, usize> = HashMap::new();
    for (task, step, pid) in action_log(&log) {
        per_task.entry(task).or_default().push(step);
        *per_pid.entry(pid).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(
            per_task[id],
            [1, 2, 3],
            "task {id}: every step executed exactly once"
        );
        let events = session.events(id).await;
        assert_gapless(&events);
        assert_eq!(
            count(&events, EventKind::TaskClaimed),
            1,
            "task {id} claimed once"
        );
        assert_eq!(count(&events, EventKind::StepFinished), 3);
    }
    eprintln!("steps per runner process: {per_pid:?}");
    a.kill().await.unwrap();
    b.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_requeues_the_task_for_another_replica() {
    let session = Session::start().await;
    let first = start(&session).await;
    let api = Api::new(&first);
    // Step 2 never returns on a runner that honours `block`: shutdown abandons it after --drain-ms.
    let id = api.submit(json!({"request": "steps=3 block=2"})).await;
    eventually(60, "step 1 recorded", || async {
        (api.task(&id).await["totals"]["steps"] == 1).then_some(())
    })
    .await;
    first.stop().await;
    let released = eventually(30, "the task back in the queue", || async {
        let s = session
            .client()
            .get_session(ufo_proto::v1::GetSessionRequest {
                session_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        (s.status == ufo_proto::v1::SessionStatus::Queued as i32 && s.lease_owner.is_empty())
            .then_some(s)
    })
    .await;
    assert_eq!(
        released.totals.unwrap().steps,
        1,
        "the abandoned step was not recorded"
    );

    // Another replica (whose driver does not block) picks it up at step 2.
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    let second = Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await;
    let api = Api::new(&second);
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["totals"]["steps"], 3);
    let events = session.events(&id).await;
    assert_gapless(&events);
    assert_eq!(count(&events, EventKind::TaskReleased), 1);
    assert_eq!(count(&events, EventKind::StepFinished), 3);
    second.stop().await;
    session.stop().await;
}

/// Screenshots go one way: put into the session service's blob store (a directory, also with Postgres),
/// then referenced by their step, which serves them back.
#[tokio::test]
async fn screenshots_are_blobs_their_steps_reference() {
    let session = Session::start().await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    let agent = Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await;
    let api = Api::new(&agent);
    let id = api.submit(json!({"request": "steps=2 look"})).await;
    api.wait_status(&id, "finished").await;
    let steps = api.steps(&id).await;
    assert_eq!(steps.len(), 2);
    let png = api_support::driver::png();
    let hash = ufo_session::blob::BlobHash::of(&png);
    let blobs = ufo_session::blob::dir::DirBlobStore::open(&session.blob_dir).unwrap();
    use ufo_session::blob::BlobStore as _;
    assert_eq!(
        blobs.get(&hash).await.unwrap().as_ref(),
        png.as_slice(),
        "the screenshot is a blob in the session service's directory"
    );
    for n in 1..=2 {
        assert_eq!(steps[n - 1]["screenshots"], json!(["clean"]));
        let res = api
            .http
            .get(format!("{}/v1/tasks/{id}/steps/{n}/screenshot", api.base))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.bytes().await.unwrap().as_ref(), png.as_slice());
    }
    agent.stop().await;
    session.stop().await;
}

/// A screenshot larger than the session service's `--max-blob-bytes` fails the task with the service's
/// reason, and its step is not recorded half (no step without its screenshot).
#[tokio::test]
async fn a_screenshot_the_session_service_refuses_fails_the_task_with_its_reason() {
    let session = Session::start_with(|c| c.blobs.max_blob_bytes = 100_000).await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    let agent = Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await;
    let api = Api::new(&agent);
    let id = api.submit(json!({"request": "steps=2 shots=150000"})).await;
    let task = api.wait_status(&id, "failed").await;
    let result = task["result"].as_str().unwrap_or_default();
    assert!(result.contains("--max-blob-bytes"), "{task}");
    assert!(result.contains("clean screenshot"), "{task}");
    assert_eq!(task["totals"]["steps"], 0, "{task}");
    assert!(api.steps(&id).await.is_empty());
    agent.stop().await;
    session.stop().await;
}

/// A session service configured with a smaller message limit than the step's screenshots together: each
/// is its own PutBlob and the step carries only references, so the task goes on and every screenshot is
/// kept.
#[tokio::test]
async fn a_step_whose_screenshots_together_exceed_the_message_limit_is_recorded() {
    let session = Session::start_with(|c| c.max_message_bytes = 256 * 1024).await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    let agent = Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await;
    let api = Api::new(&agent);
    // Two 150 KB artifacts per step: each fits the limit, the two together do not.
    let id = api.submit(json!({"request": "steps=2 shots=150000"})).await;
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["totals"]["steps"], 2, "{task}");
    let steps = api.steps(&id).await;
    for n in 1..=2u64 {
        let mut kinds: Vec<String> = steps[n as usize - 1]["screenshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect();
        kinds.sort();
        assert_eq!(kinds, ["annotated", "clean"], "step {n}");
        for (i, kind) in ["clean", "annotated"].into_iter().enumerate() {
            let res = api
                .http
                .get(format!(
                    "{}/v1/tasks/{id}/steps/{n}/screenshot?kind={kind}",
                    api.base
                ))
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            assert_eq!(
                res.bytes().await.unwrap().as_ref(),
                api_support::driver::shot(n * 2 + i as u64, 150_000).as_slice(),
                "step {n} {kind}"
            );
        }
    }
    agent.stop().await;
}
