//! Errors of the processor framework (seed 004, `ProcessingException`; seed 003, "Common Pitfalls").

use super::phase::ProcessingPhase;
use super::strategy::StrategyError;

/// Why a processor could not be built: its strategy chain is unsatisfiable or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A required input is provided by no earlier phase, earlier member or declared input.
    #[error(
        "strategy '{strategy}' in phase {phase} requires '{field}', which no earlier phase, earlier member \
         or declared input provides"
    )]
    UnsatisfiedDependency {
        /// The strategy (the member, inside a composition) that declared the input.
        strategy: String,
        /// The phase it runs in.
        phase: ProcessingPhase,
        /// The missing field.
        field: &'static str,
    },
    /// A required input is provided with another type than declared.
    #[error(
        "strategy '{strategy}' in phase {phase} reads '{field}' as {expected}, but it is provided as {found}"
    )]
    TypeMismatch {
        /// The reading strategy.
        strategy: String,
        /// Its phase.
        phase: ProcessingPhase,
        /// The field.
        field: &'static str,
        /// The type the reader declares.
        expected: &'static str,
        /// The type the provider declares.
        found: &'static str,
    },
    /// A `ComposedStrategy` with no members.
    #[error("composed strategy '{strategy}' has no member strategies")]
    EmptyComposition {
        /// The composition's name.
        strategy: String,
    },
    /// Two strategies registered for one phase.
    #[error("phase {phase} already has strategy '{existing}'; compose strategies to run several")]
    PhaseTaken {
        /// The phase.
        phase: ProcessingPhase,
        /// The strategy registered first.
        existing: String,
    },
}

/// Why a strategy's outputs were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// The strategy wrote a field it did not declare.
    #[error("produced undeclared output '{field}'")]
    Undeclared {
        /// The field.
        field: &'static str,
    },
    /// The strategy wrote a declared field with another type.
    #[error("produced output '{field}' as {found}, but declared it as {declared}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// The declared type.
        declared: &'static str,
        /// The type written.
        found: &'static str,
    },
}

/// A failure that a non-fail-fast strategy (or composition member) had, logged and recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFailure {
    /// The strategy that failed.
    pub strategy: String,
    /// What went wrong.
    pub message: String,
}

/// Why a processor run stopped (seed 004: the error carries phase, strategy, message and source).
#[derive(Debug, thiserror::Error)]
pub enum ProcessingError {
    /// A required input was absent (or of the wrong type) right before the phase ran.
    #[error("strategy '{strategy}' in phase {phase} is missing required input '{field}'")]
    MissingDependency {
        /// The phase.
        phase: ProcessingPhase,
        /// The strategy.
        strategy: String,
        /// The missing field.
        field: &'static str,
    },
    /// A fail-fast strategy failed.
    #[error("strategy '{strategy}' failed in phase {phase}: {message}")]
    StrategyFailed {
        /// The phase.
        phase: ProcessingPhase,
        /// The strategy.
        strategy: String,
        /// The failure, in words.
        message: String,
        /// The strategy's error.
        #[source]
        source: StrategyError,
    },
    /// A strategy's outputs broke its declaration.
    #[error("strategy '{strategy}' in phase {phase} {source}")]
    BadOutput {
        /// The phase.
        phase: ProcessingPhase,
        /// The strategy.
        strategy: String,
        /// What was wrong.
        #[source]
        source: OutputError,
    },
}

impl ProcessingError {
    /// The phase the run stopped in.
    pub fn phase(&self) -> ProcessingPhase {
        match self {
            ProcessingError::MissingDependency { phase, .. }
            | ProcessingError::StrategyFailed { phase, .. }
            | ProcessingError::BadOutput { phase, .. } => *phase,
        }
    }

    /// The strategy the run stopped at.
    pub fn strategy(&self) -> &str {
        match self {
            ProcessingError::MissingDependency { strategy, .. }
            | ProcessingError::StrategyFailed { strategy, .. }
            | ProcessingError::BadOutput { strategy, .. } => strategy,
        }
    }
}
