//! The model endpoint the suite's agent calls: a real OpenAI-compatible HTTP server on a loopback port.
//! In stand-in mode it answers every `POST …/chat/completions` by following the demonstration of the
//! task whose request the prompt carries ([`super::follow`]); in forwarding mode it passes each request
//! to a real model endpoint unchanged and returns its answer. Either way it tallies, per task, the model
//! calls and what they carried (text bytes, image bytes and pixels).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::follow::{Patience, Waits, decide};
use super::prompt::{AgentKind, Prompt, PromptSize, request_of, size_of, text_parts};
use crate::task::Subtask;

/// Where answers come from.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The demonstration-following stand-in.
    StandIn(Patience),
    /// A real OpenAI-compatible endpoint (base URL ending in `/v1`, optional key).
    Forward {
        /// Base URL, e.g. `https://api.openai.com/v1`.
        base_url: String,
        /// Bearer key.
        api_key: Option<String>,
    },
}

/// What one task's model calls carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Chat completions answered.
    pub calls: u64,
    /// Of them, HostAgent prompts.
    pub host_calls: u64,
    /// Of them, a reuse's fill calls (docs/knowledge.md "Reuse").
    pub fills: u64,
    /// Sums over the calls.
    pub size: PromptSize,
}

impl Tally {
    fn add(&mut self, agent: Option<AgentKind>, size: PromptSize) {
        self.calls += 1;
        if agent == Some(AgentKind::Host) {
            self.host_calls += 1;
        }
        self.size.text_bytes += size.text_bytes;
        self.size.image_bytes += size.image_bytes;
        self.size.image_pixels += size.image_pixels;
        self.size.images += size.images;
    }
}

#[derive(Default)]
struct TaskState {
    demo: Vec<Subtask>,
    waits: Waits,
    tally: Tally,
    /// Every call in brief (see [`ModelServer::end`]).
    calls: Vec<Value>,
}

struct Shared {
    mode: Mode,
    /// How long the stand-in takes to answer a call (`--standin-latency-ms`), in milliseconds: a model's
    /// think time, for measuring what saved calls save.
    latency_ms: std::sync::atomic::AtomicU64,
    tasks: Mutex<HashMap<String, TaskState>>,
    client: reqwest::Client,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a handler panicked mid-update; the counts are still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running server; stops when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    served: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    tracing::warn!(%status, %message, "model request refused");
    (status, axum::Json(json!({"error": {"message": message}}))).into_response()
}

impl ModelServer {
    /// Serves on `127.0.0.1:0`; request bodies over `max_body_bytes` are refused with 413.
    pub async fn start(mode: Mode, max_body_bytes: usize) -> std::io::Result<Self> {
        ufo_common::tls::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            mode,
            latency_ms: std::sync::atomic::AtomicU64::new(0),
            tasks: Mutex::new(HashMap::new()),
            client: reqwest::Client::new(),
        });
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(max_body_bytes))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let token = stop.clone();
        let served = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "model server failed");
            }
        });
        Ok(Self {
            addr,
            shared,
            stop,
            served: Mutex::new(Some(served)),
        })
    }

    /// Shuts the endpoint for good: stops accepting, lets open connections end, closes the port, and
    /// checks that a connection to it is refused. Tallies stay readable. Says what it did.
    pub async fn stop(&self) -> std::io::Result<String> {
        let span = tracing::info_span!("suite.model_stop", addr = %self.addr);
        async {
            self.stop.cancel();
            let served = lock(&self.served).take();
            if let Some(served) = served {
                tokio::time::timeout(std::time::Duration::from_secs(10), served)
                    .await
                    .map_err(|_| {
                        std::io::Error::other("the model endpoint did not shut within 10 s")
                    })?
                    .map_err(std::io::Error::other)?;
            }
            match tokio::net::TcpStream::connect(self.addr).await {
                Ok(_) => Err(std::io::Error::other(format!(
                    "the model endpoint {} still accepts connections",
                    self.addr
                ))),
                Err(e) => Ok(format!(
                    "model endpoint {} stopped (a connection to it: {e})",
                    self.addr
                )),
            }
        }
        .instrument(span)
        .await
    }

    /// Makes the stand-in take `ms` milliseconds per answer (0: at once). Forwarded calls are not delayed.
    pub fn set_latency_ms(&self, ms: u64) {
        self.shared
            .latency_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// The OpenAI-style base URL the agent is given.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Starts tallying (and, for the stand-in, following `demo` for) the task with this request.
    pub fn begin(&self, request: &str, demo: Vec<Subtask>) {
        lock(&self.shared.tasks).insert(
            request.to_owned(),
            TaskState {
                demo,
                ..TaskState::default()
            },
        );
    }

    /// Stops following the task and returns its tally and its calls in order, each as `{agent, text,
    /// images, controls, windows, reply}`: the prompt's text parts (images counted, not kept), what the
    /// stand-in read from it, and the reply (null when forwarded).
    pub fn end(&self, request: &str) -> (Tally, Vec<Value>) {
        lock(&self.shared.tasks)
            .remove(request)
            .map(|t| (t.tally, t.calls))
            .unwrap_or_default()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        // Too large (413) or unreadable: said in the same shape as every other refusal.
        Err(e) => return error(e.status(), e.body_text()),
    };
    let path = uri.path().to_owned();
    if path.ends_with("/models") {
        return match &shared.mode {
            Mode::StandIn(_) => axum::Json(json!({"object": "list", "data": [
                {"id": "ufo-suite-standin", "object": "model", "owned_by": "ufo-suite"}]}))
            .into_response(),
            Mode::Forward { base_url, api_key } => {
                forward(&shared.client, base_url, api_key.as_deref(), "models", None).await
            }
        };
    }
    if !path.ends_with("/chat/completions") {
        return error(StatusCode::NOT_FOUND, format!("no such endpoint {path}"));
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not JSON: {e}"),
            );
        }
    };
    if let (Mode::StandIn(_), Some(fill)) = (
        &shared.mode,
        super::reuse::Fill::parse(&text_parts(&body, "user").join("\n")),
    ) {
        return fill_reply(&shared, &body, &fill).await;
    }
    let prompt = Prompt::parse(&body);
    let agent = prompt.as_ref().map(|p| p.agent);
    let Some(request) = prompt
        .as_ref()
        .map(|p| p.request.clone())
        .or_else(|| request_of(&body))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "the prompt has no [Request] section: not a UFO agent prompt",
        );
    };
    let span = tracing::info_span!("model.reply", agent = ?agent, request = %request);
    let size = size_of(&body);
    let reply = {
        let mut tasks = lock(&shared.tasks);
        let Some(task) = tasks.get_mut(&request) else {
            return error(
                StatusCode::BAD_REQUEST,
                format!("no running suite task has the request {request:?}"),
            );
        };
        task.tally.add(agent, size);
        let reply = match (&shared.mode, &prompt) {
            (Mode::StandIn(patience), Some(p)) => Some(span.in_scope(|| {
                let reply = decide(&task.demo, p, &mut task.waits, *patience);
                tracing::info!(status = %reply["status"], "stand-in replied");
                reply
            })),
            (Mode::StandIn(_), None) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "neither a HostAgent, an AppAgent nor a third-party agent prompt",
                );
            }
            (Mode::Forward { .. }, _) => None,
        };
        task.calls
            .push(call_brief(&body, prompt.as_ref(), size, reply.as_ref()));
        reply
    };
    match (reply, &shared.mode) {
        (Some(reply), _) => {
            think(&shared).await;
            completion(&body, size, &reply)
        }
        (None, Mode::Forward { base_url, api_key }) => {
            forward(
                &shared.client,
                base_url,
                api_key.as_deref(),
                "chat/completions",
                Some(&body),
            )
            .instrument(span)
            .await
        }
        (None, Mode::StandIn(_)) => error(StatusCode::INTERNAL_SERVER_ERROR, "no reply"),
    }
}

/// The stand-in's think time (`--standin-latency-ms`). Not synchronisation: it stands for a model's
/// answer time, so the suite measures what a call costs in wall time.
async fn think(shared: &Shared) {
    let ms = shared.latency_ms.load(std::sync::atomic::Ordering::Relaxed);
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

fn completion(body: &Value, size: PromptSize, reply: &Value) -> Response {
    axum::Json(json!({
        "id": format!("chatcmpl-suite-{}", uuid::Uuid::new_v4().simple()),
        "object": "chat.completion",
        "model": body["model"].as_str().unwrap_or("ufo-suite-standin"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.to_string()}}],
        "usage": {"prompt_tokens": size.text_bytes / 4, "completion_tokens": 50,
                  "total_tokens": size.text_bytes / 4 + 50}
    }))
    .into_response()
}

/// A reuse's fill call, answered and tallied with its task (by the new request it names).
async fn fill_reply(shared: &Shared, body: &Value, fill: &super::reuse::Fill) -> Response {
    let size = size_of(body);
    let reply = fill.reply();
    {
        let mut tasks = lock(&shared.tasks);
        let Some(task) = tasks.get_mut(&fill.new) else {
            return error(
                StatusCode::BAD_REQUEST,
                format!("no running suite task has the request {:?}", fill.new),
            );
        };
        task.tally.add(None, size);
        task.tally.fills += 1;
        task.calls.push(json!({
            "agent": "reuse_fill",
            "text": text_parts(body, "user").join("\n"),
            "images": size.images,
            "reply": reply,
        }));
    }
    tracing::info!(
        texts = fill.texts.len(),
        "stand-in filled a reused plan's texts"
    );
    think(shared).await;
    completion(body, size, &reply)
}

/// One model call as the suite keeps it (`prompts.jsonl` in the task's folder).
fn call_brief(
    body: &Value,
    prompt: Option<&Prompt>,
    size: PromptSize,
    reply: Option<&Value>,
) -> Value {
    let agent = prompt.map(|p| match p.agent {
        AgentKind::Host => "host",
        AgentKind::App => "app",
        AgentKind::ThirdParty => "third_party",
    });
    let controls: Vec<Value> = prompt
        .map(|p| &p.controls[..])
        .unwrap_or_default()
        .iter()
        .map(|c| json!({"label": c.label, "name": c.name, "type": c.kind}))
        .collect();
    let windows: Vec<Value> = prompt
        .map(|p| &p.windows[..])
        .unwrap_or_default()
        .iter()
        .map(|w| json!({"label": w.label, "name": w.name}))
        .collect();
    json!({
        "agent": agent,
        "text": text_parts(body, "user").join("\n"),
        "images": size.images,
        "controls": controls,
        "windows": windows,
        "reply": reply,
    })
}

async fn forward(
    client: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
    path: &str,
    body: Option<&Value>,
) -> Response {
    let url = format!("{}/{path}", base_url.trim_end_matches('/'));
    let mut request = match body {
        Some(b) => client.post(&url).json(b),
        None => client.get(&url),
    };
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                format!("the model endpoint {url} is unreachable: {e}"),
            );
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = answer.headers().clone();
    match answer.bytes().await {
        Ok(bytes) => {
            let mut response = (status, bytes).into_response();
            for name in ["content-type", "retry-after"] {
                if let Some(v) = headers.get(name) {
                    response.headers_mut().insert(name, v.clone());
                }
            }
            response
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            format!("the model endpoint {url} broke off: {e}"),
        ),
    }
}
