//! The model loop against the real Linux executor (AT-SPI + X11 under a private Xvfb desktop) over gRPC,
//! with the scripted OpenAI-compatible model recording every prompt:
//! - both prompts' function lists are the executor's `ListTools` names (asked of the executor directly),
//!   split between the HostAgent and the AppAgent, none missing;
//! - the HostAgent's prompt lists the launch allow-list; a launch that is not allowed is denied and the
//!   next HostAgent prompt shows it with the allowed names;
//! - launch → wait for the new window → assign runs in one HostAgent step (real mousepad);
//! - the first action of a batch fails in the executor: the next AppAgent prompt shows it as failed with
//!   the executor's error and the rest as skipped, and the batch's FINISH does not end the subtask.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;

use crate::common::*;
use clap::Parser as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use ufo_agent::agents::tools::{HOST_TOOLS, OBSERVATION_TOOLS, THIRD_PARTY_TOOLS};
use ufo_agent::agents::{AgentSettings, HostAgent};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::round::{Arrived, Round, RoundEnd};
use ufo_agent::testing::{RecordedRequest, ScriptedLlm, ScriptedReply};
use ufo_executor::testing::Desktop;
use ufo_proto::v1;

/// The function names of a prompt's system message (`- name(...): ...` lines after "Functions:").
fn functions(req: &RecordedRequest) -> Vec<String> {
    let system = req.role_text("system");
    let (_, list) = system.split_once("Functions:\n").expect("a function list");
    list.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.split('(').next().unwrap().to_owned())
        .collect()
}

/// The executor's tool names, asked with a plain tonic client (not the agent's catalog code).
async fn list_tools(addr: &str) -> Vec<String> {
    let mut client = v1::executor_client::ExecutorClient::connect(addr.to_owned())
        .await
        .unwrap();
    let mut req = tonic::Request::new(v1::ListToolsRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer tok".parse().unwrap());
    client
        .list_tools(req)
        .await
        .unwrap()
        .into_inner()
        .tools
        .into_iter()
        .map(|t| t.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_allow_list_launch_and_a_failed_batch_against_the_linux_executor() {
    let desk = Desktop::start(1024, 700).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    // The executor starts programs with its own environment: the allow-listed program is a script that
    // runs mousepad on the test desktop.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("mousepad-on-desktop");
    let exports: String = desk
        .env()
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect();
    std::fs::write(
        &script,
        format!("#!/bin/sh\nunset NO_AT_BRIDGE\n{exports}exec /usr/bin/mousepad \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor".to_owned(),
        "--token".to_owned(),
        "tok".to_owned(),
        "--allow-app".to_owned(),
        format!("mousepad={}", script.display()),
    ])
    .unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend.clone(),
        listener,
        stop.clone(),
    ));
    let grpc =
        Arc::new(GrpcDispatcher::connect_lazy(&addr, Some("tok"), 20_000, 64 << 20, None).unwrap());
    let tools = list_tools(&addr).await;
    assert!(tools.iter().any(|t| t == "drag_on_coordinates"));

    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = Round::new(
        "real-loop",
        1,
        "write hello in mousepad",
        0,
        HostAgent::new(services(&llm, AgentSettings::default())),
        Default::default(),
        vec![],
        grpc.clone() as Arc<dyn CommandDispatcher>,
    )
    .unwrap();
    let expected_host: Vec<String> = tools
        .iter()
        .filter(|t| HOST_TOOLS.contains(&t.as_str()))
        .cloned()
        .collect();
    let expected_app: Vec<String> = tools
        .iter()
        .filter(|t| {
            ![
                &HOST_TOOLS[..],
                &OBSERVATION_TOOLS[..],
                &THIRD_PARTY_TOOLS[..],
            ]
            .concat()
            .contains(&t.as_str())
        })
        .cloned()
        .collect();
    eprintln!(
        "ListTools: {} tools; HostAgent offered {:?}; AppAgent offered {:?}",
        tools.len(),
        expected_host,
        expected_app
    );
    let host_tools = expected_host.clone();
    llm.push_fn(move |req| {
        assert_eq!(functions(req), host_tools);
        let text = req.role_text("user");
        assert!(
            text.contains("[Launchable applications]\nmousepad\n"),
            "{text}"
        );
        ScriptedReply::Text(
            host(
                "CONTINUE",
                json!({"function": "launch_application", "arguments": {"name": "gedit"}}),
            )
            .to_string(),
        )
    });
    llm.push_fn(|req| {
        let text = req.role_text("user");
        assert!(
            text.contains(
                "launch_application {\"name\":\"gedit\"} [denied: application 'gedit' is not on \
                 the executor's allow-list; allowed: mousepad]"
            ),
            "{text}"
        );
        ScriptedReply::Text(
            host(
                "ASSIGN",
                json!({"current_subtask": "write hello", "message": "type it",
                       "function": "launch_application", "arguments": {"name": "mousepad"}}),
            )
            .to_string(),
        )
    });
    // The launched window's AppAgent, assigned in the same HostAgent step. Its batch's first action is
    // one the executor rejects (coordinates outside the window).
    let app_tools = expected_app.clone();
    llm.push_fn(move |req| {
        assert_eq!(functions(req), app_tools);
        ScriptedReply::Text(
            app(
                "FINISH",
                json!([
                    {"function": "click_on_coordinates", "arguments": {"x": 5, "y": 5}, "status": "CONTINUE"},
                    {"function": "keyboard_input", "arguments": {"keys": "hello"}, "status": "CONTINUE"},
                    {"function": "summary", "arguments": {"text": "typed"}, "status": "FINISH"}
                ]),
                "typed",
            )
            .to_string(),
        )
    });
    llm.push_fn(|req| {
        let text = req.role_text("user");
        for needle in [
            r#"click_on_coordinates {"x":5,"y":5} [failure: "#,
            r#"keyboard_input {"keys":"hello"} [skipped: "#,
            r#"summary {"text":"typed"} [skipped: "#,
        ] {
            assert!(text.contains(needle), "prompt lacks {needle}: {text}");
        }
        ScriptedReply::Text(app("FAIL", json!([]), "the click was rejected").to_string())
    });
    llm.push_json(&host("FINISH", json!({"result": "stopped"})));

    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    let summary: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.step.agent_name.clone(),
                r.step.status.clone(),
                r.step.state_after.clone(),
            )
        })
        .collect();
    assert_eq!(llm.remaining(), 0, "{summary:#?}");
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("stopped".into())),
        "{summary:#?}"
    );
    // Every executor tool is offered to one agent, observed by the agents themselves, or reached by a
    // third-party agent under its own name (the shell's run_command).
    let covered: BTreeSet<&str> = expected_host
        .iter()
        .chain(&expected_app)
        .map(String::as_str)
        .chain(OBSERVATION_TOOLS)
        .chain(THIRD_PARTY_TOOLS)
        .collect();
    assert_eq!(
        covered,
        tools.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    // The denied launch was never sent; the allowed one waited for the window and assigned it.
    let launch = &records[1].step;
    assert_eq!(launch.state_after, "ASSIGN", "{summary:#?}");
    let result = launch.actions[0].result.as_ref().unwrap();
    assert_eq!(result.status, v1::ResultStatus::Success as i32);
    let value = ufo_proto::json::from_value(result.result.clone().unwrap());
    assert!(
        value["window"]["name"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("mousepad"),
        "{value}"
    );
    eprintln!("launch → window: waited {} ms", value["waited_ms"]);
    assert!(
        records[2].step.agent_name.starts_with("AppAgent/"),
        "{summary:#?}"
    );
    // The AppAgent's first observation followed the launch and selection: the executor waited for the
    // screen to settle and the step records how long.
    let settle = &records[2].memory_item.as_ref().unwrap()["settle"];
    eprintln!("first AppAgent observation: settle {settle}");
    assert!(settle["waited_ms"].as_f64().is_some(), "{settle}");
    assert!(settle["outcome"].is_string(), "{settle}");
    // The batch: failed, skipped, skipped; FINISH did not end the subtask.
    let batch = &records[2].step;
    let statuses: Vec<_> = batch
        .actions
        .iter()
        .map(|a| a.result.as_ref().unwrap().status)
        .collect();
    assert_eq!(
        statuses,
        [
            v1::ResultStatus::Failure as i32,
            v1::ResultStatus::Skipped as i32,
            v1::ResultStatus::Skipped as i32
        ]
    );
    assert_eq!(batch.state_after, "CONTINUE");
    let error = &batch.actions[0].result.as_ref().unwrap().error;
    let next = llm.requests()[3].role_text("user");
    assert!(next.contains(&format!("[failure: {error}]")), "{next}");
    stop.cancel();
    server.await.unwrap().unwrap();
}

/// The first listed control of `kind` with a name, as `(label, name)`, from an AppAgent prompt's
/// control lines (`["label", "name", "type"]`).
fn first_named(req: &RecordedRequest, kind: &str) -> (String, String) {
    req.text()
        .lines()
        .find_map(|line| {
            let entry: Vec<serde_json::Value> =
                serde_json::from_str(line.trim().trim_end_matches(',')).ok()?;
            match entry.as_slice() {
                [
                    serde_json::Value::String(id),
                    serde_json::Value::String(n),
                    serde_json::Value::String(t),
                ] if t == kind && !n.is_empty() => Some((id.clone(), n.clone())),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("no named {kind} in the prompt: {}", req.text()))
}

/// Issue 31: the AppAgent's batch types into gtk3-widget-factory's entry and presses Enter there with
/// status FINISH; the entry ignores Enter. The executor reports the Enter's effect as `none_observed`,
/// the next AppAgent prompt says so, and the FINISH did not finish the subtask (the step's state is
/// CONTINUE; the AppAgent observed again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_in_a_field_that_ignores_it_is_none_observed_and_does_not_finish() {
    let mut desk = Desktop::start(1280, 900).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    desk.launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let config = ufo_executor::Config::try_parse_from(["ufo-executor", "--token", "tok"]).unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend.clone(),
        listener,
        stop.clone(),
    ));
    let grpc =
        Arc::new(GrpcDispatcher::connect_lazy(&addr, Some("tok"), 20_000, 64 << 20, None).unwrap());
    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = Round::new(
        "effects",
        1,
        "name the entry and confirm it",
        0,
        HostAgent::new(services(&llm, AgentSettings::default())),
        Default::default(),
        vec![],
        grpc.clone() as Arc<dyn CommandDispatcher>,
    )
    .unwrap();
    llm.push_fn(|req| {
        let text = req.role_text("user");
        let label = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|t| t["kind"] == "APPLICATION")
            .map(|t| t["label"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("an application target: {text}"));
        ScriptedReply::Text(
            json!({"observation": "desktop", "thought": "t", "status": "ASSIGN", "plan": [],
                   "current_subtask": "name the entry", "message": "go",
                   "function": "select_application_window", "arguments": {"id": label}})
            .to_string(),
        )
    });
    // The entry chosen in the batch's prompt; the next prompt's previous actions name it as it was
    // then (its listed name can change: CI once listed it without one after the Enter).
    let chosen = Arc::new(std::sync::Mutex::new(None::<(String, String)>));
    let keep = chosen.clone();
    llm.push_fn(move |req| {
        let (label, name) = first_named(req, "Edit");
        *keep.lock().unwrap() = Some((label.clone(), name));
        ScriptedReply::Text(
            app(
                "FINISH",
                json!([
                    {"function": "set_edit_text", "arguments": {"id": label, "text": "effects"}, "status": "CONTINUE"},
                    {"function": "keyboard_input", "arguments": {"id": label, "keys": "{ENTER}"}, "status": "FINISH"}
                ]),
                "named and confirmed",
            )
            .to_string(),
        )
    });
    llm.push_fn(move |req| {
        let (label, name) = chosen
            .lock()
            .unwrap()
            .clone()
            .expect("the batch's prompt chose the entry");
        let text = req.role_text("user");
        let told = format!(
            "keyboard_input on [{label}]{name} [success; effect: none_observed — keys '{{ENTER}}' in \
             '{name}': nothing changed]"
        );
        assert!(text.contains(&told), "the prompt lacks {told:?}: {text}");
        assert!(
            text.contains(&format!("set_edit_text on [{label}]{name} [success; effect: confirmed — ")),
            "{text}"
        );
        ScriptedReply::Text(app("FAIL", json!([]), "Enter does nothing here").to_string())
    });
    llm.push_json(&host("FINISH", json!({"result": "stopped"})));
    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    let summary: Vec<_> = records
        .iter()
        .map(|r| (r.step.agent_name.clone(), r.step.state_after.clone()))
        .collect();
    assert_eq!(llm.remaining(), 0, "{summary:#?}");
    let batch = &records[1].step;
    assert_eq!(batch.status, "FINISH", "{summary:#?}");
    assert_eq!(
        batch.state_after, "CONTINUE",
        "FINISH did not finish: {summary:#?}"
    );
    let effect = batch.actions[1]
        .result
        .as_ref()
        .unwrap()
        .effect
        .clone()
        .expect("the Enter's effect is recorded with the step");
    assert_eq!(
        effect.kind,
        v1::EffectKind::NoneObserved as i32,
        "{effect:?}"
    );
    stop.cancel();
    server.await.unwrap().unwrap();
}
