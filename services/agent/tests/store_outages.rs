//! Every executed action is in the history when the store goes away mid-task: an 18-step task whose
//! (a) Postgres server is restarted 3 times, (b) session service — the `ufo-session` binary, a separate
//! process — is killed with SIGKILL 3 times and started again. Each outage happens in the middle of a step:
//! the executor (a real gRPC server in this process that logs every command) holds the step's action while
//! the store is taken down, and lets it return while the store is still down, so the runner's RecordStep
//! (and its lease renewal) meet the outage. Afterwards every executed action must be in a recorded step,
//! none may have run twice, and the events must be gapless from 1. (c) A StreamSteps client of the agent's
//! API follows the task through the session service's deaths: it sees UNAVAILABLE (never INTERNAL), resumes
//! from the last event it saw, and ends with every event exactly once.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api_support;
use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, KEY, agent_config, eventually};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use ufo_agent::store::client::SessionClient;
use ufo_proto::v1;
use ufo_proto::v1::agent_service_client::AgentServiceClient;
use ufo_testkit::{PgCluster, ProcessBuilder, ServiceProcess, workspace_binary};

const STEPS: u64 = 18;
/// The steps whose action the executor holds while the store is taken down.
const OUTAGES_AT: [u64; 3] = [4, 9, 14];
// The tasks ask for 100 steps: the agents' round limit (`--max-steps`) must allow them.
const RUNNER_FLAGS: &[&str] = &[
    "--lease-ms",
    "3000",
    "--claim-interval-ms",
    "30",
    "--max-steps",
    "100",
];

/// An executor that logs every command as `(task, step)`, holds the action of each step in `hold` until
/// released (reporting its arrival), and succeeds.
#[derive(Clone)]
struct HoldingExecutor {
    log: Arc<Mutex<Vec<(String, u64)>>>,
    hold: Arc<BTreeSet<u64>>,
    arrived: mpsc::UnboundedSender<u64>,
    release: Arc<Semaphore>,
}

#[tonic::async_trait]
impl ufo_testkit::executor::TestExecutor for HoldingExecutor {
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status> {
        let mut results = Vec::new();
        for c in request.into_inner().commands {
            let p = ufo_proto::json::struct_to_map(c.parameters.unwrap_or_default());
            let task = p["task"].as_str().unwrap_or_default().to_owned();
            let step = p["step"].as_u64().unwrap_or_default();
            self.log.lock().unwrap().push((task, step));
            if self.hold.contains(&step) {
                self.arrived.send(step).unwrap();
                self.release.acquire().await.unwrap().forget();
            }
            results.push(v1::Result {
                status: v1::ResultStatus::Success as i32,
                call_id: c.call_id,
                ..Default::default()
            });
        }
        Ok(Response::new(v1::ExecuteResponse { results }))
    }
    async fn list_tools(
        &self,
        _r: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        Ok(Response::new(v1::ListToolsResponse::default()))
    }
}

/// The executor served on port 0, its URL, and the receiver of held actions' arrivals.
async fn start_executor() -> (HoldingExecutor, String, mpsc::UnboundedReceiver<u64>) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let executor = HoldingExecutor {
        log: Arc::default(),
        hold: Arc::new(OUTAGES_AT.into_iter().collect()),
        arrived,
        release: Arc::new(Semaphore::new(0)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = executor.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ufo_testkit::executor::server(server))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (executor, url, arrivals)
}

/// The agent (API + runner with the scripted driver acting through `executor_url`) in this process.
async fn start_agent(session_url: &str, executor_url: &str) -> Agent {
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        action_log: None,
        honour_block: false,
        executor: Some(executor_url.to_owned()),
        ..Default::default()
    });
    Agent::start(agent_config(session_url, RUNNER_FLAGS), Some(driver)).await
}

fn client(session_url: &str) -> SessionClient {
    ufo_agent::store::client::connect(&agent_config(session_url, &[]).session).unwrap()
}

async fn submit(agent: &Agent) -> String {
    let task: Value = ufo_testkit::http_client()
        .post(format!("{}/v1/tasks", agent.http))
        .bearer_auth(KEY)
        .json(&json!({"request": format!("steps={STEPS}"), "limits": {"max_steps": 100}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    task["id"].as_str().unwrap().to_owned()
}

async fn wait_finished(session_url: &str, id: &str) {
    eventually(60, "the task finished", || async {
        let s = client(session_url)
            .get_session(v1::GetSessionRequest {
                session_id: id.into(),
            })
            .await
            .ok()?
            .into_inner();
        (s.status == v1::SessionStatus::Finished as i32).then_some(())
    })
    .await;
}

/// Every executed action recorded, none run twice, events gapless from 1; returns the number of events.
async fn assert_history_complete(session_url: &str, id: &str, executor: &HoldingExecutor) -> u64 {
    let ran: Vec<u64> = executor
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t == id)
        .map(|(_, s)| *s)
        .collect();
    let mut times: HashMap<u64, usize> = HashMap::new();
    for s in &ran {
        *times.entry(*s).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "actions run twice: {twice:?}");
    let steps = client(session_url)
        .list_steps(v1::ListStepsRequest {
            session_id: id.into(),
            from_step: 1,
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    let recorded: Vec<u64> = steps
        .iter()
        .flat_map(|s| s.actions.iter())
        .filter(|a| a.function == "script_action")
        .map(|a| {
            ufo_proto::json::struct_to_map(a.arguments.clone().unwrap_or_default())["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let missing: Vec<_> = ran.iter().filter(|s| !recorded.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "executed actions missing from the history: {missing:?}"
    );
    assert!(ran.len() as u64 >= STEPS, "the task ran only {ran:?}");
    for held in OUTAGES_AT {
        assert!(recorded.contains(&held), "held step {held} not recorded");
    }
    let mut events = client(session_url)
        .watch_events(v1::WatchEventsRequest {
            session_id: id.into(),
            from_seq: 1,
            kinds: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut seq = 0;
    while let Some(e) = events.next().await {
        seq += 1;
        assert_eq!(e.unwrap().seq, seq, "events gapless from 1");
    }
    eprintln!(
        "{} steps recorded, {} actions executed, {seq} events",
        steps.len(),
        ran.len()
    );
    seq
}

/// The real session service, in this process, on `database_url`.
async fn in_process_session(database_url: String) -> (String, CancellationToken) {
    let mut config = ufo_session::Config::defaults();
    config.database_url = Some(database_url);
    config.blobs.blob_dir = Some(blob_dir(config.database_url.as_deref().unwrap_or_default()));
    config.auth_token = None;
    config.pool_size = 4;
    config.db_acquire_timeout_ms = 1_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { ufo_session::run(config, listener, token).await.unwrap() });
    eventually(30, "the session service", || async {
        client(&url)
            .list_sessions(v1::ListSessionsRequest::default())
            .await
            .ok()
    })
    .await;
    (url, shutdown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_three_times_mid_task_loses_no_executed_action() {
    let cluster = PgCluster::start().await.unwrap();
    let database_url = cluster.create_database("ufo").await.unwrap();
    let (session_url, session_stop) = in_process_session(database_url).await;
    let (executor, executor_url, mut arrivals) = start_executor().await;
    let agent = start_agent(&session_url, &executor_url).await;
    let id = submit(&agent).await;

    for expected in OUTAGES_AT {
        // The runner is mid-step: its intent is recorded and the executor holds its action.
        assert_eq!(arrivals.recv().await, Some(expected));
        cluster.stop().await.unwrap();
        // The action returns while Postgres is down: the runner records the step into the outage.
        executor.release.add_permits(1);
        cluster.start_server().await.unwrap();
    }
    wait_finished(&session_url, &id).await;
    assert_history_complete(&session_url, &id, &executor).await;
    agent.stop().await;
    session_stop.cancel();
}

/// The blob directory of the session services on `database_url` (one per database, kept across restarts).
fn blob_dir(database_url: &str) -> std::path::PathBuf {
    let database = database_url.rsplit('/').next().unwrap_or("ufo");
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("store-outages-blobs")
        .join(database)
}

/// `ufo-session` as a child process on a fixed port.
async fn spawn_session(port: u16, database_url: &str) -> ServiceProcess {
    let mut session = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", database_url, "--pool-size", "4"])
        .arg("--blob-dir")
        .arg(blob_dir(database_url))
        .env_remove("UFO_SESSION_AUTH_TOKEN")
        .spawn()
        .unwrap();
    session
        .wait_grpc_ready(&format!("http://127.0.0.1:{port}"), Duration::from_secs(30))
        .await
        .unwrap();
    session
}

/// Follows the task's StreamSteps from the agent's API to its end, reconnecting from the last event seen
/// after every error. Returns the events' sequence numbers in the order received and every error code.
async fn follow(agent_grpc: String, id: String) -> (Vec<u64>, Vec<tonic::Code>) {
    let mut seen = Vec::new();
    let mut errors = Vec::new();
    loop {
        let mut request = Request::new(v1::StreamStepsRequest {
            task_id: id.clone(),
            from_seq: seen.last().map_or(1, |s| s + 1),
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
        let opened = match AgentServiceClient::connect(agent_grpc.clone()).await {
            Ok(mut c) => c.stream_steps(request).await,
            Err(e) => panic!("the agent is unreachable: {e}"),
        };
        let mut stream = match opened {
            Ok(s) => s.into_inner(),
            Err(status) => {
                errors.push(status.code());
                // The session service is still down: try again shortly (polling readiness).
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    let done = event.kind == v1::EventKind::TaskFinished as i32;
                    seen.push(event.seq);
                    if done {
                        return (seen, errors);
                    }
                }
                Some(Err(status)) => {
                    errors.push(status.code());
                    break;
                }
                None => return (seen, errors),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_service_sigkilled_three_times_mid_task_loses_nothing_and_streams_resume() {
    let database = api_support::fresh_database().await;
    let port = ufo_testkit::free_port().unwrap();
    let session_url = format!("http://127.0.0.1:{port}");
    let mut session = spawn_session(port, database.url()).await;
    let (executor, executor_url, mut arrivals) = start_executor().await;
    let agent = start_agent(&session_url, &executor_url).await;
    let id = submit(&agent).await;
    let follower = tokio::spawn(follow(agent.grpc.clone(), id.clone()));

    let t0 = std::time::Instant::now();
    for expected in OUTAGES_AT {
        assert_eq!(arrivals.recv().await, Some(expected));
        eprintln!("{:?} arrived {expected}", t0.elapsed());
        session.kill().unwrap();
        executor.release.add_permits(1);
        // Down while the runner records the step (its RecordStep meets a refused connection and is
        // retried) and the follower's stream breaks; back on the same port.
        session = spawn_session(port, database.url()).await;
        eprintln!("{:?} restarted", t0.elapsed());
    }
    wait_finished(&session_url, &id).await;
    eprintln!("{:?} finished", t0.elapsed());
    let events = assert_history_complete(&session_url, &id, &executor).await;

    let (seen, errors) = tokio::time::timeout(Duration::from_secs(30), follower)
        .await
        .expect("the follower reached the end")
        .unwrap();
    let expected: Vec<u64> = (1..=events).collect();
    assert_eq!(seen, expected, "each event seen once, in order");
    assert!(!errors.is_empty(), "the follower never saw the outage");
    assert!(
        errors.iter().all(|c| *c == tonic::Code::Unavailable),
        "errors while the session service was down: {errors:?}"
    );
    agent.stop().await;
    session.stop().await.unwrap();
    database.drop_database().await.unwrap();
}
