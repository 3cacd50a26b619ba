//! `e2e-bench`: the end-to-end benchmark, one command, one table.
//!
//! 1. Orchestration overhead per step: `ufo-session` (fresh Postgres database), `ufo-executor` (real Linux
//!    backend, gtk3-widget-factory under Xvfb) and `ufo-agent` as separate processes, an LLM server that
//!    answers instantly, spans to an in-process OTLP collector. For each step (the runner's `step` span)
//!    the executor's own work (its `executor.command` spans) and the LLM calls (`gen_ai` chat spans) are
//!    subtracted; what remains is agent + session + Postgres + gRPC hops (and the agent's image work).
//! 2. Throughput: 100 concurrent tasks through the same three-process stack, but with an executor
//!    stand-in that answers instantly (only for this figure), counting recorded steps per second.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release -p ufo-e2e --bin e2e-bench`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use serde_json::{Value, json};
use ufo_agent::testing::{RecordedRequest, ScriptedLlm, ScriptedReply};
use ufo_e2e::api::{get_json, stream_steps, submit_task};
use ufo_e2e::script::{app, assign, controls, host, target_label};
use ufo_testkit::{Cluster, CollectedSpan, OtlpCollector, TestDatabase};

/// The end-to-end benchmark.
#[derive(Debug, Parser)]
#[command(name = "e2e-bench")]
struct Args {
    /// AppAgent steps of the overhead task (plus three HostAgent/AppAgent steps around them).
    #[arg(long, env = "UFO_BENCH_STEPS", default_value_t = 60)]
    steps: usize,
    /// Concurrent tasks of the throughput run.
    #[arg(long, env = "UFO_BENCH_TASKS", default_value_t = 100)]
    tasks: usize,
    /// AppAgent CONTINUE steps per throughput task (each task takes this + 3 steps).
    #[arg(long, env = "UFO_BENCH_TASK_APP_STEPS", default_value_t = 2)]
    task_app_steps: usize,
    /// Skip the real-desktop overhead run (e.g. where there is no Xvfb).
    #[arg(long)]
    skip_overhead: bool,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut rows = Vec::new();
    if !args.skip_overhead {
        rows.extend(overhead(args.steps).await?);
    }
    rows.push(throughput(args.tasks, args.task_app_steps).await?);
    println!("\n| measure | p50 | p99 | n |\n| --- | --- | --- | --- |");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn row(what: &str, mut values: Vec<Duration>) -> String {
    values.sort();
    format!(
        "| {what} | {} | {} | {} |",
        ms(percentile(&values, 50.0)),
        ms(percentile(&values, 99.0)),
        values.len()
    )
}

fn reply(req: &RecordedRequest, f: impl Fn(&RecordedRequest) -> Option<Value>) -> ScriptedReply {
    match f(req) {
        Some(v) => ScriptedReply::Text(v.to_string()),
        None => ScriptedReply::Status {
            status: 500,
            body: json!({"error": {"message": "unexpected prompt"}}).to_string(),
            retry_after: None,
        },
    }
}

/// Per-step orchestration overhead against the real Linux executor.
#[cfg(target_os = "linux")]
async fn overhead(app_steps: usize) -> anyhow::Result<Vec<String>> {
    use ufo_executor::testing::Desktop;
    let collector = OtlpCollector::start().await?;
    let db = TestDatabase::create().await?;
    let mut desktop = Desktop::start(1280, 800).await?;
    let backend = desktop.backend().await?;
    desktop.launch(&backend, "gtk3-widget-factory", &[]).await?;
    let llm = ScriptedLlm::start().await?;
    let mut cluster = Cluster::builder()
        .database_url(db.url())
        .otlp_endpoint(collector.endpoint())
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args([
            "--claim-interval-ms",
            "20",
            "--llm-max-retries",
            "0",
            "--max-steps",
            "10000",
        ])
        .start()
        .await?;
    llm.push_fn(|req| {
        reply(req, |r| {
            Some(assign(
                &target_label(r, "factory")?,
                "read the first page's label",
            ))
        })
    });
    for _ in 0..app_steps {
        llm.push_fn(|req| {
            reply(req, |r| {
                let (id, _, _) = controls(r).into_iter().find(|(_, n, _)| n == "Page 1")?;
                Some(app(
                    "CONTINUE",
                    json!({"function": "texts", "arguments": {"id": id}}),
                    "",
                ))
            })
        });
    }
    llm.push_fn(|req| reply(req, |_| Some(app("FINISH", json!([]), "Page 1"))));
    llm.push_fn(|req| reply(req, |_| Some(host("FINISH", json!({"result": "Page 1"})))));
    let total_steps = app_steps + 3;

    let http = reqwest::Client::new();
    let task = submit_task(
        &http,
        &cluster.rest_url,
        &cluster.api_key,
        &json!({"request": "read the first page's label in the widget factory",
                "limits": {"max_steps": total_steps + 5, "timeout_seconds": 600}}),
    )
    .await?;
    let id = task["id"].as_str().context("task id")?.to_owned();
    stream_steps(&cluster.grpc_url, &cluster.api_key, &id, 1).await?;
    let done = get_json(
        &http,
        &cluster.rest_url,
        &cluster.api_key,
        &format!("/v1/tasks/{id}"),
    )
    .await?;
    if done["status"] != "finished" {
        bail!(
            "the overhead task did not finish: {done}\n{}",
            cluster.logs()
        );
    }
    cluster.stop().await?;
    let spans = collector
        .wait_until(Duration::from_secs(60), |s| {
            s.named("store.record_step").count() >= total_steps
        })
        .await?;
    let task_span = spans
        .find(|s| s.name == "task" && s.attr("task_id") == Some(id.as_str()))
        .context("no task span")?;
    let trace: Vec<&CollectedSpan> = spans.in_trace(&task_span.trace_id).collect();
    let under = |step: &CollectedSpan, keep: &dyn Fn(&CollectedSpan) -> bool| -> Duration {
        trace
            .iter()
            .filter(|s| keep(s) && spans.is_descendant(s, step))
            .map(|s| s.duration())
            .sum()
    };
    let (mut totals, mut executor, mut llm_time, mut overheads, mut store) =
        (vec![], vec![], vec![], vec![], vec![]);
    for step in trace
        .iter()
        .filter(|s| s.name == "step" && s.service == "ufo-agent")
    {
        let total = step.duration();
        let exec = under(step, &|s| {
            s.service == "ufo-executor" && s.name == "executor.command"
        });
        let chat = under(step, &|s| s.attr("gen_ai.operation.name") == Some("chat"));
        let session = under(step, &|s| {
            s.service == "ufo-session" && s.name.starts_with("/ufo.v1.SessionStore/")
        });
        totals.push(total);
        executor.push(exec);
        llm_time.push(chat);
        store.push(session);
        overheads.push(total.saturating_sub(exec).saturating_sub(chat));
    }
    // Where the time goes: for each span name under the steps, its inclusive time per step (nested spans
    // count in their parents too) and its self time (minus its direct children; children that ran
    // concurrently can make that an underestimate, so it is clamped at zero).
    let steps: Vec<&&CollectedSpan> = trace
        .iter()
        .filter(|s| s.name == "step" && s.service == "ufo-agent")
        .collect();
    let mut children: std::collections::HashMap<&str, Duration> = std::collections::HashMap::new();
    for span in &trace {
        if let Some(parent) = &span.parent_span_id {
            *children.entry(parent.as_str()).or_default() += span.duration();
        }
    }
    let mut by_name: std::collections::BTreeMap<(String, String), (Duration, Duration, usize)> =
        std::collections::BTreeMap::new();
    for span in &trace {
        if span.name != "step" && steps.iter().any(|step| spans.is_descendant(span, step)) {
            let entry = by_name
                .entry((span.service.clone(), span.name.clone()))
                .or_default();
            let own = span.duration().saturating_sub(
                children
                    .get(span.span_id.as_str())
                    .copied()
                    .unwrap_or_default(),
            );
            entry.0 += span.duration();
            entry.1 += own;
            entry.2 += 1;
        }
    }
    let mut ranked: Vec<_> = by_name.into_iter().collect();
    ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1.0));
    println!(
        "\n| span under the steps (service) | inclusive time per step | self time per step | spans |\n| --- | --- | --- | --- |"
    );
    let per_step = |d: Duration| d / u32::try_from(steps.len().max(1)).unwrap_or(1);
    for ((service, name), (total, own, count)) in ranked.iter().take(25) {
        println!(
            "| {name} ({service}) | {} | {} | {count} |",
            ms(per_step(*total)),
            ms(per_step(*own))
        );
    }
    Ok(vec![
        row("step, wall time (real Linux executor, instant LLM)", totals),
        row("  executor's own work (executor.command spans)", executor),
        row("  LLM calls (gen_ai chat spans, instant server)", llm_time),
        row(
            "  session service calls (server side, incl. Postgres)",
            store,
        ),
        row(
            "**orchestration overhead per step** (wall − executor work − LLM)",
            overheads,
        ),
    ])
}

#[cfg(not(target_os = "linux"))]
async fn overhead(_: usize) -> anyhow::Result<Vec<String>> {
    bail!("the overhead run needs the Linux executor; pass --skip-overhead")
}

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
fn any_prompt(req: &RecordedRequest, app_steps: usize) -> Option<Value> {
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

/// Steps per second across `tasks` concurrent tasks with an instantly answering executor stand-in.
async fn throughput(tasks: usize, app_steps: usize) -> anyhow::Result<String> {
    let db = TestDatabase::create().await?;
    let executor =
        ufo_e2e::standin::StandInExecutor::start(Arc::new(ufo_e2e::standin::notes_desktop()))
            .await?;
    let llm = ScriptedLlm::start().await?;
    let per_task = app_steps + 3;
    for _ in 0..tasks * per_task {
        llm.push_fn(move |req| reply(req, |r| any_prompt(r, app_steps)));
    }
    let slots = tasks.to_string();
    let mut cluster = Cluster::builder()
        .database_url(db.url())
        .remote_executor(executor.url())
        .llm_base_url(llm.base_url())
        .agent_args([
            "--runner-slots",
            slots.as_str(),
            "--claim-interval-ms",
            "10",
            "--llm-max-retries",
            "0",
        ])
        .start()
        .await?;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..tasks {
        let task = submit_task(
            &http,
            &cluster.rest_url,
            &cluster.api_key,
            &json!({"request": format!("read the total in Notes ({i})"),
                    "limits": {"max_steps": per_task + 5, "timeout_seconds": 600}}),
        )
        .await?;
        ids.push(task["id"].as_str().context("task id")?.to_owned());
    }
    let streams = ids.iter().map(|id| {
        let (url, key) = (cluster.grpc_url.clone(), cluster.api_key.clone());
        let id = id.clone();
        tokio::spawn(async move { stream_steps(&url, &key, &id, 1).await })
    });
    for stream in futures::future::join_all(streams).await {
        stream??;
    }
    let elapsed = started.elapsed();
    let mut steps = 0u64;
    for id in &ids {
        let done = get_json(
            &http,
            &cluster.rest_url,
            &cluster.api_key,
            &format!("/v1/tasks/{id}"),
        )
        .await?;
        if done["status"] != "finished" {
            bail!("task {id} did not finish: {done}\n{}", cluster.logs());
        }
        steps += done["totals"]["steps"].as_u64().unwrap_or(0);
    }
    cluster.stop().await?;
    let rate = steps as f64 / elapsed.as_secs_f64();
    Ok(format!(
        "| **throughput**, {tasks} concurrent tasks × {per_task} steps (executor stand-in, instant LLM) | {rate:.0} steps/s | {:.2} s total | {steps} |",
        elapsed.as_secs_f64()
    ))
}
