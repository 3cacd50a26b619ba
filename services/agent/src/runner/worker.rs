//! The claim loop: while slots are free and the process is not shutting down, claim the oldest claimable
//! task (queued, or running with an expired lease) and run it. On shutdown it stops claiming and waits for
//! the running tasks, which checkpoint and release themselves.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, OptionFuture};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use ufo_proto::v1::ClaimTaskRequest;

use super::desktop::Claimed;
use super::driver::TaskDriver;
use super::experience::ExperienceRecorder;
use super::task::{Outcome, TaskRun};
use crate::config::RunnerConfig;
use crate::store::client::SessionClient;

/// What a claim found: a task with the desktop checked out to it, if any.
type ClaimResult = Result<Option<Claimed>, tonic::Status>;

/// Runs tasks claimed from the session store.
pub struct Runner {
    config: RunnerConfig,
    worker_id: String,
    client: SessionClient,
    watch_client: SessionClient,
    driver: Arc<dyn TaskDriver>,
    experiences: Option<ExperienceRecorder>,
    /// Declared executors to register into the desktop pool before the first claim.
    desktops: Vec<(String, std::collections::BTreeMap<String, String>)>,
    /// Resets desktops between tasks.
    resetter: Option<super::desktop::Resetter>,
    /// The desktops this replica can reach, asked at each claim; `None`: any.
    reachable: Option<super::desktop::Reachable>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("worker_id", &self.worker_id)
            .field("slots", &self.config.slots)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner using `client` for unary calls and `watch_client` for event streams.
    pub fn new(
        config: RunnerConfig,
        client: SessionClient,
        watch_client: SessionClient,
        driver: Arc<dyn TaskDriver>,
    ) -> Self {
        let worker_id = config.worker_id.clone().unwrap_or_else(|| {
            format!(
                "agent-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        });
        Self {
            config,
            worker_id,
            client,
            watch_client,
            driver,
            experiences: None,
            desktops: Vec::new(),
            resetter: None,
            reachable: None,
        }
    }

    /// The same runner taking only desktops `reachable` names (its declared executors and the dial-out
    /// executors connected to this replica).
    pub fn with_reachable(mut self, reachable: super::desktop::Reachable) -> Self {
        self.reachable = Some(reachable);
        self
    }

    /// The same runner resetting each task's desktop through `resetter` at its check-in.
    pub fn with_resetter(mut self, resetter: super::desktop::Resetter) -> Self {
        self.resetter = Some(resetter);
        self
    }

    /// The same runner registering these declared executors as desktops of the pool (issue 36) before
    /// it claims anything.
    pub fn with_desktops(
        mut self,
        desktops: Vec<(String, std::collections::BTreeMap<String, String>)>,
    ) -> Self {
        self.desktops = desktops;
        self
    }

    /// The same runner storing each finished or failed task as an experience (`--knowledge`).
    pub fn with_experiences(mut self, recorder: ExperienceRecorder) -> Self {
        self.experiences = Some(recorder);
        self
    }

    /// This runner's lease owner id.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// A run of the task `session` claimed with `desktop`.
    fn task_run(
        &self,
        claimed: Claimed,
        shutdown: &CancellationToken,
        handover: &super::desktop::Handover,
    ) -> TaskRun {
        let Claimed {
            session,
            desktop,
            start,
            at,
        } = claimed;
        TaskRun {
            client: self.client.clone(),
            watch_client: self.watch_client.clone(),
            worker_id: self.worker_id.clone(),
            config: self.config.clone(),
            driver: self.driver.clone(),
            experiences: self.experiences.clone(),
            session,
            shutdown: shutdown.clone(),
            resetter: self.resetter.clone(),
            reset_first: desktop.is_some_and(|d| d.needs_reset),
            claimed_at: at,
            start,
            recorded_steps: Default::default(),
            handover: (!self.config.no_desktop_handover).then(|| handover.clone()),
        }
    }

    /// Claims and runs tasks until `shutdown` fires, then waits for the running ones to checkpoint.
    ///
    /// Besides its claim every `--claim-interval-ms` while idle, the loop claims when a task of its own
    /// ends, when the session store signals that a desktop freed up anywhere (`WatchPool`), and it runs
    /// the tasks its tasks' check-ins claimed for their desktops (the hand-over). One claim is under
    /// way at a time, polled beside those events (issue 36): a task handed a desktop at a check-in
    /// starts at once instead of waiting behind a claim that, with every free slot's desktop busy,
    /// finds nothing.
    pub async fn run(self, shutdown: CancellationToken) {
        tracing::info!(worker_id = %self.worker_id, slots = self.config.slots, "task runner started");
        let mut running: JoinSet<Outcome> = JoinSet::new();
        let idle = Duration::from_millis(self.config.claim_interval_ms);
        let mut registered = self.desktops.is_empty();
        let (sender, mut handed_over) = tokio::sync::mpsc::unbounded_channel();
        let handover = super::desktop::Handover {
            sender,
            reachable: self.reachable.clone(),
            shutdown: shutdown.clone(),
        };
        let pool_changed = Arc::new(tokio::sync::Notify::new());
        let pool_watch = tokio::spawn(super::desktop::watch_pool(
            self.watch_client.clone(),
            pool_changed.clone(),
            shutdown.clone(),
        ));
        let mut claiming: Option<BoxFuture<'_, ClaimResult>> = None;
        // Something happened that a claim may find work for: the start, a task's end, a desktop freed
        // anywhere, the interval passed, or the last claim found a task (there may be more).
        let mut wanted = true;
        // When an idle runner asks again (and a failed registration is retried).
        let mut next_try = tokio::time::Instant::now();
        while !shutdown.is_cancelled() {
            if !registered {
                match super::desktop::register_declared(&self.client, &self.desktops).await {
                    Ok(()) => registered = true,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot register the declared executors as desktops; retrying");
                        next_try = tokio::time::Instant::now() + idle;
                    }
                }
            }
            if claiming.is_none() && wanted && registered && running.len() < self.config.slots {
                wanted = false;
                claiming = Some(self.claim().boxed());
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => {}
                // The task whose check-in claimed it holds the slot until it ends, moments later.
                Some(claimed) = handed_over.recv() => {
                    tracing::info!(task_id = %claimed.session.id, desktop = %claimed.session.desktop, "task claimed at its desktop's check-in");
                    running.spawn(self.task_run(claimed, &shutdown, &handover).run());
                }
                Some(claimed) = OptionFuture::from(claiming.as_mut()), if claiming.is_some() => {
                    claiming = None;
                    match claimed {
                        Ok(Some(claimed)) => {
                            tracing::info!(task_id = %claimed.session.id, "task claimed");
                            running.spawn(self.task_run(claimed, &shutdown, &handover).run());
                            wanted = true;
                        }
                        Ok(None) => next_try = tokio::time::Instant::now() + idle,
                        Err(status) => {
                            tracing::warn!(error = %status, "cannot claim a task");
                            next_try = tokio::time::Instant::now() + idle;
                        }
                    }
                }
                Some(_) = running.join_next(), if !running.is_empty() => wanted = true,
                () = pool_changed.notified(), if running.len() < self.config.slots => wanted = true,
                () = tokio::time::sleep_until(next_try), if claiming.is_none() && !(wanted && registered) => {
                    wanted = true;
                }
            }
        }
        tracing::info!(running = running.len(), "task runner draining");
        pool_watch.abort();
        // A claim under way may have checked a task out to this runner: it runs to its checkpoint like
        // the others (it sees the shutdown and goes back to the queue with its desktop).
        if let Some(claim) = claiming.take()
            && let Ok(Some(claimed)) = claim.await
        {
            running.spawn(self.task_run(claimed, &shutdown, &handover).run());
        }
        // A task claimed at a check-in while shutting down runs to its checkpoint like the others (it
        // sees the shutdown and goes back to the queue with its desktop).
        loop {
            tokio::select! {
                Some(claimed) = handed_over.recv() => {
                    running.spawn(self.task_run(claimed, &shutdown, &handover).run());
                }
                joined = running.join_next() => if joined.is_none() { break },
            }
        }
        handed_over.close();
        while let Ok(claimed) = handed_over.try_recv() {
            running.spawn(self.task_run(claimed, &shutdown, &handover).run());
        }
        while running.join_next().await.is_some() {}
        tracing::info!("task runner stopped");
    }

    async fn claim(&self) -> ClaimResult {
        let span = tracing::info_span!("claim_task", worker_id = %self.worker_id);
        let response = tracing::Instrument::instrument(
            self.client.clone().claim_task(ClaimTaskRequest {
                worker_id: self.worker_id.clone(),
                lease_ms: self.config.lease_ms,
                reachable_desktops: self.reachable.as_ref().map(|r| r()).unwrap_or_default(),
                only_reachable: self.reachable.is_some(),
                start: true,
            }),
            span,
        )
        .await?
        .into_inner();
        Ok(response.session.map(|session| Claimed {
            session,
            desktop: response.desktop,
            start: response.start,
            at: std::time::Instant::now(),
        }))
    }
}
