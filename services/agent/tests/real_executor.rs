//! The whole-task scenario against the real Linux executor (AT-SPI + X11 under a private Xvfb desktop)
//! over gRPC: the HostAgent assigns a subtask to mousepad's AppAgent, whose result the blackboard carries
//! to gtk3-widget-factory's AppAgent, whose multi-action batch fails in the middle (the executor rejects
//! the action) so the rest is skipped; the text set in the real entry is read back through AT-SPI.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use clap::Parser as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use ufo_agent::agents::target::{TargetInfo, TargetKind};
use ufo_agent::agents::{AgentSettings, HostAgent};
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher, execute_one};
use ufo_agent::round::{Arrived, Round, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_executor::testing::Desktop;
use ufo_proto::v1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_task_against_the_linux_executor() {
    let mut desk = Desktop::start(1280, 800).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    desk.launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    desk.launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::try_parse_from(["ufo-executor", "--token", "tok"]).unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend.clone(),
        listener,
        stop.clone(),
    ));
    let grpc = Arc::new(
        GrpcDispatcher::connect_lazy(
            &format!("http://{addr}"),
            Some("tok"),
            20_000,
            64 << 20,
            None,
        )
        .unwrap(),
    );

    // The first enabled entry of the widget factory, by the executor's positional id (which is also the
    // AppAgent's label: without a grounding source the labels follow the executor's order).
    let windows = execute_one(
        grpc.as_ref(),
        Command::observe("get_desktop_app_target_info", json!({})),
    )
    .await
    .unwrap();
    let factory = windows
        .result
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| TargetInfo::from_json(w, TargetKind::Application))
        .find(|w| w.name.to_lowercase().contains("factory"))
        .expect("widget factory listed");
    execute_one(
        grpc.as_ref(),
        Command::act("select_application_window", json!({"id": factory.id})),
    )
    .await
    .unwrap();
    let controls = execute_one(
        grpc.as_ref(),
        Command::observe("get_app_window_controls_target_info", json!({})),
    )
    .await
    .unwrap();
    let entry = controls
        .result
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Edit" && c["enabled"] == true)
        .and_then(|c| c["id"].as_str().map(str::to_owned))
        .expect("an enabled entry");

    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = Round::new(
        "real-1",
        1,
        "note the total in mousepad, then put it in the factory's entry",
        0,
        HostAgent::new(services(&llm, AgentSettings::default())),
        Default::default(),
        vec![],
        grpc.clone() as Arc<dyn CommandDispatcher>,
    )
    .unwrap();
    llm.push_fn(|req| {
        ScriptedReply::Text(
            assign(&target_label(req, "mousepad"), "note the total in mousepad").to_string(),
        )
    });
    llm.push_fn(|req| {
        assert!(req.text().contains("[Available controls]"));
        assert_eq!(req.image_urls().len(), 2);
        ScriptedReply::Text(
            app(
                "FINISH",
                json!({"function": "keyboard_input", "arguments": {"keys": "total=42"}}),
                "total=42",
            )
            .to_string(),
        )
    });
    llm.push_fn(|req| {
        assert!(
            req.text().contains("total=42"),
            "the first result reaches the HostAgent"
        );
        ScriptedReply::Text(
            assign(&target_label(req, "factory"), "put 42 in the entry").to_string(),
        )
    });
    let e = entry.clone();
    llm.push_fn(move |req| {
        let text = req.text();
        assert!(text.contains("[Blackboard]") && text.contains("total=42"), "the blackboard reaches the AppAgent");
        ScriptedReply::Text(
            app(
                "FINISH",
                json!([
                    {"function": "set_edit_text", "arguments": {"id": e, "text": "42"}, "status": "CONTINUE"},
                    {"function": "click_input", "arguments": {"id": e, "button": "top"}, "status": "CONTINUE"},
                    {"function": "set_edit_text", "arguments": {"id": e, "text": "never"}, "status": "FINISH"}
                ]),
                "",
            )
            .to_string(),
        )
    });
    let e = entry.clone();
    llm.push_fn(move |_| {
        ScriptedReply::Text(
            app(
                "FINISH",
                json!({"function": "texts", "arguments": {"id": e}}),
                "42",
            )
            .to_string(),
        )
    });
    llm.push_json(&host("FINISH", json!({"result": "42 is in the entry"})));

    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    let summary: Vec<_> = records
        .iter()
        .map(|r| {
            let actions: Vec<_> = r
                .step
                .actions
                .iter()
                .map(|a| (a.function.clone(), a.result.clone().unwrap().error))
                .collect();
            (
                r.step.agent_name.clone(),
                r.step.state_after.clone(),
                actions,
            )
        })
        .collect();
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("42 is in the entry".into())),
        "{summary:#?}"
    );
    assert_eq!(records.len(), 6, "{summary:#?}");
    assert!(
        records[1].step.agent_name.starts_with("AppAgent/mousepad"),
        "{summary:#?}"
    );
    assert_eq!(
        records[1].step.actions[0].result.as_ref().unwrap().status,
        v1::ResultStatus::Success as i32,
        "{summary:#?}"
    );
    let batch: Vec<_> = records[3]
        .step
        .actions
        .iter()
        .map(|a| a.result.as_ref().unwrap().status)
        .collect();
    assert_eq!(
        batch,
        [
            v1::ResultStatus::Success as i32,
            v1::ResultStatus::Failure as i32,
            v1::ResultStatus::Skipped as i32
        ],
        "{summary:#?}"
    );
    // The real entry holds what the first action set; the skipped action never ran.
    let read = records[4].step.actions[0]
        .result
        .clone()
        .unwrap()
        .result
        .unwrap();
    assert_eq!(ufo_proto::json::from_value(read), json!("42"));
    assert!(
        records[3]
            .artifacts
            .iter()
            .any(|a| a.kind == v1::ArtifactKind::AnnotatedScreenshot)
    );
    assert_eq!(round.apps().len(), 2);

    stop.cancel();
    server.await.unwrap().unwrap();
}
