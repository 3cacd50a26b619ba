//! Critical-path overhead per step: `ufo-session`, the real Linux `ufo-executor` (gtk3-widget-factory
//! under Xvfb, 1280×800) and `ufo-agent` as separate processes, a model stand-in that answers after
//! `--model-delay-ms`, spans to an in-process OTLP collector. For each step (the runner's `step` span) the
//! executor's own work (its `executor.command` spans) and the model calls (`gen_ai` chat spans) are
//! subtracted from the step's wall time; what remains is agent + session + store + every hop. The same
//! run measures the bytes the store keeps per step and the intent write (`runner.intent` spans).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::json;
use ufo_agent::testing::ScriptedLlm;
use ufo_client::NewTask;
use ufo_e2e::script::{app, assign, controls, host, target_label};
use ufo_testkit::{Cluster, CollectedSpan, OtlpCollector};

use crate::measure::p50_p99;
use crate::report::{ms, reply};
use crate::store::Storage;

/// Steps listed with their own span table after the run, largest overhead first.
const SLOWEST_STEPS: usize = 3;

/// What the overhead run found.
#[derive(Debug, Default)]
pub struct Overhead {
    /// Steps measured.
    pub steps: usize,
    /// Step wall time p50 / p99.
    pub wall: (Duration, Duration),
    /// The executor's own work per step.
    pub executor: (Duration, Duration),
    /// Model calls per step (the stand-in's delay included).
    pub model: (Duration, Duration),
    /// Session service calls per step (server side).
    pub session: (Duration, Duration),
    /// Wall − executor − model.
    pub overhead: (Duration, Duration),
    /// The intent write (`runner.intent`) per step.
    pub intent: (Duration, Duration),
    /// Bytes stored per step: database growth and blob directory growth.
    pub bytes_per_step: (u64, u64),
    /// Where the time goes: the span table (markdown).
    pub spans: String,
    /// The steps whose overhead is largest (what p99 reads on a short run), each with its own span table.
    pub slowest: String,
}

/// Runs one task of `app_steps + 3` steps and measures it.
pub async fn run(
    storage: &Storage<'_>,
    app_steps: usize,
    model_delay: Duration,
) -> anyhow::Result<Overhead> {
    use ufo_executor::testing::Desktop;
    let collector = OtlpCollector::start().await?;
    let mut desktop = Desktop::start(1280, 800).await?;
    let backend = desktop.backend().await?;
    desktop.launch(&backend, "gtk3-widget-factory", &[]).await?;
    let llm = ScriptedLlm::start().await?;
    llm.set_delay(model_delay);
    let builder = Cluster::builder()
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
        ]);
    let mut cluster = storage.configure(builder)?.start().await?;
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

    let bytes_before = storage.bytes(&cluster).await?;
    ufo_common::tls::install_crypto_provider();
    let agent = ufo_e2e::agent(&cluster)?;
    let task = agent
        .submit(&NewTask {
            max_steps: Some(u32::try_from(total_steps + 5)?),
            timeout_seconds: Some(1200),
            ..NewTask::request("read the first page's label in the widget factory")
        })
        .await?;
    let id = task["id"].as_str().context("task id")?.to_owned();
    agent.events_until_end(&id, 1).await?;
    let done = agent.get(&id).await?;
    if done["status"] != "finished" {
        bail!(
            "the overhead task did not finish: {done}\n{}",
            cluster.logs()
        );
    }
    let bytes_after = storage.bytes(&cluster).await?;
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
    let steps: Vec<&CollectedSpan> = trace
        .iter()
        .copied()
        .filter(|s| s.name == "step" && s.service == "ufo-agent")
        .collect();
    let under = |step: &CollectedSpan, keep: &dyn Fn(&CollectedSpan) -> bool| -> Duration {
        trace
            .iter()
            .filter(|s| keep(s) && spans.is_descendant(s, step))
            .map(|s| s.duration())
            .sum()
    };
    let mut per = BTreeMap::<&str, Vec<Duration>>::new();
    let mut by_overhead = Vec::new();
    for step in &steps {
        let total = step.duration();
        let exec = under(step, &|s| {
            s.service == "ufo-executor" && s.name == "executor.command"
        });
        let chat = under(step, &|s| s.attr("gen_ai.operation.name") == Some("chat"));
        let session = under(step, &|s| {
            s.service == "ufo-session" && s.name.starts_with("/ufo.v1.SessionStore/")
        });
        let intent = under(step, &|s| s.name == "runner.intent");
        by_overhead.push((total.saturating_sub(exec).saturating_sub(chat), *step));
        for (key, value) in [
            ("wall", total),
            ("executor", exec),
            ("model", chat),
            ("session", session),
            ("intent", intent),
            ("overhead", total.saturating_sub(exec).saturating_sub(chat)),
        ] {
            per.entry(key).or_default().push(value);
        }
    }
    by_overhead.sort_by_key(|(overhead, _)| std::cmp::Reverse(*overhead));
    let mut slowest = String::new();
    for (overhead, step) in by_overhead.iter().take(SLOWEST_STEPS) {
        slowest.push_str(&format!(
            "\nstep {} (round step {}): overhead {}, wall {}\n\n{}",
            step.attr("step").unwrap_or("?"),
            step.attr("round_step").unwrap_or("?"),
            ms(*overhead),
            ms(step.duration()),
            span_table(&spans, &trace, &[*step], 8)
        ));
    }
    let mut take = |key: &str| p50_p99(per.remove(key).unwrap_or_default());
    Ok(Overhead {
        steps: steps.len(),
        wall: take("wall"),
        executor: take("executor"),
        model: take("model"),
        session: take("session"),
        overhead: take("overhead"),
        intent: take("intent"),
        bytes_per_step: (
            bytes_after.0.saturating_sub(bytes_before.0) / total_steps.max(1) as u64,
            bytes_after.1.saturating_sub(bytes_before.1) / total_steps.max(1) as u64,
        ),
        spans: span_table(&spans, &trace, &steps, 25),
        slowest,
    })
}

/// For each span name under the steps, its inclusive time per step (nested spans count in their parents
/// too) and its self time (minus its direct children; children that ran concurrently can make that an
/// underestimate, so it is clamped at zero). The `rows` largest by self time.
fn span_table(
    spans: &ufo_testkit::SpanSet,
    trace: &[&CollectedSpan],
    steps: &[&CollectedSpan],
    rows: usize,
) -> String {
    let mut children: HashMap<&str, Duration> = HashMap::new();
    for span in trace {
        if let Some(parent) = &span.parent_span_id {
            *children.entry(parent.as_str()).or_default() += span.duration();
        }
    }
    let mut by_name: BTreeMap<(String, String), (Duration, Duration, usize)> = BTreeMap::new();
    for span in trace {
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
    ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1.1));
    let per_step = |d: Duration| d / u32::try_from(steps.len().max(1)).unwrap_or(1);
    let mut out = String::from(
        "| span under the steps (service) | inclusive per step | self per step | spans |\n| --- | --- | --- | --- |\n",
    );
    for ((service, name), (total, own, count)) in ranked.iter().take(rows) {
        out.push_str(&format!(
            "| {name} ({service}) | {} | {} | {count} |\n",
            ms(per_step(*total)),
            ms(per_step(*own))
        ));
    }
    out
}
