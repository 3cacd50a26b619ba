//! The round driver: the HostAgent FSM (CONTINUE, ASSIGN, PENDING, CONFIRM, FINISH, FAIL, ERROR) and the
//! AppAgent FSM (CONTINUE, SCREENSHOT, PENDING, CONFIRM, FINISH, FAIL, ERROR) run step by step.
//!
//! The task runner calls [`Round::next_step`] repeatedly; each call runs one agent step and returns the
//! [`crate::round::output::StepOutput`] to record, or `None` when the round has ended ([`Round::end`] says how).
//! Each step carries what the round decided next ([`crate::round::control::Next`]); the runner alone waits for
//! people and writes the questions, holds, answers and decisions: the round only takes what arrived
//! as [`Arrived`] (answers, a decision), already waited for.
//!
//! Fixes over the reference (seed 002 and the issue): CONFIRM *holds* the proposed action until it is
//! approved (it runs) or rejected (the subtask finishes with that outcome); PENDING asks and continues
//! with the answers; an AppAgent FAIL returns control to the HostAgent to re-plan, bounded by
//! `max_replans`; an unknown status is ERROR.

mod app_step;
pub mod control;
pub mod failure;
mod held;
mod host_step;
pub mod output;
pub(crate) mod record;
pub mod resume;
pub mod state;
mod step;
pub mod third_step;
mod transition;

pub use resume::RoundState;

/// The finished subtasks `{subtask, status, result}` recorded in stored memory items, in step order
/// (what [`Round::previous_subtasks`] held), for resuming a session.
pub fn previous_subtasks_from_store(items: &[v1::MemoryItem]) -> Vec<Value> {
    let mut sorted: Vec<_> = items.iter().collect();
    sorted.sort_by_key(|i| i.step);
    sorted
        .into_iter()
        .filter_map(|i| i.item.as_ref()?.fields.get("archived_subtask").cloned())
        .map(ufo_proto::json::from_value)
        .collect()
}

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument as _;
use ufo_proto::v1;

use crate::agents::app::AppProcessor;
use crate::agents::host::HostProcessor;
use crate::agents::response::{ActionSpec, HostResponse};
use crate::agents::target::TargetInfo;
use crate::agents::{AgentServices, AppAgent, HostAgent};
use crate::dispatch::CommandDispatcher;
use crate::llm::Totals;
use crate::memory::{Blackboard, Memory};
use crate::processor::{BuildError, Processor};
use crate::round::control::{HeldAction, Next, StepControl};
use crate::round::output::StepOutput;
use crate::round::state::{AgentState, AppStatus, Outcome};

/// A person's decision on a held action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Run it.
    pub approve: bool,
    /// Why (shown in memory and the step's comment).
    pub reason: String,
}

/// What people gave the round since its last step, after the runner waited for it (the runner owns the
/// waiting, its timeouts and their fallback).
#[derive(Debug, Clone, Default)]
pub struct Arrived {
    /// The answers to the pending questions, in order; `None`: nothing arrived (the round fails).
    pub answers: Option<Vec<String>>,
    /// The decision on the held action; `None`: none was given (a rejection).
    pub decision: Option<Decision>,
}

/// Which agent acts next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Active {
    /// The HostAgent.
    Host,
    /// The AppAgent of this application.
    App(String),
    /// The third-party agent of this MCP server (`round::third_step`).
    Agent(String),
}

/// How a round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundEnd {
    /// FINISH, with the result.
    Finished(String),
    /// FAIL, ERROR, step or re-plan limit, unanswered questions: the reason.
    Failed(String),
}

/// An action held for confirmation, with what running it needs (stored with the step for a resume).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// The HostAgent's function.
    Host {
        /// Its reply.
        response: Box<HostResponse>,
        /// The targets it chose from, in label order.
        targets: Vec<TargetInfo>,
    },
    /// The AppAgent's actions.
    App {
        /// The proposed batch.
        actions: Vec<ActionSpec>,
        /// The controls the actions name.
        controls: Vec<TargetInfo>,
        /// The step's status.
        status: AppStatus,
        /// The reply's result: what the subtask yields when the batch runs and its status is FINISH.
        #[serde(default)]
        result: String,
        /// The reply's questions, asked when the batch runs and its status is PENDING.
        #[serde(default)]
        questions: Vec<String>,
    },
}

/// One round of a session.
pub struct Round {
    pub(crate) session_id: String,
    pub(crate) round: u32,
    pub(crate) request: String,
    pub(crate) session_step: u64,
    pub(crate) round_step: u32,
    pub(crate) host: HostAgent,
    pub(crate) apps: HashMap<String, AppAgent>,
    /// The third-party agents' memories, by MCP server.
    pub(crate) third: HashMap<String, Memory>,
    pub(crate) active: Active,
    pub(crate) state: AgentState,
    pub(crate) pending: Vec<String>,
    pub(crate) held: Option<(Held, HeldAction)>,
    pub(crate) blackboard: Arc<Blackboard>,
    pub(crate) previous_subtasks: Vec<Value>,
    pub(crate) subtask: String,
    pub(crate) host_message: String,
    pub(crate) replans: u32,
    pub(crate) end: Option<RoundEnd>,
    pub(crate) dispatcher: Arc<dyn CommandDispatcher>,
    pub(crate) services: AgentServices,
    pub(crate) host_proc: Processor<HostProcessor>,
    pub(crate) app_proc: Processor<AppProcessor>,
    pub(crate) totals: Totals,
    pub(crate) new_request: bool,
    pub(crate) archived: Option<Value>,
    pub(crate) stored_memory: Vec<v1::MemoryItem>,
    /// Select the active AppAgent's window again before the next step (set by a resume).
    pub(crate) reselect: bool,
}

impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("session_id", &self.session_id)
            .field("round", &self.round)
            .field("session_step", &self.session_step)
            .field("active", &self.active)
            .field("state", &self.state)
            .field("end", &self.end)
            .finish()
    }
}

impl Round {
    /// A round of `session_id` whose steps are numbered after `last_session_step`. `host`, `blackboard` and
    /// `previous_subtasks` carry what earlier rounds left (rebuilt from the session store on resume).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        session_id: &str,
        round: u32,
        request: &str,
        last_session_step: u64,
        host: HostAgent,
        blackboard: Blackboard,
        previous_subtasks: Vec<Value>,
        dispatcher: Arc<dyn CommandDispatcher>,
    ) -> Result<Self, BuildError> {
        let services = host.services.clone();
        Ok(Self {
            session_id: session_id.to_owned(),
            round,
            request: request.to_owned(),
            session_step: last_session_step,
            round_step: 0,
            host,
            apps: HashMap::new(),
            third: HashMap::new(),
            active: Active::Host,
            state: AgentState::Continue,
            pending: vec![],
            held: None,
            blackboard: Arc::new(blackboard),
            previous_subtasks,
            subtask: String::new(),
            host_message: String::new(),
            replans: 0,
            end: None,
            dispatcher,
            services,
            host_proc: Processor::build(HostProcessor)?,
            app_proc: Processor::build(AppProcessor)?,
            totals: Totals::default(),
            new_request: true,
            archived: None,
            stored_memory: vec![],
            reselect: false,
        })
    }

    /// How the round ended, once it has.
    pub fn end(&self) -> Option<&RoundEnd> {
        self.end.as_ref()
    }

    /// `HostAgent:CONTINUE`, `AppAgent/editor:CONFIRM`, ...
    pub fn state(&self) -> String {
        format!("{}:{}", self.active_name(), self.state)
    }

    /// The questions waited on (PENDING).
    pub fn pending_questions(&self) -> &[String] {
        &self.pending
    }

    /// The action waiting for confirmation (CONFIRM).
    pub fn held_action(&self) -> Option<&HeldAction> {
        self.held.as_ref().map(|(_, h)| h)
    }

    /// What the round decided after its newest step (ids not yet assigned: the runner assigns them).
    pub fn next(&self) -> Next {
        match (&self.end, &self.held, self.pending.is_empty()) {
            (Some(RoundEnd::Finished(result)), ..) => Next::Finish {
                result: result.clone(),
            },
            (Some(RoundEnd::Failed(reason)), ..) => Next::Fail {
                reason: reason.clone(),
            },
            (None, Some((_, action)), _) => Next::Hold {
                action: action.clone(),
            },
            (None, None, false) => Next::ask(self.pending.clone()),
            (None, None, true) => Next::Continue {
                agent: self.active_name(),
            },
        }
    }

    /// The value stored with the newest step: [`Round::next`] and the round's state.
    pub fn control(&self) -> StepControl {
        StepControl {
            next: self.next(),
            round: Some(Box::new(self.state_after())),
        }
    }

    /// The shared blackboard.
    pub fn blackboard(&self) -> &Blackboard {
        &self.blackboard
    }

    /// Finished subtasks `{subtask, status, result}`.
    pub fn previous_subtasks(&self) -> &[Value] {
        &self.previous_subtasks
    }

    /// The HostAgent (its memory survives the round).
    pub fn host(&self) -> &HostAgent {
        &self.host
    }

    /// The cached AppAgents by application.
    pub fn apps(&self) -> &HashMap<String, AppAgent> {
        &self.apps
    }

    /// LLM calls, tokens and cost of the round so far.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Last session step number used.
    pub fn session_step(&self) -> u64 {
        self.session_step
    }

    pub(crate) fn active_name(&self) -> String {
        match &self.active {
            Active::Host => self.host.name.clone(),
            Active::App(k) => self
                .apps
                .get(k)
                .map_or_else(|| format!("AppAgent/{k}"), |a| a.name.clone()),
            Active::Agent(server) => third_step::agent_name(server),
        }
    }

    /// Runs the next step; `None` once the round has ended.
    pub async fn next_step(&mut self, arrived: &Arrived) -> Option<StepOutput> {
        if self.end.is_some() {
            return None;
        }
        if self.round_step >= self.services.settings.max_steps {
            self.end = Some(RoundEnd::Failed(format!(
                "step limit reached ({} steps)",
                self.services.settings.max_steps
            )));
            return None;
        }
        let mut carry = record::Carry::default();
        if std::mem::take(&mut self.reselect) {
            carry.actions.extend(
                self.reselect_window()
                    .instrument(tracing::info_span!("resume.reselect_window"))
                    .await,
            );
            if self.end.is_some() {
                return None;
            }
        }
        if self.new_request {
            self.new_request = false;
            let request = self.request.clone();
            Arc::make_mut(&mut self.blackboard).add_request(&request);
            carry.request_entry(&request);
        }
        if self.state == AgentState::Pending && !self.apply_answers(arrived.answers.clone()) {
            return None;
        }
        let span = tracing::info_span!(
            "agent.step",
            otel.name = %format!("step {} {}", self.session_step + 1, self.active_name()),
            session_id = %self.session_id,
            round = self.round,
            session_step = self.session_step + 1,
            agent = %self.active_name(),
            state = %self.state,
        );
        if self.state == AgentState::Confirm {
            if let Some((held, info)) = self.held.take() {
                let decision = arrived.decision.clone().unwrap_or(Decision {
                    approve: false,
                    reason: "no decision was given".into(),
                });
                return Some(
                    self.resolve_held(held, info, decision, carry)
                        .instrument(span)
                        .await,
                );
            }
            self.state = AgentState::Continue;
        }
        Some(match self.active.clone() {
            Active::Host => self.host_step(carry).instrument(span).await,
            Active::App(key) => self.app_step(&key, carry).instrument(span).await,
            Active::Agent(server) => self.third_step(&server, carry).instrument(span).await,
        })
    }

    pub(crate) fn archive(&mut self, outcome: Outcome, result: &str) {
        let entry =
            serde_json::json!({"subtask": self.subtask, "status": outcome, "result": result});
        self.previous_subtasks.push(entry.clone());
        // Stored with the step's memory item so a resumed round can rebuild the list.
        self.archived = Some(entry);
    }

    /// Rebuilds the AppAgent of `window` with what the session store holds for it, or a fresh one.
    pub(crate) fn app_for(&self, window: TargetInfo) -> AppAgent {
        let mut agent = AppAgent::new(window, self.services.clone());
        agent.memory = Memory::from_proto(&self.stored_memory, &agent.name);
        agent
    }

    /// Gives the round what the session store holds (`GetMemory`), so AppAgents created for applications
    /// seen in earlier rounds (or before a crash) get their memory back.
    pub fn with_stored_memory(mut self, items: Vec<v1::MemoryItem>) -> Self {
        self.stored_memory = items;
        self
    }
}
