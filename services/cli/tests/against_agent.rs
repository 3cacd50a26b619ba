//! The `ufo` binary against the real agent and session services (separate processes, SQLite store, no
//! runner slots so tasks stay where the test puts them): submit, list, show, API errors with their codes, a
//! wrong token, and `ufo run` following a task live until it is cancelled from another `ufo`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
use support::{command, out, ufo};

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use ufo_testkit::Cluster;

async fn cluster() -> Cluster {
    Cluster::builder()
        .agent_args(["--runner-slots", "0"])
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_submitted_listed_shown_and_errors_explained() {
    let cluster = cluster().await;

    let wrong = command(&cluster, "not-the-key", &["tasks"])
        .output()
        .await
        .unwrap();
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        out(&wrong).contains("rejected the token"),
        "{}",
        out(&wrong)
    );

    let submitted = ufo(
        &cluster,
        &["run", "--detach", "--max-steps", "7", "open mousepad"],
    )
    .await;
    assert!(submitted.status.success(), "{}", out(&submitted));
    let id = String::from_utf8(submitted.stdout)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(id.len(), 36, "a task id: {id:?}");

    let listed = ufo(&cluster, &["tasks"]).await;
    assert!(listed.status.success(), "{}", out(&listed));
    let listed = out(&listed);
    assert!(
        listed.contains(&id) && listed.contains("queued") && listed.contains("open mousepad"),
        "{listed}"
    );

    let queued = ufo(&cluster, &["tasks", "--status", "finished"]).await;
    assert!(out(&queued).contains("no tasks"), "{}", out(&queued));

    let shown = ufo(&cluster, &["show", &id]).await;
    assert!(shown.status.success(), "{}", out(&shown));
    assert!(out(&shown).contains("status   queued"), "{}", out(&shown));

    let json = ufo(&cluster, &["show", "--json", &id]).await;
    let task: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(task["id"], id.as_str());

    // No question is pending: the service's {code, message} reaches the user with the HTTP status.
    let answered = ufo(&cluster, &["answer", &id, "yes"]).await;
    assert_eq!(answered.status.code(), Some(1));
    assert!(out(&answered).contains("HTTP 409"), "{}", out(&answered));

    // A name that cannot be a task id is a plain error, not a UUID parser's.
    let bad = ufo(&cluster, &["show", "nonexist"]).await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        out(&bad).contains("no task nonexist: not a task id") && !out(&bad).contains("UUID"),
        "{}",
        out(&bad)
    );
    // `ufo health` pointed at the REST port says so (on main: a gRPC compression error).
    let health = ufo(&cluster, &["health", "--url", &cluster.rest_url]).await;
    assert_eq!(health.status.code(), Some(1));
    assert!(
        out(&health).contains("is the agent's REST API, not a gRPC port"),
        "{}",
        out(&health)
    );
    let health = ufo(&cluster, &["health", "--url", &cluster.grpc_url]).await;
    assert!(health.status.success(), "{}", out(&health));

    // A missing task is named as a task (the store calls it a session).
    let missing = ufo(&cluster, &["show", "00000000-0000-4000-8000-000000000000"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        out(&missing).contains("task 00000000-0000-4000-8000-000000000000 not found"),
        "{}",
        out(&missing)
    );
}

/// An event line split into its `#seq` (when shown) and its text.
fn event_line(line: &str) -> (Option<u64>, &str) {
    match line.strip_prefix('#') {
        Some(rest) => {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            (rest[..digits].parse().ok(), rest[digits..].trim_start())
        }
        None => (None, line),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_follows_a_task_live_until_another_ufo_cancels_it() {
    let cluster = cluster().await;
    let mut run = command(
        &cluster,
        &cluster.api_key,
        &["run", "--no-prompt", "write a poem"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let id = first
        .strip_prefix("task ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("first line names the task: {first}"))
        .to_owned();
    // The stream is open once the replay of the first event is printed.
    let created = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(event_line(&created), (Some(1), "task created"), "{created}");

    let cancelled = ufo(&cluster, &["cancel", &id, "--reason", "changed my mind"]).await;
    assert!(cancelled.status.success(), "{}", out(&cancelled));

    let mut rest = Vec::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        rest.push(line);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(2), "a cancelled task exits 2: {rest:?}");
    assert!(
        rest.iter()
            .any(|l| event_line(l).1.starts_with("task cancelled")),
        "{rest:?}"
    );
    assert!(rest.last().unwrap().starts_with("cancelled:"), "{rest:?}");

    // Watching the ended task replays it from any point and ends the same way.
    let watched = ufo(&cluster, &["watch", &id, "--from", "2"]).await;
    assert_eq!(watched.status.code(), Some(2), "{}", out(&watched));
    let watched = out(&watched);
    assert!(
        !watched.contains("task created") && watched.contains("task cancelled"),
        "{watched}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prompts_for_a_pending_question_and_answers_it_through_the_api() {
    use tokio::io::AsyncWriteExt as _;
    use ufo_proto::v1::session_store_client::SessionStoreClient;
    use ufo_proto::v1::{
        BeginRoundRequest, BlackboardEntry, BlackboardKind, ClaimTaskRequest, EventDraft,
        EventKind, RecordStepRequest, SessionStatus, SetSessionStatusRequest, Step,
    };

    let cluster = cluster().await;
    let submitted = ufo(&cluster, &["run", "--detach", "paint the wall"]).await;
    let id = String::from_utf8(submitted.stdout)
        .unwrap()
        .trim()
        .to_owned();

    // The runner's part, played through the real session service: it claims the task and records a step
    // that asks a question (its typed decision, the question entry and the event), then the task waits.
    let channel = tonic::transport::Endpoint::from_shared(cluster.session_url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut store = SessionStoreClient::new(channel);
    ufo_testkit::register_wanted_desktop(&mut store, &id)
        .await
        .unwrap();
    let claimed = store
        .claim_task(ClaimTaskRequest {
            worker_id: "w".into(),
            lease_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(claimed.id, id);
    store
        .begin_round(BeginRoundRequest {
            session_id: id.clone(),
            number: 1,
            lease_owner: "w".into(),
        })
        .await
        .unwrap();
    let control = serde_json::json!({"ufo_control": {"next": {"kind": "ask",
        "questions": [{"id": "q1-1", "text": "which colour?"}]}}});
    let question = serde_json::json!({"question": "which colour?", "answer": null, "id": "q1-1"});
    store
        .record_step(RecordStepRequest {
            step: Some(Step {
                session_id: id.clone(),
                step: 1,
                round: 1,
                round_step: 1,
                agent_name: "HostAgent".into(),
                agent_kind: ufo_proto::v1::AgentKind::Host as i32,
                state_after: "PENDING".into(),
                extra: ufo_proto::json::to_struct(control).ok(),
                ..Step::default()
            }),
            blackboard: vec![BlackboardEntry {
                kind: BlackboardKind::Question as i32,
                value: ufo_proto::json::to_struct(question).ok(),
                ..BlackboardEntry::default()
            }],
            events: vec![EventDraft {
                kind: EventKind::QuestionAsked as i32,
                payload: ufo_proto::json::to_struct(
                    serde_json::json!({"id": "q1-1", "question": "which colour?"}),
                )
                .ok(),
                step: 1,
                ..EventDraft::default()
            }],
            lease_owner: "w".into(),
            ..RecordStepRequest::default()
        })
        .await
        .unwrap();
    store
        .set_session_status(SetSessionStatusRequest {
            session_id: id.clone(),
            status: SessionStatus::Waiting as i32,
            result: String::new(),
            lease_owner: "w".into(),
        })
        .await
        .unwrap();

    let mut watch = command(&cluster, &cluster.api_key, &["watch", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    watch
        .stdin
        .take()
        .unwrap()
        .write_all(b"blue\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("answered: blue")) {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no answer shown: {seen:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("watch ended early: {seen:?}"));
        seen.push(line);
    }
    assert!(
        seen.iter().any(|l| l.contains("question: which colour?")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|l| l.contains("? which colour?")),
        "prompted: {seen:?}"
    );
    // Step lines carry their event's `#seq` like every other line (what `watch --from` takes).
    assert!(
        seen.iter().any(|l| {
            // A line read after the answer prompt follows its "> " (stdin is not a terminal here).
            let l = l.trim_start_matches("> ");
            matches!(event_line(l), (Some(_), text) if text.starts_with("step   1"))
        }),
        "a step line with its seq: {seen:?}"
    );

    // The answer went through the API: nothing is pending any more.
    let shown = ufo(&cluster, &["show", "--json", &id]).await;
    let task: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(task["pending_questions"], serde_json::json!([]), "{task}");

    assert!(ufo(&cluster, &["cancel", &id]).await.status.success());
    // The runner's part again: it holds the task, so it is the one that ends it on the cancel request.
    store
        .set_session_status(SetSessionStatusRequest {
            session_id: id.clone(),
            status: SessionStatus::Cancelled as i32,
            result: "cancelled".into(),
            lease_owner: "w".into(),
        })
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), watch.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}
