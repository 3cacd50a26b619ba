//! The operator's consent policy on MCP tool calls through the REST API (issue 34), with the real session
//! service on Postgres, the agent's runner and API, the scripted model, and the reference filesystem MCP
//! server (`mcp-server-filesystem`) as the third-party agent `files`:
//! - a `confirm` rule holds the call — the task waits with the held action, nothing is written — until a
//!   person approves it through `POST /v1/tasks/{id}/confirmation`; then it runs once and the file holds
//!   the value;
//! - a `deny` rule refuses the call: nothing is written, and the model's next prompt carries the reason.
//!
//! The same for the built-in shell agent (`shell__run`, a real executor's `run_command`): a `confirm`
//! rule holds the command until approved, then it runs once; a `deny` rule on a program (by argument
//! pattern) refuses it, nothing runs, and the model is told why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::api_support::{Agent, Session, agent_config, call, eventually};
use crate::common;
use serde_json::{Value, json};
use ufo_agent::agents::policy::Policy;
use ufo_agent::agents::{AgentServices, AgentSettings};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::mcp::McpDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_proto::v1::EventKind;

/// The agent service with one runner slot whose tasks get `services` and `dispatcher`.
async fn agent_with(
    session: &Session,
    services: AgentServices,
    dispatcher: Arc<dyn CommandDispatcher>,
) -> Agent {
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(dispatcher.clone())),
    ));
    Agent::start(
        agent_config(&session.url, &["--claim-interval-ms", "50"]),
        Some(driver),
    )
    .await
}

/// The agent service with one runner slot whose tasks get the file agent over `dir` and `policy`.
async fn agent_with_files(
    session: &Session,
    llm: &ScriptedLlm,
    dir: &std::path::Path,
    policy: Value,
) -> Agent {
    let hub = common::files_hub(dir);
    let settings = AgentSettings {
        policy: Arc::new(Policy::parse(&policy.to_string()).unwrap()),
        ..AgentSettings::default()
    };
    let services = AgentServices {
        mcp: Some(hub.clone()),
        ..common::services(llm, settings)
    };
    let dispatcher = Arc::new(McpDispatcher::new(Arc::new(common::desktop()), hub));
    agent_with(session, services, dispatcher).await
}

async fn submit(agent: &Agent, http: &reqwest::Client, request: &str) -> String {
    let task = call(
        http,
        reqwest::Method::POST,
        format!("{}/v1/tasks", agent.http),
        Some(json!({"request": request})),
    )
    .await;
    format!("{}/v1/tasks/{}", agent.http, task["id"].as_str().unwrap())
}

async fn ended(http: &reqwest::Client, url: &str) -> Value {
    eventually(60, "the task's end", || async {
        let t = call(http, reqwest::Method::GET, url.to_owned(), None).await;
        matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_rule_holds_the_mcp_call_until_approved_through_the_api() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let out = dir_path.join("out.txt");
    let agent = agent_with_files(
        &session,
        &llm,
        &dir_path,
        json!({"tools": {"mcp__files__write_file": "confirm"}}),
    )
    .await;
    let write = json!({"function": "mcp__files__write_file",
                       "arguments": {"path": out.display().to_string(), "content": "42"}});
    llm.push_json(&common::assign("2", "write 42 into out.txt"));
    llm.push_json(&common::third("CONTINUE", write, ""));
    llm.push_json(&common::third("FINISH", json!(null), "wrote 42"));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "done", "comment": "done"}),
    ));
    let http = ufo_testkit::http_client();
    let url = submit(&agent, &http, "write 42 into out.txt").await;

    let waiting = eventually(60, "the held MCP call", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "waiting" && t["held_action"].is_object()).then_some(t)
    })
    .await;
    assert_eq!(waiting["held_action"]["function"], "mcp__files__write_file");
    assert!(!out.exists(), "nothing runs while held");
    let answer = call(
        &http,
        reqwest::Method::POST,
        format!("{url}/confirmation"),
        Some(json!({"approve": true, "reason": "fine", "action_id": waiting["held_action"]["id"]})),
    )
    .await;
    assert!(answer.get("code").is_none(), "approved: {answer}");
    let done = ended(&http, &url).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "42");

    let id = done["id"].as_str().unwrap();
    let writes: Vec<_> = session
        .steps(id)
        .await
        .into_iter()
        .flat_map(|s| s.actions)
        .filter(|a| a.function == "mcp__files__write_file")
        .collect();
    assert_eq!(writes.len(), 1, "the held call ran exactly once");
    let events = session.events(id).await;
    let held = events
        .iter()
        .filter(|e| e.kind == EventKind::ActionHeld as i32)
        .count();
    assert_eq!(held, 1);
    agent.stop().await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_refuses_the_mcp_call_and_the_model_is_told_through_the_api() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let out = dir_path.join("out.txt");
    let agent = agent_with_files(
        &session,
        &llm,
        &dir_path,
        json!({"rules": [{"tool": "mcp__files__*", "argument": "path", "pattern": "out\\.txt$",
                          "verdict": "deny", "reason": "out.txt is read-only"}]}),
    )
    .await;
    let write = json!({"function": "mcp__files__write_file",
                       "arguments": {"path": out.display().to_string(), "content": "42"}});
    llm.push_json(&common::assign("2", "write 42 into out.txt"));
    llm.push_json(&common::third("CONTINUE", write, ""));
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("[denied:"), "{text}");
        assert!(text.contains("out.txt is read-only"), "{text}");
        ScriptedReply::Text(common::third("FAIL", json!(null), "the file is read-only").to_string())
    });
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "could not write: out.txt is read-only", "comment": "denied"}),
    ));
    let http = ufo_testkit::http_client();
    let url = submit(&agent, &http, "write 42 into out.txt").await;
    let done = ended(&http, &url).await;
    assert!(!out.exists(), "a denied call must not run");
    assert_eq!(llm.requests().len(), 4, "the model saw the denial: {done}");
    let id = done["id"].as_str().unwrap();
    let denied: Vec<_> = session
        .steps(id)
        .await
        .into_iter()
        .flat_map(|s| s.actions)
        .filter(|a| a.function == "mcp__files__write_file")
        .collect();
    assert_eq!(denied.len(), 1);
    let result = denied[0].result.as_ref().unwrap();
    assert!(result.error.contains("read-only"), "{result:?}");
    // The REST view of the steps says the same.
    let listed = call(&http, reqwest::Method::GET, format!("{url}/steps"), None).await;
    assert!(
        listed.to_string().contains("out.txt is read-only"),
        "{listed}"
    );
    agent.stop().await;
    session.stop().await;
}

/// Scripts a HostAgent that assigns `subtask` to the shell (the target named "shell") and the shell
/// agent's first reply, which calls `shell__run` with `run`.
#[cfg(target_os = "linux")]
fn script_shell(llm: &ScriptedLlm, subtask: &'static str, run: Value) {
    llm.push_fn(move |req| {
        ScriptedReply::Text(
            common::assign(&common::target_label(req, "shell"), subtask).to_string(),
        )
    });
    llm.push_json(&common::third(
        "CONTINUE",
        json!({"function": "shell__run", "arguments": run}),
        "",
    ));
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_rule_holds_the_shell_command_until_approved_through_the_api() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    // A program that records each run.
    let runs = work.join("runs.txt");
    let probe = root.join("probe");
    std::fs::write(
        &probe,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", runs.display()),
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let exec = common::ShellExecutor::start(&work, &probe.display().to_string()).await;
    let services = common::services(
        &llm,
        common::shell_settings(Some(json!({"tools": {"shell__run": "confirm"}}))),
    );
    let agent = agent_with(&session, services, exec.dispatcher.clone()).await;
    script_shell(
        &llm,
        "record one run",
        json!({"program": probe.display().to_string(), "args": ["once"]}),
    );
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("[success]"), "{text}");
        ScriptedReply::Text(common::third("FINISH", json!(null), "recorded").to_string())
    });
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "done", "comment": "done"}),
    ));
    let http = ufo_testkit::http_client();
    let url = submit(&agent, &http, "record one run").await;

    let waiting = eventually(60, "the held shell command", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "waiting" && t["held_action"].is_object()).then_some(t)
    })
    .await;
    assert_eq!(waiting["held_action"]["function"], "shell__run");
    assert!(!runs.exists(), "nothing runs while held");
    let answer = call(
        &http,
        reqwest::Method::POST,
        format!("{url}/confirmation"),
        Some(json!({"approve": true, "reason": "fine", "action_id": waiting["held_action"]["id"]})),
    )
    .await;
    assert!(answer.get("code").is_none(), "approved: {answer}");
    let done = ended(&http, &url).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "once\n",
        "ran exactly once"
    );
    let id = done["id"].as_str().unwrap();
    let ran: Vec<_> = session
        .steps(id)
        .await
        .into_iter()
        .flat_map(|s| s.actions)
        .filter(|a| a.function == "shell__run")
        .collect();
    assert_eq!(ran.len(), 1, "one recorded shell__run");
    let held = session
        .events(id)
        .await
        .iter()
        .filter(|e| e.kind == EventKind::ActionHeld as i32)
        .count();
    assert_eq!(held, 1);
    agent.stop().await;
    exec.stop().await;
    session.stop().await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_on_a_program_refuses_the_shell_command_and_the_model_is_told() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().canonicalize().unwrap();
    let victim = work.join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    // The executor would run rm: only the policy stands in the way.
    let exec = common::ShellExecutor::start(&work, "rm,cat").await;
    let services = common::services(
        &llm,
        common::shell_settings(Some(json!({"rules": [{
            "tool": "shell__run", "argument": "program", "pattern": "^rm$",
            "verdict": "deny", "reason": "nothing is deleted here"}]}))),
    );
    let agent = agent_with(&session, services, exec.dispatcher.clone()).await;
    script_shell(
        &llm,
        "delete victim.txt",
        json!({"program": "rm", "args": ["victim.txt"]}),
    );
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("[denied:"), "{text}");
        assert!(text.contains("nothing is deleted here"), "{text}");
        ScriptedReply::Text(
            common::third("FAIL", json!(null), "deleting is not allowed").to_string(),
        )
    });
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "could not delete: not allowed", "comment": "denied"}),
    ));
    let http = ufo_testkit::http_client();
    let url = submit(&agent, &http, "delete victim.txt").await;
    let done = ended(&http, &url).await;
    assert_eq!(llm.requests().len(), 4, "the model saw the denial: {done}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "keep me",
        "nothing ran"
    );
    let id = done["id"].as_str().unwrap();
    let denied: Vec<_> = session
        .steps(id)
        .await
        .into_iter()
        .flat_map(|s| s.actions)
        .filter(|a| a.function == "shell__run")
        .collect();
    assert_eq!(denied.len(), 1);
    let result = denied[0].result.as_ref().unwrap();
    assert!(
        result.error.contains("nothing is deleted here"),
        "{result:?}"
    );
    agent.stop().await;
    exec.stop().await;
    session.stop().await;
}
