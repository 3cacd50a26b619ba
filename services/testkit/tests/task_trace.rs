//! One task is one trace across the three services, as real processes: a task run by `ufo-agent` observes
//! a real Xvfb + AT-SPI desktop through `ufo-executor` (its Linux backend), then fails at its LLM call (the
//! LLM is unreachable: the trace, not the model, is under test). The `task` span, the executor's server
//! spans for the observation commands and the session's server spans for the store calls all arrive in one
//! trace, every one of them under the task span.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ufo_testkit::{Cluster, OtlpCollector, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_is_one_trace_across_agent_executor_and_session() {
    let collector = OtlpCollector::start().await.unwrap();
    let unreachable = format!("http://127.0.0.1:{}", free_port().unwrap());
    let desktop = ufo_executor::testing::Desktop::start(1280, 800)
        .await
        .unwrap();
    let mut cluster = Cluster::builder()
        .otlp_endpoint(collector.endpoint())
        .local_executor(desktop.env())
        .llm_base_url(unreachable)
        .agent_args(["--llm-max-retries", "0"])
        .start()
        .await
        .unwrap();

    let http = ufo_testkit::http_client();
    let task: serde_json::Value = http
        .post(format!("{}/v1/tasks", cluster.rest_url))
        .bearer_auth(&cluster.api_key)
        .json(&serde_json::json!({"request": "open mousepad"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    ufo_testkit::poll_until(
        "the task to end",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let (http, url, key) = (
                http.clone(),
                format!("{}/v1/tasks/{id}", cluster.rest_url),
                cluster.api_key.clone(),
            );
            async move {
                let task: serde_json::Value = http
                    .get(url)
                    .bearer_auth(key)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .json()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = task["status"].as_str().unwrap_or_default().to_owned();
                if matches!(status.as_str(), "failed" | "finished" | "cancelled") {
                    Ok(Some(()))
                } else {
                    Err(format!("status {status}"))
                }
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    // SIGTERM: both services flush what they hold.
    cluster.stop().await.unwrap();

    let spans = collector
        .wait_until(Duration::from_secs(30), |spans| {
            spans
                .find(|s| {
                    s.service == "ufo-agent"
                        && s.name == "task"
                        && s.attr("task_id") == Some(id.as_str())
                })
                .is_some()
        })
        .await
        .unwrap();
    let task_span = spans
        .find(|s| {
            s.service == "ufo-agent" && s.name == "task" && s.attr("task_id") == Some(id.as_str())
        })
        .unwrap();
    let remote_spans: Vec<_> = spans
        .in_trace(&task_span.trace_id)
        .filter(|s| s.service != "ufo-agent")
        .collect();
    for (service, prefix) in [
        ("ufo-session", "/ufo.v1.SessionStore/"),
        ("ufo-executor", "/ufo.v1.Executor/"),
    ] {
        assert!(
            remote_spans
                .iter()
                .any(|s| s.service == service && s.name.starts_with(prefix)),
            "no {service} server span in the task's trace:\n{}",
            spans.describe()
        );
    }
    for span in &remote_spans {
        assert!(
            spans.is_descendant(span, task_span),
            "{} is not under the task span:\n{}",
            span.name,
            spans.describe()
        );
    }
    assert_eq!(
        spans
            .services_in_trace(&task_span.trace_id)
            .into_iter()
            .collect::<Vec<_>>(),
        ["ufo-agent", "ufo-executor", "ufo-session"]
    );
}
