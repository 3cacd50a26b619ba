//! Dial-out executors' liveness across agent replicas (issue 36): a heartbeat is kept in memory by the
//! replica holding the connection and writes nothing to the session store; the store's `last_heartbeat`
//! is written when the executor connects and then only every `--dial-out-seen-refresh-ms` of the replica
//! holding it. Two real `ufo-agent` replicas share one session service; two stand-in executors speak the
//! real protocol (`ufo.v1.ExecutorHub/Dial`, heartbeats at the welcome's interval): desk-a dials replica
//! a (no refresh), desk-b dials replica b (a refresh every 400 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use ufo_client::{AgentClient, Timeouts};
use ufo_proto::v1::executor_hub_client::ExecutorHubClient;
use ufo_proto::v1::{AgentFrame, ExecutorFrame, Heartbeat, agent_frame, executor_frame};
use ufo_testkit::{Cluster, ProcessBuilder, poll_until, workspace_binary};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// A stand-in executor connected as `name`, sending a heartbeat at the welcome's interval until `stop`
/// (then its stream ends). Returns once the agent welcomed it.
async fn dial(url: &str, name: &str, token: &str, stop: CancellationToken) {
    let mut client = ExecutorHubClient::connect(url.to_owned()).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    let md = request.metadata_mut();
    md.insert("x-ufo-executor-name", name.parse().unwrap());
    md.insert("authorization", format!("Bearer {token}").parse().unwrap());
    md.insert("x-ufo-executor-labels", "os=test".parse().unwrap());
    let mut inbound = client.dial(request).await.unwrap().into_inner();
    let every = match inbound.message().await.unwrap() {
        Some(AgentFrame {
            kind: Some(agent_frame::Kind::Welcome(w)),
        }) => Duration::from_millis(u64::from(w.heartbeat_interval_ms)),
        other => panic!("expected a welcome, got {other:?}"),
    };
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {
                    let beat = ExecutorFrame {
                        kind: Some(executor_frame::Kind::Heartbeat(Heartbeat { sent_at_ms: 0 })),
                    };
                    if tx.send(beat).await.is_err() {
                        return;
                    }
                }
                frame = inbound.message() => if !matches!(frame, Ok(Some(_))) { return },
            }
        }
    });
}

/// `name`'s `last_heartbeat` as `GET /v1/admin/desktops` of `agent` shows it (RFC 3339, milliseconds,
/// UTC: ordered as text), when it is listed.
async fn seen(agent: &AgentClient, name: &str) -> Result<Option<String>, String> {
    let pool = agent.desktops().await.map_err(|e| e.to_string())?;
    Ok(pool["desktops"].as_array().and_then(|all| {
        all.iter()
            .find(|d| d["name"] == name)
            .and_then(|d| d["last_heartbeat"].as_str().map(str::to_owned))
    }))
}

fn connected(executors: &Value, name: &str) -> bool {
    executors["executors"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == name && e["connected"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_stay_in_memory_and_the_store_is_refreshed_only_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let args = |refresh: &str| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = [
            "--api-admins",
            "test",
            "--dial-out-heartbeat-ms",
            "300",
            "--dial-out-seen-refresh-ms",
            refresh,
            "--executor-enrollments-file",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(enrollments.clone().into_os_string());
        args
    };
    let mut cluster = Cluster::builder()
        .agent_args(args("0"))
        .start()
        .await
        .unwrap();
    let grpc_b = ufo_testkit::free_port().unwrap();
    let http_b = ufo_testkit::free_port().unwrap();
    let mut replica_b = ProcessBuilder::new("ufo-agent-b", workspace_binary("ufo-agent").unwrap())
        .args(["--listen", &format!("127.0.0.1:{grpc_b}")])
        .args(["--http-listen", &format!("127.0.0.1:{http_b}")])
        .args(["--session-url", cluster.session_url.as_str()])
        .args(["--llm-base-url", "http://127.0.0.1:9/v1"])
        .env("UFO_AGENT_LLM_API_KEY", "test-llm-key")
        .env("UFO_AGENT_API_KEYS", format!("test:{}", cluster.api_key))
        .env_remove("UFO_OTLP_ENDPOINT")
        .args(args("400"))
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    let url_b = format!("http://127.0.0.1:{grpc_b}");
    replica_b.wait_grpc_ready(&url_b, WAIT).await.unwrap();
    let a = ufo_e2e::agent(&cluster).unwrap();
    let b = AgentClient::new(
        &format!("http://127.0.0.1:{http_b}"),
        Some(cluster.api_key.clone()),
        Timeouts::default(),
    )
    .unwrap();
    let token = |v: &Value| v["token"].as_str().unwrap().to_owned();
    let desk_a = token(&a.enroll_executor("desk-a").await.unwrap());
    let desk_b = token(&a.enroll_executor("desk-b").await.unwrap());
    let stop_a = CancellationToken::new();
    let stop_b = CancellationToken::new();
    dial(&cluster.grpc_url, "desk-a", &desk_a, stop_a.clone()).await;
    dial(&url_b, "desk-b", &desk_b, stop_b.clone()).await;

    // Registered at connect: replica b reads desk-a's record from the store.
    let registered_a = poll_until("desk-a registered in the store", WAIT, POLL, || async {
        seen(&b, "desk-a").await
    })
    .await
    .unwrap();
    let first_b = poll_until("desk-b registered in the store", WAIT, POLL, || async {
        seen(&a, "desk-b").await
    })
    .await
    .unwrap();

    // Replica a, holding desk-a, shows its heartbeats (kept in memory) a second past the registration.
    let later = |than: &str| {
        let than = than.to_owned();
        move |now: Option<String>| now.filter(|n| n.as_str() > than.as_str())
    };
    let mut beats_a = Vec::new();
    while beats_a.len() < 3 {
        let after = beats_a
            .last()
            .cloned()
            .unwrap_or_else(|| registered_a.clone());
        let next = poll_until(
            "a newer heartbeat of desk-a on replica a",
            WAIT,
            POLL,
            || {
                let check = later(&after);
                let a = &a;
                async move { Ok(check(seen(a, "desk-a").await?)) }
            },
        )
        .await
        .unwrap();
        beats_a.push(next);
    }
    // desk-b's record is refreshed by replica b (every 400 ms): replica a sees it move twice.
    let mut refreshed_b = first_b.clone();
    for _ in 0..2 {
        refreshed_b = poll_until("desk-b's record refreshed", WAIT, POLL, || {
            let check = later(&refreshed_b);
            let a = &a;
            async move { Ok(check(seen(a, "desk-b").await?)) }
        })
        .await
        .unwrap();
    }
    // Meanwhile desk-a's heartbeats (replica a refreshes nothing) wrote nothing to the store.
    assert_eq!(
        seen(&b, "desk-a").await.unwrap().as_deref(),
        Some(registered_a.as_str()),
        "desk-a's heartbeats ({beats_a:?}) were written to the store"
    );
    // Each replica lists as connected only what dialled it.
    let (on_a, on_b) = (a.executors().await.unwrap(), b.executors().await.unwrap());
    assert!(
        connected(&on_a, "desk-a") && !connected(&on_a, "desk-b"),
        "{on_a}"
    );
    assert!(
        connected(&on_b, "desk-b") && !connected(&on_b, "desk-a"),
        "{on_b}"
    );

    // desk-a goes away: replica a shows the store's record again, still its connect time.
    stop_a.cancel();
    poll_until("desk-a disconnected from replica a", WAIT, POLL, || async {
        let all = a.executors().await.map_err(|e| e.to_string())?;
        Ok((!connected(&all, "desk-a")).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(
        seen(&a, "desk-a").await.unwrap().as_deref(),
        Some(registered_a.as_str())
    );
    assert!(
        beats_a.iter().all(|b| b.as_str() > registered_a.as_str()),
        "{beats_a:?}"
    );

    stop_b.cancel();
    let logs = format!("{}\n--- replica b\n{}", cluster.logs(), replica_b.logs());
    assert!(!logs.contains("panicked"), "{logs}");
    replica_b.stop().await.unwrap();
    cluster.stop().await.unwrap();
}
