//! An agent SIGKILLed while one of its tasks waits on an MCP call (issue 34): the stdio server it started
//! dies with it (no orphan), and another agent takes the task over **by its intents** — the call in flight
//! is recorded once, from its intent, with the outcome unknown, the model is told so, and nothing runs
//! twice. Real session service on Postgres, real agent processes (child copies of this test binary),
//! a real stdio MCP server (`tests/mcp/fault_server.py`) as the third-party agent `fault`: beside the
//! agent, and on the desktop's side (`on: desktop`), started by a real headless executor, which kills
//! the dead agent's server once it is idle and starts the next agent's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api_support::{Agent, Api, Session, agent_config, eventually};
use crate::common;
use crate::common::{host, target_label, third};
use serde_json::json;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::mcp::{McpHub, McpLimits, McpServersFile};
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_proto::v1::EventKind;

/// The flags of both runner processes: a short lease, so the second takes the task over soon after the
/// first is killed.
const RUNNER_FLAGS: &[&str] = &[
    "--no-desktop-reset",
    "--lease-ms",
    "1500",
    "--claim-interval-ms",
    "50",
];

/// The executor's idle time for the desktop case: a dead agent's server is killed this long after its
/// last read.
const IDLE_MS: &str = "2000";

/// The third-party agent `fault`: the fault server in `mode`, its pid in `dir/pid-MODE`, its calls
/// appended to `dir/calls`; `on` the agent's side or the desktop's.
fn hub(mode: &str, dir: &Path, on: &str) -> Arc<McpHub> {
    let script = format!("{}/tests/mcp/fault_server.py", env!("CARGO_MANIFEST_DIR"));
    let pidfile = dir.join(format!("pid-{mode}"));
    let calls = dir.join("calls");
    let file = McpServersFile::parse(
        &json!({"servers": [{
            "name": "fault",
            "transport": {"type": "stdio", "command": "python3", "on": on,
                          "args": [script, mode, pidfile, calls]},
            "bind": {"type": "agent", "description": "Echoes a text"},
            "call_timeout_ms": 600_000
        }]})
        .to_string(),
        false,
    )
    .unwrap();
    Arc::new(McpHub::new(file, McpLimits::default()))
}

/// Not a test: the agent process of the tests below (a child copy of this binary, run with `--ignored`).
/// `block`: the HostAgent assigns the subtask to `fault`, whose model calls `echo`, which never answers.
/// `ok`: the model of whichever agent is asked next finishes; every prompt is written to `dir/prompts`.
/// With `UFO_TEST_CHILD_EXECUTOR` the desktop is that executor and the server runs on its side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of an_agent_killed_during_an_mcp_call_is_taken_over_by_its_intents"]
async fn mcp_runner_child() {
    let Ok(session_url) = std::env::var("UFO_TEST_CHILD_SESSION_URL") else {
        return;
    };
    let mode = std::env::var("UFO_TEST_CHILD_MODE").unwrap();
    let dir = PathBuf::from(std::env::var_os("UFO_TEST_CHILD_DIR").unwrap());
    let llm = ScriptedLlm::start().await.unwrap();
    if mode == "block" {
        llm.push_fn(|req| {
            let label = target_label(req, "fault");
            ScriptedReply::Text(common::assign(&label, "echo 42").to_string())
        });
        llm.push_json(&third(
            "CONTINUE",
            json!({"function": "mcp__fault__echo", "arguments": {"text": "42"}}),
            "",
        ));
    } else {
        let prompts = dir.join("prompts");
        let log = move |req: &ufo_agent::testing::RecordedRequest| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&prompts)
                .unwrap();
            writeln!(f, "=== prompt\n{}", req.text()).unwrap();
        };
        let again = log.clone();
        llm.push_fn(move |req| {
            log(req);
            ScriptedReply::Text(third("FINISH", json!(null), "echoed 42").to_string())
        });
        llm.push_fn(move |req| {
            again(req);
            ScriptedReply::Text(host("FINISH", json!({"result": "42 echoed"})).to_string())
        });
    }
    let executor = std::env::var("UFO_TEST_CHILD_EXECUTOR").ok();
    let hub = hub(
        &mode,
        &dir,
        if executor.is_some() {
            "desktop"
        } else {
            "agent"
        },
    );
    let desktop: Arc<dyn CommandDispatcher> = match executor {
        Some(url) => Arc::new(
            GrpcDispatcher::connect_lazy(&url, Some("tok"), 20_000, 64 << 20, None).unwrap(),
        ),
        None => Arc::new(common::desktop()),
    };
    let services = ufo_agent::agents::AgentServices {
        mcp: Some(hub.clone()),
        ..common::services(&llm, ufo_agent::agents::AgentSettings::default())
    };
    // As the agent does: each task's dispatcher, its desktop servers started through its executor.
    let driver: Arc<dyn TaskDriver> = Arc::new(
        AgentsDriver::new(
            Arc::new(move |_| Ok(services.clone())),
            Arc::new(move |_| Ok(desktop.clone())),
        )
        .with_mcp(hub),
    );
    let agent = Agent::start(agent_config(&session_url, RUNNER_FLAGS), Some(driver)).await;
    std::fs::write(dir.join(format!("ready-{mode}")), b"").unwrap();
    // Runs until killed by the parent.
    agent.shutdown.cancelled().await;
}

fn spawn(session: &Session, mode: &str, dir: &Path, executor: Option<&str>) -> std::process::Child {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--ignored",
            "--exact",
            "mcp_resume::mcp_runner_child",
            "--nocapture",
        ])
        .env("UFO_TEST_CHILD_SESSION_URL", &session.url)
        .env("UFO_TEST_CHILD_MODE", mode)
        .env("UFO_TEST_CHILD_DIR", dir)
        .stdout(std::process::Stdio::null());
    if let Some(url) = executor {
        child.env("UFO_TEST_CHILD_EXECUTOR", url);
    }
    child.spawn().unwrap()
}

/// The pid the fault server in `mode` wrote.
fn pid_of(dir: &Path, mode: &str) -> i32 {
    std::fs::read_to_string(dir.join(format!("pid-{mode}")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The parent of live process `pid`.
fn parent_of(pid: i32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A headless executor in this process that lets `python3` run as an MCP server, killing one idle for
/// [`IDLE_MS`]; its URL and stopper.
async fn executor() -> (String, tokio_util::sync::CancellationToken) {
    common::headless_executor(&[
        "--mcp-stdio-allow",
        "python3",
        "--mcp-stdio-idle-ms",
        IDLE_MS,
    ])
    .await
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn an_agent_killed_during_an_mcp_call_is_taken_over_by_its_intents() {
    taken_over_by_its_intents(None).await;
}

/// The same with the server on the desktop's side: the SIGKILLed agent's server, a child of the
/// executor (not of the agent), is killed by the executor once its reads stop; the next agent's server
/// is started by the executor too and stopped when the task ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_during_a_desktop_servers_call_is_taken_over_by_its_intents() {
    let (url, stop) = executor().await;
    taken_over_by_its_intents(Some(&url)).await;
    stop.cancel();
}

/// The task: the first agent (`block`) SIGKILLed while `echo` is in flight, the second (`ok`) finishes.
async fn taken_over_by_its_intents(executor: Option<&str>) {
    let session = Session::start().await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // The API only: the tasks run in the child processes.
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let api = Api::new(&api_agent);
    let id = api.submit(json!({"request": "echo 42"})).await;

    let mut first = spawn(&session, "block", dir, executor);
    // The echo call is in flight: the server got it and never answers.
    eventually(90, "the echo call in flight", || async {
        (calls(dir) == ["echo 42"]).then_some(())
    })
    .await;
    let server = pid_of(dir, "block");
    assert!(alive(server));
    // Whose child it is: the agent's, or the executor's (this process's) on the desktop's side.
    let parent = if executor.is_some() {
        std::process::id()
    } else {
        first.id()
    };
    assert_eq!(parent_of(server), parent, "the server's parent");
    assert_eq!(
        api.task(&id).await["totals"]["steps"],
        1,
        "only the HostAgent's step is recorded"
    );
    first.kill().unwrap(); // SIGKILL: nothing of the agent runs after this.
    first.wait().unwrap();
    eventually(10, "the server gone with its agent", || async {
        (!alive(server)).then_some(())
    })
    .await;

    let mut second = spawn(&session, "ok", dir, executor);
    let task = api.wait_status(&id, "finished").await;
    assert_eq!(task["result"], "42 echoed");
    if executor.is_some() {
        // The second agent's server (its tools were listed for the prompt) ran on the desktop's side
        // and ended with the task.
        let next = pid_of(dir, "ok");
        assert_ne!(next, server);
        eventually(15, "the second server stopped with its task", || async {
            (!alive(next)).then_some(())
        })
        .await;
    }

    let steps = session.steps(&id).await;
    let agents: Vec<_> = steps.iter().map(|s| s.agent_name.as_str()).collect();
    assert_eq!(
        agents,
        [
            "HostAgent",
            "ThirdPartyAgent/fault",
            "ThirdPartyAgent/fault",
            "HostAgent"
        ],
        "each step once"
    );
    // The call in flight is recorded once, from its intent, with the outcome unknown...
    assert_eq!(steps[1].actions.len(), 1);
    assert_eq!(steps[1].actions[0].function, "mcp__fault__echo");
    assert_eq!(steps[1].comment, ufo_agent::runner::intent::UNKNOWN);
    // ...it was not sent again (the second server got no call)...
    assert_eq!(calls(dir), ["echo 42"], "the echo ran once");
    // ...and the model deciding the next step was told its outcome is unknown.
    let prompts = std::fs::read_to_string(dir.join("prompts")).unwrap();
    let first_prompt = prompts.split("=== prompt").nth(1).unwrap();
    assert!(
        first_prompt.contains("Your previous actions for this subtask:\nmcp__fault__echo {\"text\":\"42\"} [outcome unknown:"),
        "{first_prompt}"
    );

    let events = session.events(&id).await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "events must have no gap");
    }
    let claimed = events
        .iter()
        .filter(|e| e.kind == EventKind::TaskClaimed as i32)
        .count();
    assert_eq!(claimed, 2, "claimed by each agent");

    second.kill().unwrap();
    second.wait().unwrap();
    api_agent.stop().await;
    session.stop().await;
}
