//! Issue 35: under `ufo up` (one runner slot) a task waiting for a person gives its slot up. `ufo up`
//! starts `ufo-session`, `ufo-executor` on a private headless desktop and `ufo-agent` as child processes;
//! the real HostAgent talks to a scripted OpenAI-compatible model (passed through the environment, as a
//! user would). Three tasks are submitted with `ufo run --detach`: the first asks a question; the other
//! two finish before anybody answers; `ufo show` says the first waits for a person; `ufo answer` queues
//! it again and it finishes too.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_testkit::{ProcessBuilder, free_port, poll_until, workspace_binary};

/// The marker of the task that asks, and the answer the person gives.
const ASKS: &str = "PARKME";
const ANSWER: &str = "cobalt-7";

fn host(status: &str, extra: Value) -> String {
    let mut v = json!({"observation": "an empty desktop", "thought": "think", "status": status, "plan": []});
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    v.to_string()
}

struct Cli {
    rest: String,
    grpc: String,
    token: String,
}

impl Cli {
    async fn run(&self, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
            .args([
                "--server",
                &self.rest,
                "--grpc",
                &self.grpc,
                "--token",
                &self.token,
            ])
            .args(args)
            .env_remove("UFO_SERVER")
            .env_remove("UFO_GRPC")
            .env_remove("UFO_TOKEN")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap()
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "ufo {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    async fn task(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["show", "--json", id]).await).unwrap()
    }

    async fn wait_status(&self, id: &str, status: &str, logs: impl Fn() -> String) -> Value {
        let seen = poll_until(
            &format!("task {id} {status}"),
            Duration::from_secs(120),
            Duration::from_millis(100),
            || async move {
                let task = self.task(id).await;
                if task["status"] == status {
                    Ok(Some(task))
                } else {
                    Err(task.to_string())
                }
            },
        )
        .await;
        seen.unwrap_or_else(|e| panic!("{e}\n{}", logs()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ufo_up_a_task_waiting_for_an_answer_lets_the_others_finish() {
    let llm = ScriptedLlm::start().await.unwrap();
    // One reply for any HostAgent call: the asking task asks until its prompt carries the answer; every
    // other task (and the asking one once answered) finishes at once.
    for _ in 0..20 {
        llm.push_fn(|req| {
            let text = req.text();
            ScriptedReply::Text(if text.contains(ASKS) && !text.contains(ANSWER) {
                host("PENDING", json!({"questions": ["Which colour?"]}))
            } else if text.contains(ASKS) {
                host("FINISH", json!({"result": format!("noted {ANSWER}")}))
            } else {
                host("FINISH", json!({"result": "nothing to do"}))
            })
        });
    }
    let bin_dir = workspace_binary("ufo-agent")
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let data = tempfile::tempdir().unwrap();
    let (http, grpc, session, executor) = (
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
    );
    let mut up = ProcessBuilder::new("ufo up", env!("CARGO_BIN_EXE_ufo"))
        .args(["up", "--desktop", "headless"])
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--data-dir")
        .arg(data.path())
        .args(["--http-port", &http.to_string()])
        .args(["--grpc-port", &grpc.to_string()])
        .args(["--session-port", &session.to_string()])
        .args(["--executor-port", &executor.to_string()])
        .env("UFO_LLM_BASE_URL", llm.base_url())
        .env("UFO_LLM_API_KEY", "test-llm-key")
        .env("UFO_AGENT_CLAIM_INTERVAL_MS", "50")
        .env_remove("UFO_AGENT_RUNNER_SLOTS")
        .env_remove("DISPLAY")
        .env_remove("UFO_TOKEN")
        .env_remove("UFO_OTLP_ENDPOINT")
        .spawn()
        .unwrap();
    up.wait_for_log("Ctrl-C stops everything", Duration::from_secs(180))
        .await
        .unwrap();
    let logs = up.logs();
    let token = logs
        .lines()
        .find_map(|l| l.trim().strip_prefix("export UFO_TOKEN="))
        .unwrap_or_else(|| panic!("no API key printed:\n{logs}"))
        .to_owned();
    let service_logs = || {
        ["ufo-agent.log", "ufo-executor.log"]
            .iter()
            .map(|name| {
                let path = data.path().join("logs").join(name);
                format!(
                    "--- {name}\n{}",
                    std::fs::read_to_string(&path).unwrap_or_default()
                )
            })
            .collect::<String>()
    };
    let cli = Cli {
        rest: format!("http://127.0.0.1:{http}"),
        grpc: format!("http://127.0.0.1:{grpc}"),
        token,
    };

    let asks = cli
        .ok(&[
            "run",
            "--detach",
            &format!("{ASKS}: note the colour the person names"),
        ])
        .await
        .trim()
        .to_owned();
    let others = [
        cli.ok(&["run", "--detach", "the second task"]).await,
        cli.ok(&["run", "--detach", "the third task"]).await,
    ]
    .map(|id| id.trim().to_owned());
    let waiting = cli.wait_status(&asks, "waiting", &service_logs).await;
    assert_eq!(waiting["waiting_for"]["reason"], "question", "{waiting}");
    let shown = cli.ok(&["show", &asks]).await;
    assert!(shown.contains("waiting  for a person to answer"), "{shown}");

    // Nobody has answered: the slot went to the other two, which finish.
    for id in &others {
        let task = cli.wait_status(id, "finished", &service_logs).await;
        assert_eq!(task["result"], "nothing to do", "{task}");
    }
    let still = cli.task(&asks).await;
    assert_eq!(still["status"], "waiting", "{still}");
    assert_eq!(still["pending_questions"][0]["question"], "Which colour?");

    cli.ok(&["answer", &asks, ANSWER]).await;
    let done = cli.wait_status(&asks, "finished", &service_logs).await;
    assert_eq!(done["result"], format!("noted {ANSWER}"), "{done}");

    let status = up.stop().await.unwrap().unwrap();
    assert!(status.success(), "{status}\n{}", up.logs());
}
