//! The processor template (seed 004, "ProcessorTemplate Framework", "Workflow Execution").
//!
//! A concrete processor implements [`ProcessorTemplate`]: it only registers its strategies
//! (`setup_strategies`, the seeds' `_setup_strategies`) and middleware (`setup_middleware`), declares the
//! global inputs it expects, and turns a finished run's local data into an output type of its own
//! (`finalize`, the seeds' `processor_context_class` + `_finalize_processing_context`).
//! [`Processor::build`] validates the chain once; [`Processor::process`] runs it:
//!
//! 1. phases in the fixed order, skipping phases without a strategy;
//! 2. before each phase, its required inputs are checked (a missing one stops the run);
//! 3. middleware hooks around the run and each phase;
//! 4. a successful strategy's outputs are checked against its declaration and merged into local data;
//! 5. a failing fail-fast strategy stops the run with an error carrying phase, strategy, message and
//!    source; any other failure is logged, recorded in its [`PhaseResult`], and the run goes on.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument as _;

use super::context::{ProcessingContext, Values};
use super::error::{BuildError, ProcessingError};
use super::middleware::{MiddlewareChain, RunInfo};
use super::phase::ProcessingPhase;
use super::result::{PhaseResult, ProcessFailure, ProcessOutcome, ProcessingResult};
use super::strategy::{Dependency, Provided, Strategy, StrategyError};
use super::validation::{check_outputs, missing_required, validate_chain};

/// Strategies registered per phase, at most one each (compose to run several in one phase).
pub struct StrategyRegistry<A: ?Sized> {
    slots: [Option<Arc<dyn Strategy<A>>>; 6],
}

impl<A: ?Sized> Default for StrategyRegistry<A> {
    fn default() -> Self {
        Self {
            slots: Default::default(),
        }
    }
}

impl<A: ?Sized> StrategyRegistry<A> {
    /// Registers `strategy` for `phase`; a phase takes one strategy.
    pub fn register(
        &mut self,
        phase: ProcessingPhase,
        strategy: impl Strategy<A> + 'static,
    ) -> Result<&mut Self, BuildError> {
        self.register_arc(phase, Arc::new(strategy))
    }

    /// Registers a shared strategy for `phase`.
    pub fn register_arc(
        &mut self,
        phase: ProcessingPhase,
        strategy: Arc<dyn Strategy<A>>,
    ) -> Result<&mut Self, BuildError> {
        let slot = &mut self.slots[phase.index()];
        if let Some(existing) = slot {
            return Err(BuildError::PhaseTaken {
                phase,
                existing: existing.name().to_owned(),
            });
        }
        *slot = Some(strategy);
        Ok(self)
    }
}

/// A concrete processor: which strategies and middleware it uses, what it needs, what it makes of a run.
pub trait ProcessorTemplate: Send + Sync {
    /// The agent type its strategies work for.
    type Agent: ?Sized + Sync;
    /// The processor's own summary of a finished run, built from the run's local data.
    type Output: Send;

    /// The processor's name (logs, spans).
    fn name(&self) -> &'static str;

    /// Registers a strategy per phase.
    fn setup_strategies(
        &self,
        strategies: &mut StrategyRegistry<Self::Agent>,
    ) -> Result<(), BuildError>;

    /// Registers middleware, in order. Default: none.
    fn setup_middleware(&self, _chain: &mut MiddlewareChain) {}

    /// Global inputs every run is given (validation counts them as available from the start).
    fn global_inputs(&self) -> Vec<Provided> {
        Vec::new()
    }

    /// Builds the output of a run that was not stopped.
    fn finalize(&self, ctx: ProcessingContext, result: &ProcessingResult) -> Self::Output;
}

struct Registered<A: ?Sized> {
    phase: ProcessingPhase,
    strategy: Arc<dyn Strategy<A>>,
    // Declarations read once at build time; they are constant by the Strategy contract.
    dependencies: Vec<Dependency>,
    provides: Vec<Provided>,
}

/// A validated, ready-to-run processor.
pub struct Processor<T: ProcessorTemplate> {
    template: T,
    chain: Vec<Registered<T::Agent>>,
    middleware: MiddlewareChain,
}

impl<T: ProcessorTemplate> std::fmt::Debug for Processor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("name", &self.template.name())
            .field(
                "chain",
                &self
                    .chain
                    .iter()
                    .map(|r| (r.phase.as_str(), r.strategy.name().to_owned()))
                    .collect::<Vec<_>>(),
            )
            .field(
                "middleware",
                &self
                    .middleware
                    .iter()
                    .map(|m| m.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<T: ProcessorTemplate> Processor<T> {
    /// Registers the template's strategies and middleware and validates the dependency chain: building
    /// fails with an error naming the strategy, the phase and the missing key.
    pub fn build(template: T) -> Result<Self, BuildError> {
        let mut registry = StrategyRegistry::default();
        template.setup_strategies(&mut registry)?;
        let chain: Vec<Registered<T::Agent>> = ProcessingPhase::ORDER
            .iter()
            .zip(registry.slots)
            .filter_map(|(phase, slot)| {
                slot.map(|strategy| Registered {
                    phase: *phase,
                    dependencies: strategy.dependencies(),
                    provides: strategy.provides(),
                    strategy,
                })
            })
            .collect();
        let view: Vec<(ProcessingPhase, &dyn Strategy<T::Agent>)> = chain
            .iter()
            .map(|r| (r.phase, r.strategy.as_ref()))
            .collect();
        validate_chain(&view, &template.global_inputs())?;
        let mut middleware = MiddlewareChain::new();
        template.setup_middleware(&mut middleware);
        Ok(Self {
            template,
            chain,
            middleware,
        })
    }

    /// The template.
    pub fn template(&self) -> &T {
        &self.template
    }

    /// The registered phases, in execution order, with their strategy names.
    pub fn phases(&self) -> Vec<(ProcessingPhase, &str)> {
        self.chain
            .iter()
            .map(|r| (r.phase, r.strategy.name()))
            .collect()
    }

    /// Runs every registered phase in order for `agent` over the session-wide `global` data.
    pub async fn process(
        &self,
        agent: &T::Agent,
        global: Arc<Values>,
    ) -> Result<ProcessOutcome<T::Output>, ProcessFailure> {
        let run = RunInfo::from_global(self.template.name(), &global);
        let span = self
            .middleware
            .iter()
            .find_map(|m| m.run_span(&run))
            .unwrap_or_else(tracing::Span::none);
        self.run(agent, global, &run).instrument(span).await
    }

    async fn run(
        &self,
        agent: &T::Agent,
        global: Arc<Values>,
        run: &RunInfo,
    ) -> Result<ProcessOutcome<T::Output>, ProcessFailure> {
        let started = Instant::now();
        let mut ctx = ProcessingContext::new(global);
        for m in &self.middleware {
            m.before_process(run, &ctx).await;
        }
        let mut phases = Vec::with_capacity(self.chain.len());
        for registered in &self.chain {
            let span = self
                .middleware
                .iter()
                .find_map(|m| m.phase_span(run, registered.phase, registered.strategy.name()))
                .unwrap_or_else(tracing::Span::none);
            let outcome = self
                .run_phase(agent, &mut ctx, run, registered)
                .instrument(span)
                .await;
            match outcome {
                Ok(phase) => phases.push(phase),
                Err((phase, error)) => {
                    phases.extend(phase);
                    for m in &self.middleware {
                        m.on_error(run, &error).await;
                    }
                    let result = ProcessingResult {
                        success: false,
                        phases,
                        error: Some(error.to_string()),
                        execution_time: started.elapsed(),
                    };
                    return Err(ProcessFailure {
                        error,
                        result,
                        local: ctx.into_local(),
                    });
                }
            }
        }
        let result = ProcessingResult {
            success: phases.iter().all(|p| p.success),
            phases,
            error: None,
            execution_time: started.elapsed(),
        };
        for m in self.middleware.iter().rev() {
            m.after_process(run, &result).await;
        }
        let output = self.template.finalize(ctx, &result);
        Ok(ProcessOutcome { output, result })
    }

    /// Runs one phase. On a stopping error, also returns the phase's result when the strategy ran.
    async fn run_phase(
        &self,
        agent: &T::Agent,
        ctx: &mut ProcessingContext,
        run: &RunInfo,
        registered: &Registered<T::Agent>,
    ) -> Result<PhaseResult, (Option<PhaseResult>, ProcessingError)> {
        let phase = registered.phase;
        let strategy = registered.strategy.as_ref();
        if let Some(field) = missing_required(&registered.dependencies, ctx) {
            return Err((
                None,
                ProcessingError::MissingDependency {
                    phase,
                    strategy: strategy.name().to_owned(),
                    field,
                },
            ));
        }
        for m in &self.middleware {
            m.before_phase(run, phase, strategy.name(), ctx).await;
        }
        let before: HashSet<&'static str> = ctx.local().names().collect();
        let started = Instant::now();
        let span = tracing::info_span!(
            "strategy",
            otel.name = %format!("strategy {}", strategy.name()),
            strategy = %strategy.name(),
            phase = phase.as_str(),
        );
        let previous = ctx.limit_reads(&registered.dependencies);
        let executed = strategy.execute(agent, ctx).instrument(span).await;
        ctx.restore_reads(previous);
        let execution_time = started.elapsed();
        let mut stop = None;
        let error = match executed {
            Ok(outputs) => match check_outputs(&registered.provides, &outputs) {
                Ok(()) => {
                    ctx.update_local(outputs.into_values());
                    None
                }
                Err(source) => {
                    let message = source.to_string();
                    stop = Some(ProcessingError::BadOutput {
                        phase,
                        strategy: strategy.name().to_owned(),
                        source,
                    });
                    Some(message)
                }
            },
            Err(source) => {
                let message = describe(&source);
                if strategy.fail_fast() {
                    stop = Some(ProcessingError::StrategyFailed {
                        phase,
                        strategy: strategy.name().to_owned(),
                        message: message.clone(),
                        source,
                    });
                } else {
                    tracing::warn!(
                        phase = phase.as_str(),
                        strategy = %strategy.name(),
                        error = %message,
                        "strategy failed; continuing (fail_fast = false)"
                    );
                }
                Some(message)
            }
        };
        let result = PhaseResult {
            phase,
            strategy: strategy.name().to_owned(),
            success: error.is_none(),
            error,
            execution_time,
            outputs: ctx
                .local()
                .names()
                .filter(|n| !before.contains(n))
                .collect(),
            tolerated: ctx.take_failures(),
        };
        for m in self.middleware.iter().rev() {
            m.after_phase(run, &result).await;
        }
        match stop {
            Some(error) => Err((Some(result), error)),
            None => Ok(result),
        }
    }
}

/// The error and its causes in one line ("a: b: c").
fn describe(error: &StrategyError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
