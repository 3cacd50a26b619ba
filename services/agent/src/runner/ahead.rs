//! Recording a step off the critical path (`--record-ahead`, docs/benchmark.md).
//!
//! A step's RecordStep is started on a task of its own and not awaited before the next step begins: it
//! commits while the next step observes the screen and the model thinks. At most one record is
//! outstanding, and it is awaited (span `runner.await_record`)
//! - by the next step's intent, before any of its actions reaches an executor ([`super::intent`]): nothing
//!   runs on the desktop before every earlier step is durable, and the intent follows the step in the log;
//! - by the runner before it records the next step, before any step that waits for a person (those are
//!   recorded synchronously), and whenever the round or the task ends for any reason (finished, failed,
//!   cancelled, lease lost, shutdown, a panic in the step).
//!
//! A failed record (lease lost, the store down after retries) ends the run exactly as it would have
//! synchronously, one step later: the next step's actions are refused by its intent, and the step produced
//! meanwhile is dropped (the next runner observes again).

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use tracing::Instrument as _;

use super::record::{Committed, Marks, Prepared, Recorder};

type Commit = Shared<BoxFuture<'static, Result<Committed, tonic::Status>>>;

/// A step's record in flight: cloned by whoever must wait for it.
#[derive(Clone)]
pub(crate) struct RecordAhead {
    step: u64,
    commit: Commit,
}

impl std::fmt::Debug for RecordAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordAhead")
            .field("step", &self.step)
            .field("done", &self.commit.peek().is_some())
            .finish()
    }
}

impl RecordAhead {
    /// Starts committing `prepared` (step `step`) on a task of its own, in a `runner.record` span under
    /// the current one.
    pub(super) fn start(step: u64, recorder: Recorder, prepared: Prepared) -> Self {
        let span = tracing::info_span!("runner.record", step);
        let task = tokio::spawn(recorder.commit(prepared).instrument(span));
        let commit = task
            .map(|joined| {
                joined.unwrap_or_else(|e| {
                    Err(tonic::Status::internal(format!(
                        "recording the step stopped: {e}"
                    )))
                })
            })
            .boxed()
            .shared();
        Self { step, commit }
    }

    /// The step being recorded.
    pub(crate) fn step(&self) -> u64 {
        self.step
    }

    /// Waits until the step is durable (or its record failed).
    pub(crate) async fn durable(&self) -> Result<Committed, tonic::Status> {
        let span = tracing::info_span!("runner.await_record", step = self.step);
        self.commit.clone().instrument(span).await
    }
}

/// The outstanding record of a run, with where the history stood before the step was assumed into it.
pub(super) struct Pending {
    pub(super) ahead: RecordAhead,
    pub(super) marks: Marks,
}
