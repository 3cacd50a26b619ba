//! Cross-process trace propagation with what the services serve today: a client span exported by an
//! in-process tracer calls `ufo-session` (a real process) over gRPC through `ClientContext`; the server's
//! `grpc.server` span must arrive at the collector in the caller's trace, as the caller's child, and must
//! arrive because the service flushes on SIGTERM (the batch delay is set far beyond the test's duration).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use ufo_testkit::{OtlpCollector, ProcessBuilder, free_port, workspace_binary};

const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_server_span_continues_the_callers_trace_and_is_flushed_on_sigterm() {
    let collector = OtlpCollector::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut session = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--otlp-endpoint", &collector.endpoint()])
        .env(
            "UFO_SESSION_SQLITE_PATH",
            dir.path().join("session.sqlite3"),
        )
        // Only the shutdown flush can deliver the spans within this test.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    session
        .wait_grpc_ready(&url, Duration::from_secs(60))
        .await
        .unwrap();

    // The caller: an in-process tracer exporting to the same collector as service `ufo-testkit-client`.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(collector.endpoint())
        .build()
        .unwrap();
    use opentelemetry_otlp::WithExportConfig as _;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("ufo-testkit-client")
                .build(),
        )
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("propagation-test")));
    let (trace_id, client_span_id) = {
        let _guard = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!("client.health_check");
        let context = span.context();
        let ids = (
            context.span().span_context().trace_id().to_string(),
            context.span().span_context().span_id().to_string(),
        );
        async {
            let channel = tonic::transport::Endpoint::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let interceptor = ufo_common::grpc::ClientContext::new(None).unwrap();
            let mut health = tonic_health::pb::health_client::HealthClient::with_interceptor(
                channel,
                interceptor,
            );
            health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap();
        }
        .instrument(span)
        .await;
        ids
    };
    tokio::task::spawn_blocking(move || provider.shutdown())
        .await
        .unwrap()
        .unwrap();

    let status = session.stop().await.unwrap().unwrap();
    assert!(status.success(), "{status}: {}", session.logs());

    // The process has exited, so whatever it flushed is already stored: no waiting needed for it.
    let spans = collector.spans();
    let server = spans
        .find(|s| s.service == "ufo-session" && s.name == HEALTH_CHECK && s.trace_id == trace_id)
        .unwrap_or_else(|| {
            panic!(
                "no {HEALTH_CHECK} span from ufo-session in trace {trace_id}:\n{}",
                spans.describe()
            )
        });
    assert_eq!(
        server.parent_span_id.as_deref(),
        Some(client_span_id.as_str())
    );
    assert_eq!(server.attr("rpc.system"), Some("grpc"));
    assert_eq!(server.kind, 2, "a server span");
    let client = spans
        .find(|s| s.service == "ufo-testkit-client" && s.span_id == client_span_id)
        .expect("the client span was exported");
    spans.expect_child_of(server, client).unwrap();
    assert!(spans.is_descendant(server, client));
    assert_eq!(
        spans
            .services_in_trace(&trace_id)
            .into_iter()
            .collect::<Vec<_>>(),
        ["ufo-session", "ufo-testkit-client"]
    );
}

#[tokio::test]
async fn a_process_that_exits_early_fails_readiness_with_its_output() {
    let port = free_port().unwrap();
    let mut session = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen", "not-an-address"])
        .spawn()
        .unwrap();
    let err = session
        .wait_grpc_ready(&format!("http://127.0.0.1:{port}"), Duration::from_secs(60))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("exited"), "{text}");
    assert!(text.contains("--listen"), "{text}");
}
