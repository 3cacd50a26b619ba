//! The live desktop and takeover through the REST API (docs/live.md), with the production agents and
//! runner, the real session service, the scripted OpenAI-compatible model and the real Linux executor on
//! a private Xvfb desktop with mousepad:
//! - `GET /v1/tasks/{id}/live` sends the desktop's picture (JPEG, the screen's size); another caller
//!   gets 404;
//! - a takeover pauses the agents at a step boundary; the person's click in mousepad's document and
//!   typed text reach mousepad (read back through AT-SPI), each recorded as a step of the person's with
//!   its intent event first; bad input (off the screen, too long, NUL, two inputs at once) is 400, input
//!   without a takeover is 409 (failed_precondition), another caller is 404;
//! - after the hand-back the agents' next prompt says what the person did, and the task finishes;
//! - the same through the viewer in headless Chromium (WebDriver): the live picture arrives, Take over, a
//!   real click on the picture at mousepad's document and text typed in the page reach mousepad, Hand
//!   back finishes the task. `UFO_LIVE_PNG=path` saves the page's screenshot there (default:
//!   `target/live-viewer.png`).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use crate::browser_support::Browser;
use crate::common;
use base64::Engine as _;
use futures::StreamExt as _;
use serde_json::{Value, json};
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_executor::backend::Backend;
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits};
use ufo_executor::testing::{Desktop, drive};
use ufo_proto::v1::EventKind;

const OTHER: &str = "other-key";
const NOTE: &str = "A person took the desktop over";
const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(10),
    format: Format::PNG,
};

async fn post(http: &reqwest::Client, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http.post(url).bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// The first `frame` event of a live stream.
async fn first_frame(res: reqwest::Response) -> Value {
    let mut body = res.bytes_stream();
    let mut buf = String::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("a frame within 30 s")
            .expect("the stream goes on")
            .unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let message: String = buf.drain(..end + 2).collect();
            if message.lines().any(|l| l == "event: frame") {
                let data: String = message
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .collect();
                return serde_json::from_str(&data).unwrap();
            }
            assert!(!message.contains("event: error"), "{message}");
        }
    }
}

/// Everything a takeover test needs: the desktop with mousepad, its executor, the agent with the
/// scripted model, and one submitted task.
struct World {
    _desk: Desktop,
    local: Executor,
    /// mousepad's document: its listing id and centre.
    doc_id: String,
    x: i64,
    y: i64,
    session: Session,
    llm: ScriptedLlm,
    agent: Agent,
    stop_executor: tokio_util::sync::CancellationToken,
    http: reqwest::Client,
    id: String,
    url: String,
}

impl World {
    async fn start() -> Self {
        let mut desk = Desktop::start(1024, 700).await.unwrap();
        let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
        let (_pid, window) = desk
            .launch(backend.as_ref(), "mousepad", &[])
            .await
            .unwrap();
        // Where mousepad's document is, read through AT-SPI by the executor's own listing.
        let local = Executor::new(backend.clone(), Limits::default(), Vec::new());
        drive::select(&local, OPTS, window.handle).await;
        let list = drive::controls(&local, OPTS).await;
        let doc = list
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Document" || c["type"] == "Edit")
            .expect("mousepad's document")
            .clone();
        let r: Vec<i64> = doc["rect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let (x, y) = ((r[0] + r[2]) / 2, (r[1] + r[3]) / 2);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop_executor = tokio_util::sync::CancellationToken::new();
        tokio::spawn(ufo_executor::run_with_backend(
            ufo_executor::Config::for_tests(addr, Some("tok")),
            backend.clone(),
            listener,
            stop_executor.clone(),
        ));

        let session = Session::start().await;
        let llm = ScriptedLlm::start().await.unwrap();
        // The HostAgent goes on without acting until its prompt says a person acted; then it finishes.
        for _ in 0..29 {
            llm.push_fn(|req| {
                let reply = if req.text().contains(NOTE) {
                    common::host(
                        "FINISH",
                        json!({"result": "the person typed it", "comment": "done"}),
                    )
                } else {
                    common::host("CONTINUE", json!({"comment": "looking"}))
                };
                ScriptedReply::Text(reply.to_string())
            });
        }
        let executors = format!("desk=http://{addr}");
        let base_url = llm.base_url();
        let config = agent_config(
            &session.url,
            &[
                "--api-keys",
                &format!("other:{OTHER}"),
                "--executors",
                &executors,
                "--default-executor",
                "desk",
                "--executor-token",
                "tok",
                "--llm-base-url",
                &base_url,
                "--llm-default-price",
                "0/0",
                "--claim-interval-ms",
                "50",
            ],
        );
        let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::from_config(&config).unwrap());
        let agent = Agent::start(config, Some(driver)).await;
        let http = ufo_testkit::http_client();
        let (status, task) = post(
            &http,
            &format!("{}/v1/tasks", agent.http),
            KEY,
            Some(json!({"request": "write a note in mousepad"})),
        )
        .await;
        assert_eq!(status, 202, "{task}");
        let id = task["id"].as_str().unwrap().to_owned();
        let url = format!("{}/v1/tasks/{id}", agent.http);

        World {
            _desk: desk,
            local,
            doc_id: doc["id"].as_str().unwrap().to_owned(),
            x,
            y,
            session,
            llm,
            agent,
            stop_executor,
            http,
            id,
            url,
        }
    }

    /// The document's text, read through AT-SPI.
    async fn text(&self) -> String {
        drive::ok(&self.local, OPTS, "texts", json!({"id": self.doc_id}))
            .await
            .output
            .result
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until mousepad's document holds `want`.
    async fn until_typed(&self, want: &str) {
        drive::until(&format!("{want:?} in mousepad"), || async {
            self.text().await.contains(want)
        })
        .await;
    }

    /// The ended task's last step carries the whole desktop as the task left it (kind `after`), no
    /// other step does, and it is what the executor itself captures now (the test changed nothing
    /// since): at most 1 % of the pixels differ (a caret may blink). It is not the first step's picture:
    /// the person's text is in it.
    async fn after_picture_is_the_desktop_as_the_task_left_it(&self) {
        let page: Value = self
            .http
            .get(format!("{}/steps?limit=500", self.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let steps = page["steps"].as_array().unwrap();
        let last = steps.last().unwrap();
        let has_after = |s: &Value| {
            s["screenshots"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "after")
        };
        assert!(has_after(last), "the last step: {last}");
        assert_eq!(
            steps.iter().filter(|s| has_after(s)).count(),
            1,
            "only the last step has the after-picture"
        );
        let n = last["step"].as_u64().unwrap();
        let get = |kind: &'static str, step: u64, key: &'static str| {
            self.http
                .get(format!("{}/steps/{step}/screenshot?kind={kind}", self.url))
                .bearer_auth(key)
                .send()
        };
        let other = get("after", n, OTHER).await.unwrap();
        assert_eq!(other.status(), 404, "another caller's after-picture");
        let res = get("after", n, KEY).await.unwrap();
        assert_eq!(res.status(), 200);
        let after = image::load_from_memory(&res.bytes().await.unwrap())
            .unwrap()
            .to_rgb8();
        let now = drive::ok(
            &self.local,
            OPTS,
            "capture_desktop_screenshot",
            json!({"all_screens": true}),
        )
        .await;
        let now = image::load_from_memory(&now.output.images[0].data)
            .unwrap()
            .to_rgb8();
        assert_eq!(after.dimensions(), now.dimensions());
        let differ = |a: &image::RgbImage, b: &image::RgbImage| {
            a.pixels().zip(b.pixels()).filter(|(p, q)| p != q).count() as f64
                / f64::from(a.width() * a.height())
        };
        let changed = differ(&after, &now);
        assert!(
            changed <= 0.01,
            "{:.2} % of the after-picture differs from the desktop now",
            changed * 100.0
        );
        let first = steps
            .iter()
            .find(|s| {
                s["screenshots"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k == "desktop")
            })
            .unwrap();
        let first = get("desktop", first["step"].as_u64().unwrap(), KEY)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let first = image::load_from_memory(&first).unwrap().to_rgb8();
        if first.dimensions() == after.dimensions() {
            assert!(
                differ(&first, &after) > 0.0005,
                "the after-picture is the first step's picture: the person's text is not in it"
            );
        }
    }

    /// The task once it ended.
    async fn ended(&self) -> Value {
        eventually(60, "the task's end", || async {
            let t: Value = self
                .http
                .get(&self.url)
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
        })
        .await
    }

    /// The person's recorded steps once there are `n`.
    async fn person_steps(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let page: Value = self
                .http
                .get(format!("{}/steps?limit=100", self.url))
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let steps: Vec<Value> = page["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["agent_kind"] == "person")
                .cloned()
                .collect();
            if steps.len() == n {
                return steps;
            }
            if tokio::time::Instant::now() > deadline {
                let task: Value = self
                    .http
                    .get(&self.url)
                    .bearer_auth(KEY)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let events: Vec<String> = self
                    .session
                    .events(&self.id)
                    .await
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {:?} step {} {:?}",
                            e.seq,
                            EventKind::try_from(e.kind),
                            e.step,
                            e.payload
                        )
                    })
                    .collect();
                panic!("no {n} person's steps; task {task}\nevents {events:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[allow(dead_code)]
    async fn person_steps_old(&self, n: usize) -> Vec<Value> {
        eventually(30, "the person's steps", || async {
            let page: Value = self
                .http
                .get(format!("{}/steps?limit=100", self.url))
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let steps: Vec<Value> = page["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["agent_kind"] == "person")
                .cloned()
                .collect();
            (steps.len() == n).then_some(steps)
        })
        .await
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
        self.stop_executor.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_takes_over_types_into_mousepad_and_hands_back() {
    let w = World::start().await;
    let (http, url, llm, x, y) = (&w.http, &w.url, &w.llm, w.x, w.y);
    // The live desktop: a JPEG of the whole screen; nobody else's.
    let live = http
        .get(format!("{url}/live"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let frame = first_frame(live).await;
    assert_eq!(
        (frame["width"].as_u64(), frame["height"].as_u64()),
        (Some(1024), Some(700))
    );
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(frame["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(jpeg.len() as u64, frame["bytes"].as_u64().unwrap());
    let picture = image::load_from_memory(&jpeg).unwrap();
    assert_eq!((picture.width(), picture.height()), (1024, 700));
    let other = http
        .get(format!("{url}/live"))
        .bearer_auth(OTHER)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);

    // Input before a takeover is refused; another caller cannot take over.
    let (status, body) = post(
        http,
        &format!("{url}/input"),
        KEY,
        Some(json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "failed_precondition");
    for action in ["takeover", "handback"] {
        let (status, _) = post(http, &format!("{url}/{action}"), OTHER, None).await;
        assert_eq!(status, 404, "{action} by another caller");
    }

    let (status, body) = post(http, &format!("{url}/takeover"), KEY, None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["taken_over"], true);
    let (status, _) = post(http, &format!("{url}/takeover"), KEY, None).await;
    assert_eq!(status, 409, "a second takeover");
    let (status, _) = post(
        http,
        &format!("{url}/input"),
        OTHER,
        Some(json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 404, "input by another caller");

    // Bad input is 400 before anything is queued.
    let bad = [
        (json!({"click": {"x": 5000, "y": 10}}), "not on a screen"),
        (json!({"click": {"x": -1, "y": 10}}), "not on a screen"),
        (
            json!({"click": {"x": 1, "y": 1, "button": "thumb"}}),
            "button",
        ),
        (json!({"text": "a\u{0}b"}), "control character"),
        (json!({"text": "x".repeat(4097)}), "more than the limit"),
        (json!({"text": ""}), "empty"),
        (json!({"text": "a", "keys": "b"}), ""),
        (json!({"scroll": 3}), ""),
    ];
    for (input, want) in bad {
        let (status, body) = post(http, &format!("{url}/input"), KEY, Some(input.clone())).await;
        assert_eq!(status, 400, "{input}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(want),
            "{input}: {body}"
        );
    }

    // The person clicks into the document and types.
    let (status, body) = post(
        http,
        &format!("{url}/input"),
        KEY,
        Some(json!({"click": {"x": x, "y": y}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = post(
        http,
        &format!("{url}/input"),
        KEY,
        Some(json!({"text": "typed by a person"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let person_steps = w.person_steps(2).await;
    w.until_typed("typed by a person").await;
    assert_eq!(person_steps[0]["agent_name"], "Person");
    assert_eq!(person_steps[0]["actions"][0]["function"], "person_click");
    assert_eq!(
        person_steps[1]["actions"][0]["representation"],
        "typed \"typed by a person\""
    );
    let prompts_before = llm.requests().len();
    // The agents waited while the person had the desktop: no model call for the person's steps.
    assert!(
        llm.requests().iter().all(|r| !r.text().contains(NOTE)),
        "the agents went on before the hand-back"
    );

    let (status, body) = post(http, &format!("{url}/handback"), KEY, None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["taken_over"], false);
    let done = w.ended().await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["result"], "the person typed it");
    let requests = llm.requests();
    assert!(requests.len() > prompts_before);
    let after = requests.last().unwrap().text();
    assert!(
        after.contains(NOTE),
        "the prompt after the hand-back: {after}"
    );
    assert!(after.contains("typed \\\"typed by a person\\\""), "{after}");
    assert!(after.contains(&format!("clicked at ({x}, {y})")), "{after}");

    // Each input's intent was recorded before its step.
    let events = w.session.events(&w.id).await;
    let kinds: Vec<(i32, u64)> = events.iter().map(|e| (e.kind, e.step)).collect();
    for step in person_steps.iter().map(|s| s["step"].as_u64().unwrap()) {
        let intent = kinds
            .iter()
            .position(|&(k, s)| k == EventKind::StepStarted as i32 && s == step)
            .expect("an intent for the person's step");
        let finished = kinds
            .iter()
            .position(|&(k, s)| k == EventKind::StepFinished as i32 && s == step)
            .expect("the person's step finished");
        assert!(intent < finished);
    }
    // Input after the task ended is refused.
    let (status, _) = post(http, &format!("{url}/takeover"), KEY, None).await;
    assert_eq!(status, 409);

    w.after_picture_is_the_desktop_as_the_task_left_it().await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_viewer_shows_the_desktop_live_and_a_person_takes_over_in_chromium() {
    let w = World::start().await;
    let browser = Browser::start().await;
    let base = w.agent.http.clone();
    browser.goto(&format!("{base}/")).await;
    browser
        .wait(20, "the sign-in form", "document.querySelector('#api-key')")
        .await;
    browser.type_into("#api-key", KEY).await;
    browser.click("#signin button[type=submit]").await;
    browser
        .wait(20, "the task list", "document.querySelector('#tasks')")
        .await;
    browser.goto(&format!("{base}/#/task/{}", w.id)).await;
    let first = browser
        .wait(
            30,
            "a live frame",
            "document.querySelector('#live-picture').naturalWidth === 1024 && Number(document.querySelector('#live-picture').dataset.seq)",
        )
        .await
        .as_u64()
        .unwrap();
    browser.click("#takeover").await;
    browser
        .wait(
            20,
            "the takeover",
            "document.querySelector('#takeover').disabled && !document.querySelector('#handback').disabled",
        )
        .await;
    // A real click on the picture where mousepad's document is (the picture may be scaled).
    let shown = browser
        .js(
            "const r = document.querySelector('#live-picture').getBoundingClientRect(); return [r.width, r.height];",
            json!([]),
        )
        .await;
    let (rw, rh) = (shown[0].as_f64().unwrap(), shown[1].as_f64().unwrap());
    let dx = ((w.x as f64 + 0.5) * rw / 1024.0 - rw / 2.0).round() as i64;
    let dy = ((w.y as f64 + 0.5) * rh / 700.0 - rh / 2.0).round() as i64;
    browser.click_at("#live-picture", dx, dy).await;
    browser
        .type_into("#live-text", "typed in the browser")
        .await;
    browser.click("#live-type button[type=submit]").await;
    w.until_typed("typed in the browser").await;
    let steps = w.person_steps(2).await;
    let click = &steps[0]["actions"][0];
    assert_eq!(click["function"], "person_click", "{click}");
    let at = &click["arguments"]["click"];
    assert!(
        (at["x"].as_i64().unwrap() - w.x).abs() <= 2
            && (at["y"].as_i64().unwrap() - w.y).abs() <= 2,
        "clicked at {at}, the document's centre is ({}, {})",
        w.x,
        w.y
    );
    // The typing was drawn: a frame captured after the text was in mousepad reached the page.
    let typed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    browser
        .wait(
            30,
            "a frame after the typing",
            &format!(
                "Number(document.querySelector('#live-picture').dataset.seq) > {first} && Number(document.querySelector('#live-picture').dataset.at) > {typed_at}"
            ),
        )
        .await;
    let png = browser.screenshot().await;
    let path = std::env::var("UFO_LIVE_PNG").unwrap_or_else(|_| {
        format!(
            "{}/../../target/live-viewer.png",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    std::fs::write(&path, &png).unwrap();
    let page = image::load_from_memory(&png).unwrap();
    assert!(
        page.width() >= 1000,
        "the page's screenshot is {}px wide",
        page.width()
    );

    browser.click("#handback").await;
    browser
        .wait(
            60,
            "the task finished in the page",
            "document.querySelector('#task-head [data-status=finished]')",
        )
        .await;
    // The last step's card shows the desktop after it, once the task ended.
    browser
        .wait(
            30,
            "the after-picture in the last step's card",
            "(() => { const i = document.querySelector('#timeline .step:last-child img.shot-after'); \
             return i && i.complete && i.naturalWidth > 0; })()",
        )
        .await;
    let done = w.ended().await;
    assert_eq!(done["status"], "finished", "{done}");
    assert!(
        w.llm
            .requests()
            .last()
            .unwrap()
            .text()
            .contains("typed \\\"typed in the browser\\\""),
        "the prompt after the hand-back names the typed text"
    );
    browser.stop().await;
    w.stop().await;
}
