//! The Windows smoke and conformance suite, run over gRPC against an executor that is already running
//! next to Notepad: under Wine 10 in CI (`.ci/wine-smoke` starts both), or on a real Windows machine.
//! Ignored by default; run it with the executor's address and token in the environment:
//!
//! ```text
//! UFO_REMOTE_EXECUTOR=http://HOST:PORT UFO_REMOTE_EXECUTOR_TOKEN=... \
//!   cargo nextest run -p ufo-executor --test remote --run-ignored only
//! ```
//!
//! The executor must allow launching Notepad (`--allow-app notepad=C:\Windows\System32\notepad.exe`)
//! for the close step. Platform-independent: it builds for x86_64-pc-windows-gnu too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shared::{Remote, SETTLE, handles_survive, text_control};
use ufo_proto::v1::executor_client::ExecutorClient;
use ufo_proto::v1::{GetCapabilitiesRequest, ListToolsRequest, ResultStatus};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this suite needs a running Windows executor (see the module doc)"
        )
    })
}

fn is_notepad(w: &Value) -> bool {
    w["process_name"]
        .as_str()
        .is_some_and(|p| p.eq_ignore_ascii_case("notepad.exe"))
        || w["name"].as_str().is_some_and(|t| t.contains("Notepad"))
}

/// Decodes a result's image and checks its size.
fn image(r: &ufo_proto::v1::Result, width: u32, height: u32) -> image::RgbImage {
    let img = r.images.first().expect("an image");
    assert_eq!((img.width, img.height), (width, height));
    let decoded = image::load_from_memory(&img.data).unwrap().to_rgb8();
    assert_eq!(decoded.dimensions(), (width, height));
    decoded
}

/// True when the image has more than one colour (an all-black or blank capture fails this).
fn has_content(img: &image::RgbImage) -> bool {
    let first = img.get_pixel(0, 0);
    img.pixels().any(|p| p != first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running Windows executor: UFO_REMOTE_EXECUTOR (see .ci/wine-smoke)"]
async fn windows_executor_smoke() {
    let url = env("UFO_REMOTE_EXECUTOR");
    let token = env("UFO_REMOTE_EXECUTOR_TOKEN");
    let mut r = Remote::connect(&url, Some(&token));

    // Health needs no token; everything else does.
    let mut health = tonic_health::pb::health_client::HealthClient::new(r.channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "ufo.v1.Executor".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let refused = ExecutorClient::new(r.channel.clone())
        .list_tools(ListToolsRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let tools = r
        .client
        .list_tools(ListToolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .tools;
    assert_eq!(tools.len(), ufo_executor::tools::Tool::ALL.len());
    let caps = r
        .client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (caps.backend.as_str(), caps.platform.as_str()),
        ("uia", "windows")
    );
    let screen = caps
        .screens
        .iter()
        .find(|s| s.primary)
        .or(caps.screens.first())
        .copied()
        .expect("a screen");

    // A desktop screenshot decodes to the screen's size and is not blank.
    let (_, shot) = r.ok("capture_desktop_screenshot", json!({})).await;
    assert!(has_content(&image(&shot, screen.width, screen.height)));

    // Notepad is listed and selected; its edit is among its controls.
    let id = r.find_window("named Notepad", is_notepad).await;
    let (sel, _) = r.ok("select_application_window", json!({ "id": id })).await;
    let handle = sel["window"]["handle"].clone();
    let controls = r.controls().await;
    let edit = text_control(&controls).unwrap_or_else(|| panic!("no edit in {controls:?}"));

    // Typed text is read back and seen in a window screenshot.
    let (_, before) = r.ok("capture_window_screenshot", json!({})).await;
    let (w, h) = (before.images[0].width, before.images[0].height);
    let before = image(&before, w, h);
    r.ok("click_input", json!({"id": edit, "button": "left"}))
        .await;
    let typed = "UFO smoke 42";
    r.ok("keyboard_input", json!({"id": edit, "keys": typed}))
        .await;
    let mut end = Instant::now() + SETTLE;
    loop {
        let (text, _) = r.ok("texts", json!({ "id": edit })).await;
        if text.as_str().unwrap().contains(typed) {
            break;
        }
        assert!(Instant::now() < end, "typed text never read back: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    end = Instant::now() + SETTLE;
    loop {
        let (_, after) = r.ok("capture_window_screenshot", json!({})).await;
        if image(&after, w, h) != before {
            break;
        }
        assert!(
            Instant::now() < end,
            "the typed text never showed on screen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // set_edit_text replaces the content (through a pattern, or the keyboard, which it says).
    let (set, _) = r
        .ok(
            "set_edit_text",
            json!({"id": edit, "text": "replaced", "clear_current_text": true}),
        )
        .await;
    eprintln!("set_edit_text wrote through: {}", set["method"]);
    end = Instant::now() + SETTLE;
    loop {
        let (text, _) = r.ok("texts", json!({ "id": edit })).await;
        if text == json!("replaced") {
            break;
        }
        assert!(Instant::now() < end, "set_edit_text not read back: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A click by coordinates lands inside the window.
    let (click, _) = r
        .ok("click_on_coordinates", json!({"x": 0.5, "y": 0.5}))
        .await;
    let (info, _) = r.ok("get_app_window_info", json!({})).await;
    let [x, y] = [&click["point"][0], &click["point"][1]].map(|v| v.as_i64().unwrap());
    let rect: Vec<i64> = info["rect"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert!(
        rect[0] <= x && x < rect[2] && rect[1] <= y && y < rect[3],
        "{click} {info}"
    );

    // The shared handle case, on the same Notepad.
    handles_survive(&mut r, |w| w["handle"] == handle).await;

    // Close: a second, untouched Notepad (the first would ask to save) goes away.
    r.ok("launch_application", json!({"name": "notepad"})).await;
    let second_notepad = |w: &Value| is_notepad(w) && w["handle"] != handle;
    r.find_window("of a second Notepad", second_notepad).await;
    // Activation switches the foreground between the two (select fails unless it is observed there).
    // Window ids are positions in the latest list, so each is looked up right before use.
    let first = r
        .find_window("of the first Notepad", |w| w["handle"] == handle)
        .await;
    r.ok("select_application_window", json!({ "id": first }))
        .await;
    let second = r.find_window("of a second Notepad", second_notepad).await;
    let (sel, _) = r
        .ok("select_application_window", json!({ "id": second }))
        .await;
    let closing = sel["window"]["handle"].clone();
    r.ok("close_application", json!({})).await;
    end = Instant::now() + SETTLE;
    loop {
        let (apps, _) = r
            .ok("get_desktop_app_target_info", json!({"remove_empty": true}))
            .await;
        if !apps
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["handle"] == closing)
        {
            break;
        }
        assert!(Instant::now() < end, "the closed window stayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = r.run("get_app_window_info", json!({})).await;
    assert_eq!(after.status, ResultStatus::Failure as i32);
}
