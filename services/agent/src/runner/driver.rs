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

/// Why a person's input did not reach the task's desktop; recorded with the person's step.
#[derive(Debug, thiserror::Error)]
pub enum PersonInputError {
    /// A driver without a desktop.
    #[error("this runner cannot deliver a person's input")]
    Unsupported,
    /// A runner built without executors.
    #[error("this runner has no executors to deliver a person's input to")]
    NoExecutors,
    /// The task's executor is refused by the registry.
    #[error("cannot use the executor: {0}")]
    Refused(#[from] crate::dispatch::registry::ExecutorRefusal),
    /// No connection to the executor could be made.
    #[error("cannot reach the executor: {0}")]
    Unreachable(#[from] crate::dispatch::DispatchError),
    /// The executor refused the input; its own words.
    #[error("{}", .0.message())]
    Executor(tonic::Status),
}

/// Why the desktop's picture after a task's last step could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum DesktopPictureError {
    /// The task's executor cannot be used.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The command did not reach the executor.
    #[error(transparent)]
    Dispatch(#[from] crate::dispatch::DispatchError),
    /// The executor ran the capture and it failed; its own words.
    #[error("{0}")]
    Failed(String),
}

/// Produces steps. Implementations must be cancel-safe: the runner drops the future when the task is
/// cancelled, its lease is lost, or shutdown's drain deadline passes, and nothing is recorded then.
#[async_trait::async_trait]
pub trait TaskDriver: Send + Sync {
    /// Produces the next step of `input.round`. A round that ends without a step (a limit, an unanswered
    /// question) is an error with the reason.
    async fn next_step(&self, input: StepInput<'_>) -> Result<StepOutput, DriverError>;

    /// The task's run on this runner ended (finished, failed, cancelled, parked, released, its lease
    /// lost): what the driver kept for it between steps goes (its MCP servers on the desktop are
    /// stopped). A later run of the task rebuilds it.
    fn task_ended(&self, session_id: &str) {
        let _ = session_id;
    }

    /// Delivers a person's input to the task's desktop during a takeover (docs/live.md); the error is
    /// the executor's refusal, recorded with the person's step. A driver without a desktop refuses.
    async fn person_input(
        &self,
        config: &TaskConfig,
        input: &super::person::PersonInput,
    ) -> Result<(), PersonInputError> {
        let _ = (config, input);
        Err(PersonInputError::Unsupported)
    }

    /// The model that writes an ended task's experience summary (`--experience-model-summary`): the
    /// task's HostAgent model. `None` from a driver without models.
    fn summary_model(
        &self,
        config: &TaskConfig,
    ) -> Option<std::sync::Arc<dyn crate::llm::ChatModel>> {
        let _ = config;
        None
    }

    /// The whole desktop of the task's executor as it is now: the picture after a task's last step
    /// (`--after-picture-timeout-ms`). `None` from a driver without a desktop.
    async fn desktop_picture(
        &self,
        config: &TaskConfig,
    ) -> Result<Option<crate::vision::screenshot::Screenshot>, DesktopPictureError> {
        let _ = config;
        Ok(None)
    }
}
