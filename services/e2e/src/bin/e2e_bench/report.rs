//! The table: one column per store, one row per figure, the target beside it; then, per store,
//! where the time goes (span table of the overhead run) and the statements per step of the throughput run.

use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::{RecordedRequest, ScriptedReply};

use crate::overhead::Overhead;
use crate::store::Kind;
use crate::throughput::{BENCH, Throughput};

/// What one store's runs found.
#[derive(Debug)]
pub struct StoreResult {
    /// The store.
    pub kind: Kind,
    /// The overhead run, unless skipped.
    pub overhead: Option<Overhead>,
    /// The throughput run, unless skipped.
    pub throughput: Option<Throughput>,
    /// The pool's hand-over runs, one per variant.
    pub handovers: Vec<crate::handover::Handovers>,
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn kb(bytes: u64) -> String {
    format!("{:.1} KB", bytes as f64 / 1000.0)
}

/// The model stand-in's answer: `f`'s JSON, or a 500 when the prompt was not what the script expects.
pub fn reply(
    req: &RecordedRequest,
    f: impl Fn(&RecordedRequest) -> Option<Value>,
) -> ScriptedReply {
    match f(req) {
        Some(v) => ScriptedReply::Text(v.to_string()),
        None => ScriptedReply::Status {
            status: 500,
            body: json!({"error": {"message": "unexpected prompt"}}).to_string(),
            retry_after: None,
        },
    }
}

type Cell = Box<dyn Fn(&StoreResult) -> Option<String>>;

fn o(f: impl Fn(&Overhead) -> String + 'static) -> Cell {
    Box::new(move |r| r.overhead.as_ref().map(&f))
}

fn t(f: impl Fn(&Throughput) -> String + 'static) -> Cell {
    Box::new(move |r| r.throughput.as_ref().map(&f))
}

fn cpu(t: &Throughput, label: &str) -> String {
    let d = t.cpu.get(label).copied().unwrap_or_default();
    ms(d / u32::try_from(t.steps.max(1)).unwrap_or(u32::MAX))
}

/// Prints everything.
pub fn print(results: &[StoreResult], model_delay: Duration, tasks: usize, per_task: usize) {
    let delay = model_delay.as_millis();
    let rows: Vec<(String, Cell, &str)> = vec![
        (
            "**overhead per step** p50 (wall − model − executor)".into(),
            o(|x| ms(x.overhead.0)),
            "≤ 5 ms",
        ),
        (
            "**overhead per step** p99".into(),
            o(|x| ms(x.overhead.1)),
            "≤ 12 ms",
        ),
        (
            format!("step wall p50 (model answers after {delay} ms, real executor)"),
            o(|x| ms(x.wall.0)),
            "",
        ),
        ("  model call p50".into(), o(|x| ms(x.model.0)), ""),
        (
            "  executor's own work p50".into(),
            o(|x| ms(x.executor.0)),
            "",
        ),
        (
            "  session service calls p50 (server side)".into(),
            o(|x| ms(x.session.0)),
            "",
        ),
        (
            "  intent write p50 per step (`runner.intent`)".into(),
            o(|x| ms(x.intent.0)),
            "",
        ),
        (
            "**bytes stored per step** (blobs + database growth, 1280×800)".into(),
            o(|x| kb(x.bytes_per_step.0 + x.bytes_per_step.1)),
            "≤ 150 KB",
        ),
        (
            "  database / blobs".into(),
            o(|x| format!("{} / {}", kb(x.bytes_per_step.0), kb(x.bytes_per_step.1))),
            "",
        ),
        (
            "**CPU per step** (agent + session + store, throughput run)".into(),
            t(|x| ms(x.cpu_per_step())),
            "≤ 4 ms",
        ),
        (
            "  agent / session / Postgres".into(),
            t(|x| {
                format!(
                    "{} / {} / {}",
                    cpu(x, "ufo-agent"),
                    cpu(x, "ufo-session"),
                    cpu(x, "postgres")
                )
            }),
            "",
        ),
        (
            "  bench process (stand-ins, clients; not counted)".into(),
            t(|x| cpu(x, BENCH)),
            "",
        ),
        (
            format!(
                "**throughput**, {tasks} concurrent tasks × {per_task} steps (instant model, executor stand-in)"
            ),
            t(|x| format!("{:.0} steps/s", x.rate())),
            "≥ 400 steps/s",
        ),
        (
            "Postgres statements per step (throughput run)".into(),
            t(|x| {
                if x.statements.is_empty() {
                    "—".into()
                } else {
                    format!("{:.1}", x.statements_per_step())
                }
            }),
            "",
        ),
    ];
    let heads: Vec<&str> = results.iter().map(|r| r.kind.label()).collect();
    println!("\n| measure | {} | target |", heads.join(" | "));
    println!("| --- |{} --- |", " --- |".repeat(heads.len()));
    for (label, cell, target) in &rows {
        let cells: Vec<String> = results
            .iter()
            .map(|r| cell(r).unwrap_or_else(|| "—".into()))
            .collect();
        println!("| {label} | {} | {target} |", cells.join(" | "));
    }
    if results.iter().any(|r| !r.handovers.is_empty()) {
        println!(
            "\nThe pool's hand-over: a desktop freed (its reset at a task's end) → the next task's first command on it (target ≤ 20 ms p50):\n"
        );
        println!(
            "| store | path | hand-overs | p50 | p90 | max |\n| --- | --- | --- | --- | --- | --- |"
        );
        for r in results {
            for h in &r.handovers {
                println!(
                    "| {} | {} | {} | {} | {} | {} |",
                    r.kind.label(),
                    h.variant.label(),
                    h.gaps.len(),
                    ms(h.percentile(50.0)),
                    ms(h.percentile(90.0)),
                    ms(h.gaps.last().copied().unwrap_or_default())
                );
            }
        }
    }
    for r in results {
        if let Some(x) = &r.overhead {
            println!(
                "\nWhere the time goes, {} ({} steps):\n\n{}",
                r.kind.label(),
                x.steps,
                x.spans
            );
            println!(
                "The slowest steps by overhead, {}:\n{}",
                r.kind.label(),
                x.slowest
            );
        }
        if let Some(x) = r.throughput.as_ref().filter(|x| !x.statements.is_empty()) {
            println!(
                "Postgres statements per step, throughput run ({} steps):\n",
                x.steps
            );
            println!("| statement | per step |\n| --- | --- |");
            for (query, calls) in x.statements.iter().take(20) {
                let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ");
                let short: String = query.chars().take(110).collect();
                println!(
                    "| `{short}` | {:.2} |",
                    *calls as f64 / x.steps.max(1) as f64
                );
            }
        }
    }
}
