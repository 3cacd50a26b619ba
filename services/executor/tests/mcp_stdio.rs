//! Programs started for a caller over stdin/stdout (`process_start`, `process_write`, `process_read`,
//! `process_stop`: the agent's MCP servers on the desktop's side), against a real `ufo-executor` process
//! over gRPC, with a real MCP server written with the official Python SDK
//! (services/agent/tests/mcp/desktop_server.py):
//! - off without `--mcp-stdio-allow`, and a program not on the list is refused, naming the flag;
//! - an allowed server runs as the executor's child, in its environment without the executor's own
//!   settings (its token), and answers MCP over the tools (initialize, tools/call);
//! - a working directory is refused unless it resolves inside `--mcp-stdio-workdirs`;
//! - another caller (another connection) cannot read, write or stop it;
//! - stopped by its caller, idle past `--mcp-stdio-idle-ms`, or its executor SIGKILLed: the process is
//!   gone (checked by pid).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_proto::v1::ResultStatus;

fn server_script() -> String {
    format!(
        "{}/../agent/tests/mcp/desktop_server.py",
        env!("CARGO_MANIFEST_DIR")
    )
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

/// Every process descending from `root` (its children, theirs, ...), with its command name, read from
/// `/proc`: what a SIGKILLed `root` must not leave behind.
fn descendants(root: u64) -> Vec<(u64, String)> {
    let parents: Vec<(u64, u64, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u64 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_owned();
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid, name))
        })
        .collect();
    let mut family = vec![];
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, _, name) in parents.iter().filter(|(_, ppid, _)| *ppid == parent) {
            family.push((*pid, name.clone()));
            frontier.push(*pid);
        }
    }
    family
}

/// Waits (bounded) until process `pid` is gone.
async fn gone(pid: u64, what: &str) {
    let end = Instant::now() + Duration::from_secs(15);
    while alive(pid) {
        assert!(Instant::now() < end, "{what} (pid {pid}) is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn value(r: &ufo_proto::v1::Result) -> Value {
    r.result
        .clone()
        .map(ufo_proto::json::from_value)
        .unwrap_or(Value::Null)
}

/// Starts the Python server; returns its id and pid.
async fn start_server(r: &mut shared::Remote) -> (String, u64) {
    let (started, _) = r
        .ok(
            "process_start",
            json!({"program": "python3", "args": [server_script()]}),
        )
        .await;
    (
        started["process_id"].as_str().unwrap().to_owned(),
        started["pid"].as_u64().unwrap(),
    )
}

/// A JSON-RPC conversation with a process through the tools.
struct Talk {
    id: String,
    written: u64,
    read: u64,
    lines: Vec<Value>,
}

impl Talk {
    async fn send(&mut self, r: &mut shared::Remote, msg: Value) {
        let data = format!("{msg}\n");
        let (w, _) = r
            .ok(
                "process_write",
                json!({"process_id": self.id, "offset": self.written, "data": data}),
            )
            .await;
        self.written = w["offset"].as_u64().unwrap();
    }

    /// Reads until the answer to request `id` arrives.
    async fn answer(&mut self, r: &mut shared::Remote, id: u64) -> Value {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(found) = self.lines.iter().find(|l| l["id"] == id) {
                return found.clone();
            }
            assert!(Instant::now() < end, "no answer to {id}: {:?}", self.lines);
            let (out, _) = r
                .ok(
                    "process_read",
                    json!({"process_id": self.id, "offset": self.read, "max_wait_ms": 2000}),
                )
                .await;
            assert_eq!(out["eof"], false, "{out}");
            let data = out["data"].as_str().unwrap();
            // Whole lines only.
            assert!(data.is_empty() || data.ends_with('\n'), "{data:?}");
            self.lines.extend(
                data.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()),
            );
            self.read = out["offset"].as_u64().unwrap();
        }
    }
}

async fn initialise(r: &mut shared::Remote, id: &str) -> Talk {
    let mut talk = Talk {
        id: id.to_owned(),
        written: 0,
        read: 0,
        lines: vec![],
    };
    talk.send(
        r,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    let init = talk.answer(r, 1).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "desktop", "{init}");
    talk.send(
        r,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    talk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_without_an_allow_list() {
    let (_p, mut r) = shared::headless::start(&[]).await;
    let out = r
        .run(
            "process_start",
            json!({"program": "python3", "args": [server_script()]}),
        )
        .await;
    assert_eq!(out.status, ResultStatus::Failure as i32);
    assert!(
        out.error
            .contains("starting programs is off on this executor (start it with --mcp-stdio-allow"),
        "{}",
        out.error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_runs_as_the_executors_child_and_answers_only_its_caller() {
    let (executor, mut r) = shared::headless::start_with_env(
        &["--mcp-stdio-allow", "python3"],
        &[
            ("UFO_TEST_EXECUTOR_MARK", "on-the-desktop"),
            // The executor's token, given the way an operator may: not for its programs' eyes.
            ("UFO_EXECUTOR_TOKEN", "tok"),
        ],
    )
    .await;
    assert!(std::env::var_os("UFO_TEST_EXECUTOR_MARK").is_none());

    // Not on the list: refused, nothing started.
    let refused = r
        .run("process_start", json!({"program": "cat", "args": []}))
        .await;
    assert_eq!(refused.status, ResultStatus::Failure as i32);
    assert!(
        refused.error.contains(
            "program \"cat\" is not on the executor's --mcp-stdio-allow list; allowed: python3"
        ),
        "{}",
        refused.error
    );

    let (id, pid) = start_server(&mut r).await;
    let mut talk = initialise(&mut r, &id).await;
    talk.send(
        &mut r,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "where", "arguments": {"names": ["UFO_TEST_EXECUTOR_MARK", "UFO_EXECUTOR_TOKEN", "PATH"]}}}),
    )
    .await;
    let answer = talk.answer(&mut r, 2).await;
    let place: Value =
        serde_json::from_str(answer["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(place["pid"], pid, "{answer}");
    // The executor's child, in the executor's environment.
    assert_eq!(place["ppid"], u64::from(executor.0.id()), "{answer}");
    assert_ne!(place["ppid"], u64::from(std::process::id()));
    assert_eq!(place["env"]["UFO_TEST_EXECUTOR_MARK"], "on-the-desktop");
    assert!(place["env"]["PATH"].is_string(), "{answer}");
    assert_eq!(
        place["env"]["UFO_EXECUTOR_TOKEN"],
        Value::Null,
        "the executor's token reached its program: {answer}"
    );

    // Another caller (its own connection) is refused every call on it.
    let mut other = shared::Remote::connect(&r.url, Some("tok"));
    for (tool, params) in [
        (
            "process_read",
            json!({"process_id": id, "offset": talk.read}),
        ),
        (
            "process_write",
            json!({"process_id": id, "offset": talk.written, "data": "{}\n"}),
        ),
        ("process_stop", json!({"process_id": id})),
    ] {
        let out = other.run(tool, params).await;
        assert_eq!(out.status, ResultStatus::Failure as i32, "{tool}");
        assert!(
            out.error.contains("belongs to another caller"),
            "{tool}: {}",
            out.error
        );
    }
    assert!(alive(pid));

    // Its caller stops it: the process is gone, its id with it.
    r.ok("process_stop", json!({"process_id": id})).await;
    gone(pid, "the stopped server").await;
    let after = r
        .run("process_read", json!({"process_id": id, "offset": 0}))
        .await;
    assert!(after.error.contains("no process"), "{}", after.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_and_one_whose_executor_dies_leave_no_orphan() {
    let (mut executor, mut r) = shared::headless::start(&[
        "--mcp-stdio-allow",
        "python3",
        "--mcp-stdio-idle-ms",
        "1500",
    ])
    .await;
    // Idle: nobody calls; the executor kills it.
    let (idle, idle_pid) = start_server(&mut r).await;
    gone(idle_pid, "the idle server").await;
    let out = r
        .run("process_read", json!({"process_id": idle, "offset": 0}))
        .await;
    assert!(out.error.contains("no process"), "{}", out.error);

    // A read that waits keeps it alive past the idle time (the executor bounds the wait to half of it).
    let (id, pid) = start_server(&mut r).await;
    let mut talk = initialise(&mut r, &id).await;
    for _ in 0..3 {
        let out = r
            .run(
                "process_read",
                json!({"process_id": id, "offset": talk.read, "max_wait_ms": 5000}),
            )
            .await;
        assert_eq!(out.status, ResultStatus::Success as i32, "{}", out.error);
        talk.read = value(&out)["offset"].as_u64().unwrap();
    }
    assert!(alive(pid), "a polled server was killed as idle");

    // The executor dies with SIGKILL: its server goes with it, and so does its headless desktop (the X
    // server, the session and accessibility buses, the window manager).
    let family = descendants(executor.0.id().into());
    let names: Vec<&str> = family.iter().map(|(_, name)| name.as_str()).collect();
    for expected in ["Xvfb", "dbus-daemon", "xfwm4", "python3"] {
        assert!(names.contains(&expected), "{expected} not among {names:?}");
    }
    // SAFETY: kill(2) with the pid of our own child; no memory is touched.
    unsafe { libc::kill(executor.0.id() as i32, libc::SIGKILL) };
    let _ = executor.0.wait();
    gone(pid, "the server of a SIGKILLed executor").await;
    for (pid, name) in &family {
        gone(*pid, &format!("{name}, started by a SIGKILLed executor")).await;
    }
    // Nothing of it is left to remove its desktop's runtime directory: the next desktop to start does
    // (any executor's; another test's may come first).
    let left = std::env::temp_dir().join(format!("ufo-desktop-{}-0", executor.0.id()));
    let (_next, _r) = shared::headless::start(&[]).await;
    assert!(
        !left.exists(),
        "{} outlived the next desktop's start",
        left.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_directory_must_be_inside_the_allowed_ones() {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("allowed");
    let inner = allowed.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, allowed.join("escape")).unwrap();
    let start = |cwd: &std::path::Path| json!({"program": "python3", "args": [server_script()], "cwd": cwd.display().to_string()});

    // Without --mcp-stdio-workdirs no caller picks one.
    {
        let (_p, mut r) = shared::headless::start(&["--mcp-stdio-allow", "python3"]).await;
        let out = r.run("process_start", start(&inner)).await;
        assert_eq!(out.status, ResultStatus::Failure as i32);
        assert!(
            out.error
                .contains("lets no caller choose a working directory (--mcp-stdio-workdirs)"),
            "{}",
            out.error
        );
    }

    let dirs = allowed.display().to_string();
    let (_p, mut r) = shared::headless::start(&[
        "--mcp-stdio-allow",
        "python3",
        "--mcp-stdio-workdirs",
        &dirs,
    ])
    .await;
    for (cwd, why) in [
        (outside.clone(), "which is outside --mcp-stdio-workdirs"),
        // A symlink inside pointing out is followed, and refused.
        (
            allowed.join("escape"),
            "which is outside --mcp-stdio-workdirs",
        ),
        (allowed.join(".."), "which is outside --mcp-stdio-workdirs"),
        (allowed.join("missing"), "No such file or directory"),
        (
            std::path::PathBuf::from("inner"),
            "it must be an absolute path",
        ),
    ] {
        let out = r.run("process_start", start(&cwd)).await;
        assert_eq!(out.status, ResultStatus::Failure as i32, "{cwd:?}");
        assert!(
            out.error
                .contains("invalid parameters for process_start: working directory")
                && out.error.contains(why),
            "{cwd:?}: {}",
            out.error
        );
    }

    // Inside (also through `..` that stays inside): the server runs there.
    for cwd in [inner.clone(), inner.join("..")] {
        let started = r.run("process_start", start(&cwd)).await;
        assert_eq!(
            started.status,
            ResultStatus::Success as i32,
            "{}",
            started.error
        );
        let started = value(&started);
        let (id, pid) = (
            started["process_id"].as_str().unwrap().to_owned(),
            started["pid"].as_u64().unwrap(),
        );
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
            std::fs::canonicalize(&cwd).unwrap()
        );
        r.ok("process_stop", json!({"process_id": id})).await;
        gone(pid, "the stopped server").await;
    }
}
