//! A scripted OpenAI-compatible server: a real axum server on port 0 replaying scripted replies.
//!
//! Each incoming `POST …/chat/completions` pops the next script entry. An entry is a fixed reply, an HTTP
//! error status (with optional `Retry-After`), or a function computing the reply from the request (e.g.
//! choosing a control id by reading the control list in the prompt by name). When the script is empty
//! the server answers 500 `script exhausted`, so an unexpected extra call fails the test loudly.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptedReply {
    /// A successful completion whose message content is this text.
    Text(String),
    /// An error status with a body and an optional `Retry-After` header value.
    Status {
        /// HTTP status.
        status: u16,
        /// Body text.
        body: String,
        /// `Retry-After` header value.
        retry_after: Option<String>,
    },
}

type ReplyFn = Arc<dyn Fn(&RecordedRequest) -> ScriptedReply + Send + Sync>;

#[derive(Clone)]
enum Entry {
    Fixed(ScriptedReply),
    Computed(ReplyFn),
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Query string, if any.
    pub query: Option<String>,
    /// Headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Text of every message with `role`, joined by newlines.
    pub fn role_text(&self, role: &str) -> String {
        self.messages()
            .iter()
            .filter(|m| m["role"] == role)
            .flat_map(|m| match &m["content"] {
                Value::String(s) => vec![s.clone()],
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str().map(str::to_owned))
                    .collect(),
                _ => vec![],
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Text of all messages.
    pub fn text(&self) -> String {
        ["system", "user", "assistant"]
            .iter()
            .map(|r| self.role_text(r))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `image_url.url` of every image part (data URLs).
    pub fn image_urls(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_owned))
            .collect()
    }

    /// The data URL of the image part that follows the text part starting with `caption` (prompts put a
    /// caption before each image), if any.
    pub fn image_after(&self, caption: &str) -> Option<String> {
        let parts: Vec<&Value> = self
            .messages()
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .collect();
        parts.windows(2).find_map(|w| {
            let captioned = w[0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(caption));
            captioned
                .then(|| w[1]["image_url"]["url"].as_str().map(str::to_owned))
                .flatten()
        })
    }

    /// Finds a control's id by name in the prompt's control list (lines `["<id>", "<name>", "<type>"]`).
    pub fn control_id(&self, name: &str) -> Option<String> {
        self.text().lines().find_map(|line| {
            let entry: Vec<Value> = serde_json::from_str(line.trim().trim_end_matches(',')).ok()?;
            match entry.as_slice() {
                [Value::String(id), Value::String(n), Value::String(_)] if n == name => {
                    Some(id.clone())
                }
                _ => None,
            }
        })
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Entry>>,
    received: Mutex<Vec<RecordedRequest>>,
    usage: Mutex<(u64, u64)>,
    delay: Mutex<std::time::Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another test thread panicked; the data is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The scripted server. Stops when dropped.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl std::fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLlm")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ScriptedLlm {
    /// Starts the server on `127.0.0.1:0`.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            usage: Mutex::new((100, 20)),
            ..Shared::default()
        });
        let stop = CancellationToken::new();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let token = stop.clone();
        tokio::spawn(async move {
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "scripted llm server failed");
            }
        });
        Ok(Self { addr, shared, stop })
    }

    /// The OpenAI-style base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The server root (`http://127.0.0.1:PORT`), e.g. for an Azure base URL.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets the token usage reported with each successful reply.
    pub fn set_usage(&self, input_tokens: u64, output_tokens: u64) {
        *lock(&self.shared.usage) = (input_tokens, output_tokens);
    }

    /// Makes every reply wait this long before it is sent, as a hosted model thinks (default: none).
    pub fn set_delay(&self, delay: std::time::Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// Queues a reply.
    pub fn push(&self, reply: ScriptedReply) {
        lock(&self.shared.script).push_back(Entry::Fixed(reply));
    }

    /// Queues a successful reply with this content.
    pub fn push_text(&self, text: impl Into<String>) {
        self.push(ScriptedReply::Text(text.into()));
    }

    /// Queues a successful reply whose content is this JSON value.
    pub fn push_json(&self, value: &Value) {
        self.push_text(value.to_string());
    }

    /// Queues an error status.
    pub fn push_status(&self, status: u16, retry_after: Option<&str>) {
        self.push(ScriptedReply::Status {
            status,
            body: json!({"error": {"message": "scripted failure"}}).to_string(),
            retry_after: retry_after.map(str::to_owned),
        });
    }

    /// Queues a reply computed from the request when it arrives.
    pub fn push_fn(&self, f: impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static) {
        lock(&self.shared.script).push_back(Entry::Computed(Arc::new(f)));
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.received).clone()
    }

    /// Script entries not consumed yet.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")).into_response();
        }
    };
    let recorded = RecordedRequest {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body,
    };
    lock(&shared.received).push(recorded.clone());
    if !recorded.path.ends_with("/chat/completions") {
        return (StatusCode::NOT_FOUND, "only chat/completions is scripted").into_response();
    }
    let entry = lock(&shared.script).pop_front();
    let reply = match entry {
        Some(Entry::Fixed(reply)) => reply,
        Some(Entry::Computed(f)) => f(&recorded),
        None => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response();
        }
    };
    let delay = *lock(&shared.delay);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match reply {
        ScriptedReply::Text(content) => {
            let (input, output) = *lock(&shared.usage);
            axum::Json(json!({
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "model": recorded.body["model"].as_str().unwrap_or("scripted"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": input, "completion_tokens": output,
                          "total_tokens": input + output}
            }))
            .into_response()
        }
        ScriptedReply::Status {
            status,
            body,
            retry_after,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (code, body).into_response();
            if let Some(value) = retry_after.and_then(|v| v.parse().ok()) {
                response.headers_mut().insert("retry-after", value);
            }
            response
        }
    }
}
