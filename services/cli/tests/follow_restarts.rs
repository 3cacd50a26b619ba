//! `ufo run`'s live follow survives the agent being killed (SIGKILL) and restarted ten times during one
//! task: after each restart the watcher reconnects, says so, and resumes from the event after the last
//! one it printed — every follow-up request added meanwhile is printed exactly once, in order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use ufo_testkit::{Cluster, ProcessBuilder, ServiceProcess, workspace_binary};

const RESTARTS: usize = 10;

/// A printed event line without its optional `#<seq>` prefix.
fn body(line: &str) -> &str {
    match line.strip_prefix('#') {
        Some(rest) => rest
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start(),
        None => line,
    }
}

/// A new agent on the ports of the one that was killed.
async fn restart_agent(cluster: &Cluster) -> ServiceProcess {
    let port = |url: &str| url.rsplit(':').next().unwrap().to_owned();
    let mut agent = ProcessBuilder::new("ufo-agent", workspace_binary("ufo-agent").unwrap())
        .args([
            "--listen",
            &format!("127.0.0.1:{}", port(&cluster.grpc_url)),
        ])
        .args([
            "--http-listen",
            &format!("127.0.0.1:{}", port(&cluster.rest_url)),
        ])
        .args(["--session-url", cluster.session_url.as_str()])
        .args(["--runner-slots", "0"])
        .env("UFO_AGENT_API_KEYS", format!("test:{}", cluster.api_key))
        .env_remove("UFO_OTLP_ENDPOINT")
        .current_dir(cluster.dir())
        .spawn()
        .unwrap();
    agent
        .wait_grpc_ready(&cluster.grpc_url, Duration::from_secs(60))
        .await
        .unwrap();
    agent
        .wait_http_ready(
            &format!("{}/readyz", cluster.rest_url),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    agent
}

async fn append_follow_up(cluster: &Cluster, id: &str, i: usize) {
    use ufo_proto::v1::session_store_client::SessionStoreClient;
    use ufo_proto::v1::{AppendEventsRequest, EventDraft, EventKind};
    let mut session = SessionStoreClient::connect(cluster.session_url.clone())
        .await
        .unwrap();
    let payload = serde_json::json!({ "request": format!("follow-up {i}") });
    session
        .append_events(AppendEventsRequest {
            session_id: id.to_owned(),
            events: vec![EventDraft {
                kind: EventKind::RequestAdded.into(),
                payload: Some(ufo_proto::json::to_struct(payload).unwrap()),
                ..Default::default()
            }],
            lease_owner: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_follows_one_task_across_ten_agent_restarts() {
    let mut cluster = Cluster::builder()
        .agent_args(["--runner-slots", "0"])
        .start()
        .await
        .unwrap();
    let mut run = support::command(
        &cluster,
        &cluster.api_key,
        &["run", "--no-prompt", "a long task"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(run.stderr.take().unwrap()).lines();
    let errors = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("[ufo] {line}");
            all.push(line);
        }
        all
    });
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("a line within 60 s")
            .unwrap()
    };
    let first = next_line().await.unwrap();
    let id = first
        .strip_prefix("task ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("first line names the task: {first}"))
        .to_owned();
    assert_eq!(body(&next_line().await.unwrap()), "task created");

    let mut shown = Vec::new();
    for i in 1..=RESTARTS {
        cluster.agent.take().unwrap().kill().unwrap();
        cluster.agent = Some(restart_agent(&cluster).await);
        // The event a runner would append (this cluster has no runner, so the task stays open).
        append_follow_up(&cluster, &id, i).await;
        // The watcher reconnects on its own and prints the event added after the restart.
        loop {
            let line = next_line().await.expect("the watcher keeps following");
            let done = line.ends_with(&format!(" follow-up {i}"));
            shown.push(line);
            if done {
                break;
            }
        }
    }

    let cancelled = support::command(&cluster, &cluster.api_key, &["cancel", &id])
        .output()
        .await
        .unwrap();
    assert!(cancelled.status.success());
    while let Some(line) = next_line().await {
        shown.push(line);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(2),
        "a cancelled task exits 2: {shown:?}"
    );
    let errors = errors.await.unwrap();

    // Every follow-up exactly once, in order: nothing missed, nothing repeated.
    let follow_ups: Vec<&String> = shown
        .iter()
        .filter(|l| body(l).starts_with("follow-up request"))
        .collect();
    assert_eq!(follow_ups.len(), RESTARTS, "{shown:#?}");
    for (i, line) in follow_ups.iter().enumerate() {
        assert!(
            line.ends_with(&format!(" follow-up {}", i + 1)),
            "{shown:#?}"
        );
    }
    let reconnected = errors
        .iter()
        .filter(|l| l.starts_with("reconnected"))
        .count();
    assert_eq!(reconnected, RESTARTS, "{errors:#?}");
    assert!(
        shown.iter().any(|l| body(l).starts_with("task cancelled")),
        "{shown:#?}"
    );
}
