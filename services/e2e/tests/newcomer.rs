//! A newcomer's first task, as a person runs it (issue 18): `ufo up` in a terminal (tmux) on a machine
//! without a display brings its own headless desktop; `ufo run "open mousepad and type hello"` with a
//! stand-in model (the OpenAI-compatible scripted server) launches mousepad through the default
//! allow-list and types; the text is then read from mousepad through AT-SPI. No other setup: no DISPLAY,
//! no database server, no token given. Also: the session service refuses calls without its token, a
//! second `ufo up` on the same ports refuses with a clear message, and a restarted `ufo up` keeps the
//! API key.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use ufo_agent::testing::{RecordedRequest, ScriptedLlm, ScriptedReply};
use ufo_e2e::script::{app, assign, controls, host, target_label};
use ufo_executor::backend::{Backend, TreeLimits};
use ufo_testkit::{free_port, workspace_binary};

const TIMEOUT: Duration = Duration::from_secs(180);

/// A tmux server of this test's own (its socket name), so its environment is the test's.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn tmux(&self) -> std::process::Command {
        let mut c = std::process::Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// Starts `command` in a new window named `name` with `env`, on a terminal of 200×60.
    fn start(&self, name: &str, command: &[String], env: &[(String, String)]) {
        let mut c = self.tmux();
        c.args(["new-session", "-d", "-x", "200", "-y", "60", "-s", name]);
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        // Keep the pane after the program exits, so its last words can be read.
        c.arg(format!(
            "{}; echo EXITED=$?; sleep 600",
            command
                .iter()
                .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        c.env_remove("DISPLAY")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("NO_AT_BRIDGE")
            .env_remove("TMUX");
        let status = c.status().unwrap();
        assert!(status.success(), "tmux new-session failed");
    }

    fn screen(&self, name: &str) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-J", "-S", "-200", "-t", name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn wait_for(&self, name: &str, needle: &str) -> String {
        let until = Instant::now() + TIMEOUT;
        loop {
            let screen = self.screen(name);
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < until && !screen.contains("EXITED="),
                "{needle:?} never appeared:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn keys(&self, name: &str, keys: &str) {
        self.tmux()
            .args(["send-keys", "-t", name, keys])
            .status()
            .unwrap();
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

/// The stand-in model: launch mousepad, wait for its window, hand it to the AppAgent, type, finish.
fn script(llm: &ScriptedLlm) {
    let launched = Arc::new(AtomicBool::new(false));
    let typed = Arc::new(AtomicBool::new(false));
    for _ in 0..80 {
        let (launched, typed) = (launched.clone(), typed.clone());
        llm.push_fn(move |req: &RecordedRequest| {
            let reply = if req.role_text("system").contains("You are the HostAgent") {
                if typed.load(Ordering::SeqCst) {
                    host("FINISH", json!({"result": "typed hello into mousepad"}))
                } else if let Some(label) = target_label(req, "mousepad") {
                    assign(&label, "type hello into the document")
                } else if !launched.swap(true, Ordering::SeqCst) {
                    host(
                        "CONTINUE",
                        json!({"current_subtask": "open mousepad", "function": "launch_application",
                               "arguments": {"name": "mousepad"}}),
                    )
                } else {
                    // Launched, not listed yet: look again.
                    host("CONTINUE", json!({"current_subtask": "open mousepad", "function": ""}))
                }
            } else {
                let edits: Vec<_> = controls(req)
                    .into_iter()
                    .filter(|(_, _, k)| k == "Edit")
                    .collect();
                let Some((view, _, _)) = edits.first() else {
                    return ScriptedReply::Status {
                        status: 500,
                        body: json!({"error": {"message": "no text view listed"}}).to_string(),
                        retry_after: None,
                    };
                };
                typed.store(true, Ordering::SeqCst);
                app(
                    "FINISH",
                    json!([
                        {"function": "click_input", "arguments": {"id": view, "button": "left"}, "status": "CONTINUE"},
                        {"function": "keyboard_input", "arguments": {"id": view, "keys": "hello"}, "status": "FINISH"}
                    ]),
                    "typed hello",
                )
            };
            ScriptedReply::Text(reply.to_string())
        });
    }
}

struct Ports {
    http: u16,
    grpc: u16,
    session: u16,
    executor: u16,
}

fn up_command(ufo: &Path, bin_dir: &Path, data: &Path, p: &Ports) -> Vec<String> {
    let mut c: Vec<String> = vec![
        ufo.display().to_string(),
        "up".into(),
        "--desktop".into(),
        "headless".into(),
    ];
    c.extend(["--bin-dir".into(), bin_dir.display().to_string()]);
    c.extend(["--data-dir".into(), data.display().to_string()]);
    for (flag, port) in [
        ("--http-port", p.http),
        ("--grpc-port", p.grpc),
        ("--session-port", p.session),
        ("--executor-port", p.executor),
    ] {
        c.extend([flag.to_owned(), port.to_string()]);
    }
    c
}

fn token_on(screen: &str) -> String {
    screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("export UFO_TOKEN="))
        .unwrap_or_else(|| panic!("no API key printed:\n{screen}"))
        .trim()
        .to_owned()
}

/// mousepad's document text, read through AT-SPI on the desktop `ufo up` started.
async fn mousepad_text(desktop_env: &Path) -> String {
    let info = std::fs::read_to_string(desktop_env).unwrap();
    let var = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_owned()
    };
    let backend = ufo_executor::backend::linux::LinuxBackend::connect_to(
        Some(&var("DISPLAY")),
        Some(&var("DBUS_SESSION_BUS_ADDRESS")),
    )
    .await
    .unwrap();
    let windows = backend.windows().await.unwrap();
    let window = windows
        .iter()
        .find(|w| w.title.to_lowercase().contains("mousepad"))
        .unwrap_or_else(|| panic!("no mousepad window: {windows:?}"));
    let limits = TreeLimits {
        max_nodes: 10_000,
        max_depth: 64,
        deadline: Instant::now() + Duration::from_secs(10),
        max_value_chars: 0,
        bounds_of: None,
    };
    let tree = backend.control_tree(window, &limits).await.unwrap();
    let mut texts = Vec::new();
    for node in tree
        .nodes
        .iter()
        .filter(|n| n.control_type == "Edit" || n.control_type == "Document")
    {
        if let Ok(text) = backend.read_text(node).await {
            texts.push(text);
        }
    }
    texts.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ufo_up_brings_a_desktop_and_the_first_task_types_into_mousepad() {
    let ufo = workspace_binary("ufo").unwrap();
    let bin_dir: PathBuf = ufo.parent().unwrap().to_owned();
    let data = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    script(&llm);
    let ports = Ports {
        http: free_port().unwrap(),
        grpc: free_port().unwrap(),
        session: free_port().unwrap(),
        executor: free_port().unwrap(),
    };
    let env = vec![
        ("UFO_LLM_BASE_URL".to_owned(), llm.base_url()),
        ("UFO_AGENT_LLM_MAX_RETRIES".to_owned(), "0".to_owned()),
        ("UFO_AGENT_CLAIM_INTERVAL_MS".to_owned(), "50".to_owned()),
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
    ];
    let tmux = Tmux {
        socket: format!("ufo-newcomer-{}", std::process::id()),
    };
    let up = up_command(&ufo, &bin_dir, data.path(), &ports);
    tmux.start("up", &up, &env);
    let screen = tmux.wait_for("up", "Ctrl-C stops everything").await;
    assert!(screen.contains("its own headless desktop"), "{screen}");
    assert!(screen.contains("may launch     mousepad"), "{screen}");
    let token = token_on(&screen);
    let server = format!("http://127.0.0.1:{}", ports.http);
    let grpc = format!("http://127.0.0.1:{}", ports.grpc);

    // The first task, exactly as the README gives it (plus where the services are and the key).
    let run = tokio::process::Command::new(&ufo)
        .args(["--server", &server, "--grpc", &grpc, "--token", &token])
        .args(["run", "--no-prompt", "open mousepad and type hello"])
        .output();
    let run = tokio::time::timeout(TIMEOUT, run).await.unwrap().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("finished"),
        "ufo run failed:\n{out}\n{}\nufo up:\n{}",
        String::from_utf8_lossy(&run.stderr),
        tmux.screen("up")
    );
    assert!(out.contains("keyboard_input"), "{out}");
    let text = mousepad_text(&data.path().join("desktop.env")).await;
    assert!(text.contains("hello"), "mousepad holds {text:?}");

    // The session service is authenticated under ufo up: no token, no answer.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", ports.session))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let refused = ufo_proto::v1::session_store_client::SessionStoreClient::new(channel)
        .list_sessions(ufo_proto::v1::ListSessionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // A second `ufo up` on the same ports refuses, saying why, without touching the running one.
    let second = std::process::Command::new(&ufo)
        .args(&up[1..])
        .env_remove("DISPLAY")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains("ports already in use") && said.contains("another `ufo up`"),
        "{said}"
    );

    // Ctrl-C stops everything (the desktop too); a restart keeps the API key.
    tmux.keys("up", "C-c");
    let stopped = tmux.wait_for("up", "EXITED=").await;
    assert!(stopped.contains("EXITED=0"), "{stopped}");
    tmux.start("up2", &up, &env);
    let screen = tmux.wait_for("up2", "Ctrl-C stops everything").await;
    assert_eq!(token_on(&screen), token, "the API key changed on restart");
    let listed = std::process::Command::new(&ufo)
        .args([
            "--server", &server, "--grpc", &grpc, "--token", &token, "tasks",
        ])
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    tmux.keys("up2", "C-c");
    tmux.wait_for("up2", "EXITED=").await;
}
