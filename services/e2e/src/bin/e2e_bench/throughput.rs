//! Throughput: `tasks` concurrent tasks through the three-process stack with an instant model and an
//! executor stand-in that answers at once (only for this figure), counting recorded steps per second from
//! the first POST to the last stream's end. The same run measures the CPU time of the system's processes
//! (agent, session service, Postgres with its backends; the stand-ins and the clients live in the bench
//! process and are reported apart) and, on Postgres, the statements it sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use ufo_agent::testing::{RecordedRequest, ScriptedLlm};
use ufo_client::NewTask;
use ufo_e2e::script::{app, assign, controls, host, target_label};
use ufo_testkit::Cluster;

use crate::measure::{CpuSample, Statements, Watched};
use crate::report::reply;
use crate::store::Storage;

/// What the throughput run found.
#[derive(Debug, Default)]
pub struct Throughput {
    /// Steps recorded.
    pub steps: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// CPU time per process label over the run.
    pub cpu: BTreeMap<String, Duration>,
    /// Top-level Postgres statements per text (Postgres only), most called first.
    pub statements: Vec<(String, u64)>,
}

impl Throughput {
    /// Steps per second.
    pub fn rate(&self) -> f64 {
        self.steps as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU of the system's processes (not the bench's) per step.
    pub fn cpu_per_step(&self) -> Duration {
        let total: Duration = self
            .cpu
            .iter()
            .filter(|(k, _)| *k != BENCH)
            .map(|(_, v)| *v)
            .sum();
        total / u32::try_from(self.steps.max(1)).unwrap_or(u32::MAX)
    }

    /// Postgres statements per step.
    pub fn statements_per_step(&self) -> f64 {
        self.statements.iter().map(|(_, c)| *c).sum::<u64>() as f64 / self.steps.max(1) as f64
    }
}

/// The bench process's own label in [`Throughput::cpu`].
pub const BENCH: &str = "bench (model + executor stand-ins, clients)";

/// How many actions the AppAgent prompt's `[Previous actions]` section lists (one per line; the prompt
/// collapses consecutive repeats into "... (repeated N times)").
fn previous_actions(text: &str) -> usize {
    let Some(section) = text
        .split("[Previous actions]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
    else {
        return 0;
    };
    section
        .lines()
        .filter(|l| *l != "none")
        .map(|l| {
            l.rsplit_once("(repeated ")
                .and_then(|(_, n)| n.split(' ').next()?.parse().ok())
                .unwrap_or(1)
        })
        .sum()
}

/// Answers any prompt of a throughput task: HostAgent assigns Notes then finishes; the AppAgent reads the
/// body `app_steps` times, then finishes.
pub(crate) fn any_prompt(req: &RecordedRequest, app_steps: usize) -> Option<Value> {
    let text = req.text();
    if text.starts_with("You are the HostAgent") {
        if text.contains("\"status\":\"FINISH\",\"subtask\"") {
            return Some(host("FINISH", json!({"result": "total=42"})));
        }
        return Some(assign(&target_label(req, "notes")?, "read the total"));
    }
    if previous_actions(&text) >= app_steps {
        return Some(app("FINISH", json!([]), "total=42"));
    }
    let (id, _, _) = controls(req).into_iter().find(|(_, n, _)| n == "Body")?;
    Some(app(
        "CONTINUE",
        json!({"function": "texts", "arguments": {"id": id}}),
        "",
    ))
}

/// Runs `tasks` concurrent tasks of `app_steps + 3` steps each.
pub async fn run(
    storage: &Storage<'_>,
    tasks: usize,
    app_steps: usize,
) -> anyhow::Result<Throughput> {
    let executor =
        ufo_e2e::standin::StandInExecutor::start(Arc::new(ufo_e2e::standin::notes_desktop()))
            .await?;
    let llm = ScriptedLlm::start().await?;
    let per_task = app_steps + 3;
    for _ in 0..tasks * per_task {
        llm.push_fn(move |req| reply(req, |r| any_prompt(r, app_steps)));
    }
    let slots = tasks.to_string();
    // A desktop runs one task at a time (the pool, issue 36): one stand-in declared under as many names
    // as there are tasks, so the tasks run side by side as the figure says, each on a desktop of its own.
    let desktops = (0..tasks)
        .map(|i| format!("desk{i}={}", executor.url()))
        .collect::<Vec<_>>()
        .join(",");
    let builder = Cluster::builder()
        .remote_executor(executor.url())
        .llm_base_url(llm.base_url())
        .agent_args([
            "--runner-slots",
            slots.as_str(),
            "--claim-interval-ms",
            "10",
            "--llm-max-retries",
            "0",
            "--executors",
            desktops.as_str(),
        ]);
    let mut cluster = storage.configure(builder)?.start().await?;
    let mut watched = storage.watched(&cluster)?;
    watched.push(Watched {
        label: BENCH.into(),
        pid: std::process::id(),
        children: false,
    });
    let statements = match (storage.postgres(), storage.database()) {
        (Some(pg), Some(db)) => Some(Statements::reset(&pg.admin_url(), db).await?),
        _ => None,
    };
    let cpu_before = CpuSample::take(&watched)?;
    ufo_common::tls::install_crypto_provider();
    let agent = ufo_e2e::agent(&cluster)?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..tasks {
        let task = agent
            .submit(&NewTask {
                max_steps: Some(u32::try_from(per_task + 5)?),
                timeout_seconds: Some(600),
                executor: Some("any".into()),
                ..NewTask::request(format!("read the total in Notes ({i})"))
            })
            .await?;
        ids.push(task["id"].as_str().context("task id")?.to_owned());
    }
    let streams = ids.iter().map(|id| {
        let agent = agent.clone();
        let id = id.clone();
        tokio::spawn(async move { agent.events_until_end(&id, 1).await })
    });
    for stream in futures::future::join_all(streams).await {
        stream??;
    }
    let elapsed = started.elapsed();
    let cpu = CpuSample::take(&watched)?.since(&cpu_before);
    let statements = match statements {
        Some(s) => s.read().await?,
        None => Vec::new(),
    };
    let mut steps = 0u64;
    for id in &ids {
        let done = agent.get(id).await?;
        if done["status"] != "finished" {
            bail!("task {id} did not finish: {done}\n{}", cluster.logs());
        }
        steps += done["totals"]["steps"].as_u64().unwrap_or(0);
    }
    cluster.stop().await?;
    Ok(Throughput {
        steps,
        elapsed,
        cpu,
        statements,
    })
}
