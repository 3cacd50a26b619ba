//! The executor observes what is really on screen (issue 17), on a private Xvfb desktop with real GTK
//! applications: the control list against an independent live pyatspi walk (`live_walk.py`) on every
//! gtk3-widget-factory page and on mousepad's open File menu; the first observation after typing shows
//! the typed text (frames compared, no sleeps); a spinner that never stops is not waited for; Save As
//! observes the file chooser and writes the file.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_executor::backend::{Backend, SettleOutcome, WindowInfo};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits, Outcome, Status};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive::{self, id_where, until};

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

async fn one(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::one(exec, OPTS, tool, params).await
}

async fn ok(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::ok(exec, OPTS, tool, params).await
}

/// Selects `w` in the executor by its listed id.
async fn select(exec: &Executor, w: &WindowInfo) {
    drive::select(exec, OPTS, w.handle).await;
}

/// The independent walk's nodes (visible and actionable) for process `pid`.
fn live_walk(desk: &Desktop, pid: u32, title: &str) -> (Value, Vec<Value>) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/live_walk.py");
    // Debian's interpreter: python3-pyatspi installs there, whatever python3 comes first in PATH.
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
            "live walk output is not JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v.get("error").is_none(), "live walk: {v}");
    (v["window"].clone(), v["nodes"].as_array().unwrap().clone())
}

/// Every node of the live walk is among the executor's listed controls (same bounds); returns the
/// number of listed controls. The two walks run one after the other, so while the application is still
/// changing (a page transition a loaded machine draws slowly) they can see different screens: both are
/// repeated until they agree, bounded.
async fn compare(exec: &Executor, desk: &Desktop, pid: u32, title: &str, what: &str) -> usize {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = ok(
            exec,
            "get_app_window_controls_target_info",
            json!({"field_list": ["id", "name", "type", "rect"]}),
        )
        .await
        .output
        .result;
        let listed = listed.as_array().unwrap();
        let (window, live) = live_walk(desk, pid, title);
        let missing: Vec<&Value> = live
            .iter()
            .filter(|n| {
                let r = n["rect"].as_array().unwrap();
                let (x, y) = (r[0].as_i64().unwrap(), r[1].as_i64().unwrap());
                let (w, h) = (r[2].as_i64().unwrap(), r[3].as_i64().unwrap());
                let ltrb = json!([x, y, x + w, y + h]);
                !listed.iter().any(|c| c["rect"] == ltrb)
            })
            .collect();
        if missing.is_empty() && !live.is_empty() {
            return listed.len();
        }
        assert!(
            Instant::now() < end,
            "{what} ({window}): {} of {} live controls missing from the {} listed: {missing:#?}",
            missing.len(),
            live.len(),
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn controls(exec: &Executor) -> Value {
    drive::controls(exec, OPTS).await
}

fn executor(backend: Arc<dyn Backend>, desk: &Desktop) -> Executor {
    Executor::new(backend, Limits::default(), Vec::new()).with_launch_env(desk.env())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_match_a_live_walk_on_every_widget_factory_page_and_mousepads_file_menu() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec = executor(backend.clone(), &desk);
    let (pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    select(&exec, &factory).await;
    let mut pages = 0;
    for page in ["Page 1", "Page 2", "Page 3"] {
        let list = controls(&exec).await;
        let tab = id_where(&list, |c| {
            matches!(c["type"].as_str(), Some("TabItem" | "RadioButton")) && c["name"] == page
        })
        .unwrap_or_else(|| panic!("tab '{page}' listed: {list}"));
        ok(&exec, "click_input", json!({"id": tab})).await;
        let n = compare(&exec, &desk, pid, &factory.title, page).await;
        assert!(n > 20, "{page}: only {n} controls");
        pages += 1;
    }
    assert_eq!(pages, 3);

    let (mp_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, &mp).await;
    let list = controls(&exec).await;
    let file = id_where(&list, |c| c["type"] == "Menu" && c["name"] == "File")
        .unwrap_or_else(|| panic!("mousepad's File menu listed: {list}"));
    ok(&exec, "click_input", json!({"id": file})).await;
    let n = compare(&exec, &desk, mp_pid, &mp.title, "mousepad File menu").await;
    let list = controls(&exec).await;
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "MenuItem" && c["name"].as_str().unwrap().contains("Save As")),
        "the open File menu lists Save As ({n} controls): {list}"
    );
    // Each control says where it sits (the replay selector): Save As is under the File menu, in the
    // window, and first of its kind among its siblings.
    let save_as = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MenuItem" && c["name"].as_str().unwrap().contains("Save As"))
        .unwrap();
    let ancestors = save_as["ancestors"].as_array().unwrap();
    assert!(
        ancestors
            .iter()
            .any(|a| a["type"] == "Menu" && a["name"] == "File"),
        "{save_as}"
    );
    assert_eq!(
        ancestors.last().unwrap()["name"],
        mp.title.as_str(),
        "{save_as}"
    );
    assert_eq!(save_as["sibling_index"], 0, "{save_as}");
}

/// More pixels than a text caret (2 × 20) covers.
const CARET_PIXELS: usize = 40;

/// How many pixels differ between two PNG screenshots of the same size.
fn changed_pixels(a: &[u8], b: &[u8]) -> usize {
    let a = image::load_from_memory(a).unwrap().to_rgb8();
    let b = image::load_from_memory(b).unwrap().to_rgb8();
    assert_eq!(a.dimensions(), b.dimensions());
    a.pixels().zip(b.pixels()).filter(|(x, y)| x != y).count()
}

/// The document's text as the executor reads it.
async fn document_text(exec: &Executor) -> String {
    let list = controls(exec).await;
    let doc = id_where(&list, |c| {
        c["type"] == "Edit" && c["rect"][2].as_i64().unwrap() - c["rect"][0].as_i64().unwrap() > 300
    })
    .unwrap_or_else(|| panic!("mousepad's document listed: {list}"));
    ok(exec, "texts", json!({"id": doc}))
        .await
        .output
        .result
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_into_mousepad_twenty_times_is_seen_by_the_next_screenshot_every_time() {
    let mut desk = Desktop::start(1024, 768).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec = executor(backend.clone(), &desk);
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, &mp).await;
    let mut before = ok(&exec, "capture_window_screenshot", json!({}))
        .await
        .output
        .images[0]
        .data
        .clone();
    let mut waited = Vec::new();
    for i in 0..20 {
        ok(&exec, "keyboard_input", json!({"keys": format!("w{i} ")})).await;
        let shot = ok(&exec, "capture_window_screenshot", json!({})).await;
        let settle = shot
            .settle
            .expect("the first observation after an action settles");
        assert_eq!(
            settle.outcome,
            SettleOutcome::Settled,
            "round {i}: {settle:?}"
        );
        // The typing was announced by the application's accessibility events, not only drawn.
        assert!(
            settle.events > 0,
            "round {i}: no accessibility event: {settle:?}"
        );
        waited.push(settle.waited);
        let now = shot.output.images[0].data.clone();
        // More than a blinking caret changed: the typed glyphs are drawn.
        let changed = changed_pixels(&before, &now);
        assert!(
            changed > CARET_PIXELS,
            "round {i}: only {changed} pixels changed after typing (the frame before the text was drawn)"
        );
        before = now;
    }
    let text = document_text(&exec).await;
    let want: String = (0..20).map(|i| format!("w{i} ")).collect();
    assert_eq!(text, want);
    eprintln!("settle waits: {waited:?}");
}

/// The busy windows of issue 37 ([`Desktop::launch_busy_windows`]), checked to lie beside `beside`
/// (not over it). Returns their windows.
async fn busy_windows(
    desk: &mut Desktop,
    backend: &dyn Backend,
    beside: &WindowInfo,
    writer_ms: u32,
) -> Vec<WindowInfo> {
    let out = desk
        .launch_busy_windows(backend, writer_ms)
        .await
        .unwrap_or_else(|e| panic!("the busy windows start: {e:#}"));
    // Frames included (a title bar is ~30 px): the busy windows must not cover the acted one.
    let grown = ufo_executor::geometry::Rect {
        left: beside.rect.left - 40,
        top: beside.rect.top - 40,
        right: beside.rect.right + 40,
        bottom: beside.rect.bottom + 40,
    };
    for w in &out {
        assert!(
            grown.intersect(&w.rect).is_empty(),
            "{} at {:?} overlaps {} at {:?}",
            w.title,
            w.rect,
            beside.title,
            beside.rect
        );
    }
    out
}

/// Issue 37: a real desktop always draws somewhere. With another program typing into its own window
/// (a character every 10 ms: its accessibility events and drawing never leave the screen quiet for the
/// 40 ms quiet time), a caret blinking and a clock in other windows, the observation after typing into
/// mousepad settles on mousepad: SETTLED every time (the whole-screen wait before issue 37 ran to its
/// timeout), the other windows' activity counted as ignored, the typed text on the screenshot. The
/// whole-screen wait (`--settle-whole-screen`) is shown at the end for contrast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drawing_in_other_windows_does_not_hold_the_observation() {
    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec = executor(backend.clone(), &desk);
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    busy_windows(&mut desk, backend.as_ref(), &mp, 10).await;
    select(&exec, &mp).await;
    let mut before = ok(&exec, "capture_window_screenshot", json!({}))
        .await
        .output
        .images[0]
        .data
        .clone();
    let mut waits = Vec::new();
    for i in 0..10 {
        ok(&exec, "keyboard_input", json!({"keys": format!("b{i} ")})).await;
        let shot = ok(&exec, "capture_window_screenshot", json!({})).await;
        let settle = shot.settle.expect("the observation after typing settles");
        assert_eq!(
            settle.outcome,
            SettleOutcome::Settled,
            "round {i}: {settle:?}"
        );
        assert!(
            settle.ignored > 0,
            "round {i}: the other windows drew meanwhile and were ignored: {settle:?}"
        );
        let now = shot.output.images[0].data.clone();
        let changed = changed_pixels(&before, &now);
        assert!(
            changed > CARET_PIXELS,
            "round {i}: only {changed} pixels changed after typing"
        );
        before = now;
        waits.push(settle.waited);
    }
    let want: String = (0..10).map(|i| format!("b{i} ")).collect();
    assert_eq!(document_text(&exec).await, want);
    eprintln!("settle waits on the window: {waits:?}");

    let mut limits = Limits::default();
    limits.settle.whole_screen = true;
    let whole = Executor::new(backend.clone(), limits, Vec::new());
    select(&whole, &mp).await;
    ok(&whole, "keyboard_input", json!({"keys": "x"})).await;
    let settle = ok(&whole, "capture_window_screenshot", json!({}))
        .await
        .settle
        .expect("settles");
    eprintln!("the same wait over the whole screen: {settle:?}");
    assert_eq!(settle.ignored, 0, "{settle:?}");
}

/// gtk3-widget-factory draws spinners all the time: the observation after a click settles once the click's
/// drawing is done, the spinners recognised as animations (with detection off it waits for them: the whole
/// timeout when the machine is idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinner_that_never_stops_is_not_waited_for() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let (_pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    for hz in [10.0, 0.0] {
        let mut limits = Limits::default();
        limits.settle.animation_hz = hz;
        let exec = Executor::new(backend.clone(), limits, Vec::new());
        select(&exec, &factory).await;
        let list = controls(&exec).await;
        let check = id_where(&list, |c| c["type"] == "CheckBox" && c["enabled"] == true)
            .unwrap_or_else(|| panic!("a check box listed: {list}"));
        ok(&exec, "click_input", json!({"id": check})).await;
        let shot = ok(&exec, "capture_window_screenshot", json!({})).await;
        let settle = shot.settle.expect("the observation after a click settles");
        eprintln!("animation_hz {hz}: {settle:?}");
        if hz > 0.0 {
            assert_eq!(settle.outcome, SettleOutcome::Settled, "{settle:?}");
            assert!(
                settle.animations >= 1,
                "the spinner is an animation: {settle:?}"
            );
        } else {
            // Off: the spinner's drawing is waited for (alone on the machine, up to the timeout; on
            // a loaded one a frame can come late enough to look like quiet, so only this is certain).
            assert_eq!(settle.animations, 0, "{settle:?}");
            assert!(settle.draws > 0, "{settle:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_as_observes_the_file_chooser_and_writes_the_file() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec = executor(backend.clone(), &desk);
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, &mp).await;
    ok(&exec, "keyboard_input", json!({"keys": "hello from ufo"})).await;
    assert_eq!(document_text(&exec).await, "hello from ufo");

    ok(&exec, "keyboard_input", json!({"keys": "^+s"})).await;
    // The chooser opens asynchronously: observe until the listing is the dialog's.
    let end = Instant::now() + Duration::from_secs(10);
    let list = loop {
        let o = one(&exec, "get_app_window_controls_target_info", json!({})).await;
        let front = o
            .output
            .warnings
            .iter()
            .any(|w| w.contains("in front of the selected window"));
        if o.status == Status::Success && front {
            break o.output.result;
        }
        assert!(
            Instant::now() < end,
            "the file chooser was never observed: {o:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        !list
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Menu" && c["name"] == "File"),
        "the main window's menu is not among the dialog's controls: {list}"
    );
    let name = id_where(&list, |c| c["type"] == "Edit" && c["name"] == "Name:")
        .unwrap_or_else(|| panic!("the chooser's Name field is listed: {list}"));
    let shot = ok(&exec, "capture_window_screenshot", json!({})).await;
    assert!(
        shot.output.warnings.iter().any(|w| w.contains("Save As")),
        "{:?}",
        shot.output.warnings
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saved.txt");
    // Typed as a user would; the chooser checks the folder asynchronously and enables Save once it
    // has: observe that, then click Save (Enter in the field may instead accept the entry's
    // completion popup, which made this test flaky).
    let keys = format!("^a{}", path.display());
    ok(&exec, "keyboard_input", json!({"id": name, "keys": keys})).await;
    let end = Instant::now() + Duration::from_secs(10);
    let save = loop {
        let list = controls(&exec).await;
        let save = id_where(&list, |c| {
            c["type"] == "Button" && c["name"] == "Save" && c["enabled"] == true
        });
        if let Some(save) = save {
            let field = id_where(&list, |c| c["type"] == "Edit" && c["name"] == "Name:").unwrap();
            assert_eq!(field, name, "the name field keeps its id");
            break save;
        }
        assert!(Instant::now() < end, "Save never became enabled: {list}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    ok(&exec, "click_input", json!({"id": save})).await;
    until("the file to be written", || async {
        let t = std::fs::read_to_string(&path);
        t.is_ok_and(|t| t.trim_end_matches('\n') == "hello from ufo")
    })
    .await;
    // Back on the main window: the document is unchanged.
    until("the chooser to close", || async {
        one(&exec, "get_app_window_controls_target_info", json!({}))
            .await
            .output
            .warnings
            .is_empty()
    })
    .await;
    assert_eq!(document_text(&exec).await, "hello from ufo");
}

/// `wait_for_change` (issue 31, what a replay waits for its next target with): gtk3-widget-factory's
/// spinners are animations, so an unchanged window is no change and the wait runs out; a check box
/// toggled by another hand (a second executor on the same desktop) ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_change_ignores_spinners_and_ends_on_a_real_change() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let (_pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let exec = Executor::new(backend.clone(), Limits::default(), Vec::new());
    select(&exec, &factory).await;
    // The window may still be drawing its first frames or taking the focus after the launch and the
    // selection: those are real changes. Once they are over, the spinners alone never end a wait (were
    // they counted, no wait would ever run out and this would fail after its tries).
    let mut tries = 0;
    let quiet = loop {
        let r = ok(&exec, "wait_for_change", json!({"timeout_ms": 800}))
            .await
            .output
            .result;
        tries += 1;
        if r["changed"] == false || tries == 5 {
            break r;
        }
    };
    assert_eq!(quiet["changed"], false, "after {tries} waits: {quiet}");
    assert_eq!(quiet["watched"], "events");
    assert!(quiet["waited_ms"].as_u64().unwrap() >= 700, "{quiet}");

    let other = Arc::new(Executor::new(
        backend.clone(),
        Limits::default(),
        Vec::new(),
    ));
    select(&other, &factory).await;
    let list = drive::controls(&other, OPTS).await;
    let check = id_where(&list, |c| c["type"] == "CheckBox" && c["enabled"] == true).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The other hand toggles the box until the wait has ended (whenever the wait started).
    let clicker = tokio::spawn({
        let (other, done) = (other.clone(), done.clone());
        async move {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                drive::ok(&other, OPTS, "click_input", json!({"id": check})).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    let changed = ok(&exec, "wait_for_change", json!({"timeout_ms": 10_000}))
        .await
        .output
        .result;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    clicker.await.unwrap();
    assert_eq!(changed["changed"], true, "{changed}");
    assert!(changed["waited_ms"].as_u64().unwrap() < 5_000, "{changed}");
    // A timeout above the executor's longest wait is refused.
    let o = one(&exec, "wait_for_change", json!({"timeout_ms": 3_600_000})).await;
    assert_eq!(o.status, Status::Failure);
    assert!(
        o.error.contains("timeout_ms must be at most 60000"),
        "{}",
        o.error
    );
}
