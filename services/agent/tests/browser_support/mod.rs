//! Real headless Chromium for the viewer's tests, driven over the W3C WebDriver protocol: Debian's
//! `chromedriver` as a child process (ufo-testkit's process handling) and a small JSON client on reqwest,
//! so no browser-automation crate enters the build. Chromium runs with the flags this machine needs (no
//! background networking: its connections out are refused here) and a fresh profile directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use ufo_testkit::{ProcessBuilder, ServiceProcess, free_port};

/// The W3C key under which an element reference travels.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session on it.
pub struct Browser {
    driver: ServiceProcess,
    http: reqwest::Client,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session (1280x1000 window).
    pub async fn start() -> Self {
        for path in ["/usr/bin/chromedriver", "/usr/bin/chromium"] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: apt-get install chromium chromium-driver (.ci/run installs them)"
            );
        }
        let port = free_port().unwrap();
        let mut driver = ProcessBuilder::new("chromedriver", "/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        driver
            .wait_http_ready(&format!("{base}/status"), Duration::from_secs(30))
            .await
            .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let http = ufo_testkit::http_client();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            "goog:loggingPrefs": {"performance": "ALL"},
        }}});
        let res: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = res["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {res}; chromedriver:\n{}", driver.logs()))
            .to_owned();
        Self {
            driver,
            http,
            base: format!("{base}/session/{id}"),
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res: Value = req.send().await.unwrap().json().await.unwrap();
        if let Some(error) = res["value"]["error"].as_str() {
            panic!("webdriver {path}: {error}: {}", res["value"]["message"]);
        }
        res["value"].clone()
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Signs in to the viewer at `base` on a fresh page with `key` and waits for the task list.
    pub async fn sign_in(&self, base: &str, key: &str) {
        self.goto(&format!("{base}/")).await;
        self.wait(20, "the sign-in form", "document.querySelector('#api-key')")
            .await;
        self.type_into("#api-key", key).await;
        self.click("#signin button[type=submit]").await;
        self.wait(
            20,
            "the task list",
            "document.querySelector('#tasks') && document.querySelector('#request')",
        )
        .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Waits until `condition` (a JS expression) is truthy, returning its value; fails after `secs`.
    pub async fn wait(&self, secs: u64, what: &str, condition: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let script =
            format!("try {{ return ({condition}) || null; }} catch (e) {{ return null; }}");
        loop {
            let value = self.js(&script, json!([])).await;
            if !value.is_null() && value != Value::Bool(false) {
                return value;
            }
            if tokio::time::Instant::now() > deadline {
                let body = self
                    .js("return document.body.innerText.slice(0, 3000)", json!([]))
                    .await;
                panic!("timed out waiting for {what} ({condition}); the page shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first element matching `css`.
    pub async fn find(&self, css: &str) -> String {
        let value = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        value[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {value}"))
            .to_owned()
    }

    /// Clicks the first element matching `css` (a real pointer click through the driver).
    pub async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Clears the first element matching `css`, then types `text` into it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/clear"),
            Some(json!({})),
        )
        .await;
        self.keys(css, text).await;
    }

    /// Sends key strokes (`\u{E014}` is ArrowRight) to the first element matching `css`.
    pub async fn keys(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// A real left click at (`dx`, `dy`) CSS pixels from the centre of the first element matching `css`.
    pub async fn click_at(&self, css: &str, dx: i64, dy: i64) {
        let id = self.find(css).await;
        let actions = json!({"actions": [{"type": "pointer", "id": "mouse",
            "parameters": {"pointerType": "mouse"}, "actions": [
                {"type": "pointerMove", "origin": {ELEMENT: id}, "x": dx, "y": dy},
                {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0}]}]});
        self.call(reqwest::Method::POST, "/actions", Some(actions))
            .await;
    }

    /// Presses and releases `key` (e.g. `\u{E014}`, ArrowRight) on whatever has the focus.
    pub async fn press(&self, key: &str) {
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.call(reqwest::Method::POST, "/actions", Some(actions))
            .await;
    }

    /// Selects `value` in the `<select>` matching `css` (by clicking its option).
    pub async fn select(&self, css: &str, value: &str) {
        self.click(&format!("{css} option[value=\"{value}\"]"))
            .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let data = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap()
    }

    /// Every URL the browser requested since the last call (Chromium's performance log, from the
    /// DevTools `Network.requestWillBeSent` events: every request, including failed and blocked ones).
    pub async fn requested_urls(&self) -> Vec<String> {
        let entries = self
            .call(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({"type": "performance"})),
            )
            .await;
        entries
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e["message"].as_str()?).ok())
            .filter(|m| m["message"]["method"] == "Network.requestWillBeSent")
            .filter_map(|m| {
                m["message"]["params"]["request"]["url"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    /// Ends the browser session and chromedriver.
    pub async fn stop(mut self) {
        let _ = self.http.delete(&self.base).send().await;
        self.driver.stop().await.unwrap();
    }
}
