//! Visual grounding degrades, it does not stop a task (issue 32): with `--grounding always` and a grounding
//! source that cannot answer — an OmniParser-protocol service that never replies (cut off at
//! `--grounding-timeout-ms`), or a built-in OCR engine whose language data is missing — the real agent,
//! session service and Linux executor run a task on mousepad to its end. The AppAgent's step lists the
//! accessibility controls only, the task's event stream carries a `WARNING` event of that step naming
//! the cause, and the step's REST view says the same.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::grounding_service::{Behaviour, start};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_agent::vision::grounding::GROUNDED_TYPE;
use ufo_client::NewTask;
use ufo_e2e::script::{app, assign, controls, host, target_label};
use ufo_executor::testing::Desktop;
use ufo_proto::v1::{Event, EventKind};
use ufo_testkit::{Cluster, TestDatabase};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The scripted model's answer to a prompt it did not expect (the problem is recorded separately).
fn refuse() -> ScriptedReply {
    ScriptedReply::Status {
        status: 500,
        body: "unexpected prompt".into(),
        retry_after: None,
    }
}

/// Runs "look at the editor" on mousepad with the agent started with `grounding_args`; returns the
/// task's events and its steps' REST views. The AppAgent's prompt must list mousepad's accessible text
/// view and no grounded element.
async fn run_with(grounding_args: &[String]) -> (Vec<Event>, Vec<Value>) {
    let db = TestDatabase::create().await.unwrap();
    let mut desktop = Desktop::start(1024, 700).await.unwrap();
    let backend = desktop.backend().await.unwrap();
    desktop.launch(&backend, "mousepad", &[]).await.unwrap();

    let llm = ScriptedLlm::start().await.unwrap();
    let problems: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut args: Vec<String> = ["--claim-interval-ms", "50", "--llm-max-retries", "0"]
        .map(str::to_owned)
        .to_vec();
    args.extend(grounding_args.iter().cloned());
    let mut cluster = Cluster::builder()
        .database_url(db.url())
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args(args)
        .start()
        .await
        .unwrap();

    let seen = problems.clone();
    llm.push_fn(move |req| match target_label(req, "mousepad") {
        Some(label) => ScriptedReply::Text(assign(&label, "look at the editor").to_string()),
        None => {
            seen.lock().unwrap().push("no mousepad target".into());
            refuse()
        }
    });
    let seen = problems.clone();
    llm.push_fn(move |req| {
        let listed = controls(req);
        let edits = listed.iter().filter(|(_, _, k)| k == "Edit").count();
        let grounded = listed.iter().filter(|(_, _, k)| k == GROUNDED_TYPE).count();
        if edits == 1 && grounded == 0 {
            ScriptedReply::Text(app("FINISH", json!([]), "the editor is empty").to_string())
        } else {
            seen.lock().unwrap().push(format!(
                "expected mousepad's text view and no grounded element, got {listed:?}"
            ));
            refuse()
        }
    });
    llm.push(ScriptedReply::Text(
        host("FINISH", json!({"result": "looked"})).to_string(),
    ));

    let agent = ufo_e2e::agent(&cluster).unwrap();
    let task = agent
        .submit(&NewTask {
            max_steps: Some(6),
            timeout_seconds: Some(90),
            ..NewTask::request("Look at the text editor")
        })
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    let events = tokio::time::timeout(TIMEOUT, agent.events_until_end(&id, 1))
        .await
        .unwrap_or_else(|_| panic!("the stream did not end\n{}", cluster.logs()))
        .unwrap();
    let problems = problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "{problems:#?}\n{}", cluster.logs());
    let done = agent.get(&id).await.unwrap();
    assert_eq!(done["status"], "finished", "{done:#}\n{}", cluster.logs());
    let steps = agent.all_steps(&id).await.unwrap();
    cluster.stop().await.unwrap();
    drop(desktop);
    (events, steps)
}

/// The WARNING events as `(step, message)`.
fn warnings(events: &[Event]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Warning as i32)
        .map(|e| {
            let payload = ufo_proto::json::from_struct(e.payload.clone().unwrap_or_default());
            assert_eq!(payload["source"], "app_agent", "{payload}");
            (e.step, payload["message"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// One warning, of the AppAgent's step (step 2), containing `cause`; the step's view says it too.
fn check(events: &[Event], steps: &[Value], cause: &str) {
    let found = warnings(events);
    assert_eq!(found.len(), 1, "{found:?}");
    let (step, message) = &found[0];
    assert_eq!(*step, 2, "the AppAgent's step: {found:?}");
    assert!(
        message.starts_with("visual grounding failed") && message.contains(cause),
        "{message}"
    );
    let app_step = steps.iter().find(|s| s["step"] == 2).unwrap();
    assert_eq!(app_step["warnings"], json!([message]), "{app_step:#}");
    let host_step = steps.iter().find(|s| s["step"] == 1).unwrap();
    assert!(host_step.get("warnings").is_none(), "{host_step:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grounding_service_that_never_answers_is_cut_off_and_the_step_goes_on() {
    let service = start(Behaviour::Hang).await.unwrap();
    let args = [
        "--grounding",
        "always",
        "--grounding-url",
        &service.url,
        "--grounding-timeout-ms",
        "400",
    ]
    .map(str::to_owned);
    let (events, steps) = run_with(&args).await;
    assert!(service.calls() >= 1, "the service was asked");
    check(&events, &steps, "grounding took longer than 400ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ocr_engine_is_a_warning_and_the_step_goes_on() {
    let empty = tempfile::tempdir().unwrap();
    let args = [
        "--grounding",
        "always",
        "--grounding-tessdata",
        empty.path().to_str().unwrap(),
    ]
    .map(str::to_owned);
    let (events, steps) = run_with(&args).await;
    check(&events, &steps, "the OCR engine is not available");
}
