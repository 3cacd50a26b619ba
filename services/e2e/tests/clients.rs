//! The generated API clients (issue 35) against a running agent: `ufo-session` and `ufo-agent` as separate
//! processes (SQLite store), the executor stand-in (`ufo_e2e::standin`, one "Notes" window whose
//! screenshots are real PNGs) and the scripted OpenAI-compatible model. For each client, its smoke script
//! (`clients/python/smoke.sh`, `clients/typescript/smoke.sh`) generates the client from the agent's
//! `/openapi.json` with the pinned generator (openapi-python-client; openapi-typescript + openapi-fetch,
//! compiled by tsc in strict mode), then submits a task, follows its server-sent events, answers the
//! question the model asks, approves the action it holds, and fetches a step's screenshot. The test fails
//! when a script fails, and checks independently what the script claims: the answer reached the model's
//! next prompt (the task's result quotes it), the approval carries the script's reason, the held click ran
//! once on its target, and the screenshot the script saved is the one the API serves.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::testing::{RecordedRequest, ScriptedLlm, ScriptedReply};
use ufo_e2e::script::{app, assign, control, host, target_label};
use ufo_e2e::standin::{StandInExecutor, notes_desktop};
use ufo_proto::v1::EventKind;
use ufo_testkit::Cluster;

const QUESTION: &str = "Which colour should the note be?";

/// Script failures are recorded here (a panic inside the LLM server would only surface as an HTTP error).
type Problems = Arc<Mutex<Vec<String>>>;

/// Queues a reply computed from the prompt; `None` records `what` as a problem and answers 500.
fn push(
    llm: &ScriptedLlm,
    problems: &Problems,
    what: &'static str,
    f: impl Fn(&RecordedRequest) -> Option<Value> + Send + Sync + 'static,
) {
    let problems = problems.clone();
    llm.push_fn(move |req| match f(req) {
        Some(reply) => ScriptedReply::Text(reply.to_string()),
        None => {
            problems
                .lock()
                .unwrap()
                .push(format!("{what}; prompt:\n{}", req.text()));
            ScriptedReply::Status {
                status: 500,
                body: json!({"error": {"message": what}}).to_string(),
                retry_after: None,
            }
        }
    });
}

/// One task's model: ask a question; with the answer in the prompt, hand the Notes window a subtask; hold
/// a click on its Title for confirmation; finish the subtask; finish the task quoting the answer.
fn script(llm: &ScriptedLlm, problems: &Problems, answer: &'static str) {
    llm.push_json(&host("PENDING", json!({"questions": [QUESTION]})));
    push(llm, problems, "no answer or no Notes target", move |req| {
        req.text().contains(answer).then_some(())?;
        Some(assign(
            &target_label(req, "Notes")?,
            "click the note's title",
        ))
    });
    push(llm, problems, "no Title control", |req| {
        Some(app(
            "CONFIRM",
            json!({"function": "click_input", "arguments": {"id": control(req, "Title", "Edit")?}}),
            "",
        ))
    });
    llm.push_json(&app("FINISH", Value::Null, "clicked the title"));
    push(
        llm,
        problems,
        "the answer is not in the prompt",
        move |req| {
            req.text().contains(answer).then_some(())?;
            Some(host(
                "FINISH",
                json!({"result": format!("the note is {answer}"), "comment": "done"}),
            ))
        },
    );
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients")
}

/// Runs one client's smoke script against the cluster; its JSON summary (the last stdout line) and the
/// screenshot it saved.
async fn smoke(
    cluster: &Cluster,
    client: &str,
    answer: &str,
    reason: &str,
    scratch: &Path,
) -> (Value, Vec<u8>) {
    let script = clients_dir().join(client).join("smoke.sh");
    let work = scratch.join(client);
    let shot = scratch.join(format!("{client}.png"));
    let run = tokio::process::Command::new(&script)
        .arg(&work)
        .env("UFO_URL", &cluster.rest_url)
        .env("UFO_TOKEN", &cluster.api_key)
        .env("UFO_REQUEST", format!("colour the note ({client})"))
        .env("UFO_ANSWER", answer)
        .env("UFO_REASON", reason)
        .env("UFO_SCREENSHOT_OUT", &shot)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .unwrap_or_else(|_| panic!("{client}'s smoke script did not end in 300 s"))
        .unwrap_or_else(|e| panic!("{} cannot start: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{client}'s smoke script failed ({}):\n{stdout}\n{stderr}\n{}",
        output.status,
        cluster.logs()
    );
    let summary = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{client}: no JSON summary last:\n{stdout}\n{stderr}"));
    (summary, std::fs::read(&shot).unwrap())
}

/// What the script reports, checked against the agent itself.
async fn check(
    cluster: &Cluster,
    client: &str,
    summary: &Value,
    shot: &[u8],
    answer: &str,
    reason: &str,
) {
    let id = summary["id"].as_str().unwrap();
    assert_eq!(summary["status"], "finished", "{client}: {summary}");
    assert_eq!(
        summary["result"],
        format!("the note is {answer}"),
        "{client}: {summary}"
    );
    assert_eq!(
        (&summary["answered"], &summary["approved"]),
        (&json!(1), &json!(1)),
        "{client}: {summary}"
    );
    let kinds: Vec<&str> = summary["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for kind in [
        "task_created",
        "question_asked",
        "question_answered",
        "action_held",
        "action_approved",
        "task_finished",
    ] {
        assert!(kinds.contains(&kind), "{client} saw no {kind}: {kinds:?}");
    }

    let agent = ufo_e2e::agent(cluster).unwrap();
    let task = agent.get(id).await.unwrap();
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["result"], format!("the note is {answer}"), "{task}");
    assert_eq!(summary["last_seq"], task["last_seq"], "{client}: {summary}");
    let events = agent.events_until_end(id, 1).await.unwrap();
    let approvals: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == EventKind::ActionApproved as i32)
        .map(|e| ufo_proto::json::from_optional_struct(e.payload.clone()))
        .collect();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["reason"], reason);
    let steps = agent.steps(id, None, None).await.unwrap();
    let clicks: Vec<&Value> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["actions"].as_array().unwrap())
        .filter(|a| a["function"] == "click_input")
        .collect();
    assert_eq!(clicks.len(), 1, "the held click ran once: {steps}");
    assert_eq!(clicks[0]["target_name"], "Title");

    let n = &summary["screenshot_step"];
    let served = ufo_testkit::http_client()
        .get(format!(
            "{}/v1/tasks/{id}/steps/{n}/screenshot?kind=clean",
            cluster.rest_url
        ))
        .bearer_auth(&cluster.api_key)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(served.starts_with(b"\x89PNG"), "a PNG");
    assert_eq!(
        shot,
        &served[..],
        "{client} saved the screenshot the API serves"
    );
    assert_eq!(summary["screenshot_bytes"], served.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_python_and_typescript_clients_drive_a_task_to_its_end() {
    let executor = StandInExecutor::start(Arc::new(notes_desktop()))
        .await
        .unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    let problems: Problems = Arc::default();
    let cluster = Cluster::builder()
        .remote_executor(executor.url())
        .llm_base_url(llm.base_url())
        .agent_args(["--claim-interval-ms", "50", "--llm-max-retries", "0"])
        .start()
        .await
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();

    // The document the generators read is valid OpenAPI 3.1 (openapi-spec-validator).
    let doc = ufo_testkit::http_client()
        .get(format!("{}/openapi.json", cluster.rest_url))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let doc_path = scratch.path().join("openapi.json");
    std::fs::write(&doc_path, &doc).unwrap();
    let validated = tokio::process::Command::new("python3")
        .args([
            "-c",
            "import json, sys; from openapi_spec_validator import validate; \
             validate(json.load(open(sys.argv[1]))); print('valid')",
        ])
        .arg(&doc_path)
        .output()
        .await
        .unwrap();
    assert!(
        validated.status.success(),
        "/openapi.json is not valid OpenAPI:\n{}",
        String::from_utf8_lossy(&validated.stderr)
    );

    for (client, answer, reason) in [
        ("python", "blue", "approved from Python"),
        ("typescript", "green", "approved from TypeScript"),
    ] {
        script(&llm, &problems, answer);
        let (summary, shot) = smoke(&cluster, client, answer, reason, scratch.path()).await;
        let problems = problems.lock().unwrap().clone();
        assert!(problems.is_empty(), "{client}: {problems:#?}");
        assert_eq!(
            llm.remaining(),
            0,
            "{client}: the model's script was not used up"
        );
        check(&cluster, client, &summary, &shot, answer, reason).await;
        eprintln!("{client}: {summary}");
    }
}
