//! Runs one claimed task: its pending rounds, one recorded step at a time, under its lease. Each step is
//! committed (RecordStep, fenced by the lease owner) before the next one starts; everything the next step
//! needs is read back from the store, so a task claimed after a crash continues where the last recorded
//! step left it (a half-done step left nothing behind and is produced again, observing first).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info_span};
use ufo_proto::v1::{
    AppendBlackboardRequest, AppendEventsRequest, BeginRoundRequest, EventKind, FinishRoundRequest,
    GetBlackboardRequest, GetMemoryRequest, ListRoundsRequest, ListStepsRequest,
    ReleaseTaskRequest, Round, RoundStatus, Session, SessionStatus, SetSessionStatusRequest, Step,
};

use super::driver::{StepInput, TaskDriver};
use super::hitl;
use super::intent::{self, Intent, StoreIntents};
use super::retry;
use super::task_config::TaskConfig;
use super::watch::{Signals, StopReason, follow_events, keep_lease};
use crate::api::session::SessionClient;
use crate::config::{QuestionFallback, RunnerConfig};
use crate::control::{HeldAction, Next, StepControl};
use crate::round::Decision;

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
}

/// What a task waits for from a person.
#[derive(Debug, Clone, Copy)]
enum WaitFor<'a> {
    /// Answers to every pending question.
    Answers,
    /// A decision on this held action.
    Decision(&'a HeldAction),
}

enum RoundEnd {
    Finished(String),
    Failed(String),
    Stop(Outcome),
}

/// A store failure inside the run loop.
#[derive(Debug, thiserror::Error)]
#[error("session store call failed")]
pub(super) struct StoreError(#[from] tonic::Status);

/// One claimed task.
pub struct TaskRun {
    pub(crate) client: SessionClient,
    pub(crate) watch_client: SessionClient,
    pub(crate) worker_id: String,
    pub(crate) config: RunnerConfig,
    pub(crate) driver: Arc<dyn TaskDriver>,
    pub(crate) session: Session,
    pub(crate) shutdown: CancellationToken,
}

/// Everything recorded so far, read back from the store.
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
        let span = info_span!("task", task_id = %id, worker_id = %self.worker_id);
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
            let driven = std::panic::AssertUnwindSafe(self.drive(&signals))
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
                });
            let outcome = match driven {
                Ok(outcome) => outcome,
                // Retried already (bounded): the task goes back to the queue, and fails once it was released
                // `--max-releases` times without progress.
                Err(e) if retry::transient(e.0.code()) => {
                    tracing::error!(error = %e.0, "store failure; releasing the task");
                    Outcome::Shutdown
                }
                // A deterministic refusal does not pass by claiming the task again.
                Err(e) => {
                    tracing::error!(error = %e.0, "the session store refused a write; failing the task");
                    Outcome::Failed(format!(
                        "the session store refused to record the task's progress ({:?}): {}",
                        e.0.code(),
                        e.0.message()
                    ))
                }
            };
            let reported = self.report(&outcome).await;
            if let Err(e) = reported {
                tracing::error!(error = %e.0, ?outcome, "cannot report the task's end");
            }
            done.cancel();
            let _ = tokio::join!(lease, follow);
            tracing::info!(?outcome, "task run ended");
            outcome
        }
        .instrument(span)
        .await
    }

    async fn report(&self, outcome: &Outcome) -> Result<(), StoreError> {
        let mut client = self.client.clone();
        let status = match outcome {
            Outcome::Finished(r) => Some((SessionStatus::Finished, r.clone())),
            Outcome::Failed(r) => Some((SessionStatus::Failed, r.clone())),
            Outcome::Cancelled => Some((SessionStatus::Cancelled, "cancelled".to_owned())),
            Outcome::LeaseLost => None,
            Outcome::Shutdown => {
                client
                    .release_task(ReleaseTaskRequest {
                        session_id: self.session.id.clone(),
                        worker_id: self.worker_id.clone(),
                        requeue: true,
                    })
                    .await?;
                None
            }
        };
        if let Some((status, mut result)) = status {
            super::sanitise::text(&mut result);
            client
                .set_session_status(SetSessionStatusRequest {
                    session_id: self.session.id.clone(),
                    status: status as i32,
                    result,
                    lease_owner: self.worker_id.clone(),
                })
                .await?;
        }
        Ok(())
    }

    async fn load(&self) -> Result<History, StoreError> {
        let mut client = self.client.clone();
        let id = self.session.id.clone();
        let mut steps: Vec<Step> = Vec::new();
        loop {
            let page = client
                .list_steps(ListStepsRequest {
                    session_id: id.clone(),
                    from_step: steps.len() as u64 + 1,
                    limit: 0,
                })
                .await?
                .into_inner()
                .steps;
            if page.is_empty() {
                break;
            }
            steps.extend(page);
        }
        let memory = client
            .get_memory(GetMemoryRequest {
                session_id: id.clone(),
                agent_name: String::new(),
            })
            .await?
            .into_inner()
            .items;
        let blackboard = client
            .get_blackboard(GetBlackboardRequest { session_id: id })
            .await?
            .into_inner();
        Ok(History {
            steps,
            memory,
            blackboard,
        })
    }

    async fn drive(&self, signals: &Signals) -> Result<Outcome, StoreError> {
        let config = match TaskConfig::from_struct(self.session.config.clone()) {
            Ok(c) => c,
            Err(e) => return Ok(Outcome::Failed(e.to_string())),
        };
        let mut history = self.load().await?;
        // What happened since the last recorded step: releases without progress, a dead runner's intents.
        let last_step = history.steps.len() as u64;
        let tail = intent::since_last_step(&self.client, &self.session.id, last_step).await?;
        let releases = tail
            .iter()
            .filter(|e| e.kind == EventKind::TaskReleased as i32)
            .count();
        if releases >= self.config.max_releases as usize {
            return Ok(Outcome::Failed(format!(
                "the task was released {releases} times without recording a step (see the runner's log \
                 for the store errors); giving up instead of claiming it again"
            )));
        }
        let mut intents = intent::intents(&tail, last_step + 1);
        let mut client = self.client.clone();
        let mut last_result = String::new();
        loop {
            let rounds = client
                .list_rounds(ListRoundsRequest {
                    session_id: self.session.id.clone(),
                })
                .await?
                .into_inner()
                .rounds;
            let open = rounds.into_iter().find(|r| {
                matches!(
                    RoundStatus::try_from(r.status),
                    Ok(RoundStatus::Pending | RoundStatus::Running)
                )
            });
            let Some(round) = open else {
                return Ok(Outcome::Finished(last_result));
            };
            let round = client
                .begin_round(BeginRoundRequest {
                    session_id: self.session.id.clone(),
                    number: round.number,
                    lease_owner: self.worker_id.clone(),
                })
                .await?
                .into_inner();
            // Within a round the board is kept current from what RecordStep returns (and re-read when
            // answers are waited for); each round starts from the stored board.
            history.blackboard = client
                .get_blackboard(GetBlackboardRequest {
                    session_id: self.session.id.clone(),
                })
                .await?
                .into_inner();
            let span = info_span!("round", round = round.number);
            let end = self
                .drive_round(signals, &config, &round, &mut history, &mut intents)
                .instrument(span)
                .await?;
            let (status, result) = match &end {
                RoundEnd::Finished(r) => (RoundStatus::Finished, r.clone()),
                RoundEnd::Failed(r) => (RoundStatus::Failed, r.clone()),
                RoundEnd::Stop(Outcome::Cancelled) => (RoundStatus::Cancelled, "cancelled".into()),
                RoundEnd::Stop(other) => return Ok(other.clone()),
            };
            let mut result = result;
            super::sanitise::text(&mut result);
            client
                .finish_round(FinishRoundRequest {
                    session_id: self.session.id.clone(),
                    number: round.number,
                    status: status as i32,
                    result: result.clone(),
                    lease_owner: self.worker_id.clone(),
                })
                .await?;
            match end {
                RoundEnd::Finished(r) => last_result = r,
                RoundEnd::Failed(r) => return Ok(Outcome::Failed(r)),
                RoundEnd::Stop(o) => return Ok(o),
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

    async fn set_status(&self, status: SessionStatus) -> Result<(), StoreError> {
        self.client
            .clone()
            .set_session_status(SetSessionStatusRequest {
                session_id: self.session.id.clone(),
                status: status as i32,
                result: String::new(),
                lease_owner: self.worker_id.clone(),
            })
            .await?;
        Ok(())
    }

    /// Waits until what `wait` names has arrived (re-checked on every answer or decision), the task must
    /// stop, or its timeout passes (then the documented fallback applies). Returns the decision when
    /// waiting for one.
    async fn wait_for_person(
        &self,
        signals: &Signals,
        wait: WaitFor<'_>,
        board: &mut ufo_proto::v1::Blackboard,
    ) -> Result<Result<Option<Decision>, RoundEnd>, StoreError> {
        let seconds = match wait {
            WaitFor::Answers => self.config.question_timeout_seconds,
            WaitFor::Decision(_) => self.config.confirm_timeout_seconds,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        let mut waiting = false;
        loop {
            let notified = signals.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(arrived) = self.arrived(signals, wait, board).await? {
                if waiting {
                    self.set_status(SessionStatus::Running).await?;
                }
                return Ok(Ok(arrived));
            }
            if let Some(stop) = self.stopped(signals) {
                return Ok(Err(RoundEnd::Stop(stop)));
            }
            if !waiting {
                self.set_status(SessionStatus::Waiting).await?;
                waiting = true;
            }
            tokio::select! {
                () = &mut notified => {}
                () = signals.stop.cancelled() => {}
                () = self.shutdown.cancelled() => {}
                () = tokio::time::sleep_until(deadline) => {
                    let fallback = self.timed_out(wait, seconds, board).await?;
                    if waiting && fallback.is_ok() {
                        self.set_status(SessionStatus::Running).await?;
                    }
                    return Ok(fallback);
                }
            }
        }
    }

    /// The fallback of a wait that timed out, written once to the store like a person's input would be:
    /// unanswered questions fail the round (`--question-fallback fail`) or are answered [`NO_ANSWER`]
    /// (`continue`); an undecided held action is rejected.
    async fn timed_out(
        &self,
        wait: WaitFor<'_>,
        seconds: u64,
        board: &mut ufo_proto::v1::Blackboard,
    ) -> Result<Result<Option<Decision>, RoundEnd>, StoreError> {
        let mut client = self.client.clone();
        let session_id = self.session.id.clone();
        match wait {
            WaitFor::Answers if self.config.question_fallback == QuestionFallback::Fail => Ok(Err(
                RoundEnd::Failed(format!("no answer from a person within {seconds}s")),
            )),
            WaitFor::Answers => {
                let pending = hitl::pending_questions(board);
                let answers = vec![NO_ANSWER.to_owned(); pending.len()];
                let (entries, events) = hitl::answer_writes(board, &pending, &answers);
                client
                    .append_blackboard(AppendBlackboardRequest {
                        session_id: session_id.clone(),
                        entries,
                        events,
                    })
                    .await?;
                *board = client
                    .get_blackboard(GetBlackboardRequest { session_id })
                    .await?
                    .into_inner();
                Ok(Ok(None))
            }
            WaitFor::Decision(held) => {
                let reason = format!("no decision within {seconds}s");
                client
                    .append_events(AppendEventsRequest {
                        session_id,
                        events: vec![hitl::decision_event(held, false, &reason)],
                        lease_owner: self.worker_id.clone(),
                    })
                    .await?;
                Ok(Ok(Some(Decision {
                    approve: false,
                    reason,
                })))
            }
        }
    }

    /// What the task waits for, once it has arrived (re-reads the blackboard for answers): `Some(None)` for
    /// answers, `Some(Some(decision))` for a decision.
    async fn arrived(
        &self,
        signals: &Signals,
        wait: WaitFor<'_>,
        board: &mut ufo_proto::v1::Blackboard,
    ) -> Result<Option<Option<Decision>>, StoreError> {
        Ok(match wait {
            WaitFor::Answers => {
                *board = self
                    .client
                    .clone()
                    .get_blackboard(GetBlackboardRequest {
                        session_id: self.session.id.clone(),
                    })
                    .await?
                    .into_inner();
                hitl::pending_questions(board).is_empty().then_some(None)
            }
            WaitFor::Decision(held) => signals.decision(held.step).map(|d| {
                Some(Decision {
                    approve: d.approve,
                    reason: d.reason,
                })
            }),
        })
    }

    async fn drive_round(
        &self,
        signals: &Signals,
        config: &TaskConfig,
        round: &Round,
        history: &mut History,
        intents: &mut Vec<Intent>,
    ) -> Result<RoundEnd, StoreError> {
        loop {
            if let Some(stop) = self.stopped(signals) {
                return Ok(RoundEnd::Stop(stop));
            }
            let last = history
                .steps
                .iter()
                .rev()
                .find(|s| s.round == round.number)
                .cloned();
            let round_step = history
                .steps
                .iter()
                .filter(|s| s.round == round.number)
                .count() as u32
                + 1;
            let mut decision = None;
            let number = history.steps.len() as u64 + 1;
            if !intents.is_empty() {
                // The previous runner stopped between acting and recording: record what it sent, outcome
                // unknown; the agents observe again in the next step.
                let dead = std::mem::take(intents);
                tracing::warn!(
                    step = number,
                    actions = dead.len(),
                    "recording a dead runner's intents"
                );
                let request = (round_step == 1).then_some(round.request.as_str());
                let output = intent::unknown_step(&dead, last.as_ref(), request);
                if let Some(end) = self
                    .record_or_stop(number, round, round_step, output, history)
                    .await?
                {
                    return Ok(end);
                }
                continue;
            }
            // A step without a control value (written by other tools) is followed by the next step.
            let next = last
                .as_ref()
                .and_then(|s| StepControl::of(s).ok())
                .map(|c| c.next);
            match &next {
                Some(Next::Finish { result }) => return Ok(RoundEnd::Finished(result.clone())),
                Some(Next::Fail { reason }) => return Ok(RoundEnd::Failed(reason.clone())),
                Some(Next::Ask { .. }) => {
                    let waited = self
                        .wait_for_person(signals, WaitFor::Answers, &mut history.blackboard)
                        .await?;
                    if let Err(end) = waited {
                        return Ok(end);
                    }
                }
                Some(Next::Hold { action }) => {
                    let waited = self
                        .wait_for_person(
                            signals,
                            WaitFor::Decision(action),
                            &mut history.blackboard,
                        )
                        .await?;
                    decision = match waited {
                        Ok(decision) => decision,
                        Err(end) => return Ok(end),
                    };
                }
                Some(Next::Continue { .. }) | None => {}
            }
            if let Some(reason) = self.over_limit(config, history) {
                return Ok(RoundEnd::Failed(reason));
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
                }),
            };
            let span = info_span!("step", step = number, round_step);
            let drain = Duration::from_millis(self.config.drain_ms);
            let produced = tokio::select! {
                out = self.driver.next_step(input).instrument(span.clone()) => out,
                () = signals.stop.cancelled() => {
                    return Ok(RoundEnd::Stop(self.stopped(signals).unwrap_or(Outcome::Cancelled)));
                }
                () = async { self.shutdown.cancelled().await; tokio::time::sleep(drain).await } => {
                    tracing::warn!("drain deadline passed; the step is abandoned and will be observed again");
                    return Ok(RoundEnd::Stop(Outcome::Shutdown));
                }
                () = tokio::time::sleep(self.remaining_time(config)) => {
                    return Ok(RoundEnd::Failed(format!(
                        "time limit of {}s reached",
                        config.limits.timeout_seconds
                    )));
                }
            };
            let output = match produced {
                Ok(super::driver::Produced::Step(o)) => *o,
                Ok(super::driver::Produced::Ended(Next::Finish { result })) => {
                    return Ok(RoundEnd::Finished(result));
                }
                Ok(super::driver::Produced::Ended(Next::Fail { reason })) => {
                    return Ok(RoundEnd::Failed(reason));
                }
                Ok(super::driver::Produced::Ended(other)) => {
                    return Ok(RoundEnd::Failed(format!(
                        "the agents stopped without a step ({other:?})"
                    )));
                }
                Err(e) => return Ok(RoundEnd::Failed(e.message)),
            };
            if let Some(end) = self
                .record_or_stop(number, round, round_step, output, history)
                .instrument(span)
                .await?
            {
                return Ok(end);
            }
        }
    }

    /// Records a step; a refusal because another worker holds the task stops this run.
    async fn record_or_stop(
        &self,
        number: u64,
        round: &Round,
        round_step: u32,
        output: super::driver::StepOutput,
        history: &mut History,
    ) -> Result<Option<RoundEnd>, StoreError> {
        match self
            .record(number, round, round_step, output, history)
            .await
        {
            Ok(()) => Ok(None),
            Err(StoreError(status))
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::AlreadyExists
                ) && self.lease_lost(&status) =>
            {
                tracing::warn!(error = %status, "step refused: another worker holds the task");
                Ok(Some(RoundEnd::Stop(Outcome::LeaseLost)))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a FAILED_PRECONDITION / ALREADY_EXISTS refusal is about the lease (another worker holds
    /// the task) rather than about the step itself.
    fn lease_lost(&self, status: &tonic::Status) -> bool {
        status.code() == tonic::Code::AlreadyExists || status.message().contains("lease")
    }
}
