//! The task operations both front ends (REST and gRPC) share: validation, then reads and writes through
//! the session service. Nothing is kept in memory, so any replica serves any request.

use std::sync::Arc;

use futures::StreamExt as _;
use tracing::instrument;
use ufo_common::ErrorCode;
use ufo_proto::v1::{
    AddRoundRequest, Artifact, ArtifactKind, Event, EventKind, GetArtifactRequest,
    GetBlackboardRequest, GetSessionRequest, ListRoundsRequest, ListSessionsRequest,
    ListStepsRequest, RequestCancelRequest, Session, SessionStatus, Step, SubmitTaskRequest,
    WatchEventsRequest,
};

use super::auth::Caller;
use super::checks::{PriceCheck, no_nul};
use super::error::ApiError;
pub use super::model::view::TaskSnapshot;
use crate::config::ApiConfig;
use crate::dispatch::registry::{ExecutorConfigError, ExecutorRegistry};
use crate::round::control::{HeldAction as Held, Next, StepControl};
use crate::runner::hitl;
use crate::store::client::SessionClient;
use crate::store::knowledge::SessionKnowledge;

/// First window of newest events read to find a decision on the held action (widened fourfold as needed;
/// not a limit: the result is exact whatever its size). A hold step writes about four events, a decision one.
const DECISION_WINDOW: u64 = 16;

/// Why the API's operations cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    /// The executor registry is invalid.
    #[error(transparent)]
    Executors(#[from] ExecutorConfigError),
    /// The consent policy file is invalid.
    #[error(transparent)]
    Policy(#[from] crate::agents::policy::PolicyError),
    /// The knowledge store's client cannot be built.
    #[error(transparent)]
    Session(#[from] crate::store::client::SessionClientError),
    /// The label font of the set-of-marks cannot be loaded.
    #[error(transparent)]
    Vision(#[from] crate::vision::VisionError),
}

/// Task operations on the session service.
#[derive(Clone)]
pub struct Tasks {
    client: SessionClient,
    watch_client: SessionClient,
    knowledge: SessionKnowledge,
    knowledge_on: bool,
    limits: Arc<ApiConfig>,
    executors: Arc<ExecutorRegistry>,
    prices: Arc<PriceCheck>,
    desktop: Arc<super::desktop::Desktop>,
    live: Arc<super::live::LiveHub>,
    recordings: Arc<super::recordings::Recordings>,
    experience_chars: usize,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// Parses a task id (a UUID).
pub fn task_id(id: &str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(id)
        .map(|u| u.to_string())
        .map_err(|_| ApiError::invalid("task_id must be a UUID"))
}

fn is_terminal(status: i32) -> bool {
    matches!(
        SessionStatus::try_from(status),
        Ok(SessionStatus::Finished | SessionStatus::Failed | SessionStatus::Cancelled)
    )
}

impl Tasks {
    /// Operations on `client` (unary calls) and `watch_client` (streams, no per-call timeout), with the
    /// limits, executors and prices `config` declares.
    pub fn new(
        client: SessionClient,
        watch_client: SessionClient,
        config: &crate::Config,
    ) -> Result<Self, TasksError> {
        let mut limits = config.api.clone();
        // A task cannot take more steps than the agents run in a round (`--max-steps`): the cap a
        // task is held to, and the default it gets, say so, instead of the round stopping earlier than
        // the task's own limit without a word (issue 31).
        limits.max_steps_cap = limits.max_steps_cap.min(config.agents.max_steps);
        limits.default_max_steps = limits.default_max_steps.min(limits.max_steps_cap);
        let executors = Arc::new(ExecutorRegistry::from_config(config)?);
        // This process holds the leases of the direct sessions it opens (renewed by its keeper).
        let worker = config.runner.worker_id.clone().unwrap_or_else(|| {
            format!(
                "agent-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        });
        let direct = super::direct::DirectSessions::new(
            client.clone(),
            std::time::Duration::from_secs(config.api.mcp_server.mcp_direct_idle_seconds),
            std::time::Duration::from_millis(config.api.mcp_server.mcp_direct_lease_ms.into()),
            worker,
        );
        Ok(Self {
            client,
            watch_client,
            knowledge: SessionKnowledge::from_config(config)?,
            knowledge_on: config.agents.knowledge,
            limits: Arc::new(limits),
            executors: executors.clone(),
            prices: Arc::new(PriceCheck::from_config(&config.llm)),
            desktop: Arc::new(super::desktop::Desktop::new(
                config.agents.load_policy()?,
                executors.clone(),
                &config.runner,
                direct,
                config.agents.marker()?,
            )),
            live: Arc::new(super::live::LiveHub::new(
                executors,
                config.api.viewer.live_fps,
                config.api.viewer.live_jpeg_quality,
                config.runner.executor_max_message_bytes,
            )),
            recordings: Arc::new(super::recordings::Recordings::default()),
            experience_chars: config.agents.knowledge_experience_chars as usize,
        })
    }

    /// The configured limits, the step cap and default held to the agents' `--max-steps`.
    pub fn limits(&self) -> &ApiConfig {
        &self.limits
    }

    /// A handle on the session service for unary calls.
    pub(super) fn client(&self) -> SessionClient {
        self.client.clone()
    }

    /// The knowledge store as the agents use it (not bound to an owner).
    pub(super) fn knowledge(&self) -> &SessionKnowledge {
        &self.knowledge
    }

    /// Whether the agents retrieve knowledge (`--knowledge`).
    pub(super) fn knowledge_on(&self) -> bool {
        self.knowledge_on
    }

    /// The MCP desktop tools' backend.
    pub fn desktop(&self) -> &super::desktop::Desktop {
        &self.desktop
    }

    /// The recordings in progress (`ufo record`).
    pub fn recordings(&self) -> &super::recordings::Recordings {
        &self.recordings
    }

    /// Longest experience (and demonstration) summary, in characters.
    pub(super) fn knowledge_experience_chars(&self) -> usize {
        self.experience_chars
    }

    /// The live desktop feeds (docs/live.md).
    pub fn live(&self) -> &super::live::LiveHub {
        &self.live
    }

    /// How to reach the executor of task `id`, if `caller` may see the task (else NOT_FOUND).
    pub async fn executor_of(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<crate::dispatch::registry::Connection, ApiError> {
        let session = self.session(id, caller).await?;
        let config = crate::runner::task_config::TaskConfig::from_struct(session.config)
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("task {id}: {e}")))?;
        self.executors
            .connection(&config.executor_name, &config.executor)
            .map_err(|e| ApiError::new(ErrorCode::FailedPrecondition, format!("executor: {e}")))
    }

    /// The declared executors.
    pub fn executors(&self) -> &ExecutorRegistry {
        &self.executors
    }

    pub(crate) fn prices(&self) -> &PriceCheck {
        &self.prices
    }

    /// Queues a task.
    #[instrument(skip_all, fields(owner = %caller.name))]
    pub async fn submit(
        &self,
        caller: &Caller,
        mut req: SubmitTaskRequest,
    ) -> Result<TaskSnapshot, ApiError> {
        let replay = self.replay_plan(caller, &mut req).await?;
        let (mut config, desktop) = self.resolve(&req)?;
        config.replay = match replay {
            Some(replay) => Some(replay),
            None => self.reuse_plan(caller, &req).await?,
        };
        let session = self
            .client
            .clone()
            .create_session(ufo_proto::v1::CreateSessionRequest {
                request: req.request,
                config: Some(config.to_struct()),
                owner: caller.name.clone(),
                id: uuid::Uuid::now_v7().to_string(),
                kind: ufo_proto::v1::SessionKind::Task as i32,
                desktop,
                // A task gets its lease when a runner claims it.
                lease_owner: String::new(),
                lease_ms: 0,
            })
            .await?
            .into_inner();
        self.snapshot(session).await
    }

    /// The session `id` if `caller` may see it; another caller's task is NOT_FOUND with the same message
    /// as a missing one, so ids do not leak.
    pub(super) async fn session(&self, id: &str, caller: &Caller) -> Result<Session, ApiError> {
        let id = task_id(id)?;
        let session = self
            .client
            .clone()
            .get_session(GetSessionRequest {
                session_id: id.clone(),
            })
            .await?
            .into_inner();
        if !caller.may_see(&session.owner) {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("session {id} not found"),
            ));
        }
        Ok(session)
    }

    /// A task's current view.
    #[instrument(skip(self, caller))]
    pub async fn get(&self, id: &str, caller: &Caller) -> Result<TaskSnapshot, ApiError> {
        let session = self.session(id, caller).await?;
        self.snapshot(session).await
    }

    pub(super) async fn snapshot(&self, session: Session) -> Result<TaskSnapshot, ApiError> {
        let mut client = self.client.clone();
        let rounds = client
            .list_rounds(ListRoundsRequest {
                session_id: session.id.clone(),
            })
            .await?
            .into_inner()
            .rounds;
        let active = matches!(
            SessionStatus::try_from(session.status),
            Ok(SessionStatus::Running | SessionStatus::Waiting)
        );
        let mut state = String::new();
        let mut next = None;
        if session.totals.is_some_and(|t| t.steps > 0) {
            let last = session.totals.map_or(0, |t| t.steps);
            let steps = client
                .list_steps(ListStepsRequest {
                    session_id: session.id.clone(),
                    from_step: last,
                    limit: 1,
                })
                .await?
                .into_inner()
                .steps;
            if let Some(step) = steps.first() {
                if active {
                    state = format!("{}:{}", step.agent_name, step.state_after);
                }
                next = StepControl::of(step).ok().map(|c| c.next);
            }
        }
        let open = !is_terminal(session.status);
        let pending = if open && matches!(next, Some(Next::Ask { .. })) {
            let board = client
                .get_blackboard(GetBlackboardRequest {
                    session_id: session.id.clone(),
                })
                .await?
                .into_inner();
            hitl::pending_questions(&board)
        } else {
            Vec::new()
        };
        let held = match &next {
            Some(Next::Hold { action }) if open && !self.decided(&session, action).await? => {
                Some(action.to_proto())
            }
            _ => None,
        };
        let (replay, reuse) = self.replay_view(&session).await?;
        Ok(TaskSnapshot {
            session,
            rounds,
            state,
            pending,
            held,
            next,
            replay,
            reuse,
        })
    }

    /// Whether a decision on `held` (the newest step's, from its stored control value) is in the event log:
    /// a bounded read of the newest events, a window of `DECISION_WINDOW` widened fourfold until it reaches
    /// the hold step's STEP_FINISHED (every decision on it comes after) or the first event.
    async fn decided(&self, session: &Session, held: &Held) -> Result<bool, ApiError> {
        let last = session.last_seq;
        if last == 0 {
            return Ok(false);
        }
        let mut window = DECISION_WINDOW;
        loop {
            let from = last.saturating_sub(window - 1).max(1);
            let mut reached_hold = from == 1;
            let mut stream = self.watch(&session.id, from).await?;
            while let Some(event) = stream.next().await {
                let event = event?;
                let kind = EventKind::try_from(event.kind);
                reached_hold |= kind == Ok(EventKind::StepFinished) && event.step == held.step;
                if matches!(
                    kind,
                    Ok(EventKind::ActionApproved | EventKind::ActionRejected)
                ) && event.step == held.step
                {
                    return Ok(true);
                }
                if event.seq >= last {
                    break;
                }
            }
            if reached_hold {
                return Ok(false);
            }
            window = window.saturating_mul(4);
        }
    }

    /// Lists tasks, newest first.
    #[instrument(skip(self, caller))]
    pub async fn list(
        &self,
        caller: &Caller,
        page_size: u32,
        page_token: String,
        status: SessionStatus,
    ) -> Result<(Vec<Session>, String), ApiError> {
        let page_size = self.page(page_size);
        let page = self
            .client
            .clone()
            .list_sessions(ListSessionsRequest {
                page_size,
                page_token,
                status: status as i32,
                owner: caller.owner_filter().unwrap_or_default().to_owned(),
            })
            .await?
            .into_inner();
        Ok((page.sessions, page.next_page_token))
    }

    /// A task's steps from `from_step` (1-based).
    #[instrument(skip(self, caller))]
    pub async fn steps(
        &self,
        id: &str,
        caller: &Caller,
        from_step: u64,
        limit: u32,
    ) -> Result<Vec<Step>, ApiError> {
        let session = self.session(id, caller).await?;
        let limit = self.page(limit);
        Ok(self
            .client
            .clone()
            .list_steps(ListStepsRequest {
                session_id: session.id,
                from_step,
                limit,
            })
            .await?
            .into_inner()
            .steps)
    }

    /// A step's artifact of `kind`.
    #[instrument(skip(self, caller))]
    pub async fn artifact(
        &self,
        id: &str,
        caller: &Caller,
        step: u64,
        kind: ArtifactKind,
    ) -> Result<Artifact, ApiError> {
        let session = self.session(id, caller).await?;
        if step == 0 {
            return Err(ApiError::invalid("n must be at least 1"));
        }
        let artifact = self
            .client
            .clone()
            .get_artifact(GetArtifactRequest {
                artifact_id: String::new(),
                session_id: session.id,
                step,
                kind: kind as i32,
            })
            .await?
            .into_inner();
        self.rendered(artifact).await
    }

    /// `artifact` itself, or, for a recipe (`vision::derived`), the image it draws from its source.
    async fn rendered(&self, artifact: Artifact) -> Result<Artifact, ApiError> {
        use crate::vision::derived::{RECIPE_TYPE, Recipe, RenderError, render};
        let Some(mut reference) = artifact
            .r#ref
            .clone()
            .filter(|r| r.content_type == RECIPE_TYPE)
        else {
            return Ok(artifact);
        };
        let unreadable = |e: &dyn std::fmt::Display| {
            ApiError::new(
                ErrorCode::Internal,
                format!("step {}'s image cannot be drawn: {e}", reference.step),
            )
        };
        let recipe: Recipe = serde_json::from_slice(&artifact.data).map_err(|e| unreadable(&e))?;
        let source = self
            .client
            .clone()
            .get_artifact(GetArtifactRequest {
                artifact_id: recipe.source().to_owned(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let span = tracing::Span::current();
        let data = tokio::task::spawn_blocking(move || {
            span.in_scope(|| render(&artifact.data, &source.data))
        })
        .await
        .map_err(|e| unreadable(&e))?
        .map_err(|e| match e {
            // Drawn by a newer agent or with a font this one lacks: the operator can fix that.
            RenderError::Version(_) | RenderError::Font(_) => {
                ApiError::new(ErrorCode::FailedPrecondition, e.to_string())
            }
            e => unreadable(&e),
        })?;
        reference.content_type = "image/png".into();
        reference.size = data.len() as u64;
        Ok(Artifact {
            r#ref: Some(reference),
            data,
        })
    }

    pub(super) fn still_open(session: &Session) -> Result<(), ApiError> {
        if is_terminal(session.status) {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                format!("task {} has ended", session.id),
            ));
        }
        Ok(())
    }

    /// Adds a follow-up request: a new round in the same session.
    #[instrument(skip(self, caller, request))]
    pub async fn add_request(
        &self,
        id: &str,
        caller: &Caller,
        request: String,
    ) -> Result<TaskSnapshot, ApiError> {
        self.check_request("request", &request)?;
        let session = self.session(id, caller).await?;
        if SessionStatus::try_from(session.status) == Ok(SessionStatus::Cancelled) {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                format!("task {} was cancelled", session.id),
            ));
        }
        self.client
            .clone()
            .add_round(AddRoundRequest {
                session_id: session.id.clone(),
                request,
            })
            .await?;
        self.get(&session.id, caller).await
    }

    /// Asks the task to stop.
    #[instrument(skip(self, caller, reason))]
    pub async fn cancel(
        &self,
        id: &str,
        caller: &Caller,
        reason: String,
    ) -> Result<TaskSnapshot, ApiError> {
        no_nul("reason", &reason)?;
        if reason.chars().count() > self.limits.max_answer_chars {
            return Err(ApiError::invalid(format!(
                "reason must be at most {} characters",
                self.limits.max_answer_chars
            )));
        }
        let session = self.session(id, caller).await?;
        Self::still_open(&session)?;
        let session = self
            .client
            .clone()
            .request_cancel(RequestCancelRequest {
                session_id: session.id,
                reason,
            })
            .await?
            .into_inner();
        self.snapshot(session).await
    }

    /// The task's events from `from_seq`, replayed then live; ends after the task ends.
    pub async fn watch(
        &self,
        id: &str,
        from_seq: u64,
    ) -> Result<tonic::Streaming<Event>, ApiError> {
        let id = task_id(id)?;
        Ok(self
            .watch_client
            .clone()
            .watch_events(WatchEventsRequest {
                session_id: id,
                from_seq: from_seq.max(1),
                kinds: Vec::new(),
            })
            .await?
            .into_inner())
    }

    /// Whether the session service answers.
    pub async fn ready(&self) -> Result<(), ApiError> {
        self.client
            .clone()
            .list_sessions(ListSessionsRequest {
                page_size: 1,
                ..Default::default()
            })
            .await?;
        Ok(())
    }
}
