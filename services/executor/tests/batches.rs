//! An action reported done has happened (issue 31), on a private Xvfb desktop with real GTK
//! applications: the actions of one batch each wait for the screen to settle before the next is sent,
//! so a path typed into GTK's Save As chooser and Enter in the same batch save the file every time (and
//! in the Open chooser open it, 20 rounds each); a click on a control that is disabled for a moment
//! waits for it to become enabled (bounded, and says how long it waited).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_executor::backend::{Backend, WindowInfo};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, CommandSpec, Executor, Limits, Outcome, Status};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive::{self, cmd, id_where, until};

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

async fn ok(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::ok(exec, OPTS, tool, params).await
}

async fn select(exec: &Executor, w: &WindowInfo) {
    drive::select(exec, OPTS, w.handle).await;
}

/// Waits until the chooser closed: the listing no longer warns of a dialog in front of the window.
async fn chooser_closed(exec: &Executor) {
    until("the chooser to close", || async {
        ok(exec, "get_app_window_controls_target_info", json!({}))
            .await
            .output
            .warnings
            .is_empty()
    })
    .await;
}

/// Opens Save As in the selected mousepad and returns the chooser's listing (observed until the
/// listing is the dialog's).
async fn open_save_as(exec: &Executor) -> Value {
    ok(exec, "keyboard_input", json!({"keys": "^+s"})).await;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let o = exec
            .execute(
                vec![cmd("get_app_window_controls_target_info", json!({}))],
                OPTS,
            )
            .await
            .remove(0);
        if o.status == Status::Success
            && id_where(&o.output.result, |c| {
                c["type"] == "Edit" && c["name"] == "Name:"
            })
            .is_some()
        {
            return o.output.result;
        }
        assert!(
            Instant::now() < end,
            "the file chooser was never observed: {o:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `rounds` Save As rounds in mousepad, each one batch built by `batch` from the chooser's listing
/// and the path to save to; every batch must succeed and save its file, with no retry. Returns the
/// remarks of the batches' last commands.
async fn save_as_rounds(
    rounds: usize,
    batch: impl Fn(&Value, &std::path::Path) -> Vec<CommandSpec>,
) -> Vec<Vec<String>> {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    let (_pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, &mp).await;
    ok(
        &exec,
        "keyboard_input",
        json!({"keys": "saved by one batch"}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut remarks = Vec::new();
    for i in 0..rounds {
        let list = open_save_as(&exec).await;
        let path = dir.path().join(format!("batch-{i}.txt"));
        let out = exec.execute(batch(&list, &path), OPTS).await;
        for o in &out {
            assert_eq!(o.status, Status::Success, "round {i}: {o:?}");
        }
        let last = out.last().unwrap();
        eprintln!(
            "round {i}: settled before the last command: {:?}; remarks {:?}",
            last.settle.map(|s| (s.outcome, s.waited)),
            last.output.warnings
        );
        remarks.push(last.output.warnings.clone());
        // Saved, or the chooser is still open: observe until the file is there (bounded).
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            if std::fs::read_to_string(&path).is_ok_and(|t| t.trim_end() == "saved by one batch") {
                break;
            }
            let o = ok(&exec, "get_app_window_controls_target_info", json!({})).await;
            if Instant::now() > end {
                failures.push(i);
                if id_where(&o.output.result, |c| {
                    c["type"] == "Edit" && c["name"] == "Name:"
                })
                .is_some()
                {
                    ok(&exec, "keyboard_input", json!({"keys": "{ESC}"})).await;
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The chooser closed: the main window is in front again.
        chooser_closed(&exec).await;
    }
    assert!(
        failures.is_empty(),
        "not saved in rounds {failures:?} of {rounds}"
    );
    remarks
}

fn set_name(list: &Value, path: &std::path::Path) -> CommandSpec {
    let name = id_where(list, |c| c["type"] == "Edit" && c["name"] == "Name:")
        .unwrap_or_else(|| panic!("the chooser's Name field is listed: {list}"));
    cmd(
        "set_edit_text",
        json!({"id": name, "text": path.display().to_string(), "clear_current_text": true}),
    )
}

/// The shape real models answer with: the path into the chooser's Name field and Enter, in one batch
/// (without the wait for "Save", 20 of 20 rounds saved nothing: GTK drops the Enter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_and_enter_in_one_batch_save_every_time() {
    save_as_rounds(20, |list, path| {
        vec![
            set_name(list, path),
            cmd("keyboard_input", json!({"keys": "{ENTER}"})),
        ]
    })
    .await;
}

/// The path typed and Enter in one key string: the Enter waits the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_typed_with_enter_in_one_key_string_saves() {
    save_as_rounds(5, |list, path| {
        let name = id_where(list, |c| c["type"] == "Edit" && c["name"] == "Name:").unwrap();
        vec![cmd(
            "keyboard_input",
            json!({"id": name, "keys": format!("^a{}{{ENTER}}", path.display())}),
        )]
    })
    .await;
}

/// A click on "Save" right after the name is set, in the same batch: "Save" is briefly disabled and
/// the click waits for it instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_save_right_after_the_name_waits_for_it() {
    save_as_rounds(5, |list, path| {
        let save = id_where(list, |c| c["type"] == "Button" && c["name"] == "Save")
            .unwrap_or_else(|| panic!("Save is listed: {list}"));
        vec![
            set_name(list, path),
            cmd("click_input", json!({"id": save})),
        ]
    })
    .await;
}

/// The Open chooser, the way a person and a model do it: Ctrl+L for the location field, the path, Enter —
/// three actions in one batch, no observation in between. 20 rounds, each a different file; each must be
/// the document mousepad shows afterwards (its window title names the file), with no retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_and_enter_in_one_batch_open_every_time() {
    const ROUNDS: usize = 20;
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    let (pid, mp) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    select(&exec, &mp).await;
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for i in 0..ROUNDS {
        let name = format!("open-{i}.txt");
        let path = dir.path().join(&name);
        std::fs::write(&path, format!("document {i}\n")).unwrap();
        let started = Instant::now();
        ok(&exec, "keyboard_input", json!({"keys": "^o"})).await;
        let pressed = started.elapsed();
        // Observe until the listing is the chooser's (its Open button).
        until("the Open chooser", || async {
            let o = drive::one(
                &exec,
                OPTS,
                "get_app_window_controls_target_info",
                json!({}),
            )
            .await;
            o.status == Status::Success
                && id_where(&o.output.result, |c| {
                    c["type"] == "Button" && c["name"] == "Open"
                })
                .is_some()
        })
        .await;
        let out = exec
            .execute(
                vec![
                    cmd("keyboard_input", json!({"keys": "^l"})),
                    cmd(
                        "keyboard_input",
                        json!({"keys": path.display().to_string()}),
                    ),
                    cmd("keyboard_input", json!({"keys": "{ENTER}"})),
                ],
                OPTS,
            )
            .await;
        for o in &out {
            assert_eq!(o.status, Status::Success, "round {i}: {o:?}");
        }
        let batch = started.elapsed();
        // Opened: mousepad's window is titled after the file (bounded wait, no retry).
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let titled = backend
                .windows()
                .await
                .unwrap()
                .into_iter()
                .any(|w| w.pid == Some(pid) && w.title.contains(&name));
            if titled {
                break;
            }
            if Instant::now() > end {
                failures.push(i);
                ok(&exec, "keyboard_input", json!({"keys": "{ESC}"})).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let opened = started.elapsed();
        chooser_closed(&exec).await;
        eprintln!(
            "round {i}: Ctrl+O {pressed:?}, batch done {batch:?}, opened {opened:?}, closed {:?}; settles {:?}",
            started.elapsed(),
            out.iter()
                .map(|o| o.settle.map(|s| (s.outcome, s.waited)))
                .collect::<Vec<_>>()
        );
    }
    assert!(
        failures.is_empty(),
        "not opened in rounds {failures:?} of {ROUNDS}"
    );
}
