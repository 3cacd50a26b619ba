//! Replay without the model (issue 20) through the REST API, with the real agents ([`AgentsDriver`]),
//! the real session service on a fresh Postgres database and the executor double: a finished task is
//! replayed with 0 model calls on a desktop whose controls moved and were renumbered; a missing target
//! falls back to the model (counted) or fails naming the step and the selector; bad ids are 400/404, and
//! another caller's task cannot be replayed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use crate::common;
use serde_json::{Value, json};
use ufo_agent::agents::AgentSettings;
use ufo_agent::agents::target::Rect;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::{FakeControl, FakeDesktop, FakeWindow, ScriptedLlm};

struct Rig {
    session: Session,
    llm: ScriptedLlm,
    agent: Agent,
    recording: Arc<FakeDesktop>,
    /// The desktop replays act on (set per case).
    replaying: Arc<Mutex<Arc<FakeDesktop>>>,
    http: reqwest::Client,
}

/// The notes window as the replay sees it: every control elsewhere and numbered differently, another
/// button first; `copy` names the button the recording clicked ("Copy"), or its replacement.
fn moved_notes(copy: &str) -> FakeDesktop {
    FakeDesktop::new(vec![moved_notes_window(copy)])
}

fn moved_notes_window(copy: &str) -> FakeWindow {
    FakeWindow {
        id: "w7".into(),
        name: "Notes - tomorrow".into(),
        process: "notes".into(),
        rect: Rect::new(300, 200, 700, 500),
        controls: vec![
            FakeControl::new("m0", "Paste", "Button", Rect::new(320, 460, 400, 490)),
            FakeControl::new("m1", "Title", "Edit", Rect::new(320, 220, 680, 250)),
            FakeControl::new("m3", copy, "Button", Rect::new(420, 460, 500, 490)),
        ],
    }
}

/// The executor ids `click_input` was sent.
fn clicked(desktop: &FakeDesktop) -> Vec<String> {
    desktop
        .log()
        .iter()
        .filter(|c| c.tool_name == "click_input")
        .map(|c| c.parameters["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

impl Rig {
    async fn start() -> Self {
        let session = Session::start().await;
        let llm = ScriptedLlm::start().await.unwrap();
        let services = common::services(&llm, AgentSettings::default());
        let recording = Arc::new(common::desktop());
        let replaying = Arc::new(Mutex::new(Arc::new(moved_notes("Copy"))));
        let (rec, rep) = (recording.clone(), replaying.clone());
        let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
            Arc::new(move |_| Ok(services.clone())),
            Arc::new(move |task| {
                Ok(if task.replay.is_some() {
                    rep.lock().unwrap().clone() as Arc<dyn CommandDispatcher>
                } else {
                    rec.clone() as Arc<dyn CommandDispatcher>
                })
            }),
        ));
        let config = agent_config(
            &session.url,
            &[
                // The commands go to an in-process desktop: no executor to reset between tasks.
                "--no-desktop-reset",
                "--lease-ms",
                "5000",
                "--claim-interval-ms",
                "50",
                "--api-keys",
                "bob:kb",
            ],
        );
        let agent = Agent::start(config, Some(driver)).await;
        Self {
            session,
            llm,
            agent,
            recording,
            replaying,
            http: ufo_testkit::http_client(),
        }
    }

    async fn submit(&self, key: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/v1/tasks", self.agent.http))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.agent.http))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn ended(&self, id: &str) -> Value {
        let url = format!("/v1/tasks/{id}");
        eventually(60, "the task's end", || async {
            let t = self.get(&url).await;
            matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
        })
        .await
    }

    async fn steps(&self, id: &str) -> Vec<Value> {
        let v = self.get(&format!("/v1/tasks/{id}/steps")).await;
        v["steps"].as_array().unwrap().clone()
    }

    /// Has the model copy the note: select notes, click Copy and finish the subtask (when `looks_again`,
    /// finish it once more without acting, as after a click that changed nothing), finish the task;
    /// evaluates to the finished task's id and view.
    async fn copy_the_note(&self, looks_again: bool) -> (String, Value) {
        self.llm.push_json(&common::assign("0", "copy the note"));
        self.llm.push_fn(common::by_name(|id| {
            common::app(
                "FINISH",
                json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
                "copied",
            )
        }));
        if looks_again {
            self.llm
                .push_json(&common::app("FINISH", json!(null), "copied"));
        }
        self.llm.push_json(&common::host(
            "FINISH",
            json!({"result": "the note is copied"}),
        ));
        let (status, task) = self.submit(KEY, json!({"request": "copy the note"})).await;
        assert_eq!(status, 202, "{task}");
        let id = task["id"].as_str().unwrap().to_owned();
        let done = self.ended(&id).await;
        assert_eq!(done["status"], "finished", "{done}");
        (id, done)
    }

    /// Records "copy the note" ([`Self::copy_the_note`], the click acting at once).
    async fn record(&self) -> String {
        let (id, done) = self.copy_the_note(false).await;
        assert!(
            done.get("replay").is_none(),
            "a model-driven task has no replay view"
        );
        assert_eq!(self.llm.requests().len(), 3);
        assert_eq!(clicked(&self.recording), ["n3"]);
        id
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
    }
}

#[tokio::test]
async fn a_replay_acts_by_selector_without_the_model_and_is_counted() {
    let rig = Rig::start().await;
    let original = rig.record().await;
    let steps = rig.steps(&original).await;
    let click = &steps[1]["actions"][0];
    assert_eq!(click["selector"]["type"], "Button", "{click}");
    assert_eq!(click["selector"]["name"], "Copy", "{click}");

    let (status, task) = rig.submit(KEY, json!({"replay_of": original})).await;
    assert_eq!(status, 202, "{task}");
    assert_eq!(
        task["request"], "copy the note",
        "the replayed task's request"
    );
    let id = task["id"].as_str().unwrap().to_owned();
    let done = rig.ended(&id).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["result"], "the note is copied");
    assert_eq!(
        done["replay"],
        json!({"of": original, "on_mismatch": "fail", "replayed": 3, "fell_back": 0})
    );
    assert_eq!(rig.llm.requests().len(), 3, "no model call in a replay");
    assert_eq!(done["totals"]["cost"], 0.0);
    assert_eq!(done["totals"]["input_tokens"], 0);
    // The button moved and has another id and label: found by its selector, not its position.
    let replayed = rig.replaying.lock().unwrap().clone();
    assert_eq!(clicked(&replayed), ["m3"]);
    let steps = rig.steps(&id).await;
    assert_eq!(steps.len(), 3);
    for (n, s) in steps.iter().enumerate() {
        let mark = &s["replay"];
        assert_eq!(mark["source"], "recording", "{s}");
        assert_eq!(mark["of"], original.as_str());
        assert_eq!(mark["step"], n + 1);
        assert_eq!(s["cost"], 0.0);
    }
    assert_eq!(steps[1]["actions"][0]["target_name"], "Copy");
    assert_eq!(steps[1]["actions"][0]["result"]["status"], "success");
    rig.stop().await;
}

/// The agents of a task's steps, in order.
fn agents(steps: &[Value]) -> Vec<String> {
    steps
        .iter()
        .map(|s| s["agent_name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A replay takes its recording's transitions (issue 37), not what its own run of a batch was seen to
/// change: a FINISH the recording acted on ends the subtask though the replayed click changes nothing the
/// executor can see, and a FINISH after which the recording looked again (its click changed nothing)
/// stays with the AppAgent though the replayed click is seen to act.
#[tokio::test]
async fn a_replay_takes_its_recordings_transitions_whatever_its_clicks_are_seen_to_change() {
    let rig = Rig::start().await;
    let original = rig.record().await;
    rig.replaying
        .lock()
        .unwrap()
        .set_inert("notes", "Copy", true);
    let (status, task) = rig.submit(KEY, json!({"replay_of": original})).await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let done = rig.ended(&id).await;
    assert_eq!(done["status"], "finished", "{done}");
    let steps = rig.steps(&id).await;
    assert_eq!(agents(&steps), agents(&rig.steps(&original).await));
    assert_eq!(
        steps[1]["actions"][0]["result"]["effect"]["kind"], "none_observed",
        "the replayed click was seen to change nothing: {}",
        steps[1]
    );

    // Recorded: the click changes nothing the executor sees, so the AppAgent looks again and finishes
    // without acting.
    rig.recording.set_inert("notes", "Copy", true);
    let (looked_again, _) = rig.copy_the_note(true).await;
    let recorded = agents(&rig.steps(&looked_again).await);
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert_eq!(recorded[1], recorded[2], "the AppAgent looked again");
    let calls = rig.llm.requests().len();

    // Replayed where the click acts: the AppAgent still takes the recording's next step.
    *rig.replaying.lock().unwrap() = Arc::new(moved_notes("Copy"));
    let (status, task) = rig.submit(KEY, json!({"replay_of": looked_again})).await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let done = rig.ended(&id).await;
    assert_eq!(done["status"], "finished", "{done}");
    let steps = rig.steps(&id).await;
    assert_eq!(agents(&steps), recorded);
    assert!(
        steps[1]["actions"][0]["result"].get("effect").is_none(),
        "the replayed click changed what it shows: {}",
        steps[1]
    );
    assert_eq!(rig.llm.requests().len(), calls, "no model call in a replay");
    rig.stop().await;
}

#[tokio::test]
async fn a_missing_target_falls_back_to_the_model_or_fails_naming_step_and_selector() {
    let rig = Rig::start().await;
    let original = rig.record().await;
    // "Copy" is gone; the window has "Duplicate" instead.
    *rig.replaying.lock().unwrap() = Arc::new(moved_notes("Duplicate"));

    let (status, task) = rig
        .submit(KEY, json!({"replay_of": original, "on_mismatch": "fail"}))
        .await;
    assert_eq!(status, 202, "{task}");
    let failed = rig.ended(task["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let why = failed["result"].as_str().unwrap();
    assert!(why.contains("step 2"), "names the step: {why}");
    assert!(why.contains("Button \"Copy\""), "names the selector: {why}");
    assert_eq!(rig.llm.requests().len(), 3, "fail means no model call");

    // The model decides the step whose target is missing, and only that one.
    rig.llm.push_fn(common::by_name(|id| {
        common::app(
            "FINISH",
            json!({"function": "click_input", "arguments": {"id": id("Duplicate")}}),
            "duplicated",
        )
    }));
    let (status, task) = rig
        .submit(KEY, json!({"replay_of": original, "on_mismatch": "model"}))
        .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let done = rig.ended(&id).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(
        done["replay"],
        json!({"of": original, "on_mismatch": "model", "replayed": 2, "fell_back": 1})
    );
    assert_eq!(
        rig.llm.requests().len(),
        4,
        "one model call: the fallen-back step"
    );
    let steps = rig.steps(&id).await;
    assert_eq!(steps[1]["replay"]["source"], "model");
    let note = steps[1]["replay"]["note"].as_str().unwrap();
    assert!(note.contains("Button \"Copy\""), "{note}");
    rig.stop().await;
}

#[tokio::test]
async fn bad_replay_requests_are_refused_and_callers_replay_only_their_own_tasks() {
    let rig = Rig::start().await;
    let original = rig.record().await;
    let cases = [
        (json!({"replay_of": "not-a-uuid"}), 400, "invalid_argument"),
        (json!({"replay_of": ""}), 400, "invalid_argument"),
        (
            json!({"replay_of": uuid::Uuid::new_v4().to_string()}),
            404,
            "not_found",
        ),
        (
            json!({"request": "x", "on_mismatch": "model"}),
            400,
            "invalid_argument",
        ),
        (
            json!({"replay_of": original, "on_mismatch": "sometimes"}),
            400,
            "invalid_argument",
        ),
    ];
    for (body, status, code) in cases {
        let (got, err) = rig.submit(KEY, body.clone()).await;
        assert_eq!(
            (got, err["code"].as_str()),
            (status, Some(code)),
            "{body}: {err}"
        );
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{err}"
        );
    }
    // Bob may not replay the tests caller's task: the same 404 as a missing one.
    let (got, err) = rig.submit("kb", json!({"replay_of": original})).await;
    assert_eq!(got, 404, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("not found"),
        "{err}"
    );
    // A task that has not finished cannot be replayed.
    let (_, queued) = rig.submit("kb", json!({"request": "never runs"})).await;
    let bobs = queued["id"].as_str().unwrap();
    // (Queued, running, or failed for want of a scripted reply: in no case finished.)
    let (got, err) = rig.submit("kb", json!({"replay_of": bobs})).await;
    assert_eq!(
        (got, err["code"].as_str()),
        (409, Some("failed_precondition")),
        "{err}"
    );
    rig.stop().await;
}

/// A recorded target that is found again but whose action fails in the replay (the executor refused it,
/// e.g. a control off the screen): the replay does not go on as if it had worked. With
/// `on_mismatch: fail` the task fails naming the step, the selector and the executor's error; with
/// `model` the model decides the next step, seeing the failure, and that step is counted as fallen back.
#[tokio::test]
async fn a_replayed_action_that_fails_stops_the_replay_naming_step_and_selector() {
    let rig = Rig::start().await;
    let original = rig.record().await;
    // "Copy" is found by its selector, but clicking it fails.
    let mut notes = moved_notes_window("Copy");
    notes.controls[2].fails = true;
    *rig.replaying.lock().unwrap() = Arc::new(FakeDesktop::new(vec![notes]));

    let (status, task) = rig.submit(KEY, json!({"replay_of": original})).await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let failed = rig.ended(&id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let why = failed["result"].as_str().unwrap();
    assert!(why.contains("failed at step 2"), "names the step: {why}");
    assert!(
        why.contains("click_input on Button \"Copy\""),
        "names the selector: {why}"
    );
    assert!(
        why.contains("click_input on Copy failed"),
        "carries the executor's error: {why}"
    );
    assert_eq!(rig.llm.requests().len(), 3, "fail means no model call");
    let replayed = rig.replaying.lock().unwrap().clone();
    assert_eq!(clicked(&replayed), ["m3"], "the click was tried once");

    // With the model allowed, it decides the step after the failed one and sees why.
    rig.llm.push_fn(common::by_name(|id| {
        common::app(
            "FINISH",
            json!({"function": "click_input", "arguments": {"id": id("Paste")}}),
            "pasted instead",
        )
    }));
    rig.llm.push_json(&common::host(
        "FINISH",
        json!({"result": "the note is pasted"}),
    ));
    let (status, task) = rig
        .submit(KEY, json!({"replay_of": original, "on_mismatch": "model"}))
        .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let done = rig.ended(&id).await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["replay"]["fell_back"], 2, "{done}");
    assert_eq!(done["replay"]["replayed"], 2, "{done}");
    let steps = rig.steps(&id).await;
    assert_eq!(steps[2]["replay"]["source"], "model", "{:?}", steps[2]);
    let note = steps[2]["replay"]["note"].as_str().unwrap();
    assert!(
        note.contains("click_input on Button \"Copy\"") && note.contains("failed"),
        "{note}"
    );
    let prompt = rig.llm.requests()[3].body.to_string();
    assert!(
        prompt.contains("click_input on Copy failed"),
        "the model saw the failure"
    );
    rig.stop().await;
}
