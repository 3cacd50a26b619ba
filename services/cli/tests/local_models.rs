//! Local models are first-class (issue 35, finding 2): `ufo up` takes the model flags and shows only its
//! own flags in `--help`; a model served from this machine without a price is priced 0 with a printed
//! note, so its tasks are accepted; an unpriced remote model is warned about by `ufo up` and `ufo doctor`
//! before any task. Real `ufo up` (its `ufo-session` and `ufo-agent` children) and a local
//! OpenAI-compatible stand-in listening on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use ufo_agent::testing::ScriptedLlm;
use ufo_testkit::{ProcessBuilder, ServiceProcess, free_port, workspace_binary};

fn bin_dir() -> PathBuf {
    workspace_binary("ufo-agent")
        .unwrap()
        .parent()
        .unwrap()
        .to_owned()
}

fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn up_and_doctor_list_the_model_flags_and_not_the_client_flags() {
    for sub in ["up", "doctor"] {
        let text = help(&[sub]);
        for flag in [
            "--llm-base-url",
            "--llm-api-key",
            "--host-model",
            "--app-model",
            "--llm-prices",
            "--llm-default-price",
        ] {
            assert!(
                text.contains(flag),
                "`ufo {sub} --help` lacks {flag}:\n{text}"
            );
        }
        for client in ["--server", "--grpc", "--call-timeout-seconds"] {
            assert!(
                !text.contains(&format!("{client} <")),
                "`ufo {sub} --help` lists the client flag {client}:\n{text}"
            );
        }
    }
    assert!(help(&["up"]).contains("--admin-key"));
    // The client commands keep them.
    assert!(help(&["run"]).contains("--server"));
}

/// `ufo up --executor never` on free ports with `extra` flags, started until it says it is up.
async fn up(data: &Path, extra: &[&str]) -> (ServiceProcess, String) {
    let (http, grpc, session) = (
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
    );
    let mut up = ProcessBuilder::new("ufo up", env!("CARGO_BIN_EXE_ufo"))
        .args(["up", "--executor", "never"])
        .arg("--bin-dir")
        .arg(bin_dir())
        .arg("--data-dir")
        .arg(data)
        .args(["--http-port", &http.to_string()])
        .args(["--grpc-port", &grpc.to_string()])
        .args(["--session-port", &session.to_string()])
        .args(extra)
        .env_remove("UFO_TOKEN")
        .env_remove("UFO_OTLP_ENDPOINT")
        .env_remove("UFO_LLM_BASE_URL")
        .env_remove("UFO_LLM_API_KEY")
        .env_remove("UFO_HOST_MODEL")
        .env_remove("UFO_APP_MODEL")
        .env_remove("UFO_LLM_PRICES")
        .env_remove("UFO_LLM_DEFAULT_PRICE")
        // A submitted task may be mid-step when SIGTERM comes: 1 s of drain, within the harness's grace.
        .env("UFO_AGENT_DRAIN_MS", "1000")
        .spawn()
        .unwrap();
    up.wait_for_log("Ctrl-C stops everything", Duration::from_secs(120))
        .await
        .unwrap();
    (up, format!("http://127.0.0.1:{http}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_model_without_a_price_is_free_and_a_remote_one_is_warned_about_before_any_task() {
    let llm = ScriptedLlm::start().await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let (mut local, rest) = up(
        data.path(),
        &[
            "--llm-base-url",
            &llm.base_url(),
            "--host-model",
            "llava:13b",
            "--app-model",
            "llava:13b",
        ],
    )
    .await;
    let logs = local.logs();
    let note = logs
        .lines()
        .find(|l| l.starts_with("note: model llava:13b has no price"))
        .unwrap_or_else(|| panic!("no note about the free local model:\n{logs}"));
    assert!(
        note.contains("priced 0") && note.contains(&llm.base_url()),
        "{note}"
    );
    assert!(!logs.contains("warning: model llava:13b"), "{logs}");
    // The task is accepted (on main: "model has no price"), with the key `ufo up` kept.
    let token = logs
        .lines()
        .find_map(|l| l.trim().strip_prefix("export UFO_TOKEN="))
        .unwrap()
        .to_owned();
    let submitted = std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .args(["--server", &rest, "--token", &token])
        .args(["run", "--detach", "describe the desktop"])
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    assert!(local.stop().await.unwrap().unwrap().success());

    // A remote model without a price: `ufo up` warns at start, and `ufo doctor` says so with the fix.
    let remote = [
        "--llm-base-url",
        "http://model.invalid/v1",
        "--llm-api-key",
        "sk-test",
        "--host-model",
        "llava:13b",
        "--app-model",
        "llava:13b",
    ];
    let (mut warned, _) = up(data.path(), &remote).await;
    let logs = warned.logs();
    let warning = logs
        .lines()
        .find(|l| l.starts_with("warning: model llava:13b at http://model.invalid/v1 has no price"))
        .unwrap_or_else(|| panic!("no warning about the unpriced remote model:\n{logs}"));
    assert!(
        warning.contains("--llm-prices llava:13b=IN/OUT")
            && warning.contains("--llm-default-price"),
        "{warning}"
    );
    assert!(warned.stop().await.unwrap().unwrap().success());

    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .arg("doctor")
        .arg("--bin-dir")
        .arg(bin_dir())
        .arg("--data-dir")
        .arg(data.path())
        .args(remote)
        .env_remove("UFO_LLM_PRICES")
        .env_remove("UFO_LLM_DEFAULT_PRICE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("PROBLEM")
            && l.contains("model llava:13b at http://model.invalid/v1 has no price")
            && l.contains("fix: --llm-prices")),
        "{stdout}"
    );
    // Priced: no longer a problem.
    let priced = std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .arg("doctor")
        .arg("--bin-dir")
        .arg(bin_dir())
        .arg("--data-dir")
        .arg(data.path())
        .args(remote)
        .args(["--llm-default-price", "1/2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&priced.stdout);
    assert!(!stdout.contains("has no price"), "{stdout}");
}
