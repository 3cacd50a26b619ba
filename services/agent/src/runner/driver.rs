//! The seam between the runner and the agents: a [`TaskDriver`] produces one step at a time from what the
//! store holds. The runner owns durability (recording, leases, limits, cancel, waiting for people); the
//! driver owns judgment (observe, ask the model, act). Because the driver is handed only recorded state,
//! a step interrupted by a crash is simply produced again by the next runner: it observes anew instead of
//! replaying an action whose result was never recorded.

use ufo_proto::v1::{Blackboard, MemoryItem, Round, Session, Step};

use crate::round::Decision;
use crate::round::output::StepOutput;
use crate::runner::task_config::TaskConfig;

/// What the driver sees when asked for the next step.
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    /// The task's session.
    pub session: &'a Session,
    /// Its resolved configuration.
    pub config: &'a TaskConfig,
    /// The round being run.
    pub round: &'a Round,
    /// Every recorded step of the session (all rounds), in order.
    pub steps: &'a [Step],
    /// The session's memory items, in step order.
    pub memory: &'a [MemoryItem],
    /// The session's blackboard (questions with their answers, requests, trajectories, images).
    pub blackboard: &'a Blackboard,
    /// The global number the produced step will have.
    pub step: u64,
    /// Its number within the round.
    pub round_step: u32,
    /// When the previous step held an action: the person's decision (approved: run it now), with their
    /// reason.
    pub decision: Option<Decision>,
    /// Where the step's intents go: every batch holding an action is recorded here before it is sent to
    /// the executor (see [`super::intent`]).
    pub intents: std::sync::Arc<super::intent::StoreIntents>,
}

/// Why the driver could not produce a step. The runner fails the task with the message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DriverError {
    /// What went wrong, for the task's result.
    pub message: String,
}

impl DriverError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Produces steps. Implementations must be cancel-safe: the runner drops the future when the task is
/// cancelled, its lease is lost, or shutdown's drain deadline passes, and nothing is recorded then.
#[async_trait::async_trait]
pub trait TaskDriver: Send + Sync {
    /// Produces the next step of `input.round`. A round that ends without a step (a limit, an unanswered
    /// question) is an error with the reason.
    async fn next_step(&self, input: StepInput<'_>) -> Result<StepOutput, DriverError>;

    /// Delivers a person's input to the task's desktop during a takeover (docs/live.md); the error is
    /// the executor's refusal, recorded with the person's step. A driver without a desktop refuses.
    async fn person_input(
        &self,
        config: &TaskConfig,
        input: &super::person::PersonInput,
    ) -> Result<(), String> {
        let _ = (config, input);
        Err("this runner cannot deliver a person's input".to_owned())
    }

    /// The whole desktop of the task's executor as it is now: the picture after a task's last step
    /// (`--after-picture-timeout-ms`). `None` from a driver without a desktop.
    async fn desktop_picture(
        &self,
        config: &TaskConfig,
    ) -> Result<Option<crate::vision::screenshot::Screenshot>, String> {
        let _ = config;
        Ok(None)
    }
}
