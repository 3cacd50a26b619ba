//! The runner with the real agents ([`AgentsDriver`] over `round::Round`): the scripted OpenAI-compatible
//! LLM server (`ufo_agent::testing::ScriptedLlm`) and the executor double, the real session service on a
//! fresh Postgres database, the agent's REST API. A question asked by the HostAgent is answered through the
//! API and reaches the next prompt; a runner process killed with SIGKILL mid-step is replaced by another
//! that finishes the task; two runner processes share 20 tasks and run each exactly once (one LLM call per
//! recorded step). Runner processes are this test binary re-executed (see `runner_child`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::api_support::{Agent, Session, agent_config, call, eventually};
use crate::common;
use serde_json::{Value, json};
use ufo_agent::agents::AgentSettings;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_proto::v1::{EventKind, ListStepsRequest};

#[tokio::test]
async fn the_agents_ask_wait_for_the_answer_and_finish() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let services = common::services(&llm, AgentSettings::default());
    let desktop = Arc::new(common::desktop());
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
    ));
    let agent = Agent::start(
        agent_config(
            &session.url,
            &[
                "--lease-ms",
                "5000",
                "--claim-interval-ms",
                "50",
                "--no-desktop-reset",
            ],
        ),
        Some(driver),
    )
    .await;
    llm.push_json(&common::host(
        "PENDING",
        json!({"questions": ["Which file?"]}),
    ));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "opened report.txt", "comment": "done"}),
    ));

    let http = ufo_testkit::http_client();
    let task = call(
        &http,
        reqwest::Method::POST,
        format!("{}/v1/tasks", agent.http),
        Some(json!({"request": "open the report"})),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", agent.http);
    let waiting = eventually(60, "the question", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "waiting").then_some(t)
    })
    .await;
    assert_eq!(waiting["pending_questions"][0]["question"], "Which file?");
    assert_eq!(waiting["state"], "HostAgent:PENDING");
    call(
        &http,
        reqwest::Method::POST,
        format!("{url}/answers"),
        Some(json!({"answers": ["report.txt"], "question_ids": [waiting["pending_questions"][0]["id"]]})),
    )
    .await;
    let done = eventually(60, "the end", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "finished").then_some(t)
    })
    .await;
    assert_eq!(done["totals"]["steps"], 2);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].text().contains("report.txt"),
        "the answer reaches the next prompt"
    );
    let steps = call(&http, reqwest::Method::GET, format!("{url}/steps"), None).await;
    assert_eq!(steps["steps"][0]["state_after"], "PENDING");
    assert!(
        !steps["steps"][0]["screenshots"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the desktop screenshot is stored"
    );
    // One answer: one QUESTION_ANSWERED event and one blackboard entry for it (next to the question's).
    let all = session.events(&id).await;
    assert!(gapless(&all));
    assert_eq!(count(&all, EventKind::QuestionAsked), 1);
    assert_eq!(count(&all, EventKind::QuestionAnswered), 1);
    let board = session
        .client()
        .get_blackboard(ufo_proto::v1::GetBlackboardRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let texts: Vec<Value> = board
        .questions
        .iter()
        .map(|e| ufo_proto::json::from_optional_struct(e.value.clone()))
        .collect();
    assert_eq!(texts.len(), 2, "the question and its answer: {texts:?}");
    assert_eq!(
        texts.iter().filter(|q| q["answer"] == "report.txt").count(),
        1
    );
    assert_eq!(
        texts[0]["id"], texts[1]["id"],
        "the answer names the question"
    );
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn a_model_reply_with_nul_is_recorded_sanitised_in_one_call() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let services = common::services(&llm, AgentSettings::default());
    let desktop = Arc::new(common::desktop());
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
    ));
    let agent = Agent::start(
        agent_config(
            &session.url,
            &[
                "--lease-ms",
                "5000",
                "--claim-interval-ms",
                "50",
                "--no-desktop-reset",
            ],
        ),
        Some(driver),
    )
    .await;
    // NUL in the thought, the plan and the result: the store refuses NUL in text and JSON.
    llm.push_json(&common::host(
        "FINISH",
        json!({"thought": "I see\u{0}it", "plan": ["a\u{0}"], "result": "done\u{0}", "comment": "x"}),
    ));
    let http = ufo_testkit::http_client();
    let task = call(
        &http,
        reqwest::Method::POST,
        format!("{}/v1/tasks", agent.http),
        Some(json!({"request": "look"})),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", agent.http);
    let done = eventually(60, "the end", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "finished" || t["status"] == "failed").then_some(t)
    })
    .await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["result"], "done\u{FFFD}");
    assert_eq!(
        llm.requests().len(),
        1,
        "one model call, no claim/release loop"
    );
    let steps = session.steps(&id).await;
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].thought, "I see\u{FFFD}it");
    agent.stop().await;
    session.stop().await;
}

/// The entry point of a runner child process: the real agents with the parent's scripted LLM server and
/// an executor double of its own. Does nothing unless started by [`spawn_runner`].
#[tokio::test]
#[ignore = "runs only as a child process of the process tests"]
async fn runner_child() {
    let Ok(session_url) = std::env::var("UFO_TEST_CHILD_SESSION_URL") else {
        return;
    };
    let llm_url = std::env::var("UFO_TEST_CHILD_LLM_URL").unwrap();
    let model = |name: &str| {
        let mut config = ufo_agent::llm::openai::OpenAiConfig::openai(llm_url.clone(), name);
        config.retry = common::fast_retry();
        Arc::new(
            ufo_agent::llm::openai::OpenAiCompatible::new(
                config,
                Arc::new(ufo_agent::llm::PriceTable::new().with(name, 1.0, 2.0)),
            )
            .unwrap(),
        )
    };
    let services = ufo_agent::agents::AgentServices {
        host_model: model("host-model"),
        app_model: model("app-model"),
        marker: common::marker(),
        grounding: None,
        knowledge: None,
        replay: None,
        reuse: None,
        settings: Arc::new(AgentSettings::default()),
        uploads: None,
        mcp: None,
    };
    let desktop = Arc::new(common::desktop());
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
    ));
    let mut config = agent_config(
        &session_url,
        &[
            "--lease-ms",
            "1500",
            "--claim-interval-ms",
            "50",
            "--no-desktop-reset",
        ],
    );
    config.runner.slots = 2;
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = ufo_common::shutdown::signal_token();
    ufo_agent::run(
        config,
        ufo_agent::Listeners { grpc, http },
        Some(driver),
        shutdown,
    )
    .await
    .unwrap();
}

fn spawn_runner(session: &Session, llm: &ScriptedLlm) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "api_agents::runner_child",
            "--nocapture",
        ])
        .env("UFO_TEST_CHILD_SESSION_URL", &session.url)
        .env("UFO_TEST_CHILD_LLM_URL", llm.base_url())
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn count(events: &[ufo_proto::v1::Event], kind: EventKind) -> usize {
    events.iter().filter(|e| e.kind == kind as i32).count()
}

fn gapless(events: &[ufo_proto::v1::Event]) -> bool {
    events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1)
}

/// Holds the LLM call it is given until released (the step is in flight while the test kills its runner).
#[derive(Default)]
struct Gate {
    released: Mutex<bool>,
    cond: Condvar,
}

impl Gate {
    fn wait(&self) {
        let guard = self.released.lock().unwrap();
        let _unused = self
            .cond
            .wait_timeout_while(guard, Duration::from_secs(60), |released| !*released)
            .unwrap();
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.cond.notify_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_survives_sigkill_of_its_runner_with_the_real_agents() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Gate::default());
    for _ in 0..8 {
        let (calls, gate) = (calls.clone(), gate.clone());
        llm.push_fn(move |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 3 {
                // Step 3 of the first runner: in flight until that runner is dead. The reply function is
                // synchronous; `block_in_place` hands this worker's queued tasks to another thread.
                tokio::task::block_in_place(|| gate.wait());
            }
            let reply = if n >= 5 {
                common::host("FINISH", json!({"result": "done", "comment": "done"}))
            } else {
                common::host("CONTINUE", json!({"comment": format!("call {n}")}))
            };
            ScriptedReply::Text(reply.to_string())
        });
    }
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let http = ufo_testkit::http_client();
    let task = call(
        &http,
        reqwest::Method::POST,
        format!("{}/v1/tasks", api_agent.http),
        Some(json!({"request": "keep looking"})),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", api_agent.http);

    let mut first = spawn_runner(&session, &llm);
    eventually(60, "step 3 in flight", || async {
        (calls.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    // Step 2 is recorded ahead (`--record-ahead`): its commit may still be in flight when the model is
    // asked for step 3, and it completes while call 3 is held. A host step without actions has no intent
    // that would wait for it.
    eventually(60, "step 2 durable", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["totals"]["steps"] == 2).then_some(())
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "call 3 is still held");
    first.kill().await.unwrap();
    gate.release();

    let mut second = spawn_runner(&session, &llm);
    let done = eventually(60, "the end", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "finished").then_some(t)
    })
    .await;
    assert_eq!(done["result"], "done");
    let steps = session
        .client()
        .list_steps(ListStepsRequest {
            session_id: id.clone(),
            from_step: 1,
            limit: 100,
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    // Calls 1, 2 recorded; call 3 died with the first runner; calls 4, 5 are steps 3 and 4.
    assert_eq!(
        steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "each step once"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let all = session.events(&id).await;
    assert!(gapless(&all));
    assert_eq!(count(&all, EventKind::StepFinished), 4);
    assert_eq!(count(&all, EventKind::TaskClaimed), 2);
    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_runner_processes_run_twenty_tasks_exactly_once_with_the_real_agents() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    for _ in 0..40 {
        llm.push_json(&common::host(
            "FINISH",
            json!({"result": "done", "comment": "done"}),
        ));
    }
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let http = ufo_testkit::http_client();
    let mut ids = Vec::new();
    for i in 0..20 {
        let task = call(
            &http,
            reqwest::Method::POST,
            format!("{}/v1/tasks", api_agent.http),
            Some(json!({"request": format!("task {i}")})),
        )
        .await;
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    let mut a = spawn_runner(&session, &llm);
    let mut b = spawn_runner(&session, &llm);
    for id in &ids {
        let url = format!("{}/v1/tasks/{id}", api_agent.http);
        eventually(60, "every task finished", || async {
            (call(&http, reqwest::Method::GET, url.clone(), None).await["status"] == "finished")
                .then_some(())
        })
        .await;
    }
    // One LLM call per task: no step ran twice anywhere.
    assert_eq!(llm.requests().len(), 20);
    for id in &ids {
        let all = session.events(id).await;
        assert!(gapless(&all));
        assert_eq!(
            count(&all, EventKind::TaskClaimed),
            1,
            "task {id} claimed once"
        );
        assert_eq!(
            count(&all, EventKind::StepFinished),
            1,
            "task {id} ran its step once"
        );
    }
    a.kill().await.unwrap();
    b.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

/// Scripts `replies` LLM calls: call `n` (1-based) is answered by `reply(n, request)`; call `gate_at` is held
/// in flight until `gate` is released (its runner is killed meanwhile).
fn script(
    llm: &ScriptedLlm,
    replies: usize,
    gate_at: usize,
    gate: &Arc<Gate>,
    reply: impl Fn(usize, &ufo_agent::testing::RecordedRequest) -> Value + Send + Sync + 'static,
) -> Arc<AtomicUsize> {
    let calls = Arc::new(AtomicUsize::new(0));
    let reply = Arc::new(reply);
    for _ in 0..replies {
        let (calls, gate, reply) = (calls.clone(), gate.clone(), reply.clone());
        llm.push_fn(move |req| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n == gate_at {
                tokio::task::block_in_place(|| gate.wait());
            }
            ScriptedReply::Text(reply(n, req).to_string())
        });
    }
    calls
}

/// Waits until the task's first four steps are durable and returns the task. With `--record-ahead` the
/// sheet's first step (4) may still be committing while the model is asked for step 5; it commits while
/// call 5 is held, and the kill must come after it so that the history before the crash is fixed.
async fn four_steps_durable(http: &reqwest::Client, url: &str) -> Value {
    eventually(60, "steps 1-4 durable", || async {
        let t = call(http, reqwest::Method::GET, url.to_owned(), None).await;
        (t["totals"]["steps"] == 4).then_some(t)
    })
    .await
}

/// The text of a prompt section: from `[name]` to the next blank line.
fn section(prompt: &str, name: &str) -> String {
    let start = prompt
        .find(&format!("[{name}]\n"))
        .unwrap_or_else(|| panic!("no [{name}] in the prompt:\n{prompt}"));
    let body = &prompt[start + name.len() + 3..];
    body.split("\n\n").next().unwrap_or_default().to_owned()
}

/// Scripts 7 calls: the note's AppAgent reads the total (saving its screenshot on the blackboard with
/// `save_reason`), the sheet's clicks Cell twice (the second call held until `gate` is released) and
/// finishes, the HostAgent finishes.
fn note_then_sheet(
    llm: &ScriptedLlm,
    gate: &Arc<Gate>,
    save_reason: Option<&'static str>,
) -> Arc<AtomicUsize> {
    script(llm, 7, 5, gate, move |n, req| match n {
        1 => common::assign("0", "read the note"),
        2 => {
            let mut reply = common::app("FINISH", json!(null), "total=42");
            if let Some(reason) = save_reason {
                reply["save_screenshot"] = json!({"save": true, "reason": reason});
            }
            reply
        }
        3 => common::assign("1", "fill the sheet"),
        4 | 5 => {
            let cell = req.control_id("Cell").expect("the sheet's controls");
            common::app(
                "CONTINUE",
                json!({"function": "click_input", "arguments": {"id": cell}}),
                "",
            )
        }
        6 => common::app("FINISH", json!(null), "filled"),
        _ => common::host("FINISH", json!({"result": "done", "comment": "done"})),
    })
}

/// An agent serving the API only (no runner slots) and a task created through it: (agent, client, task
/// id, task URL).
async fn start_task(session: &Session, request: &str) -> (Agent, reqwest::Client, String, String) {
    let api_agent = Agent::start(agent_config(&session.url, &["--runner-slots", "0"]), None).await;
    let http = ufo_testkit::http_client();
    let task = call(
        &http,
        reqwest::Method::POST,
        format!("{}/v1/tasks", api_agent.http),
        Some(json!({"request": request})),
    )
    .await;
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", api_agent.http);
    (api_agent, http, id, url)
}

/// Waits for the task to finish; on timeout the failure shows the task and its steps.
async fn finished(http: &reqwest::Client, url: &str, session: &Session, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let t = call(http, reqwest::Method::GET, url.to_owned(), None).await;
        if t["status"] == "finished" {
            return t;
        }
        if tokio::time::Instant::now() >= deadline {
            let steps: Vec<_> = session
                .steps(id)
                .await
                .into_iter()
                .map(|s| {
                    (
                        s.step,
                        s.agent_name,
                        s.state_before,
                        s.state_after,
                        s.status,
                    )
                })
                .collect();
            panic!("the task did not finish: {t}\nsteps: {steps:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_agent_killed_mid_subtask_resumes_with_its_memory_and_the_previous_subtasks() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let gate = Arc::new(Gate::default());
    let calls = note_then_sheet(&llm, &gate, None);
    let (api_agent, http, id, url) = start_task(&session, "copy the total into the sheet").await;

    let mut first = spawn_runner(&session, &llm);
    eventually(60, "the sheet's second step in flight", || async {
        (calls.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;
    let before = four_steps_durable(&http, &url).await;
    assert_eq!(before["state"], "AppAgent/sheet:CONTINUE");
    first.kill().await.unwrap();
    gate.release();

    let mut second = spawn_runner(&session, &llm);
    let done = finished(&http, &url, &session, &id).await;
    assert_eq!(done["result"], "done");
    // The new runner's first prompt is the sheet's AppAgent's, with what it did before the crash.
    let resumed = llm.requests()[5].text();
    assert!(
        section(&resumed, "Application").contains("sheet"),
        "{resumed}"
    );
    assert_eq!(section(&resumed, "Current subtask"), "fill the sheet");
    let actions = section(&resumed, "Previous actions");
    assert!(actions.contains("click_input"), "memory rebuilt: {actions}");
    let previous = section(&resumed, "Previous subtasks");
    assert!(
        previous.contains("read the note") && previous.contains("total=42"),
        "previous subtasks rebuilt: {previous}"
    );
    let steps = session.steps(&id).await;
    assert_eq!(
        steps
            .iter()
            .map(|s| s.agent_name.as_str())
            .collect::<Vec<_>>(),
        [
            "HostAgent",
            "AppAgent/notes",
            "HostAgent",
            "AppAgent/sheet",
            "AppAgent/sheet",
            "HostAgent"
        ],
        "each step once, the interrupted one produced again by the sheet's AppAgent"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 7);
    // What the sheet's AppAgent clicked is recorded in screenshot pixels, for the viewer to draw.
    let viewed = call(&http, reqwest::Method::GET, format!("{url}/steps"), None).await;
    let clicked: Vec<&Value> = viewed["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["actions"][0]["function"] == "click_input")
        .collect();
    assert!(!clicked.is_empty());
    for step in clicked {
        let acted = &step["acted"];
        assert_eq!(acted.as_array().map(Vec::len), Some(1), "{step}");
        assert_eq!(acted[0]["function"], "click_input");
        let r: Vec<i64> = serde_json::from_value(acted[0]["rect"].clone()).unwrap();
        let p: Vec<i64> = serde_json::from_value(acted[0]["point"].clone()).unwrap();
        assert!(
            r[0] >= 0 && r[1] >= 0 && r[0] < r[2] && r[1] < r[3],
            "{acted}"
        );
        assert!(
            (r[0]..r[2]).contains(&p[0]) && (r[1]..r[3]).contains(&p[1]),
            "{acted}"
        );
    }
    let all = session.events(&id).await;
    assert!(gapless(&all));
    assert_eq!(count(&all, EventKind::StepFinished), 6);
    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_action_held_when_its_runner_dies_stays_held_and_runs_once_when_approved() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let gate = Arc::new(Gate::default());
    let calls = script(&llm, 4, 0, &gate, |n, req| match n {
        1 => common::assign("0", "copy the note"),
        2 => {
            let copy = req.control_id("Copy").expect("the notes' controls");
            common::app(
                "CONFIRM",
                json!({"function": "click_input", "arguments": {"id": copy}}),
                "",
            )
        }
        3 => common::app("FINISH", json!(null), "copied"),
        _ => common::host("FINISH", json!({"result": "done", "comment": "done"})),
    });
    let (api_agent, http, id, url) = start_task(&session, "copy the note").await;

    let mut first = spawn_runner(&session, &llm);
    let waiting = eventually(60, "the held action", || async {
        let t = call(&http, reqwest::Method::GET, url.clone(), None).await;
        (t["status"] == "waiting" && t["held_action"].is_object()).then_some(t)
    })
    .await;
    assert_eq!(waiting["held_action"]["function"], "click_input");
    assert_eq!(waiting["held_action"]["step"], 2);
    first.kill().await.unwrap();
    let answer = call(
        &http,
        reqwest::Method::POST,
        format!("{url}/confirmation"),
        Some(json!({"approve": true, "reason": "go ahead", "action_id": waiting["held_action"]["id"]})),
    )
    .await;
    assert!(answer.get("code").is_none(), "approved: {answer}");

    let mut second = spawn_runner(&session, &llm);
    let done = finished(&http, &url, &session, &id).await;
    assert_eq!(done["result"], "done");
    // No LLM call re-decided the held step: assign, hold, finish the subtask, finish the task.
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let steps = session.steps(&id).await;
    let clicks: Vec<_> = steps
        .iter()
        .flat_map(|s| s.actions.iter().map(move |a| (s.step, a)))
        .filter(|(_, a)| a.function == "click_input")
        .collect();
    assert_eq!(clicks.len(), 1, "the held action ran exactly once");
    let (step, click) = clicks[0];
    assert_eq!(step, 3, "right after the hold, by the new runner");
    assert_eq!(click.target_name, "Copy");
    // The action keeps a selector for its target (a replay finds it again by it).
    let selector = click.selector.as_ref().unwrap();
    assert_eq!(
        (selector.control_type.as_str(), selector.name.as_str()),
        ("Button", "Copy")
    );
    assert_eq!(steps[1].state_after, "CONFIRM");
    assert!(steps[1].actions.is_empty(), "nothing ran while held");
    assert_eq!(steps[2].state_before, "CONFIRM");
    assert_eq!(steps.len(), 5);
    let all = session.events(&id).await;
    assert!(gapless(&all));
    assert_eq!(count(&all, EventKind::ActionHeld), 1);
    assert_eq!(count(&all, EventKind::ConfirmationRequested), 1);
    assert_eq!(count(&all, EventKind::TaskClaimed), 2);
    // One approval: one ACTION_APPROVED, with the person's reason, which the resolving step records.
    let approvals: Vec<_> = all
        .iter()
        .filter(|e| e.kind == EventKind::ActionApproved as i32)
        .collect();
    assert_eq!(approvals.len(), 1);
    let payload = ufo_proto::json::from_optional_struct(approvals[0].payload.clone());
    assert_eq!(payload["reason"], "go ahead");
    assert_eq!(payload["id"], "h2");
    assert_eq!(steps[2].comment, "go ahead");
    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}

/// A screenshot saved on the blackboard reaches the prompts as an image also after a restart: the runner
/// that takes the task over rebuilds the board from the store with the saved image's bytes (the saving
/// step's clean screenshot artifact), and its first prompt carries the same downscaled image as the
/// prompt before the restart did.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blackboard_image_reaches_the_prompt_after_a_runner_restart() {
    const CAPTION: &str = "Blackboard image_0 (";
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let gate = Arc::new(Gate::default());
    let calls = note_then_sheet(&llm, &gate, Some("the total"));
    let (api_agent, http, id, url) = start_task(&session, "copy the total into the sheet").await;

    let mut first = spawn_runner(&session, &llm);
    eventually(60, "the sheet's second step in flight", || async {
        (calls.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;
    four_steps_durable(&http, &url).await;
    first.kill().await.unwrap();
    gate.release();
    let mut second = spawn_runner(&session, &llm);
    let done = finished(&http, &url, &session, &id).await;
    assert_eq!(done["result"], "done");

    let requests = llm.requests();
    // Before the restart: the sheet's AppAgent saw the saved screenshot as an image.
    let before = requests[4].image_after(CAPTION);
    let before = before.expect("the prompt before the restart carries the blackboard image");
    // The new runner's first prompt (the sheet's AppAgent again, rebuilt from the store).
    let resumed = &requests[5];
    assert_eq!(
        section(&resumed.text(), "Current subtask"),
        "fill the sheet"
    );
    assert!(
        resumed
            .text()
            .contains(r#"Blackboard image_0 ({"saving reason":"the total""#),
        "{}",
        resumed.text()
    );
    let after = resumed.image_after(CAPTION);
    assert_eq!(
        after.as_deref(),
        Some(before.as_str()),
        "the image after the restart is the one before it"
    );
    // And the HostAgent's prompt after the restart has it too.
    assert_eq!(requests[6].image_after(CAPTION), Some(before));
    second.kill().await.unwrap();
    api_agent.stop().await;
    session.stop().await;
}
