//! MCP servers on the desktop's side (`transport: {type: stdio, on: desktop}`): a real executor (over
//! gRPC, dial-in, and over a dial-out stream) starts the server — written with the official Python SDK,
//! `tests/mcp/desktop_server.py` — under its own `--mcp-stdio-allow` list, and the agent speaks MCP to it
//! through the executor's process tools:
//! - in a round, the HostAgent assigns the server's third-party agent a subtask; its tool runs in the
//!   executor's environment (the DISPLAY of the executor's private desktop, which the test process does
//!   not have) and its answer reaches the model; a server whose program the executor does not allow fails
//!   its subtask with the executor's reason, which reaches the HostAgent;
//! - the task's servers end with it: dropping the round's dispatcher stops the process (checked by pid);
//! - over a dial-out stream, the same calls work, and the stream's end kills the server.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Map, Value, json};
use ufo_agent::agents::{AgentServices, AgentSettings, HostAgent};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::mcp::{McpDispatcher, McpHub, McpLimits, McpServersFile};
use ufo_agent::memory::Blackboard;
use ufo_agent::round::{Arrived, Round, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};

fn server_script() -> String {
    format!("{}/tests/mcp/desktop_server.py", env!("CARGO_MANIFEST_DIR"))
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

async fn gone(pid: u64, what: &str) {
    let end = Instant::now() + Duration::from_secs(15);
    while alive(pid) {
        assert!(Instant::now() < end, "{what} (pid {pid}) is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The servers file: `desk` (python3, allowed by the executor) and `nope` (an absolute path the
/// executor's list does not name), both on the desktop, both third-party agents.
fn hub() -> Arc<McpHub> {
    let file = McpServersFile::parse(
        &json!({"servers": [
            {"name": "desk",
             "transport": {"type": "stdio", "on": "desktop", "command": "python3",
                           "args": [server_script()]},
             "bind": {"type": "agent", "description": "Tells where it runs on the desktop"}},
            {"name": "nope",
             "transport": {"type": "stdio", "on": "desktop", "command": "/usr/bin/python3",
                           "args": [server_script()]},
             "bind": {"type": "agent", "description": "Not allowed on the desktop"}}
        ]})
        .to_string(),
        false,
    )
    .unwrap();
    Arc::new(McpHub::new(
        file,
        McpLimits {
            connect_timeout: Duration::from_secs(60),
            ..McpLimits::default()
        },
    ))
}

/// A headless executor in this process, allowing `python3` as an MCP server; its URL and stopper.
async fn executor() -> (String, tokio_util::sync::CancellationToken) {
    headless_executor(&["--mcp-stdio-allow", "python3"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_server_runs_through_the_executor_in_a_round_and_ends_with_it() {
    let (url, stop) = executor().await;
    let grpc: Arc<dyn CommandDispatcher> =
        Arc::new(GrpcDispatcher::connect_lazy(&url, Some("tok"), 20_000, 64 << 20, None).unwrap());
    let dispatcher = Arc::new(McpDispatcher::new(grpc, hub()));
    // The task's hub: its desktop servers start through this task's executor.
    let task_hub = dispatcher.hub().clone();
    let llm = ScriptedLlm::start().await.unwrap();
    let services = AgentServices {
        mcp: Some(task_hub.clone()),
        ..services(&llm, AgentSettings::default())
    };
    let mut round = Round::new(
        "s-1",
        1,
        "where does the desktop server run?",
        0,
        HostAgent::new(services),
        Blackboard::default(),
        vec![],
        dispatcher.clone(),
    )
    .unwrap();

    // First the server the executor does not allow: its subtask fails with the executor's reason.
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("Not allowed on the desktop"), "{text}");
        ScriptedReply::Text(assign(&target_label(req, "nope"), "say where you run").to_string())
    });
    llm.push_fn(|req| {
        let text = req.text();
        assert!(
            text.contains(
                "program \\\"/usr/bin/python3\\\" is not on the executor's --mcp-stdio-allow list"
            ) || text.contains(
                "program \"/usr/bin/python3\" is not on the executor's --mcp-stdio-allow list"
            ),
            "the HostAgent is told why: {text}"
        );
        ScriptedReply::Text(assign(&target_label(req, "desk"), "say where you run").to_string())
    });
    let call = json!({"function": "mcp__desk__where", "arguments": {"names": ["DISPLAY"]}});
    llm.push_fn(move |req| {
        let text = req.text();
        assert!(text.contains("mcp__desk__where(names: array)"), "{text}");
        ScriptedReply::Text(third("CONTINUE", call.clone(), "").to_string())
    });
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("mcp__desk__where"), "{text}");
        assert!(text.contains("[success]"), "{text}");
        assert!(text.contains("ppid"), "{text}");
        ScriptedReply::Text(third("FINISH", json!(null), "it runs on the desktop").to_string())
    });
    llm.push_json(&host("FINISH", json!({"result": "on the desktop"})));

    let none = Arrived::default();
    let mut steps = vec![];
    while let Some(step) = round.next_step(&none).await {
        steps.push(step);
    }
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("on the desktop".into()))
    );
    let agents: Vec<_> = steps.iter().map(|s| s.step.agent_name.as_str()).collect();
    assert_eq!(
        agents,
        [
            "HostAgent",
            "ThirdPartyAgent/nope",
            "HostAgent",
            "ThirdPartyAgent/desk",
            "ThirdPartyAgent/desk",
            "HostAgent"
        ]
    );
    let called = &steps[3].step.actions[0];
    assert_eq!(called.function, "mcp__desk__where");
    let result = called.result.as_ref().unwrap();
    assert_eq!(result.status, ufo_proto::v1::ResultStatus::Success as i32);
    let value = ufo_proto::json::from_value(result.result.clone().unwrap());
    let place: Value = serde_json::from_str(value["text"].as_str().unwrap()).unwrap();
    // The executor's environment: its private desktop's DISPLAY, which this process does not have.
    let display = place["env"]["DISPLAY"].as_str().expect("a DISPLAY");
    assert!(display.starts_with(':'), "{value}");
    assert_ne!(std::env::var("DISPLAY").ok().as_deref(), Some(display));
    let pid = place["pid"].as_u64().unwrap();
    assert!(alive(pid));
    // The refused server's step asks no model: its tools could not be listed.
    assert_eq!(llm.requests().len(), 5);
    let refused = &steps[1].step;
    assert!(
        format!("{refused:?}").contains("is not on the executor's --mcp-stdio-allow list"),
        "{refused:?}"
    );

    // The task's end drops its dispatcher and hub: the server is stopped.
    drop(round);
    drop(task_hub);
    drop(dispatcher);
    gone(pid, "the desktop server after its task").await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_dial_out_stream_and_its_end_kills_the_server() {
    use clap::Parser as _;
    use ufo_agent::dispatch::dialout::enroll::Enrollments;
    use ufo_agent::dispatch::dialout::server::HubService;

    let dir = tempfile::tempdir().unwrap();
    let enrollments = Enrollments::new(dir.path().join("enrollments.json"));
    let (_, token) = enrollments.create("desk1").unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let tunnel_hub = Arc::new(ufo_agent::dispatch::dialout::Hub::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_url = format!("http://{}", listener.local_addr().unwrap());
    let service = HubService::new(tunnel_hub.clone(), enrollments, Duration::from_millis(500))
        .server(64 << 20);
    let agent_stop = tokio_util::sync::CancellationToken::new();
    let serving = agent_stop.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                serving.cancelled(),
            )
            .await
    });
    let desk = ufo_executor::testing::Desktop::start(800, 600)
        .await
        .unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor",
        "--connect",
        &agent_url,
        "--name",
        "desk1",
        "--enroll-token-file",
        token_file.to_str().unwrap(),
        "--mcp-stdio-allow",
        "python3",
    ])
    .unwrap();
    let exec_stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(ufo_executor::run_dial_out_with_backend(
        config,
        backend,
        exec_stop.clone(),
    ));
    ufo_testkit::poll_until(
        "the executor dialled in",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            let up = tunnel_hub.get("desk1").is_some();
            async move { Ok::<_, String>(up.then_some(())) }
        },
    )
    .await
    .unwrap();
    let grpc: Arc<dyn CommandDispatcher> = Arc::new(
        GrpcDispatcher::dial_out(
            tunnel_hub.channel("desk1", 64 << 20),
            "desk1",
            20_000,
            64 << 20,
        )
        .unwrap(),
    );
    let dispatcher = McpDispatcher::new(grpc, hub());
    let task_hub = dispatcher.hub().clone();
    let server = task_hub.server("desk").unwrap();
    let args: Map<String, Value> = json!({"a": 2, "b": 40}).as_object().cloned().unwrap();
    let out = server.call("add", args).await.unwrap();
    assert_eq!(out.text, "42");
    let args: Map<String, Value> = json!({"names": []}).as_object().cloned().unwrap();
    let out = server.call("where", args).await.unwrap();
    let place: Value = serde_json::from_str(&out.text).unwrap();
    let pid = place["pid"].as_u64().unwrap();
    assert!(alive(pid));

    // The stream ends (the agent closes it): the executor kills what was started over it.
    tunnel_hub
        .get("desk1")
        .unwrap()
        .close(tonic::Status::unavailable("closed by the test"));
    gone(pid, "the server of a closed dial-out stream").await;
    exec_stop.cancel();
    agent_stop.cancel();
}
