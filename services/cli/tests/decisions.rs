//! The CLI around a person's decisions (issue 35, finding 6), against the real services: `ufo-session`,
//! `ufo-executor` on a private Xvfb desktop and `ufo-agent` with a scripted OpenAI-compatible model.
//! - `ufo run` prompting for a held action withdraws the prompt when the action is decided elsewhere,
//!   and exits 0 when the task then finishes (no input is ever typed);
//! - a decision prints the task's status after it (not the `waiting` from before);
//! - `ufo request` on a task holding an action says so; `ufo show` shows the cancel reason;
//! - `ufo screenshot` names files by the whole task id and never overwrites one;
//! - `ufo replay` of a task with a follow-up round replays both rounds without the model.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
use support::{command, out, ufo};

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use ufo_agent::testing::ScriptedLlm;
use ufo_executor::testing::Desktop;
use ufo_testkit::{Cluster, poll_until};

fn host(status: &str, extra: Value) -> Value {
    let mut v =
        json!({"observation": "the desktop", "thought": "think", "status": status, "plan": []});
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    v
}

fn hold_launch() -> Value {
    host(
        "CONFIRM",
        json!({"function": "launch_application", "arguments": {"name": "mousepad"},
               "comment": "opens an editor"}),
    )
}

async fn cluster(llm: &ScriptedLlm, desktop: &Desktop) -> Cluster {
    Cluster::builder()
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args(["--claim-interval-ms", "50", "--llm-max-retries", "0"])
        .start()
        .await
        .unwrap()
}

async fn json_of(cluster: &Cluster, id: &str) -> Value {
    let shown = ufo(cluster, &["show", "--json", id]).await;
    serde_json::from_slice(&shown.stdout).unwrap_or(Value::Null)
}

/// Waits until task `id` satisfies `check` (read through `ufo show --json`).
async fn wait_task(cluster: &Cluster, id: &str, what: &str, check: fn(&Value) -> bool) -> Value {
    poll_until(
        what,
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let id = id.to_owned();
            async move {
                let t = json_of(cluster, &id).await;
                if check(&t) {
                    Ok(Some(t))
                } else {
                    Err(t.to_string())
                }
            }
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_decisions_follow_ups_cancel_reasons_and_screenshot_names() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_json(&hold_launch());
    llm.push_json(&host(
        "FINISH",
        json!({"result": "nothing to launch", "comment": "done"}),
    ));
    llm.push_json(&hold_launch());
    let desktop = Desktop::start(800, 600).await.unwrap();
    let cluster = cluster(&llm, &desktop).await;

    // `ufo run` prompts (stdin open, nothing typed); the action is rejected from another `ufo`.
    let mut run = command(&cluster, &cluster.api_key, &["run", "launch an editor"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let _stdin = run.stdin.take().unwrap();
    let mut stdout = BufReader::new(run.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut first))
        .await
        .unwrap()
        .unwrap();
    let id = first
        .strip_prefix("task ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("first line names the task: {first}"))
        .to_owned();
    let held = wait_task(&cluster, &id, "the held action", |t| {
        t["held_action"]["id"].is_string()
    })
    .await;
    assert_eq!(held["held_action"]["function"], "launch_application");
    let rejected = ufo(
        &cluster,
        &["confirm", &id, "--reject", "--reason", "decided elsewhere"],
    )
    .await;
    assert!(rejected.status.success(), "{}", out(&rejected));
    let said = out(&rejected);
    // The status after the decision: the task goes on (before: "rejected; task is waiting").
    assert!(
        ["queued", "running", "finished"]
            .iter()
            .any(|s| said.contains(&format!("rejected; task is {s}"))),
        "{said}"
    );
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(60), stdout.read_to_string(&mut rest))
        .await
        .unwrap_or_else(|_| panic!("ufo run still waits at its stale prompt:\n{first}{rest}"))
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        rest.contains("(prompt withdrawn: rejected elsewhere)"),
        "{first}{rest}"
    );
    assert!(
        rest.contains("finished: nothing to launch"),
        "{first}{rest}"
    );
    assert_eq!(
        status.code(),
        Some(0),
        "a finished task exits 0:\n{first}{rest}"
    );

    // A follow-up to a task holding an action says what it waits for; the cancel reason is shown.
    let second = ufo(&cluster, &["run", "--detach", "launch it again"]).await;
    let second = String::from_utf8(second.stdout).unwrap().trim().to_owned();
    wait_task(&cluster, &second, "the second hold", |t| {
        t["held_action"]["id"].is_string()
    })
    .await;
    let requested = ufo(
        &cluster,
        &["request", &second, "then type hello", "--detach"],
    )
    .await;
    assert!(requested.status.success(), "{}", out(&requested));
    assert!(
        out(&requested).contains("holds an action for confirmation: launch_application"),
        "{}",
        out(&requested)
    );
    let cancelled = ufo(&cluster, &["cancel", &second, "--reason", "not needed"]).await;
    assert!(cancelled.status.success(), "{}", out(&cancelled));
    wait_task(&cluster, &second, "the cancel", |t| {
        t["status"] == "cancelled"
    })
    .await;
    let shown = ufo(&cluster, &["show", &second]).await;
    assert!(
        out(&shown).contains("cancel   requested: not needed"),
        "{}",
        out(&shown)
    );

    // Screenshot files: the whole id in the name, and a second save of the same step gets a new name.
    let dir = tempfile::tempdir().unwrap();
    let save = |task: &str| {
        let mut c = command(&cluster, &cluster.api_key, &["screenshot", task, "1"]);
        c.current_dir(dir.path());
        c
    };
    let mut saved = Vec::new();
    for task in [&id, &id, &second] {
        let output = save(task).output().await.unwrap();
        assert!(output.status.success(), "{}", out(&output));
        let name = String::from_utf8(output.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        assert!(name.starts_with(task.as_str()), "{name}");
        saved.push(name);
    }
    assert_ne!(
        saved[0], saved[1],
        "a second save must not overwrite the first"
    );
    assert!(saved[1].contains("-2."), "{saved:?}");
    for name in &saved {
        assert!(
            std::fs::read(dir.path().join(name))
                .unwrap()
                .starts_with(b"\x89PNG"),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_task_with_a_follow_up_replays_both_rounds() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_json(&host(
        "FINISH",
        json!({"result": "round one done", "comment": "done"}),
    ));
    llm.push_json(&host(
        "FINISH",
        json!({"result": "round two done", "comment": "done"}),
    ));
    let desktop = Desktop::start(800, 600).await.unwrap();
    let cluster = cluster(&llm, &desktop).await;

    let first = ufo(&cluster, &["run", "--no-prompt", "look at the desktop"]).await;
    assert!(
        first.status.success(),
        "{}\n{}",
        out(&first),
        cluster.logs()
    );
    let follow_up = ufo(&cluster, &["request", "last", "look again", "--no-prompt"]).await;
    assert!(follow_up.status.success(), "{}", out(&follow_up));
    assert!(
        out(&follow_up).contains("round two done"),
        "{}",
        out(&follow_up)
    );
    let original = json_of(&cluster, "last").await;
    assert_eq!(
        original["rounds"].as_array().unwrap().len(),
        2,
        "{original}"
    );
    let calls = llm.requests().len();

    let replayed = ufo(&cluster, &["replay", "last", "--no-prompt"]).await;
    let text = out(&replayed);
    assert!(replayed.status.success(), "{text}\n{}", cluster.logs());
    assert!(text.contains("finished: round two done"), "{text}");
    assert_eq!(llm.requests().len(), calls, "no model call in a replay");
    let replay = json_of(&cluster, "last").await;
    let rounds: Vec<(&str, &str)> = replay["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["request"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rounds,
        [
            ("look at the desktop", "finished"),
            ("look again", "finished")
        ],
        "{replay}"
    );
    assert_eq!(replay["replay"]["replayed"], 2, "{replay}");
}
