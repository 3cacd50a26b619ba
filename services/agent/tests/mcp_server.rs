//! ufo as an MCP server, driven by the official Python MCP SDK (PyPI `mcp`, `tests/mcp/client.py`) over
//! both transports: streamable HTTP at the agent's `/mcp` and `ufo mcp` (stdio, talking to the agent's
//! REST and gRPC APIs). The agent is the real service in-process (`ufo_agent::run`: REST + gRPC + runner)
//! on the real session service (fresh Postgres database), with the agents running on the scripted
//! OpenAI-compatible model and the desktop double.
//!
//! Each transport: the tools are listed; `run_task` sends a progress notification per step, asks the
//! pending question and the held action through elicitation and returns the outcome with the final
//! screenshot; a client without elicitation gets "waiting for you" with the question id, answers through
//! `answer_task` and follows with `follow_task`; a task is cancelled with `cancel_task`; another caller's
//! key sees none of it ("not found"); malformed calls (10 MB arguments, NUL, deep JSON, an executor
//! address, every tool with bad arguments) are clear errors and nothing panics. HTTP only: no key → 401,
//! a foreign `Origin` or `Host` → 403, an oversized body → 413.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::api_support;
use crate::api_support::{Agent, KEY, Session, agent_config};
use crate::common;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use ufo_agent::agents::AgentSettings;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::ScriptedLlm;

/// The second caller's key.
const OTHER_KEY: &str = "other-key";

struct Rig {
    session: Session,
    llm: ScriptedLlm,
    agent: Agent,
    dir: tempfile::TempDir,
}

impl Rig {
    async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// With more agent flags (e.g. `--executors`).
    async fn start_with(extra: &[&str]) -> Self {
        let session = Session::start().await;
        let llm = ScriptedLlm::start().await.unwrap();
        let services = common::services(&llm, AgentSettings::default());
        let desktop = Arc::new(common::desktop());
        let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
            Arc::new(move |_| Ok(services.clone())),
            Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
        ));
        let agent = Agent::start(
            agent_config(
                &session.url,
                &[
                    &[
                        // Tasks act on an in-process desktop: no executor to reset between them.
                        "--no-desktop-reset",
                        "--lease-ms",
                        "5000",
                        "--claim-interval-ms",
                        "50",
                        "--api-keys",
                        &format!("other:{OTHER_KEY}"),
                    ],
                    extra,
                ]
                .concat(),
            ),
            Some(driver),
        )
        .await;
        Self {
            session,
            llm,
            agent,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn http(&self, key: Option<&str>) -> Value {
        json!({"transport": "http", "url": format!("{}/mcp", self.agent.http), "key": key})
    }

    fn stdio_log(&self) -> PathBuf {
        self.dir.path().join("ufo-mcp.stderr")
    }

    fn stdio(&self, key: &str) -> Value {
        let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
        json!({"transport": "stdio", "command": ufo, "args": ["mcp"],
               "env": {"UFO_SERVER": self.agent.http, "UFO_GRPC": self.agent.grpc, "UFO_TOKEN": key},
               "stderr": self.stdio_log()})
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
    }
}

/// Runs `tests/mcp/client.py` with `setup` (the transport) extended by `scenario`; its JSON report.
async fn python(setup: &Value, scenario: Value) -> Value {
    let mut setup = setup.clone();
    setup
        .as_object_mut()
        .unwrap()
        .extend(scenario.as_object().unwrap().clone());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let mut child = tokio::process::Command::new("python3")
        .args([script, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with the `mcp` package (python3 -m pip install mcp)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(setup.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the MCP client finished within 2 minutes")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client.py failed: {}\n{stderr}",
        output.status
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "client.py printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn code_of(result: &Value) -> &str {
    result["structured"]["code"].as_str().unwrap_or_default()
}

/// Everything both transports must do, as the caller `setup(KEY)`, with `setup(OTHER_KEY)` as another
/// caller.
async fn task_tools(rig: &Rig, setup: impl Fn(&str) -> Value) {
    let mine = setup(KEY);

    // The tools.
    let listed = python(&mine, json!({"scenario": "list"})).await;
    let tools: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tool in [
        "answer_task",
        "cancel_task",
        "decide_action",
        "follow_task",
        "get_task",
        "list_tasks",
        "replay_task",
        "run_task",
        "task_screenshot",
    ] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }

    // run_task: a question and a held action, both asked through elicitation.
    let llm = &rig.llm;
    let before = llm.requests().len();
    llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Which file?"]}),
    ));
    llm.push_json(&common::assign("0", "copy the note"));
    llm.push_fn(common::by_name(|id| {
        common::app(
            "CONFIRM",
            json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
            "",
        )
    }));
    llm.push_json(&common::app("FINISH", json!(null), "copied"));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "copied report.txt", "comment": "done"}),
    ));
    let ran = python(
        &mine,
        json!({"scenario": "run_elicit", "answers": ["report.txt"],
               "arguments": {"request": "copy the note from the report", "max_steps": 20}}),
    )
    .await;
    let run = &ran["run"];
    assert_eq!(run["is_error"], false, "{ran}");
    assert_eq!(run["structured"]["status"], "finished", "{ran}");
    assert_eq!(run["structured"]["result"], "copied report.txt", "{ran}");
    assert_eq!(
        run["images"],
        json!(["image/png"]),
        "the final screenshot: {ran}"
    );
    let steps = run["structured"]["steps"].as_u64().unwrap();
    assert_eq!(
        steps, 6,
        "ask, assign, hold, run the held click, finish the subtask, finish: {ran}"
    );
    let progress = ran["progress"].as_array().unwrap();
    assert!(
        progress.len() as u64 >= steps,
        "a progress notification per step: {ran}"
    );
    for n in 1..=steps {
        assert!(
            progress.iter().any(|p| p["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with(&format!("step {n} · "))),
            "no progress for step {n}: {ran}"
        );
    }
    assert!(
        progress.iter().any(|p| {
            let m = p["message"].as_str().unwrap_or_default();
            m.contains("AppAgent/notes") && m.contains("click_input")
        }),
        "progress names the agent and the action: {ran}"
    );
    let asked = ran["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "the question, then the held action: {ran}");
    assert!(
        asked[0]["message"]
            .as_str()
            .unwrap()
            .contains("Which file?"),
        "{ran}"
    );
    assert!(
        asked[1]["message"]
            .as_str()
            .unwrap()
            .contains("click_input"),
        "{ran}"
    );
    let requests = llm.requests();
    assert_eq!(
        requests.len() - before,
        5,
        "one model call per decided step"
    );
    assert!(
        requests[before + 1].text().contains("report.txt"),
        "the elicited answer reaches the next prompt"
    );
    let task_id = run["structured"]["task_id"].as_str().unwrap().to_owned();
    let events = rig.session.events(&task_id).await;
    let approvals: Vec<_> = events
        .iter()
        .filter(|e| e.kind == ufo_proto::v1::EventKind::ActionApproved as i32)
        .collect();
    assert_eq!(approvals.len(), 1, "one decision, bound to the held action");
    let payload = ufo_proto::json::from_optional_struct(approvals[0].payload.clone());
    assert_eq!(payload["reason"], "fine by the test");

    // A client without elicitation: "waiting for you" with the id, answer_task, follow_task.
    llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Which file?"]}),
    ));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "opened notes.txt", "comment": "done"}),
    ));
    let waited = python(
        &mine,
        json!({"scenario": "run_without_elicitation", "answers": ["notes.txt"],
               "arguments": {"request": "open the notes"}}),
    )
    .await;
    let waiting = &waited["waiting"];
    assert_eq!(waiting["structured"]["status"], "waiting", "{waited}");
    assert_eq!(
        waiting["structured"]["pending_questions"][0]["question"], "Which file?",
        "{waited}"
    );
    assert!(
        waiting["texts"][0]
            .as_str()
            .unwrap()
            .contains("waiting for you"),
        "{waited}"
    );
    assert_eq!(waited["answered"]["is_error"], false, "{waited}");
    assert_eq!(
        waited["followed"]["structured"]["status"], "finished",
        "{waited}"
    );
    assert_eq!(
        waited["followed"]["structured"]["result"],
        "opened notes.txt"
    );
    assert!(
        waited["progress"].as_array().unwrap().len() >= 2,
        "{waited}"
    );

    // cancel_task.
    llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Shall I delete everything?"]}),
    ));
    let cancelled = python(
        &mine,
        json!({"scenario": "cancel", "arguments": {"request": "tidy up"}}),
    )
    .await;
    assert_eq!(
        cancelled["waiting"]["structured"]["status"], "waiting",
        "{cancelled}"
    );
    assert_eq!(cancelled["cancelled"]["is_error"], false, "{cancelled}");
    assert_eq!(
        cancelled["followed"]["structured"]["status"], "cancelled",
        "{cancelled}"
    );
    assert_eq!(
        cancelled["followed"]["is_error"], true,
        "an unfinished task is an error result"
    );
    assert_eq!(
        cancelled["got"]["structured"]["status"], "cancelled",
        "{cancelled}"
    );
    let cancelled_id = cancelled["waiting"]["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed = &cancelled["listed"]["structured"]["tasks"];
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == cancelled_id.as_str()),
        "{cancelled}"
    );

    // Another caller: none of these tasks exist for it.
    let other = python(
        &setup(OTHER_KEY),
        json!({"scenario": "calls", "calls": [
            ["get_task", {"task_id": task_id}],
            ["answer_task", {"task_id": task_id, "question_ids": ["q"], "answers": ["x"]}],
            ["decide_action", {"task_id": task_id, "action_id": "h3", "approve": true}],
            ["cancel_task", {"task_id": cancelled_id}],
            ["follow_task", {"task_id": task_id}],
            ["task_screenshot", {"task_id": task_id, "step": 1, "kind": "desktop"}],
            ["list_tasks", {}],
        ]}),
    )
    .await;
    let results = other["results"].as_array().unwrap();
    for result in &results[..6] {
        assert_eq!(result["is_error"], true, "{other}");
        assert_eq!(code_of(result), "not_found", "{other}");
        assert!(
            result["texts"][0].as_str().unwrap().contains("not found"),
            "{other}"
        );
    }
    assert_eq!(results[6]["structured"]["tasks"], json!([]), "{other}");

    // My own screenshot of the first task's first step.
    let shot = python(
        &mine,
        json!({"scenario": "calls", "calls": [["task_screenshot", {"task_id": task_id, "step": 1}]]}),
    )
    .await;
    assert_eq!(shot["results"][0]["images"], json!(["image/png"]), "{shot}");
}

/// Malformed calls: clear tool errors (or a protocol error), never an internal one. The first is 10 MB of
/// arguments (over HTTP a 10 MB body is refused with 413 before MCP, so `huge` is false there and the raw
/// test below sends it).
async fn malformed(setup: &Value, huge: bool) -> Value {
    let deep = (0..100).fold(json!("x"), |v, _| json!([v]));
    let first = if huge {
        json!(["run_task", {"request": "a".repeat(10 * 1024 * 1024)}])
    } else {
        json!(["run_task", {"request": "a", "max_steps": "ten"}])
    };
    let mut calls = vec![
        first,
        json!(["run_task", {"request": "open\u{0}notes"}]),
        json!(["run_task", {"request": deep}]),
        json!(["run_task", {"request": "x", "executor": "http://169.254.169.254:50051"}]),
    ];
    // Every tool with bad arguments.
    let nul_id = "0195f8a0-0000-7000-8000-00000000000\u{0}";
    for tool in [
        "run_task",
        "follow_task",
        "replay_task",
        "answer_task",
        "decide_action",
        "get_task",
        "list_tasks",
        "cancel_task",
        "task_screenshot",
        "list_windows",
        "list_controls",
        "screenshot",
        "click",
        "type_text",
        "press_keys",
        "scroll",
        "launch_app",
        "end_direct_session",
    ] {
        for arguments in [
            json!({}),
            json!({"task_id": 7, "request": 7}),
            json!({"task_id": "not-a-uuid", "request": ""}),
            json!({"task_id": nul_id, "step": 0, "question_ids": [], "answers": [],
                   "action_id": "", "approve": true}),
            json!({"surprise": true}),
            json!({"task_id": "0195f8a0-0000-7000-8000-000000000000", "step": -1,
                   "page_size": 0, "status": "sideways", "kind": "thermal"}),
        ] {
            // list_tasks takes no required argument: `{}` is a valid call.
            if tool != "list_tasks" || arguments != json!({}) {
                calls.push(json!([tool, arguments]));
            }
        }
    }
    python(setup, json!({"scenario": "calls", "calls": calls})).await
}

/// What [`malformed`] sent is refused in the caller's words: a NUL and a too-deep argument are
/// `invalid_argument`, a task id that is no address says so, and nothing is an internal error.
fn assert_malformed_refused(report: &Value) {
    let results = report["results"].as_array().unwrap();
    assert_eq!(
        code_of(&results[1]),
        "invalid_argument",
        "NUL: {}",
        results[1]
    );
    assert_eq!(
        code_of(&results[2]),
        "invalid_argument",
        "deep: {}",
        results[2]
    );
    assert!(
        results[3]["texts"][0]
            .as_str()
            .unwrap()
            .contains("not an address"),
        "{}",
        results[3]
    );
    assert_no_internal_errors(report);
}

fn assert_no_internal_errors(report: &Value) {
    for (i, result) in report["results"].as_array().unwrap().iter().enumerate() {
        if result.get("exception").is_some() {
            continue;
        }
        assert_eq!(result["is_error"], true, "call {i} should fail: {result}");
        let code = code_of(result);
        assert!(
            !code.is_empty() && code != "internal" && code != "unavailable",
            "call {i}: {result}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_transport_runs_answers_and_cancels_tasks_for_its_caller_only() {
    let rig = Rig::start().await;
    task_tools(&rig, |key| rig.http(Some(key))).await;

    let report = malformed(&rig.http(Some(KEY)), false).await;
    let results = report["results"].as_array().unwrap();
    assert!(
        results[1]["texts"][0].as_str().unwrap().contains("NUL"),
        "{}",
        results[1]
    );
    assert_malformed_refused(&report);

    // Raw HTTP: no key, a foreign Origin, a foreign Host, very deep JSON.
    let http = ufo_testkit::http_client();
    let url = format!("{}/mcp", rig.agent.http);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let post = |body: String| {
        http.post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };
    let refused = post(initialize.to_string()).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "unauthenticated");
    // The SDK reports an HTTP refusal as an error response (the statuses are checked raw, above and below).
    let refused = python(&rig.http(None), json!({"scenario": "connect"})).await;
    assert!(
        refused["exception"].is_string() && refused.get("tools").is_none(),
        "{refused}"
    );
    let wrong = python(&rig.http(Some("not-a-key")), json!({"scenario": "connect"})).await;
    assert!(
        wrong["exception"].is_string() && wrong.get("tools").is_none(),
        "{wrong}"
    );

    let foreign = post(initialize.to_string())
        .bearer_auth(KEY)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let body: Value = foreign.json().await.unwrap();
    assert_eq!(body["code"], "permission_denied");
    assert!(
        body["message"].as_str().unwrap().contains("evil.example"),
        "{body}"
    );
    let mut browser = rig.http(Some(KEY));
    browser["headers"] = json!({"Origin": "http://evil.example"});
    let refused = python(&browser, json!({"scenario": "connect"})).await;
    assert!(
        refused["exception"].is_string() && refused.get("tools").is_none(),
        "{refused}"
    );
    let rebound = post(initialize.to_string())
        .bearer_auth(KEY)
        .header("host", "evil.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let local = post(initialize.to_string())
        .bearer_auth(KEY)
        .header("origin", "http://localhost:6274")
        .send()
        .await
        .unwrap();
    assert_eq!(
        local.status(),
        200,
        "a loopback page (e.g. the MCP Inspector) may connect"
    );

    let depth = 100_000;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"get_task","arguments":{{"task_id":{}1{}}}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let deep = post(deep).bearer_auth(KEY).send().await.unwrap();
    assert!(
        deep.status().is_client_error(),
        "very deep JSON is a client error: {}",
        deep.status()
    );
    // 10 MB of arguments: refused by the body limit before any tool runs — and before any of the body is
    // read: the request announces 10 MB and sends none of it; the 413 comes back at once, in the REST
    // words. (A client that writes all 10 MB first may see the connection closed under it after the 413.)
    let big = {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n",
            10 * 1024 * 1024
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut chunk = vec![0; 4096];
        while !String::from_utf8_lossy(&answer).contains("payload_too_large") {
            let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
                .await
                .expect("the server answers without waiting for the body")
                .unwrap();
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&answer).into_owned()
    };
    assert!(big.starts_with("HTTP/1.1 413"), "{big}");
    assert!(big.contains("--mcp-endpoint-max-body-bytes"), "{big}");

    // Still serving.
    let health = http
        .get(format!("{}/healthz", rig.agent.http))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stdio_transport_runs_answers_and_cancels_tasks_for_its_caller_only() {
    let rig = Rig::start().await;
    task_tools(&rig, |key| rig.stdio(key)).await;

    let report = malformed(&rig.stdio(KEY), true).await;
    let results = report["results"].as_array().unwrap();
    assert_eq!(
        code_of(&results[0]),
        "invalid_argument",
        "10 MB: {}",
        results[0]
    );
    assert!(
        results[0]["texts"][0]
            .as_str()
            .unwrap()
            .contains("at most 1048576"),
        "{}",
        results[0]
    );
    assert_malformed_refused(&report);

    // A wrong token: every tool says so in the REST words.
    let wrong = python(
        &rig.stdio("not-a-key"),
        json!({"scenario": "calls", "calls": [["list_tasks", {}]]}),
    )
    .await;
    assert_eq!(code_of(&wrong["results"][0]), "unauthenticated", "{wrong}");

    let log = std::fs::read_to_string(rig.stdio_log()).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
    rig.stop().await;
}

/// The executor tool each desktop call of the mousepad scenario runs first (a window selection first
/// where the MCP tool takes a window).
fn first_command(tool: &str, arguments_window: bool) -> &'static str {
    match tool {
        "list_windows" => "get_desktop_app_target_info",
        "list_controls" | "screenshot" if arguments_window => "select_application_window",
        "list_controls" => "get_app_window_controls_target_info",
        "screenshot" => "capture_desktop_screenshot",
        "launch_app" => "launch_application",
        "press_keys" => "keyboard_input",
        "type_text" => "set_edit_text",
        other => panic!("unexpected call {other}"),
    }
}

/// The direct session `id` of the caller `KEY` as a person audits it: a DIRECT task, finished, with
/// one step per call of `calls` (in order, each with a desktop or window screenshot that the REST API
/// serves, the marked one with its annotated image), an intent recorded before every call that acts,
/// never claimed by the runner that polls the queue meanwhile, shown by `ufo show --steps`; another
/// caller gets "not found".
async fn audit_direct_session(rig: &Rig, id: &str, calls: &[Value]) {
    let api = api_support::Api::new(&rig.agent);
    let task = api.task(id).await;
    assert_eq!(task["kind"], "direct", "{task}");
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["totals"]["steps"], calls.len(), "{task}");
    let steps = api.steps(id).await;
    assert_eq!(steps.len(), calls.len(), "{steps:?}");
    for (i, (step, call)) in steps.iter().zip(calls).enumerate() {
        let tool = call["tool"].as_str().unwrap();
        assert_eq!(step["step"], i + 1);
        assert_eq!(call["step"], i + 1, "{call}");
        assert!(
            step["agent_name"]
                .as_str()
                .unwrap()
                .starts_with("McpClient/"),
            "{step}"
        );
        let windowed = call["windowed"].as_bool().unwrap_or(false);
        assert_eq!(
            step["actions"][0]["function"],
            first_command(tool, windowed),
            "step {}: {step}",
            i + 1
        );
        let kinds: Vec<&str> = step["screenshots"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let kind = if kinds.contains(&"desktop") {
            "desktop"
        } else {
            "clean"
        };
        assert!(
            kinds.contains(&kind),
            "step {} has no screenshot: {step}",
            i + 1
        );
        let shot = api
            .http
            .get(format!(
                "{}/v1/tasks/{id}/steps/{}/screenshot?kind={kind}",
                api.base,
                i + 1
            ))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(shot.status(), 200, "step {} {kind}", i + 1);
        let bytes = shot.bytes().await.unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "step {} {kind}", i + 1);
        if call["marks"] == true {
            assert!(kinds.contains(&"annotated"), "{step}");
            let (status, _) = api
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/tasks/{id}/steps/{}/screenshot?kind=annotated", i + 1),
                    None,
                )
                .await;
            assert_eq!(status, 200, "the marked screenshot");
        }
    }
    // Intent before action: each acting call's STEP_STARTED intent comes before its step.
    let events = rig.session.events(id).await;
    let kind = |e: &ufo_proto::v1::Event| ufo_proto::v1::EventKind::try_from(e.kind).unwrap();
    assert!(
        !events
            .iter()
            .any(|e| kind(e) == ufo_proto::v1::EventKind::TaskClaimed),
        "a runner claimed a direct session"
    );
    for (i, call) in calls.iter().enumerate() {
        let n = (i + 1) as u64;
        let acts =
            ["launch_app", "press_keys", "type_text"].contains(&call["tool"].as_str().unwrap());
        let intent = events.iter().position(|e| {
            kind(e) == ufo_proto::v1::EventKind::StepStarted
                && e.step == n
                && ufo_proto::json::from_optional_struct(e.payload.clone())["intent"] == true
        });
        let finished = events
            .iter()
            .position(|e| kind(e) == ufo_proto::v1::EventKind::StepFinished && e.step == n)
            .unwrap_or_else(|| panic!("step {n} never finished"));
        match intent {
            Some(at) => assert!(acts && at < finished, "step {n}: {call}"),
            None => assert!(!acts, "step {n} acted without an intent: {call}"),
        }
    }
    // Another caller: not found.
    let other = api
        .http
        .get(format!("{}/v1/tasks/{id}", api.base))
        .bearer_auth(OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let body: Value = other.json().await.unwrap();
    assert_eq!(body["code"], "not_found", "{body}");
    // `ufo show --steps`: the session and a line per step.
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    let shown = tokio::process::Command::new(ufo)
        .args(["show", id, "--steps"])
        .env("UFO_SERVER", &rig.agent.http)
        .env("UFO_GRPC", &rig.agent.grpc)
        .env("UFO_TOKEN", KEY)
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("McpClient/")).count(),
        calls.len(),
        "{out}"
    );
    assert!(out.contains("launch_application"), "{out}");
    assert!(out.contains("kind     direct"), "{out}");
}

/// The desktop tools over both transports (HTTP at the agent's `/mcp`, and `ufo mcp` over stdio, which
/// reaches them through the agent's REST API) on a real Linux executor of the registry, named `desk`,
/// started headless (its own Xvfb) with mousepad on its launch allow-list: `launch_app` starts
/// mousepad, its window is listed, text typed, a plain and a set-of-marks screenshot returned as images,
/// and the text saved through GTK's Save As chooser by typing the path into its Name field and pressing
/// Enter — the file holds the text. Every call is a step of the caller's direct session with its
/// screenshot ([`audit_direct_session`]); `end_direct_session` ends it; a session left alone ends after
/// `--mcp-direct-idle-seconds`. Refused with clear tool errors: an executor address or an unregistered
/// name instead of a registered name, NUL, over-long text, unknown fields, a program outside the
/// executor's launch allow-list, marks without a window; none is an internal error.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn desktop_tools_launch_type_and_save_in_mousepad_as_a_recorded_direct_session() {
    use clap::Parser as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor",
        "--token",
        "tok",
        "--allow-app",
        "mousepad",
        "--desktop",
        "headless",
        "--desktop-size",
        "1280x900",
    ])
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run(config, listener, stop.clone()));
    let url = format!("http://{addr}");
    ufo_testkit::poll_until(
        "the headless executor serving",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || ufo_testkit::grpc_serving(&url),
    )
    .await
    .unwrap();
    let registered = format!("desk=http://{addr}");
    let rig = Rig::start_with(&[
        "--executors",
        &registered,
        "--executor-token",
        "tok",
        "--mcp-direct-idle-seconds",
        "4",
    ])
    .await;

    let listed = python(&rig.http(Some(KEY)), json!({"scenario": "list"})).await;
    let stdio_listed = python(&rig.stdio(KEY), json!({"scenario": "list"})).await;
    for tool in [
        "list_windows",
        "list_controls",
        "screenshot",
        "click",
        "type_text",
        "press_keys",
        "scroll",
        "launch_app",
        "end_direct_session",
    ] {
        for l in [&listed, &stdio_listed] {
            assert!(
                l["tools"].as_array().unwrap().contains(&json!(tool)),
                "{tool}: {l}"
            );
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let mut sessions = Vec::new();
    for (transport, setup) in [("http", rig.http(Some(KEY))), ("stdio", rig.stdio(KEY))] {
        let path = dir.path().join(format!("typed-through-{transport}.txt"));
        let text = format!("typed through MCP over {transport}");
        let report = python(
            &setup,
            json!({"scenario": "mousepad", "executor": "desk", "text": text, "path": path}),
        )
        .await;
        assert!(
            report["window_seen"].as_bool().unwrap(),
            "{transport}: {report}"
        );
        for call in [
            "launched",
            "windows",
            "controls",
            "typed",
            "window_shot",
            "marked_shot",
            "save_as",
            "path_typed",
            "entered",
            "desktop_shot",
            "ended",
        ] {
            assert_eq!(
                report[call]["is_error"], false,
                "{transport} {call}: {}",
                report[call]
            );
        }
        assert!(report["chooser_seen"].as_bool().unwrap(), "{report}");
        assert!(
            report["controls"]["structured"]["result"]
                .as_array()
                .unwrap()
                .len()
                > 3,
            "{}",
            report["controls"]
        );
        for shot in ["window_shot", "marked_shot", "desktop_shot"] {
            assert_eq!(
                report[shot]["images"],
                json!(["image/png"]),
                "{transport} {shot}: {}",
                report[shot]
            );
        }
        // Set-of-marks: the controls marked, by the ids click and type_text take.
        let marked = report["marked_shot"]["structured"]["result"]
            .as_array()
            .unwrap();
        assert!(marked.len() > 3, "{}", report["marked_shot"]);
        assert!(marked.iter().all(|c| c["id"].is_string()), "{marked:?}");
        // Saved: the file holds the text (observed until written, bounded).
        let end = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            if std::fs::read_to_string(&path).is_ok_and(|t| t.trim_end() == text) {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "{} was never saved: {report}",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // One session for every call, a step per call, ended by the tool.
        let mut calls = report["calls"].as_array().unwrap().clone();
        let id = calls[0]["session_id"].as_str().unwrap().to_owned();
        assert!(
            calls.iter().all(|c| c["session_id"] == id.as_str()),
            "{calls:?}"
        );
        assert_eq!(
            report["ended"]["structured"],
            json!({"session_id": id, "steps": calls.len()}),
            "{transport}"
        );
        // The scenario's calls with a window and with marks, in its order.
        for c in &mut calls {
            let step = c["step"].as_u64().unwrap();
            c["windowed"] = json!(false);
            c["marks"] = json!(false);
            let _ = step;
        }
        for name in ["controls", "window_shot", "marked_shot"] {
            let step = report[name]["structured"]["step"].as_u64().unwrap();
            calls[(step - 1) as usize]["windowed"] = json!(true);
            if name == "marked_shot" {
                calls[(step - 1) as usize]["marks"] = json!(true);
            }
        }
        audit_direct_session(&rig, &id, &calls).await;
        assert!(!sessions.contains(&id), "a new session per end");
        sessions.push(id);
    }

    let refused = python(
        &rig.http(Some(KEY)),
        json!({"scenario": "calls", "calls": [
            ["list_windows", {"executor": format!("http://{addr}")}],
            ["list_windows", {"executor": addr.to_string()}],
            ["list_windows", {"executor": "nosuch"}],
            ["press_keys", {"executor": "desk", "keys": "a\u{0}b"}],
            ["type_text", {"executor": "desk", "control": "1", "text": "x".repeat(20_000)}],
            ["click", {"executor": "desk", "control": "1", "surprise": true}],
            ["screenshot", {"executor": "desk", "marks": true}],
            ["end_direct_session", {"executor": "nosuch"}],
            ["launch_app", {"executor": "desk", "name": "xterm"}],
            ["scroll", {"executor": "desk", "control": "1", "distance": 1000}],
            ["screenshot", {"executor": 7}],
        ]}),
    )
    .await;
    let results = refused["results"].as_array().unwrap();
    for (i, want) in [
        "not an address",
        "not an address",
        "not a registered executor name",
        "NUL",
        "at most",
        "unknown field",
        "marks needs a window",
        "not a registered executor name",
        "xterm",
        "between -100 and 100",
        "invalid type",
    ]
    .into_iter()
    .enumerate()
    {
        let text = results[i]["texts"][0].as_str().unwrap_or_default();
        assert!(
            text.contains(want),
            "call {i} should say {want:?}: {}",
            results[i]
        );
    }
    for (i, r) in results.iter().enumerate().take(8) {
        assert_eq!(code_of(r), "invalid_argument", "call {i}: {r}");
    }
    assert_no_internal_errors(&refused);

    // The refused launch reached the executor: it is the one step of a new direct session, which
    // nobody ends, so the idle timeout does (4 s here).
    let api = api_support::Api::new(&rig.agent);
    let direct: Vec<Value> = api
        .list()
        .await
        .into_iter()
        .filter(|t| {
            t["kind"] == "direct" && !sessions.contains(&t["id"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(direct.len(), 1, "{direct:?}");
    let id = direct[0]["id"].as_str().unwrap();
    let ended = api.wait_status(id, "finished").await;
    assert!(
        ended["result"]
            .as_str()
            .unwrap()
            .contains("without a desktop call"),
        "{ended}"
    );
    let steps = api.steps(id).await;
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0]["actions"][0]["function"], "launch_application");
    assert_eq!(steps[0]["state_after"], "FAIL", "{}", steps[0]);

    let log = std::fs::read_to_string(rig.stdio_log()).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
    rig.stop().await;
    stop.cancel();
    let _ = server.await;
}

/// Runs the MCP Inspector's command-line mode (npm `@modelcontextprotocol/inspector`, installed by
/// `.ci/run`) with `args` and `--method tools/list`: the listed tool names.
async fn inspector_tools(catalog: &std::path::Path, args: &[String]) -> Vec<String> {
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("mcp-inspector")
            .arg("--cli")
            .args(args)
            .args(["--method", "tools/list"])
            .env("MCP_CATALOG_PATH", catalog)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Inspector answered within 2 minutes")
    .expect("mcp-inspector (npm install -g @modelcontextprotocol/inspector)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The MCP Inspector's CLI mode lists the tools of both transports: `/mcp` with the caller's key (task and
/// desktop tools) and `ufo mcp` started as a command (the task tools).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inspector_cli_lists_the_tools_of_both_transports() {
    let rig = Rig::start().await;
    let catalog = rig.dir.path().join("inspector-catalog.json");
    let http = inspector_tools(
        &catalog,
        &[
            format!("{}/mcp", rig.agent.http),
            "--transport".into(),
            "http".into(),
            "--header".into(),
            format!("Authorization: Bearer {KEY}"),
        ],
    )
    .await;
    for tool in ["run_task", "task_screenshot", "list_windows", "launch_app"] {
        assert!(http.iter().any(|t| t == tool), "{tool}: {http:?}");
    }
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    let stdio = inspector_tools(
        &catalog,
        &[
            "-e".into(),
            format!("UFO_SERVER={}", rig.agent.http),
            "-e".into(),
            format!("UFO_GRPC={}", rig.agent.grpc),
            "-e".into(),
            format!("UFO_TOKEN={KEY}"),
            ufo.display().to_string(),
            "mcp".into(),
        ],
    )
    .await;
    for tool in [
        "run_task",
        "answer_task",
        "task_screenshot",
        "list_windows",
        "end_direct_session",
    ] {
        assert!(stdio.iter().any(|t| t == tool), "{tool}: {stdio:?}");
    }
    rig.stop().await;
}

/// A raw MCP session over streamable HTTP (the Python SDK has no tasks extension): JSON-RPC requests
/// with the session id, each response read from the request's JSON or SSE answer.
struct RawMcp {
    http: reqwest::Client,
    url: String,
    key: String,
    session: String,
    next_id: std::sync::atomic::AtomicU64,
}

impl RawMcp {
    /// `initialize` (protocol 2025-11-25) with `capabilities`, then `notifications/initialized`.
    async fn open(url: &str, key: &str, capabilities: Value) -> Self {
        let mut raw = Self {
            http: ufo_testkit::http_client(),
            url: url.to_owned(),
            key: key.to_owned(),
            session: String::new(),
            next_id: std::sync::atomic::AtomicU64::new(1),
        };
        let (init, session) = raw
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "raw-tasks", "version": "0"}}}),
            )
            .await;
        assert!(init["result"]["capabilities"].is_object(), "{init}");
        raw.session = session.expect("a session id");
        raw.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        raw
    }

    /// Posts one message; the response with the message's id (Null for a notification) and the session
    /// id header.
    async fn post(&self, body: Value) -> (Value, Option<String>) {
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if !self.session.is_empty() {
            request = request
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let mut response = request.json(&body).send().await.unwrap();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let status = response.status();
        assert!(status.is_success(), "{status} for {body}");
        let Some(id) = body.get("id").cloned() else {
            return (Value::Null, session);
        };
        // JSON, or an SSE stream whose `data:` lines carry the messages: read until the response.
        let mut text = String::new();
        while let Some(chunk) = response.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            let found = text
                .lines()
                .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|m| m.get("id") == Some(&id));
            if let Some(found) = found {
                return (found, session);
            }
        }
        panic!("no response to {body}: {text}");
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
            .0
    }

    /// `tasks/get` until `until` holds for the task; the last one.
    async fn poll(&self, id: &str, until: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.call("tasks/get", json!({"taskId": id})).await;
            let task = &got["result"];
            assert!(task.is_object(), "{got}");
            if until(task) {
                return task.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} never got there: {got}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `run_task` under the MCP tasks extension (SEP-2663, what rmcp 3.11 serves), raw JSON-RPC over `/mcp`:
/// a client that declares the extension gets a task handle at once whose id is the ufo task's; it polls
/// `tasks/get` to `completed` with `run_task`'s result; a question shows as `input_required` with its
/// form and is answered through `tasks/update`; a waiting task is cancelled through `tasks/cancel`.
/// Another caller gets "not found" (-32602) for all of it and changes nothing; a client that does not
/// declare the extension keeps the long call, and `tasks/get` is refused it (-32021).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tasks_extension_hands_run_task_over_as_a_task_to_poll_answer_and_cancel() {
    let rig = Rig::start().await;
    let url = format!("{}/mcp", rig.agent.http);
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mine = RawMcp::open(&url, KEY, tasks.clone()).await;
    let other = RawMcp::open(&url, OTHER_KEY, tasks).await;
    let plain = RawMcp::open(&url, KEY, json!({})).await;
    let api = api_support::Api {
        base: rig.agent.http.clone(),
        http: ufo_testkit::http_client(),
    };
    let not_found = |reply: &Value| {
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not_found"),
            "{reply}"
        );
    };
    let run = |request: &str| json!({"name": "run_task", "arguments": {"request": request, "max_steps": 10}});

    // To the end: the handle at once, polled to completed with run_task's own result.
    rig.llm.push_json(&common::host(
        "FINISH",
        json!({"result": "opened the report", "comment": "done"}),
    ));
    let created = mine.call("tools/call", run("open the report")).await;
    let handle = &created["result"];
    assert_eq!(handle["resultType"], "task", "{created}");
    assert_eq!(handle["status"], "working", "{created}");
    assert_eq!(handle["pollIntervalMs"], 1000);
    let id = handle["taskId"].as_str().unwrap().to_owned();
    assert_eq!(api.task(&id).await["id"], id.as_str(), "the ufo task");
    let done = mine
        .poll(&id, |t| {
            t["status"] != "working" && t["status"] != "input_required"
        })
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"]["status"], "finished");
    assert_eq!(
        done["result"]["structuredContent"]["result"],
        "opened the report"
    );
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("finished"),
        "{done}"
    );
    not_found(&other.call("tasks/get", json!({"taskId": id})).await);

    // A question: input_required with its form, answered through tasks/update (not by another caller).
    rig.llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Which file?"]}),
    ));
    rig.llm.push_json(&common::host(
        "FINISH",
        json!({"result": "opened report.txt", "comment": "done"}),
    ));
    let created = mine.call("tools/call", run("open a file")).await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let asking = mine.poll(&id, |t| t["status"] == "input_required").await;
    let requests = asking["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asking}");
    let (key, form) = requests.iter().next().unwrap();
    assert!(key.starts_with("answer:"), "{key}");
    assert_eq!(form["method"], "elicitation/create", "{form}");
    assert_eq!(
        form["params"]["requestedSchema"]["properties"]["answer1"]["title"],
        "Which file?"
    );
    let answer = |text: &str| json!({"taskId": id, "inputResponses": {key.clone(): {"action": "accept", "content": {"answer1": text}}}});
    not_found(&other.call("tasks/update", answer("evil.txt")).await);
    let acked = mine.call("tasks/update", answer("report.txt")).await;
    assert_eq!(acked["result"]["resultType"], "complete", "{acked}");
    let done = mine.poll(&id, |t| t["status"] == "completed").await;
    assert_eq!(
        done["result"]["structuredContent"]["result"],
        "opened report.txt"
    );
    let view = api.task(&id).await;
    assert_eq!(view["status"], "finished", "{view}");
    let prompts: Vec<String> = rig
        .llm
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        prompts.iter().any(|p| p.contains("report.txt")),
        "the answer reached the model"
    );
    assert!(
        !prompts.iter().any(|p| p.contains("evil.txt")),
        "another caller's answer was taken"
    );

    // Cancel: another caller cannot; the owner's tasks/cancel ends it.
    rig.llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Which printer?"]}),
    ));
    let created = mine.call("tools/call", run("print it")).await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    mine.poll(&id, |t| t["status"] == "input_required").await;
    not_found(&other.call("tasks/cancel", json!({"taskId": id})).await);
    assert_eq!(api.task(&id).await["status"], "waiting");
    let acked = mine.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(acked["result"]["resultType"], "complete", "{acked}");
    let cancelled = mine.poll(&id, |t| t["status"] == "cancelled").await;
    assert!(
        cancelled["statusMessage"]
            .as_str()
            .unwrap()
            .contains("tasks/cancel"),
        "{cancelled}"
    );
    assert_eq!(api.task(&id).await["status"], "cancelled");
    not_found(
        &mine
            .call(
                "tasks/get",
                json!({"taskId": uuid::Uuid::new_v4().to_string()}),
            )
            .await,
    );

    // A client without the extension keeps the long call; tasks/* are refused it.
    rig.llm.push_json(&common::host(
        "FINISH",
        json!({"result": "printed", "comment": "done"}),
    ));
    let called = plain.call("tools/call", run("print the page")).await;
    assert!(called["result"].get("taskId").is_none(), "{called}");
    assert_eq!(
        called["result"]["structuredContent"]["status"], "finished",
        "{called}"
    );
    let refused = plain.call("tasks/get", json!({"taskId": id})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    rig.stop().await;
}

/// A client of the current revision (2026-07-28: no session, each request carrying its version) gets a
/// call whose first message is its answer as one JSON body, not an SSE stream (one write, no priming
/// event, no stream to parse; `e2e-bench --mcp-click` times such a client too), and rmcp's own client, discovering
/// the revision, works with that end to end. A call that reports progress first (`run_task`) still
/// streams. Keys hold as for sessions: none → 401, another caller's task → "not found".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn current_revision_calls_are_answered_as_json_and_only_progress_streams() {
    use rmcp::model::{CallToolRequestParams, ProtocolVersion};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt as _};

    let rig = Rig::start().await;
    let url = format!("{}/mcp", rig.agent.http);
    let http = ufo_testkit::http_client();
    let post = |key: Option<&str>, id: u64, method: &str, name: &str, arguments: Value| {
        // Id 4 asks for progress.
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-current", "version": "0"}});
        if id == 4 {
            meta["progressToken"] = json!("p4");
        }
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.json(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {
            "name": name, "arguments": arguments, "_meta": meta}}),
        )
    };
    let content_type = |r: &reqwest::Response| {
        r.headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };

    let listed = post(Some(KEY), 1, "tools/call", "list_tasks", json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(
        content_type(&listed).starts_with("application/json"),
        "{listed:?}"
    );
    let body: Value = listed.json().await.unwrap();
    assert_eq!(body["id"], 1, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");

    // A tool error is an answer too: one JSON body with the REST wording.
    let missing = post(
        Some(KEY),
        2,
        "tools/call",
        "get_task",
        json!({"task_id": "00000000-0000-4000-8000-000000000000"}),
    )
    .send()
    .await
    .unwrap();
    assert!(content_type(&missing).starts_with("application/json"));
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["code"], "not_found",
        "{body}"
    );

    let refused = post(None, 3, "tools/call", "list_tasks", json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // rmcp's client of the current revision: the tools, a task run to its end over the stream.
    let client = ()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::with_client(
                ufo_testkit::http_client(),
                StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(KEY),
            ),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "run_task"), "{tools:?}");
    rig.llm.push_json(&common::host(
        "FINISH",
        json!({"result": "opened the report", "comment": "done"}),
    ));
    let mut run = CallToolRequestParams::new("run_task");
    run.arguments = json!({"request": "open the report", "max_steps": 10})
        .as_object()
        .cloned();
    let ran = client.call_tool(run).await.unwrap();
    assert_ne!(ran.is_error, Some(true), "{ran:?}");
    let outcome = ran.structured_content.unwrap();
    assert_eq!(outcome["status"], "finished", "{outcome}");
    let id = outcome["task_id"].as_str().unwrap().to_owned();

    // The same task's run, followed raw: progress comes first, so the answer streams.
    let followed = post(
        Some(KEY),
        4,
        "tools/call",
        "follow_task",
        json!({"task_id": id}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(followed.status(), 200);
    let kind = content_type(&followed);
    let text = followed.text().await.unwrap();
    assert!(kind.starts_with("text/event-stream"), "{kind}: {text}");
    assert!(text.contains("notifications/progress"), "{text}");
    assert!(text.contains("opened the report"), "{text}");
    // Another caller: "not found", as over REST.
    let theirs = post(
        Some(OTHER_KEY),
        5,
        "tools/call",
        "get_task",
        json!({"task_id": id}),
    )
    .send()
    .await
    .unwrap();
    let body: Value = theirs.json().await.unwrap();
    assert_eq!(
        body["result"]["structuredContent"]["code"], "not_found",
        "{body}"
    );
    client.cancel().await.ok();
    rig.stop().await;
}
