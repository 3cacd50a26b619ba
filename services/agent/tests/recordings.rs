//! `ufo record` through the agent (issue 33, human demonstrations), with the real session service on a
//! fresh Postgres database and a real headless executor (its own Xvfb desktop): a scripted person
//! (`xdotool` on that display) clicks zenity's name field, types a name and clicks OK while alice
//! records; the stored demonstration names the field and the button by their selectors, has the text,
//! and is what `GET /v1/knowledge/search` finds for alice — never for bob, whose key sees neither the
//! recording (404) nor the demonstration. Then `ufo record --seconds` (the real CLI binary) records the
//! person confirming the dialog with Enter and prints the stored demonstration's id.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use std::time::Duration;

use api_support::{Agent, Session, agent_config, eventually};
use serde_json::{Value, json};

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
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn start() -> Self {
        use clap::Parser as _;
        let dir = tempfile::tempdir().unwrap();
        // The dialog the person works in, as a program the executor may launch.
        let script = dir.path().join("new-project");
        std::fs::write(
            &script,
            "#!/bin/sh\nexec zenity --entry --title 'New project' --text 'Project name:'\n",
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
            ],
        );
        let agent = Agent::start(config, None).await;
        Self {
            session,
            agent,
            stop,
            display,
            http: ufo_testkit::http_client(),
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

    rig.click(field);
    eventually(20, "the click on the field", || async {
        let (_, v) = rig
            .call("ka", "GET", &format!("/v1/recordings/{id}"), None)
            .await;
        (!v["steps"].as_array()?.is_empty()).then_some(())
    })
    .await;
    rig.xdotool(&["type", "--delay", "30", "Gemini 4"]);
    rig.click(ok);
    eventually(20, "the click on OK", || async {
        let (_, v) = rig
            .call("ka", "GET", &format!("/v1/recordings/{id}"), None)
            .await;
        (v["steps"].as_array()?.len() >= 3).then_some(())
    })
    .await;

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
    rig.click(field);
    rig.xdotool(&["type", "--delay", "30", "Apollo"]);
    rig.xdotool(&["key", "Return"]);
    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

    rig.stop().await;
}
