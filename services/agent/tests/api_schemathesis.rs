//! Schemathesis (PyPI `schemathesis`) against the running REST API's `/openapi.json` with `--checks all`:
//! the agent and the real session service (fresh Postgres database) run in-process on port 0; the test
//! passes when schemathesis exits 0. `UFO_SCHEMATHESIS_EXAMPLES` sets the examples per operation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::api_support::{Agent, KEY, Session, agent_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure() {
    let session = Session::start().await;
    let agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let examples = std::env::var("UFO_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "40".into());
    // Schemathesis keeps a crash cache in its working directory; keep it out of the source tree.
    let scratch = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new("schemathesis")
        .args([
            "run",
            &format!("{}/openapi.json", agent.http),
            "--url",
            &agent.http,
            "--checks",
            "all",
            "--max-examples",
            &examples,
            "--header",
            &format!("Authorization: Bearer {KEY}"),
            // The event stream stays open while its task lives (no runner here: for ever), which a
            // request/response fuzzer reads as a hang; tests/api_sse.rs covers it, bad input included.
            "--exclude-path",
            "/v1/tasks/{id}/events",
            // The live desktop is such a stream too (tests/takeover.rs covers it).
            "--exclude-path",
            "/v1/tasks/{id}/live",
            // Its `arguments` are each MCP desktop tool's own (an executor of the registry, then the
            // tool's fields), which one schema cannot say; tests/mcp_server.rs sweeps every tool with bad
            // arguments on both transports and through this route (`ufo mcp`), 0 internal errors.
            "--exclude-path",
            "/v1/desktop/calls",
            // A person's input goes to the task's executor, which this run has none of (503 is the
            // right answer); tests/takeover.rs covers the route with a real executor, bad input included.
            "--exclude-path",
            "/v1/tasks/{id}/input",
            // A recording runs on a registered executor, which this run has none of (an unknown name is
            // 400, the default one unreachable 503 after the executor retry budget); tests/recordings.rs
            // covers the route with a real executor, bad input and another caller's ids included.
            "--exclude-path",
            "/v1/recordings",
            // A request that hangs is a failure, not a stuck run.
            "--request-timeout",
            "30",
            "--seed",
            "1",
            "--no-color",
        ])
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(scratch.path())
        .output()
        .await
        .expect("schemathesis is installed (pip install schemathesis)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis failed:\n{stdout}\n{stderr}"
    );
    agent.stop().await;
    session.stop().await;
}
