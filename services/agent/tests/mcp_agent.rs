//! The MCP client end to end: the reference filesystem MCP server (`mcp-server-filesystem`, npm
//! `@modelcontextprotocol/server-filesystem`, installed by .ci/run) as a third-party agent in a two-part
//! round with the scripted model (read a value off a GUI window, then the file agent writes it), the
//! consent policy on MCP tools (deny reaches the model; confirm holds the call until approved), and the
//! faults of a misbehaving server (crash mid-call, hang, garbage; a SIGKILLed agent leaves no orphan).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use serde_json::{Map, json};
use ufo_agent::agents::policy::Policy;
use ufo_agent::agents::{AgentServices, AgentSettings, HostAgent};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::mcp::{McpDispatcher, McpError, McpHub, McpLimits, McpServer, McpServersFile};
use ufo_agent::memory::Blackboard;
use ufo_agent::round::control::Next;
use ufo_agent::round::{Arrived, Decision, Round, RoundEnd};
use ufo_agent::testing::{FakeDesktop, ScriptedLlm, ScriptedReply};

fn fault_server() -> String {
    format!("{}/tests/mcp/fault_server.py", env!("CARGO_MANIFEST_DIR"))
}

fn mcp_round(
    llm: &ScriptedLlm,
    settings: AgentSettings,
    hub: Arc<McpHub>,
    desktop: Arc<FakeDesktop>,
) -> Round {
    let services = AgentServices {
        mcp: Some(hub.clone()),
        ..services(llm, settings)
    };
    let dispatcher: Arc<dyn CommandDispatcher> = Arc::new(McpDispatcher::new(desktop, hub));
    Round::new(
        "s-1",
        1,
        "copy the total into out.txt",
        0,
        HostAgent::new(services),
        Blackboard::default(),
        vec![],
        dispatcher,
    )
    .unwrap()
}

#[tokio::test]
async fn the_file_agent_writes_what_the_gui_showed() {
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let out = dir_path.join("out.txt");
    let desktop = Arc::new(desktop());
    let mut round = mcp_round(
        &llm,
        AgentSettings::default(),
        files_hub(&dir_path),
        desktop.clone(),
    );
    let none = Arrived::default();

    // Part 1: the notes window's AppAgent reads the total off the GUI.
    llm.push_json(&assign("0", "read the total in the notes"));
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!({"function": "texts", "arguments": {"id": id("Body")}}),
            "total=42",
        )
    }));
    // Part 2: the HostAgent assigns the file agent (label 2: after the two windows).
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("\"name\":\"files\""), "{text}");
        assert!(text.contains("Reads and writes files"), "{text}");
        ScriptedReply::Text(assign("2", "write 42 into out.txt").to_string())
    });
    let target = out.display().to_string();
    let write = json!({"function": "mcp__files__write_file",
                       "arguments": {"path": target, "content": "42"}});
    llm.push_fn(move |req| {
        let text = req.text();
        // The server's own tools with their schemas, and what the GUI part produced.
        assert!(text.contains("mcp__files__write_file("), "{text}");
        assert!(text.contains("total=42"), "{text}");
        ScriptedReply::Text(third("CONTINUE", write.clone(), "").to_string())
    });
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("mcp__files__write_file"), "{text}");
        assert!(text.contains("[success]"), "{text}");
        ScriptedReply::Text(third("FINISH", json!(null), "wrote 42 to out.txt").to_string())
    });
    llm.push_json(&host("FINISH", json!({"result": "42 is in out.txt"})));

    let mut steps = vec![];
    while let Some(step) = round.next_step(&none).await {
        steps.push(step);
    }
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("42 is in out.txt".into()))
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "42");
    let agents: Vec<_> = steps.iter().map(|s| s.step.agent_name.as_str()).collect();
    assert_eq!(
        agents,
        [
            "HostAgent",
            "AppAgent/notes",
            "HostAgent",
            "ThirdPartyAgent/files",
            "ThirdPartyAgent/files",
            "HostAgent"
        ]
    );
    let call = &steps[3].step.actions[0];
    assert_eq!(call.function, "mcp__files__write_file");
    assert_eq!(steps[4].step.status, "FINISH");
    // The result is on the blackboard and in the archived subtasks.
    let board = round.blackboard().to_prompt();
    assert!(board.contains("wrote 42 to out.txt"), "{board}");
    assert!(
        round
            .previous_subtasks()
            .iter()
            .any(|s| s["result"] == "wrote 42 to out.txt" && s["status"] == "FINISH")
    );
    // Only the GUI action reached the executor.
    assert!(!desktop.actions().iter().any(|a| a.starts_with("mcp__")));
}

fn policy(text: serde_json::Value) -> Arc<Policy> {
    Arc::new(Policy::parse(&text.to_string()).unwrap())
}

/// A round already handed to the file agent (the HostAgent's ASSIGN ran).
async fn at_file_agent(llm: &ScriptedLlm, settings: AgentSettings, dir: &Path) -> Round {
    let mut round = mcp_round(llm, settings, files_hub(dir), Arc::new(desktop()));
    llm.push_json(&assign("2", "write 42 into out.txt"));
    round.next_step(&Arrived::default()).await.unwrap();
    assert_eq!(round.state(), "ThirdPartyAgent/files:CONTINUE");
    round
}

#[tokio::test]
async fn a_denied_mcp_call_does_not_run_and_the_model_is_told_why() {
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let settings = AgentSettings {
        policy: policy(
            json!({"rules": [{"tool": "mcp__files__*", "argument": "path",
            "pattern": "out\\.txt$", "verdict": "deny", "reason": "out.txt is read-only"}]}),
        ),
        ..AgentSettings::default()
    };
    let mut round = at_file_agent(&llm, settings, &dir_path).await;
    let out = dir_path.join("out.txt");
    let write = json!({"function": "mcp__files__write_file",
                       "arguments": {"path": out.display().to_string(), "content": "42"}});
    llm.push_json(&third("CONTINUE", write, ""));
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("[denied:"), "{text}");
        assert!(text.contains("out.txt is read-only"), "{text}");
        ScriptedReply::Text(third("FAIL", json!(null), "").to_string())
    });
    let denied = round.next_step(&Arrived::default()).await.unwrap();
    assert!(!out.exists(), "a denied call must not run");
    let result = denied.step.actions[0].result.as_ref().unwrap();
    assert!(result.error.contains("read-only"), "{result:?}");
    round.next_step(&Arrived::default()).await.unwrap();
    assert_eq!(round.state(), "HostAgent:CONTINUE");
}

#[tokio::test]
async fn a_confirm_rule_holds_the_mcp_call_until_it_is_approved() {
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let settings = AgentSettings {
        policy: policy(json!({"tools": {"mcp__files__write_file": "confirm"}})),
        ..AgentSettings::default()
    };
    let mut round = at_file_agent(&llm, settings, &dir_path).await;
    let out = dir_path.join("out.txt");
    let write = json!({"function": "mcp__files__write_file",
                       "arguments": {"path": out.display().to_string(), "content": "42"}});
    llm.push_json(&third("CONTINUE", write, ""));
    let held = round.next_step(&Arrived::default()).await.unwrap();
    assert!(
        matches!(&held.control.next, Next::Hold { action } if action.function == "mcp__files__write_file")
    );
    assert!(!out.exists(), "nothing runs while held");
    let approve = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: "ok".into(),
        }),
        ..Arrived::default()
    };
    let ran = round.next_step(&approve).await.unwrap();
    assert_eq!(ran.step.actions[0].function, "mcp__files__write_file");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "42");
    assert_eq!(round.state(), "ThirdPartyAgent/files:CONTINUE");
}

fn fault(mode: &str, pidfile: &Path, timeout_ms: u64) -> McpServer {
    let file = McpServersFile::parse(
        &json!({"servers": [{
            "name": "fault",
            "transport": {"type": "stdio", "command": "python3",
                          "args": [fault_server(), mode, pidfile]},
            "bind": {"type": "agent", "description": "misbehaves"},
            "call_timeout_ms": timeout_ms
        }]})
        .to_string(),
        false,
    )
    .unwrap();
    let limits = McpLimits {
        restart_backoff: Duration::from_millis(50),
        ..McpLimits::default()
    };
    McpServer::new(file.servers.into_iter().next().unwrap(), limits)
}

fn args(text: &str) -> Map<String, serde_json::Value> {
    json!({"text": text}).as_object().unwrap().clone()
}

fn pid_of(pidfile: &Path) -> i32 {
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits (bounded) until `pid` is gone: process exit is asynchronous to the kill.
async fn gone(pid: i32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test]
async fn a_working_server_answers_and_ends_with_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let server = fault("ok", &pidfile, 5_000);
    let out = server.call("echo", args("hi")).await.unwrap();
    assert_eq!(out.text, "echo:hi");
    assert!(!out.is_error);
    let err = server.call("nope", args("x")).await.unwrap_err();
    assert!(matches!(err, McpError::NoSuchTool { .. }), "{err}");
    let pid = pid_of(&pidfile);
    drop(server);
    assert!(gone(pid).await, "the server outlived its connection");
}

#[tokio::test]
async fn a_server_that_crashes_mid_call_is_an_error_and_restarts_later() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let server = fault("crash", &pidfile, 5_000);
    let err = server.call("echo", args("x")).await.unwrap_err();
    assert!(matches!(err, McpError::Call { .. }), "{err}");
    // Within the backoff: unavailable, with the reason; after it: started again.
    let again = server.call("echo", args("x")).await.unwrap_err();
    assert!(
        matches!(again, McpError::BackingOff { .. } | McpError::Call { .. }),
        "{again}"
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    std::fs::remove_file(&pidfile).unwrap();
    let _ = server.call("echo", args("x")).await;
    assert!(pidfile.exists(), "the server was not started again");
}

#[tokio::test]
async fn a_server_that_hangs_times_out_and_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let server = fault("hang", &pidfile, 300);
    let started = std::time::Instant::now();
    let err = server.call("echo", args("x")).await.unwrap_err();
    assert!(
        matches!(
            err,
            McpError::Timeout {
                timeout_ms: 300,
                ..
            }
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        gone(pid_of(&pidfile)).await,
        "the hung server was not killed"
    );
}

#[tokio::test]
async fn a_server_that_answers_garbage_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let server = fault("garbage", &pidfile, 1_000);
    let err = server.call("echo", args("x")).await.unwrap_err();
    assert!(
        matches!(err, McpError::Call { .. } | McpError::Timeout { .. }),
        "{err}"
    );
    assert!(gone(pid_of(&pidfile)).await, "the server was not killed");
}

/// Not a test: the agent process of the test below (a child copy of this binary, run with `--ignored`).
/// Starts a stdio server, says it is up, and waits to be killed. Like the agent, a multi-threaded
/// runtime whose server is started from a task on a worker thread (the parent-death signal is tied to
/// the thread that forked, and a worker lives as long as the runtime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_sigkilled_agent_leaves_no_orphan_server"]
async fn child_holding_a_stdio_server() {
    let pidfile = PathBuf::from(std::env::var_os("UFO_MCP_TEST_CHILD").expect("run by the parent"));
    let server = Arc::new(fault("linger", &pidfile, 5_000));
    let on_worker = server.clone();
    tokio::spawn(async move { on_worker.call("echo", args("up")).await })
        .await
        .unwrap()
        .unwrap();
    std::fs::write(pidfile.with_extension("ready"), b"ready").unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_sigkilled_agent_leaves_no_orphan_server() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "mcp_agent::child_holding_a_stdio_server",
            "--ignored",
            "--nocapture",
        ])
        .env("UFO_MCP_TEST_CHILD", &pidfile)
        .spawn()
        .unwrap();
    let ready = pidfile.with_extension("ready");
    let mut waited = 0;
    while !ready.exists() {
        assert!(waited < 400, "the child never connected to its server");
        tokio::time::sleep(Duration::from_millis(25)).await;
        waited += 1;
    }
    let server_pid = pid_of(&pidfile);
    assert!(alive(server_pid));
    child.kill().unwrap(); // SIGKILL: no destructor runs in the agent.
    child.wait().unwrap();
    assert!(
        gone(server_pid).await,
        "server {server_pid} outlived the SIGKILLed agent"
    );
}

/// `notifications/tools/list_changed`: a Python-SDK server that adds a tool when `unlock` is called and
/// announces it; the agent lists the tools again before their next use and can call the new one.
#[tokio::test]
async fn a_changed_tool_list_is_listed_again() {
    let script = format!(
        "{}/tests/mcp/changing_server.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = McpServersFile::parse(
        &json!({"servers": [{
            "name": "changing",
            "transport": {"type": "stdio", "command": "python3", "args": [script]},
            "bind": {"type": "agent", "description": "grows a tool"}
        }]})
        .to_string(),
        false,
    )
    .unwrap();
    let server = McpServer::new(
        file.servers.into_iter().next().unwrap(),
        McpLimits::default(),
    );
    let names =
        |tools: Vec<ufo_agent::mcp::McpTool>| tools.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(names(server.tools().await.unwrap()), ["unlock"]);
    let err = server.call("late", args("x")).await.unwrap_err();
    assert!(matches!(err, McpError::NoSuchTool { .. }), "{err}");
    let out = server.call("unlock", Map::new()).await.unwrap();
    assert_eq!(out.text, "added late");
    // The notification travels on its own; the next use lists again once it has arrived.
    let mut listed = names(server.tools().await.unwrap());
    for _ in 0..200 {
        if listed.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        listed = names(server.tools().await.unwrap());
    }
    assert_eq!(listed, ["unlock", "late"]);
    let out = server.call("late", args("hi")).await.unwrap();
    assert_eq!(out.text, "late: hi");
}
