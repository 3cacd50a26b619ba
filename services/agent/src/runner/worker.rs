//! The claim loop: while slots are free and the process is not shutting down, claim the oldest claimable
//! task (queued, or running with an expired lease) and run it. On shutdown it stops claiming and waits for
//! the running tasks, which checkpoint and release themselves.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use ufo_proto::v1::ClaimTaskRequest;

use super::driver::TaskDriver;
use super::experience::ExperienceRecorder;
use super::task::{Outcome, TaskRun};
use crate::config::RunnerConfig;
use crate::store::client::SessionClient;

/// Runs tasks claimed from the session store.
pub struct Runner {
    config: RunnerConfig,
    worker_id: String,
    client: SessionClient,
    watch_client: SessionClient,
    driver: Arc<dyn TaskDriver>,
    experiences: Option<ExperienceRecorder>,
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
        }
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

    /// Claims and runs tasks until `shutdown` fires, then waits for the running ones to checkpoint.
    pub async fn run(self, shutdown: CancellationToken) {
        tracing::info!(worker_id = %self.worker_id, slots = self.config.slots, "task runner started");
        let mut running: JoinSet<Outcome> = JoinSet::new();
        let idle = Duration::from_millis(self.config.claim_interval_ms);
        while !shutdown.is_cancelled() {
            let mut claimed_any = false;
            while running.len() < self.config.slots && !shutdown.is_cancelled() {
                match self.claim().await {
                    Ok(Some(session)) => {
                        claimed_any = true;
                        tracing::info!(task_id = %session.id, "task claimed");
                        running.spawn(
                            TaskRun {
                                client: self.client.clone(),
                                watch_client: self.watch_client.clone(),
                                worker_id: self.worker_id.clone(),
                                config: self.config.clone(),
                                driver: self.driver.clone(),
                                experiences: self.experiences.clone(),
                                session,
                                shutdown: shutdown.clone(),
                            }
                            .run(),
                        );
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::warn!(error = %status, "cannot claim a task");
                        break;
                    }
                }
            }
            if claimed_any && running.len() < self.config.slots {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
                () = tokio::time::sleep(idle) => {}
            }
        }
        tracing::info!(running = running.len(), "task runner draining");
        while running.join_next().await.is_some() {}
        tracing::info!("task runner stopped");
    }

    async fn claim(&self) -> Result<Option<ufo_proto::v1::Session>, tonic::Status> {
        let span = tracing::info_span!("claim_task", worker_id = %self.worker_id);
        let response = tracing::Instrument::instrument(
            self.client.clone().claim_task(ClaimTaskRequest {
                worker_id: self.worker_id.clone(),
                lease_ms: self.config.lease_ms,
            }),
            span,
        )
        .await?;
        Ok(response.into_inner().session)
    }
}
