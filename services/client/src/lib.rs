//! `ufo-client`: the agent service's API as its callers use it — the `ufo` CLI, the task suite and the
//! end-to-end bench.
//!
//! [`AgentClient`] calls the REST API (`/v1/tasks…`, `/v1/admin/prune`, `/v1/knowledge…`) with an API key and follows a task's
//! events over gRPC `AgentService.StreamSteps` (bearer token and trace context on every call). Task and step
//! bodies stay `serde_json::Value`, so fields the service adds reach callers (the CLI's `--json`) without a
//! client release. Errors are [`ClientError`]: the API's `{code, message}` body is surfaced as
//! [`ClientError::Api`]; a transport failure or timeout is [`ClientError::Unreachable`].
//!
//! Layout: [`task`] (the body of `POST /v1/tasks`), [`error`] (what went wrong).

pub mod error;
pub mod task;

pub use error::ClientError;
pub use task::{NewTask, Work};

use std::time::Duration;

use reqwest::{Method, Response};
use serde_json::{Value, json};
use tonic::Streaming;
use tonic::transport::Endpoint;
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::agent_service_client::AgentServiceClient;
use ufo_proto::v1::{Event, StreamStepsRequest};

/// How long calls may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A whole REST call, answer body included (`None`: no limit).
    pub call: Option<Duration>,
    /// Establishing a connection (REST and gRPC).
    pub connect: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            call: Some(Duration::from_secs(30)),
            connect: Duration::from_secs(5),
        }
    }
}

/// A step's screenshot as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screenshot {
    /// `image/png` or `image/jpeg`.
    pub content_type: String,
    /// The image.
    pub bytes: Vec<u8>,
}

/// A client of one agent service.
#[derive(Clone)]
pub struct AgentClient {
    base: String,
    grpc: Option<String>,
    token: Option<String>,
    timeouts: Timeouts,
    http: reqwest::Client,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("base", &self.base)
            .field("grpc", &self.grpc)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl AgentClient {
    /// A client for the REST API at `base` (e.g. `http://127.0.0.1:8080`), sending `token` as a bearer
    /// token when given.
    pub fn new(base: &str, token: Option<String>, timeouts: Timeouts) -> Result<Self, ClientError> {
        let invalid = |reason: String| ClientError::InvalidUrl {
            url: base.to_owned(),
            reason,
        };
        let parsed =
            reqwest::Url::parse(base).map_err(|e| invalid(format!("is not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid("must start with http:// or https://".to_owned()));
        }
        ufo_common::tls::install_crypto_provider();
        let mut http = reqwest::Client::builder().connect_timeout(timeouts.connect);
        if let Some(call) = timeouts.call {
            http = http.timeout(call);
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            grpc: None,
            token,
            timeouts,
            http: http.build().map_err(ClientError::Build)?,
        })
    }

    /// The same client, following tasks over the gRPC API at `url` (e.g. `http://127.0.0.1:50051`).
    pub fn with_grpc(mut self, url: impl Into<String>) -> Self {
        self.grpc = Some(url.into());
        self
    }

    /// The REST base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/tasks`: the created task.
    pub async fn submit(&self, task: &NewTask) -> Result<Value, ClientError> {
        self.call(Method::POST, "/v1/tasks", Some(task.body()))
            .await
    }

    /// `GET /v1/tasks`, optionally of one status, at most `limit` per page, after `page_token`.
    pub async fn list(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        page_token: Option<&str>,
    ) -> Result<Value, ClientError> {
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
        self.call(
            Method::GET,
            &with_query("/v1/tasks".to_owned(), &query),
            None,
        )
        .await
    }

    /// `GET /v1/tasks/{id}`.
    pub async fn get(&self, id: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None)
            .await
    }

    /// `GET /v1/tasks/{id}/steps`: one page, starting at step `from` (1-based) when given.
    pub async fn steps(
        &self,
        id: &str,
        from: Option<u64>,
        limit: Option<u32>,
    ) -> Result<Value, ClientError> {
        let mut query = Vec::new();
        if let Some(from) = from {
            query.push(format!("from={from}"));
        }
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        let path = with_query(format!("/v1/tasks/{}/steps", encode(id)), &query);
        self.call(Method::GET, &path, None).await
    }

    /// Every step of a task, in order, read page by page.
    pub async fn all_steps(&self, id: &str) -> Result<Vec<Value>, ClientError> {
        let mut steps: Vec<Value> = Vec::new();
        loop {
            let from = u64::try_from(steps.len())
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            let mut page = self.steps(id, Some(from), Some(100)).await?;
            match page.get_mut("steps").map(Value::take) {
                Some(Value::Array(got)) if !got.is_empty() => steps.extend(got),
                _ => return Ok(steps),
            }
        }
    }

    /// `POST /v1/tasks/{id}/answers`: `answers[i]` answers the pending question `question_ids[i]`.
    pub async fn answer(
        &self,
        id: &str,
        question_ids: &[String],
        answers: &[String],
    ) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/answers", encode(id));
        let body = json!({ "answers": answers, "question_ids": question_ids });
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/tasks/{id}/confirmation` deciding the held action `action_id` (and no other).
    pub async fn confirm(
        &self,
        id: &str,
        action_id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/confirmation", encode(id));
        let mut body = json!({ "approve": approve, "action_id": action_id });
        if let Some(reason) = reason {
            body["reason"] = json!(reason);
        }
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/tasks/{id}/requests`: a follow-up request.
    pub async fn add_request(&self, id: &str, request: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/requests", encode(id));
        self.call(Method::POST, &path, Some(json!({ "request": request })))
            .await
    }

    /// `POST /v1/desktop/calls`: one MCP desktop tool call (`tool`, its `arguments`) as this client's
    /// caller, recorded in its direct session on the executor the arguments name.
    pub async fn desktop_call(
        &self,
        tool: &str,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<Value, ClientError> {
        let body = json!({ "tool": tool, "arguments": arguments });
        self.call(Method::POST, "/v1/desktop/calls", Some(body))
            .await
    }

    /// `POST /v1/tasks/{id}/cancel`.
    pub async fn cancel(&self, id: &str, reason: Option<&str>) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/cancel", encode(id));
        let body = reason.map_or_else(|| json!({}), |r| json!({ "reason": r }));
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/tasks/{id}/takeover`: a person takes the task's desktop over (docs/live.md).
    pub async fn takeover(&self, id: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/takeover", encode(id));
        self.call(Method::POST, &path, None).await
    }

    /// `POST /v1/tasks/{id}/input`: a person's input (`{"click": {"x", "y"}}`, `{"keys": ...}` or
    /// `{"text": ...}`) for the desktop they took over.
    pub async fn person_input(&self, id: &str, input: Value) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/input", encode(id));
        self.call(Method::POST, &path, Some(input)).await
    }

    /// `POST /v1/tasks/{id}/handback`: the desktop goes back to the task's agents.
    pub async fn handback(&self, id: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/handback", encode(id));
        self.call(Method::POST, &path, None).await
    }

    /// `POST /v1/admin/prune` (an admin key): what was pruned.
    pub async fn prune(
        &self,
        older_than_days: Option<u32>,
        keep_tasks: Option<u32>,
    ) -> Result<Value, ClientError> {
        // Only the rules given: the service refuses `null` for a rule.
        let mut body = serde_json::Map::new();
        if let Some(days) = older_than_days {
            body.insert("older_than_days".to_owned(), days.into());
        }
        if let Some(keep) = keep_tasks {
            body.insert("keep_tasks".to_owned(), keep.into());
        }
        self.call(Method::POST, "/v1/admin/prune", Some(Value::Object(body)))
            .await
    }

    /// `POST /v1/admin/executors/{name}/tokens` (an admin key): a new enrollment token for the dial-out
    /// executor `name` (`{name, id, token}`; the token is shown only here).
    pub async fn enroll_executor(&self, name: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/admin/executors/{}/tokens", encode(name));
        self.call(Method::POST, &path, None).await
    }

    /// `DELETE /v1/admin/executors/{name}/tokens/{id}` (an admin key): revokes a token.
    pub async fn revoke_enrollment(&self, name: &str, id: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/admin/executors/{}/tokens/{}", encode(name), encode(id));
        self.call(Method::DELETE, &path, None).await
    }

    /// `GET /v1/admin/executors` (an admin key): every executor, dial-out ones with their connection.
    pub async fn executors(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, "/v1/admin/executors", None).await
    }

    /// `GET /v1/admin/desktops` (an admin key): the desktop pool and the tasks waiting for a desktop.
    pub async fn desktops(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, "/v1/admin/desktops", None).await
    }

    /// `POST /v1/admin/desktops/{name}/{change}` (an admin key): `drain`, `undrain` or `ready`.
    pub async fn change_desktop(&self, name: &str, change: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/admin/desktops/{}/{}", encode(name), encode(change));
        self.call(Method::POST, &path, None).await
    }

    /// `DELETE /v1/admin/desktops/{name}` (an admin key): removes a desktop that no task holds.
    pub async fn remove_desktop(&self, name: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/admin/desktops/{}", encode(name));
        self.call(Method::DELETE, &path, None).await
    }

    /// `POST /v1/knowledge/documents` (an admin key): help files for `app` ("" = any application), each
    /// a name and its bytes as read (sent as base64; the service refuses binary files). All or none are
    /// stored.
    pub async fn add_documents(
        &self,
        app: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<Value, ClientError> {
        use base64::Engine as _;
        let files: Vec<Value> = files
            .iter()
            .map(|(name, bytes)| {
                json!({
                    "name": name,
                    "content_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
                })
            })
            .collect();
        let body = json!({ "app": app, "files": files });
        self.call(Method::POST, "/v1/knowledge/documents", Some(body))
            .await
    }

    /// `GET /v1/knowledge/search?q=…&app=…`: the hits the agents would retrieve for `query`.
    pub async fn search_knowledge(
        &self,
        query: &str,
        app: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut params = vec![format!("q={}", encode(query))];
        if let Some(app) = app {
            params.push(format!("app={}", encode(app)));
        }
        let path = with_query("/v1/knowledge/search".to_owned(), &params);
        self.call(Method::GET, &path, None).await
    }

    /// `POST /v1/knowledge/{id}/share` (or `…/unshare` with `unshare`; an admin key): adds the callers
    /// `with` and/or everyone to the sharing of an experience or demonstration (`id`: its knowledge id or
    /// `task:<task id>`), or takes them off.
    pub async fn share_knowledge(
        &self,
        id: &str,
        with: &[String],
        everyone: bool,
        unshare: bool,
    ) -> Result<Value, ClientError> {
        let verb = if unshare { "unshare" } else { "share" };
        let path = format!("/v1/knowledge/{}/{verb}", encode(id));
        let body = json!({ "with": with, "everyone": everyone });
        self.call(Method::POST, &path, Some(body)).await
    }

    /// `POST /v1/recordings`: starts recording a person's demonstration of `description` in `app`.
    pub async fn start_recording(
        &self,
        executor: Option<&str>,
        app: &str,
        description: &str,
        max_seconds: Option<f64>,
    ) -> Result<Value, ClientError> {
        let mut body = json!({"app": app, "description": description});
        if let Some(e) = executor {
            body["executor"] = json!(e);
        }
        if let Some(s) = max_seconds {
            body["max_seconds"] = json!(s);
        }
        self.call(Method::POST, "/v1/recordings", Some(body)).await
    }

    /// `GET /v1/recordings/{id}?from=N`: the recording's steps from event `from`.
    pub async fn recording(&self, id: &str, from: u64) -> Result<Value, ClientError> {
        let path = format!("/v1/recordings/{}?from={from}", encode(id));
        self.call(Method::GET, &path, None).await
    }

    /// `POST /v1/recordings/{id}/stop`: stops it and stores the demonstration.
    pub async fn stop_recording(&self, id: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/recordings/{}/stop", encode(id));
        self.call(Method::POST, &path, None).await
    }

    /// `POST /v1/tasks/{id}/rating` with `good` or `bad`.
    pub async fn rate(&self, id: &str, rating: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{}/rating", encode(id));
        self.call(Method::POST, &path, Some(json!({ "rating": rating })))
            .await
    }

    /// `GET /v1/tasks/{id}/steps/{step}/screenshot?kind=…` (`annotated`, `clean`, `desktop`, `selected`).
    pub async fn screenshot(
        &self,
        id: &str,
        step: u64,
        kind: &str,
    ) -> Result<Screenshot, ClientError> {
        let path = format!(
            "/v1/tasks/{}/steps/{step}/screenshot?kind={}",
            encode(id),
            encode(kind)
        );
        let response = self.send(Method::GET, &path, None).await?;
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        Ok(Screenshot {
            content_type,
            bytes: bytes.to_vec(),
        })
    }

    /// Opens `StreamSteps` for task `task_id` from event `from_seq` (1 = the first): the stream ends when
    /// the task has ended and every event was sent.
    pub async fn stream_steps(
        &self,
        task_id: &str,
        from_seq: u64,
    ) -> Result<Streaming<Event>, ClientError> {
        let url = self.grpc.as_deref().ok_or(ClientError::NoGrpcAddress)?;
        let channel = Endpoint::from_shared(url.to_owned())
            .map_err(|e| ClientError::InvalidUrl {
                url: url.to_owned(),
                reason: format!("is not a URL ({e})"),
            })?
            .connect_timeout(self.timeouts.connect)
            .connect()
            .await
            .map_err(|e| ClientError::GrpcUnreachable {
                url: url.to_owned(),
                cause: error::innermost(&e),
            })?;
        let context = ClientContext::new(self.token.as_deref())?;
        let request = StreamStepsRequest {
            task_id: task_id.to_owned(),
            from_seq,
        };
        let stream = AgentServiceClient::with_interceptor(channel, context)
            .stream_steps(request)
            .await
            .map_err(|status| ClientError::Grpc {
                what: "StreamSteps",
                status,
            })?;
        Ok(stream.into_inner())
    }

    /// Follows task `task_id` from event `from_seq` until the server ends the stream with the task, and
    /// returns every event received, in arrival order.
    pub async fn events_until_end(
        &self,
        task_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Event>, ClientError> {
        let mut stream = self.stream_steps(task_id, from_seq).await?;
        let mut events = Vec::new();
        while let Some(event) = stream.message().await.map_err(|status| ClientError::Grpc {
            what: "StreamSteps",
            status,
        })? {
            events.push(event);
        }
        Ok(events)
    }

    /// Sends a call; an error status becomes [`ClientError::Api`] (or [`ClientError::NotTheApi`]).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Response, ClientError> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        Err(match api_error(&text) {
            Some((code, message)) => ClientError::Api {
                status: status.as_u16(),
                code,
                message,
            },
            None => ClientError::NotTheApi {
                url: self.base.clone(),
                status: status.as_u16(),
            },
        })
    }

    /// A call answering JSON (`Value::Null` for an empty body).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let what = format!("{method} {path}");
        let response = self.send(method, path, body).await?;
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|source| ClientError::Decode { what, source })
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            cause: if e.is_timeout() {
                "timed out".to_owned()
            } else {
                error::innermost(e)
            },
        }
    }
}

/// The API's `{code, message}` error body, if `text` is one.
fn api_error(text: &str) -> Option<(String, String)> {
    let parsed: Value = serde_json::from_str(text).ok()?;
    let field = |name: &str| parsed.get(name).and_then(Value::as_str).map(str::to_owned);
    Some((field("code")?, field("message")?))
}

fn with_query(path: String, query: &[String]) -> String {
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
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
    fn error_bodies_are_read_only_when_they_are_the_apis() {
        assert_eq!(
            api_error(r#"{"code":"not_found","message":"no task 7"}"#),
            Some(("not_found".to_owned(), "no task 7".to_owned()))
        );
        assert_eq!(api_error("<html>"), None);
        assert_eq!(api_error(r#"{"code":"x"}"#), None);
    }

    #[test]
    fn ids_are_encoded() {
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn only_http_urls_are_accepted() {
        let refused = AgentClient::new("ftp://x", None, Timeouts::default());
        assert!(
            matches!(&refused, Err(ClientError::InvalidUrl { reason, .. }) if reason.contains("http://")),
            "{refused:?}"
        );
        let refused = AgentClient::new("not a url", None, Timeouts::default());
        assert!(
            matches!(&refused, Err(ClientError::InvalidUrl { reason, .. }) if reason.contains("not a URL")),
            "{refused:?}"
        );
    }
}
