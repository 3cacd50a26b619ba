//! Recording ahead (`--record-ahead`, `runner/ahead.rs`): a step's RecordStep commits while the next step
//! is produced, and the next step's action still waits until it is durable. Between the runner and the
//! real session service sits a gRPC pass-through that can hold or refuse one RecordStep call, and the
//! scripted driver is wrapped to report when each step starts and how many RecordStep calls had completed
//! by then. Handshakes only: the proxy says when the held call arrived, the test releases it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, KEY, Session, agent_config};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tower::ServiceExt as _;
use ufo_agent::round::output::StepOutput;
use ufo_agent::runner::{DriverError, StepInput, TaskDriver};
use ufo_proto::v1::{Event, EventKind, WatchEventsRequest};

const RUNNER_FLAGS: &[&str] = &["--lease-ms", "3000", "--claim-interval-ms", "30"];
const RECORD_STEP: &str = "/ufo.v1.SessionStore/RecordStep";

/// What the proxy does to the RecordStep calls, counted from 1.
struct Gate {
    /// This call is held until `release` has a permit; its arrival is reported on `arrived`.
    hold: Option<u64>,
    /// This call is refused (INVALID_ARGUMENT) without reaching the store.
    refuse: Option<u64>,
    arrived: mpsc::UnboundedSender<u64>,
    release: Semaphore,
    calls: AtomicU64,
    /// RecordStep calls the store answered.
    completed: AtomicU64,
}

/// A pass-through to the session service applying `gate` to RecordStep.
#[derive(Clone)]
struct Proxy {
    channel: tonic::transport::Channel,
    gate: Arc<Gate>,
}

impl tonic::server::NamedService for Proxy {
    const NAME: &'static str = "ufo.v1.SessionStore";
}

impl tower::Service<http::Request<tonic::body::Body>> for Proxy {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let (channel, gate) = (self.channel.clone(), self.gate.clone());
        Box::pin(async move {
            let record = request.uri().path() == RECORD_STEP;
            let call = if record {
                gate.calls.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                0
            };
            if record && gate.hold == Some(call) {
                gate.arrived.send(call).unwrap();
                gate.release.acquire().await.unwrap().forget();
            }
            if record && gate.refuse == Some(call) {
                return Ok(tonic::Status::invalid_argument("refused by the test").into_http());
            }
            let response = channel
                .oneshot(request)
                .await
                .unwrap_or_else(|e| tonic::Status::unavailable(e.to_string()).into_http());
            if record {
                gate.completed.fetch_add(1, Ordering::SeqCst);
            }
            Ok(response)
        })
    }
}

async fn start_proxy(target: &str, gate: Arc<Gate>) -> String {
    let channel = tonic::transport::Endpoint::from_shared(target.to_owned())
        .unwrap()
        .connect_lazy();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Proxy { channel, gate })
            .serve_with_incoming(incoming),
    );
    url
}

/// The scripted driver, reporting `(step, RecordStep calls completed)` as each step starts.
struct Watched {
    inner: ScriptDriver,
    gate: Arc<Gate>,
    started: mpsc::UnboundedSender<(u64, u64)>,
}

#[async_trait::async_trait]
impl TaskDriver for Watched {
    async fn next_step(&self, input: StepInput<'_>) -> Result<StepOutput, DriverError> {
        let completed = self.gate.completed.load(Ordering::SeqCst);
        self.started.send((input.step, completed)).unwrap();
        self.inner.next_step(input).await
    }
}

struct Run {
    session: Session,
    agent: Agent,
    gate: Arc<Gate>,
    arrived: mpsc::UnboundedReceiver<u64>,
    started: mpsc::UnboundedReceiver<(u64, u64)>,
    log: tempfile::TempDir,
}

impl Run {
    async fn start(hold: Option<u64>, refuse: Option<u64>, flags: &[&str]) -> Self {
        let session = Session::start().await;
        let (arrived_tx, arrived) = mpsc::unbounded_channel();
        let gate = Arc::new(Gate {
            hold,
            refuse,
            arrived: arrived_tx,
            release: Semaphore::new(0),
            calls: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        });
        let proxy = start_proxy(&session.url, gate.clone()).await;
        let log = tempfile::tempdir().unwrap();
        let (started_tx, started) = mpsc::unbounded_channel();
        let driver = Arc::new(Watched {
            inner: ScriptDriver {
                action_log: Some(log.path().join("actions")),
                ..Default::default()
            },
            gate: gate.clone(),
            started: started_tx,
        });
        let mut args = RUNNER_FLAGS.to_vec();
        args.extend_from_slice(flags);
        let agent = Agent::start(agent_config(&proxy, &args), Some(driver)).await;
        Self {
            session,
            agent,
            gate,
            arrived,
            started,
            log,
        }
    }

    async fn submit(&self, request: &str) -> String {
        let res = ufo_testkit::http_client()
            .post(format!("{}/v1/tasks", self.agent.http))
            .bearer_auth(KEY)
            .json(&json!({ "request": request }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 202);
        let task: Value = res.json().await.unwrap();
        task["id"].as_str().unwrap().to_owned()
    }

    /// Waits for the task to end (its stream ends with it) and returns it.
    async fn ended(&self, id: &str) -> Value {
        let events = within(self.events(id)).await;
        assert!(
            events
                .last()
                .is_some_and(|e| [EventKind::TaskFinished, EventKind::TaskFailed]
                    .iter()
                    .any(|k| e.kind == *k as i32)),
            "the task did not end: {events:?}"
        );
        ufo_testkit::http_client()
            .get(format!("{}/v1/tasks/{id}", self.agent.http))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The session's events from the store, until it ends.
    async fn events(&self, id: &str) -> Vec<Event> {
        let mut stream = self
            .session
            .client()
            .watch_events(WatchEventsRequest {
                session_id: id.into(),
                from_seq: 1,
                kinds: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            let end = [EventKind::TaskFinished, EventKind::TaskFailed]
                .iter()
                .any(|k| event.kind == *k as i32);
            out.push(event);
            if end {
                break;
            }
        }
        out
    }

    /// The step that starts next, with the RecordStep calls completed by then.
    async fn next_started(&mut self) -> (u64, u64) {
        within(self.started.recv()).await.unwrap()
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
    }
}

/// The steps whose action ran, in order.
fn actions(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("actions"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect()
}

async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .expect("timed out")
}

fn seq_of(events: &[Event], kind: EventKind, step: u64) -> u64 {
    events
        .iter()
        .find(|e| e.kind == kind as i32 && e.step == step)
        .unwrap_or_else(|| panic!("no {kind:?} for step {step}"))
        .seq
}

#[tokio::test]
async fn the_next_step_starts_while_the_step_commits_and_acts_only_after() {
    let mut run = Run::start(Some(1), None, &[]).await;
    let id = run.submit("steps=3 write a note").await;
    assert_eq!(within(run.arrived.recv()).await, Some(1));
    assert_eq!(run.next_started().await, (1, 0));
    // Step 1's RecordStep is held in the proxy, and step 2 is already being produced: step 1's wall time
    // did not include its commit.
    assert_eq!(run.next_started().await, (2, 0));
    // Its action cannot have run: its intent waits for step 1 to be durable.
    assert_eq!(actions(run.log.path()), [1]);
    assert_eq!(run.gate.completed.load(Ordering::SeqCst), 0);
    run.gate.release.add_permits(1);
    let task = run.ended(&id).await;
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["totals"]["steps"], 3);
    assert_eq!(actions(run.log.path()), [1, 2, 3]);
    // In the log, each step is recorded before the next step's intent: nothing acted before the steps
    // before it were durable.
    let events = run.events(&id).await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "events must have no gap");
    }
    for step in 1..3 {
        assert!(
            seq_of(&events, EventKind::StepFinished, step)
                < seq_of(&events, EventKind::StepStarted, step + 1)
        );
    }
    run.stop().await;
}

#[tokio::test]
async fn without_record_ahead_each_step_is_recorded_before_the_next_starts() {
    let mut run = Run::start(Some(1), None, &["--record-ahead", "false"]).await;
    let id = run.submit("steps=3 write a note").await;
    assert_eq!(within(run.arrived.recv()).await, Some(1));
    assert_eq!(run.next_started().await, (1, 0));
    run.gate.release.add_permits(1);
    assert_eq!(run.next_started().await, (2, 1));
    assert_eq!(run.next_started().await, (3, 2));
    let task = run.ended(&id).await;
    assert_eq!(task["status"], "finished", "{task}");
    run.stop().await;
}

#[tokio::test]
async fn a_refused_record_fails_the_task_as_it_would_synchronously_and_nothing_acts_after_it() {
    let mut results = Vec::new();
    for flags in [
        &["--record-ahead", "true"][..],
        &["--record-ahead", "false"],
    ] {
        let mut run = Run::start(None, Some(2), flags).await;
        let id = run.submit("steps=4 write a note").await;
        let task = run.ended(&id).await;
        assert_eq!(task["status"], "failed", "{task}");
        // Step 2's record was refused: step 3 may have been produced (ahead), but its action never ran.
        assert_eq!(actions(run.log.path()), [1, 2], "{flags:?}");
        assert_eq!(task["totals"]["steps"], 1, "{flags:?}");
        let mut started = Vec::new();
        while let Ok((step, _)) = run.started.try_recv() {
            started.push(step);
        }
        let expected: &[u64] = if flags[1] == "true" {
            &[1, 2, 3]
        } else {
            &[1, 2]
        };
        assert_eq!(started, expected, "{flags:?}");
        results.push(task["result"].clone());
        run.stop().await;
    }
    assert!(
        results[0]
            .as_str()
            .is_some_and(|r| r.contains("refused by the test")),
        "{results:?}"
    );
    assert_eq!(results[0], results[1]);
}
