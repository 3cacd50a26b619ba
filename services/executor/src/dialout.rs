//! Dial-out: instead of listening, the executor opens one long-lived gRPC stream to the agent
//! (`ufo.v1.ExecutorHub/Dial`, proto/ufo/v1/dialout.proto) and answers the Executor API's calls that
//! arrive over it. Each call travels as the gRPC request it would be on a listening port and is served by
//! the same routes, behind the same request checks, as the listener's ([`crate::run`] builds both): the
//! transport is the only difference.
//!
//! The stream is authenticated by the executor's enrollment token (read from its file at every attempt,
//! so a rotated token needs no restart) and kept alive by HTTP/2 pings and heartbeat frames; when it ends
//! or cannot be opened the executor tries again after 100 ms, doubling to `--connect-max-backoff-ms`, and
//! starts again from 100 ms once a connection was accepted.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tracing::Instrument as _;
use ufo_proto::v1::executor_hub_client::ExecutorHubClient;
use ufo_proto::v1::{
    AgentFrame, ExecutorFrame, Heartbeat, TunnelRequest, TunnelResponse, agent_frame,
    executor_frame,
};

use crate::config::{Config, ConfigError};

/// First wait before reconnecting; doubles up to the configured maximum.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Heartbeat interval when the agent's welcome gives none.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);
/// Room for a response frame's own fields beside the tunnelled message.
const FRAME_OVERHEAD: usize = 64;
/// Metadata names a tunnelled call may carry (trace context); everything else is dropped.
const FORWARDED_METADATA: &[&str] = &["traceparent", "tracestate"];

/// Header carrying the executor's name.
pub const NAME_HEADER: &str = "x-ufo-executor-name";
/// Header carrying the executor's labels (`k=v,k=v`).
pub const LABELS_HEADER: &str = "x-ufo-executor-labels";
/// Header carrying the executor's version.
pub const VERSION_HEADER: &str = "x-ufo-executor-version";

/// The dial-out settings, checked.
#[derive(Clone)]
pub struct Settings {
    /// The agent's URL.
    pub url: String,
    /// The executor's name.
    pub name: String,
    /// The enrollment token's file.
    pub token_file: PathBuf,
    /// `key=value` labels.
    pub labels: Vec<(String, String)>,
    /// The CA of the agent's certificate (PEM), for `https`.
    pub ca_pem: Option<Vec<u8>>,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// Largest frame sent or accepted.
    pub max_message_bytes: usize,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("name", &self.name)
            .field("token_file", &self.token_file)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Whether `name` may name an executor: 1 to 64 of letters, digits, `.`, `_`, `-`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_label_part(part: &str) -> bool {
    (1..=64).contains(&part.len())
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':'))
}

impl Settings {
    /// The settings of `config` (which has `--connect`).
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let bad = |m: String| ConfigError::DialOut(m);
        let url = config.connect.clone().unwrap_or_default();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad(format!(
                "--connect {url:?} must be an http:// or https:// URL"
            )));
        }
        let name = config.name.clone().unwrap_or_default();
        if !valid_name(&name) {
            return Err(bad(format!(
                "--name {name:?} must be 1 to 64 letters, digits, '.', '_' or '-'"
            )));
        }
        let token_file = config
            .enroll_token_file
            .clone()
            .ok_or_else(|| bad("--connect needs --enroll-token-file".into()))?;
        let mut labels = Vec::new();
        for entry in config
            .labels
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
        {
            match entry.split_once('=') {
                Some((k, v)) if valid_label_part(k.trim()) && valid_label_part(v.trim()) => {
                    labels.push((k.trim().to_owned(), v.trim().to_owned()));
                }
                _ => {
                    return Err(bad(format!(
                        "--labels entry {entry:?} must be key=value (letters, digits, '.', '_', '-', '/', ':')"
                    )));
                }
            }
        }
        let ca_pem = match &config.connect_ca {
            Some(path) => Some(std::fs::read(path).map_err(|source| ConfigError::TlsRead {
                what: "--connect-ca",
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        Ok(Self {
            url,
            name,
            token_file,
            labels,
            ca_pem,
            max_backoff: Duration::from_millis(config.connect_max_backoff_ms),
            max_message_bytes: config.max_message_bytes,
        })
    }

    fn endpoint(&self) -> Result<Endpoint, SetupError> {
        let mut endpoint = Endpoint::from_shared(self.url.clone())
            .map_err(|source| SetupError::Url {
                url: self.url.clone(),
                source,
            })?
            .connect_timeout(Duration::from_secs(10))
            // HTTP/2 pings keep NATs and proxies from dropping an idle stream and find a dead peer.
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if self.url.starts_with("https://") {
            ufo_common::tls::install_crypto_provider();
            let tls = match &self.ca_pem {
                Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                None => ClientTlsConfig::new().with_webpki_roots(),
            };
            endpoint = endpoint.tls_config(tls).map_err(|source| SetupError::Tls {
                url: self.url.clone(),
                source,
            })?;
        }
        Ok(endpoint)
    }

    fn token(&self) -> Result<String, SetupError> {
        let text =
            std::fs::read_to_string(&self.token_file).map_err(|source| SetupError::TokenRead {
                path: self.token_file.clone(),
                source,
            })?;
        let token = text.trim().to_owned();
        if token.is_empty() {
            return Err(SetupError::TokenEmpty(self.token_file.clone()));
        }
        Ok(token)
    }
}

/// Why a dial-out connection could not even be tried (read again before every attempt).
#[derive(Debug, thiserror::Error)]
enum SetupError {
    /// `--connect` is not a usable URL.
    #[error("--connect {url}: {source}")]
    Url {
        url: String,
        source: tonic::transport::Error,
    },
    /// The TLS settings are unusable.
    #[error("TLS for {url}: {source}")]
    Tls {
        url: String,
        source: tonic::transport::Error,
    },
    /// The token file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    TokenRead {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The token file is empty.
    #[error("{} is empty", .0.display())]
    TokenEmpty(PathBuf),
}

/// How one connection ended.
enum Ended {
    /// Shutdown was asked for.
    Shutdown,
    /// The agent accepted the stream, which then ended for this reason.
    Closed(String),
    /// The stream was never accepted, for this reason.
    Refused(String),
}

/// Serves `service` (the executor's routes behind its request checks) over dial-out connections until
/// `shutdown` fires.
pub async fn run<S, B>(
    settings: Settings,
    service: S,
    processes: std::sync::Arc<crate::process::Processes>,
    shutdown: CancellationToken,
) where
    S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Display + Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display + Send,
{
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let span = tracing::info_span!("dialout.connection", name = %settings.name, agent = %settings.url, attempt);
        // The programs started over this stream belong to it and end with it.
        let caller = crate::process::Caller(format!("dial-out:{attempt}"));
        let ended = connection(&settings, service.clone(), &caller, &shutdown)
            .instrument(span)
            .await;
        let killed = processes.caller_gone(&caller);
        if killed > 0 {
            tracing::info!(
                killed,
                "dial-out stream ended: its MCP stdio processes were killed"
            );
        }
        let wait = match ended {
            Ended::Shutdown => return,
            Ended::Closed(reason) => {
                tracing::warn!(name = %settings.name, %reason, "dial-out stream ended; reconnecting");
                backoff = FIRST_BACKOFF;
                backoff
            }
            Ended::Refused(reason) => {
                tracing::warn!(
                    name = %settings.name,
                    %reason,
                    retry_in_ms = backoff.as_millis() as u64,
                    "dial-out connection failed; retrying"
                );
                let wait = backoff;
                backoff = (backoff * 2).min(settings.max_backoff);
                wait
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

async fn connection<S, B>(
    settings: &Settings,
    service: S,
    caller: &crate::process::Caller,
    shutdown: &CancellationToken,
) -> Ended
where
    S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Display + Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display + Send,
{
    let token = match settings.token() {
        Ok(t) => t,
        Err(e) => return Ended::Refused(e.to_string()),
    };
    let endpoint = match settings.endpoint() {
        Ok(e) => e,
        Err(e) => return Ended::Refused(e.to_string()),
    };
    let channel = tokio::select! {
        () = shutdown.cancelled() => return Ended::Shutdown,
        c = endpoint.connect() => match c {
            Ok(c) => c,
            Err(e) => return Ended::Refused(format!("cannot reach {}: {}", settings.url, source_chain(&e))),
        },
    };
    let mut client = ExecutorHubClient::new(channel)
        .max_decoding_message_size(settings.max_message_bytes)
        .max_encoding_message_size(settings.max_message_bytes);
    let (tx, rx) = mpsc::channel::<ExecutorFrame>(64);
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let md = request.metadata_mut();
    let labels = settings
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    for (key, value) in [
        ("authorization", format!("Bearer {token}")),
        (NAME_HEADER, settings.name.clone()),
        (LABELS_HEADER, labels),
        (VERSION_HEADER, env!("CARGO_PKG_VERSION").to_owned()),
    ] {
        match value.parse() {
            Ok(v) => {
                md.insert(key, v);
            }
            Err(_) => return Ended::Refused(format!("{key} is not a valid header value")),
        }
    }
    let mut inbound = tokio::select! {
        () = shutdown.cancelled() => return Ended::Shutdown,
        r = client.dial(request) => match r {
            Ok(r) => r.into_inner(),
            Err(s) => return Ended::Refused(format!("the agent refused the connection: {:?}: {}", s.code(), s.message())),
        },
    };
    // The first frame is the welcome.
    let heartbeat = match inbound.message().await {
        Ok(Some(AgentFrame {
            kind: Some(agent_frame::Kind::Welcome(w)),
        })) => match w.heartbeat_interval_ms {
            0 => DEFAULT_HEARTBEAT,
            ms => Duration::from_millis(ms.max(100).into()),
        },
        Ok(_) => return Ended::Refused("the agent did not start with a welcome".into()),
        Err(s) => {
            return Ended::Refused(format!(
                "the agent refused the connection: {:?}: {}",
                s.code(),
                s.message()
            ));
        }
    };
    tracing::info!(
        name = %settings.name,
        agent = %settings.url,
        heartbeat_ms = heartbeat.as_millis() as u64,
        "dial-out connected"
    );
    let mut ticks = tokio::time::interval(heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // An agent silent for three heartbeats is gone (HTTP/2 pings catch a dead socket; this catches a
    // stuck peer).
    let silence = heartbeat * 3;
    let mut last_heard = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ended::Shutdown,
            _ = ticks.tick() => {
                if last_heard.elapsed() > silence {
                    return Ended::Closed(format!("nothing from the agent for {} ms", silence.as_millis()));
                }
                let beat = ExecutorFrame { kind: Some(executor_frame::Kind::Heartbeat(Heartbeat { sent_at_ms: now_ms() })) };
                if tx.send(beat).await.is_err() {
                    return Ended::Closed("the outbound stream closed".into());
                }
            }
            frame = inbound.message() => {
                last_heard = tokio::time::Instant::now();
                match frame {
                    Ok(Some(AgentFrame { kind: Some(agent_frame::Kind::Request(request)) })) => {
                        let tx = tx.clone();
                        let service = service.clone();
                        let max = settings.max_message_bytes;
                        let span = tracing::info_span!("dialout.call", id = request.id, path = %request.path);
                        let caller = caller.clone();
                        tokio::spawn(async move {
                            let response = answer_as(service, request, max, Some(caller)).await;
                            let _ = tx.send(ExecutorFrame { kind: Some(executor_frame::Kind::Response(response)) }).await;
                        }.instrument(span));
                    }
                    Ok(Some(AgentFrame { kind: Some(agent_frame::Kind::Heartbeat(_)) })) => {
                        tracing::trace!("heartbeat from the agent");
                    }
                    Ok(Some(_)) => {
                        tracing::warn!("ignoring an agent frame this executor does not know");
                    }
                    Ok(None) => return Ended::Closed("the agent closed the stream".into()),
                    Err(s) => return Ended::Closed(format!("{:?}: {}", s.code(), s.message())),
                }
            }
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn refusal(id: u64, code: Code, message: impl Into<String>) -> TunnelResponse {
    TunnelResponse {
        id,
        body: Bytes::new(),
        code: code as i32,
        message: message.into(),
    }
}

/// Runs one tunnelled call through `service`, as the listener would.
pub async fn answer<S, B>(service: S, request: TunnelRequest, max_bytes: usize) -> TunnelResponse
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    S::Error: std::fmt::Display + Send,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display + Send,
{
    answer_as(service, request, max_bytes, None).await
}

/// [`answer`] for `caller` (the stream it came over), which owns the processes the call starts.
async fn answer_as<S, B>(
    mut service: S,
    request: TunnelRequest,
    max_bytes: usize,
    caller: Option<crate::process::Caller>,
) -> TunnelResponse
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    S::Error: std::fmt::Display + Send,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display + Send,
{
    let id = request.id;
    // Only the Executor API is served over the stream (no health, no reflection).
    if !request.path.starts_with("/ufo.v1.Executor/") {
        return refusal(
            id,
            Code::Unimplemented,
            format!("{:?} is not an Executor API method", request.path),
        );
    }
    // The tunnel carries one response message per call: a stream would never end (docs/live.md).
    if request.path == "/ufo.v1.Executor/WatchDesktop" {
        return refusal(
            id,
            Code::Unimplemented,
            "the live view (WatchDesktop) is not served over a dial-out connection".to_owned(),
        );
    }
    let mut builder = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://dial-out{}", request.path))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers");
    for (key, value) in &request.metadata {
        if FORWARDED_METADATA.contains(&key.as_str()) {
            builder = builder.header(key.as_str(), value.as_str());
        }
    }
    if let Some(caller) = caller {
        builder = builder.extension(caller);
    }
    let http_request = match builder.body(Body::new(http_body_util::Full::new(request.body))) {
        Ok(r) => r,
        Err(e) => return refusal(id, Code::InvalidArgument, format!("malformed call: {e}")),
    };
    let response = match std::future::poll_fn(|cx| service.poll_ready(cx)).await {
        Ok(()) => service.call(http_request).await,
        Err(e) => Err(e),
    };
    let response = match response {
        Ok(r) => r,
        Err(e) => return refusal(id, Code::Internal, e.to_string()),
    };
    let (parts, body) = response.into_parts();
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(e) => return refusal(id, Code::Internal, format!("cannot read the answer: {e}")),
    };
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes();
    let status = Status::from_header_map(&parts.headers)
        .or_else(|| trailers.as_ref().and_then(Status::from_header_map))
        .unwrap_or_else(|| Status::internal("the executor's answer carried no status"));
    if status.code() != Code::Ok {
        return refusal(id, status.code(), status.message());
    }
    if body.len() + FRAME_OVERHEAD > max_bytes {
        return refusal(
            id,
            Code::ResourceExhausted,
            format!(
                "the answer is {} bytes, more than --max-message-bytes {max_bytes}",
                body.len()
            ),
        );
    }
    TunnelResponse {
        id,
        body,
        code: Code::Ok as i32,
        message: String::new(),
    }
}
