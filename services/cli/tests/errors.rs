//! The `ufo` binary's failures as a user meets them, against real processes: an unreachable REST or gRPC
//! address names itself and the flag/env to change; `ufo health` tells a serving `ufo-session` from a
//! stopped one by exit code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::Duration;

use ufo_testkit::{ProcessBuilder, free_port, workspace_binary};

async fn ufo(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .args(args)
        .env_remove("UFO_SERVER")
        .env_remove("UFO_GRPC")
        .env_remove("UFO_TOKEN")
        .output()
        .await
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn an_unreachable_server_is_named_with_the_flag_to_change() {
    let port = free_port().unwrap();
    let server = format!("http://127.0.0.1:{port}");
    let output = ufo(&["--server", &server, "tasks"]).await;
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains(&format!("cannot reach the agent service at {server}")),
        "{text}"
    );
    assert!(
        text.contains("--server / UFO_SERVER") && text.contains("ufo up"),
        "{text}"
    );

    let output = ufo(&[
        "--grpc",
        &server,
        "watch",
        "00000000-0000-4000-8000-000000000000",
    ])
    .await;
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains(&server) && text.contains("--grpc / UFO_GRPC"),
        "{text}"
    );
}

#[tokio::test]
async fn a_malformed_address_is_an_invalid_flag() {
    let output = ufo(&["--server", "localhost:8080", "tasks"]).await;
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(text.contains("invalid --server"), "{text}");
}

#[tokio::test]
async fn health_tells_a_serving_session_service_from_a_stopped_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut session = ProcessBuilder::new("ufo-session", workspace_binary("ufo-session").unwrap())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--sqlite-path",
            dir.path().join("s.sqlite3").to_str().unwrap(),
        ])
        .env_remove("UFO_OTLP_ENDPOINT")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    session
        .wait_grpc_ready(&url, Duration::from_secs(60))
        .await
        .unwrap();
    let output = ufo(&["health", "--url", &url]).await;
    assert!(output.status.success(), "{}", stderr(&output));

    assert!(session.stop().await.unwrap().unwrap().success());
    let output = ufo(&["health", "--url", &url]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains(&url), "{}", stderr(&output));
}
