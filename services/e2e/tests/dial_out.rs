//! A dial-out executor end to end, with real processes: `ufo-session`, `ufo-agent` (with a scripted model
//! and `--executor-enrollments-file`) and `ufo-executor --connect` on a private Xvfb desktop. The admin
//! API enrolls the executor, a task naming it runs through its stream; the executor is SIGKILLed (the
//! agent sees it go), started again (it reconnects with the same token) and the next task's commands
//! reach it over the new connection.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::ScriptedLlm;
use ufo_client::{AgentClient, NewTask};
use ufo_e2e::script::host;
use ufo_executor::testing::Desktop;
use ufo_testkit::{Cluster, ProcessBuilder, ServiceProcess, poll_until, workspace_binary};

const NAME: &str = "desk1";

/// `ufo-executor --connect` on the desktop, dialling the cluster's agent.
fn spawn_executor(cluster: &Cluster, token_file: &Path, desktop: &Desktop) -> ServiceProcess {
    let mut builder =
        ProcessBuilder::new("ufo-executor", workspace_binary("ufo-executor").unwrap())
            .args(["--connect", &cluster.grpc_url, "--name", NAME])
            .arg("--enroll-token-file")
            .arg(token_file)
            .args(["--labels", "os=linux,app=mousepad"])
            .env_remove("UFO_OTLP_ENDPOINT")
            .env_remove("UFO_EXECUTOR_TOKEN");
    for (key, value) in desktop.env() {
        builder = builder.env(key, value);
    }
    builder.spawn().unwrap()
}

/// The agent's view of the dial-out executor.
async fn view(agent: &AgentClient) -> Value {
    let all = agent.executors().await.unwrap();
    all["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == NAME)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits until the executor's connection is `connected` and (when connected) has had a heartbeat.
async fn wait_connected(agent: &AgentClient, connected: bool, cluster: &Cluster) -> Value {
    poll_until(
        "the executor's connection state",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let v = view(agent).await;
            let ok = v["connected"] == connected && (!connected || !v["last_heartbeat"].is_null());
            if ok { Ok(Some(v)) } else { Err(v.to_string()) }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()))
}

async fn run_task(agent: &AgentClient, llm: &ScriptedLlm, cluster: &Cluster, what: &str) -> Value {
    llm.push_json(&host("FINISH", json!({"comment": "done", "result": what})));
    let task = agent
        .submit(&NewTask {
            executor: Some(NAME.into()),
            max_steps: Some(3),
            ..NewTask::request("look at the desktop")
        })
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    poll_until(
        "the task to end",
        Duration::from_secs(90),
        Duration::from_millis(50),
        || async {
            let task = agent.get(&id).await.map_err(|e| e.to_string())?;
            match task["status"].as_str() {
                Some("failed" | "finished" | "cancelled") => Ok(Some(task)),
                other => Err(format!("status {other:?}")),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_through_a_dial_out_executor_that_reconnects_after_a_kill() {
    let desktop = Desktop::start(1024, 700).await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let mut cluster = Cluster::builder()
        .llm_base_url(llm.base_url())
        .agent_args(["--api-admins", "test", "--dial-out-heartbeat-ms", "300"])
        .agent_args(["--executor-retry-budget-ms", "30000"])
        .agent_args([
            std::ffi::OsString::from("--executor-enrollments-file"),
            enrollments.clone().into_os_string(),
        ])
        .start()
        .await
        .unwrap();
    let agent = ufo_e2e::agent(&cluster).unwrap();

    // Enroll with the CLI (docs/executors.md, "Dial-out"): the token goes to a file of its own; the
    // agent's file holds its hash only.
    let token_file = dir.path().join("desk1.token");
    let out = std::process::Command::new(workspace_binary("ufo").unwrap())
        .args(["executors", "enroll", NAME, "--out"])
        .arg(&token_file)
        .args(["--server", &cluster.rest_url, "--token", &cluster.api_key])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.trim().starts_with("ufo-enroll-"), "{token}");
    assert!(
        !std::fs::read_to_string(&enrollments)
            .unwrap()
            .contains(token.trim()),
        "the token itself is not stored"
    );
    let enrolled = view(&agent).await["tokens"][0].clone();

    let mut executor = spawn_executor(&cluster, &token_file, &desktop);
    let first = wait_connected(&agent, true, &cluster).await;
    assert_eq!(first["kind"], "dial-out", "{first}");
    assert_eq!(
        first["labels"],
        json!({"os": "linux", "app": "mousepad"}),
        "{first}"
    );
    assert_eq!(first["token_id"], enrolled["id"], "{first}");

    let task = run_task(&agent, &llm, &cluster, "first").await;
    assert_eq!(task["status"], "finished", "{task}\n{}", cluster.logs());
    assert_eq!(task["result"], "first", "{task}");
    // The model saw the desktop the dial-out executor captured.
    let prompt = serde_json::to_string(&llm.requests()[0].body).unwrap();
    assert!(
        prompt.contains("image_url"),
        "the prompt carries the screenshot"
    );
    let served = view(&agent).await;
    assert!(served["calls"].as_u64().unwrap() >= 2, "{served}");

    // SIGKILL: the agent sees the connection go.
    executor.kill().unwrap();
    let gone = wait_connected(&agent, false, &cluster).await;
    assert_eq!(gone["kind"], "dial-out", "{gone}");
    cluster
        .agent
        .as_mut()
        .unwrap()
        .wait_for_log("dial-out executor disconnected", Duration::from_secs(30))
        .await
        .unwrap();

    // Started again: it reconnects, and the next task's commands go over the new connection.
    let mut executor = spawn_executor(&cluster, &token_file, &desktop);
    let back = wait_connected(&agent, true, &cluster).await;
    assert_ne!(back["connected_at"], first["connected_at"], "{back}");
    assert_eq!(back["calls"], 0, "{back}");
    let task = run_task(&agent, &llm, &cluster, "second").await;
    assert_eq!(task["status"], "finished", "{task}\n{}", cluster.logs());
    assert!(view(&agent).await["calls"].as_u64().unwrap() >= 2);
    executor
        .wait_for_log("dial-out connected", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!cluster.logs().contains("panicked"), "{}", cluster.logs());
    executor.stop().await.unwrap();
}
