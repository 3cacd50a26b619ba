//! `record_input` (issue 33, human demonstrations) on a private Xvfb desktop with a real GTK dialog
//! (zenity's entry), where a scripted person — `xdotool`, its own X client sending XTEST input — clicks
//! the field, types a name and clicks OK, which closes the dialog. The recorded steps must name the
//! controls an independent live pyatspi walk (`live_walk.py`) finds at those places, with the
//! listing's selector fields, and the typed text grouped on the field; the OK click must be resolved
//! although the dialog is gone by the time the press is read. Then the bounds (most steps, longest
//! time) end recordings by themselves, and bad requests get clear errors.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_executor::backend::{Backend, WindowInfo};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits, Outcome, Status};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive;

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

async fn one(exec: &Executor, params: Value) -> Outcome {
    drive::one(exec, OPTS, "record_input", params).await
}

async fn ok(exec: &Executor, params: Value) -> Value {
    drive::ok(exec, OPTS, "record_input", params)
        .await
        .output
        .result
}

/// The failure of `record_input(params)`, which must fail.
async fn refused(exec: &Executor, params: Value) -> String {
    let o = one(exec, params.clone()).await;
    assert_eq!(
        o.status,
        Status::Failure,
        "{params} succeeded: {:?}",
        o.output
    );
    o.error
}

/// Runs the scripted person's `xdotool` command on the desktop.
fn xdotool(desk: &Desktop, args: &[&str]) {
    let out = std::process::Command::new("xdotool")
        .args(args)
        .envs(desk.env())
        .output()
        .expect("xdotool runs (install xdotool)");
    assert!(
        out.status.success(),
        "xdotool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node of the independent live walk of `pid`'s window `title`: (name, role, [l, t, r, b]).
fn live_nodes(desk: &Desktop, pid: u32, title: &str) -> Vec<(String, String, [i64; 4])> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/live_walk.py");
    let out = std::process::Command::new("/usr/bin/python3")
        .arg(script)
        .arg(pid.to_string())
        .arg(title)
        .env_remove("NO_AT_BRIDGE")
        .envs(desk.env())
        .output()
        .expect("python3 runs (install python3-pyatspi)");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "live walk output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v.get("error").is_none(), "live walk: {v}");
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let r: Vec<i64> = n["rect"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            (
                n["name"].as_str().unwrap_or_default().to_owned(),
                n["role"].as_str().unwrap_or_default().to_owned(),
                [r[0], r[1], r[0] + r[2], r[1] + r[3]],
            )
        })
        .collect()
}

/// Polls the recording until `pred` holds on its report (bounded), returning that report.
async fn poll_until(exec: &Executor, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let r = ok(exec, json!({"action": "poll"})).await;
        if pred(&r) {
            return r;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the window `w` is gone.
async fn gone(backend: &dyn Backend, w: &WindowInfo) {
    drive::until("the dialog to close", || async {
        backend
            .windows()
            .await
            .unwrap()
            .iter()
            .all(|x| x.handle != w.handle)
    })
    .await;
}

fn centre(r: [i64; 4]) -> (String, String) {
    (
        ((r[0] + r[2]) / 2).to_string(),
        ((r[1] + r[3]) / 2).to_string(),
    )
}

fn rect(v: &Value) -> [i64; 4] {
    let r: Vec<i64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    [r[0], r[1], r[2], r[3]]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_clicks_types_and_confirms_and_the_recording_names_each_control() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let args = [
        "--entry",
        "--title",
        "New project",
        "--text",
        "Project name:",
    ];
    let (pid, dialog) = desk
        .launch(backend.as_ref(), "zenity", &args)
        .await
        .unwrap();
    let exec = Executor::new(backend.clone(), Limits::default(), Vec::new());

    // Where the person will click, from a walk that shares no code with the executor.
    let live = live_nodes(&desk, pid, "New project");
    let entry = live
        .iter()
        .find(|(_, role, _)| role == "text")
        .unwrap_or_else(|| panic!("an entry in {live:?}"))
        .clone();
    let ok_button = live
        .iter()
        .find(|(name, role, _)| role == "push button" && name.trim_start_matches('_') == "OK")
        .unwrap_or_else(|| panic!("an OK button in {live:?}"))
        .clone();

    let started = ok(&exec, json!({"action": "start"})).await;
    assert_eq!(started["state"], "recording", "{started}");
    assert_eq!(started["max_events"], 2000);
    assert!(
        started["windows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["title"] == "New project" && w["process"] == "zenity"),
        "{started}"
    );
    // A second recording is refused while this one runs.
    let e = refused(&exec, json!({"action": "start"})).await;
    assert!(e.contains("a recording is already running"), "{e}");

    let (x, y) = centre(entry.2);
    xdotool(&desk, &["mousemove", &x, &y, "click", "1"]);
    poll_until(&exec, "the click on the field", |r| {
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "click")
    })
    .await;
    xdotool(&desk, &["type", "--delay", "30", "Gemini 4"]);
    let (x, y) = centre(ok_button.2);
    xdotool(&desk, &["mousemove", &x, &y, "click", "1"]);
    gone(backend.as_ref(), &dialog).await;
    poll_until(&exec, "the click on OK", |r| {
        r["total"].as_u64().unwrap() >= 3
    })
    .await;

    let stopped = ok(&exec, json!({"action": "stop"})).await;
    eprintln!("the recording: {stopped:#}");
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    assert_eq!(stopped["ended"], "asked", "{stopped}");
    let events = stopped["events"].as_array().unwrap();
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] != "window_opened")
        .collect();
    assert_eq!(steps.len(), 3, "click, text, click: {stopped:#}");

    let (click, text, confirm) = (steps[0], steps[1], steps[2]);
    assert_eq!(click["kind"], "click");
    assert_eq!(click["button"], "left");
    assert_eq!(click["resolved"], "before", "{click}");
    assert_eq!(click["window"]["title"], "New project");
    assert_eq!(click["control"]["type"], "Edit", "{click}");
    assert_eq!(rect(&click["control"]["rect"]), entry.2, "{click}");
    // Named by its label, as the executor's listing names it (pyatspi's raw name is empty).
    assert_eq!(click["control"]["name"], "Project name:", "{click}");
    // The selector fields a replay finds the control by.
    assert!(
        click["control"]["ancestors"].as_array().unwrap().len() >= 2,
        "{click}"
    );
    assert_eq!(click["control"]["sibling_index"], 0);
    assert!(
        click["control"].get("id").is_none(),
        "no positional id: {click}"
    );

    assert_eq!(text["kind"], "text");
    assert_eq!(text["text"], "Gemini 4", "{text}");
    assert_eq!(text["resolved"], "focus", "{text}");
    assert_eq!(
        text["control"], click["control"],
        "typed into the clicked field"
    );

    assert_eq!(confirm["kind"], "click");
    assert_eq!(
        confirm["resolved"], "before",
        "resolved from the listing before the press: {confirm}"
    );
    assert_eq!(confirm["control"]["type"], "Button", "{confirm}");
    assert_eq!(rect(&confirm["control"]["rect"]), ok_button.2, "{confirm}");
    assert_eq!(confirm["window"]["title"], "New project");
    let t: Vec<u64> = steps.iter().map(|s| s["at_ms"].as_u64().unwrap()).collect();
    assert!(t[0] <= t[1] && t[1] <= t[2], "in order: {t:?}");

    // Each step kept the desktop as the person saw it, read one at a time after the stop: PNGs of
    // the whole 1280×900 screen, decoded here.
    for (i, e) in events.iter().enumerate() {
        if e["kind"] == "window_opened" {
            assert!(e.get("screenshot").is_none(), "{e}");
            continue;
        }
        let meta = &e["screenshot"];
        assert_eq!(
            (meta["width"].as_u64(), meta["height"].as_u64()),
            (Some(1280), Some(900)),
            "{e}"
        );
        assert_eq!(meta["format"], "png", "{e}");
        let shot = drive::ok(
            &exec,
            OPTS,
            "record_input",
            json!({"action": "screenshot", "index": i}),
        )
        .await;
        assert_eq!(shot.output.images.len(), 1, "step {i}");
        let img = &shot.output.images[0];
        assert_eq!(img.data.len() as u64, meta["bytes"].as_u64().unwrap());
        let decoded = image::load_from_memory(&img.data).expect("a PNG");
        assert_eq!((decoded.width(), decoded.height()), (1280, 900), "step {i}");
        assert_eq!(shot.output.result["events"][0]["kind"], e["kind"]);
    }
    // The OK click shows the dialog it closed: its screenshot was captured before the press.
    let ok_at = events
        .iter()
        .position(|e| e["kind"] == "click" && e["control"]["type"] == "Button")
        .unwrap();
    assert!(
        events[ok_at]["screenshot"]["at_ms"].as_u64().unwrap()
            <= events[ok_at]["at_ms"].as_u64().unwrap(),
        "{}",
        events[ok_at]
    );
    let shot = drive::ok(
        &exec,
        OPTS,
        "record_input",
        json!({"action": "screenshot", "index": ok_at}),
    )
    .await;
    let decoded = image::load_from_memory(&shot.output.images[0].data)
        .unwrap()
        .to_rgb8();
    let [l, t, r, b] = ok_button.2;
    let distinct: std::collections::HashSet<[u8; 3]> = (l..r)
        .flat_map(|x| (t..b).map(move |y| (x, y)))
        .map(|(x, y)| decoded.get_pixel(x as u32, y as u32).0)
        .collect();
    assert!(
        distinct.len() > 3,
        "the OK button is drawn where it was: {} colours",
        distinct.len()
    );
    // A step out of range, and index without screenshot, are refused.
    let e = refused(&exec, json!({"action": "screenshot", "index": 99})).await;
    assert!(e.contains("no step 99"), "{e}");
    let e = refused(&exec, json!({"action": "screenshot"})).await;
    assert!(e.contains("index is for action screenshot"), "{e}");

    // Collected: nothing is left to stop.
    let e = refused(&exec, json!({"action": "stop"})).await;
    assert!(e.contains("no recording was started"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_ends_at_its_bounds_and_bad_requests_are_refused() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let limits = Limits {
        record_max_events: 50,
        record_max_duration: Duration::from_secs(120),
        record_max_screenshots: 1,
        ..Limits::default()
    };
    let exec = Executor::new(backend.clone(), limits, Vec::new());

    // Stop, or poll, without a start.
    let e = refused(&exec, json!({"action": "stop"})).await;
    assert_eq!(
        e,
        "record_input: no recording was started; start one with action start first"
    );
    let e = refused(&exec, json!({"action": "poll"})).await;
    assert!(e.contains("no recording was started"), "{e}");
    // Bounds above the executor's, parameters that belong to another action, unknown ones.
    let e = refused(&exec, json!({"action": "start", "max_events": 51})).await;
    assert!(e.contains("max_events must be 1..=50"), "{e}");
    let e = refused(&exec, json!({"action": "start", "max_events": 0})).await;
    assert!(e.contains("max_events must be 1..=50"), "{e}");
    let e = refused(&exec, json!({"action": "start", "max_seconds": 121})).await;
    assert!(
        e.contains("max_seconds must be above 0 and at most 120"),
        "{e}"
    );
    let e = refused(&exec, json!({"action": "start", "max_seconds": -1})).await;
    assert!(e.contains("max_seconds must be above 0"), "{e}");
    let e = refused(&exec, json!({"action": "stop", "max_events": 3})).await;
    assert!(
        e.contains("max_events and max_seconds are for action start"),
        "{e}"
    );
    let e = refused(&exec, json!({"action": "pause"})).await;
    assert!(e.contains("unknown variant `pause`"), "{e}");
    let e = refused(&exec, json!({})).await;
    assert!(e.contains("missing field `action`"), "{e}");

    // Most steps: the third step (Enter) is not kept and the recording ends by itself.
    let args = ["--entry", "--title", "Bounded", "--text", "Name:"];
    let (pid, dialog) = desk
        .launch(backend.as_ref(), "zenity", &args)
        .await
        .unwrap();
    let live = live_nodes(&desk, pid, "Bounded");
    let entry = live
        .iter()
        .find(|(_, role, _)| role == "text")
        .unwrap()
        .clone();
    let started = ok(&exec, json!({"action": "start", "max_events": 2})).await;
    assert_eq!(started["max_events"], 2);
    let (x, y) = centre(entry.2);
    xdotool(&desk, &["mousemove", &x, &y, "click", "1"]);
    xdotool(&desk, &["type", "--delay", "30", "ab"]);
    xdotool(&desk, &["key", "Return"]);
    gone(backend.as_ref(), &dialog).await;
    let ended = poll_until(&exec, "the recording to end at 2 steps", |r| {
        r["state"] == "stopped"
    })
    .await;
    assert_eq!(ended["ended"], "max_events", "{ended}");
    assert_eq!(ended["total"], 2, "{ended}");
    // An ended recording waits to be collected: a new one is refused until then.
    let e = refused(&exec, json!({"action": "start"})).await;
    assert!(e.contains("were not collected"), "{e}");
    let stopped = ok(&exec, json!({"action": "stop"})).await;
    assert_eq!(stopped["ended"], "max_events");
    let kinds: Vec<&str> = stopped["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["click", "text"], "{stopped:#}");
    assert_eq!(stopped["events"][1]["text"], "ab");
    // At most one screenshot: the click keeps it, the text none (counted as left out).
    assert!(
        stopped["events"][0]["screenshot"].is_object(),
        "{stopped:#}"
    );
    assert!(
        stopped["events"][1].get("screenshot").is_none(),
        "{stopped:#}"
    );
    assert_eq!(stopped["screenshots_left_out"], 1, "{stopped:#}");
    let e = refused(&exec, json!({"action": "screenshot", "index": 1})).await;
    assert!(e.contains("step 1 kept no screenshot"), "{e}");

    // Longest time: a recording of 0.3 s ends by itself with nothing done.
    let t0 = Instant::now();
    ok(&exec, json!({"action": "start", "max_seconds": 0.3})).await;
    let ended = poll_until(&exec, "the recording to end at 0.3 s", |r| {
        r["state"] == "stopped"
    })
    .await;
    assert_eq!(ended["ended"], "max_duration", "{ended}");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let stopped = ok(&exec, json!({"action": "stop"})).await;
    assert_eq!(stopped["total"], 0, "{stopped}");
    assert!(stopped["elapsed_ms"].as_u64().unwrap() >= 300);
}
