//! What per-action settling and effect checks cost (issue 31), on a private Xvfb desktop with
//! gtk3-widget-factory: one action and the observation after it (`get_app_window_info`, which waits
//! for the screen to settle when the action did not), p50 and p90 over many runs, for three executor
//! configurations side by side:
//!
//! - `before`: no settling between actions, no effect check (the executor before issue 31);
//! - `settle`: settling between actions, no effect check;
//! - `effects`: settling between actions and the effect check (the default now).
//!
//! Two actions: a click on a check box (the screen changes) and setting an entry to the text it
//! already has (nothing changes: every configuration waits the first-change time once).
//!
//! Run: `cargo bench -p ufo-executor --bench effects`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_os = "linux")]
use ufo_executor::executor::{Executor, Outcome};

/// The bench's batch options: one command at a time, PNG screenshots.
#[cfg(target_os = "linux")]
const OPTS: ufo_executor::executor::BatchOptions = ufo_executor::executor::BatchOptions {
    deadline: std::time::Duration::from_secs(10),
    format: ufo_executor::encode::Format::PNG,
};

/// Runs one command and insists it succeeded.
#[cfg(target_os = "linux")]
async fn run(exec: &Executor, tool: &str, params: serde_json::Value) -> Outcome {
    ufo_executor::testing::drive::ok(exec, OPTS, tool, params).await
}

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use std::sync::Arc;
    use std::time::Instant;

    use serde_json::json;
    use ufo_executor::backend::Backend;
    use ufo_executor::executor::Limits;
    use ufo_executor::testing::Desktop;

    const RUNS: usize = 40;
    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let dynb: Arc<dyn Backend> = backend.clone();
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "| action | configuration | p50 ms | p90 ms | effect |\n| --- | --- | --- | --- | --- |"
    );
    for (label, between, effects) in [
        ("before", false, false),
        ("settle", true, false),
        ("effects", true, true),
    ] {
        let limits = Limits {
            settle_between_actions: between,
            effect_check: effects,
            ..Limits::default()
        };
        let exec = Executor::new(dynb.clone(), limits, Vec::new());
        ufo_executor::testing::drive::select(&exec, OPTS, window.handle).await;
        let list = run(&exec, "get_app_window_controls_target_info", json!({}))
            .await
            .output
            .result;
        let find = |kind: &str| {
            list.as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind && c["enabled"] == true && c["name"] != "")
                .map(|c| c["id"].clone())
                .unwrap()
        };
        let (check, entry) = (find("CheckBox"), find("Edit"));
        run(&exec, "set_edit_text", json!({"id": entry, "text": "same"})).await;
        run(&exec, "get_app_window_info", json!({})).await;
        for (action, tool, params) in [
            (
                "click (screen changes)",
                "click_input",
                json!({ "id": check }),
            ),
            (
                "same text (no change)",
                "set_edit_text",
                json!({"id": entry, "text": "same"}),
            ),
        ] {
            let mut times = Vec::with_capacity(RUNS);
            let mut kinds = std::collections::BTreeMap::<String, usize>::new();
            for _ in 0..RUNS {
                let started = Instant::now();
                let acted = run(&exec, tool, params.clone()).await;
                run(&exec, "get_app_window_info", json!({})).await;
                times.push(started.elapsed().as_secs_f64() * 1e3);
                let kind = acted
                    .effect
                    .map_or("-".to_owned(), |e| e.kind.as_str().to_owned());
                *kinds.entry(kind).or_default() += 1;
            }
            let (p50, p90) = (pct(&mut times, 0.5), pct(&mut times, 0.9));
            println!("| {action} | {label} | {p50:.1} | {p90:.1} | {kinds:?} |");
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
