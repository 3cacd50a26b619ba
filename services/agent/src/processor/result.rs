//! Results of phases and runs (seed 004, `ProcessingResult`: success, data, error, phase, execution time).

use std::time::Duration;

use super::context::Values;
use super::error::{ProcessingError, RecordedFailure};
use super::phase::ProcessingPhase;

/// What one phase did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseResult {
    /// The phase.
    pub phase: ProcessingPhase,
    /// The strategy registered for it.
    pub strategy: String,
    /// Whether the strategy succeeded.
    pub success: bool,
    /// The failure of a non-fail-fast strategy (the run went on), or of the fail-fast one that stopped it.
    pub error: Option<String>,
    /// Wall time of the strategy.
    pub execution_time: Duration,
    /// Context fields the phase wrote.
    pub outputs: Vec<&'static str>,
    /// Failures of composition members that did not stop the phase.
    pub tolerated: Vec<RecordedFailure>,
}

/// What a whole run did: every phase's result and the total time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessingResult {
    /// True when every phase that ran succeeded.
    pub success: bool,
    /// Phase results in execution order (skipped phases are absent).
    pub phases: Vec<PhaseResult>,
    /// Why the run stopped, when it did.
    pub error: Option<String>,
    /// Wall time of the run.
    pub execution_time: Duration,
}

impl ProcessingResult {
    /// The result of `phase`, if it ran.
    pub fn phase(&self, phase: ProcessingPhase) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.phase == phase)
    }
}

/// A successful run: the processor's own output type and the run's result.
#[derive(Debug)]
pub struct ProcessOutcome<O> {
    /// What the processor's `finalize` made of the run's local data.
    pub output: O,
    /// Phase results and timings.
    pub result: ProcessingResult,
}

/// A run stopped by an error, with everything gathered until then (so the step can still be recorded).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ProcessFailure {
    /// Why it stopped.
    #[source]
    pub error: ProcessingError,
    /// Phase results up to and including the failing phase.
    pub result: ProcessingResult,
    /// The local data written before the failure.
    pub local: Values,
}
