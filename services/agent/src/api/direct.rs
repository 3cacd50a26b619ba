//! Direct sessions: every desktop tool call of an MCP client is a step of a session of kind DIRECT, one
//! per caller and executor, so a person audits (and replays) an MCP client's work in `ufo show`, the REST
//! steps and the viewer like any task. The session is created on the caller's first call on that executor
//! (RUNNING; the session store's claim never picks a DIRECT session up), owned by the caller (another
//! caller's key gets "not found"), and ended by `end_direct_session` or after `--mcp-direct-idle-seconds`
//! without a call; the next call then starts a new one.
//!
//! The session is leased to this agent process (`--mcp-direct-lease-ms`), which renews the leases of the
//! sessions it keeps open; its writes are fenced by the lease. When the process dies the lease lapses,
//! and any agent replica's keeper ([`DirectSessions::keep`]) ends the session as FAILED with a result
//! saying the agent holding it went away. A session this process lost (ended meanwhile by a cancel or by
//! another replica) is dropped, and the caller's next call starts a new one.
//!
//! Calls of one session run one at a time (a step number per call, without gaps). A call holding an
//! action is recorded as an intent (a STEP_STARTED event `{intent: true, ...}`, as the runner records
//! its batches) before it reaches the executor; after it, its step records the commands with their
//! results and the screenshots as blobs (uploaded to the blob store, referenced by the step).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use ufo_mcp_server::{DesktopCall, ToolError};
use ufo_proto::v1::{
    AgentKind, AppendEventsRequest, CreateSessionRequest, EndExpiredDirectSessionsRequest,
    EventKind, RecordStepRequest, RenewLeaseRequest, SessionKind, SessionStatus,
    SetSessionStatusRequest, Step,
};

use super::error::ApiError;
use crate::agents::action::ActionRecord;
use crate::dispatch::CommandResult;
use crate::store::blobs::{ArtifactUpload, BlobUploads, references};
use crate::store::client::SessionClient;

/// The recorded agent name of a caller's direct calls.
fn agent_name(caller: &str) -> String {
    format!("McpClient/{caller}")
}

struct Direct {
    id: String,
    state: Arc<Mutex<State>>,
    last_used: std::sync::Mutex<Instant>,
    /// Its lease is lost: the session was ended meanwhile (a cancel, or a replica that found the lease
    /// lapsed). The next call starts a new session.
    lost: AtomicBool,
}

impl Direct {
    fn touch(&self) {
        if let Ok(mut at) = self.last_used.lock() {
            *at = Instant::now();
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }
}

struct State {
    /// The next step's number.
    next: u64,
    /// Ended (by the tool or the idle timeout): a call that finds it so starts a new session.
    ended: bool,
}

type Key = (String, String);

struct Inner {
    client: SessionClient,
    uploads: BlobUploads,
    idle: Duration,
    /// The lease of each session this process opens, and who holds it.
    lease: Duration,
    worker: String,
    open: Mutex<HashMap<Key, Arc<Direct>>>,
    reaping: AtomicBool,
}

impl Inner {
    fn lease_ms(&self) -> u32 {
        u32::try_from(self.lease.as_millis()).unwrap_or(u32::MAX)
    }

    /// Drops `direct` from the open sessions (when it is still the one open under `key`).
    async fn forget(&self, key: &Key, direct: &Arc<Direct>) {
        let mut open = self.open.lock().await;
        if open.get(key).is_some_and(|d| Arc::ptr_eq(d, direct)) {
            open.remove(key);
        }
    }
}

/// The direct sessions of this agent process.
#[derive(Clone)]
pub struct DirectSessions {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DirectSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSessions")
            .field("idle", &self.inner.idle)
            .field("lease", &self.inner.lease)
            .field("worker", &self.inner.worker)
            .finish_non_exhaustive()
    }
}

/// One call being recorded: it holds its session's turn until [`Recording::finish`].
pub struct Recording {
    direct: Arc<Direct>,
    client: SessionClient,
    worker: String,
    session_id: String,
    agent: String,
    step: u64,
    started: prost_types::Timestamp,
    state: OwnedMutexGuard<State>,
}

/// A step of a session recorded whole once it is over ([`DirectSessions::record_whole`]).
pub struct WholeStep {
    /// The step (its session id and number are set when recorded).
    pub step: Step,
    /// Its memory item.
    pub memory: Map<String, Value>,
    /// Its screenshots.
    pub artifacts: Vec<ArtifactUpload>,
}

/// What a finished call leaves in its step.
pub struct StepContent {
    /// The commands run (or refused), with their results, in order.
    pub actions: Vec<ActionRecord>,
    /// Screenshots: the artifact kind, the shot, extra metadata.
    pub artifacts: Vec<ArtifactUpload>,
    /// A one-line summary of what was seen or done.
    pub observation: String,
    /// Why the call failed, when it did.
    pub error: Option<String>,
}

fn status_error(what: &str, status: &tonic::Status) -> ToolError {
    let e = ApiError::from(status.clone());
    ToolError::new(e.code.as_str(), format!("{what}: {}", e.message))
}

impl DirectSessions {
    /// Sessions recorded through `client`, ended after `idle` without a call, each leased to `worker`
    /// (this process) for `lease` at a time.
    pub fn new(client: SessionClient, idle: Duration, lease: Duration, worker: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                uploads: BlobUploads::new(client.clone()),
                client,
                idle,
                lease,
                worker,
                open: Mutex::new(HashMap::new()),
                reaping: AtomicBool::new(false),
            }),
        }
    }

    /// The keeper, until `shutdown`: every third of the lease it renews the leases of the sessions this
    /// process keeps open (a session found ended meanwhile is dropped: the next call starts a new one),
    /// and ends the direct sessions of any agent whose lease lapsed (the agent went away).
    pub async fn keep(&self, shutdown: CancellationToken) {
        let period = (self.inner.lease / 3).max(Duration::from_millis(100));
        let mut sweeping = true;
        tracing::info!(worker = %self.inner.worker, lease_ms = self.inner.lease_ms(),
            "direct session keeper started");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            self.renew_open()
                .instrument(tracing::info_span!("direct.renew"))
                .await;
            if sweeping {
                sweeping = self
                    .end_expired()
                    .instrument(tracing::info_span!("direct.end_expired"))
                    .await;
            }
        }
    }

    /// Renews the lease of every open session; drops those that were ended meanwhile.
    async fn renew_open(&self) {
        let inner = &self.inner;
        let open: Vec<(Key, Arc<Direct>)> = inner
            .open
            .lock()
            .await
            .iter()
            .map(|(k, d)| (k.clone(), d.clone()))
            .collect();
        for (key, direct) in open {
            let renewed = inner
                .client
                .clone()
                .renew_lease(RenewLeaseRequest {
                    session_id: direct.id.clone(),
                    worker_id: inner.worker.clone(),
                    lease_ms: inner.lease_ms(),
                })
                .await;
            match renewed {
                Ok(_) => {}
                Err(status) if lost(&status) => {
                    direct.lost.store(true, Ordering::Release);
                    inner.forget(&key, &direct).await;
                    tracing::warn!(session = %direct.id, caller = %key.0, executor = %key.1,
                        error = %status.message(),
                        "a direct session was ended meanwhile; the next call starts a new one");
                }
                Err(status) => {
                    tracing::warn!(session = %direct.id, error = %status.message(),
                        "cannot renew a direct session's lease; trying again");
                }
            }
        }
    }

    /// Ends the direct sessions whose lease lapsed; `false` when the session service cannot (an older
    /// one), so the keeper stops asking.
    async fn end_expired(&self) -> bool {
        let inner = &self.inner;
        let ended = inner
            .client
            .clone()
            .end_expired_direct_sessions(EndExpiredDirectSessionsRequest {
                worker_id: inner.worker.clone(),
                limit: 100,
                unleased_idle_seconds: u32::try_from(inner.idle.as_secs()).unwrap_or(u32::MAX),
            })
            .await;
        match ended {
            Ok(response) => {
                for session in response.into_inner().sessions {
                    tracing::warn!(session = %session.id, owner = %session.owner,
                        result = %session.result, "ended a direct session whose agent went away");
                }
                true
            }
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                tracing::warn!(error = %status.message(),
                    "the session service cannot end direct sessions whose agent went away (too old)");
                false
            }
            Err(status) => {
                tracing::warn!(error = %status.message(),
                    "cannot end the direct sessions whose agent went away; trying again");
                true
            }
        }
    }

    /// The screenshot uploader (a capture's upload starts as soon as its bytes arrive).
    pub fn uploads(&self) -> &BlobUploads {
        &self.inner.uploads
    }

    /// Records `steps` that are over (a person's demonstration, `ufo record`) as a new direct session
    /// of `owner` with `request` and `config`, leased to this process while it is written, its
    /// screenshots put in the blob store (all uploads started first), and ends it FINISHED with
    /// `result`: its id. A step that cannot be recorded ends it FAILED, saying why.
    pub async fn record_whole(
        &self,
        owner: &str,
        request: &str,
        config: Value,
        steps: Vec<WholeStep>,
        result: &str,
    ) -> Result<String, ToolError> {
        let inner = &self.inner;
        let session = inner
            .client
            .clone()
            .create_session(CreateSessionRequest {
                request: request.to_owned(),
                config: ufo_proto::json::to_struct(config).ok(),
                owner: owner.to_owned(),
                id: uuid::Uuid::now_v7().to_string(),
                kind: SessionKind::Direct as i32,
                desktop: None,
                lease_owner: inner.worker.clone(),
                lease_ms: inner.lease_ms(),
            })
            .await
            .map_err(|s| status_error("cannot start the session", &s))?
            .into_inner();
        for s in &steps {
            for a in &s.artifacts {
                inner.uploads.start(&a.data);
            }
        }
        let retry = crate::store::retry::Retry::default();
        let mut failure = None;
        for (n, mut s) in (1..).zip(steps) {
            s.step.session_id.clone_from(&session.id);
            s.step.step = n;
            let recorded = async {
                let blobs = references(&inner.uploads, s.artifacts, &retry)
                    .await
                    .map_err(|e| status_error("its screenshots could not be stored", &e))?;
                inner
                    .client
                    .clone()
                    .record_step(RecordStepRequest {
                        step: Some(s.step),
                        memory_item: Some(ufo_proto::json::object_to_struct(s.memory)),
                        blobs,
                        lease_owner: inner.worker.clone(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| status_error("the step could not be recorded", &e))
            }
            .await;
            if let Err(e) = recorded {
                failure = Some(format!("step {n}: {}", e.message));
                break;
            }
        }
        let (status, said) = match &failure {
            None => (SessionStatus::Finished, result.to_owned()),
            Some(why) => (SessionStatus::Failed, why.clone()),
        };
        inner
            .client
            .clone()
            .set_session_status(SetSessionStatusRequest {
                session_id: session.id.clone(),
                status: status as i32,
                result: said,
                lease_owner: inner.worker.clone(),
            })
            .await
            .map_err(|s| status_error("cannot end the session", &s))?;
        match failure {
            None => Ok(session.id),
            Some(why) => Err(ToolError::new(
                "unavailable",
                format!("the session could not be recorded: {why}"),
            )),
        }
    }

    /// Starts recording a call of `caller` on `executor`: its session (created on first use) and its
    /// turn in it.
    pub async fn begin(&self, caller: &str, call: &DesktopCall) -> Result<Recording, ToolError> {
        self.start_reaper();
        let key = (caller.to_owned(), call.executor.clone());
        loop {
            let direct = {
                let mut open = self.inner.open.lock().await;
                match open.get(&key) {
                    Some(d) => d.clone(),
                    None => {
                        let d = Arc::new(self.create(caller, &call.executor).await?);
                        open.insert(key.clone(), d.clone());
                        d
                    }
                }
            };
            let state = direct.state.clone().lock_owned().await;
            if state.ended || direct.lost.load(Ordering::Acquire) {
                self.inner.forget(&key, &direct).await;
                continue;
            }
            direct.touch();
            return Ok(Recording {
                direct: direct.clone(),
                client: self.inner.client.clone(),
                worker: self.inner.worker.clone(),
                session_id: direct.id.clone(),
                agent: agent_name(caller),
                step: state.next,
                started: std::time::SystemTime::now().into(),
                state,
            });
        }
    }

    async fn create(&self, caller: &str, executor: &str) -> Result<Direct, ToolError> {
        let session = self
            .inner
            .client
            .clone()
            .create_session(CreateSessionRequest {
                request: format!(
                    "desktop tool calls of MCP client {caller} on executor {executor}"
                ),
                config: ufo_proto::json::to_struct(json!({"executor": executor, "direct": true}))
                    .ok(),
                owner: caller.to_owned(),
                id: uuid::Uuid::now_v7().to_string(),
                kind: SessionKind::Direct as i32,
                // An MCP client's own calls: outside the desktop pool (docs/executors.md).
                desktop: None,
                // Held by this process while it keeps the session open.
                lease_owner: self.inner.worker.clone(),
                lease_ms: self.inner.lease_ms(),
            })
            .await
            .map_err(|s| status_error("cannot start the direct session", &s))?
            .into_inner();
        tracing::info!(session = %session.id, caller, executor, worker = %self.inner.worker,
            "direct session started");
        Ok(Direct {
            id: session.id,
            state: Arc::new(Mutex::new(State {
                next: 1,
                ended: false,
            })),
            last_used: std::sync::Mutex::new(Instant::now()),
            lost: AtomicBool::new(false),
        })
    }

    /// Ends `caller`'s direct session on `executor`: its id and step count, or `None` when it has none.
    pub async fn end(
        &self,
        caller: &str,
        executor: &str,
        result: &str,
    ) -> Result<Option<(String, u64)>, ToolError> {
        let direct = self
            .inner
            .open
            .lock()
            .await
            .remove(&(caller.to_owned(), executor.to_owned()));
        let Some(direct) = direct else {
            return Ok(None);
        };
        let state = direct.state.lock().await;
        let steps = close(&self.inner, &direct, state, result).await?;
        Ok(Some((direct.id.clone(), steps)))
    }

    /// Ends idle sessions every quarter of the idle time (at least once a second, at most once a
    /// minute), for as long as this process keeps its sessions.
    fn start_reaper(&self) {
        if self.inner.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let period = (self.inner.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(
            async move {
                loop {
                    tokio::time::sleep(period).await;
                    let Some(inner) = weak.upgrade() else { return };
                    let idle: Vec<(Key, Arc<Direct>)> = inner
                        .open
                        .lock()
                        .await
                        .iter()
                        .filter(|(_, d)| d.idle_for() >= inner.idle)
                        .map(|(k, d)| (k.clone(), d.clone()))
                        .collect();
                    for (key, direct) in idle {
                        // A call in progress finishes first; one that came since keeps it open.
                        let state = direct.state.lock().await;
                        if state.ended || direct.idle_for() < inner.idle {
                            continue;
                        }
                        inner.forget(&key, &direct).await;
                        let result = format!(
                            "ended after {} s without a desktop call",
                            inner.idle.as_secs()
                        );
                        if let Err(e) = close(&inner, &direct, state, &result).await {
                            let (caller, executor) = key;
                            tracing::warn!(session = %direct.id, %caller, %executor, error = %e,
                                "cannot end an idle direct session");
                        }
                    }
                }
            }
            .instrument(tracing::info_span!("direct.reaper")),
        );
    }
}

/// Marks `direct` ended (its `state` locked: no call in progress) and finishes its session: its step
/// count.
async fn close(
    inner: &Inner,
    direct: &Direct,
    mut state: tokio::sync::MutexGuard<'_, State>,
    result: &str,
) -> Result<u64, ToolError> {
    state.ended = true;
    let ended = inner
        .client
        .clone()
        .set_session_status(SetSessionStatusRequest {
            session_id: direct.id.clone(),
            status: SessionStatus::Finished as i32,
            result: result.to_owned(),
            lease_owner: inner.worker.clone(),
        })
        .await;
    match ended {
        Ok(_) => {}
        // Ended meanwhile (a cancel, or a replica that found its lease lapsed): it has ended.
        Err(status) if lost(&status) => {
            tracing::info!(session = %direct.id, error = %status.message(),
                "the direct session had been ended meanwhile");
        }
        Err(status) => return Err(status_error("cannot end the direct session", &status)),
    }
    tracing::info!(session = %direct.id, steps = state.next - 1, "direct session ended");
    Ok(state.next - 1)
}

/// Whether `status` says this process no longer holds the session (its lease was dropped when it
/// ended, or another took it).
fn lost(status: &tonic::Status) -> bool {
    ufo_common::error::Reason::of(status) == Some(ufo_common::error::Reason::LeaseLost)
        || status.code() == tonic::Code::FailedPrecondition
}

impl Recording {
    /// The session this call is recorded in.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// This call's step number.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Records that `call`'s actions are about to run (nothing may run when this fails).
    pub async fn intent(&self, call: &DesktopCall) -> Result<(), ToolError> {
        let actions: Vec<Value> = call
            .commands
            .iter()
            .filter(|c| c.action)
            .map(|c| json!({"tool": c.tool, "arguments": c.parameters}))
            .collect();
        if actions.is_empty() {
            return Ok(());
        }
        let payload = json!({"intent": true, "step": self.step, "round": 1, "agent": self.agent,
                             "mcp_tool": call.tool, "actions": actions});
        let mut draft = crate::round::output::draft(EventKind::StepStarted, payload, self.step);
        draft.round = 1;
        self.client
            .clone()
            .append_events(AppendEventsRequest {
                session_id: self.session_id.clone(),
                events: vec![draft],
                lease_owner: self.worker.clone(),
            })
            .await
            .map_err(|s| {
                self.lose_on(&s);
                status_error("cannot record the intent before acting", &s)
            })?;
        Ok(())
    }

    /// Marks the session lost when `status` says so: the caller's next call starts a new one.
    fn lose_on(&self, status: &tonic::Status) {
        if lost(status) {
            self.direct.lost.store(true, Ordering::Release);
        }
    }

    /// Records the call's step; the session's next call may then run.
    pub async fn finish(
        mut self,
        call: &DesktopCall,
        content: StepContent,
        uploads: &BlobUploads,
    ) -> Result<(), ToolError> {
        let representation: Vec<String> = content
            .actions
            .iter()
            .map(ActionRecord::representation)
            .collect();
        let arguments = call
            .commands
            .first()
            .map(|c| Value::Object(c.parameters.clone()))
            .unwrap_or(Value::Null);
        let failed = content.error.is_some();
        let state_after = if failed { "FAIL" } else { "CONTINUE" };
        let comment = match &content.error {
            Some(e) => format!("{} on {} failed: {e}", call.tool, call.executor),
            None => format!("{} on {}", call.tool, call.executor),
        };
        let mut extra = Map::new();
        extra.insert("mcp_tool".into(), json!(call.tool));
        extra.insert("executor".into(), json!(call.executor));
        let step = Step {
            session_id: self.session_id.clone(),
            step: self.step,
            round: 1,
            round_step: u32::try_from(self.step).unwrap_or(u32::MAX),
            agent_name: self.agent.clone(),
            agent_kind: AgentKind::App as i32,
            state_before: "CONTINUE".into(),
            state_after: state_after.into(),
            subtask: format!("{} {arguments}", call.tool),
            observation: content.observation.clone(),
            comment: comment.clone(),
            status: state_after.into(),
            actions: content.actions.iter().map(ActionRecord::to_proto).collect(),
            started_at: Some(self.started),
            finished_at: Some(std::time::SystemTime::now().into()),
            extra: Some(ufo_proto::json::object_to_struct(extra)),
            ..Default::default()
        };
        let memory = json!({"agent_name": self.agent, "comment": comment, "status": state_after,
                            "action": content.actions.iter().map(ActionRecord::to_json).collect::<Vec<_>>(),
                            "action_representation": representation.join("; ")});
        let retry = crate::store::retry::Retry::default();
        let blobs = references(uploads, content.artifacts, &retry)
            .await
            .map_err(|s| {
                self.lose_on(&s);
                status_error("the call ran but its screenshots could not be stored", &s)
            })?;
        self.client
            .clone()
            .record_step(RecordStepRequest {
                step: Some(step),
                memory_item: memory
                    .as_object()
                    .cloned()
                    .map(ufo_proto::json::object_to_struct),
                blobs,
                lease_owner: self.worker.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| {
                self.lose_on(&s);
                status_error("the call ran but its step could not be recorded", &s)
            })?;
        self.state.next += 1;
        self.direct.touch();
        Ok(())
    }
}

/// A command's record as a step action.
pub fn action(tool: &str, parameters: &Map<String, Value>, result: CommandResult) -> ActionRecord {
    ActionRecord {
        function: tool.to_owned(),
        arguments: parameters.clone(),
        status: "CONTINUE".into(),
        target: None,
        result,
    }
}
