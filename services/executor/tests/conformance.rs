//! The backend conformance suite, run for real against the Linux backend on a private Xvfb desktop with
//! gtk3-widget-factory and mousepad, plus bad input to every tool and one pass over real gRPC.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_executor::backend::linux::LinuxBackend;
use ufo_executor::backend::{Backend, RawNode, TreeLimits, WindowInfo};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, CommandSpec, Executor, Limits, Outcome, Status};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive::{self, until};
use ufo_executor::tree::filter_controls;

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

async fn run(exec: &Executor, cmds: &[(&str, Value)]) -> Vec<Outcome> {
    let cmds = cmds
        .iter()
        .enumerate()
        .map(|(i, (t, p))| CommandSpec {
            tool: (*t).into(),
            params: p.clone(),
            call_id: format!("c{i}"),
        })
        .collect();
    exec.execute(cmds, OPTS).await
}

async fn one(exec: &Executor, tool: &str, params: Value) -> Outcome {
    run(exec, &[(tool, params)]).await.remove(0)
}

async fn ok(exec: &Executor, tool: &str, params: Value) -> Outcome {
    drive::ok(exec, OPTS, tool, params).await
}

/// The controls as the executor numbers them (same walk, same filter).
async fn listed(backend: &LinuxBackend, w: &WindowInfo) -> Vec<RawNode> {
    let limits = TreeLimits {
        max_nodes: 5000,
        max_depth: 64,
        deadline: Instant::now() + Duration::from_secs(5),
        max_value_chars: 256,
        bounds_of: None,
    };
    let tree = backend.control_tree(w, &limits).await.unwrap();
    filter_controls(&tree, &Limits::default().control_types)
}

fn id_of(controls: &[Value], pred: impl Fn(&Value) -> bool) -> Option<String> {
    controls
        .iter()
        .find(|c| pred(c))
        .map(|c| c["id"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linux_backend_conformance() {
    let mut desk = Desktop::start(1280, 800).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, factory) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let dynb: Arc<dyn Backend> = backend.clone();
    let exec = Executor::new(
        dynb.clone(),
        Limits::default(),
        vec![("mousepad".into(), "mousepad".into())],
    )
    .with_launch_env(desk.env());

    // Windows: listed with positional ids, selected by id (name mismatch warns).
    let apps = ok(
        &exec,
        "get_desktop_app_target_info",
        json!({"remove_empty": true}),
    )
    .await
    .output
    .result;
    let apps = apps.as_array().unwrap().clone();
    let id = id_of(&apps, |a| a["handle"] == json!(factory.handle)).expect("factory listed");
    assert_eq!(apps[0]["kind"], "APPLICATION");
    let sel = ok(
        &exec,
        "select_application_window",
        json!({"id": id, "name": "Not The Title"}),
    )
    .await;
    assert_eq!(sel.output.result["root_name"], "gtk3-widget-fac");
    assert_eq!(sel.output.warnings.len(), 1, "{:?}", sel.output.warnings);
    let info = ok(&exec, "get_app_window_info", json!({}))
        .await
        .output
        .result;
    assert_eq!(info["name"], factory.title);

    // Controls: ids, names, types, rects.
    let controls = ok(
        &exec,
        "get_app_window_controls_target_info",
        json!({"field_list": ["id", "name", "type", "rect", "enabled"]}),
    )
    .await
    .output
    .result;
    let controls = controls.as_array().unwrap().clone();
    assert!(controls.len() > 30, "{} controls", controls.len());
    assert_eq!(controls[0]["id"], "1");
    assert!(controls[0].get("visible").is_none());
    let nodes = listed(&backend, &factory).await;
    assert_eq!(nodes.len(), controls.len());

    // Click a check box and observe the change through AT-SPI.
    let cb = id_of(&controls, |c| {
        c["type"] == "CheckBox" && c["enabled"] == true
    })
    .expect("a check box");
    let node = nodes[cb.parse::<usize>().unwrap() - 1].clone();
    let before = backend.a11y().is_checked(&node.handle).await.unwrap();
    let click = ok(&exec, "click_input", json!({"id": cb, "button": "left"})).await;
    let method = click.output.result["method"].as_str().unwrap().to_owned();
    assert!(
        method.starts_with("action:") || method == "mouse",
        "{method}"
    );
    until("the check box to toggle", || async {
        backend.a11y().is_checked(&node.handle).await.unwrap() != before
    })
    .await;

    // A mouse click (right button goes through XTEST) is delivered too.
    ok(&exec, "click_input", json!({"id": cb, "button": "right"})).await;

    // Set text and read it back; then type keys into it.
    let edit = id_of(&controls, |c| c["type"] == "Edit" && c["enabled"] == true).expect("an entry");
    ok(
        &exec,
        "set_edit_text",
        json!({"id": edit, "text": "hello ufo"}),
    )
    .await;
    let text = ok(&exec, "texts", json!({"id": edit})).await.output.result;
    assert_eq!(text, "hello ufo");
    ok(
        &exec,
        "keyboard_input",
        json!({"id": edit, "keys": "{END}+x42"}),
    )
    .await;
    until("typed keys", || async {
        one(&exec, "texts", json!({"id": edit})).await.output.result == json!("hello ufoX42")
    })
    .await;
    ok(
        &exec,
        "set_edit_text",
        json!({"id": edit, "text": "!", "clear_current_text": false}),
    )
    .await;
    assert_eq!(
        ok(&exec, "texts", json!({"id": edit})).await.output.result,
        "hello ufoX42!"
    );

    // Scroll over a control.
    let sl =
        id_of(&controls, |c| c["type"] == "Slider" && c["enabled"] == true).unwrap_or(edit.clone());
    let w = ok(
        &exec,
        "wheel_mouse_input",
        json!({"id": sl, "wheel_dist": -2}),
    )
    .await;
    assert_eq!(w.output.result["method"], "wheel");

    // Coordinates, drag, wait, summary.
    ok(&exec, "click_on_coordinates", json!({"x": 0.5, "y": 0.02})).await;
    ok(
        &exec,
        "drag_on_coordinates",
        json!({"start_x": 0.5, "start_y": 0.02, "end_x": 0.5, "end_y": 0.02}),
    )
    .await;
    ok(&exec, "wait", json!({"seconds": 0.01})).await;
    assert_eq!(
        ok(&exec, "summary", json!({"text": "done"}))
            .await
            .output
            .result,
        "done"
    );

    // Screenshots: sizes and non-blank content.
    let shot = ok(
        &exec,
        "capture_desktop_screenshot",
        json!({"all_screens": true}),
    )
    .await;
    let img = &shot.output.images[0];
    assert_eq!((img.width, img.height), (1280, 800));
    let decoded = image::load_from_memory(&img.data).unwrap().to_rgb8();
    let first = decoded.get_pixel(0, 0);
    assert!(decoded.pixels().any(|p| p != first), "blank screenshot");
    let wshot = ok(&exec, "capture_window_screenshot", json!({})).await;
    let fresh = dynb
        .windows()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.handle == factory.handle)
        .unwrap();
    let fresh = WindowInfo {
        rect: fresh
            .rect
            .intersect(&ufo_executor::geometry::Rect::from_xywh(0, 0, 1280, 800)),
        ..fresh
    };
    assert_eq!(
        (wshot.output.images[0].width, wshot.output.images[0].height),
        (fresh.rect.width(), fresh.rect.height())
    );
    assert!(!shot.output.result.to_string().contains("base64"));

    // Unknown id fails with the valid ids and the rest of the batch is skipped.
    let out = run(
        &exec,
        &[
            ("click_input", json!({"id": "9999"})),
            ("summary", json!({"text": "x"})),
        ],
    )
    .await;
    assert_eq!(out[0].status, Status::Failure);
    assert!(
        out[0].error.contains("valid ids are 1-"),
        "{}",
        out[0].error
    );
    assert_eq!(out[1].status, Status::Skipped);

    // Disabled controls fail clearly.
    if let Some(dis) = id_of(&controls, |c| c["enabled"] == false && c["type"] != "Text") {
        let o = one(&exec, "click_input", json!({"id": dis})).await;
        assert_eq!(o.status, Status::Failure);
        assert!(o.error.contains("is disabled"), "{}", o.error);
    } else {
        panic!("gtk3-widget-factory shows no disabled control");
    }

    // Tree limits and truncation.
    let t = ok(&exec, "get_ui_tree", json!({"max_nodes": 10}))
        .await
        .output
        .result;
    assert!(t["node_count"].as_u64().unwrap() <= 10);
    assert_eq!(t["truncated"], true);
    let t = ok(&exec, "get_ui_tree", json!({"max_depth": 1}))
        .await
        .output
        .result;
    assert_eq!(t["truncated"], true);
    assert!(
        t["root"]["children"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["children"].as_array().unwrap().is_empty())
    );
    let full = ok(&exec, "get_ui_tree", json!({})).await.output.result;
    assert_eq!(full["truncated"], false);
    // The live, shown tree (hidden pages and closed menus are not on screen; tests/observe.rs checks
    // it against an independent live walk).
    assert!(
        full["node_count"].as_u64().unwrap() > 100,
        "{}",
        full["node_count"]
    );

    // Launch (allow-list only) and close an application.
    let o = one(&exec, "launch_application", json!({"name": "xterm"})).await;
    assert!(
        o.error.contains("not on the allow-list; allowed: mousepad"),
        "{}",
        o.error
    );
    let pid = ok(&exec, "launch_application", json!({"name": "mousepad"}))
        .await
        .output
        .result["pid"]
        .as_u64()
        .unwrap() as u32;
    let mp = desk.wait_window(dynb.as_ref(), pid).await.unwrap();
    let apps = ok(&exec, "get_desktop_app_target_info", json!({}))
        .await
        .output
        .result;
    let id = id_of(apps.as_array().unwrap(), |a| {
        a["handle"] == json!(mp.handle)
    })
    .unwrap();
    ok(&exec, "select_application_window", json!({"id": id})).await;
    ok(&exec, "close_application", json!({})).await;
    until("mousepad to close", || async {
        !dynb
            .windows()
            .await
            .unwrap()
            .iter()
            .any(|w| w.handle == mp.handle)
    })
    .await;
    let o = one(&exec, "click_input", json!({"id": "1"})).await;
    assert!(
        o.error.contains("no application window is selected"),
        "{}",
        o.error
    );

    grpc_round_trip(dynb).await;
}

/// Bad input to every tool gets a clear error naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_every_tool() {
    // A real desktop with no application windows: validation errors come before any desktop access,
    // and the state errors (nothing selected, no windows) are real.
    let desk = Desktop::start(800, 600).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let exec = Executor::new(backend, Limits::default(), Vec::new());
    for tool in ufo_executor::tools::Tool::ALL {
        let o = one(&exec, tool.name(), json!({"bogus": 1})).await;
        assert_eq!(o.status, Status::Failure, "{}", tool.name());
        assert!(
            o.error
                .contains(&format!("invalid parameters for {}", tool.name()))
                && o.error.contains("unknown field `bogus`"),
            "{}: {}",
            tool.name(),
            o.error
        );
    }
    let cases = [
        ("click_input", json!({}), "missing field `id`"),
        (
            "click_input",
            json!({"id": "1", "button": "top"}),
            "unknown variant `top`",
        ),
        ("click_input", json!({"id": [1]}), "expected an id"),
        (
            "click_on_coordinates",
            json!({"x": "a", "y": 0}),
            "invalid type",
        ),
        (
            "keyboard_input",
            json!({"keys": "{NOPE}"}),
            "unknown key name 'NOPE'",
        ),
        (
            "keyboard_input",
            json!({"keys": "^"}),
            "has no key after it",
        ),
        (
            "wait",
            json!({"seconds": -1}),
            "seconds must be between 0 and",
        ),
        (
            "wait",
            json!({"seconds": 1e9}),
            "seconds must be between 0 and",
        ),
        (
            "wheel_mouse_input",
            json!({"id": "1", "wheel_dist": 100000}),
            "wheel_dist must be within",
        ),
        (
            "get_app_window_controls_target_info",
            json!({"field_list": ["colour"]}),
            "unknown field 'colour' in field_list",
        ),
        (
            "launch_application",
            json!({"name": "cmd"}),
            "not on the allow-list; allowed: none",
        ),
        (
            "select_application_window",
            json!({"id": "3"}),
            "unknown window id '3'; valid ids are none",
        ),
        ("summary", json!({"text": 5}), "invalid type"),
        ("set_edit_text", json!({"id": "1"}), "missing field `text`"),
        (
            "no_such_tool",
            json!({}),
            "unknown tool 'no_such_tool'; known tools: capture_desktop_screenshot",
        ),
        (
            "get_app_window_info",
            json!({}),
            "no application window is selected",
        ),
    ];
    for (tool, params, want) in cases {
        let o = one(&exec, tool, params.clone()).await;
        assert_eq!(o.status, Status::Failure, "{tool} {params}");
        assert!(o.error.contains(want), "{tool} {params}: {}", o.error);
    }
}

async fn grpc_round_trip(backend: Arc<dyn Backend>) {
    use ufo_proto::v1::{
        Command, ExecuteRequest, GetCapabilitiesRequest, ListToolsRequest, ResultStatus,
        executor_client::ExecutorClient,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::for_tests(addr, Some("s3cret"));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend,
        listener,
        shutdown.clone(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();

    let mut anon = ExecutorClient::new(channel.clone());
    let err = loop {
        match anon.list_tools(ListToolsRequest {}).await {
            Err(e) if e.code() == tonic::Code::Unavailable => tokio::task::yield_now().await,
            other => break other.unwrap_err(),
        }
    };
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let ctx = ufo_common::grpc::ClientContext::new(Some("s3cret")).unwrap();
    let mut client = ExecutorClient::with_interceptor(channel, ctx);
    let tools = client
        .list_tools(ListToolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .tools;
    assert_eq!(
        tools.len(),
        25,
        "the 20 GUI tools, run_command and the 4 process tools"
    );
    assert!(
        tools
            .iter()
            .all(|t| t.parameters_schema.is_some() && t.result_schema.is_some())
    );
    let caps = client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (caps.backend.as_str(), caps.platform.as_str()),
        ("atspi", "linux")
    );
    assert_eq!((caps.screens[0].width, caps.screens[0].height), (1280, 800));

    let cmd = |tool: &str, params: Value| Command {
        tool_name: tool.into(),
        parameters: Some(ufo_proto::json::to_struct(params).unwrap()),
        tool_type: 0,
        call_id: tool.into(),
    };
    let res = client
        .execute(ExecuteRequest {
            commands: vec![
                cmd("capture_desktop_screenshot", json!({})),
                cmd("texts", json!({"id": "1"})),
                cmd("summary", json!({"text": "x"})),
            ],
            command_deadline_ms: 5_000,
            image_format: ufo_proto::v1::ImageFormat::Jpeg as i32,
            jpeg_quality: 60,
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        res[0].status,
        ResultStatus::Success as i32,
        "{}",
        res[0].error
    );
    assert_eq!(
        res[0].images[0].format,
        ufo_proto::v1::ImageFormat::Jpeg as i32
    );
    assert_eq!(&res[0].images[0].data[..2], &[0xff, 0xd8]);
    assert!(res[0].duration_us > 0);
    assert_eq!(res[1].status, ResultStatus::Failure as i32);
    assert_eq!(res[2].status, ResultStatus::Skipped as i32);
    assert_eq!(res[2].call_id, "summary");

    let bad = client
        .execute(ExecuteRequest {
            commands: vec![cmd("summary", json!({"text": "x"}))],
            command_deadline_ms: 10_000_000,
            image_format: 0,
            jpeg_quality: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("command_deadline_ms"));

    shutdown.cancel();
    server.await.unwrap().unwrap();
}
