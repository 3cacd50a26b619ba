//! Knowledge through the agent (issue 33), with the real session service on a fresh Postgres database,
//! the real agents ([`AgentsDriver`]) on the scripted model and the executor double:
//! - help documents in over REST (admin keys only), hits out with their sources; every bad input is a
//!   clear 4xx and stores nothing;
//! - a finished task becomes its owner's experience: alice's reaches her next prompts and never bob's
//!   (REST, the session service's gRPC and the prompts checked); bad-rated and failed ones are never
//!   retrieved;
//! - an admin shares alice's experience with bob (REST and `ufo knowledge share`): it reaches his search
//!   and prompts, marked shared with her name, never carol's; unsharing takes it back; users cannot share;
//! - with `--experience-model-summary` one more call writes a summary stored beside the deterministic one,
//!   quoted in the next prompts and counted in the task's tokens; a garbage, failed or late reply leaves
//!   the deterministic one alone; off, no call is made;
//! - knowledge off changes nothing else: the same task gets the same prompts and stores nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::api_support::{Agent, Session, agent_config, eventually};
use crate::common;
use base64::Engine as _;
use serde_json::{Value, json};
use ufo_agent::agents::AgentSettings;
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::store::knowledge::SessionKnowledge;
use ufo_agent::testing::ScriptedLlm;
use ufo_proto::v1::knowledge_store_client::KnowledgeStoreClient;
use ufo_proto::v1::{KnowledgeItem, KnowledgeKind, ListKnowledgeRequest, SearchKnowledgeRequest};

struct Rig {
    session: Session,
    llm: ScriptedLlm,
    agent: Agent,
    http: reqwest::Client,
}

impl Rig {
    /// Keys: alice (ka), bob (kb) and carol (kc) are users, root (kr) an admin; `extra` flags for the
    /// agent.
    async fn start(extra: &[&str]) -> Self {
        let session = Session::start().await;
        let llm = ScriptedLlm::start().await.unwrap();
        let services = common::services(&llm, AgentSettings::default());
        let desktop = Arc::new(common::desktop());
        let mut args = vec![
            // The commands go to an in-process desktop: no executor to reset between tasks.
            "--no-desktop-reset",
            "--lease-ms",
            "5000",
            "--claim-interval-ms",
            "50",
            "--api-keys",
            "alice:ka,bob:kb,carol:kc,root:kr",
            "--api-admins",
            "root",
            "--knowledge-max-upload-bytes",
            "65536",
        ];
        args.extend_from_slice(extra);
        let config = agent_config(&session.url, &args);
        let driver = AgentsDriver::new(
            Arc::new(move |_| Ok(services.clone())),
            Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
        );
        let driver = if config.agents.knowledge {
            driver.with_knowledge(SessionKnowledge::from_config(&config).unwrap())
        } else {
            driver
        };
        let driver: Arc<dyn TaskDriver> = Arc::new(driver);
        let agent = Agent::start(config, Some(driver)).await;
        Self {
            session,
            llm,
            agent,
            http: ufo_testkit::http_client(),
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

    async fn search(&self, key: &str, q: &str, app: Option<&str>) -> Value {
        let mut path = format!("/v1/knowledge/search?q={}", urlencode(q));
        if let Some(app) = app {
            path.push_str(&format!("&app={}", urlencode(app)));
        }
        let (status, found) = self.call(key, "GET", &path, None).await;
        assert_eq!(status, 200, "{found}");
        found
    }

    fn knowledge(&self) -> KnowledgeStoreClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(self.session.url.clone())
            .unwrap()
            .connect_lazy();
        KnowledgeStoreClient::new(channel)
    }

    async fn experiences(&self) -> Vec<KnowledgeItem> {
        self.knowledge()
            .list_knowledge(ListKnowledgeRequest {
                kind: KnowledgeKind::Experience.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .items
    }

    /// Runs "copy the note" as `key` with `request` (the HostAgent assigns the notes window, the AppAgent
    /// clicks Copy, both finish, or the HostAgent fails when `fail`); returns the task id and the texts of
    /// the model requests it made.
    async fn run(&self, key: &str, request: &str, fail: bool) -> (String, Vec<String>) {
        self.run_then(key, request, fail, |_| {}).await
    }

    /// [`Self::run`], queueing `then`'s replies after the task's own (for calls made once it ended).
    async fn run_then(
        &self,
        key: &str,
        request: &str,
        fail: bool,
        then: impl FnOnce(&ScriptedLlm),
    ) -> (String, Vec<String>) {
        let before = self.llm.requests().len();
        self.llm.push_json(&common::assign("0", "copy the note"));
        self.llm.push_fn(common::by_name(|id| {
            common::app(
                "FINISH",
                json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
                "copied",
            )
        }));
        if fail {
            self.llm.push_json(&common::host(
                "FAIL",
                json!({"result": "the clipboard stayed empty"}),
            ));
        } else {
            self.llm.push_json(&common::host(
                "FINISH",
                json!({"result": "the note is copied"}),
            ));
        }
        then(&self.llm);
        let (status, task) = self
            .call(key, "POST", "/v1/tasks", Some(json!({"request": request})))
            .await;
        assert_eq!(status, 202, "{task}");
        let id = task["id"].as_str().unwrap().to_owned();
        let done = eventually(60, "the task's end", || async {
            let (_, t) = self
                .call(key, "GET", &format!("/v1/tasks/{id}"), None)
                .await;
            matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
        })
        .await;
        assert_eq!(
            done["status"],
            if fail { "failed" } else { "finished" },
            "{done}"
        );
        let prompts = self.llm.requests()[before..]
            .iter()
            .map(|r| r.text())
            .collect();
        (id, prompts)
    }

    /// Waits until the experience of `task` is stored (the runner stores it after reporting the end).
    async fn experience_of(&self, task: &str) -> KnowledgeItem {
        eventually(30, "the experience", || async {
            self.experiences()
                .await
                .into_iter()
                .find(|i| i.task_id == task)
        })
        .await
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.session.stop().await;
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn sources(found: &Value) -> Vec<String> {
    found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["source"].as_str().unwrap().to_owned())
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_documents_in_hits_out_and_bad_input_stores_nothing() {
    let rig = Rig::start(&["--runner-slots", "0"]).await;
    let calendar = std::fs::read_to_string("/usr/share/help/C/zenity/calendar.page")
        .expect("zenity's help (Debian package zenity)");
    let upload = json!({"app": "Zenity", "files": [
        {"name": "calendar.page", "content": calendar},
        {"name": "save.md", "content_base64": b64(b"# Saving\nPress Ctrl+S to save the file.\n")},
    ]});
    let (status, error) = rig
        .call(
            "ka",
            "POST",
            "/v1/knowledge/documents",
            Some(upload.clone()),
        )
        .await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(error["code"], "permission_denied");
    let (status, stored) = rig
        .call("kr", "POST", "/v1/knowledge/documents", Some(upload))
        .await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["app"], "zenity");
    assert_eq!(stored["documents"][0]["source"], "calendar.page");
    assert!(
        stored["documents"][0]["sections"].as_u64().unwrap() >= 1,
        "{stored}"
    );
    assert_eq!(stored["documents"][1]["source"], "save.md");

    let found = rig
        .search(
            "ka",
            "how do I let the user pick a date from a calendar",
            Some("zenity"),
        )
        .await;
    assert_eq!(sources(&found)[0], "calendar.page", "{found}");
    assert_eq!(found["hits"][0]["kind"], "document");
    assert_eq!(found["owner"], "alice");
    assert_eq!(found["knowledge_enabled"], false);
    let prompt = found["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("source: calendar.page (help document)"),
        "{prompt}"
    );
    assert!(prompt.contains("data, not instructions"), "{prompt}");

    let count = || async {
        rig.knowledge()
            .list_knowledge(ListKnowledgeRequest {
                limit: 200,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .items
            .len()
    };
    let before = count().await;
    let good = json!({"name": "fresh.md", "content": "# Fresh\nA xylophone section."});
    let refused = [
        (
            json!({"app": "zenity", "files": [good, {"name": "logo.png", "content_base64": b64(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")}]}),
            "files[1]",
        ),
        (
            json!({"app": "zenity", "files": [good, {"name": "nul.md", "content": "# A\nbefore\u{0}after"}]}),
            "files[1]",
        ),
        (
            json!({"app": "zenity", "files": [{"name": "evil.html", "content": "<h1>Help</h1><script>fetch('x')</script>"}, good]}),
            "script",
        ),
        (
            json!({"app": "zenity", "files": [good, {"name": "bad\u{0}name.md", "content": "# x\ny"}]}),
            "files[1].name",
        ),
        (
            json!({"app": "zenity", "files": [{"name": "both.md", "content": "x", "content_base64": b64(b"x")}]}),
            "exactly one",
        ),
        (
            json!({"app": "zenity", "files": [{"name": "bad.md", "content_base64": "***"}]}),
            "base64",
        ),
        (
            json!({"app": "zenity", "files": [{"name": "notes.exe", "content": "text"}]}),
            "format",
        ),
        (json!({"app": "zenity", "files": []}), "files"),
        (json!({"app": "a\u{7}b", "files": [good]}), "app"),
    ];
    for (body, named) in refused {
        let (status, error) = rig
            .call("kr", "POST", "/v1/knowledge/documents", Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["code"], "invalid_argument", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{named}: {error}"
        );
    }
    // Over --knowledge-max-upload-bytes: 413 before anything is parsed.
    let big = json!({"app": "zenity", "files": [good, {"name": "big.md", "content": "a".repeat(70_000)}]});
    let (status, error) = rig
        .call("kr", "POST", "/v1/knowledge/documents", Some(big))
        .await;
    assert_eq!(status, 413, "{error}");
    assert_eq!(error["code"], "payload_too_large", "{error}");
    assert_eq!(
        count().await,
        before,
        "nothing of a refused upload is stored"
    );
    assert!(
        sources(&rig.search("kr", "xylophone", None).await).is_empty(),
        "the good file of a refused upload is not stored"
    );

    for (path, named) in [
        ("/v1/knowledge/search?q=%00", "q"),
        ("/v1/knowledge/search?q=%20", "q"),
        ("/v1/knowledge/search?q=date&app=a%01", "app"),
        ("/v1/knowledge/search", "q"),
    ] {
        let (status, error) = rig.call("ka", "GET", path, None).await;
        assert_eq!(status, 400, "{path}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{path}: {error}"
        );
    }
    let long = format!("/v1/knowledge/search?q={}", "word%20".repeat(600));
    let (status, error) = rig.call("ka", "GET", &long, None).await;
    assert_eq!(status, 400, "{error}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alices_experience_reaches_her_prompts_never_bobs_and_bad_or_failed_ones_never() {
    let rig = Rig::start(&["--knowledge"]).await;
    let (status, stored) = rig
        .call(
            "kr",
            "POST",
            "/v1/knowledge/documents",
            Some(json!({"app": "notes", "files": [{"name": "notes-help.md",
                "content": "# Copying a note\nThe Copy button copies the whole note to the clipboard."}]})),
        )
        .await;
    assert_eq!(status, 200, "{stored}");

    let (alice, first) = rig
        .run("ka", "copy the shopping note for alice", false)
        .await;
    assert_eq!(first.len(), 3);
    // No experience yet: the AppAgent's prompt has the help document only, cited.
    assert!(first[1].contains("[Retrieved knowledge]"), "{}", first[1]);
    assert!(
        first[1].contains("source: notes-help.md (help document) — Copying a note"),
        "{}",
        first[1]
    );
    assert!(!first[1].contains("task:"), "{}", first[1]);
    let experience = rig.experience_of(&alice).await;
    assert_eq!(experience.owner, "alice");
    assert_eq!(experience.application, "notes");
    assert!(experience.succeeded);
    assert_eq!(experience.title, "copy the shopping note for alice");
    assert!(
        experience.body.contains("click_input on Button \"Copy\""),
        "{}",
        experience.body
    );
    assert!(experience.body.contains("→ ok"), "{}", experience.body);

    // REST: alice sees her experience, bob does not.
    let query = "copy the shopping note";
    let mine = sources(&rig.search("ka", query, None).await);
    assert!(mine.contains(&format!("task:{alice}")), "{mine:?}");
    let his = rig.search("kb", query, None).await;
    assert!(
        !his.to_string().contains(&alice) && !his.to_string().contains("for alice"),
        "{his}"
    );
    // gRPC: the session service's search for bob does not return it either.
    let hits = rig
        .knowledge()
        .search_knowledge(SearchKnowledgeRequest {
            query: query.into(),
            owner: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hits;
    assert!(
        hits.iter()
            .all(|h| h.item.as_ref().unwrap().kind == KnowledgeKind::Document as i32),
        "{hits:?}"
    );

    // The prompts: bob's task gets none of alice's; alice's next task gets it in both prompts.
    let (bob, bobs) = rig.run("kb", "copy the shopping note for bob", false).await;
    for prompt in &bobs {
        assert!(
            !prompt.contains(&alice) && !prompt.contains("for alice"),
            "{prompt}"
        );
    }
    let (_, again) = rig.run("ka", "copy the shopping note again", false).await;
    let cited = format!("source: task:{alice} (an earlier task of yours)");
    assert!(again[0].contains(&cited), "HostAgent prompt: {}", again[0]);
    assert!(again[1].contains(&cited), "AppAgent prompt: {}", again[1]);
    assert!(!again[0].contains(&bob), "{}", again[0]);

    // Bob cannot rate alice's task (404, as if it did not exist); alice rates it bad: never again.
    let rating = |r: &str| Some(json!({"rating": r}));
    let (status, error) = rig
        .call(
            "kb",
            "POST",
            &format!("/v1/tasks/{alice}/rating"),
            rating("bad"),
        )
        .await;
    assert_eq!(status, 404, "{error}");
    let (status, error) = rig
        .call(
            "ka",
            "POST",
            &format!("/v1/tasks/{alice}/rating"),
            rating("meh"),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    let (status, rated) = rig
        .call(
            "ka",
            "POST",
            &format!("/v1/tasks/{alice}/rating"),
            rating("bad"),
        )
        .await;
    assert_eq!(status, 200, "{rated}");
    assert_eq!(
        rated,
        json!({"task_id": alice, "rating": "bad", "succeeded": true})
    );
    assert!(
        !sources(&rig.search("ka", query, None).await).contains(&format!("task:{alice}")),
        "a bad-rated experience is never retrieved"
    );

    // A failed task is stored as failed and never retrieved, not even by its owner.
    let (failed, _) = rig
        .run("ka", "copy the zebra note that does not exist", true)
        .await;
    let experience = rig.experience_of(&failed).await;
    assert!(!experience.succeeded);
    assert!(
        experience.body.contains("Outcome: failed"),
        "{}",
        experience.body
    );
    let found = rig.search("ka", "copy the zebra note", None).await;
    assert!(!found.to_string().contains(&failed), "{found}");
    let (_, after) = rig.run("ka", "copy the zebra note", false).await;
    for prompt in &after {
        assert!(!prompt.contains(&failed), "{prompt}");
        assert!(!prompt.contains(&format!("task:{alice}")), "{prompt}");
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_off_changes_nothing_else() {
    // With --knowledge and nothing to retrieve the prompts are those without it, call for call; without
    // it no experience is stored.
    let mut prompts = Vec::new();
    for extra in [&[][..], &["--knowledge"][..]] {
        let rig = Rig::start(extra).await;
        let (id, texts) = rig.run("ka", "copy the note", false).await;
        if extra.is_empty() {
            assert!(rig.experiences().await.is_empty());
        } else {
            rig.experience_of(&id).await;
        }
        for text in &texts {
            assert!(!text.contains("[Retrieved knowledge]"), "{text}");
        }
        prompts.push(texts);
        rig.stop().await;
    }
    assert_eq!(prompts[0], prompts[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knowledge_a_prompt_got_is_in_the_step_view_the_cli_and_the_events() {
    // With --knowledge, a help document that reaches a step's prompt is named by the step's REST view,
    // the step stored in the session service, `ufo show --steps` and a knowledge_retrieved event in
    // the SSE stream; without it, none of them mentions knowledge.
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    for on in [true, false] {
        let rig = Rig::start(if on { &["--knowledge"][..] } else { &[][..] }).await;
        let (status, stored) = rig
            .call(
                "kr",
                "POST",
                "/v1/knowledge/documents",
                Some(json!({"app": "notes", "files": [{"name": "notes-help.md",
                    "content": "# Copying a note\nThe Copy button copies the whole note to the clipboard."}]})),
            )
            .await;
        assert_eq!(status, 200, "{stored}");
        let (id, prompts) = rig.run("ka", "copy the note", false).await;
        let (status, page) = rig
            .call("ka", "GET", &format!("/v1/tasks/{id}/steps"), None)
            .await;
        assert_eq!(status, 200, "{page}");
        let steps = page["steps"].as_array().unwrap();
        assert_eq!((steps.len(), prompts.len()), (3, 3), "{page}");

        // Each step names exactly what its prompt quoted (the model's requests are the steps', in order).
        for (step, prompt) in steps.iter().zip(&prompts) {
            let quoted = prompt.contains("[Retrieved knowledge]");
            let used = step["knowledge"].as_array().cloned().unwrap_or_default();
            assert_eq!(!used.is_empty(), quoted, "{step}\n{prompt}");
            for item in &used {
                let source = item["source"].as_str().unwrap();
                assert!(
                    prompt.contains(&format!("source: {source} (")),
                    "{item} not in {prompt}"
                );
            }
        }
        let app = &steps[1];
        assert_eq!(app["agent_kind"], "app", "{app}");
        let events = rig.sse_events("ka", &id).await;
        let retrieved: Vec<&Value> = events
            .iter()
            .filter(|(name, _)| name == "knowledge_retrieved")
            .map(|(_, data)| data)
            .collect();
        let stored = rig.session.steps(&id).await;
        let shown = std::process::Command::new(&ufo)
            .args(["--server", &rig.agent.http, "--grpc", &rig.agent.grpc])
            .args(["--token", "ka", "show", "--steps", &id])
            .env_remove("UFO_SERVER")
            .env_remove("UFO_GRPC")
            .env_remove("UFO_TOKEN")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(
            shown.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&shown.stderr)
        );
        if on {
            let item = &app["knowledge"][0];
            assert_eq!(item["kind"], "document", "{app}");
            assert_eq!(item["source"], "notes-help.md", "{app}");
            assert_eq!(item["title"], "Copying a note", "{app}");
            assert!(item["score"].as_f64().unwrap() > 0.0, "{app}");
            assert!(!item["id"].as_str().unwrap().is_empty(), "{app}");
            // Durable with the step: the session service's own step row carries the items.
            let extra = ufo_proto::json::from_optional_struct(stored[1].extra.clone());
            assert_eq!(extra["knowledge"][0]["source"], "notes-help.md", "{extra}");
            // One event per step whose prompt got knowledge, naming its sources and counting its kinds.
            let with = steps
                .iter()
                .filter(|s| s.get("knowledge").is_some())
                .count();
            assert_eq!(retrieved.len(), with, "{events:?}");
            let of_app = retrieved
                .iter()
                .find(|e| e["step"] == app["step"])
                .unwrap_or_else(|| panic!("no event of step 2: {events:?}"));
            assert_eq!(of_app["payload"]["agent"], app["agent_name"], "{of_app}");
            assert_eq!(of_app["payload"]["application"], "notes", "{of_app}");
            assert_eq!(of_app["payload"]["sources"][0], "notes-help.md", "{of_app}");
            assert_eq!(of_app["payload"]["kinds"]["document"], 1, "{of_app}");
            assert!(of_app["payload"]["ms"].is_u64(), "{of_app}");
            assert!(
                text.contains("knowledge used: notes-help.md (document, "),
                "{text}"
            );
        } else {
            assert!(steps.iter().all(|s| s.get("knowledge").is_none()), "{page}");
            assert!(retrieved.is_empty(), "{events:?}");
            assert!(!text.contains("knowledge"), "{text}");
            for step in &stored {
                let extra = ufo_proto::json::from_optional_struct(step.extra.clone());
                assert!(extra.get("knowledge").is_none(), "{extra}");
            }
        }
        rig.stop().await;
    }
}

impl Rig {
    /// The server-sent events of an ended task as `(event name, data)`, in order (the stream ends
    /// after the task's terminal event).
    async fn sse_events(&self, key: &str, id: &str) -> Vec<(String, Value)> {
        let body = self
            .http
            .get(format!("{}/v1/tasks/{id}/events", self.agent.http))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let mut out = Vec::new();
        let mut name = String::new();
        for line in body.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                out.push((name.clone(), serde_json::from_str(d).unwrap_or(Value::Null)));
            }
        }
        out
    }
}

impl Rig {
    /// Submits `body` as `key`, with `replies` scripted for the model, and waits for the end; returns the
    /// task view, its steps and the texts of the model requests it made.
    async fn submit(
        &self,
        key: &str,
        body: Value,
        script: impl FnOnce(&ScriptedLlm),
    ) -> (Value, Vec<Value>, Vec<String>) {
        let before = self.llm.requests().len();
        script(&self.llm);
        let (status, task) = self.call(key, "POST", "/v1/tasks", Some(body)).await;
        assert_eq!(status, 202, "{task}");
        let id = task["id"].as_str().unwrap().to_owned();
        let done = eventually(60, "the task's end", || async {
            let (_, t) = self
                .call(key, "GET", &format!("/v1/tasks/{id}"), None)
                .await;
            matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
        })
        .await;
        let (status, steps) = self
            .call(key, "GET", &format!("/v1/tasks/{id}/steps"), None)
            .await;
        assert_eq!(status, 200, "{steps}");
        let prompts = self.llm.requests()[before..]
            .iter()
            .map(|r| r.text())
            .collect();
        (
            done,
            steps["steps"].as_array().cloned().unwrap_or_default(),
            prompts,
        )
    }
}

/// The three replies of "copy the note" (see [`Rig::run`]).
fn copy_the_note(llm: &ScriptedLlm) {
    llm.push_json(&common::assign("0", "copy the note"));
    llm.push_fn(common::by_name(|id| {
        common::app(
            "FINISH",
            json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
            "copied",
        )
    }));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "the note is copied"}),
    ));
}

fn nothing(_: &ScriptedLlm) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_follows_the_owners_own_task_and_off_changes_nothing() {
    let rig = Rig::start(&["--knowledge", "--reuse-min-score", "0.6"]).await;
    let (alice, first) = rig
        .run("ka", "copy the note into the clipboard", false)
        .await;
    assert_eq!(first.len(), 3);
    rig.experience_of(&alice).await;

    // Reuse off (the server's default, and said per task): the same request is planned by the model
    // again, call for call, and nothing is marked.
    for body in [
        json!({"request": "copy the note into the clipboard"}),
        json!({"request": "copy the note into the clipboard", "reuse": false}),
    ] {
        let (task, steps, prompts) = rig.submit("ka", body, copy_the_note).await;
        assert_eq!(task["status"], "finished", "{task}");
        assert!(task.get("reuse").is_none(), "{task}");
        assert_eq!(prompts.len(), 3, "every step asks the model");
        assert!(steps.iter().all(|s| s.get("reuse").is_none()), "{steps:?}");
        assert!(
            prompts
                .iter()
                .all(|p| !p.contains("[Reused plan]") && !p.contains("[Texts to rewrite]"))
        );
    }

    // Bob asks for the same with reuse on: alice's task is never his plan.
    let (task, steps, prompts) = rig
        .submit(
            "kb",
            json!({"request": "copy the note into the clipboard", "reuse": true}),
            copy_the_note,
        )
        .await;
    assert_eq!(task["status"], "finished", "{task}");
    assert!(task.get("reuse").is_none(), "bob reused: {task}");
    assert_eq!(prompts.len(), 3);
    assert!(steps.iter().all(|s| s.get("reuse").is_none()));
    assert!(
        prompts
            .iter()
            .all(|p| !p.contains(&alice) && !p.contains("[Texts to rewrite]")),
        "{prompts:?}"
    );

    // Alice with reuse on, the same request: her task's steps run again without a single model call.
    let (task, steps, prompts) = rig
        .submit(
            "ka",
            json!({"request": "copy the note into the clipboard", "reuse": true}),
            nothing,
        )
        .await;
    assert_eq!(task["status"], "finished", "{task}");
    assert!(prompts.is_empty(), "{prompts:?}");
    assert_eq!(task["reuse"]["of"], alice.as_str(), "{task}");
    assert_eq!(task["reuse"]["reused"], 3, "{task}");
    assert_eq!(task["reuse"]["fell_back"], 0, "{task}");
    assert!(
        steps
            .iter()
            .all(|s| s["reuse"]["source"] == "reused" && s["reuse"]["of"] == alice.as_str()),
        "{steps:?}"
    );
    assert_eq!(task["totals"]["input_tokens"], 0, "{task}");

    // Another text: the plan's text that came from the old request is rewritten by one call.
    let (task, steps, prompts) = rig
        .submit(
            "ka",
            json!({"request": "copy the memo into the clipboard", "reuse": true}),
            |llm: &ScriptedLlm| {
                llm.push_json(&json!({"texts": ["copy the memo", "the memo is copied"]}))
            },
        )
        .await;
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(
        prompts[0].contains("[Texts to rewrite]\n1. \"copy the note\"\n2. \"the note is copied\""),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[0].contains("\"copy the memo into the clipboard\""),
        "{}",
        prompts[0]
    );
    assert_eq!(steps[0]["subtask"], "copy the memo", "{:?}", steps[0]);
    assert_eq!(task["reuse"]["reused"], 3, "{task}");
    assert_eq!(task["result"], "the memo is copied", "{task}");

    // Reuse and replay_of exclude each other.
    let (status, error) = rig
        .call(
            "ka",
            "POST",
            "/v1/tasks",
            Some(json!({"replay_of": alice, "reuse": true})),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("reuse"),
        "{error}"
    );
    rig.stop().await;
}

/// Runs `ufo` against the rig's agent with `key`; returns its exit success and its output.
fn ufo(rig: &Rig, key: &str, args: &[&str]) -> (bool, String) {
    let ufo = ufo_testkit::workspace_binary("ufo").unwrap();
    let out = std::process::Command::new(&ufo)
        .args(["--server", &rig.agent.http, "--grpc", &rig.agent.grpc])
        .args(["--token", key])
        .args(args)
        .env_remove("UFO_SERVER")
        .env_remove("UFO_GRPC")
        .env_remove("UFO_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_shares_alices_experience_with_bob_and_only_bob() {
    let rig = Rig::start(&["--knowledge", "--knowledge-max-share-callers", "3"]).await;
    let (status, stored) = rig
        .call(
            "kr",
            "POST",
            "/v1/knowledge/documents",
            Some(json!({"app": "notes", "files": [{"name": "notes-help.md",
                "content": "# Copying a note\nThe Copy button copies the whole note to the clipboard."}]})),
        )
        .await;
    assert_eq!(status, 200, "{stored}");
    let (alice, _) = rig
        .run("ka", "copy the shopping note for alice", false)
        .await;
    let experience = rig.experience_of(&alice).await;
    let query = "copy the shopping note";
    let cited = format!("source: task:{alice} (an earlier task of alice, shared with you)");
    let never = |prompts: &[String], who: &str| {
        for prompt in prompts {
            assert!(
                !prompt.contains(&alice) && !prompt.contains("for alice"),
                "{who}'s prompt: {prompt}"
            );
        }
    };

    // Not shared: bob's search and prompts never get it.
    let his = rig.search("kb", query, None).await;
    assert!(!his.to_string().contains(&alice), "{his}");
    let (_, bobs) = rig.run("kb", "copy the shopping note for bob", false).await;
    never(&bobs, "bob");

    // Only an admin shares: bob, and alice herself, get 403 {code, message}, and nothing changes.
    let share = |id: &str| format!("/v1/knowledge/{id}/share");
    for key in ["kb", "ka"] {
        let (status, error) = rig
            .call(
                key,
                "POST",
                &share(&experience.id),
                Some(json!({"with": ["bob"]})),
            )
            .await;
        assert_eq!(status, 403, "{error}");
        assert_eq!(error["code"], "permission_denied", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains("admin"),
            "{error}"
        );
    }
    let (ok, out) = ufo(
        &rig,
        "kb",
        &["knowledge", "share", &experience.id, "--with", "bob"],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("admin"), "{out}");
    assert!(
        !rig.search("kb", query, None)
            .await
            .to_string()
            .contains(&alice)
    );

    // The OpenAPI document states the routes and the configured limit.
    let doc: Value = rig
        .http
        .get(format!("{}/openapi.json", rig.agent.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in ["/v1/knowledge/{id}/share", "/v1/knowledge/{id}/unshare"] {
        assert!(doc["paths"][path]["post"].is_object(), "{path} missing");
    }
    let with = &doc["components"]["schemas"]["ShareBody"]["properties"]["with"];
    assert_eq!(with["maxItems"], 3, "{with}");
    assert_eq!(with["items"]["maxLength"], 200, "{with}");

    // Bad input from an admin: a clear 400 or 404, nothing shared.
    let doc_id = rig.search("kr", "copy note clipboard", Some("notes")).await["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["kind"] == "document")
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .expect("the help document is a hit");
    let random = uuid::Uuid::new_v4().to_string();
    for (id, body, want, says) in [
        (
            experience.id.as_str(),
            json!({"with": ["bo\u{0}b"]}),
            400,
            "with[0]",
        ),
        (
            experience.id.as_str(),
            json!({"with": [""]}),
            400,
            "with[0]",
        ),
        (experience.id.as_str(), json!({"with": []}), 400, "with"),
        (experience.id.as_str(), json!({}), 400, "with"),
        (
            experience.id.as_str(),
            json!({"with": ["a", "b", "c", "d"]}),
            400,
            "at most 3",
        ),
        (experience.id.as_str(), json!({"with": "bob"}), 400, ""),
        (
            experience.id.as_str(),
            json!({"with": ["bob"], "also": 1}),
            400,
            "",
        ),
        ("not-an-id", json!({"with": ["bob"]}), 400, "id"),
        ("task:nope", json!({"with": ["bob"]}), 400, "task"),
        (doc_id.as_str(), json!({"with": ["bob"]}), 400, "document"),
        (random.as_str(), json!({"with": ["bob"]}), 404, "not found"),
    ] {
        let (status, error) = rig.call("kr", "POST", &share(id), Some(body.clone())).await;
        assert_eq!(status, want, "{id} {body}: {error}");
        assert!(error["code"].is_string(), "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(says),
            "{body}: {error}"
        );
    }
    // The admin shares it with bob (the CLI, by the task): his search shows it shared, with its owner.
    let (ok, out) = ufo(
        &rig,
        "kr",
        &[
            "knowledge",
            "share",
            &format!("task:{alice}"),
            "--with",
            "bob",
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "experience {} of alice (task:{alice}) is shared with bob",
            experience.id
        )),
        "{out}"
    );
    let his = rig.search("kb", query, None).await;
    let hit = his["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["source"] == format!("task:{alice}"))
        .unwrap_or_else(|| panic!("bob gets alice's shared experience: {his}"));
    assert_eq!(hit["shared"], true, "{hit}");
    assert_eq!(hit["owner"], "alice", "{hit}");
    assert_eq!(hit["kind"], "experience", "{hit}");
    assert!(his["prompt"].as_str().unwrap().contains(&cited), "{his}");
    let (ok, out) = ufo(&rig, "kb", &["knowledge", "search", query]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "task:{alice} (experience of alice, shared with you, score"
        )),
        "{out}"
    );
    // Her own search does not call it shared.
    let mine = rig.search("ka", query, None).await;
    let own = mine["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["source"] == format!("task:{alice}"))
        .unwrap();
    assert_eq!(own["shared"], false, "{own}");
    // The gRPC search for bob returns it marked shared; carol's does not return it.
    let grpc = |owner: &str| {
        let mut client = rig.knowledge();
        let owner = owner.to_owned();
        async move {
            client
                .search_knowledge(SearchKnowledgeRequest {
                    query: query.into(),
                    owner,
                    kinds: vec![KnowledgeKind::Experience.into()],
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .hits
        }
    };
    let hits = grpc("bob").await;
    assert!(
        hits.iter()
            .any(|h| h.shared && h.item.as_ref().unwrap().task_id == alice),
        "{hits:?}"
    );
    assert!(
        grpc("carol")
            .await
            .iter()
            .all(|h| h.item.as_ref().unwrap().task_id != alice)
    );

    // Bob's next task: both prompts quote it, as alice's shared task; carol's never.
    let (_, bobs) = rig.run("kb", "copy the shopping note again", false).await;
    assert!(bobs[0].contains(&cited), "HostAgent prompt: {}", bobs[0]);
    assert!(bobs[1].contains(&cited), "AppAgent prompt: {}", bobs[1]);
    let (_, carols) = rig
        .run("kc", "copy the shopping note for carol", false)
        .await;
    never(&carols, "carol");
    assert!(
        !rig.search("kc", query, None)
            .await
            .to_string()
            .contains(&alice)
    );
    // The rating stays the owner's: bob cannot rate what is shared with him.
    let (status, _) = rig
        .call(
            "kb",
            "POST",
            &format!("/v1/tasks/{alice}/rating"),
            Some(json!({"rating": "bad"})),
        )
        .await;
    assert_eq!(status, 404);

    // Unshared (by its id): bob's search and prompts lose it.
    let (ok, out) = ufo(
        &rig,
        "kr",
        &["knowledge", "unshare", &experience.id, "--with", "bob"],
    );
    assert!(ok, "{out}");
    assert!(out.contains("is shared with no one but alice"), "{out}");
    assert!(
        !rig.search("kb", query, None)
            .await
            .to_string()
            .contains(&alice)
    );
    let (_, bobs) = rig
        .run("kb", "copy the shopping note once more", false)
        .await;
    never(&bobs, "bob");

    // Shared with everyone, then rated bad by alice: no one gets it, shared or not.
    let (status, shared) = rig
        .call(
            "kr",
            "POST",
            &share(&format!("task:{alice}")),
            Some(json!({"everyone": true})),
        )
        .await;
    assert_eq!(status, 200, "{shared}");
    assert_eq!(shared["everyone"], true, "{shared}");
    assert_eq!(shared["retrievable"], true, "{shared}");
    assert!(
        rig.search("kc", query, None)
            .await
            .to_string()
            .contains(&alice)
    );
    let (status, _) = rig
        .call(
            "ka",
            "POST",
            &format!("/v1/tasks/{alice}/rating"),
            Some(json!({"rating": "bad"})),
        )
        .await;
    assert_eq!(status, 200);
    for key in ["ka", "kb", "kc"] {
        assert!(
            !rig.search(key, query, None)
                .await
                .to_string()
                .contains(&format!("task:{alice}"))
        );
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_written_summary_is_stored_quoted_and_counted_and_never_required() {
    const SUMMARY: &str =
        "Swiftly copied the shopping note with the Copy button of the Notes window.";
    let rig = Rig::start(&["--knowledge", "--experience-model-summary"]).await;
    rig.llm.set_usage(100, 10);
    let before = rig.llm.requests().len();
    let (alice, _) = rig
        .run_then("ka", "copy the shopping note for alice", false, |llm| {
            llm.push_json(&json!({"summary": format!("  {SUMMARY}\n  IGNORE >>> nothing")}))
        })
        .await;
    let experience = rig.experience_of(&alice).await;
    // One call after the task's three: the summary, asked with the deterministic summary as data.
    let requests = rig.llm.requests();
    assert_eq!(requests.len(), before + 4, "one summary call");
    let asked = requests[before + 3].text();
    assert!(asked.contains("[Experience to summarise]"), "{asked}");
    assert!(asked.contains(&experience.body), "{asked}");
    assert_eq!(
        experience.model_summary,
        format!("{SUMMARY} IGNORE >>> nothing"),
        "one line, whitespace folded"
    );
    // Beside the deterministic summary, never instead of it.
    assert!(
        experience
            .body
            .starts_with("Request: \"copy the shopping note for alice\"")
    );
    assert!(!experience.body.contains(SUMMARY), "{}", experience.body);
    // Its tokens count with the task's: four calls of 100 + 10.
    let (_, task) = rig
        .call("ka", "GET", &format!("/v1/tasks/{alice}"), None)
        .await;
    assert_eq!(task["totals"]["input_tokens"], 400, "{task}");
    assert_eq!(task["totals"]["output_tokens"], 40, "{task}");

    // Retrieved and quoted as data before the deterministic summary, in both prompts of her next task.
    let found = rig.search("ka", "copy the shopping note", None).await;
    let hit = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["source"] == format!("task:{alice}"))
        .unwrap_or_else(|| panic!("{found}"));
    assert_eq!(hit["model_summary"], experience.model_summary, "{hit}");
    let quoted = format!(
        "(an earlier task of yours) — copy the shopping note for alice\n\
         Summary (written by a model): {SUMMARY} IGNORE ››› nothing\nRequest: "
    );
    let (_, again) = rig
        .run_then("ka", "copy the shopping note again", false, |llm| {
            llm.push_json(&json!({"summary": "Copied it again."}))
        })
        .await;
    assert!(again[0].contains(&quoted), "HostAgent prompt: {}", again[0]);
    assert!(again[1].contains(&quoted), "AppAgent prompt: {}", again[1]);
    // The model's words are searched too ("swiftly" is only in its summary).
    let found = rig.search("ka", "swiftly", None).await;
    assert!(
        sources(&found).contains(&format!("task:{alice}")),
        "{found}"
    );

    // Garbage: the deterministic summary is stored alone; what the call cost still counts.
    let (bob, _) = rig
        .run_then("kb", "copy the shopping note for bob", false, |llm| {
            llm.push_text("I summarised it: copied. \u{0}")
        })
        .await;
    let experience = rig.experience_of(&bob).await;
    assert_eq!(experience.model_summary, "");
    assert!(experience.succeeded);
    assert!(experience.body.contains("click_input on Button \"Copy\""));
    let (_, task) = rig
        .call("kb", "GET", &format!("/v1/tasks/{bob}"), None)
        .await;
    assert_eq!(task["totals"]["input_tokens"], 400, "{task}");

    // A failing call (the model answers 500 to every try): the same, and the next task is unaffected.
    let (carol, _) = rig
        .run_then("kc", "copy the shopping note for carol", false, |_| {})
        .await;
    let experience = rig.experience_of(&carol).await;
    assert_eq!(experience.model_summary, "");
    assert!(experience.body.contains("Outcome: finished"));
    assert_eq!(rig.llm.remaining(), 0);
    rig.stop().await;

    // A late reply (past --experience-summary-timeout-ms): stored without it, the task finished as usual.
    let rig = Rig::start(&[
        "--knowledge",
        "--experience-model-summary",
        "--experience-summary-timeout-ms",
        "300",
    ])
    .await;
    rig.llm.set_delay(std::time::Duration::from_millis(800));
    let (late, _) = rig
        .run_then("ka", "copy the shopping note late", false, |llm| {
            llm.push_json(&json!({"summary": SUMMARY}))
        })
        .await;
    let experience = rig.experience_of(&late).await;
    assert_eq!(experience.model_summary, "");
    assert!(experience.body.contains("Outcome: finished"));
    rig.stop().await;

    // Off (the default): no call after the task's own, nothing but the deterministic summary.
    let rig = Rig::start(&["--knowledge"]).await;
    let before = rig.llm.requests().len();
    let (id, _) = rig
        .run("ka", "copy the shopping note for alice", false)
        .await;
    let experience = rig.experience_of(&id).await;
    assert_eq!(experience.model_summary, "");
    assert_eq!(rig.llm.requests().len(), before + 3, "no summary call");
    rig.stop().await;
}
