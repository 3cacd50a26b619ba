//! `--mcp-click`: what a desktop `click` through MCP costs over the executor's own time, per call.
//!
//! A real `ufo-executor` (headless: its own Xvfb, 1280×900, mousepad) and, per agent build, a cluster of
//! `ufo-session` (the run's store) and `ufo-agent` with that executor registered as `desk`, all separate
//! processes. In alternation, N times each after warm-up rounds:
//!
//! - **executor**: `click_input` on mousepad's text view sent straight to the executor (gRPC);
//! - **MCP**: `tools/call click` from an rmcp client of the 2025-11-25 revision (`initialize`, a
//!   session, every answer an SSE stream: what desktop clients and the Python SDK speak) over streamable
//!   HTTP to the agent's `/mcp` (auth, policy, the intent, the executor, the step recorded in the
//!   caller's direct session);
//! - **MCP, current revision**: the same from a client of 2026-07-28 (no session, each request
//!   self-contained; a call's answer as one JSON body);
//! - with `--mcp-click-baseline DIR`, the same MCP click on an agent built from another commit (its
//!   binaries in DIR), and the executor batch that agent's click ran (`click_input` +
//!   `capture_desktop_screenshot`).
//!
//! - **framing**: the same `tools/call click` refused on its arguments (`button: "none"`): HTTP, auth,
//!   the MCP session and JSON-RPC, no store and no executor;
//! - **intent**: the intent's write alone, `AppendEvents` of a STEP_STARTED `{intent: true}` event sent
//!   straight to `ufo-session` (the statement the agent commits before a click acts), on a session of
//!   the bench's own.
//!
//! Every MCP click is timed right after a bare executor click (the order of the MCP paths turns round
//! by round). Each call's overhead is taken inside that call: its round trip minus the time the executor reported
//! for the call's commands (`Result.duration_us`; an MCP click returns it as `executor_us`), so the
//! screen's settle wait and the capture, which vary by tens of milliseconds from call to call, drop out.
//! Between calls the bench waits until the MCP call's step is recorded (its screenshot and record run
//! after the answer), so no call queues behind another's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt as _};
use serde_json::{Value, json};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher, ResultStatus};
use ufo_client::AgentClient;
use ufo_proto::v1::session_store_client::SessionStoreClient;
use ufo_proto::v1::{AppendEventsRequest, CreateSessionRequest, EventDraft, EventKind};
use ufo_testkit::{Cluster, ProcessBuilder, ServiceProcess, free_port};

use crate::store::Storage;

const TOKEN: &str = "bench-executor-token";

/// One call's figures, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Timing {
    round_trip: f64,
    executor: f64,
}

/// One agent build under measurement.
struct Mcp {
    label: String,
    cluster: Cluster,
    /// A client of the 2025-11-25 revision, with a session (what the desktop clients and the Python
    /// SDK speak).
    client: RunningService<rmcp::RoleClient, ()>,
    /// A client of the current revision (2026-07-28): no session, each request self-contained.
    current: RunningService<rmcp::RoleClient, ()>,
    rest: AgentClient,
    control: String,
    /// The store's own client and a session of the bench's for the intent-alone measurement.
    store: SessionStoreClient<tonic::transport::Channel>,
    probe: String,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50, p90 and p99 of `v`.
fn percentiles(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [0.5, 0.9, 0.99].map(|p| percentile(&v, p))
}

async fn execute(d: &dyn CommandDispatcher, commands: Vec<Command>) -> anyhow::Result<Timing> {
    let t = Instant::now();
    let results = d.execute(commands).await?;
    let round_trip = t.elapsed().as_secs_f64() * 1e3;
    for r in &results {
        if r.status != ResultStatus::Success {
            bail!("the executor refused: {}", r.error);
        }
    }
    let us: u64 = results.iter().map(|r| r.duration_us).sum();
    Ok(Timing {
        round_trip,
        executor: us as f64 / 1e3,
    })
}

async fn call(
    client: &RunningService<rmcp::RoleClient, ()>,
    name: &'static str,
    arguments: Value,
) -> anyhow::Result<Value> {
    let mut params = CallToolRequestParams::new(name);
    params.arguments = arguments.as_object().cloned();
    let result = client.call_tool(params).await?;
    if result.is_error == Some(true) {
        bail!("{name} failed: {result:?}");
    }
    result
        .structured_content
        .with_context(|| format!("{name} answered without structured content"))
}

/// A gRPC call that does nothing (`grpc.health.v1.Health/Check`) on the executor at `url`: what one
/// round trip through tonic, hyper and the kernel costs on this machine, with no work on either side.
async fn floor(health: &HealthClient<tonic::transport::Channel>) -> anyhow::Result<Timing> {
    let t = Instant::now();
    health
        .clone()
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    Ok(Timing {
        round_trip: t.elapsed().as_secs_f64() * 1e3,
        executor: 0.0,
    })
}

/// The headless executor, serving with mousepad allowed.
async fn executor(bin_dir: &Path) -> anyhow::Result<(ServiceProcess, String)> {
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let mut process = ProcessBuilder::new("ufo-executor", bin_dir.join("ufo-executor"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--allow-app", "mousepad", "--desktop", "headless"])
        .args(["--desktop-size", "1280x900"])
        .env("UFO_EXECUTOR_TOKEN", TOKEN)
        .env_remove("UFO_OTLP_ENDPOINT")
        .spawn()?;
    process
        .wait_grpc_ready(&url, Duration::from_secs(120))
        .await?;
    Ok((process, url))
}

impl Mcp {
    async fn start(
        label: &str,
        storage: &Storage<'_>,
        bin_dir: Option<&Path>,
        executor_url: &str,
        window: &str,
    ) -> anyhow::Result<Self> {
        let mut builder = storage.configure(Cluster::builder())?;
        if let Some(dir) = bin_dir {
            builder = builder.binaries_from(dir);
        }
        let registered = format!("desk={executor_url}");
        let cluster = builder
            .agent_args([
                "--executors",
                registered.as_str(),
                "--executor-token",
                TOKEN,
                "--runner-slots",
                "0",
            ])
            .start()
            .await?;
        let transport = || {
            StreamableHttpClientTransport::with_client(
                ufo_testkit::http_client(),
                StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", cluster.rest_url))
                    .auth_header(cluster.api_key.clone()),
            )
        };
        let client = ().serve(transport()).await?;
        let current = ()
            .serve_with_lifecycle(
                transport(),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await?;
        let controls = call(
            &client,
            "list_controls",
            json!({"executor": "desk", "window": window}),
        )
        .await?;
        let control = controls["result"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Edit")
            .and_then(|c| c["id"].as_str())
            .context("mousepad's text view in list_controls")?
            .to_owned();
        let rest = ufo_e2e::agent(&cluster)?;
        let mut store = SessionStoreClient::connect(cluster.session_url.clone()).await?;
        // A task nobody claims (the agent runs no runner slots): the intents go to it unleased.
        let probe = store
            .create_session(CreateSessionRequest {
                request: "the MCP click bench's intent writes".into(),
                owner: "bench".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .id;
        Ok(Self {
            label: label.to_owned(),
            cluster,
            client,
            current,
            rest,
            control,
            store,
            probe,
        })
    }

    /// The same click refused on its arguments before any store or executor is reached: what HTTP,
    /// auth, the MCP session and JSON-RPC cost.
    async fn framing(&self) -> anyhow::Result<Timing> {
        let mut params = CallToolRequestParams::new("click");
        params.arguments = json!({"executor": "desk", "control": self.control, "button": "none"})
            .as_object()
            .cloned();
        let t = Instant::now();
        let result = self.client.call_tool(params).await?;
        let round_trip = t.elapsed().as_secs_f64() * 1e3;
        if result.is_error != Some(true) {
            bail!("a click with button \"none\" was not refused: {result:?}");
        }
        Ok(Timing {
            round_trip,
            executor: 0.0,
        })
    }

    /// Step `step`'s intent written alone, as the agent writes it before a click acts.
    async fn intent(&self, step: u64) -> anyhow::Result<Timing> {
        let payload = json!({"intent": true, "step": step, "round": 1, "agent": "McpClient/bench",
            "mcp_tool": "click", "actions": [{"tool": "click_input",
            "arguments": {"id": self.control, "button": "left", "double": false}}]});
        let request = AppendEventsRequest {
            session_id: self.probe.clone(),
            events: vec![EventDraft {
                kind: EventKind::StepStarted as i32,
                payload: Some(ufo_proto::json::to_struct(payload)?),
                step,
                round: 1,
            }],
            lease_owner: String::new(),
        };
        let t = Instant::now();
        self.store.clone().append_events(request).await?;
        Ok(Timing {
            round_trip: t.elapsed().as_secs_f64() * 1e3,
            executor: 0.0,
        })
    }

    /// One click from `client`: its timing (the executor's time as the agent reported it, when it
    /// does) once its step is recorded.
    async fn click(&self, client: &RunningService<rmcp::RoleClient, ()>) -> anyhow::Result<Timing> {
        let t = Instant::now();
        let clicked = call(
            client,
            "click",
            json!({"executor": "desk", "control": self.control}),
        )
        .await?;
        let round_trip = t.elapsed().as_secs_f64() * 1e3;
        let executor = clicked["executor_us"]
            .as_u64()
            .map_or(f64::NAN, |us| us as f64 / 1e3);
        let session = clicked["session_id"]
            .as_str()
            .context("the click's session")?
            .to_owned();
        let step = clicked["step"].as_u64().context("the click's step")?;
        ufo_testkit::poll_until(
            "the click's step recorded",
            Duration::from_secs(60),
            Duration::from_millis(5),
            || {
                let session = session.clone();
                async move {
                    let page = self
                        .rest
                        .steps(&session, Some(step), Some(1))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok((page["steps"].as_array().is_some_and(|s| !s.is_empty())).then_some(()))
                }
            },
        )
        .await?;
        Ok(Timing {
            round_trip,
            executor,
        })
    }
}

/// Runs the measurement on `storage` (one per agent build: `baseline_storage` for the baseline's).
pub async fn run(
    storage: &Storage<'_>,
    baseline: Option<(&Path, &Storage<'_>)>,
    clicks: usize,
    warmup: usize,
    logs: Option<&Path>,
) -> anyhow::Result<()> {
    let bin_dir: PathBuf = std::env::current_exe()?
        .parent()
        .context("the bench's directory")?
        .to_owned();
    let (mut executor_process, url) = executor(&bin_dir).await?;
    let direct: Arc<dyn CommandDispatcher> = Arc::new(GrpcDispatcher::connect_lazy(
        &url,
        Some(TOKEN),
        10_000,
        64 << 20,
        None,
    )?);
    execute(
        direct.as_ref(),
        vec![Command::act(
            "launch_application",
            json!({"name": "mousepad", "args": []}),
        )],
    )
    .await?;
    let window = ufo_testkit::poll_until(
        "mousepad's window",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let direct = direct.clone();
            async move {
                let listed = direct
                    .execute(vec![Command::observe(
                        "get_desktop_app_target_info",
                        json!({}),
                    )])
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(listed
                    .first()
                    .and_then(|l| l.result.as_array())
                    .and_then(|ws| {
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
    .await?;
    let health = HealthClient::new(
        tonic::transport::Endpoint::from_shared(url.clone())?
            .tcp_nodelay(true)
            .connect()
            .await?,
    );
    let this = Mcp::start("this build", storage, None, &url, &window).await?;
    let base = match baseline {
        Some((dir, s)) => Some(Mcp::start("baseline", s, Some(dir), &url, &window).await?),
        None => None,
    };
    // The direct path's own window selection and listing (ids are the same listing's).
    execute(
        direct.as_ref(),
        vec![
            Command::observe("select_application_window", json!({"id": window})),
            Command::observe("get_app_window_controls_target_info", json!({})),
        ],
    )
    .await?;
    let click = |control: &str| {
        Command::act(
            "click_input",
            json!({"id": control, "button": "left", "double": false}),
        )
    };
    let mut bare = Vec::new();
    let mut batch = Vec::new();
    let mut ours = Vec::new();
    let mut current = Vec::new();
    let mut theirs = Vec::new();
    let mut framing = Vec::new();
    let mut intent = Vec::new();
    let mut empty = Vec::new();
    for round in 0..warmup + clicks {
        // Each MCP click comes right after a bare executor click, as an MCP client's next call comes
        // after its model's thinking: the first call after the 300 ms the executor's click waits for
        // the screen measures ≈ 0.9 ms slower than one right after another call (an A/A run,
        // docs/mcp-server.md), so every path is timed in that slot; the order turns round by round.
        let mut clickers = vec![(0, &this, &this.client), (1, &this, &this.current)];
        if let Some(base) = &base {
            clickers.push((2, base, &base.client));
        }
        let n = clickers.len();
        clickers.rotate_left(round % n);
        let mut clicked = [None; 3];
        let mut bares = Vec::new();
        for (which, mcp, client) in clickers {
            bares.push(execute(direct.as_ref(), vec![click(&this.control)]).await?);
            clicked[which] = Some(mcp.click(client).await?);
        }
        let [m, c, t] = clicked;
        let (m, c) = (
            m.context("this build's click")?,
            c.context("the current-revision click")?,
        );
        let f = this.framing().await?;
        let i = this.intent(round as u64 + 1).await?;
        // The empty call in the MCP clicks' slot: right after the executor's wait for the screen.
        execute(direct.as_ref(), vec![click(&this.control)]).await?;
        let h = floor(&health).await?;
        let e = match &base {
            Some(_) => Some(
                execute(
                    direct.as_ref(),
                    vec![
                        click(&this.control),
                        Command::observe("capture_desktop_screenshot", json!({})),
                    ],
                )
                .await?,
            ),
            None => None,
        };
        if round >= warmup {
            bare.extend(bares);
            ours.push(m);
            current.push(c);
            framing.push(f);
            intent.push(i);
            empty.push(h);
            theirs.extend(t);
            batch.extend(e);
        }
    }
    report(
        clicks,
        warmup,
        &Paths {
            bare: &bare,
            ours: &ours,
            current: &current,
            batch: &batch,
            theirs: &theirs,
            framing: &framing,
            intent: &intent,
            empty: &empty,
        },
        base.is_some(),
    );

    if let Some(path) = logs {
        let written: String = [Some(&this), base.as_ref()]
            .into_iter()
            .flatten()
            .map(|m| format!("===== {} =====\n{}", m.label, m.cluster.logs()))
            .collect();
        std::fs::write(path, written)
            .with_context(|| format!("cannot write the services' logs to {}", path.display()))?;
    }
    for mcp in [Some(this), base].into_iter().flatten() {
        let Mcp {
            label,
            mut cluster,
            client,
            current,
            ..
        } = mcp;
        client.cancel().await.ok();
        current.cancel().await.ok();
        cluster
            .stop()
            .await
            .with_context(|| format!("stopping the {label} cluster"))?;
    }
    executor_process.stop().await?;
    Ok(())
}

/// p50 of the round trip and of the overhead.
fn row(name: &str, timings: &[Timing]) -> (f64, f64) {
    let [rt50, rt90, rt99] = percentiles(timings.iter().map(|t| t.round_trip).collect());
    let [ex50, _, _] = percentiles(timings.iter().map(|t| t.executor).collect());
    let [ov50, ov90, ov99] = percentiles(
        timings
            .iter()
            .map(|t| t.round_trip - t.executor)
            .filter(|v| !v.is_nan())
            .collect(),
    );
    let overhead = if ov50.is_nan() {
        "— | — | —".to_owned()
    } else {
        format!("{ov50:.2} ms | {ov90:.2} ms | {ov99:.2} ms")
    };
    let executor = if ex50.is_nan() {
        "—".to_owned()
    } else {
        format!("{ex50:.1} ms")
    };
    println!("| {name} | {rt50:.1} ms | {rt90:.1} ms | {rt99:.1} ms | {executor} | {overhead} |");
    (rt50, ov50)
}

/// Every path's timings, in measuring order.
struct Paths<'a> {
    bare: &'a [Timing],
    ours: &'a [Timing],
    current: &'a [Timing],
    batch: &'a [Timing],
    theirs: &'a [Timing],
    framing: &'a [Timing],
    intent: &'a [Timing],
    empty: &'a [Timing],
}

fn report(clicks: usize, warmup: usize, paths: &Paths<'_>, baseline: bool) {
    println!();
    println!(
        "## desktop click through MCP: {clicks} calls per path, alternating, after {warmup} warm-up rounds"
    );
    println!();
    println!(
        "| path | round trip p50 | p90 | p99 | executor's own (reported) p50 | overhead per call (round trip − executor) p50 | p90 | p99 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let (_, direct_ov) = row("executor: `click_input` over gRPC", paths.bare);
    let (ours_rt, ours_ov) = row("MCP `click` (this build; a 2025-11-25 session)", paths.ours);
    row(
        "MCP `click` (this build; 2026-07-28, stateless)",
        paths.current,
    );
    let (_, framing_ov) = row(
        "MCP `click` refused on its arguments (HTTP, auth, MCP; no store, no executor)",
        paths.framing,
    );
    let (_, intent_ov) = row(
        "the intent alone: `AppendEvents` straight to ufo-session",
        paths.intent,
    );
    let (_, empty_ov) = row(
        "a gRPC call that does nothing: `grpc.health.v1.Health/Check` to ufo-executor",
        paths.empty,
    );
    if baseline {
        row(
            "executor: `click_input` + `capture_desktop_screenshot` over gRPC",
            paths.batch,
        );
        let (theirs_rt, theirs_ov) = row(
            "MCP `click` (baseline build; a 2025-11-25 session)",
            paths.theirs,
        );
        println!();
        println!(
            "MCP click round trip p50: baseline {theirs_rt:.1} ms, this build {ours_rt:.1} ms: {:.2}x; overhead p50: baseline {theirs_ov:.2} ms, this build {ours_ov:.2} ms",
            theirs_rt / ours_rt
        );
    }
    println!();
    println!(
        "overhead of an MCP click over the executor's own time, p50: {ours_ov:.2} ms (a direct gRPC call's: {direct_ov:.2} ms)"
    );
    println!(
        "its parts, p50 of each measured alone: MCP framing {framing_ov:.2} ms, the intent's write {intent_ov:.2} ms, the executor hop {direct_ov:.2} ms; the rest (the agent's own work) ≈ {:.2} ms",
        ours_ov - framing_ov - intent_ov - direct_ov
    );
    println!(
        "the floor: a gRPC call that does nothing takes {empty_ov:.2} ms here; the click makes two (the intent, the executor) inside one MCP call"
    );
}
