//! Conformance cases shared by every backend, spoken over real gRPC so the same code runs against the
//! Linux executor (tests/handles.rs, on a private Xvfb) and a Windows one (tests/remote.rs: Wine 10 in
//! CI, or a real Windows machine). Platform-independent: it compiles for x86_64-pc-windows-gnu too.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_os = "linux")]
pub mod headless;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::executor_client::ExecutorClient;
use ufo_proto::v1::{Command, ExecuteRequest, ImageFormat, Result as CommandResult, ResultStatus};

/// How long a case waits for the desktop to show an expected state.
pub const SETTLE: Duration = Duration::from_secs(20);

/// An authenticated executor client.
pub struct Remote {
    pub client: ExecutorClient<InterceptedService<Channel, ClientContext>>,
    pub channel: Channel,
    /// The executor's URL.
    pub url: String,
}

impl Remote {
    /// Connects (lazily) to `url` with `token`.
    pub fn connect(url: &str, token: Option<&str>) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .expect("a valid executor URL")
            .connect_timeout(Duration::from_secs(10))
            .connect_lazy();
        let ctx = ClientContext::new(token).unwrap();
        Self {
            client: ExecutorClient::with_interceptor(channel.clone(), ctx)
                .max_decoding_message_size(64 * 1024 * 1024),
            channel,
            url: url.to_owned(),
        }
    }

    /// Runs one command (PNG images, 20 s deadline) and returns its result.
    pub async fn run(&mut self, tool: &str, params: Value) -> CommandResult {
        let res = self
            .client
            .execute(ExecuteRequest {
                commands: vec![Command {
                    tool_name: tool.into(),
                    parameters: Some(ufo_proto::json::to_struct(params).unwrap()),
                    tool_type: 0,
                    call_id: tool.into(),
                }],
                command_deadline_ms: 20_000,
                image_format: ImageFormat::Png as i32,
                jpeg_quality: 0,
            })
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
            .into_inner();
        res.results.into_iter().next().expect("one result")
    }

    /// Runs one command that must succeed; returns its result and the whole record.
    pub async fn ok(&mut self, tool: &str, params: Value) -> (Value, CommandResult) {
        let r = self.run(tool, params.clone()).await;
        assert_eq!(
            r.status,
            ResultStatus::Success as i32,
            "{tool} {params}: {}",
            r.error
        );
        (
            r.result
                .clone()
                .map(ufo_proto::json::from_value)
                .unwrap_or(Value::Null),
            r,
        )
    }

    /// Polls the window list until `pred` matches one (bounded by [`SETTLE`]); returns its id.
    pub async fn find_window(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> String {
        let end = Instant::now() + SETTLE;
        loop {
            let (apps, _) = self
                .ok("get_desktop_app_target_info", json!({"remove_empty": true}))
                .await;
            if let Some(w) = apps.as_array().unwrap().iter().find(|w| pred(w)) {
                return w["id"].as_str().unwrap().to_owned();
            }
            assert!(Instant::now() < end, "no window {what} in {apps}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The listed controls of the selected window.
    pub async fn controls(&mut self) -> Vec<Value> {
        let (c, _) = self
            .ok(
                "get_app_window_controls_target_info",
                json!({"field_list": ["id", "name", "type", "rect"]}),
            )
            .await;
        c.as_array().unwrap().clone()
    }
}

/// The id of the first text-entry control (Edit or Document) in a listing.
pub fn text_control(controls: &[Value]) -> Option<String> {
    controls
        .iter()
        .find(|c| c["type"] == "Edit" || c["type"] == "Document")
        .map(|c| c["id"].as_str().unwrap().to_owned())
}

/// Handles survive: a control id from one listing still acts on its control after a tree walk and a
/// second listing of the same window (until the control is gone). `window` picks the application
/// window (from `get_desktop_app_target_info`), which must have a text-entry control.
pub async fn handles_survive(r: &mut Remote, window: impl Fn(&Value) -> bool) {
    let id = r.find_window("for the handle case", window).await;
    r.ok("select_application_window", json!({ "id": id })).await;
    let first = r.controls().await;
    let edit = text_control(&first).unwrap_or_else(|| panic!("no text control in {first:?}"));

    let (tree, _) = r.ok("get_ui_tree", json!({})).await;
    assert!(tree["node_count"].as_u64().unwrap() >= 2, "{tree}");
    // The listing is still the first one; acting by its id must reach the same control.
    let (clicked, _) = r
        .ok("click_input", json!({"id": edit, "button": "left"}))
        .await;
    assert_eq!(clicked["control"]["id"], json!(edit), "{clicked}");
    r.ok("texts", json!({ "id": edit })).await;

    // Another walk, then a new listing: the same control keeps its id there.
    r.ok("get_ui_tree", json!({"max_depth": 3})).await;
    let second = r.controls().await;
    let same = second
        .iter()
        .find(|c| c["id"] == json!(edit))
        .unwrap_or_else(|| panic!("id {edit} is missing from the second listing"));
    let before = first.iter().find(|c| c["id"] == json!(edit)).unwrap();
    assert_eq!(
        (&same["type"], &same["name"]),
        (&before["type"], &before["name"])
    );
    r.ok("click_input", json!({"id": edit, "button": "left"}))
        .await;
}
