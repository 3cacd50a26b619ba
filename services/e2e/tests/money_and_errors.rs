//! Issue 16's money and error-text points across real processes (`ufo-session` on Postgres,
//! `ufo-executor` on a private Xvfb desktop, `ufo-agent`), the model being a scripted OpenAI-compatible
//! server or none at all:
//! - a model without a price, accepted because the operator set `--llm-default-price`, is charged that
//!   price, and `limits.max_cost` stops the task after the first step;
//! - a task whose model endpoint cannot be reached ends with a reason a person can act on (no URL, no
//!   transport internals) carrying a trace id, and the agent's log line with the internal cause carries
//!   the same trace id.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::ScriptedLlm;
use ufo_client::NewTask;
use ufo_e2e::script::host;
use ufo_executor::testing::Desktop;
use ufo_testkit::{Cluster, TestDatabase, free_port, poll_until};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_stops_a_task_whose_model_is_priced_by_the_default_price() {
    let db = TestDatabase::create().await.unwrap();
    let desktop = Desktop::start(1024, 700).await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    // 100 input and 20 output tokens per reply at 10,000 USD per million: 1.20 USD per call.
    llm.set_usage(100, 20);
    for _ in 0..3 {
        llm.push_json(&host("CONTINUE", json!({"comment": "looking"})));
    }
    let cluster = Cluster::builder()
        .database_url(db.url())
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args(["--llm-default-price", "10000/10000"])
        .start()
        .await
        .unwrap();
    let agent = ufo_e2e::agent(&cluster).unwrap();
    let task = agent
        .submit(&NewTask {
            host_model: Some("free-lunch-1".into()),
            app_model: Some("free-lunch-1".into()),
            max_cost: Some(0.5),
            max_steps: Some(10),
            ..NewTask::request("look around")
        })
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap();
    let task = ended(&cluster, id).await;
    assert_eq!(task["status"], "failed", "{task}\n{}", cluster.logs());
    assert!(
        task["result"]
            .as_str()
            .unwrap()
            .contains("cost limit of $0.5 reached"),
        "{task}"
    );
    let cost = task["totals"]["cost"].as_f64().unwrap();
    assert!((cost - 1.2).abs() < 1e-6, "charged {cost}: {task}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "the limit did not stop the task");
    assert_eq!(requests[0].body["model"], "free-lunch-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_model_is_reported_in_a_persons_terms_with_the_cause_in_the_log() {
    let db = TestDatabase::create().await.unwrap();
    let desktop = Desktop::start(1024, 700).await.unwrap();
    let unreachable = format!("http://127.0.0.1:{}/v1", free_port().unwrap());
    let cluster = Cluster::builder()
        .database_url(db.url())
        .local_executor(desktop.env())
        .llm_base_url(unreachable)
        .agent_args(["--llm-max-retries", "0"])
        .start()
        .await
        .unwrap();
    let agent = ufo_e2e::agent(&cluster).unwrap();
    let task = agent
        .submit(&NewTask::request("open mousepad"))
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap();
    let task = ended(&cluster, id).await;
    assert_eq!(task["status"], "failed", "{task}");
    let result = task["result"].as_str().unwrap();
    eprintln!("the task's result: {result}");
    assert!(
        result.starts_with(
            "HostAgent error: the model endpoint 127.0.0.1 cannot be reached (connection refused) (trace "
        ),
        "{result}"
    );
    for internal in [
        "http://",
        "tcp connect",
        "error sending request",
        "os error",
        "strategy",
        "phase",
    ] {
        assert!(!result.contains(internal), "{internal:?} in {result}");
    }
    let trace = result
        .rsplit_once("(trace ")
        .and_then(|(_, t)| t.strip_suffix(')'))
        .unwrap();
    assert_eq!(trace.len(), 32, "{trace}");
    let logs = cluster.agent.as_ref().unwrap().logs();
    let line = logs
        .lines()
        .find(|l| l.contains(trace) && l.contains("a step failed"))
        .unwrap_or_else(|| panic!("no log line with trace {trace}:\n{logs}"));
    eprintln!("the agent's log line: {line}");
    assert!(
        line.contains("Connection refused") && line.contains("host_llm_interaction"),
        "{line}"
    );
}
