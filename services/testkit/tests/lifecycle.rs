//! Every service binary, as a real process: it starts, answers gRPC health, lists its services through
//! server reflection to an outside client (`buf curl --list-methods`) when the operator turned it on
//! (`UFO_GRPC_REFLECTION`; without it there is no reflection), and exits 0 on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use ufo_testkit::{ProcessBuilder, ServiceProcess, free_port, workspace_binary};

const READY: Duration = Duration::from_secs(60);

/// `buf curl --list-methods` against the server at `url` (npm `@bufbuild/buf`).
fn buf_list_methods(url: &str) -> std::process::Output {
    std::process::Command::new("buf")
        .args([
            "curl",
            "--protocol",
            "grpc",
            "--http2-prior-knowledge",
            "--list-methods",
            url,
        ])
        .output()
        .expect("buf is installed (npm install -g @bufbuild/buf)")
}

/// The methods reflection lists for the server at `url`.
fn list_methods(url: &str) -> Vec<String> {
    let output = buf_list_methods(url);
    assert!(
        output.status.success(),
        "buf curl --list-methods {url} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Starts `binary` with `args` on a free port, checks health and reflection, then SIGTERM → exit 0.
async fn check_lifecycle(
    binary: &str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: &Path,
    expected_methods: &[&str],
) {
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut builder = ProcessBuilder::new(binary, workspace_binary(binary).unwrap())
        .args(["--listen".to_owned(), format!("127.0.0.1:{port}")])
        .args(args)
        .env_remove("UFO_OTLP_ENDPOINT")
        .env("UFO_GRPC_REFLECTION", "true")
        .current_dir(dir);
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    let mut process: ServiceProcess = builder.spawn().unwrap();
    process.wait_grpc_ready(&url, READY).await.unwrap();

    let methods = list_methods(&url);
    for expected in expected_methods
        .iter()
        .chain(&["grpc.health.v1.Health/Check"])
    {
        assert!(
            methods.iter().any(|m| m == expected),
            "{binary}: reflection does not list {expected}; it lists {methods:?}"
        );
    }

    let status = process
        .stop()
        .await
        .unwrap()
        .expect("the process was running");
    assert!(
        status.success(),
        "{binary} exited with {status} on SIGTERM; output:\n{}",
        process.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_service_starts_serves_health_and_reflection_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("session.sqlite3");
    check_lifecycle(
        "ufo-session",
        vec!["--sqlite-path".into(), sqlite.display().to_string()],
        vec![],
        dir.path(),
        &[
            "ufo.v1.SessionStore/RecordStep",
            "ufo.v1.SessionStore/WatchEvents",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_starts_serves_health_and_reflection_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let desktop = ufo_executor::testing::Desktop::start(1024, 768)
        .await
        .unwrap();
    let mut env = desktop.env();
    env.push(("UFO_EXECUTOR_TOKEN".into(), "lifecycle-token".into()));
    check_lifecycle(
        "ufo-executor",
        vec![],
        env,
        dir.path(),
        &["ufo.v1.Executor/Execute", "ufo.v1.Executor/ListTools"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_service_starts_serves_health_and_reflection_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // The agent needs a session service to talk to.
    let session_port = free_port().unwrap();
    let session_url = format!("http://127.0.0.1:{session_port}");
    let mut session = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen".to_owned(), format!("127.0.0.1:{session_port}")])
        .arg("--sqlite-path")
        .arg(dir.path().join("session.sqlite3"))
        .env_remove("UFO_OTLP_ENDPOINT")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    session.wait_grpc_ready(&session_url, READY).await.unwrap();
    let http_port = free_port().unwrap();
    check_lifecycle(
        "ufo-agent",
        vec![
            "--http-listen".into(),
            format!("127.0.0.1:{http_port}"),
            "--session-url".into(),
            session_url,
        ],
        vec![(
            "UFO_AGENT_API_KEYS".into(),
            "lifecycle:lifecycle-key".into(),
        )],
        dir.path(),
        &[
            "ufo.v1.AgentService/SubmitTask",
            "ufo.v1.AgentService/StreamSteps",
        ],
    )
    .await;
    let status = session.stop().await.unwrap().expect("running");
    assert!(status.success(), "ufo-session exited with {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_is_off_unless_the_operator_turns_it_on() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut process = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen".to_owned(), format!("127.0.0.1:{port}")])
        .arg("--sqlite-path")
        .arg(dir.path().join("session.sqlite3"))
        .env_remove("UFO_OTLP_ENDPOINT")
        .env_remove("UFO_GRPC_REFLECTION")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    process.wait_grpc_ready(&url, READY).await.unwrap();
    let output = buf_list_methods(&url);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("unimplemented"),
        "reflection answered: {}{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    process.stop().await.unwrap();
}
