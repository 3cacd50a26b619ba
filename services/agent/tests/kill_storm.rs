//! Every executed action is in the history: a 24-step task whose runner process is killed with SIGKILL 12
//! times (and whose session service is stopped and restarted once mid-task), at varied points (right after the executor received an action, right after a step was recorded,
//! after varied delays), and restarted each time. The executor is a real gRPC server in this process that
//! logs every command it receives; the runners are child processes (this test binary re-executed) speaking
//! gRPC to it and to the real session service. Afterwards every executed action must be in a recorded step,
//! none may have run twice, and the events must be gapless from 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tonic::{Request, Response, Status};
use ufo_proto::v1;

const RUNNER_FLAGS: &[&str] = &["--lease-ms", "600", "--claim-interval-ms", "30"];
// Long enough that 12 kills land before the end even when the runner is fast (with 24 steps a quiet
// machine finished the task after 10 kills).
const STEPS: u64 = 60;
const KILLS: usize = 12;

/// An executor that logs every command it receives as `(task, step)` and succeeds.
#[derive(Default, Clone)]
struct LoggingExecutor(Arc<Mutex<Vec<(String, u64)>>>);

#[tonic::async_trait]
impl ufo_testkit::executor::TestExecutor for LoggingExecutor {
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status> {
        let mut results = Vec::new();
        for c in request.into_inner().commands {
            let p = ufo_proto::json::struct_to_map(c.parameters.unwrap_or_default());
            let task = p["task"].as_str().unwrap_or_default().to_owned();
            let step = p["step"].as_u64().unwrap_or_default();
            self.0.lock().unwrap().push((task, step));
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

/// The entry point of a runner child process. Does nothing unless started by [`spawn_runner`].
#[tokio::test]
#[ignore = "runs only as a child process of the kill test"]
async fn storm_runner_child() {
    let Ok(session_url) = std::env::var("UFO_TEST_CHILD_SESSION_URL") else {
        return;
    };
    let config = agent_config(&session_url, RUNNER_FLAGS);
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver {
        action_log: None,
        honour_block: false,
        executor: std::env::var("UFO_TEST_CHILD_EXECUTOR").ok(),
        ..Default::default()
    });
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ufo_agent::run(
        config,
        ufo_agent::Listeners { grpc, http },
        Some(driver),
        ufo_common::shutdown::signal_token(),
    )
    .await
    .unwrap();
}

fn spawn_runner(session: &Session, executor: &str) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "kill_storm::storm_runner_child",
            "--nocapture",
        ])
        .env("UFO_TEST_CHILD_SESSION_URL", &session.url)
        .env("UFO_TEST_CHILD_EXECUTOR", executor)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

async fn recorded_steps(session: &Session, id: &str) -> Vec<v1::Step> {
    session
        .client()
        .list_steps(v1::ListStepsRequest {
            session_id: id.into(),
            from_step: 1,
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .steps
}

async fn status(session: &Session, id: &str) -> v1::SessionStatus {
    let s = session
        .client()
        .get_session(v1::GetSessionRequest {
            session_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    v1::SessionStatus::try_from(s.status).unwrap()
}

#[tokio::test]
async fn sigkilled_runners_lose_no_executed_action_and_run_none_twice() {
    let mut session = Session::start().await;
    let executor = LoggingExecutor::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let executor_url = format!("http://{}", listener.local_addr().unwrap());
    let server = executor.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ufo_testkit::executor::server(server))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    let api_agent = Agent::start(
        // The task asks for 200 steps: the agents' round limit must allow them.
        agent_config(&session.url, &["--runner-slots", "0", "--max-steps", "200"]),
        None,
    )
    .await;
    let task: Value = ufo_testkit::http_client()
        .post(format!("{}/v1/tasks", api_agent.http))
        .bearer_auth(KEY)
        .json(&json!({"request": format!("steps={STEPS}"), "limits": {"max_steps": 200}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    let executed = |executor: &LoggingExecutor| {
        executor
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == id)
            .count()
    };

    let mut runner = spawn_runner(&session, &executor_url);
    let mut kills = 0;
    while kills < KILLS && status(&session, &id).await != v1::SessionStatus::Finished {
        let before_actions = executed(&executor);
        let before_steps = recorded_steps(&session, &id).await.len();
        // Vary the point of death: just after the executor got an action (run, not recorded), just after a
        // step was recorded, or after a delay that lands anywhere in the step.
        match kills % 3 {
            0 => {
                eventually(60, "an action executed", || async {
                    (executed(&executor) > before_actions).then_some(())
                })
                .await;
            }
            1 => {
                eventually(60, "a step recorded", || async {
                    (recorded_steps(&session, &id).await.len() > before_steps).then_some(())
                })
                .await;
            }
            _ => {
                eventually(60, "the runner working", || async {
                    (executed(&executor) > before_actions).then_some(())
                })
                .await;
                tokio::time::sleep(Duration::from_millis(7 * kills as u64)).await;
            }
        }
        runner.kill().await.unwrap();
        kills += 1;
        if kills == KILLS / 2 {
            // The session service goes away for a moment while a fresh runner starts and claims.
            runner = spawn_runner(&session, &executor_url);
            session.restart(Duration::from_millis(300)).await;
            continue;
        }
        runner = spawn_runner(&session, &executor_url);
    }
    assert_eq!(kills, KILLS, "the task ended before {KILLS} kills");
    eventually(120, "the task finished", || async {
        (status(&session, &id).await == v1::SessionStatus::Finished).then_some(())
    })
    .await;

    // Every executed action in the history, none run twice.
    let ran: Vec<u64> = executor
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t == id)
        .map(|(_, s)| *s)
        .collect();
    let mut times: HashMap<u64, usize> = HashMap::new();
    for s in &ran {
        *times.entry(*s).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "actions run twice: {twice:?}");
    let steps = recorded_steps(&session, &id).await;
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
    let unknown = steps
        .iter()
        .filter(|s| s.comment == ufo_agent::runner::intent::UNKNOWN)
        .count();
    eprintln!(
        "{} steps, {} actions executed, {unknown} recorded with an unknown outcome after {kills} kills",
        steps.len(),
        ran.len()
    );

    let mut events = session
        .client()
        .watch_events(v1::WatchEventsRequest {
            session_id: id.clone(),
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
    runner.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}
