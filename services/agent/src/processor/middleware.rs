//! Middleware (seed 004, "Middleware System"): cross-cutting concerns around every processor run.
//!
//! `before_process` runs for each middleware in registration order, `after_process` in reverse order, and
//! `on_error` for every middleware when the run fails. The per-phase hooks follow the same order rule.
//! A middleware may also provide the `tracing` spans of the run and of each phase; the first middleware
//! that returns one wins.

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Span;

use super::context::{Key, ProcessingContext, Values};
use super::error::ProcessingError;
use super::phase::ProcessingPhase;
use super::result::{PhaseResult, ProcessingResult};

/// Who is running: read from the global context's well-known keys (see [`super::keys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The processor's name (e.g. `HostAgentProcessor`).
    pub processor: &'static str,
    /// The agent's name.
    pub agent: String,
    /// Round number (1-based; 0 when unknown).
    pub round: u32,
    /// Step within the round.
    pub round_step: u32,
    /// Step within the session.
    pub session_step: u64,
}

impl RunInfo {
    /// Reads the run's identity from the global data.
    pub fn from_global(processor: &'static str, global: &Values) -> Self {
        fn read<T: Clone + Default + 'static>(values: &Values, key: Key<T>) -> T {
            values.get(key).ok().flatten().cloned().unwrap_or_default()
        }
        Self {
            processor,
            agent: read(global, super::keys::AGENT_NAME),
            round: read(global, super::keys::ROUND),
            round_step: read(global, super::keys::ROUND_STEP),
            session_step: read(global, super::keys::SESSION_STEP),
        }
    }
}

/// A cross-cutting concern applied to every run of a processor.
#[async_trait]
pub trait Middleware: Send + Sync {
    /// The name used in logs.
    fn name(&self) -> &str;

    /// The span the whole run executes in.
    fn run_span(&self, _run: &RunInfo) -> Option<Span> {
        None
    }

    /// The span a phase executes in (inside the run span).
    fn phase_span(&self, _run: &RunInfo, _phase: ProcessingPhase, _strategy: &str) -> Option<Span> {
        None
    }

    /// Before the first phase.
    async fn before_process(&self, _run: &RunInfo, _ctx: &ProcessingContext) {}

    /// Before a phase's strategy runs (after its inputs were validated).
    async fn before_phase(
        &self,
        _run: &RunInfo,
        _phase: ProcessingPhase,
        _strategy: &str,
        _ctx: &ProcessingContext,
    ) {
    }

    /// After a phase's strategy ran (also when it failed without stopping the run).
    async fn after_phase(&self, _run: &RunInfo, _result: &PhaseResult) {}

    /// After the last phase of a run that was not stopped.
    async fn after_process(&self, _run: &RunInfo, _result: &ProcessingResult) {}

    /// When the run stops on an error.
    async fn on_error(&self, _run: &RunInfo, _error: &ProcessingError) {}
}

/// The built-in logging middleware (seed 004, `EnhancedLoggingMiddleware`): a span per run (processor,
/// agent, round, step) and per phase, and a log line with each phase's timing and the run's total.
#[derive(Debug, Default, Clone)]
pub struct LoggingMiddleware;

#[async_trait]
impl Middleware for LoggingMiddleware {
    fn name(&self) -> &str {
        "logging"
    }

    fn run_span(&self, run: &RunInfo) -> Option<Span> {
        Some(tracing::info_span!(
            "processor",
            otel.name = %format!("{} step {}", run.agent, run.session_step),
            processor = run.processor,
            agent = %run.agent,
            round = run.round,
            round_step = run.round_step,
            session_step = run.session_step,
            total_ms = tracing::field::Empty,
            success = tracing::field::Empty,
        ))
    }

    fn phase_span(&self, run: &RunInfo, phase: ProcessingPhase, strategy: &str) -> Option<Span> {
        Some(tracing::info_span!(
            "phase",
            otel.name = %format!("phase {phase}"),
            phase = phase.as_str(),
            strategy = %strategy,
            agent = %run.agent,
            session_step = run.session_step,
            elapsed_ms = tracing::field::Empty,
            success = tracing::field::Empty,
        ))
    }

    async fn before_process(&self, run: &RunInfo, _ctx: &ProcessingContext) {
        tracing::debug!(
            processor = run.processor,
            agent = %run.agent,
            round = run.round,
            round_step = run.round_step,
            "processing started"
        );
    }

    async fn after_phase(&self, _run: &RunInfo, result: &PhaseResult) {
        let span = Span::current();
        span.record("elapsed_ms", result.execution_time.as_secs_f64() * 1e3);
        span.record("success", result.success);
        match &result.error {
            None => tracing::debug!(
                phase = result.phase.as_str(),
                strategy = %result.strategy,
                elapsed_us = result.execution_time.as_micros() as u64,
                "phase done"
            ),
            Some(error) => tracing::warn!(
                phase = result.phase.as_str(),
                strategy = %result.strategy,
                error = %error,
                "phase failed; continuing"
            ),
        }
    }

    async fn after_process(&self, run: &RunInfo, result: &ProcessingResult) {
        let span = Span::current();
        span.record("total_ms", result.execution_time.as_secs_f64() * 1e3);
        span.record("success", result.success);
        let timings: Vec<String> = result
            .phases
            .iter()
            .map(|p| format!("{}={:.3}ms", p.phase, p.execution_time.as_secs_f64() * 1e3))
            .collect();
        tracing::info!(
            processor = run.processor,
            agent = %run.agent,
            session_step = run.session_step,
            success = result.success,
            total_ms = result.execution_time.as_secs_f64() * 1e3,
            phases = %timings.join(" "),
            "processing finished"
        );
    }

    async fn on_error(&self, run: &RunInfo, error: &ProcessingError) {
        Span::current().record("success", false);
        tracing::error!(
            processor = run.processor,
            agent = %run.agent,
            session_step = run.session_step,
            phase = error.phase().as_str(),
            strategy = %error.strategy(),
            error = %error,
            source = ?std::error::Error::source(error).map(ToString::to_string),
            "processing failed"
        );
    }
}

/// The registered middleware, in registration order.
pub type MiddlewareChain = Vec<Arc<dyn Middleware>>;
