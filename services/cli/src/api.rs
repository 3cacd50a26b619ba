//! The agent service's REST API as the CLI uses it (issue 7): tasks, steps, answers, confirmation,
//! follow-up requests, cancel. Bodies stay `serde_json::Value` so that fields the service adds show up in
//! `--json` output without a CLI release; rendering picks the fields it knows.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::error::CliError;

/// A REST client for one agent service.
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The body of `POST /v1/tasks`.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    /// The task in plain words.
    pub request: String,
    /// Executor address or registered name.
    pub executor: Option<String>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Cost limit in US dollars.
    pub max_cost: Option<f64>,
    /// Wall-time limit.
    pub timeout_seconds: Option<u32>,
    /// `sensitive`, `always` or `never`.
    pub confirm_policy: Option<&'static str>,
    /// HostAgent model.
    pub host_model: Option<String>,
    /// AppAgent model.
    pub app_model: Option<String>,
}

impl NewTask {
    fn body(&self) -> Value {
        let mut body = json!({ "request": self.request });
        if let Some(executor) = &self.executor {
            body["executor"] = json!(executor);
        }
        let mut limits = serde_json::Map::new();
        if let Some(v) = self.max_steps {
            limits.insert("max_steps".into(), json!(v));
        }
        if let Some(v) = self.max_cost {
            limits.insert("max_cost".into(), json!(v));
        }
        if let Some(v) = self.timeout_seconds {
            limits.insert("timeout_seconds".into(), json!(v));
        }
        if !limits.is_empty() {
            body["limits"] = Value::Object(limits);
        }
        let mut model = serde_json::Map::new();
        if let Some(v) = &self.host_model {
            model.insert("host_model".into(), json!(v));
        }
        if let Some(v) = &self.app_model {
            model.insert("app_model".into(), json!(v));
        }
        if !model.is_empty() {
            body["model"] = Value::Object(model);
        }
        if let Some(policy) = self.confirm_policy {
            body["confirm_policy"] = json!(policy);
        }
        body
    }
}

impl ApiClient {
    /// A client for the service at `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> Result<Self, CliError> {
        let parsed = reqwest::Url::parse(base).map_err(|e| CliError::InvalidArgument {
            flag: "--server",
            reason: format!("{base:?} is not a URL ({e})"),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(CliError::InvalidArgument {
                flag: "--server",
                reason: format!("{base:?} must start with http:// or https://"),
            });
        }
        ufo_common::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| CliError::Protocol(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// `POST /v1/tasks`: returns the created task.
    pub async fn submit(&self, task: &NewTask) -> Result<Value, CliError> {
        self.call(Method::POST, "/v1/tasks", Some(task.body()))
            .await
    }

    /// `POST /v1/tasks` replaying task `id`.
    pub async fn replay(&self, id: &str, on_mismatch: Option<&str>) -> Result<Value, CliError> {
        let mut body = serde_json::json!({"replay_of": id});
        if let Some(m) = on_mismatch {
            body["on_mismatch"] = serde_json::json!(m);
        }
        self.call(Method::POST, "/v1/tasks", Some(body)).await
    }

    /// `GET /v1/tasks` with optional status filter and paging.
    pub async fn list(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        page_token: Option<&str>,
    ) -> Result<Value, CliError> {
        let mut query = Vec::new();
        if let Some(s) = status {
            query.push(format!("status={}", encode(s)));
        }
        if let Some(l) = limit {
            query.push(format!("page_size={l}"));
        }
        if let Some(t) = page_token {
            query.push(format!("page_token={}", encode(t)));
        }
        let path = if query.is_empty() {
            "/v1/tasks".to_owned()
        } else {
            format!("/v1/tasks?{}", query.join("&"))
        };
        self.call(Method::GET, &path, None).await
    }

    /// `GET /v1/tasks/{id}`.
    pub async fn get(&self, id: &str) -> Result<Value, CliError> {
        self.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None)
            .await
    }

    /// `GET /v1/tasks/{id}/steps`, starting at step `from` (1-based) when given.
    pub async fn steps(
        &self,
        id: &str,
        from: Option<u64>,
        limit: Option<u32>,
    ) -> Result<Value, CliError> {
        let mut path = format!("/v1/tasks/{}/steps", encode(id));
        let mut query = Vec::new();
        if let Some(from) = from {
            query.push(format!("from={from}"));
        }
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        self.call(Method::GET, &path, None).await
    }

    /// `POST /v1/tasks/{id}/answers`: `answers[i]` answers the pending question `question_ids[i]`.
    pub async fn answer(
        &self,
        id: &str,
        question_ids: &[String],
        answers: &[String],
    ) -> Result<Value, CliError> {
        let path = format!("/v1/tasks/{}/answers", encode(id));
        self.call(
            Method::POST,
            &path,
            Some(json!({ "answers": answers, "question_ids": question_ids })),
        )
        .await
    }

    /// `POST /v1/tasks/{id}/confirmation` deciding the held action `action_id` (and no other).
    pub async fn confirm(
        &self,
        id: &str,
        action_id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<Value, CliError> {
        let path = format!("/v1/tasks/{}/confirmation", encode(id));
        let mut body = json!({ "approve": approve, "action_id": action_id });
        if let Some(reason) = reason {
            body["reason"] = json!(reason);
        }
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/tasks/{id}/requests`.
    pub async fn add_request(&self, id: &str, request: &str) -> Result<Value, CliError> {
        let path = format!("/v1/tasks/{}/requests", encode(id));
        self.call(Method::POST, &path, Some(json!({ "request": request })))
            .await
    }

    /// `POST /v1/tasks/{id}/cancel`.
    pub async fn cancel(&self, id: &str, reason: Option<&str>) -> Result<Value, CliError> {
        let path = format!("/v1/tasks/{}/cancel", encode(id));
        let body = reason.map_or_else(|| json!({}), |r| json!({ "reason": r }));
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/admin/prune` (an admin key): what was pruned.
    pub async fn prune(
        &self,
        older_than_days: Option<u32>,
        keep_tasks: Option<u32>,
    ) -> Result<Value, CliError> {
        let body = json!({"older_than_days": older_than_days, "keep_tasks": keep_tasks});
        self.call(Method::POST, "/v1/admin/prune", Some(body)).await
    }

    /// `GET /v1/tasks/{id}/steps/{n}/screenshot?kind=...`: the content type and the image bytes.
    pub async fn screenshot(
        &self,
        id: &str,
        step: u64,
        kind: &str,
    ) -> Result<(String, Vec<u8>), CliError> {
        let url = format!(
            "{}/v1/tasks/{}/steps/{step}/screenshot?kind={}",
            self.base,
            encode(id),
            encode(kind)
        );
        let mut request = self.http.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let unreachable = |e: reqwest::Error| CliError::Unreachable {
            url: self.base.clone(),
            cause: transport_cause(&e),
            flag: "--server",
            env: "UFO_SERVER",
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.bytes().await.map_err(unreachable)?;
        if status.is_success() {
            return Ok((content_type, bytes.to_vec()));
        }
        let (code, message) = error_body(&String::from_utf8_lossy(&bytes), status);
        match status {
            StatusCode::UNAUTHORIZED => Err(CliError::Unauthenticated { message }),
            StatusCode::NOT_FOUND => Err(CliError::NotFound(format!(
                "{} (ask for another --kind)",
                crate::error::task_words(&message)
            ))),
            _ => Err(CliError::Api {
                status: status.as_u16(),
                code,
                message,
            }),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| CliError::Unreachable {
            url: self.base.clone(),
            cause: transport_cause(&e),
            flag: "--server",
            env: "UFO_SERVER",
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| CliError::Unreachable {
            url: self.base.clone(),
            cause: transport_cause(&e),
            flag: "--server",
            env: "UFO_SERVER",
        })?;
        if status.is_success() {
            if text.trim().is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&text).map_err(|e| {
                CliError::Protocol(format!("{method_path}: {e}", method_path = path))
            });
        }
        let (code, message) = error_body(&text, status);
        if status == StatusCode::UNAUTHORIZED {
            return Err(CliError::Unauthenticated { message });
        }
        if status == StatusCode::NOT_FOUND {
            return Err(CliError::NotFound(crate::error::task_words(&message)));
        }
        Err(CliError::Api {
            status: status.as_u16(),
            code,
            message,
        })
    }
}

/// Reads the API's `{code, message}` error body, or describes a body that is not one (a proxy's page).
fn error_body(text: &str, status: StatusCode) -> (String, String) {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match (field("code"), field("message")) {
        (Some(code), Some(message)) => (code, message),
        _ => (
            status
                .canonical_reason()
                .unwrap_or("error")
                .to_lowercase()
                .replace(' ', "_"),
            format!(
                "the server answered {status} without an API error body; is {} the agent service?",
                "--server"
            ),
        ),
    }
}

/// The innermost cause of a transport error (e.g. "Connection refused"), which says the most.
fn transport_cause(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        "timed out".to_owned()
    } else {
        cause.to_string()
    }
}

/// Percent-encodes a path segment or query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_task_sends_only_what_was_given() {
        let task = NewTask {
            request: "open notepad".into(),
            max_steps: Some(5),
            confirm_policy: Some("always"),
            ..NewTask::default()
        };
        assert_eq!(
            task.body(),
            json!({"request": "open notepad", "limits": {"max_steps": 5}, "confirm_policy": "always"})
        );
    }

    #[test]
    fn error_bodies_are_read_or_described() {
        let (code, message) = error_body(
            r#"{"code":"not_found","message":"no task 7"}"#,
            StatusCode::NOT_FOUND,
        );
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("not_found", "no task 7")
        );
        let (code, message) = error_body("<html>", StatusCode::BAD_GATEWAY);
        assert_eq!(code, "bad_gateway");
        assert!(message.contains("--server"), "{message}");
    }

    #[test]
    fn ids_are_encoded() {
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }
}
