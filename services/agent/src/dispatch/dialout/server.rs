//! `ufo.v1.ExecutorHub`: accepts dial-out executors. A connection is checked before any frame (the
//! enrollment token against the name, the name against the connected ones), then welcomed; from then
//! on the agent sends calls and heartbeats and reads answers and heartbeats. Anything the executor sends
//! that it should not — an answer to a call it was never given, an empty frame, a frame over the size
//! limit or one that does not decode — ends its connection with a status saying so (never a panic), and
//! the calls it had pending fail UNAVAILABLE.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;
use ufo_proto::v1::executor_hub_server::{ExecutorHub, ExecutorHubServer};
use ufo_proto::v1::{AgentFrame, ExecutorFrame, Heartbeat, Welcome, agent_frame, executor_frame};

use super::enroll::{Enrollments, TokenRefusal};
use super::{Hello, Hub, Session};

/// Room for a frame's own fields beside the tunnelled message.
const FRAME_OVERHEAD: usize = 1024;

/// The service.
#[derive(Debug, Clone)]
pub struct HubService {
    hub: Arc<Hub>,
    enrollments: Enrollments,
    heartbeat: Duration,
    /// The session store the desktop pool lives in: connected executors register into it (issue 36).
    pool: Option<Pool>,
}

/// How connected executors are written into the desktop pool: once when they connect (name, labels,
/// version), then only every `seen_refresh` (the store's `last_heartbeat`, for the other replicas'
/// listings). Heartbeats themselves stay in memory ([`Session::last_heartbeat`]).
#[derive(Debug, Clone)]
struct Pool {
    client: crate::store::client::SessionClient,
    /// `None`: never refreshed after the connect.
    seen_refresh: Option<Duration>,
    /// Bounds the registrations in flight, so that a connect storm (hundreds of executors at once)
    /// queues here rather than taking every database connection of the session service.
    writes: Arc<tokio::sync::Semaphore>,
}

/// Registrations of one replica in flight at once.
const POOL_WRITES: usize = 4;

impl HubService {
    /// Accepts executors enrolled in `enrollments` into `hub`, expecting a heartbeat every `heartbeat`.
    pub fn new(hub: Arc<Hub>, enrollments: Enrollments, heartbeat: Duration) -> Self {
        Self {
            hub,
            enrollments,
            heartbeat,
            pool: None,
        }
    }

    /// The same service registering every connected executor as a desktop of the pool in the session
    /// store when it connects, and refreshing its `last_heartbeat` there every `seen_refresh` (`None`:
    /// never). A heartbeat writes nothing to the store: the replica holding the connection keeps it.
    pub fn with_pool(
        mut self,
        client: crate::store::client::SessionClient,
        seen_refresh: Option<Duration>,
    ) -> Self {
        self.pool = Some(Pool {
            client,
            seen_refresh: seen_refresh.filter(|d| !d.is_zero()),
            writes: Arc::new(tokio::sync::Semaphore::new(POOL_WRITES)),
        });
        self
    }

    /// The tonic server, accepting frames up to `max_message_bytes` (the executor client's limit) plus
    /// the frame's own fields.
    pub fn server(self, max_message_bytes: usize) -> ExecutorHubServer<Self> {
        let max = max_message_bytes.saturating_add(FRAME_OVERHEAD);
        ExecutorHubServer::new(self)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }
}

fn header<'a>(request: &'a Request<Streaming<ExecutorFrame>>, name: &str) -> Option<&'a str> {
    request.metadata().get(name).and_then(|v| v.to_str().ok())
}

/// An executor's labels, by key.
type Labels = BTreeMap<String, String>;

fn labels(text: &str) -> Result<Labels, Status> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((k, v)) = entry.split_once('=') else {
            return Err(Status::invalid_argument(format!(
                "label {entry:?} is not key=value"
            )));
        };
        if k.is_empty() || k.len() > 64 || v.len() > 64 || out.len() >= 32 {
            return Err(Status::invalid_argument(
                "labels: at most 32, keys 1 to 64 characters, values at most 64",
            ));
        }
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

type Outbound = ReceiverStream<Result<AgentFrame, Status>>;

#[tonic::async_trait]
impl ExecutorHub for HubService {
    type DialStream = Outbound;

    async fn dial(
        &self,
        request: Request<Streaming<ExecutorFrame>>,
    ) -> Result<Response<Outbound>, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        let name = header(&request, "x-ufo-executor-name")
            .unwrap_or_default()
            .to_owned();
        if !super::enroll::valid_name(&name) {
            return Err(Status::invalid_argument(
                "x-ufo-executor-name must be 1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
        let token = header(&request, "authorization")
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim())
            })
            .ok_or_else(|| {
                Status::unauthenticated("an enrollment token is required (authorization: Bearer …)")
            })?
            .to_owned();
        let labels = labels(header(&request, "x-ufo-executor-labels").unwrap_or_default())?;
        let version = header(&request, "x-ufo-executor-version")
            .unwrap_or_default()
            .chars()
            .take(64)
            .collect::<String>();
        let token_id = match self.enrollments.verify(&name, &token) {
            Ok(Ok(id)) => id,
            Ok(Err(refusal)) => {
                tracing::warn!(%name, %peer, reason = %refusal, "dial-out connection refused");
                return Err(match refusal {
                    TokenRefusal::OtherExecutor(_) => {
                        Status::permission_denied(refusal.to_string())
                    }
                    TokenRefusal::Unknown | TokenRefusal::Revoked(_) => {
                        Status::unauthenticated(refusal.to_string())
                    }
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the enrollments");
                return Err(Status::unavailable(
                    "the agent cannot check enrollment tokens now",
                ));
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let session = self
            .hub
            .register(
                Hello {
                    name: name.clone(),
                    token_id,
                    labels,
                    version,
                    peer: peer.clone(),
                },
                tx.clone(),
            )
            .map_err(|e| {
                tracing::warn!(%name, %peer, reason = %e, "dial-out connection refused");
                Status::already_exists(e.to_string())
            })?;
        let welcome = AgentFrame {
            kind: Some(agent_frame::Kind::Welcome(Welcome {
                heartbeat_interval_ms: u32::try_from(self.heartbeat.as_millis())
                    .unwrap_or(u32::MAX),
            })),
        };
        let _ = tx.try_send(Ok(welcome));
        let span = tracing::info_span!(
            "dialout.session",
            executor = %name,
            token_id = %session.token_id,
            peer = %peer,
            generation = session.generation,
        );
        tracing::info!(
            parent: &span,
            executor = %name,
            peer = %peer,
            labels = ?session.labels,
            version = %session.version,
            "dial-out executor connected"
        );
        tokio::spawn(
            serve(
                self.hub.clone(),
                session,
                request.into_inner(),
                tx,
                self.heartbeat,
                self.pool.clone(),
            )
            .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Reads the executor's frames and sends heartbeats until the connection ends.
async fn serve(
    hub: Arc<Hub>,
    session: Arc<Session>,
    mut inbound: Streaming<ExecutorFrame>,
    outbound: mpsc::Sender<Result<AgentFrame, Status>>,
    heartbeat: Duration,
    pool: Option<Pool>,
) {
    register_desktop(pool.as_ref(), &session, "connected");
    let mut ticks = tokio::time::interval(heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The coarse refresh, first after a share of its interval that differs per connection, so that
    // executors that connected together do not refresh together.
    let refresh_every = pool.as_ref().and_then(|p| p.seen_refresh);
    let mut refresh = refresh_every.map(|every| {
        let first = every.mul_f64(spread(&session.name, session.generation));
        let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + first, every);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        refresh
    });
    let silence = heartbeat * 3;
    let mut last_heard = tokio::time::Instant::now();
    let reason: String = loop {
        tokio::select! {
            () = session.closed.cancelled() => break "closed by the agent".into(),
            () = outbound.closed() => break "the executor went away".into(),
            _ = ticks.tick() => {
                if last_heard.elapsed() > silence {
                    let message = format!("no frame from the executor for {} ms", silence.as_millis());
                    session.close(Status::deadline_exceeded(message.clone()));
                    break message;
                }
                let beat = AgentFrame { kind: Some(agent_frame::Kind::Heartbeat(Heartbeat { sent_at_ms: now_ms() })) };
                let _ = outbound.try_send(Ok(beat));
            }
            Some(_) = tick(refresh.as_mut()) => {
                register_desktop(pool.as_ref(), &session, "seen");
            }
            frame = inbound.message() => {
                last_heard = tokio::time::Instant::now();
                match frame {
                    Ok(Some(ExecutorFrame { kind: Some(executor_frame::Kind::Response(response)) })) => {
                        let id = response.id;
                        if !session.answer(response) {
                            let message = format!(
                                "a result for call id {id}, which this connection was never given (or was answered already)"
                            );
                            session.close(Status::invalid_argument(message.clone()));
                            break message;
                        }
                    }
                    Ok(Some(ExecutorFrame { kind: Some(executor_frame::Kind::Heartbeat(_)) })) => {
                        session.heard();
                        let _beat = tracing::debug_span!("dialout.heartbeat", executor = %session.name).entered();
                        tracing::debug!(executor = %session.name, "dial-out heartbeat");
                    }
                    Ok(Some(ExecutorFrame { kind: None })) => {
                        let message = "an empty frame (neither a result nor a heartbeat)".to_owned();
                        session.close(Status::invalid_argument(message.clone()));
                        break message;
                    }
                    Ok(None) => break "the executor closed the stream".into(),
                    Err(status) => {
                        let status = frame_error(status);
                        let message = format!("{:?}: {}", status.code(), status.message());
                        session.close(status);
                        break message;
                    }
                }
            }
        }
    };
    session.close(Status::unavailable(format!("disconnected: {reason}")));
    hub.unregister(&session);
    tracing::info!(executor = %session.name, %reason, calls = session.calls(), "dial-out executor disconnected");
}

/// The next tick of `refresh`, or never without one.
async fn tick(refresh: Option<&mut tokio::time::Interval>) -> Option<tokio::time::Instant> {
    match refresh {
        Some(refresh) => Some(refresh.tick().await),
        None => std::future::pending().await,
    }
}

/// A fraction in [0, 1) fixed for one connection (its name and generation), spreading the first
/// refreshes.
fn spread(name: &str, generation: u64) -> f64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    generation.hash(&mut h);
    (h.finish() % 10_000) as f64 / 10_000.0
}

/// Registers (`why`: "connected") or refreshes ("seen": labels, version, `last_heartbeat`) the executor
/// as a desktop of the pool, in the background so that frames keep being read, at most [`POOL_WRITES`]
/// at once per replica. A failed registration is tried again (200 ms doubling to 10 s) while the
/// connection lasts; a failed refresh is logged and left to the next one. Nothing is written once the
/// connection has closed (a newer connection of the executor registers itself), and the store refuses
/// a write whose connection generation is older than the stored one (one that was already on its way
/// when a newer connection registered): it is logged and not retried.
fn register_desktop(pool: Option<&Pool>, session: &Arc<Session>, why: &'static str) {
    let Some(pool) = pool else {
        return;
    };
    let mut client = pool.client.clone();
    let writes = pool.writes.clone();
    let request = ufo_proto::v1::RegisterDesktopRequest {
        name: session.name.clone(),
        labels: session.labels.clone().into_iter().collect(),
        version: session.version.clone(),
        generation: session.generation,
    };
    let connection = session.clone();
    tokio::spawn(
        async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                let written = {
                    let Ok(_permit) = writes.acquire().await else {
                        return;
                    };
                    // The wait for a permit may have outlasted the connection.
                    if connection.is_closed() {
                        tracing::debug!("the connection closed before its desktop was written; nothing written");
                        return;
                    }
                    client.register_desktop(request.clone()).await
                };
                match written {
                    Ok(_) => return,
                    Err(e) if e.code() == tonic::Code::FailedPrecondition => {
                        tracing::info!(reason = %e.message(), "a newer connection of the executor registered its desktop; this connection's write was refused");
                        return;
                    }
                    Err(e) if why == "connected" && !connection.is_closed() => {
                        tracing::warn!(error = %e, retry_ms = backoff.as_millis() as u64, "cannot register the dial-out executor as a desktop; retrying");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot refresh the dial-out executor's desktop");
                        return;
                    }
                }
                tokio::select! {
                    () = connection.closed.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        .instrument(tracing::debug_span!("dialout.register_desktop", executor = %session.name, why, generation = session.generation)),
    );
}

/// A frame the executor sent that could not be read, as the status its connection ends with: too large
/// is RESOURCE_EXHAUSTED, undecodable is INVALID_ARGUMENT. tonic's decoder reports a frame it cannot
/// decode (prost's error, a bad compression flag, a truncated frame) as INTERNAL with no source error;
/// a transport failure carries its h2 or I/O error as the source and is passed on as it is.
fn frame_error(status: Status) -> Status {
    let message = status.message().to_owned();
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
            Status::resource_exhausted(format!("frame too large: {message}"))
        }
        tonic::Code::Internal if std::error::Error::source(&status).is_none() => {
            Status::invalid_argument(format!("malformed frame: {message}"))
        }
        _ => status,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
