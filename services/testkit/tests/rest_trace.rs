//! W3C trace context across real processes, from an HTTP caller through `ufo-agent` to `ufo-session`: a
//! `POST /v1/tasks` carrying the caller's `traceparent` yields an agent `http.server` span that is the
//! caller's child and session `SessionStore` server spans under it, all in the caller's trace — exported
//! by both processes and flushed when they stop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ufo_testkit::{Cluster, OtlpCollector};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_call_and_the_session_calls_it_causes_share_the_callers_trace() {
    let collector = OtlpCollector::start().await.unwrap();
    let mut cluster = Cluster::builder()
        .otlp_endpoint(collector.endpoint())
        .agent_args(["--runner-slots", "0"])
        .start()
        .await
        .unwrap();

    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let caller_span = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let response = ufo_testkit::http_client()
        .post(format!("{}/v1/tasks", cluster.rest_url))
        .bearer_auth(&cluster.api_key)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&serde_json::json!({"request": "open mousepad"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    cluster.stop().await.unwrap();

    let spans = collector
        .wait_until(Duration::from_secs(30), |spans| {
            let services = spans.services_in_trace(&trace_id);
            services.contains("ufo-agent") && services.contains("ufo-session")
        })
        .await
        .unwrap();
    let http = spans
        .find(|s| s.trace_id == trace_id && s.service == "ufo-agent" && s.name == "POST /v1/tasks")
        .unwrap_or_else(|| {
            panic!(
                "no agent http span in the caller's trace:\n{}",
                spans.describe()
            )
        });
    assert_eq!(
        http.parent_span_id.as_deref(),
        Some(caller_span),
        "the caller's child"
    );
    let session_calls: Vec<_> = spans
        .in_trace(&trace_id)
        .filter(|s| s.service == "ufo-session" && s.name.starts_with("/ufo.v1.SessionStore/"))
        .collect();
    assert!(!session_calls.is_empty(), "{}", spans.describe());
    for call in session_calls {
        assert!(
            spans.is_descendant(call, http),
            "{} is not under the agent's http span:\n{}",
            call.name,
            spans.describe()
        );
        let parent = spans.parent_of(call).unwrap();
        assert_eq!(
            parent.service, "ufo-agent",
            "a session span's parent is the agent-side span that called it"
        );
    }
}
