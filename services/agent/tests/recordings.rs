//! `ufo record` through the agent (issue 33, human demonstrations), with the real session service on a
//! fresh Postgres database and a real headless executor (its own Xvfb desktop): a scripted person
//! (`xdotool` on that display) clicks zenity's name field, types a name and clicks OK while alice
//! records; the stored demonstration names the field and the button by their selectors, has the text,
//! and is what `GET /v1/knowledge/search` finds for alice — never for bob, whose key sees neither the
//! recording (404) nor the demonstration. Then `ufo record --seconds` (the real CLI binary) records the
//! person confirming the dialog with Enter and prints the stored demonstration's id.
//!
//! The demonstration is a session alice sees step by step with screenshots (REST steps and screenshot
//! routes; bob gets 404), and a new request of hers with another name runs its steps again (reuse:
//! one model call rewrites the name), while bob's request never gets it.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::api_support::{Agent, Session, agent_config, eventually};
use crate::browser_support;
use crate::common;
use serde_json::{Value, json};
use ufo_agent::agents::AgentSettings;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::store::knowledge::SessionKnowledge;
use ufo_agent::testing::ScriptedLlm;

/// A display number for the executor's desktop no other run is likely to use.
fn display() -> u32 {
    4000 + std::process::id() % 20_000
}

struct Rig {
    session: Session,
    agent: Agent,
    stop: tokio_util::sync::CancellationToken,
    display: u32,
    http: reqwest::Client,
    llm: ScriptedLlm,
    /// Where the dialog writes the name it was given.
    answer: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn start() -> Self {
        use clap::Parser as _;
        let dir = tempfile::tempdir().unwrap();
        // The dialog the person works in, as a program the executor may launch.
        let script = dir.path().join("new-project");
        let answer = dir.path().join("answer");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec zenity --entry --title 'New project' --text 'Project name:' > '{}'\n",
                answer.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let display = display();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let allow = format!("new-project={}", script.display());
        let shown = display.to_string();
        let config = ufo_executor::Config::try_parse_from([
            "ufo-executor",
            "--token",
            "tok",
            "--allow-app",
            &allow,
            "--desktop",
            "headless",
            "--desktop-size",
            "1280x900",
            "--desktop-display",
            &shown,
        ])
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(ufo_executor::run(config, listener, stop.clone()));
        let url = format!("http://{addr}");
        ufo_testkit::poll_until(
            "the headless executor serving",
            Duration::from_secs(60),
            Duration::from_millis(50),
            || ufo_testkit::grpc_serving(&url),
        )
        .await
        .unwrap();
        let session = Session::start().await;
        let registered = format!("desk={url}");
        let config = agent_config(
            &session.url,
            &[
                "--executors",
                &registered,
                "--executor-token",
                "tok",
                "--api-keys",
                "alice:ka,bob:kb",
                "--knowledge",
                // The dialog a task works in is started by the test: no reset between tasks.
                "--no-desktop-reset",
                "--claim-interval-ms",
                "50",
            ],
        );
        // Tasks run on the same executor, with a scripted model.
        let llm = ScriptedLlm::start().await.unwrap();
        let services = common::services(&llm, AgentSettings::default());
        let grpc: Arc<dyn CommandDispatcher> = Arc::new(
            GrpcDispatcher::connect_lazy(&url, Some("tok"), 20_000, 64 << 20, None).unwrap(),
        );
        let driver = AgentsDriver::new(
            Arc::new(move |_| Ok(services.clone())),
            Arc::new(move |_| Ok(grpc.clone())),
        )
        .with_knowledge(SessionKnowledge::from_config(&config).unwrap());
        let driver: Arc<dyn TaskDriver> = Arc::new(driver);
        let agent = Agent::start(config, Some(driver)).await;
        Self {
            session,
            agent,
            stop,
            display,
            http: ufo_testkit::http_client(),
            llm,
            answer,
            _dir: dir,
        }
    }

    async fn call(&self, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(
                method.parse().unwrap(),
                format!("{}{path}", self.agent.http),
            )
            .bearer_auth(key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        (
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        )
    }

    /// A desktop tool call on the executor as alice, which must succeed; its result.
    async fn desktop(&self, tool: &str, arguments: Value) -> Value {
        let (status, v) = self
            .call(
                "ka",
                "POST",
                "/v1/desktop/calls",
                Some(json!({"tool": tool, "arguments": arguments})),
            )
            .await;
        assert_eq!(status, 200, "{tool}: {v}");
        v["result"].clone()
    }

    /// Starts the dialog and returns the centres of its name field and OK button.
    async fn dialog(&self) -> ((i64, i64), (i64, i64)) {
        self.desktop(
            "launch_app",
            json!({"executor": "desk", "name": "new-project"}),
        )
        .await;
        let window = eventually(30, "the dialog", || async {
            let windows = self
                .desktop("list_windows", json!({"executor": "desk"}))
                .await;
            windows
                .as_array()?
                .iter()
                .find(|w| w["name"] == "New project")
                .map(|w| w["id"].as_str().unwrap().to_owned())
        })
        .await;
        let controls = self
            .desktop(
                "list_controls",
                json!({"executor": "desk", "window": window}),
            )
            .await;
        let centre = |pred: &dyn Fn(&Value) -> bool| {
            let c = controls
                .as_array()
                .unwrap()
                .iter()
                .find(|c| pred(c))
                .unwrap_or_else(|| panic!("in {controls}"));
            let r: Vec<i64> = c["rect"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            ((r[0] + r[2]) / 2, (r[1] + r[3]) / 2)
        };
        let field = centre(&|c| c["type"] == "Edit");
        let ok = centre(&|c| c["type"] == "Button" && c["name"] == "OK");
        // The person's display is the executor's: xdotool finds the dialog there.
        self.xdotool(&["search", "--sync", "--name", "New project"]);
        (field, ok)
    }

    fn xdotool(&self, args: &[&str]) {
        let out = std::process::Command::new("xdotool")
            .args(args)
            .env("DISPLAY", format!(":{}", self.display))
            .output()
            .expect("xdotool runs (install xdotool)");
        assert!(
            out.status.success(),
            "xdotool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The person, while alice's recording `id` runs: a click on the field, "Gemini 4", a click on
    /// OK, each waited for until the recording has it.
    async fn person_names_gemini(&self, id: &str, field: (i64, i64), ok: (i64, i64)) {
        let steps = || async {
            let (_, v) = self
                .call("ka", "GET", &format!("/v1/recordings/{id}"), None)
                .await;
            v["steps"].as_array().map(Vec::len)
        };
        self.click(field);
        eventually(20, "the click on the field", || async {
            (steps().await? >= 1).then_some(())
        })
        .await;
        self.xdotool(&["type", "--delay", "30", "Gemini 4"]);
        self.click(ok);
        eventually(20, "the click on OK", || async {
            (steps().await? >= 3).then_some(())
        })
        .await;
    }

    fn click(&self, (x, y): (i64, i64)) {
        self.xdotool(&["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
        self.stop.cancel();
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_persons_recording_becomes_their_demonstration_and_only_theirs() {
    let rig = Rig::start().await;
    let (field, ok) = rig.dialog().await;

    // Bad input first: clear 4xx, nothing started.
    for (body, says) in [
        (
            json!({"app": "", "description": "x", "executor": "desk"}),
            "app is required",
        ),
        (
            json!({"app": "zenity", "description": "a\u{0}b", "executor": "desk"}),
            "NUL",
        ),
        (
            json!({"app": "zenity", "description": "x", "executor": "nowhere"}),
            "executor",
        ),
        (
            json!({"app": "zenity", "description": "x", "executor": "http://127.0.0.1:1"}),
            "executor",
        ),
        (
            json!({"app": "zenity", "description": "x", "executor": "desk", "max_seconds": -1}),
            "max_seconds",
        ),
    ] {
        let (status, v) = rig
            .call("ka", "POST", "/v1/recordings", Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }

    let description = "Name the new project Gemini 4";
    let (status, started) = rig
        .call(
            "ka",
            "POST",
            "/v1/recordings",
            Some(json!({"executor": "desk", "app": "zenity", "description": description})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(started["state"], "recording");
    let id = started["id"].as_str().unwrap().to_owned();
    // One recording per executor: a second start is refused (409), naming why.
    let (status, v) = rig
        .call(
            "kb",
            "POST",
            "/v1/recordings",
            Some(json!({"executor": "desk", "app": "zenity", "description": "mine"})),
        )
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("already running"),
        "{v}"
    );

    rig.person_names_gemini(&id, field, ok).await;

    // Bob sees neither the recording nor can stop it.
    let (status, v) = rig
        .call("kb", "GET", &format!("/v1/recordings/{id}"), None)
        .await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = rig
        .call("kb", "POST", &format!("/v1/recordings/{id}/stop"), None)
        .await;
    assert_eq!(status, 404, "{v}");

    let (status, demo) = rig
        .call("ka", "POST", &format!("/v1/recordings/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{demo}");
    eprintln!("the demonstration: {demo:#}");
    assert_eq!(demo["source"], format!("recording:{id}"));
    assert_eq!(demo["owner"], "alice");
    assert_eq!(demo["ended"], "asked");
    let steps = demo["steps"].as_array().unwrap();
    let actions: Vec<&str> = steps
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["click_input", "set_edit_text", "click_input"],
        "{demo:#}"
    );
    assert_eq!(steps[0]["selector"]["type"], "Edit");
    assert_eq!(steps[0]["selector"]["name"], "Project name:");
    assert_eq!(steps[1]["text"], "Gemini 4");
    assert_eq!(steps[1]["selector"], steps[0]["selector"]);
    assert_eq!(steps[2]["selector"]["type"], "Button");
    assert_eq!(steps[2]["selector"]["name"], "OK");
    assert!(
        steps.iter().all(|s| s["window"] == "New project"),
        "{demo:#}"
    );
    let text = demo["text"].as_str().unwrap();
    assert!(
        text.contains("set_edit_text text=\"Gemini 4\" on Edit \"Project name:\""),
        "{text}"
    );
    // Stopped: the id is gone.
    let (status, _) = rig
        .call("ka", "POST", &format!("/v1/recordings/{id}/stop"), None)
        .await;
    assert_eq!(status, 404);

    // The demonstration is alice's session, step by step with screenshots of the 1280×900 desktop.
    assert_eq!(demo["screenshots"], 3, "{demo:#}");
    let session = demo["session"].as_str().unwrap().to_owned();
    check_session(
        &rig,
        &session,
        &["click_input", "set_edit_text", "click_input"],
    )
    .await;
    viewer_shows(&rig, &session).await;
    ufo_show_steps(&rig, &session).await;

    // Retrievable like an experience, for alice only.
    let path = format!(
        "/v1/knowledge/search?q={}&app=zenity",
        urlencode(description)
    );
    let (status, found) = rig.call("ka", "GET", &path, None).await;
    assert_eq!(status, 200, "{found}");
    let hit = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["source"] == format!("recording:{id}"))
        .unwrap_or_else(|| panic!("alice's demonstration in {found:#}"));
    assert_eq!(hit["kind"], "demonstration");
    assert_eq!(hit["title"], description);
    let (_, found) = rig.call("kb", "GET", &path, None).await;
    assert!(
        found["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["source"] != format!("recording:{id}")),
        "bob sees alice's demonstration: {found:#}"
    );

    rig.stop().await;
}

/// The demonstration's session as alice sees it (each step the person's action on its control with a
/// screenshot of the whole desktop, served by the step and screenshot routes) and as bob does (404).
async fn check_session(rig: &Rig, session: &str, actions: &[&str]) {
    let (status, task) = rig
        .call("ka", "GET", &format!("/v1/tasks/{session}"), None)
        .await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["kind"], "demonstration", "{task}");
    assert_eq!(task["status"], "finished", "{task}");
    let (status, steps) = rig
        .call("ka", "GET", &format!("/v1/tasks/{session}/steps"), None)
        .await;
    assert_eq!(status, 200, "{steps}");
    let steps = steps["steps"].as_array().unwrap().clone();
    let got: Vec<&str> = steps
        .iter()
        .map(|s| s["actions"][0]["function"].as_str().unwrap())
        .collect();
    assert_eq!(got, actions, "{steps:#?}");
    for s in &steps {
        let n = s["step"].as_u64().unwrap();
        assert_eq!(s["agent_name"], "Person", "{s}");
        assert_eq!(s["screenshots"], json!(["clean"]), "{s}");
        assert_eq!(s["clean_size"], json!([1280, 900]), "{s}");
        assert!(s["actions"][0]["selector"]["type"].is_string(), "{s}");
        // What the person acted on is marked in the screenshot's pixels.
        let rect = &s["acted"][0]["rect"];
        assert!(rect.is_array(), "{s}");
        let res = rig
            .http
            .get(format!(
                "{}/v1/tasks/{session}/steps/{n}/screenshot?kind=clean",
                rig.agent.http
            ))
            .bearer_auth("ka")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "step {n}");
        let bytes = res.bytes().await.unwrap();
        let image = image::load_from_memory(&bytes).expect("a PNG");
        assert_eq!((image.width(), image.height()), (1280, 900), "step {n}");
        let res = rig
            .http
            .get(format!(
                "{}/v1/tasks/{session}/steps/{n}/screenshot?kind=clean",
                rig.agent.http
            ))
            .bearer_auth("kb")
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status().as_u16(),
            404,
            "bob reads alice's screenshot {n}"
        );
    }
    assert_eq!(steps[1]["actions"][0]["arguments"]["text"], "Gemini 4");
    assert_eq!(steps[2]["actions"][0]["target_name"], "OK");
    for path in [
        format!("/v1/tasks/{session}"),
        format!("/v1/tasks/{session}/steps"),
    ] {
        let (status, v) = rig.call("kb", "GET", &path, None).await;
        assert_eq!(status, 404, "bob sees {path}: {v}");
    }
}

/// `ufo show <session> --steps` (the real CLI binary): alice sees the person's three steps, each with
/// its screenshot line and the `ufo screenshot` command; bob's key is refused (not found).
async fn ufo_show_steps(rig: &Rig, session: &str) {
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    let show = |key: &'static str| {
        let ufo = ufo.clone();
        let args: Vec<String> = [
            "--server",
            &rig.agent.http,
            "--token",
            key,
            "show",
            session,
            "--steps",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        async move {
            tokio::process::Command::new(&ufo)
                .args(&args)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap()
        }
    };
    let out = show("ka").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kind     demonstration"), "{stdout}");
    for n in 1..=3 {
        assert!(
            stdout.contains(&format!("(ufo screenshot {session} {n} --kind clean)")),
            "step {n}: {stdout}"
        );
    }
    assert_eq!(stdout.matches("screenshot: clean").count(), 3, "{stdout}");
    assert!(stdout.contains("set_edit_text"), "{stdout}");
    let out = show("kb").await;
    assert!(
        !out.status.success(),
        "bob: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The viewer (headless Chromium) signed in as alice shows the demonstration's three step cards, each
/// with its screenshot loaded at the desktop's width, and what the person did.
async fn viewer_shows(rig: &Rig, session: &str) {
    let browser = browser_support::Browser::start().await;
    let base = &rig.agent.http;
    browser.sign_in(base, "ka").await;
    browser.goto(&format!("{base}/#/task/{session}")).await;
    browser
        .wait(
            30,
            "three step cards with their screenshots",
            "(() => { const cards = [...document.querySelectorAll('.card.step')]; \
             const imgs = cards.map(c => c.querySelector('img.shot-clean')); \
             return cards.length === 3 && imgs.every(i => i && i.complete && i.naturalWidth === 1280) \
               && document.querySelector('#demonstration') !== null; })()",
        )
        .await;
    let said = browser
        .js(
            "return [...document.querySelectorAll('.card.step .says')].map(e => e.textContent);",
            json!([]),
        )
        .await;
    assert_eq!(
        said,
        json!([
            "click “Project name:”",
            "type \"Gemini 4\" into “Project name:”",
            "click “OK”"
        ]),
        "{said}"
    );
    // The control acted on is drawn over each screenshot.
    let marks = browser
        .js(
            "return document.querySelectorAll('.card.step svg.acted rect').length;",
            json!([]),
        )
        .await;
    assert_eq!(marks, 3, "{marks}");
    browser.stop().await;
}

/// A recording of the dialog by alice: a click on the field, "Gemini 4", a click on OK; the stored
/// demonstration.
async fn record_gemini(rig: &Rig, description: &str) -> Value {
    let (field, ok) = rig.dialog().await;
    let (status, started) = rig
        .call(
            "ka",
            "POST",
            "/v1/recordings",
            Some(json!({"executor": "desk", "app": "zenity", "description": description})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    rig.person_names_gemini(&id, field, ok).await;
    let (status, demo) = rig
        .call("ka", "POST", &format!("/v1/recordings/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{demo}");
    demo
}

/// Submits `body` as `key` and waits for its end: the task and its steps.
async fn run_task(rig: &Rig, key: &str, body: Value) -> (Value, Vec<Value>) {
    let (status, task) = rig.call(key, "POST", "/v1/tasks", Some(body)).await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let done = eventually(90, "the task's end", || async {
        let (_, t) = rig.call(key, "GET", &format!("/v1/tasks/{id}"), None).await;
        matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
    })
    .await;
    let (_, steps) = rig
        .call(key, "GET", &format!("/v1/tasks/{id}/steps"), None)
        .await;
    (done, steps["steps"].as_array().cloned().unwrap_or_default())
}

/// Reuse follows a demonstration: alice's new request with another name runs the recorded steps on
/// a fresh dialog with one model call (the name rewritten), every step marked reused, and the dialog
/// gets the NEW name; bob's same request never gets her demonstration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_request_follows_the_owners_demonstration_with_its_new_text() {
    let rig = Rig::start().await;
    let demo = record_gemini(&rig, "Name the new project Gemini 4").await;
    let session = demo["session"].as_str().unwrap().to_owned();
    let said = eventually(20, "the dialog's answer", || async {
        let a = std::fs::read_to_string(&rig.answer).ok()?;
        a.ends_with('\n').then_some(a)
    })
    .await;
    assert_eq!(said, "Gemini 4\n");
    std::fs::remove_file(&rig.answer).unwrap();

    // Bob, the same request with reuse on: no plan of alice's; his model decides (and finishes).
    let before = rig.llm.requests().len();
    rig.llm
        .push_json(&common::host("FINISH", json!({"result": "not done"})));
    let (task, steps) = run_task(
        &rig,
        "kb",
        json!({"request": "Name the new project Soyuz 2", "reuse": true}),
    )
    .await;
    assert!(task.get("reuse").is_none(), "bob reused: {task}");
    assert!(steps.iter().all(|s| s.get("reuse").is_none()), "{steps:?}");
    let prompts: Vec<String> = rig.llm.requests()[before..]
        .iter()
        .map(|r| r.text())
        .collect();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(!prompts[0].contains("Gemini"), "{}", prompts[0]);

    // Alice, a new name: one call rewrites the texts that carry the old one, the steps are hers.
    rig.dialog().await;
    let before = rig.llm.requests().len();
    rig.llm
        .push_json(&json!({"texts": ["Name the new project Soyuz 2", "Soyuz 2"]}));
    let (task, steps) = run_task(
        &rig,
        "ka",
        json!({"request": "Name the new project Soyuz 2", "reuse": true}),
    )
    .await;
    let prompts: Vec<String> = rig.llm.requests()[before..]
        .iter()
        .map(|r| r.text())
        .collect();
    eprintln!("the reuse task: {task:#}\n{steps:#?}");
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(prompts.len(), 1, "only the fill call: {prompts:?}");
    assert!(
        prompts[0]
            .contains("[Texts to rewrite]\n1. \"Name the new project Gemini 4\"\n2. \"Gemini 4\""),
        "{}",
        prompts[0]
    );
    assert_eq!(task["reuse"]["of"], session.as_str(), "{task}");
    assert_eq!(task["reuse"]["fell_back"], 0, "{task}");
    // Host: the dialog; AppAgent: the field, the name, OK; Host: done.
    assert_eq!(task["reuse"]["reused"], 5, "{task}");
    assert!(
        steps
            .iter()
            .all(|s| s["reuse"]["source"] == "reused" && s["reuse"]["of"] == session.as_str()),
        "{steps:#?}"
    );
    let typed: Vec<&Value> = steps
        .iter()
        .flat_map(|s| s["actions"].as_array().unwrap())
        .filter(|a| a["function"] == "set_edit_text")
        .collect();
    assert_eq!(typed.len(), 1, "{steps:#?}");
    assert_eq!(typed[0]["arguments"]["text"], "Soyuz 2");
    // The check on the result: the dialog was given the new name.
    let said = eventually(20, "the dialog's answer", || async {
        let a = std::fs::read_to_string(&rig.answer).ok()?;
        a.ends_with('\n').then_some(a)
    })
    .await;
    assert_eq!(said, "Soyuz 2\n");
    assert_eq!(task["result"], "Name the new project Soyuz 2", "{task}");

    // `ufo replay` of the demonstration: the person's steps made the agents', without a model call;
    // bob cannot replay it (404, as for any task of alice's).
    let (status, v) = rig
        .call(
            "kb",
            "POST",
            "/v1/tasks",
            Some(json!({"replay_of": session})),
        )
        .await;
    assert_eq!(status, 404, "{v}");
    std::fs::remove_file(&rig.answer).unwrap();
    rig.dialog().await;
    let before = rig.llm.requests().len();
    let (task, steps) = run_task(&rig, "ka", json!({"replay_of": session})).await;
    assert_eq!(task["status"], "finished", "{task}\n{steps:#?}");
    assert_eq!(rig.llm.requests().len(), before, "a replay asked the model");
    assert_eq!(task["replay"]["of"], session.as_str(), "{task}");
    assert_eq!(task["replay"]["replayed"], 5, "{task}");
    assert_eq!(task["replay"]["fell_back"], 0, "{task}");
    assert!(
        steps.iter().all(|s| s["replay"]["source"] == "recording"),
        "{steps:#?}"
    );
    let said = eventually(20, "the dialog's answer", || async {
        let a = std::fs::read_to_string(&rig.answer).ok()?;
        a.ends_with('\n').then_some(a)
    })
    .await;
    assert_eq!(said, "Gemini 4\n");
    assert_eq!(task["request"], "Name the new project Gemini 4", "{task}");

    rig.stop().await;
}

/// `ufo record --seconds` (the real CLI binary) while the person confirms the dialog with Enter: it
/// prints each step as it comes and then the stored demonstration's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ufo_record_prints_each_step_and_the_stored_demonstration() {
    let rig = Rig::start().await;
    let (field, _) = rig.dialog().await;
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    let cli = tokio::process::Command::new(&ufo)
        .args([
            "--server",
            &rig.agent.http,
            "--token",
            "ka",
            "record",
            "--app",
            "zenity",
            "--executor",
            "desk",
            "--seconds",
            "6",
            "Confirm the project name with Enter",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The person acts once the recording runs (the CLI says so on stderr when it has started it).
    let mut cli = cli;
    let mut err = tokio::io::BufReader::new(cli.stderr.take().unwrap());
    let mut said = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        use tokio::io::AsyncBufReadExt as _;
        while !said.contains("recording on desk") {
            let mut line = String::new();
            if err.read_line(&mut line).await.unwrap() == 0 {
                break;
            }
            said.push_str(&line);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the CLI did not start recording: {said}"));
    assert!(said.contains("recording on desk"), "{said}");
    // The rest of stderr is read to its end, so a failure shows all the CLI said.
    let rest = tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest).await;
        said + &rest
    });
    rig.click(field);
    rig.xdotool(&["type", "--delay", "30", "Apollo"]);
    rig.xdotool(&["key", "Return"]);
    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = rest.await.unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("set_edit_text \"Apollo\" on Edit \"Project name:\""),
        "{stdout}"
    );
    assert!(stdout.contains("keyboard_input \"{ENTER}\""), "{stdout}");
    assert!(stdout.contains("demonstration "), "{stdout}");
    assert!(
        stdout.contains("stored for zenity (3 steps, source recording:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("its steps with their screenshots (3): ufo show "),
        "{stdout}"
    );

    rig.stop().await;
}
