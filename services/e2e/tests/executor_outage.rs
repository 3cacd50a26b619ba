//! An executor that goes away mid-task, across real processes (`ufo-session` on Postgres, `ufo-executor` on
//! a private Xvfb desktop, `ufo-agent` with a scripted model): the executor is killed with SIGKILL while the
//! model answers the first step, so the next step's observation meets a dead executor.
//! - Restarted (on the same address) within `--executor-retry-budget-ms`: the agent retries the
//!   observation until it answers, and the task finishes.
//! - Never restarted: the task fails within the budget with an error naming the executor's address and
//!   the time spent retrying.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_client::NewTask;
use ufo_e2e::script::host;
use ufo_executor::testing::Desktop;
use ufo_testkit::{
    Cluster, ProcessBuilder, ServiceProcess, TestDatabase, free_port, poll_until, workspace_binary,
};

const TOKEN: &str = "executor-outage-token";

/// `ufo-executor` on the desktop, listening on `port`, ready.
async fn spawn_executor(port: u16, desktop: &Desktop) -> ServiceProcess {
    let mut builder =
        ProcessBuilder::new("ufo-executor", workspace_binary("ufo-executor").unwrap())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("UFO_EXECUTOR_TOKEN", TOKEN)
            .env_remove("UFO_OTLP_ENDPOINT");
    for (key, value) in desktop.env() {
        builder = builder.env(key, value);
    }
    let mut executor = builder.spawn().unwrap();
    executor
        .wait_grpc_ready(&format!("http://127.0.0.1:{port}"), Duration::from_secs(30))
        .await
        .unwrap();
    executor
}

/// The services, with the executor started by the test (so it can be killed and started again) and a
/// model whose first reply kills it: "continue", then "finish".
async fn start(
    desktop: &Desktop,
    llm: &ScriptedLlm,
    db: &TestDatabase,
    budget_ms: u64,
) -> (Cluster, u16, Arc<Mutex<Option<ServiceProcess>>>) {
    let port = free_port().unwrap();
    let executor = Arc::new(Mutex::new(Some(spawn_executor(port, desktop).await)));
    let killer = executor.clone();
    llm.push_fn(move |_| {
        // The executor dies while the model thinks: the agent's next call to it finds no one.
        if let Some(mut executor) = killer.lock().unwrap().take() {
            executor.kill().unwrap();
        }
        ScriptedReply::Text(host("CONTINUE", json!({"comment": "looking"})).to_string())
    });
    llm.push_json(&host(
        "FINISH",
        json!({"comment": "done", "result": "the desktop was observed twice"}),
    ));
    let cluster = Cluster::builder()
        .database_url(db.url())
        .remote_executor(format!("http://127.0.0.1:{port}"))
        .llm_base_url(llm.base_url())
        .agent_args([
            "--executor-token",
            TOKEN,
            "--executor-retry-budget-ms",
            &budget_ms.to_string(),
        ])
        .start()
        .await
        .unwrap();
    (cluster, port, executor)
}

/// Polls the task until it ends; returns its JSON.
async fn ended(cluster: &Cluster, id: &str) -> Value {
    let agent = ufo_e2e::agent(cluster).unwrap();
    poll_until(
        "the task to end",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let agent = agent.clone();
            async move {
                let task = agent.get(id).await.map_err(|e| e.to_string())?;
                match task["status"].as_str() {
                    Some("failed" | "finished" | "cancelled") => Ok(Some(task)),
                    other => Err(format!("status {other:?}")),
                }
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()))
}

async fn submit(cluster: &Cluster) -> String {
    let task = ufo_e2e::agent(cluster)
        .unwrap()
        .submit(&NewTask {
            max_steps: Some(5),
            ..NewTask::request("look at the desktop twice")
        })
        .await
        .unwrap();
    task["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_restarted_within_the_retry_budget_lets_the_task_finish() {
    let db = TestDatabase::create().await.unwrap();
    let desktop = Desktop::start(1024, 700).await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    let (mut cluster, port, executor) = start(&desktop, &llm, &db, 30_000).await;
    let id = submit(&cluster).await;

    // The agent has found the executor gone and is retrying: start it again on the same address.
    let agent = cluster.agent.as_mut().unwrap();
    agent
        .wait_for_log("executor unreachable; retrying", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        executor.lock().unwrap().is_none(),
        "the executor was killed"
    );
    let restarted = spawn_executor(port, &desktop).await;
    *executor.lock().unwrap() = Some(restarted);

    let task = ended(&cluster, &id).await;
    assert_eq!(task["status"], "finished", "{task}\n{}", cluster.logs());
    assert_eq!(llm.requests().len(), 2, "{task}");
    assert_eq!(task["result"], "the desktop was observed twice", "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_stays_down_fails_the_task_with_an_error_naming_it() {
    let db = TestDatabase::create().await.unwrap();
    let desktop = Desktop::start(1024, 700).await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    let (cluster, port, executor) = start(&desktop, &llm, &db, 1_500).await;
    let submitted = Instant::now();
    let id = submit(&cluster).await;

    let task = ended(&cluster, &id).await;
    let took = submitted.elapsed();
    assert!(
        executor.lock().unwrap().is_none(),
        "the executor was killed"
    );
    assert_eq!(task["status"], "failed", "{task}");
    let result = task["result"].as_str().unwrap();
    eprintln!("the task's result after {took:?}: {result}");
    let expected = format!("executor 127.0.0.1:{port} is unreachable: still failing after ");
    let waited: f64 = result
        .split_once(&expected)
        .and_then(|(_, rest)| rest.split_once(" s of retries"))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("{expected:?} ... \" s of retries\" not in {result}"));
    assert!((1.5..3.0).contains(&waited), "retried {waited} s: {result}");
    assert_eq!(
        llm.requests().len(),
        1,
        "no model call after the executor died"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
