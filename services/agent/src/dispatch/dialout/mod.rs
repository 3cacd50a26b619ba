//! Dial-out executors (issue 36): an executor behind NAT opens one long-lived stream to this agent
//! (`ufo.v1.ExecutorHub/Dial`, [`server`]) and the agent sends it the Executor API's calls over that
//! stream. The [`Hub`] is the registry of connected executors by name; a [`TunnelChannel`] is a gRPC
//! transport that carries one executor client's calls over its executor's stream, so the dispatcher
//! (`GrpcDispatcher`: retries, catalog, results) is the same code for a dial-in and a dial-out executor.
//!
//! Each call gets an id unique on its stream; the answer is matched by id, on the stream it was sent on
//! only, so an executor cannot answer (or see) another executor's calls. An executor that is not
//! connected refuses the call before anything is sent (UNAVAILABLE, retried within the dispatcher's
//! budget like a refused TCP connection); one that disconnects mid-call fails it UNAVAILABLE (an action
//! is then not sent again: it may have run).
//!
//! [`enroll`] keeps the enrollment tokens (hashed, in `--executor-enrollments-file`).

pub mod enroll;
pub mod server;

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::body::Body;
use ufo_proto::v1::{AgentFrame, TunnelRequest, TunnelResponse, agent_frame};

/// Metadata a tunnelled call carries to the executor (trace context).
const FORWARDED_METADATA: &[&str] = &["traceparent", "tracestate"];

/// The address a dial-out executor's tasks are stored with (`dialout://NAME`).
pub const SCHEME: &str = "dialout://";

/// One connected executor.
#[derive(Debug)]
pub struct Session {
    /// Its name.
    pub name: String,
    /// The enrollment token it proved (its identity).
    pub token_id: String,
    /// `key=value` labels it declared.
    pub labels: BTreeMap<String, String>,
    /// Its version.
    pub version: String,
    /// The peer address.
    pub peer: String,
    /// When it connected.
    pub connected_at: SystemTime,
    /// This connection's generation, unique per connection and greater for a later one (a reconnection
    /// is another session): the agent's clock at connect in microseconds since the Unix epoch, made
    /// strictly increasing within the process ([`Hub::register`]). The pool's record of the desktop is
    /// fenced by it, so that a replaced connection's late write cannot overwrite a newer one's.
    pub generation: u64,
    last_heartbeat: Mutex<Option<SystemTime>>,
    outbound: mpsc::Sender<Result<AgentFrame, Status>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<TunnelResponse>>>,
    next_id: AtomicU64,
    closed: CancellationToken,
    calls: AtomicU64,
}

impl Session {
    /// When its last heartbeat came.
    pub fn last_heartbeat(&self) -> Option<SystemTime> {
        self.last_heartbeat.lock().ok().and_then(|h| *h)
    }

    /// Calls sent to it so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn heard(&self) {
        if let Ok(mut h) = self.last_heartbeat.lock() {
            *h = Some(SystemTime::now());
        }
    }

    /// Ends the connection: `status` goes to the executor, pending calls fail.
    pub fn close(&self, status: Status) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        let _ = self.outbound.try_send(Err(status));
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }

    /// Whether it has ended.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Hands the answer to call `id` to its caller; `false` when this connection never sent that id (or
    /// it was answered already).
    fn answer(&self, response: TunnelResponse) -> bool {
        let waiter = self
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(&response.id));
        match waiter {
            Some(w) => {
                let _ = w.send(response);
                true
            }
            None => false,
        }
    }

    /// Sends one call and waits for its answer.
    async fn call(
        &self,
        path: String,
        body: Bytes,
        metadata: HashMap<String, String>,
    ) -> Result<TunnelResponse, Status> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, tx);
        }
        let span = tracing::debug_span!(
            "dialout.call",
            executor = %self.name,
            id,
            method = path.rsplit('/').next().unwrap_or_default(),
        );
        let frame = AgentFrame {
            kind: Some(agent_frame::Kind::Request(TunnelRequest {
                id,
                path,
                body,
                metadata,
            })),
        };
        if self.is_closed() || self.outbound.send(Ok(frame)).await.is_err() {
            if let Ok(mut pending) = self.pending.lock() {
                pending.remove(&id);
            }
            return Err(not_connected(&self.name));
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let sent = std::time::Instant::now();
        tracing::debug!(parent: &span, "tunnelled call sent");
        tokio::select! {
            answer = rx => {
                tracing::debug!(
                    parent: &span,
                    ms = sent.elapsed().as_secs_f64() * 1e3,
                    "tunnelled call answered"
                );
                answer.map_err(|_| Status::unavailable(format!(
                    "dial-out executor {} disconnected during the call", self.name
                )))
            }
            () = self.closed.cancelled() => Err(Status::unavailable(format!(
                "dial-out executor {} disconnected during the call", self.name
            ))),
        }
    }
}

/// UNAVAILABLE whose source is a refused connection: nothing was sent, so even an action may be retried.
fn not_connected(name: &str) -> Status {
    let mut status = Status::unavailable(format!("dial-out executor {name} is not connected"));
    status.set_source(Arc::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("dial-out executor {name} is not connected"),
    )));
    status
}

/// Why a connection cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The name is connected with another enrollment token.
    #[error(
        "executor {0:?} is already connected with another identity; a second connection is refused"
    )]
    NameTaken(String),
}

/// The connected dial-out executors, by name. Shared by the gRPC service that accepts them and every
/// dispatcher that calls them (one per agent process: [`HubHandle`] travels inside the configuration).
#[derive(Debug, Default)]
pub struct Hub {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The last generation given to a connection.
    generation: AtomicU64,
    changed: tokio::sync::Notify,
}

/// What registering a connection needs.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The executor's name.
    pub name: String,
    /// The enrollment token it proved.
    pub token_id: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its version.
    pub version: String,
    /// Its address.
    pub peer: String,
}

impl Hub {
    /// Registers a connection; the same identity replaces its earlier connection (closed ABORTED), another
    /// one is refused. Returns the session and the stream of frames to send it.
    pub fn register(
        &self,
        hello: Hello,
        outbound: mpsc::Sender<Result<AgentFrame, Status>>,
    ) -> Result<Arc<Session>, RegisterError> {
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| RegisterError::NameTaken(hello.name.clone()))?;
        if let Some(old) = sessions.get(&hello.name)
            && !old.is_closed()
        {
            if old.token_id != hello.token_id {
                return Err(RegisterError::NameTaken(hello.name));
            }
            tracing::info!(name = %hello.name, "dial-out executor reconnected; closing its earlier connection");
            old.close(Status::aborted(
                "replaced by a newer connection of the same executor",
            ));
        }
        let session = Arc::new(Session {
            name: hello.name.clone(),
            token_id: hello.token_id,
            labels: hello.labels,
            version: hello.version,
            peer: hello.peer,
            connected_at: SystemTime::now(),
            generation: self.next_generation(),
            last_heartbeat: Mutex::new(None),
            outbound,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            calls: AtomicU64::new(0),
        });
        sessions.insert(hello.name, session.clone());
        drop(sessions);
        self.changed.notify_waiters();
        Ok(session)
    }

    /// A new connection's generation: the clock in microseconds since the Unix epoch, or one more than the
    /// last one given when the clock has not moved on (or went back). Connections of one executor to
    /// different replicas are ordered as far as the replicas' clocks agree.
    fn next_generation(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let previous = self
            .generation
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last.saturating_add(1)))
            })
            .unwrap_or_else(|last| last);
        now.max(previous.saturating_add(1))
    }

    /// Forgets `session` (if it is still the one registered under its name).
    pub fn unregister(&self, session: &Session) {
        if let Ok(mut sessions) = self.sessions.lock()
            && sessions
                .get(&session.name)
                .is_some_and(|s| s.generation == session.generation)
        {
            sessions.remove(&session.name);
        }
        self.changed.notify_waiters();
    }

    /// The live connection of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .ok()?
            .get(name)
            .filter(|s| !s.is_closed())
            .cloned()
    }

    /// Every live connection, by name.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = self
            .sessions
            .lock()
            .map(|s| s.values().filter(|s| !s.is_closed()).cloned().collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Closes the connection of `name` made with token `token_id` (a revoked token).
    pub fn close_token(&self, name: &str, token_id: &str, status: Status) {
        if let Some(s) = self.get(name).filter(|s| s.token_id == token_id) {
            s.close(status);
        }
    }

    /// A transport for `name`'s Executor API calls.
    pub fn channel(self: &Arc<Self>, name: &str, max_message_bytes: usize) -> TunnelChannel {
        TunnelChannel {
            hub: self.clone(),
            name: name.to_owned(),
            max_message_bytes,
        }
    }
}

/// The process's [`Hub`], carried by the configuration so the gRPC service and the dispatchers built from
/// one configuration share it (clones share; a freshly parsed configuration has its own).
#[derive(Debug, Clone, Default)]
pub struct HubHandle(pub Arc<Hub>);

/// A gRPC transport (a tower service like `tonic::transport::Channel`) over a dial-out executor's
/// stream.
#[derive(Debug, Clone)]
pub struct TunnelChannel {
    hub: Arc<Hub>,
    name: String,
    max_message_bytes: usize,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<Body>> for TunnelChannel {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let hub = self.hub.clone();
        let name = self.name.clone();
        let limit = self.max_message_bytes.saturating_add(5);
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            let metadata: HashMap<String, String> = FORWARDED_METADATA
                .iter()
                .filter_map(|k| {
                    let v = request.headers().get(*k)?.to_str().ok()?;
                    Some(((*k).to_owned(), v.to_owned()))
                })
                .collect();
            let body = http_body_util::Limited::new(request.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    Box::new(Status::resource_exhausted(format!(
                        "the call to dial-out executor {name} cannot be sent: {e}"
                    ))) as BoxError
                })?
                .to_bytes();
            let session = hub
                .get(&name)
                .ok_or_else(|| Box::new(not_connected(&name)) as BoxError)?;
            let answer = session
                .call(path, body, metadata)
                .await
                .map_err(|s| Box::new(s) as BoxError)?;
            Ok(response(answer))
        })
    }
}

/// The HTTP response a gRPC client expects for `answer`.
fn response(answer: TunnelResponse) -> http::Response<Body> {
    let code = tonic::Code::from_i32(answer.code);
    if code != tonic::Code::Ok {
        return Status::new(code, answer.message).into_http();
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let frames = futures::stream::iter([
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(answer.body)),
        Ok(http_body::Frame::trailers(trailers)),
    ]);
    let mut response = http::Response::new(Body::new(http_body_util::StreamBody::new(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}
