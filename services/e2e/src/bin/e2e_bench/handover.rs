//! The pool's hand-over (issue 36): from a desktop freeing up (its reset at the end of task N; the
//! check-in follows) to the first command of task N+1 on it. `tasks` tasks are queued at once for one
//! desktop — a logged executor stand-in, declared as `desk` — with two runner slots, so every task but
//! the first waits for the desktop; the instant model of the throughput run answers their prompts. The
//! stand-in's own log of received calls (reset, then the next command) gives the figure.
//!
//! Variants: `handover` (the default path: the check-in claims the next task in the same store call)
//! and `claim-loop` (`--no-desktop-handover`: the check-in, then the claim loop's own claim).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ufo_agent::testing::ScriptedLlm;
use ufo_client::NewTask;
use ufo_e2e::standin::{CallLog, StandInExecutor};
use ufo_testkit::Cluster;

use crate::report::reply;
use crate::store::Storage;

/// How the desktop goes to the next task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// The agent's default: check-in and claim in one store call.
    Handover,
    /// `--no-desktop-handover`: the check-in, then the claim loop claims.
    ClaimLoop,
}

impl Variant {
    /// Row label.
    pub fn label(self) -> &'static str {
        match self {
            Variant::Handover => "check-in claims the next task (default)",
            Variant::ClaimLoop => "check-in, then the claim loop (--no-desktop-handover)",
        }
    }
}

/// What one hand-over run found.
#[derive(Debug, Clone)]
pub struct Handovers {
    /// The variant.
    pub variant: Variant,
    /// Hand-overs measured, sorted.
    pub gaps: Vec<Duration>,
}

impl Handovers {
    /// The `p`th percentile (nearest rank).
    pub fn percentile(&self, p: f64) -> Duration {
        crate::measure::percentile(&self.gaps, p)
    }
}

/// Runs `tasks` tasks through one desktop with `variant`; `app_steps` AppAgent steps each.
pub async fn run(
    storage: &Storage<'_>,
    tasks: usize,
    app_steps: usize,
    variant: Variant,
) -> anyhow::Result<Handovers> {
    let log = Arc::new(CallLog::default());
    let executor = StandInExecutor::start_logged(
        Arc::new(ufo_e2e::standin::notes_desktop()),
        Arc::clone(&log),
    )
    .await?;
    let llm = ScriptedLlm::start().await?;
    // One answer per prompt, and a few to spare for a retried call.
    for _ in 0..tasks * (app_steps + 3) + 20 {
        llm.push_fn(move |req| reply(req, |r| crate::throughput::any_prompt(r, app_steps)));
    }
    let executors = format!("desk={}", executor.url());
    let mut args = vec![
        "--executors",
        executors.as_str(),
        "--default-executor",
        "desk",
        "--runner-slots",
        "2",
        "--claim-interval-ms",
        "20",
        "--llm-max-retries",
        "0",
    ];
    if variant == Variant::ClaimLoop {
        args.push("--no-desktop-handover");
    }
    let builder = Cluster::builder()
        .llm_base_url(llm.base_url())
        .agent_args(args);
    let mut cluster = storage.configure(builder)?.start().await?;
    ufo_common::tls::install_crypto_provider();
    let agent = ufo_e2e::agent(&cluster)?;
    let mut ids = Vec::new();
    for i in 0..tasks {
        let task = agent
            .submit(&NewTask {
                max_steps: Some(u32::try_from(app_steps + 8)?),
                timeout_seconds: Some(600),
                ..NewTask::request(format!("read the total in Notes ({i})"))
            })
            .await?;
        ids.push(task["id"].as_str().context("task id")?.to_owned());
    }
    for id in &ids {
        agent.events_until_end(id, 1).await?;
        let done = agent.get(id).await?;
        if done["status"] != "finished" {
            bail!("task {id} did not finish: {done}\n{}", cluster.logs());
        }
    }
    cluster.stop().await?;
    let mut gaps = log.handovers();
    if gaps.len() + 1 != tasks {
        bail!(
            "expected {} hand-overs on the one desktop, the stand-in saw {}: {:?}",
            tasks.saturating_sub(1),
            gaps.len(),
            log.calls().iter().map(|c| c.1).collect::<Vec<_>>()
        );
    }
    gaps.sort();
    Ok(Handovers { variant, gaps })
}
