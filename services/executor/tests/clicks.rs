//! Clicks that do what a person's click does (both found by the task suite, issue 20):
//! - a menu item that opens a modal dialog (mousepad's File ▸ Save As..., which runs
//!   `gtk_dialog_run`) must leave the application answering. Activating it with AT-SPI
//!   `Action.DoAction` runs the whole dialog inside the D-Bus call's dispatch in the application: the
//!   next request on that connection is never answered and the next key event freezes the application.
//!   The test observes the dialog, types into it and observes again, each within a deadline;
//! - a click on a list row selects it: the row's click-like action is "activate" (a double click), on
//!   which zenity's list returns at once with nothing selected;
//! - a click through a control's action and a text set cost one accessibility call beyond the action
//!   itself (issue 17): the live check reads the states only and reuses what the walk fetched.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_executor::backend::{Backend, TreeLimits};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, CommandSpec, Executor, Limits, Outcome, Status};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive;

/// Far less than a frozen application would take (the executor's own deadline is 10 s).
const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(5),
    format: Format::PNG,
};

async fn ok(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::ok(exec, OPTS, tool, params).await
}

fn id_of(list: &Value, kind: &str, name: &str) -> Option<String> {
    list.as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["name"].as_str().unwrap().trim() == name)
        .map(|c| c["id"].as_str().unwrap().to_owned())
}

/// Selects the window with X handle `handle` as the executor's target.
async fn select(exec: &Executor, handle: u64) {
    drive::select(exec, OPTS, handle).await;
}

async fn controls(exec: &Executor) -> Value {
    drive::controls(exec, OPTS).await
}

/// Lists until a control of `kind` named `name` shows (the menu and the dialog open asynchronously).
async fn wait_for(exec: &Executor, kind: &str, name: &str) -> (String, Value) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let list = controls(exec).await;
        if let Some(id) = id_of(&list, kind, name) {
            return (id, list);
        }
        assert!(Instant::now() < end, "{kind} {name:?} never listed: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_menu_item_opening_a_modal_dialog_leaves_the_application_answering() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, mp.handle).await;
    let (file, _) = wait_for(&exec, "Menu", "File").await;
    ok(&exec, "click_input", json!({"id": file})).await;
    let (save_as, _) = wait_for(&exec, "MenuItem", "Save As...").await;
    let clicked = ok(&exec, "click_input", json!({"id": save_as})).await;
    assert_eq!(
        clicked.output.result["method"], "mouse",
        "{:?}",
        clicked.output.result
    );
    // The dialog is observed (the application answers while it runs) ...
    let (name, _) = wait_for(&exec, "Edit", "Name:").await;
    // ... and still answers after a key event reached it.
    ok(
        &exec,
        "keyboard_input",
        json!({"id": name, "keys": "answering"}),
    )
    .await;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let list = controls(&exec).await;
        let typed = list
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Edit" && c["value"] == "answering");
        if typed {
            break;
        }
        assert!(Instant::now() < end, "the typed name never showed: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_list_row_selects_it_without_activating_it() {
    let mut desk = Desktop::start(1024, 768).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    let args = [
        "--list", "--title", "People", "--column", "Name", "Otto", "Anna", "Bernd",
    ];
    let (_pid, win) = desk
        .launch(backend.as_ref(), "zenity", &args)
        .await
        .unwrap();
    select(&exec, win.handle).await;
    let (anna, _) = wait_for(&exec, "ListItem", "Anna").await;
    let clicked = ok(&exec, "click_input", json!({"id": anna})).await;
    assert_eq!(
        clicked.output.result["method"], "mouse",
        "{:?}",
        clicked.output.result
    );
    // The dialog stays (a double click would have closed it) and its row is selected, as an
    // independent live pyatspi walk sees it.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", ROW_STATES, "zenity", "Anna"])
            .env_remove("NO_AT_BRIDGE")
            .envs(desk.env())
            .output()
            .expect("python3 runs (install python3-pyatspi)");
        let states = String::from_utf8_lossy(&out.stdout).into_owned();
        if states.split_whitespace().any(|s| s == "selected") {
            break;
        }
        assert!(
            Instant::now() < end,
            "the row Anna was never selected: {states} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints the states of the table cell named argv[2] in application argv[1] (nothing when absent).
const ROW_STATES: &str = r#"
import sys, pyatspi
for app in pyatspi.Registry.getDesktop(0):
    if app is None or app.name != sys.argv[1]:
        continue
    found = pyatspi.findDescendant(app, lambda n: n.getRoleName() == "table cell" and n.name == sys.argv[2])
    if found is not None:
        print(" ".join(pyatspi.stateToString(s) for s in found.getState().getStates()))
"#;

/// Moves the window `handle` so its client area's top-left is at (`x`, `y`) and waits until the window
/// list reports it there.
async fn move_window(backend: &dyn Backend, display: &str, handle: u64, x: i32, y: i32) {
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{ConfigureWindowAux, ConnectionExt as _};
    let (conn, _) = x11rb::connect(Some(display)).unwrap();
    let window = u32::try_from(handle).unwrap();
    conn.configure_window(window, &ConfigureWindowAux::new().x(x).y(y))
        .unwrap();
    conn.flush().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let windows = backend.windows().await.unwrap();
        let w = windows.iter().find(|w| w.handle == handle).unwrap();
        // The window manager puts its frame at (x, y): the client area is at most a title bar lower.
        if (w.rect.left - x).abs() < 20 && (w.rect.top - y).abs() < 60 {
            return;
        }
        assert!(Instant::now() < end, "the window stayed at {:?}", w.rect);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn row_states(desk: &Desktop, name: &str) -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", ROW_STATES, "zenity", name])
        .env_remove("NO_AT_BRIDGE")
        .envs(desk.env())
        .output()
        .expect("python3 runs (install python3-pyatspi)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A row whose window hangs below the screen's edge cannot be clicked with the pointer (X would clamp
/// the pointer to the edge and the click land elsewhere): the click fails naming the row instead of
/// reporting a success, and nothing is selected. Moved back onto the screen, the same row is clicked
/// and selected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_row_below_the_screen_fails_naming_it() {
    let mut desk = Desktop::start(1024, 768).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    let args = [
        "--list", "--title", "People", "--column", "Name", "Bernd", "Anna", "Bernd",
    ];
    let (_pid, win) = desk
        .launch(backend.as_ref(), "zenity", &args)
        .await
        .unwrap();
    // Only the title bar and the top of the dialog stay on the screen.
    move_window(backend.as_ref(), desk.display(), win.handle, 100, 700).await;
    select(&exec, win.handle).await;
    let (bernd, list) = wait_for(&exec, "ListItem", "Bernd").await;
    let rect = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == json!(bernd))
        .map(|c| c["rect"].clone())
        .unwrap();
    let centre_y = (rect[1].as_i64().unwrap() + rect[3].as_i64().unwrap()) / 2;
    assert!(
        centre_y >= 768,
        "the row is listed below the screen: {rect}"
    );

    let cmd = CommandSpec {
        tool: "click_input".into(),
        params: json!({"id": bernd}),
        call_id: "c".into(),
    };
    let o = exec.execute(vec![cmd], OPTS).await.remove(0);
    assert_eq!(o.status, Status::Failure, "{:?}", o.output.result);
    assert!(
        o.error.contains("ListItem 'Bernd' is off the screen"),
        "names the row: {}",
        o.error
    );
    assert!(
        !row_states(&desk, "Bernd").contains("selected"),
        "nothing was clicked"
    );

    move_window(backend.as_ref(), desk.display(), win.handle, 100, 60).await;
    let (bernd, _) = wait_for(&exec, "ListItem", "Bernd").await;
    ok(&exec, "click_input", json!({"id": bernd})).await;
    let end = Instant::now() + Duration::from_secs(10);
    while !row_states(&desk, "Bernd")
        .split_whitespace()
        .any(|s| s == "selected")
    {
        assert!(Instant::now() < end, "the row Bernd was never selected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_and_a_text_set_cost_one_call_beyond_the_action() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let linux = Arc::new(desk.backend().await.unwrap());
    let backend: Arc<dyn Backend> = linux.clone();
    // The delivery path alone: the effect check (issue 31) adds its own reads of the control's
    // states and text before and after the action (docs/executor-effects.md).
    let limits = Limits {
        effect_check: false,
        ..Limits::default()
    };
    let exec = Executor::new(backend.clone(), limits, Vec::new());
    let (pid, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    select(&exec, window.handle).await;
    let list = controls(&exec).await;
    let first_enabled = |kind: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind && c["enabled"] == true)
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("no enabled {kind}: {list}"))
    };
    let (check, edit) = (first_enabled("CheckBox"), first_enabled("Edit"));
    // The first click also learns which action clicks (concurrently with the state check).
    ok(&exec, "click_input", json!({"id": check})).await;
    for (tool, params) in [
        ("click_input", json!({"id": check})),
        (
            "set_edit_text",
            json!({"id": edit, "text": "01234567890123456789"}),
        ),
    ] {
        let (done, calls) = linux
            .a11y()
            .calls_during(pid, ok(&exec, tool, params))
            .await
            .unwrap();
        let method = done.output.result["method"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            method.starts_with("action:") || method == "set_text",
            "{tool} went through the accessibility API: {method}"
        );
        assert_eq!(
            calls, 2,
            "{tool}: the state check and the action, nothing more"
        );
    }
    // A walk that does not reach the check box replaces what the walks remember: the clicks after it
    // still go through the action (they once learnt it into an entry without interfaces, and the next
    // click fell back to the pointer).
    let limits = TreeLimits {
        max_nodes: 3,
        max_depth: 2,
        deadline: Instant::now() + Duration::from_secs(10),
        max_value_chars: 0,
        bounds_of: None,
    };
    backend.control_tree(&window, &limits).await.unwrap();
    for _ in 0..2 {
        let done = ok(&exec, "click_input", json!({"id": check})).await;
        let method = done.output.result["method"].as_str().unwrap_or_default();
        assert!(method.starts_with("action:"), "{}", done.output.result);
    }
}
