//! How an agent's strategy is written (seeds 000, 001 and 003): a [`Declaration`] — its name, its phase,
//! what it reads and writes — and its work ([`AgentStrategy::run`]). The framework's [`Strategy`] follows
//! from these for every agent strategy (the impl below), so no strategy spells out `name`, `fail_fast`,
//! `dependencies` and `provides`, and what every agent's strategy of one phase reads and writes is
//! declared once, by the phase's constructor ([`Declaration::model`], [`Declaration::memory`]).

use async_trait::async_trait;

use super::keys::*;
use crate::processor::{
    Dependency, Key, ProcessingContext, ProcessingPhase, Provided, Strategy, StrategyResult,
    keys as pkeys,
};
use crate::replay::REPLAY_MARK;

/// What a strategy declares about itself: the seeds' `name`, `@depends_on` (`reads`) and `@provides`
/// (`writes`), and the phase it runs in, which decides whether its failure stops the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The name used in logs, spans and errors.
    pub name: &'static str,
    /// The phase it runs in (a composition's members run in the composition's).
    pub phase: ProcessingPhase,
    /// What it reads.
    pub reads: Vec<Dependency>,
    /// What it writes.
    pub writes: Vec<Provided>,
}

impl Declaration {
    /// A strategy of `phase` that reads and writes nothing yet.
    pub fn new(name: &'static str, phase: ProcessingPhase) -> Self {
        Self {
            name,
            phase,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// A data collection (or a member of one).
    pub fn data(name: &'static str) -> Self {
        Self::new(name, ProcessingPhase::DataCollection)
    }

    /// An LLM interaction whose parsed reply goes under `reply`. It reads what both agents' prompts
    /// take (the request, what earlier subtasks and steps left, a replayed step and its wait) and writes
    /// what [`super::common::answered`] and [`super::common::with_knowledge`] write.
    pub fn model<T: 'static>(name: &'static str, reply: Key<T>) -> Self {
        Self::new(name, ProcessingPhase::LlmInteraction)
            .reads([
                pkeys::REQUEST.required("the user's request"),
                PREVIOUS_SUBTASKS.optional("finished subtasks with status and result"),
                BLACKBOARD.optional("shared context from earlier steps"),
                pkeys::SESSION_STEP.optional("the replayed step"),
                crate::replay::wait::REPLAY_WAITED
                    .optional("how the replayed step waited for its targets"),
            ])
            .writes([
                reply.provided(),
                RESPONSE_TEXT.provided(),
                LLM_TOTALS.provided(),
                REPLAY_MARK.provided(),
                KNOWLEDGE_USED.provided(),
            ])
    }

    /// An action execution.
    pub fn action(name: &'static str) -> Self {
        Self::new(name, ProcessingPhase::ActionExecution)
    }

    /// A memory update recording the step's `response`. It reads what
    /// [`super::common::memory_item`] reads (the step numbers, the actions, the cost, the settle wait)
    /// and writes what [`super::common::remembered`] writes.
    pub fn memory<T: 'static>(name: &'static str, response: Key<T>) -> Self {
        Self::new(name, ProcessingPhase::MemoryUpdate)
            .reads([
                pkeys::SESSION_STEP.required("numbers the memory item"),
                pkeys::ROUND.optional("the round the item belongs to"),
                pkeys::ROUND_STEP.optional("the step's number within its round"),
                response.required("the step's decision"),
                ACTIONS.optional("what was executed"),
                LLM_TOTALS.optional("the step's cost"),
                SETTLE.optional("the wait for a settled screen"),
            ])
            .writes([MEMORY_ITEM.provided(), TRAJECTORY.provided()])
    }

    /// Reads `inputs` too.
    pub fn reads(mut self, inputs: impl IntoIterator<Item = Dependency>) -> Self {
        self.reads.extend(inputs);
        self
    }

    /// Writes `outputs` too.
    pub fn writes(mut self, outputs: impl IntoIterator<Item = Provided>) -> Self {
        self.writes.extend(outputs);
        self
    }

    /// Whether its failure stops the step (seeds 000 and 001's tables): a failed data collection or LLM
    /// interaction leaves nothing to decide or act on; a failed action execution or memory update is
    /// logged, recorded and the step goes on.
    pub fn fail_fast(&self) -> bool {
        !matches!(
            self.phase,
            ProcessingPhase::ActionExecution | ProcessingPhase::MemoryUpdate
        )
    }
}

/// A strategy of an agent: its declaration and its work. Every `AgentStrategy` is a [`Strategy`] for
/// its agent.
#[async_trait]
pub trait AgentStrategy: Send + Sync {
    /// The agent it works for.
    type Agent: Sync;

    /// Its name, phase, reads and writes; constant for a strategy value, as [`Strategy`] requires.
    fn declaration(&self) -> Declaration;

    /// Does the work ([`Strategy::execute`]).
    async fn run(&self, agent: &Self::Agent, ctx: &mut ProcessingContext) -> StrategyResult;
}

#[async_trait]
impl<S: AgentStrategy> Strategy<S::Agent> for S {
    fn name(&self) -> &str {
        self.declaration().name
    }

    fn fail_fast(&self) -> bool {
        self.declaration().fail_fast()
    }

    fn dependencies(&self) -> Vec<Dependency> {
        self.declaration().reads
    }

    fn provides(&self) -> Vec<Provided> {
        self.declaration().writes
    }

    async fn execute(&self, agent: &S::Agent, ctx: &mut ProcessingContext) -> StrategyResult {
        self.run(agent, ctx).await
    }
}
