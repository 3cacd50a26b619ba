//! Runs one claimed task: its pending rounds, one recorded step at a time, under its lease. Each step is
//! committed (RecordStep, fenced by the lease owner) before the next one acts — with `--record-ahead`
//! while the next one observes and thinks ([`super::ahead`]), otherwise before it starts; everything the
//! next step needs is read back from the store, so a task claimed after a crash continues where the last
//! recorded step left it (a half-done step left nothing behind and is produced again, observing first).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info_span};
use ufo_proto::v1::{
    AddRoundRequest, AppendBlackboardRequest, AppendEventsRequest, BeginRoundRequest, EventKind,
    FinishRoundRequest, GetBlackboardRequest, GetMemoryRequest, GetSessionRequest,
    ListRoundsRequest, ParkReason, ParkTaskRequest, ReleaseTaskRequest, Round, RoundStatus,
    Session, SessionStatus, SetSessionStatusRequest, Step,
};

use super::ahead::{Pending, RecordAhead};
use super::driver::{StepInput, TaskDriver};
use super::hitl;
use super::intent::{self, Intent, StoreIntents};
use super::watch::{Signals, StopReason, follow_events, keep_lease};
use crate::config::{QuestionFallback, RunnerConfig};
use crate::round::Decision;
use crate::round::control::{HeldAction, Next, StepControl};
use crate::runner::task_config::TaskConfig;
use crate::store::client::SessionClient;
use crate::store::retry;

/// The answer recorded for a question nobody answered in time (`--question-fallback continue`).
pub const NO_ANSWER: &str = "(no answer within the timeout)";

/// How a task run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every round finished; the last round's result.
    Finished(String),
    /// A round failed or a limit was hit.
    Failed(String),
    /// A person cancelled it.
    Cancelled,
    /// Another worker holds the lease now; nothing more to do here.
    LeaseLost,
    /// This process is shutting down; the task goes back to the queue.
    Shutdown,
    /// The task waits for a person without holding a runner slot; an answer or a decision (or the
    /// wait's timeout) makes it claimable again.
    Parked,
}

/// One claimed task.
pub struct TaskRun {
    pub(crate) client: SessionClient,
    pub(crate) watch_client: SessionClient,
    pub(crate) worker_id: String,
    pub(crate) config: RunnerConfig,
    pub(crate) driver: Arc<dyn TaskDriver>,
    /// Stores the task's experience when it ends (`--knowledge`).
    pub(crate) experiences: Option<super::experience::ExperienceRecorder>,
    pub(crate) session: Session,
    pub(crate) shutdown: CancellationToken,
    /// Resets the task's desktop at its end (and before its first command when `reset_first`).
    pub(crate) resetter: Option<super::desktop::Resetter>,
    /// The claim handed the desktop on from a check-out that lapsed: reset it before anything runs.
    pub(crate) reset_first: bool,
    /// When the claim's answer arrived (the task's start, `task.start`, is timed from here).
    pub(crate) claimed_at: std::time::Instant,
    /// What the claim read and begun for the task's start (its rounds, the first open one begun, and
    /// whether nothing is recorded to read back); `None`: the runner reads them itself.
    pub(crate) start: Option<ufo_proto::v1::TaskStart>,
    /// How many steps the task has recorded so far (the picture after its last step goes with the last).
    pub(crate) recorded_steps: std::sync::atomic::AtomicU64,
    /// Hands the desktop straight on to the next task at the check-in (`None`: `--no-desktop-handover`).
    pub(crate) handover: Option<super::desktop::Handover>,
}

/// Everything recorded so far, read back from the store.
#[derive(Default)]
pub(super) struct History {
    pub(super) steps: Vec<Step>,
    pub(super) memory: Vec<ufo_proto::v1::MemoryItem>,
    pub(super) blackboard: ufo_proto::v1::Blackboard,
}

impl TaskRun {
    /// Runs the task to an end (or until its lease is lost or the process shuts down) and reports it to the
    /// store.
    pub async fn run(self) -> Outcome {
        let id = self.session.id.clone();
        // How long the claimed task waited for the claim loop to start it.
        let queued_ms = ms(self.claimed_at.elapsed());
        let span = info_span!("task", task_id = %id, worker_id = %self.worker_id, queued_ms);
        async move {
            let signals = Arc::new(Signals::default());
            if self.session.cancel_requested {
                signals.stop_with(StopReason::Cancel);
            }
            let done = CancellationToken::new();
            let lease = tokio::spawn(keep_lease(
                self.client.clone(),
                id.clone(),
                self.worker_id.clone(),
                self.config.lease_ms,
                signals.clone(),
                done.clone(),
            ));
            let follow = tokio::spawn(follow_events(
                self.watch_client.clone(),
                id.clone(),
                signals.clone(),
                done.clone(),
            ));
            // A bug that panics inside a step must still end the task (and stop renewing its lease):
            // otherwise it stays `running` for ever and no replica may take it over.
            let mut ahead = None;
            let unusable = match (&self.resetter, self.reset_first) {
                (Some(resetter), true) => super::desktop::reset(
                    &self.client,
                    resetter,
                    &self.session,
                    &self.worker_id,
                    &self.config,
                )
                .await
                .err()
                .map(|e| e.to_string()),
                _ => None,
            };
            let driven = if let Some(reason) = unusable {
                // The desktop leaves the pool; the task goes back to the queue for another one.
                tracing::warn!(desktop = %self.session.desktop, %reason, "the desktop's reset before the task failed");
                super::desktop::give_back(&self.client, &self.session, &self.worker_id, Some(reason))
                    .await;
                Ok(Outcome::Shutdown)
            } else {
                std::panic::AssertUnwindSafe(self.drive(&signals, &mut ahead))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(panic = %what, "the task's step panicked; failing the task");
                    Ok(Outcome::Failed(format!(
                        "internal error in the agent service ({what}); the runner's log has the details"
                    )))
                })
            };
            // Left outstanding only by a panic: the step before it is still recorded (or its failure wins,
            // as it would have without recording ahead) before the task's end is reported.
            let driven = match ahead.take() {
                Some(pending) => match pending.ahead.durable().await {
                    Ok(_) => driven,
                    Err(e) if lease_lost(&e) => Ok(Outcome::LeaseLost),
                    Err(e) => Err(e),
                },
                None => driven,
            };
            let outcome = match driven {
                Ok(outcome) => outcome,
                // Retried already (bounded): the task goes back to the queue, and fails once it was released
                // `--max-releases` times without progress.
                Err(e) if retry::transient(e.code()) => {
                    tracing::error!(error = %e, "store failure; releasing the task");
                    Outcome::Shutdown
                }
                // A deterministic refusal does not pass by claiming the task again.
                Err(e) => {
                    tracing::error!(error = %e, "the session store refused a write; failing the task");
                    Outcome::Failed(format!(
                        "the session store refused to record the task's progress ({:?}): {}",
                        e.code(),
                        e.message()
                    ))
                }
            };
            // What the driver kept between steps (the task's MCP servers on the desktop) ends with the run.
            self.driver.task_ended(&id);
            // Before the end is reported (a viewer reloading on the end finds it) and before the desktop
            // is checked in (its reset closes what the task left).
            if matches!(outcome, Outcome::Finished(_) | Outcome::Failed(_)) {
                self.after_picture().await;
            }
            let reported = self.report(&outcome).await;
            if let Err(e) = &reported {
                tracing::error!(error = %e, ?outcome, "cannot report the task's end");
            }
            // An ended task gives its desktop back (a parked one gave it back already; one going back
            // to the queue keeps it for whoever resumes it).
            if reported.is_ok()
                && matches!(
                    outcome,
                    Outcome::Finished(_) | Outcome::Failed(_) | Outcome::Cancelled
                )
            {
                super::desktop::check_in(
                    &self.client,
                    self.resetter.as_ref(),
                    &self.session,
                    &self.worker_id,
                    &self.config,
                    self.handover.as_ref(),
                )
                .await;
            }
            if let (Some(recorder), Ok(())) = (&self.experiences, &reported) {
                let ended = match &outcome {
                    Outcome::Finished(result) => Some((true, result)),
                    Outcome::Failed(reason) => Some((false, reason)),
                    _ => None,
                };
                if let Some((succeeded, text)) = ended {
                    // The task's own model writes the optional summary (--experience-model-summary).
                    let model = recorder
                        .model_summaries()
                        .then(|| self.task_config().ok())
                        .flatten()
                        .and_then(|config| self.driver.summary_model(&config));
                    recorder
                        .record(&self.client, &self.session, succeeded, text, model)
                        .await;
                }
            }
            done.cancel();
            let _ = tokio::join!(lease, follow);
            tracing::info!(?outcome, "task run ended");
            outcome
        }
        .instrument(span)
        .await
    }

    /// Keeps the whole desktop as it is now with the task's last step (`--after-picture-timeout-ms`), so
    /// the last step card shows what its action did. Best effort: a failure is logged and changes nothing.
    async fn after_picture(&self) {
        let step = self
            .recorded_steps
            .load(std::sync::atomic::Ordering::Relaxed);
        let timeout = self.config.after_picture_timeout_ms;
        if step == 0 || timeout == 0 {
            return;
        }
        let Ok(config) = self.task_config() else {
            return;
        };
        async {
            let capture = self.driver.desktop_picture(&config);
            let shot = match tokio::time::timeout(Duration::from_millis(timeout), capture).await {
                Ok(Ok(Some(shot))) => shot,
                Ok(Ok(None)) => return,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "cannot capture the desktop after the task's last step");
                    return;
                }
                Err(_) => {
                    tracing::warn!(
                        timeout_ms = timeout,
                        "the desktop's picture after the task's last step took longer than \
                         --after-picture-timeout-ms"
                    );
                    return;
                }
            };
            let upload = crate::round::record::artifact(
                ufo_proto::v1::ArtifactKind::AfterScreenshot,
                &shot,
                serde_json::json!({}),
            );
            let uploads = crate::store::blobs::BlobUploads::new(self.client.clone());
            let retry = self.config.store_retry();
            let added = async {
                let mut blobs = crate::store::blobs::references(&uploads, vec![upload], &retry).await?;
                let request = ufo_proto::v1::AddArtifactRequest {
                    session_id: self.session.id.clone(),
                    step,
                    blob: blobs.pop(),
                };
                self.client.clone().add_artifact(request).await
            };
            if let Err(error) = added.await {
                tracing::warn!(%error, "cannot store the desktop's picture after the task's last step");
            }
        }
        .instrument(info_span!("task.after_picture", step))
        .await
    }

    /// The task's configuration as its steps run it: the desktop the claim checked out (issue 36) is
    /// the executor.
    fn task_config(&self) -> Result<TaskConfig, crate::runner::task_config::BadTaskConfig> {
        let mut config = TaskConfig::from_struct(self.session.config.clone())?;
        if !self.session.desktop.is_empty() {
            config.executor_name = self.session.desktop.clone();
            config.executor = String::new();
        }
        Ok(config)
    }

    async fn report(&self, outcome: &Outcome) -> Result<(), tonic::Status> {
        let (status, result) = match outcome {
            Outcome::Finished(r) => (SessionStatus::Finished, r.clone()),
            Outcome::Failed(r) => (SessionStatus::Failed, r.clone()),
            Outcome::Cancelled => (SessionStatus::Cancelled, "cancelled".to_owned()),
            Outcome::LeaseLost | Outcome::Parked => return Ok(()),
            Outcome::Shutdown => {
                let release = ReleaseTaskRequest {
                    session_id: self.session.id.clone(),
                    worker_id: self.worker_id.clone(),
                    requeue: true,
                };
                self.client.clone().release_task(release).await?;
                return Ok(());
            }
        };
        self.set_status(status, result).await
    }

    async fn set_status(
        &self,
        status: SessionStatus,
        mut result: String,
    ) -> Result<(), tonic::Status> {
        crate::store::sanitise::text(&mut result);
        self.client
            .clone()
            .set_session_status(SetSessionStatusRequest {
                session_id: self.session.id.clone(),
                status: status as i32,
                result,
                lease_owner: self.worker_id.clone(),
            })
            .await?;
        Ok(())
    }

    pub(super) async fn board(&self) -> Result<ufo_proto::v1::Blackboard, tonic::Status> {
        let request = GetBlackboardRequest {
            session_id: self.session.id.clone(),
        };
        Ok(self
            .client
            .clone()
            .get_blackboard(request)
            .await?
            .into_inner())
    }

    /// Everything recorded so far: steps, memory and board, read at once (a task's start waits for the
    /// slowest of them, not their sum).
    async fn load(&self) -> Result<History, tonic::Status> {
        let id = self.session.id.clone();
        let steps = super::experience::all_steps(&self.client, &id);
        let memory = async {
            Ok(self
                .client
                .clone()
                .get_memory(GetMemoryRequest {
                    session_id: id.clone(),
                    agent_name: String::new(),
                })
                .await?
                .into_inner()
                .items)
        };
        let (steps, memory, blackboard) = tokio::try_join!(steps, memory, self.board())?;
        Ok(History {
            steps,
            memory,
            blackboard,
        })
    }

    /// The task's first open round (pending or running), begun under this runner's lease, after the
    /// number of rounds it has; `None` when every round has ended.
    async fn open_round(&self) -> Result<(usize, Option<Round>), tonic::Status> {
        let rounds = self.rounds().instrument(info_span!("task.rounds")).await?;
        self.begin_open(rounds, false).await
    }

    /// The first open round of `rounds` begun (with `BeginRound`, unless `begun_running`: the claim
    /// began a running one already), after the number of rounds.
    async fn begin_open(
        &self,
        rounds: Vec<Round>,
        begun_running: bool,
    ) -> Result<(usize, Option<Round>), tonic::Status> {
        let count = rounds.len();
        let open = rounds.into_iter().find(|r| {
            matches!(
                RoundStatus::try_from(r.status),
                Ok(RoundStatus::Pending | RoundStatus::Running)
            )
        });
        let Some(round) = open else {
            return Ok((count, None));
        };
        if begun_running && round.status == RoundStatus::Running as i32 {
            return Ok((count, Some(round)));
        }
        let round = self
            .client
            .clone()
            .begin_round(BeginRoundRequest {
                session_id: self.session.id.clone(),
                number: round.number,
                lease_owner: self.worker_id.clone(),
            })
            .instrument(info_span!("round.begin", round = round.number))
            .await?
            .into_inner();
        Ok((count, Some(round)))
    }

    /// The task's rounds.
    async fn rounds(&self) -> Result<Vec<Round>, tonic::Status> {
        Ok(self
            .client
            .clone()
            .list_rounds(ListRoundsRequest {
                session_id: self.session.id.clone(),
            })
            .await?
            .into_inner()
            .rounds)
    }

    async fn drive(
        &self,
        signals: &Signals,
        ahead: &mut Option<Pending>,
    ) -> Result<Outcome, tonic::Status> {
        let config = match self.task_config() {
            Ok(c) => c,
            Err(e) => return Ok(Outcome::Failed(e.to_string())),
        };
        // The history, the event log and the first open round (read, then begun) are independent: at
        // once (issue 36: a task handed a desktop starts sooner; its start waits for the slowest of
        // them, not their sum). The claim began the round and said whether anything is recorded
        // (`start`): a fresh task reads nothing back (it has no steps, memory, board, releases or
        // intents), a resumed one its history and event log as always.
        let fresh = self.start.as_ref().is_some_and(|start| start.fresh);
        let history = async {
            if fresh {
                return Ok(History::default());
            }
            self.load().instrument(info_span!("task.history")).await
        };
        let event_log = async {
            if fresh {
                return Ok(Vec::new());
            }
            intent::events_so_far(&self.client, &self.session.id)
                .instrument(info_span!("task.event_log"))
                .await
        };
        let round = async {
            match &self.start {
                Some(start) => self.begin_open(start.rounds.clone(), true).await,
                None => self.open_round().await,
            }
        };
        let ((mut history, history_ms), (log, event_log_ms), (opened, round_ms)) =
            tokio::try_join!(timed(history), timed(event_log), timed(round))?;
        self.recorded_steps.store(
            history.steps.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut client = self.client.clone();
        // What happened since the last recorded step: releases without progress, a dead runner's intents.
        let last_step = history.steps.len() as u64;
        let tail = intent::after_step(log, last_step);
        let releases = tail
            .iter()
            .filter(|e| e.kind == EventKind::TaskReleased as i32)
            .count();
        if releases >= self.config.max_releases as usize {
            let reason = format!(
                "the task was released {releases} times without recording a step (see the runner's log \
                 for the store errors); giving up instead of claiming it again"
            );
            // The round begun meanwhile ends with the task.
            if let (_, Some(round)) = &opened {
                let mut result = reason.clone();
                crate::store::sanitise::text(&mut result);
                client
                    .finish_round(FinishRoundRequest {
                        session_id: self.session.id.clone(),
                        number: round.number,
                        status: RoundStatus::Failed as i32,
                        result,
                        lease_owner: self.worker_id.clone(),
                    })
                    .await?;
            }
            return Ok(Outcome::Failed(reason));
        }
        let mut intents = intent::intents(&tail, last_step + 1);
        let mut last_result = String::new();
        // The first round was opened with the reads; later ones read the rounds and the board again.
        let mut opened = Some(opened);
        loop {
            let first = opened.is_some();
            let (count, begun) = match opened.take() {
                Some(opened) => opened,
                None => self.open_round().await?,
            };
            let Some(round) = begun else {
                // A replay replays every round: the recorded task's next follow-up becomes the next round.
                if let Some(request) = config
                    .replay
                    .as_ref()
                    .and_then(|spec| spec.follow_up(count + 1))
                {
                    client
                        .add_round(AddRoundRequest {
                            session_id: self.session.id.clone(),
                            request: request.to_owned(),
                        })
                        .await?;
                    continue;
                }
                return Ok(Outcome::Finished(last_result));
            };
            if first {
                // Where a task's start went (issue 36's scheduling overhead): from its claim to the
                // moment its first step is asked for (the agents' set-up and first observation follow,
                // in the step's span).
                tracing::info!(
                    since_claim_ms = ms(self.claimed_at.elapsed()),
                    history_ms,
                    event_log_ms,
                    round_ms,
                    round = round.number,
                    started_by_claim = self.start.is_some(),
                    fresh,
                    "task started"
                );
            }
            // Within a round the board is kept current from what RecordStep returns (and re-read when
            // answers are waited for); each round starts from the stored board.
            if !first {
                history.blackboard = self.board().await?;
            }
            let span = info_span!("round", round = round.number);
            let end = self
                .drive_round(signals, &config, &round, &mut history, &mut intents, ahead)
                .instrument(span.clone())
                .await;
            // However the round ended, its last step is recorded (or its failure wins) before the round's
            // end is.
            let end = match self
                .finish_pending(ahead, &mut history)
                .instrument(span)
                .await?
            {
                Some(stop) => stop,
                None => end?,
            };
            let (status, mut result) = match &end {
                Outcome::Finished(r) => (RoundStatus::Finished, r.clone()),
                Outcome::Failed(r) => (RoundStatus::Failed, r.clone()),
                Outcome::Cancelled => (RoundStatus::Cancelled, "cancelled".to_owned()),
                Outcome::LeaseLost | Outcome::Shutdown | Outcome::Parked => return Ok(end),
            };
            crate::store::sanitise::text(&mut result);
            client
                .finish_round(FinishRoundRequest {
                    session_id: self.session.id.clone(),
                    number: round.number,
                    status: status as i32,
                    result,
                    lease_owner: self.worker_id.clone(),
                })
                .await?;
            match end {
                Outcome::Finished(r) => last_result = r,
                other => return Ok(other),
            }
        }
    }

    fn stopped(&self, signals: &Signals) -> Option<Outcome> {
        match signals.reason() {
            Some(StopReason::Cancel) => Some(Outcome::Cancelled),
            Some(StopReason::LeaseLost) => Some(Outcome::LeaseLost),
            None if self.shutdown.is_cancelled() => Some(Outcome::Shutdown),
            None => None,
        }
    }

    fn over_limit(&self, config: &TaskConfig, history: &History) -> Option<String> {
        let limits = config.limits;
        if history.steps.len() as u64 >= u64::from(limits.max_steps) {
            return Some(format!("step limit of {} reached", limits.max_steps));
        }
        let cost: f64 = history.steps.iter().map(|s| s.cost).sum();
        if cost >= limits.max_cost {
            return Some(format!("cost limit of ${} reached", limits.max_cost));
        }
        if self.remaining_time(config).is_zero() {
            return Some(format!("time limit of {}s reached", limits.timeout_seconds));
        }
        None
    }

    fn remaining_time(&self, config: &TaskConfig) -> Duration {
        let created = self.session.created_at.map_or(0, |t| t.seconds);
        let deadline = created + i64::from(config.limits.timeout_seconds);
        let left = deadline - chrono::Utc::now().timestamp();
        Duration::from_secs(u64::try_from(left).unwrap_or(0))
    }

    /// What a task waiting for a person does: if the answers to every pending question (`held` is `None`)
    /// or the decision on `held` are in the store, returns the decision (when waiting for one); if the
    /// wait timed out (it started when `asked` was recorded), applies the documented fallback; otherwise
    /// parks the task — its lease and its runner slot are given up, and an answer or a decision queues
    /// it again (see `ParkTask`) — and returns [`Outcome::Parked`]. Everything the wait needs is in the
    /// store, so whichever runner claims the task next repeats this check.
    async fn wait_for_person(
        &self,
        signals: &Signals,
        held: Option<&HeldAction>,
        asked: Option<&Step>,
        board: &mut ufo_proto::v1::Blackboard,
    ) -> Result<Result<Option<Decision>, Outcome>, tonic::Status> {
        let seconds = match held {
            None => self.config.question_timeout_seconds,
            Some(_) => self.config.confirm_timeout_seconds,
        };
        let asked_at = asked
            .and_then(|s| s.finished_at)
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
            .unwrap_or_else(chrono::Utc::now);
        let until =
            asked_at + chrono::Duration::seconds(i64::try_from(seconds).unwrap_or(i64::MAX / 1000));
        let mut client = self.client.clone();
        let waited = loop {
            // Read in this order: whatever is written after `seen` refuses the park below.
            let seen = client
                .get_session(GetSessionRequest {
                    session_id: self.session.id.clone(),
                })
                .await?
                .into_inner()
                .last_seq;
            if let Some(held) = held {
                let decided = match signals.decision(held.step) {
                    Some(decision) => Some(decision),
                    None => {
                        hitl::decision_in_store(&self.client, &self.session.id, held.step, seen)
                            .await?
                    }
                };
                if let Some(decision) = decided {
                    break Ok(Some(decision));
                }
            } else {
                *board = self.board().await?;
                if hitl::pending_questions(board).is_empty() {
                    break Ok(None);
                }
            }
            if let Some(stop) = self.stopped(signals) {
                return Ok(Err(stop));
            }
            if chrono::Utc::now() >= until {
                break self.timed_out(held, seconds, board).await?;
            }
            let reason = match held {
                None => ParkReason::Question,
                Some(_) => ParkReason::Approval,
            };
            let park = ParkTaskRequest {
                session_id: self.session.id.clone(),
                worker_id: self.worker_id.clone(),
                reason: reason as i32,
                until: Some(prost_types::Timestamp {
                    seconds: until.timestamp(),
                    nanos: i32::try_from(until.timestamp_subsec_nanos()).unwrap_or(0),
                }),
                seen_seq: seen,
            };
            match client.park_task(park).await {
                Ok(parked) if parked.get_ref().parked => {
                    tracing::info!(?reason, %until, "waiting for a person: task parked, runner slot free");
                    return Ok(Err(Outcome::Parked));
                }
                // An answer or a decision arrived meanwhile: read it.
                Ok(_) => {}
                Err(e) if lease_lost(&e) => return Ok(Err(Outcome::LeaseLost)),
                Err(e) => return Err(e),
            }
        };
        if waited.is_ok() {
            // Claimed again after its timeout a parked task is still WAITING; otherwise a no-op.
            self.set_status(SessionStatus::Running, String::new())
                .await?;
        }
        Ok(waited)
    }

    /// The fallback of a wait that timed out, written once to the store like a person's input would be:
    /// unanswered questions fail the round (`--question-fallback fail`) or are answered [`NO_ANSWER`]
    /// (`continue`); an undecided held action is rejected.
    async fn timed_out(
        &self,
        held: Option<&HeldAction>,
        seconds: u64,
        board: &mut ufo_proto::v1::Blackboard,
    ) -> Result<Result<Option<Decision>, Outcome>, tonic::Status> {
        let mut client = self.client.clone();
        let session_id = self.session.id.clone();
        if let Some(held) = held {
            let reason = format!("no decision within {seconds}s");
            client
                .append_events(AppendEventsRequest {
                    session_id,
                    events: vec![hitl::decision_event(held, false, &reason)],
                    lease_owner: self.worker_id.clone(),
                })
                .await?;
            return Ok(Ok(Some(Decision {
                approve: false,
                reason,
            })));
        }
        if self.config.question_fallback == QuestionFallback::Fail {
            let reason = format!("no answer from a person within {seconds}s");
            return Ok(Err(Outcome::Failed(reason)));
        }
        let pending = hitl::pending_questions(board);
        let answers = vec![NO_ANSWER.to_owned(); pending.len()];
        let (entries, events) = hitl::answer_writes(board, &pending, &answers);
        client
            .append_blackboard(AppendBlackboardRequest {
                session_id,
                entries,
                events,
            })
            .await?;
        *board = self.board().await?;
        Ok(Ok(None))
    }

    async fn drive_round(
        &self,
        signals: &Signals,
        config: &TaskConfig,
        round: &Round,
        history: &mut History,
        intents: &mut Vec<Intent>,
        ahead: &mut Option<Pending>,
    ) -> Result<Outcome, tonic::Status> {
        loop {
            if let Some(stop) = self.stopped(signals) {
                return Ok(stop);
            }
            let in_round: Vec<&Step> = history
                .steps
                .iter()
                .filter(|s| s.round == round.number)
                .collect();
            let last = in_round.last().map(|s| (*s).clone());
            let round_step = in_round.len() as u32 + 1;
            let number = history.steps.len() as u64 + 1;
            let span = info_span!("step", step = number, round_step);
            let output = if intents.is_empty() {
                // A step without a control value (written by other tools) is followed by the next step.
                let next = last
                    .as_ref()
                    .and_then(|s| StepControl::of(s).ok())
                    .map(|c| c.next);
                let held = match &next {
                    Some(Next::Finish { result }) => return Ok(Outcome::Finished(result.clone())),
                    Some(Next::Fail { reason }) => return Ok(Outcome::Failed(reason.clone())),
                    Some(Next::Continue { .. }) | None => None,
                    Some(Next::Ask { .. }) => Some(None),
                    Some(Next::Hold { action }) => Some(Some(action)),
                };
                // A person who took the desktop over has it from this step boundary on (docs/live.md):
                // once the round has a step to go on from and nothing waits for a person's answer.
                if held.is_none()
                    && let Some(previous) = &last
                    && signals.taken_over()
                {
                    match self
                        .person_turn(signals, config, round, previous, history, ahead)
                        .await?
                    {
                        Some(end) => return Ok(end),
                        // Handed back: the next step is the agents', rebuilt from the store.
                        None => continue,
                    }
                }
                let mut decision = None;
                if let Some(held) = held {
                    match self
                        .wait_for_person(signals, held, last.as_ref(), &mut history.blackboard)
                        .await?
                    {
                        Ok(arrived) => decision = arrived,
                        Err(end) => return Ok(end),
                    }
                }
                if let Some(reason) = self.over_limit(config, history) {
                    return Ok(Outcome::Failed(reason));
                }
                let input = StepInput {
                    session: &self.session,
                    config,
                    round,
                    steps: &history.steps,
                    memory: &history.memory,
                    blackboard: &history.blackboard,
                    step: number,
                    round_step,
                    decision,
                    intents: Arc::new(StoreIntents {
                        client: self.client.clone(),
                        session_id: self.session.id.clone(),
                        worker_id: self.worker_id.clone(),
                        step: number,
                        round: round.number,
                        retry: self.config.store_retry(),
                        previous: ahead.as_ref().map(|p| p.ahead.clone()),
                    }),
                };
                let drain = Duration::from_millis(self.config.drain_ms);
                tokio::select! {
                    out = self.driver.next_step(input).instrument(span.clone()) => match out {
                        Ok(output) => output,
                        Err(e) => return Ok(Outcome::Failed(e.message)),
                    },
                    () = signals.stop.cancelled() => {
                        return Ok(self.stopped(signals).unwrap_or(Outcome::Cancelled));
                    }
                    () = async { self.shutdown.cancelled().await; tokio::time::sleep(drain).await } => {
                        tracing::warn!("drain deadline passed; the step is abandoned and will be observed again");
                        return Ok(Outcome::Shutdown);
                    }
                    () = tokio::time::sleep(self.remaining_time(config)) => {
                        let limit = config.limits.timeout_seconds;
                        return Ok(Outcome::Failed(format!("time limit of {limit}s reached")));
                    }
                }
            } else {
                // The previous runner stopped between acting and recording: record what it sent, outcome
                // unknown; the agents observe again in the next step.
                let dead = std::mem::take(intents);
                tracing::warn!(
                    step = number,
                    actions = dead.len(),
                    "recording a dead runner's intents"
                );
                let request = (round_step == 1).then_some(round.request.as_str());
                intent::unknown_step(&dead, last.as_ref(), request)
            };
            let recorded = self.record_or_stop(number, round, round_step, output, history, ahead);
            if let Some(end) = recorded.instrument(span).await? {
                return Ok(end);
            }
        }
    }

    /// The desktop is a person's (docs/live.md): delivers each of their inputs not delivered yet, in
    /// order, as a step of its own (its intent recorded first), until they hand the desktop back
    /// (`None`: the agents go on) or the task must stop. The lease is kept meanwhile; the task's time
    /// limit still runs.
    async fn person_turn(
        &self,
        signals: &Signals,
        config: &TaskConfig,
        round: &Round,
        previous: &Step,
        history: &mut History,
        ahead: &mut Option<Pending>,
    ) -> Result<Option<Outcome>, tonic::Status> {
        if let Some(stop) = self.finish_pending(ahead, history).await? {
            return Ok(Some(stop));
        }
        let mut delivered = super::person::delivered_upto(&history.steps);
        let mut previous = previous.clone();
        tracing::info!(by = %signals.taken_by(), "a person has the desktop; the agents wait");
        loop {
            let notified = signals.person_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(stop) = self.stopped(signals) {
                return Ok(Some(stop));
            }
            if let Some((seq, input, by)) = signals.person_input(delivered) {
                let number = history.steps.len() as u64 + 1;
                let round_step = history
                    .steps
                    .iter()
                    .filter(|s| s.round == round.number)
                    .count() as u32
                    + 1;
                let span = info_span!("person.input", step = number, seq);
                let intents = StoreIntents {
                    client: self.client.clone(),
                    session_id: self.session.id.clone(),
                    worker_id: self.worker_id.clone(),
                    step: number,
                    round: round.number,
                    retry: self.config.store_retry(),
                    previous: None,
                };
                let command = crate::dispatch::Command::act(
                    input.function(),
                    serde_json::Value::Object(super::person::arguments(seq, &input, &by)),
                );
                if let Err(e) = intents
                    .record(super::person::PERSON, std::slice::from_ref(&command))
                    .instrument(span.clone())
                    .await
                {
                    return Ok(Some(Outcome::Failed(e.to_string())));
                }
                let result = self
                    .driver
                    .person_input(config, &input)
                    .instrument(span.clone())
                    .await;
                if let Err(e) = &result {
                    tracing::info!(error = %e, "the desktop refused a person's input");
                }
                let output = super::person::step(seq, &input, &by, result, &previous);
                let recorded =
                    self.record_or_stop(number, round, round_step, output, history, ahead);
                if let Some(end) = recorded.instrument(span).await? {
                    return Ok(Some(end));
                }
                if let Some(stop) = self.finish_pending(ahead, history).await? {
                    return Ok(Some(stop));
                }
                delivered = seq;
                if let Some(last) = history.steps.last() {
                    previous = last.clone();
                }
                continue;
            }
            if !signals.taken_over() {
                tracing::info!("the person handed the desktop back; the agents go on");
                return Ok(None);
            }
            tokio::select! {
                () = notified => {}
                () = signals.stop.cancelled() => {
                    return Ok(Some(self.stopped(signals).unwrap_or(Outcome::Cancelled)));
                }
                () = self.shutdown.cancelled() => return Ok(Some(Outcome::Shutdown)),
                () = tokio::time::sleep(self.remaining_time(config)) => {
                    let limit = config.limits.timeout_seconds;
                    return Ok(Some(Outcome::Failed(format!("time limit of {limit}s reached"))));
                }
            }
        }
    }

    /// Records a step once the previous one is recorded: with `--record-ahead` a step that continues
    /// is left committing (`ahead`) while the next one is produced; any other step (one that ends the
    /// round or waits for a person) is recorded before this returns. A refusal because another worker
    /// holds the task (ALREADY_EXISTS, or a FAILED_PRECONDITION about the lease rather than about the step
    /// itself) stops this run.
    async fn record_or_stop(
        &self,
        number: u64,
        round: &Round,
        round_step: u32,
        output: crate::round::output::StepOutput,
        history: &mut History,
        ahead: &mut Option<Pending>,
    ) -> Result<Option<Outcome>, tonic::Status> {
        if let Some(stop) = self.finish_pending(ahead, history).await? {
            return Ok(Some(stop));
        }
        let goes_ahead =
            self.config.record_ahead && matches!(output.control.next, Next::Continue { .. });
        let prepared = self.prepare(number, round, round_step, output);
        let marks = self.assume(&prepared, history);
        if goes_ahead {
            let ahead_of = RecordAhead::start(number, self.recorder(), prepared);
            *ahead = Some(Pending {
                ahead: ahead_of,
                marks,
            });
            return Ok(None);
        }
        let recorded = self.recorder().commit(prepared).await;
        self.settled(recorded, marks, history).await
    }

    /// Waits for the outstanding record, if any, and brings the history in line with it.
    async fn finish_pending(
        &self,
        ahead: &mut Option<Pending>,
        history: &mut History,
    ) -> Result<Option<Outcome>, tonic::Status> {
        let Some(pending) = ahead.take() else {
            return Ok(None);
        };
        let recorded = pending.ahead.durable().await;
        self.settled(recorded, pending.marks, history).await
    }

    async fn settled(
        &self,
        recorded: Result<super::record::Committed, tonic::Status>,
        marks: super::record::Marks,
        history: &mut History,
    ) -> Result<Option<Outcome>, tonic::Status> {
        match recorded {
            Ok(recorded) => {
                self.settle(marks, recorded, history).await?;
                self.recorded_steps.store(
                    history.steps.len() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                Ok(None)
            }
            Err(status) if lease_lost(&status) => {
                tracing::warn!(error = %status, "step refused: another worker holds the task");
                Ok(Some(Outcome::LeaseLost))
            }
            Err(e) => Err(e),
        }
    }
}

/// `work`'s answer with how long it took, in milliseconds.
async fn timed<T, E>(work: impl std::future::Future<Output = Result<T, E>>) -> Result<(T, u64), E> {
    let started = std::time::Instant::now();
    let done = work.await?;
    Ok((done, ms(started.elapsed())))
}

/// A duration in whole milliseconds, for log fields.
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a refused write says another worker holds the task (the session service marks it with
/// [`ufo_common::error::Reason::LeaseLost`]).
fn lease_lost(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::AlreadyExists
        || ufo_common::error::Reason::of(status) == Some(ufo_common::error::Reason::LeaseLost)
}
