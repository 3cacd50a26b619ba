//! Benchmark (ignored by default; docs/mcp-server.md has the figures): what a desktop `click` through MCP
//! costs over the executor's own time for the same work. A real Linux executor runs headless (its own
//! Xvfb) with mousepad; the agent runs in-process on the real session service (Postgres) with the
//! executor registered as `desk`. Alternately, N times each:
//!
//! - **executor**: the batch an MCP click sends (`click_input` on mousepad's text view, then
//!   `capture_desktop_screenshot`, the step's screenshot) straight to the executor through the agent's
//!   gRPC dispatcher — the executor's own time, seen from a client on the same machine;
//! - **MCP**: `tools/call click` from an rmcp client over streamable HTTP to `/mcp`: the same batch plus
//!   the protocol, auth, the policy, the intent and the step with its screenshot blob recorded in the
//!   caller's direct session.
//!
//! Run: `cargo nextest run -p ufo-agent --test mcp_click_overhead --run-ignored only --no-capture`
//! (`UFO_BENCH_CLICKS`, default 200). It prints p50/p90 of both and the overhead, and fails only when a
//! call fails or a click is not recorded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use api_support::{Agent, KEY, Session, agent_config};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher, ResultStatus};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn summary(name: &str, mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let (p50, p90) = (percentile(&ms, 0.5), percentile(&ms, 0.9));
    println!(
        "{name:<44} p50 {p50:>8.2} ms   p90 {p90:>8.2} ms   (n = {})",
        ms.len()
    );
    (p50, p90)
}

async fn run(d: &dyn CommandDispatcher, commands: Vec<Command>) -> Vec<Value> {
    let results = d.execute(commands).await.unwrap();
    for r in &results {
        assert_eq!(r.status, ResultStatus::Success, "{}", r.error);
    }
    results.iter().map(|r| r.result.clone()).collect()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: run it explicitly (see the module doc)"]
async fn click_through_mcp_over_the_executors_own_time() {
    use clap::Parser as _;
    let clicks: usize = std::env::var("UFO_BENCH_CLICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor",
        "--token",
        "tok",
        "--allow-app",
        "mousepad",
        "--desktop",
        "headless",
        "--desktop-size",
        "1280x900",
    ])
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run(config, listener, stop.clone()));
    let url = format!("http://{addr}");
    ufo_testkit::poll_until(
        "the headless executor serving",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || ufo_testkit::grpc_serving(&url),
    )
    .await
    .unwrap();
    let direct: Arc<dyn CommandDispatcher> =
        Arc::new(GrpcDispatcher::connect_lazy(&url, Some("tok"), 10_000, 64 << 20, None).unwrap());

    // mousepad, its window selected and its text view found (setup, not measured).
    run(
        direct.as_ref(),
        vec![Command::act(
            "launch_application",
            json!({"name": "mousepad", "args": []}),
        )],
    )
    .await;
    let window = ufo_testkit::poll_until(
        "mousepad's window",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let direct = direct.clone();
            async move {
                let listed = run(
                    direct.as_ref(),
                    vec![Command::observe("get_desktop_app_target_info", json!({}))],
                )
                .await;
                Ok(listed[0].as_array().and_then(|ws| {
                    ws.iter()
                        .find(|w| {
                            w["name"]
                                .as_str()
                                .is_some_and(|n| n.to_lowercase().contains("mousepad"))
                        })
                        .and_then(|w| w["id"].as_str().map(str::to_owned))
                }))
            }
        },
    )
    .await
    .unwrap();
    let session = Session::start().await;
    let registered = format!("desk=http://{addr}");
    let agent = Agent::start(
        agent_config(
            &session.url,
            &["--executors", &registered, "--executor-token", "tok"],
        ),
        None,
    )
    .await;
    let transport = StreamableHttpClientTransport::with_client(
        ufo_testkit::http_client(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", agent.http))
            .auth_header(KEY.to_owned()),
    );
    let client = ().serve(transport).await.unwrap();
    let call = |name: &'static str, arguments: Value| {
        let mut params = CallToolRequestParams::new(name);
        params.arguments = arguments.as_object().cloned();
        client.call_tool(params)
    };
    let controls = call(
        "list_controls",
        json!({"executor": "desk", "window": window}),
    )
    .await
    .unwrap();
    assert_ne!(controls.is_error, Some(true), "{controls:?}");
    let text_view = controls.structured_content.as_ref().unwrap()["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Edit")
        .and_then(|c| c["id"].as_str())
        .unwrap()
        .to_owned();
    // The direct path's own selection and listing (the executor keeps one per connection or not: either
    // way the ids are the same listing's).
    run(
        direct.as_ref(),
        vec![
            Command::observe("select_application_window", json!({"id": window})),
            Command::observe("get_app_window_controls_target_info", json!({})),
        ],
    )
    .await;

    let batch = || {
        vec![
            Command::act(
                "click_input",
                json!({"id": text_view, "button": "left", "double": false}),
            ),
            Command::observe("capture_desktop_screenshot", json!({})),
        ]
    };
    let bare = || {
        vec![Command::act(
            "click_input",
            json!({"id": text_view, "button": "left", "double": false}),
        )]
    };
    let warmup = 10;
    let (mut executor_ms, mut bare_ms, mut mcp_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut steps = Vec::new();
    for i in 0..warmup + clicks {
        let t = Instant::now();
        run(direct.as_ref(), batch()).await;
        let e = t.elapsed();
        let t = Instant::now();
        run(direct.as_ref(), bare()).await;
        let b = t.elapsed();
        let t = Instant::now();
        let clicked = call("click", json!({"executor": "desk", "control": text_view}))
            .await
            .unwrap();
        let m = t.elapsed();
        assert_ne!(clicked.is_error, Some(true), "{clicked:?}");
        steps.push(
            clicked.structured_content.unwrap()["step"]
                .as_u64()
                .unwrap(),
        );
        if i >= warmup {
            executor_ms.push(e.as_secs_f64() * 1e3);
            bare_ms.push(b.as_secs_f64() * 1e3);
            mcp_ms.push(m.as_secs_f64() * 1e3);
        }
    }
    // Every click was a step of one direct session, in order.
    assert!(steps.windows(2).all(|w| w[1] == w[0] + 1), "{steps:?}");

    println!("desktop click, {clicks} each, alternating (after {warmup} warm-up rounds):");
    summary("executor: bare click_input batch", bare_ms);
    let (e50, e90) = summary(
        "executor: click_input + capture_desktop_screenshot",
        executor_ms,
    );
    let (m50, m90) = summary("MCP click (recorded as a step)", mcp_ms);
    println!(
        "overhead of MCP over the executor's own time: p50 {:.2} ms, p90 {:.2} ms",
        m50 - e50,
        m90 - e90
    );

    client.cancel().await.unwrap();
    agent.stop().await;
    session.stop().await;
    stop.cancel();
    let _ = server.await;
}
