//! Effects confirmed or flagged (issue 31), on a private Xvfb desktop with real GTK applications: each
//! action's result says what the executor saw it change — a check box's state, an entry's text, a
//! document's text, the active window, a window opened or closed — and Enter in an entry that ignores
//! it is `none_observed`, not a success that did something.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use ufo_executor::backend::Backend;
use ufo_executor::effect::{Effect, EffectKind};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits, Outcome};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive;

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

async fn ok(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::ok(exec, OPTS, tool, params).await
}

/// The effect of an action that succeeded, printed for the record.
async fn effect(exec: &Executor, tool: &str, params: Value) -> Effect {
    let o = ok(exec, tool, params).await;
    let e = o
        .effect
        .unwrap_or_else(|| panic!("{tool}: an action reports its effect"));
    eprintln!(
        "{tool}: {:?} — {} ({:?})",
        e.kind, e.description, o.duration
    );
    e
}

fn confirmed(e: &Effect, mentions: &str) {
    assert_eq!(e.kind, EffectKind::Confirmed, "{e:?}");
    assert!(
        e.description.contains(mentions),
        "{e:?} should mention {mentions:?}"
    );
}

async fn select_handle(exec: &Executor, handle: u64) -> Effect {
    let apps = ok(exec, "get_desktop_app_target_info", json!({}))
        .await
        .output
        .result;
    let id = apps
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["handle"] == json!(handle))
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("window {handle} listed: {apps}"));
    effect(exec, "select_application_window", json!({ "id": id })).await
}

async fn controls(exec: &Executor) -> Value {
    drive::controls(exec, OPTS).await
}

fn first(list: &Value, pred: impl Fn(&Value) -> bool) -> Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| pred(c))
        .cloned()
        .unwrap_or_else(|| panic!("no such control in {list}"))
}

/// gtk3-widget-factory: a click on a check box toggles it (confirmed, with its state before and
/// after), a text set into an entry changes its text (confirmed), and Enter in that entry — which the
/// entry ignores — is `none_observed`, although the entry's caret keeps drawing and the spinners never
/// stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn click_and_set_text_are_confirmed_and_an_ignored_enter_is_not() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let (_pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let exec = Executor::new(backend.clone(), Limits::default(), Vec::new());
    let selected = select_handle(&exec, factory.handle).await;
    confirmed(&selected, "is the active window");
    let list = controls(&exec).await;

    let check = first(&list, |c| c["type"] == "CheckBox" && c["enabled"] == true);
    let clicked = effect(&exec, "click_input", json!({"id": check["id"]})).await;
    confirmed(&clicked, "checked");
    assert!(
        clicked.description.starts_with(&format!(
            "click on '{}' (CheckBox): '{}' ",
            check["name"].as_str().unwrap(),
            check["name"].as_str().unwrap()
        )),
        "{clicked:?}"
    );

    let entry = first(&list, |c| {
        c["type"] == "Edit" && c["enabled"] == true && c["name"] != ""
    });
    let typed = effect(
        &exec,
        "set_edit_text",
        json!({"id": entry["id"], "text": "effects seen"}),
    )
    .await;
    confirmed(&typed, "'effects seen'");

    for round in 0..3 {
        let enter = effect(
            &exec,
            "keyboard_input",
            json!({"id": entry["id"], "keys": "{ENTER}"}),
        )
        .await;
        assert_eq!(
            enter.kind,
            EffectKind::NoneObserved,
            "round {round}: {enter:?}"
        );
        assert_eq!(
            enter.description,
            format!(
                "keys '{{ENTER}}' in '{}': nothing changed",
                entry["name"].as_str().unwrap()
            )
        );
    }
    // The same text again changes nothing either.
    let again = effect(
        &exec,
        "set_edit_text",
        json!({"id": entry["id"], "text": "effects seen"}),
    )
    .await;
    assert_eq!(again.kind, EffectKind::NoneObserved, "{again:?}");
}

/// mousepad: launching it opens its window, selecting it makes it active, typing into its document
/// changes the text, closing it (unmodified) closes the window — each confirmed with what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_select_keys_and_close_are_confirmed() {
    let desk = Desktop::start(1024, 768).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let exec = Executor::new(
        backend.clone(),
        Limits::default(),
        vec![("mousepad".into(), PathBuf::from("/usr/bin/mousepad"))],
    )
    .with_launch_env(desk.env());

    let launched = effect(&exec, "launch_application", json!({"name": "mousepad"})).await;
    confirmed(&launched, "opened");
    assert!(
        launched
            .description
            .starts_with("launch of 'mousepad': window '"),
        "{launched:?}"
    );
    let window = backend
        .windows()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.process_name == "mousepad")
        .expect("mousepad's window");
    let selected = select_handle(&exec, window.handle).await;
    confirmed(&selected, "is the active window");

    let closed = effect(&exec, "close_application", json!({})).await;
    confirmed(&closed, "closed");
    assert!(
        closed
            .description
            .starts_with(&format!("close of '{}': window '", window.title)),
        "{closed:?}"
    );

    let launched = effect(&exec, "launch_application", json!({"name": "mousepad"})).await;
    confirmed(&launched, "opened");
    let window = backend
        .windows()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.process_name == "mousepad")
        .expect("mousepad's window again");
    select_handle(&exec, window.handle).await;
    let list = controls(&exec).await;
    let doc = first(&list, |c| c["type"] == "Document" || c["type"] == "Edit");
    let typed = effect(
        &exec,
        "keyboard_input",
        json!({"id": doc["id"], "keys": "typed by keys"}),
    )
    .await;
    confirmed(&typed, "typed by keys");
}
