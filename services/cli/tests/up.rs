//! `ufo up` as a user runs it: real `ufo-session` (embedded SQLite, no database server) and `ufo-agent`
//! child processes, the printed URLs and API key work with the other `ufo` commands (also read from the
//! data directory when no token is given), `--admin-key` makes the key the README's `ufo prune` line
//! needs, and SIGTERM (what Ctrl-C does) stops every child.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ufo_testkit::{ProcessBuilder, free_port, grpc_serving, workspace_binary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_starts_the_services_that_the_cli_then_uses_and_stops_them_on_sigterm() {
    let bin_dir = workspace_binary("ufo-agent")
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let data = tempfile::tempdir().unwrap();
    let (http, grpc, session) = (
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
    );
    let start = || {
        ProcessBuilder::new("ufo up", env!("CARGO_BIN_EXE_ufo"))
            .args(["up", "--executor", "never", "--admin-key"])
            .arg("--bin-dir")
            .arg(&bin_dir)
            .arg("--data-dir")
            .arg(data.path())
            .args(["--http-port", &http.to_string()])
            .args(["--grpc-port", &grpc.to_string()])
            .args(["--session-port", &session.to_string()])
            .env_remove("UFO_TOKEN")
            .env_remove("UFO_OTLP_ENDPOINT")
            // The submitted task may be mid-step (no executor, no model) when SIGTERM comes: the agent
            // lets it drain for 1 s, not the default 20 s beyond this harness's 10 s grace.
            .env("UFO_AGENT_DRAIN_MS", "1000")
            .spawn()
            .unwrap()
    };
    let mut up = start();
    up.wait_for_log("Ctrl-C stops everything", Duration::from_secs(120))
        .await
        .unwrap();
    let logs = up.logs();
    let rest = format!("http://127.0.0.1:{http}");
    let grpc_url = format!("http://127.0.0.1:{grpc}");
    let session_url = format!("http://127.0.0.1:{session}");
    assert!(
        logs.contains(&rest) && logs.contains(&grpc_url) && logs.contains(&session_url),
        "{logs}"
    );
    assert!(logs.contains("executor       none"), "{logs}");
    let token = logs
        .lines()
        .find_map(|l| l.trim().strip_prefix("export UFO_TOKEN="))
        .unwrap_or_else(|| panic!("no API key printed:\n{logs}"))
        .to_owned();
    assert!(
        data.path().join("session.sqlite3").exists(),
        "the embedded store is in the data dir"
    );

    let ufo = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
            .args(["--server", &rest, "--grpc", &grpc_url, "--token", &token])
            .args(args)
            .output()
            .unwrap()
    };
    let submitted = ufo(&["run", "--detach", "hello"]);
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let id = String::from_utf8(submitted.stdout)
        .unwrap()
        .trim()
        .to_owned();
    let listed = ufo(&["tasks"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&id));

    // No token given: the CLI uses the key `ufo up` keeps in the data directory's tokens.json.
    let client = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .env("UFO_SERVER", &rest)
            .env("UFO_GRPC", &grpc_url)
            .env("UFO_DATA_DIR", data.path())
            .env_remove("UFO_TOKEN")
            .output()
            .unwrap()
    };
    let listed = client(env!("CARGO_BIN_EXE_ufo"), &["tasks"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&id),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    // The README's prune line, as printed, with the admin key `ufo up --admin-key` made (the API key
    // may not prune).
    let logs = up.logs();
    let admin = logs
        .lines()
        .find_map(|l| l.trim().strip_prefix("export UFO_ADMIN_TOKEN="))
        .unwrap_or_else(|| panic!("no admin key printed:\n{logs}"));
    assert_ne!(admin, token);
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("ufo prune "))
        .and_then(|l| l.split(" #").next())
        .expect("README shows ufo prune");
    let path = format!(
        "{}:{}",
        std::path::Path::new(env!("CARGO_BIN_EXE_ufo"))
            .parent()
            .unwrap()
            .display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pruned = std::process::Command::new("bash")
        .args(["-c", line])
        .env("PATH", path)
        .env("UFO_SERVER", &rest)
        .env("UFO_DATA_DIR", data.path())
        .env_remove("UFO_TOKEN")
        .output()
        .unwrap();
    assert!(
        pruned.status.success()
            && String::from_utf8_lossy(&pruned.stdout)
                .contains("pruned the screenshots of 0 tasks"),
        "{line}: {}{}",
        String::from_utf8_lossy(&pruned.stdout),
        String::from_utf8_lossy(&pruned.stderr)
    );
    // A task that does not exist is the caller's mistake: answered, not an ERROR in any service's log.
    let missing = ufo(&["show", "0195f8a0-0000-7000-8000-000000000000"]);
    assert!(!missing.status.success());
    let refused = ufo(&["prune", "--older-than-days", "30"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("HTTP 403"),
        "the API key is no admin: {}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let status = up.stop().await.unwrap().unwrap();
    assert!(
        status.success(),
        "ufo up exits 0 on SIGTERM: {status}\n{}",
        up.logs()
    );
    for url in [&session_url, &grpc_url] {
        assert!(
            grpc_serving(url).await.is_err(),
            "{url} still serves after ufo up stopped"
        );
    }

    // A restart appends to the services' logs (the run before it, say a crash, stays readable).
    let mut up = start();
    up.wait_for_log("Ctrl-C stops everything", Duration::from_secs(120))
        .await
        .unwrap();
    assert!(up.stop().await.unwrap().unwrap().success());
    for service in ["ufo-session", "ufo-agent"] {
        let log = std::fs::read_to_string(data.path().join(format!("logs/{service}.log"))).unwrap();
        let starts = log.matches(&format!("--- ufo up starts {service}")).count();
        assert_eq!(starts, 2, "{service}.log holds both runs:\n{log}");
        // (tower-http logged every non-OK gRPC answer as ERROR "response failed".)
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" ERROR "))
            .filter(|l| {
                service == "ufo-session"
                    || ["response failed", "NotFound", "not found"]
                        .iter()
                        .any(|w| l.contains(w))
            })
            .collect();
        assert!(errors.is_empty(), "{service}.log: {errors:#?}");
    }
    let agent_log = std::fs::read_to_string(data.path().join("logs/ufo-agent.log")).unwrap();
    assert_eq!(
        agent_log.matches("ufo-agent listening").count(),
        2,
        "{agent_log}"
    );
}

/// A headless desktop keeps its display number between starts of one data directory (desktop.env and
/// the printed line name the same display), and when that display is taken the desktop goes elsewhere
/// with a note.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_headless_display_of_its_data_directory() {
    let bin_dir = workspace_binary("ufo-agent")
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let data = tempfile::tempdir().unwrap();
    let ports: Vec<String> = (0..4).map(|_| free_port().unwrap().to_string()).collect();
    let run = || async {
        let mut up = ProcessBuilder::new("ufo up", env!("CARGO_BIN_EXE_ufo"))
            .args([
                "up",
                "--desktop",
                "headless",
                "--llm-base-url",
                "http://127.0.0.1:9/v1",
            ])
            .arg("--bin-dir")
            .arg(&bin_dir)
            .arg("--data-dir")
            .arg(data.path())
            .args(["--http-port", &ports[0], "--grpc-port", &ports[1]])
            .args(["--session-port", &ports[2], "--executor-port", &ports[3]])
            .env_remove("DISPLAY")
            .env_remove("UFO_TOKEN")
            .env_remove("UFO_OTLP_ENDPOINT")
            .spawn()
            .unwrap();
        up.wait_for_log("Ctrl-C stops everything", Duration::from_secs(180))
            .await
            .unwrap();
        let logs = up.logs();
        let display = logs
            .lines()
            .find_map(|l| l.trim().strip_prefix("desktop        Xvfb display "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_else(|| panic!("no display printed:\n{logs}"))
            .to_owned();
        let info = std::fs::read_to_string(data.path().join("desktop.env")).unwrap();
        assert!(info.contains(&format!("DISPLAY={display}\n")), "{info}");
        assert!(up.stop().await.unwrap().unwrap().success());
        (display, logs)
    };
    let (first, _) = run().await;
    let (second, logs) = run().await;
    assert_eq!(first, second, "{logs}");
    assert!(!logs.contains("was taken"), "{logs}");

    // Another X server on it now: the next start goes elsewhere and says so.
    let number = first.trim_start_matches(':');
    let mut squatter = std::process::Command::new("Xvfb")
        .args([&format!(":{number}"), "-displayfd", "1", "-nolisten", "tcp"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(squatter.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), number, "the squatter holds the display");
    let (third, logs) = run().await;
    squatter.kill().unwrap();
    squatter.wait().unwrap();
    assert_ne!(third, first, "{logs}");
    assert!(
        logs.contains(&format!(
            "display :{number}, this data directory's last one, was taken"
        )),
        "{logs}"
    );
}
