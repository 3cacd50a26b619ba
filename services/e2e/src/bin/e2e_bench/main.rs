//! `e2e-bench`: the end-to-end benchmark, one command, one table, every figure for Postgres and for the
//! embedded store (SQLite) side by side, screenshots in a blob directory in both.
//!
//! - [`overhead`]: critical-path overhead per step against the real Linux executor with a model stand-in
//!   that answers after `--model-delay-ms`; bytes stored per step; the intent write per step.
//! - [`throughput`]: steps per second with `--tasks` concurrent tasks, an instant model and an executor
//!   stand-in; CPU per step of the system's processes (from /proc); Postgres statements per step.
//! - [`handover`]: the desktop pool's hand-over, from a desktop freeing up to the next task's first
//!   command on it, with and without the check-in claiming the next task (`--handover-tasks`).
//! - [`pool`] (`--pool`, alone): `--pool-executors` stand-in executors (default 500) dialling out to one
//!   agent, then `--pool-tasks` tasks scheduled onto them: the agent's memory and CPU idle and busy, the
//!   scheduling overhead from a desktop freeing to the next waiting task's first command.
//! - [`mcp_click`] (`--mcp-click`, alone): a desktop `click` through MCP over the executor's own time,
//!   per call, optionally side by side with another build's agent (`--mcp-click-baseline`).
//! - [`store`] sets up each store, [`pg`] is the bench's private Postgres cluster (with
//!   `pg_stat_statements`), [`measure`] reads /proc, sizes and statements, [`report`] prints the table.
//!
//! Run: `cargo build --release --workspace --bins && target/release/e2e-bench` (see docs/benchmark.md).

#[cfg(target_os = "linux")]
mod handover;
mod mcp_click;
#[cfg(target_os = "linux")]
mod measure;
#[cfg(target_os = "linux")]
mod overhead;
#[cfg(target_os = "linux")]
mod pg;
#[cfg(target_os = "linux")]
mod pool;
#[cfg(target_os = "linux")]
mod report;
#[cfg(target_os = "linux")]
mod store;
#[cfg(target_os = "linux")]
mod throughput;

use std::path::PathBuf;

use clap::Parser;

/// The end-to-end benchmark.
#[derive(Debug, Parser)]
#[command(name = "e2e-bench")]
struct Args {
    /// AppAgent steps of the overhead task (plus three HostAgent/AppAgent steps around them).
    #[arg(long, env = "UFO_BENCH_STEPS", default_value_t = 60)]
    steps: usize,
    /// How long the model stand-in takes to answer in the overhead run, in milliseconds.
    #[arg(long, env = "UFO_BENCH_MODEL_DELAY_MS", default_value_t = 300)]
    model_delay_ms: u64,
    /// Concurrent tasks of the throughput run.
    #[arg(long, env = "UFO_BENCH_TASKS", default_value_t = 100)]
    tasks: usize,
    /// AppAgent CONTINUE steps per throughput task (each task takes this + 3 steps).
    #[arg(long, env = "UFO_BENCH_TASK_APP_STEPS", default_value_t = 2)]
    task_app_steps: usize,
    /// Stores to measure, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,embedded"
    )]
    store: Vec<StoreKind>,
    /// Directory of the Postgres server binaries (initdb, pg_ctl); default: the newest under
    /// /usr/lib/postgresql.
    #[arg(long, env = "UFO_BENCH_PG_BIN_DIR")]
    pg_bin_dir: Option<PathBuf>,
    /// Skip the real-desktop overhead run (e.g. where there is no Xvfb).
    #[arg(long)]
    skip_overhead: bool,
    /// Skip the throughput run.
    #[arg(long)]
    skip_throughput: bool,
    /// Tasks of the pool's hand-over run, queued at once for one desktop (0: skip it).
    #[arg(long, env = "UFO_BENCH_HANDOVER_TASKS", default_value_t = 30)]
    handover_tasks: usize,
    /// The hand-over run's variants, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "handover,claim-loop"
    )]
    handover_variants: Vec<HandoverVariant>,
    /// Take the service binaries (ufo-agent, ufo-session, ufo-executor) from this directory instead of
    /// the bench's own (e.g. an earlier build's, to compare; its agent must know the flags a run passes).
    #[arg(long, env = "UFO_BENCH_SERVICES_FROM")]
    services_from: Option<PathBuf>,
    /// Measure only a desktop `click` through MCP against the executor's own time (docs/mcp-server.md),
    /// on each store of `--store`.
    #[arg(long)]
    mcp_click: bool,
    /// MCP clicks (and executor calls) measured per path in the `--mcp-click` run.
    #[arg(long, env = "UFO_BENCH_MCP_CLICKS", default_value_t = 100)]
    mcp_clicks: usize,
    /// Warm-up rounds of the `--mcp-click` run, not counted.
    #[arg(long, env = "UFO_BENCH_MCP_WARMUP", default_value_t = 10)]
    mcp_warmup: usize,
    /// Measure only the desktop pool at scale (docs/benchmark.md): stand-in executors dialling out to one
    /// agent, on each store of `--store`.
    #[arg(long)]
    pool: bool,
    /// Stand-in executors of the `--pool` run, each its own dial-out stream.
    #[arg(long, env = "UFO_BENCH_POOL_EXECUTORS", default_value_t = 500)]
    pool_executors: usize,
    /// Tasks of the `--pool` run, submitted at once.
    #[arg(long, env = "UFO_BENCH_POOL_TASKS", default_value_t = 100)]
    pool_tasks: usize,
    /// Of the `--pool` run's executors, how many carry the label its tasks ask for (so tasks wait for
    /// them and desktops are handed over); 0: the tasks ask for any desktop.
    #[arg(long, env = "UFO_BENCH_POOL_FITTING", default_value_t = 10)]
    pool_fitting: usize,
    /// How long a `--pool` stand-in takes to answer each command, in milliseconds (0: at once).
    #[arg(long, env = "UFO_BENCH_POOL_COMMAND_DELAY_MS", default_value_t = 0)]
    pool_command_delay_ms: u64,
    /// The idle window of the `--pool` run, every executor connected, in milliseconds.
    #[arg(long, env = "UFO_BENCH_POOL_IDLE_MS", default_value_t = 20_000)]
    pool_idle_ms: u64,
    /// The agent's `--dial-out-heartbeat-ms` in the `--pool` run.
    #[arg(long, env = "UFO_BENCH_POOL_HEARTBEAT_MS", default_value_t = 10_000)]
    pool_heartbeat_ms: u64,
    /// The agent's `--runner-slots` in the `--pool` run.
    #[arg(long, env = "UFO_BENCH_POOL_RUNNER_SLOTS", default_value_t = 100)]
    pool_runner_slots: usize,
    /// How long the `--pool` run's executors may take to connect, and its tasks to end, in seconds.
    #[arg(long, env = "UFO_BENCH_POOL_TIMEOUT_SECS", default_value_t = 600)]
    pool_timeout_secs: u64,
    /// Write the `--pool` run's service logs (agent, session service) to this file after the run, e.g. to
    /// follow one task's start (their level: `UFO_LOG`); with several stores, the last one's run.
    #[arg(long)]
    pool_logs: Option<std::path::PathBuf>,
    /// A directory with another build's `ufo-agent` and `ufo-session` (e.g. the commit before a change):
    /// the `--mcp-click` run measures its MCP click side by side, alternating.
    #[arg(long, env = "UFO_BENCH_MCP_CLICK_BASELINE")]
    mcp_click_baseline: Option<PathBuf>,
    /// Write the `--mcp-click` run's service logs (this build's cluster, then the baseline's) to this
    /// file after the run, e.g. the agent's per-call `desktop call timing` at
    /// `UFO_LOG=info,ufo_agent::api::desktop=debug`; with several stores, the last one's run.
    #[arg(long)]
    mcp_click_logs: Option<PathBuf>,
}

#[cfg(target_os = "linux")]
use handover::Variant as HandoverVariant;

/// The hand-over variants (only Linux runs the benchmark).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum HandoverVariant {
    Handover,
    ClaimLoop,
}

#[cfg(target_os = "linux")]
use store::Kind as StoreKind;

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    ufo_common::tls::install_crypto_provider();
    let args = Args::parse();
    let delay = std::time::Duration::from_millis(args.model_delay_ms);
    if args.pool {
        let params = pool::Params {
            executors: args.pool_executors,
            fitting: args.pool_fitting,
            tasks: args.pool_tasks,
            app_steps: args.task_app_steps,
            command_delay: std::time::Duration::from_millis(args.pool_command_delay_ms),
            idle: std::time::Duration::from_millis(args.pool_idle_ms),
            heartbeat_ms: args.pool_heartbeat_ms,
            runner_slots: args.pool_runner_slots,
            timeout: std::time::Duration::from_secs(args.pool_timeout_secs),
            logs: args.pool_logs.clone(),
        };
        let mut runs = Vec::new();
        for kind in args.store.iter().copied() {
            let pg = match kind {
                StoreKind::Postgres => {
                    Some(pg::PrivatePostgres::start(args.pg_bin_dir.clone()).await?)
                }
                StoreKind::Embedded => None,
            };
            let storage = storage(kind, pg.as_ref(), &args).await?;
            eprintln!(
                "{}: pool run ({} executors, {} tasks)",
                kind.label(),
                params.executors,
                params.tasks
            );
            runs.push((kind, pool::run(&storage, &params).await?));
        }
        pool::print(&runs, &params);
        return Ok(());
    }
    let mut results = Vec::new();
    for kind in args.store.iter().copied() {
        let pg = match kind {
            StoreKind::Postgres => Some(pg::PrivatePostgres::start(args.pg_bin_dir.clone()).await?),
            StoreKind::Embedded => None,
        };
        if args.mcp_click {
            let storage = storage(kind, pg.as_ref(), &args).await?;
            let baseline = match &args.mcp_click_baseline {
                Some(_) => Some(store::Storage::create(kind, pg.as_ref()).await?),
                None => None,
            };
            eprintln!(
                "{}: MCP click run ({} clicks)",
                kind.label(),
                args.mcp_clicks
            );
            println!("\n# {}", kind.label());
            mcp_click::run(
                &storage,
                args.mcp_click_baseline.as_deref().zip(baseline.as_ref()),
                args.mcp_clicks,
                args.mcp_warmup,
                args.mcp_click_logs.as_deref(),
            )
            .await?;
            continue;
        }
        let mut result = report::StoreResult {
            kind,
            overhead: None,
            throughput: None,
            handovers: Vec::new(),
        };
        if !args.skip_overhead {
            let storage = storage(kind, pg.as_ref(), &args).await?;
            eprintln!("{}: overhead run ({} steps)", kind.label(), args.steps + 3);
            result.overhead = Some(overhead::run(&storage, args.steps, delay).await?);
        }
        if !args.skip_throughput {
            let storage = storage(kind, pg.as_ref(), &args).await?;
            eprintln!("{}: throughput run ({} tasks)", kind.label(), args.tasks);
            result.throughput =
                Some(throughput::run(&storage, args.tasks, args.task_app_steps).await?);
        }
        if args.handover_tasks > 1 {
            for variant in args.handover_variants.iter().copied() {
                let storage = storage(kind, pg.as_ref(), &args).await?;
                eprintln!(
                    "{}: hand-over run, {} ({} tasks)",
                    kind.label(),
                    variant.label(),
                    args.handover_tasks
                );
                result
                    .handovers
                    .push(handover::run(&storage, args.handover_tasks, 1, variant).await?);
            }
        }
        results.push(result);
    }
    if !args.mcp_click {
        report::print(&results, delay, args.tasks, args.task_app_steps + 3);
    }
    Ok(())
}

/// A fresh store of `kind` for one run, with the services `--services-from` names.
#[cfg(target_os = "linux")]
async fn storage<'a>(
    kind: StoreKind,
    pg: Option<&'a pg::PrivatePostgres>,
    args: &Args,
) -> anyhow::Result<store::Storage<'a>> {
    Ok(store::Storage::create(kind, pg)
        .await?
        .with_services_from(args.services_from.clone()))
}

/// The stores (only Linux runs the benchmark).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StoreKind {
    Postgres,
    Embedded,
}

#[cfg(not(target_os = "linux"))]
fn main() -> anyhow::Result<()> {
    let _ = Args::parse();
    anyhow::bail!(
        "the end-to-end benchmark reads /proc and drives the Linux executor: run it on Linux"
    )
}
