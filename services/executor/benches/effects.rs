//! What per-action settling and effect checks cost (issue 31), on a private Xvfb desktop with
//! gtk3-widget-factory: one action and the observation after it (`get_app_window_info`, which waits
//! for the screen to settle when the action did not), p50 and p90 over many runs, by two executors on
//! the same desktop, taken in turns (alternating which goes first) so both see the same machine:
//!
//! - `before`: no settling between actions, no effect check (the executor before issue 31);
//! - `after`: settling between actions and the effect check (the default now).
//!
//! Two actions: a click on a check box (the screen changes) and setting an entry to the text it
//! already has (nothing changes). Prints each side's p50 and p90, the difference of the p50s and the
//! median of each turn's difference.
//!
//! Run: `cargo bench -p ufo-executor --bench effects` (release; `--profile dev` for a debug build).
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

/// One action and the observation after it, in milliseconds, with the action's effect kind.
#[cfg(target_os = "linux")]
async fn timed(exec: &Executor, tool: &str, params: &serde_json::Value) -> (f64, String) {
    let started = std::time::Instant::now();
    let acted = run(exec, tool, params.clone()).await;
    run(exec, "get_app_window_info", serde_json::json!({})).await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    (
        ms,
        acted
            .effect
            .map_or("-".to_owned(), |e| e.kind.as_str().to_owned()),
    )
}

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde_json::json;
    use ufo_executor::backend::Backend;
    use ufo_executor::executor::Limits;
    use ufo_executor::testing::Desktop;

    const RUNS: usize = 60;
    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let dynb: Arc<dyn Backend> = backend.clone();
    let pct = |v: &[f64], p: f64| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    let executor = |on: bool| {
        Executor::new(
            dynb.clone(),
            Limits {
                settle_between_actions: on,
                effect_check: on,
                ..Limits::default()
            },
            Vec::new(),
        )
    };
    let sides = [executor(false), executor(true)];
    let mut ids = Vec::new();
    for exec in &sides {
        ufo_executor::testing::drive::select(exec, OPTS, window.handle).await;
        let list = run(exec, "get_app_window_controls_target_info", json!({}))
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
        ids.push((find("CheckBox"), find("Edit")));
    }
    // Both executors list the same window: the same ids.
    assert_eq!(ids[0], ids[1]);
    let (check, entry) = ids[0].clone();
    run(
        &sides[1],
        "set_edit_text",
        json!({"id": entry, "text": "same"}),
    )
    .await;
    run(&sides[1], "get_app_window_info", json!({})).await;
    println!(
        "| action | p50 before | p50 after | added p50 | p50 of paired differences | p90 before | p90 after | effects after |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (action, tool, params) in [
        (
            "click on a check box (the screen changes)",
            "click_input",
            json!({ "id": check }),
        ),
        (
            "the entry's own text set again (no change)",
            "set_edit_text",
            json!({"id": entry, "text": "same"}),
        ),
    ] {
        let mut times = [Vec::with_capacity(RUNS), Vec::with_capacity(RUNS)];
        let mut kinds = BTreeMap::<String, usize>::new();
        for i in 0..RUNS {
            // Alternate which side goes first, so neither always follows the other's action.
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let (ms, kind) = timed(&sides[side], tool, &params).await;
                times[side].push(ms);
                if side == 1 {
                    *kinds.entry(kind).or_default() += 1;
                }
            }
        }
        let (b50, a50) = (pct(&times[0], 0.5), pct(&times[1], 0.5));
        let (b90, a90) = (pct(&times[0], 0.9), pct(&times[1], 0.9));
        // Each turn's after minus the same turn's before: the machine's load cancels out.
        let paired: Vec<f64> = times[1].iter().zip(&times[0]).map(|(a, b)| a - b).collect();
        println!(
            "| {action} | {b50:.1} | {a50:.1} | {:+.1} | {:+.1} | {b90:.1} | {a90:.1} | {kinds:?} |",
            a50 - b50,
            pct(&paired, 0.5)
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
