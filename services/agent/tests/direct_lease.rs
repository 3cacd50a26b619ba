//! Direct sessions never stay RUNNING after their agent dies (issue 38). A real headless Linux executor
//! (its own Xvfb) is registered as `desk`; an agent *process* (the `ufo-agent` binary, API only) records
//! an MCP client's desktop call (`POST /v1/desktop/calls`, the route `ufo mcp` uses) as step 1 of a
//! direct session leased to it, renews that lease while it lives, and is killed with SIGKILL. A second
//! agent process on the same session service ends the session within the bound (the lease, then one
//! keeper period): REST shows it FAILED with a result saying the agent holding it went away, its step is
//! kept, and the caller's next call on `desk` opens a new direct session. On Postgres and on SQLite.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::api_support::{KEY, Session};
use serde_json::{Value, json};
use ufo_proto::v1::{EventKind, GetSessionRequest, SessionStatus};
use ufo_testkit::{ProcessBuilder, ServiceProcess, free_port};

/// The agents' `--mcp-direct-lease-ms`.
const LEASE_MS: u64 = 1500;

/// An agent process serving the API (no runner) with `desk` registered; its REST base URL.
async fn spawn_agent(session_url: &str, executor: &str) -> (ServiceProcess, String) {
    let grpc = free_port().unwrap();
    let http = free_port().unwrap();
    let rest = format!("http://127.0.0.1:{http}");
    let mut agent = ProcessBuilder::new("ufo-agent", env!("CARGO_BIN_EXE_ufo-agent"))
        .args(["--listen", &format!("127.0.0.1:{grpc}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .args(["--session-url", session_url])
        .args(["--runner-slots", "0"])
        .args(["--executors", &format!("desk={executor}")])
        .args(["--executor-token", "tok"])
        .args(["--mcp-direct-lease-ms", &LEASE_MS.to_string()])
        .env("UFO_AGENT_API_KEYS", format!("tests:{KEY}"))
        .env_remove("UFO_AGENT_WORKER_ID")
        .spawn()
        .unwrap();
    agent
        .wait_http_ready(&format!("{rest}/readyz"), Duration::from_secs(120))
        .await
        .unwrap();
    (agent, rest)
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    let response = http.get(url).bearer_auth(KEY).send().await.unwrap();
    assert!(response.status().is_success(), "{response:?}");
    response.json().await.unwrap()
}

/// One desktop call through the agent at `rest`: its answer.
async fn list_windows(http: &reqwest::Client, rest: &str) -> Value {
    let response = http
        .post(format!("{rest}/v1/desktop/calls"))
        .bearer_auth(KEY)
        .json(&json!({"tool": "list_windows", "arguments": {"executor": "desk"}}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "{status}: {body}");
    body
}

async fn polled<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    ufo_testkit::poll_until(
        what,
        Duration::from_secs(secs),
        Duration::from_millis(50),
        || {
            let next = check();
            async move { Ok::<_, String>(next.await) }
        },
    )
    .await
    .unwrap()
}

async fn killed_agent_direct_session_is_ended_by_another(session: Session) {
    use clap::Parser as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor",
        "--token",
        "tok",
        "--desktop",
        "headless",
        "--desktop-size",
        "1024x768",
    ])
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run(config, listener, stop.clone()));
    let executor = format!("http://{addr}");
    ufo_testkit::poll_until(
        "the headless executor serving",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || ufo_testkit::grpc_serving(&executor),
    )
    .await
    .unwrap();
    let http = ufo_testkit::http_client();
    let mut store = session.client();

    let (mut first, rest) = spawn_agent(&session.url, &executor).await;
    let answer = list_windows(&http, &rest).await;
    let id = answer["session_id"].as_str().unwrap().to_owned();
    assert_eq!(answer["step"], 1, "{answer}");
    // The step is written after the answer: durable before the agent dies.
    polled("step 1 recorded", 60, || async {
        let page = get(&http, format!("{rest}/v1/tasks/{id}/steps")).await;
        (page["steps"].as_array().map(Vec::len) == Some(1)).then_some(())
    })
    .await;
    let created = store
        .get_session(GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.status, SessionStatus::Running as i32);
    assert!(
        created.lease_owner.starts_with("agent-"),
        "leased to the agent process: {created:?}"
    );
    // The live agent renews its lease.
    let first_expiry = created.lease_expires_at.unwrap();
    polled("the lease renewed", 30, || {
        let mut store = store.clone();
        let id = id.clone();
        async move {
            let now = store
                .get_session(GetSessionRequest { session_id: id })
                .await
                .unwrap()
                .into_inner();
            let expiry = now.lease_expires_at.unwrap();
            ((expiry.seconds, expiry.nanos) > (first_expiry.seconds, first_expiry.nanos))
                .then_some(())
        }
    })
    .await;

    first.kill().unwrap();
    let killed = Instant::now();
    let (mut second, rest) = spawn_agent(&session.url, &executor).await;
    let ready = Instant::now();
    let ended = polled("the dead agent's direct session ended", 60, || async {
        let task = get(&http, format!("{rest}/v1/tasks/{id}")).await;
        (task["status"] != "running").then_some(task)
    })
    .await;
    let seen = Instant::now();
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["kind"], "direct", "{ended}");
    let result = ended["result"].as_str().unwrap();
    assert!(
        result.contains("the agent holding this direct session went away"),
        "{result}"
    );
    assert!(result.contains(&created.lease_owner), "{result}");
    assert!(result.contains("1 step(s)"), "{result}");
    // Within the bound: once the lease lapsed (and the second agent is up), its keeper's next round
    // (a third of the lease) ends it; polling and the machine's load get a few seconds more.
    let lease = Duration::from_millis(LEASE_MS);
    let due = (killed + lease).max(ready);
    assert!(
        seen.saturating_duration_since(due) < lease / 3 + Duration::from_secs(5),
        "ended {:?} after the kill (the second agent was ready after {:?})",
        seen - killed,
        ready - killed
    );
    // Not before the lease could have lapsed: the dead agent had renewed it about a third of it before.
    assert!(
        seen - killed >= lease - lease / 3 - Duration::from_millis(200),
        "ended {:?} after the kill, before its lease could lapse",
        seen - killed
    );
    let status = store
        .get_session(GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(status.lease_owner.is_empty());
    // No step lost; nobody ran it.
    let steps = get(&http, format!("{rest}/v1/tasks/{id}/steps")).await;
    assert_eq!(steps["steps"].as_array().unwrap().len(), 1, "{steps}");
    assert_eq!(steps["steps"][0]["step"], 1);
    let events = session.events(&id).await;
    assert!(
        !events
            .iter()
            .any(|e| e.kind == EventKind::TaskClaimed as i32)
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TaskFailed as i32,
        "{events:?}"
    );

    // The caller's next call on `desk` opens a new direct session, leased to the second agent.
    let next = list_windows(&http, &rest).await;
    let new_id = next["session_id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, id);
    assert_eq!(next["step"], 1, "{next}");
    let new = store
        .get_session(GetSessionRequest { session_id: new_id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(new.status, SessionStatus::Running as i32);
    assert!(!new.lease_owner.is_empty());
    assert_ne!(new.lease_owner, created.lease_owner);

    second.stop().await.unwrap();
    stop.cancel();
    let _ = server.await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_agents_direct_session_is_ended_by_another_agent_on_postgres() {
    killed_agent_direct_session_is_ended_by_another(Session::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_agents_direct_session_is_ended_by_another_agent_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.sqlite3");
    let session = Session::start_with(move |config| {
        config.database_url = None;
        config.sqlite_path = path;
    })
    .await;
    killed_agent_direct_session_is_ended_by_another(session).await;
    drop(dir);
}
