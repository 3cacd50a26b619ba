//! The first observation after an action on a busy desktop (issue 37): a private 1920×1080 Xvfb desktop
//! with mousepad and gtk3-widget-factory, and beside them three windows that never stop drawing
//! (`tests/busy_window.py`): another program typing in its own window (a glyph-sized box every
//! [`TYPIST_MS`] ms at the next place of its page), a caret blinking every 530 ms and a clock redrawn
//! every second. Two executors on the same desktop, taken in turns (alternating which goes first):
//!
//! - `screen`: `--settle-whole-screen`, the wait before issue 37 (any drawing anywhere holds it);
//! - `window`: the default now (only the selected window, its application's windows and what the
//!   action opened count).
//!
//! Each turn types two characters into mousepad, or clicks a check box in gtk3-widget-factory, and
//! takes a window screenshot; the screenshot's settle report gives the wait and its outcome. Prints,
//! per action and side, p50 / p90 / max of the wait, the TIMEOUT count and the p50 ratio.
//!
//! Run: `cargo bench -p ufo-executor --bench settle` (release; `--profile dev` for a debug build;
//! `UFO_SETTLE_BENCH_RUNS` turns per action, default 30; `UFO_SETTLE_BENCH_VERBOSE=1` prints every
//! settle report).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// How often the other program "types", in milliseconds (faster than the 40 ms quiet time).
#[cfg(target_os = "linux")]
const TYPIST_MS: u32 = 30;

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use ufo_executor::backend::{Backend, SettleOutcome};
    use ufo_executor::executor::{BatchOptions, Executor, Limits};
    use ufo_executor::testing::Desktop;
    use ufo_executor::testing::drive;

    const OPTS: BatchOptions = BatchOptions {
        deadline: Duration::from_secs(20),
        format: ufo_executor::encode::Format::PNG,
    };
    let runs: usize = std::env::var("UFO_SETTLE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    // Every observation's settle report on stderr.
    let verbose = std::env::var_os("UFO_SETTLE_BENCH_VERBOSE").is_some();

    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    let busy = desk
        .launch_busy_windows(backend.as_ref(), TYPIST_MS)
        .await
        .unwrap_or_else(|e| panic!("the busy windows start: {e:#}"));
    for w in [&factory, &mp] {
        for b in &busy {
            assert!(
                w.rect.intersect(&b.rect).is_empty(),
                "{} {:?} overlaps {} {:?}: the busy windows must draw elsewhere",
                w.title,
                w.rect,
                b.title,
                b.rect
            );
        }
    }
    let dynb: Arc<dyn Backend> = backend.clone();
    let executor = |whole_screen: bool| {
        let mut limits = Limits::default();
        limits.settle.whole_screen = whole_screen;
        Executor::new(dynb.clone(), limits, Vec::new())
    };
    let sides = [executor(true), executor(false)];
    let names = ["screen (before)", "window (after)"];
    // Each side lists gtk3-widget-factory once: its check box's id (the same in both listings).
    let mut check = Vec::new();
    for exec in &sides {
        drive::select(exec, OPTS, factory.handle).await;
        let list = drive::controls(exec, OPTS).await;
        check.push(
            drive::id_where(&list, |c| c["type"] == "CheckBox" && c["enabled"] == true)
                .expect("a check box listed"),
        );
    }
    assert_eq!(check[0], check[1]);
    let pct = |v: &[f64], p: f64| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "busy desktop: another program typing every {TYPIST_MS} ms, a caret blinking every 530 ms, \
         a clock every 1 s; {runs} turns per action and side\n\n\
         | action | settle scope | p50 ms | p90 ms | max ms | TIMEOUT | ignored p50 | p50 ratio |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (action, window, tool, params) in [
        (
            "type 2 characters into mousepad",
            &mp,
            "keyboard_input",
            json!({"keys": "ab"}),
        ),
        (
            "click a check box in gtk3-widget-factory",
            &factory,
            "click_input",
            json!({"id": check[0]}),
        ),
    ] {
        for exec in &sides {
            drive::select(exec, OPTS, window.handle).await;
        }
        let mut waits = [Vec::new(), Vec::new()];
        let mut ignored = [Vec::new(), Vec::new()];
        let mut timeouts = [0usize; 2];
        for i in 0..runs {
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                drive::ok(&sides[side], OPTS, tool, params.clone()).await;
                let shot =
                    drive::ok(&sides[side], OPTS, "capture_window_screenshot", json!({})).await;
                let settle = shot
                    .settle
                    .expect("the observation after an action settles");
                if verbose {
                    eprintln!("{action} | {}: {settle:?}", names[side]);
                }
                waits[side].push(settle.waited.as_secs_f64() * 1e3);
                ignored[side].push(f64::from(settle.ignored));
                if settle.outcome == SettleOutcome::Timeout {
                    timeouts[side] += 1;
                }
            }
        }
        let base = pct(&waits[0], 0.5);
        for side in 0..2 {
            let p50 = pct(&waits[side], 0.5);
            println!(
                "| {action} | {} | {p50:.0} | {:.0} | {:.0} | {} of {runs} | {:.0} | {:.2} |",
                names[side],
                pct(&waits[side], 0.9),
                pct(&waits[side], 1.0),
                timeouts[side],
                pct(&ignored[side], 0.5),
                p50 / base
            );
        }
    }
    // Clear mousepad's document so a rerun starts alike (nothing is saved).
    drive::select(&sides[1], OPTS, mp.handle).await;
    drive::ok(
        &sides[1],
        OPTS,
        "keyboard_input",
        json!({"keys": "^a{DELETE}"}),
    )
    .await;
}

#[cfg(not(target_os = "linux"))]
fn main() {}
