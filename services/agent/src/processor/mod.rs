//! The processor framework: the strategy layer of the UFO² agents (seeds 003 and 004).
//!
//! An agent's processing step is a [`Processor`] built from a [`ProcessorTemplate`]: one [`Strategy`] per
//! [`ProcessingPhase`] (several through a [`ComposedStrategy`]), middleware around the run, and a typed
//! [`ProcessingContext`] through which strategies pass data. Where each part comes from:
//!
//! | part | module | seed section |
//! | --- | --- | --- |
//! | phases and their fixed order | [`phase`] | 004 "ProcessorTemplate Structure", "Execution Order" |
//! | strategy interface, `depends_on`/`provides` | [`strategy`] | 003 "ProcessingStrategy Interface", "Strategy Dependency System" |
//! | typed keys, local/global context | [`context`], [`keys`] | 004 "ProcessingContext", 003 "StrategyDependency" |
//! | `ComposedStrategy` | [`composed`] | 003 "ComposedStrategy" |
//! | chain validation (build and run time) | [`validation`] | 004 "Dependency Validation" |
//! | fail-fast vs continue, errors | [`error`], [`template`] | 003 `handle_error`, 004 `process()` |
//! | results and timings | [`result`] | 004 `ProcessingResult`, `EnhancedLoggingMiddleware` |
//! | middleware, logging spans | [`middleware`] | 004 "Middleware System" |
//! | template: register strategies and middleware | [`template`] | 004 `_setup_strategies`, `_setup_middleware` |
//!
//! Differences from the Python reference, on purpose: keys carry their value type, so reading a
//! screenshot as a string fails to compile (or, with two keys of one name, fails with a clear error); an
//! undeclared output is an error rather than a silent write; a composition's dependencies exclude only what
//! *earlier* members provide, so a wrong member order is caught at build time; a missing required input at
//! run time is an error, never a warning.

pub mod composed;
pub mod context;
pub mod error;
pub mod keys;
pub mod middleware;
pub mod phase;
pub mod result;
pub mod strategy;
pub mod template;
pub(crate) mod validation;

#[cfg(test)]
mod tests;

pub use composed::ComposedStrategy;
pub use context::{ContextError, Key, ProcessingContext, Values};
pub use error::{BuildError, OutputError, ProcessingError, RecordedFailure};
pub use middleware::{LoggingMiddleware, Middleware, MiddlewareChain, RunInfo};
pub use phase::ProcessingPhase;
pub use result::{PhaseResult, ProcessFailure, ProcessOutcome, ProcessingResult};
pub use strategy::{Dependency, Outputs, Provided, Strategy, StrategyError, StrategyResult};
pub use template::{Processor, ProcessorTemplate, StrategyRegistry};
