//! `ufo replay` against the real services (issue 20): `ufo-session`, `ufo-executor` on a private Xvfb
//! desktop and `ufo-agent` as separate processes. A task recorded with a scripted model (answer Yes in a
//! zenity question) is replayed with `ufo replay last` on a fresh dialog: the replay follows live to
//! `finished` with no model call (the script is empty: any call would fail the task), `ufo show` says
//! how many steps were replayed, and a task that has not finished cannot be replayed.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
use support::{out, ufo};

use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::{RecordedRequest, ScriptedLlm, ScriptedReply};
use ufo_executor::testing::Desktop;
use ufo_testkit::{Cluster, poll_until};

/// A reply computed from the prompt (a 500 naming what was missing when it cannot be).
fn push(llm: &ScriptedLlm, f: impl Fn(&RecordedRequest) -> Option<Value> + Send + Sync + 'static) {
    llm.push_fn(move |req| match f(req) {
        Some(reply) => ScriptedReply::Text(reply.to_string()),
        None => ScriptedReply::Status {
            status: 500,
            body: format!("the script found nothing to act on in: {}", req.text()),
            retry_after: None,
        },
    });
}

/// The label on the prompt's line (a JSON object or array) naming `name`.
fn label(req: &RecordedRequest, name: &str) -> Option<String> {
    req.text().lines().find_map(|l| {
        let v: Value = serde_json::from_str(l.trim().trim_end_matches(',')).ok()?;
        match &v {
            Value::Object(_) if v["name"].as_str()?.contains(name) => {
                v["label"].as_str().map(str::to_owned)
            }
            Value::Array(a) if a.get(1)?.as_str()? == name => a[0].as_str().map(str::to_owned),
            _ => None,
        }
    })
}

async fn json_of(cluster: &Cluster, id: &str) -> Value {
    let shown = ufo(cluster, &["show", "--json", id]).await;
    serde_json::from_slice(&shown.stdout).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ufo_replay_runs_a_finished_task_again_without_the_model() {
    let mut desktop = Desktop::start(1024, 700).await.unwrap();
    let backend = desktop.backend().await.unwrap();
    let question = [
        "--question",
        "--title",
        "Old reports",
        "--text",
        "Delete the old reports?",
    ];
    desktop.launch(&backend, "zenity", &question).await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    push(&llm, |req| {
        Some(
            json!({"observation": "a dialog", "thought": "answer it", "status": "ASSIGN",
                    "current_subtask": "answer Yes", "message": "",
                    "function": "select_application_window",
                    "arguments": {"id": label(req, "Old reports")?}, "plan": []}),
        )
    });
    push(&llm, |req| {
        Some(
            json!({"observation": "the question", "thought": "yes", "status": "FINISH",
                    "action": {"function": "click_input", "arguments": {"id": label(req, "Yes")?}},
                    "result": "answered", "plan": []}),
        )
    });
    push(&llm, |_| {
        Some(
            json!({"observation": "done", "thought": "done", "status": "FINISH",
                    "result": "answered Yes", "plan": []}),
        )
    });
    let cluster = Cluster::builder()
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args(["--claim-interval-ms", "50", "--llm-max-retries", "0"])
        .start()
        .await
        .unwrap();

    let recorded = ufo(&cluster, &["run", "answer Yes in the Old reports dialog"]).await;
    assert!(
        recorded.status.success(),
        "{}\n{}",
        out(&recorded),
        cluster.logs()
    );
    assert_eq!(llm.requests().len(), 3);
    let original = json_of(&cluster, "last").await;
    assert_eq!(original["status"], "finished", "{original}");
    let original = original["id"].as_str().unwrap().to_owned();

    // A task that has not finished cannot be replayed: the service's 409 reaches the user.
    let unfinished = ufo(
        &cluster,
        &["run", "--detach", "--max-steps", "1", "never mind"],
    )
    .await;
    let unfinished = String::from_utf8(unfinished.stdout)
        .unwrap()
        .trim()
        .to_owned();
    let refused = ufo(&cluster, &["replay", &unfinished]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", out(&refused));
    assert!(out(&refused).contains("HTTP 409"), "{}", out(&refused));
    poll_until(
        "the unfinished task to end",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let cluster = &cluster;
            let id = unfinished.clone();
            async move {
                let t = json_of(cluster, &id).await;
                match t["status"].as_str() {
                    Some("failed" | "finished" | "cancelled") => Ok(Some(())),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await
    .unwrap();
    let calls = llm.requests().len();

    // A fresh dialog, and the recording replayed: no model call (the script is empty).
    desktop.launch(&backend, "zenity", &question).await.unwrap();
    let replayed = ufo(&cluster, &["replay", &original]).await;
    let text = out(&replayed);
    assert!(replayed.status.success(), "{text}\n{}", cluster.logs());
    assert!(text.contains(&format!("replays {original}")), "{text}");
    assert!(text.contains("finished: answered Yes"), "{text}");
    assert_eq!(llm.requests().len(), calls, "no model call in a replay");
    let shown = ufo(&cluster, &["show", "last"]).await;
    assert!(
        out(&shown).contains(&format!(
            "replay   of {original} (on mismatch: fail): 3 steps replayed, 0 fell back to the model"
        )),
        "{}",
        out(&shown)
    );
    // The dialog was answered: it is gone.
    poll_until(
        "the dialog to close",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let backend = &backend;
            async move {
                use ufo_executor::backend::Backend as _;
                let open = backend
                    .windows()
                    .await
                    .map_err(|e| e.to_string())?
                    .iter()
                    .any(|w| w.title == "Old reports");
                if open {
                    Err("still open".to_owned())
                } else {
                    Ok(Some(()))
                }
            }
        },
    )
    .await
    .unwrap();
}
