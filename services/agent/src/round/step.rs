//! What every step shares: the global context, step numbering, the step row, questions, holds and the
//! blackboard trajectory (seed 002 "State Machine").

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};
use ufo_proto::v1;

use super::output::StepOutput;
use super::record::Carry;
use super::{Active, Held, Round, RoundEnd};
use crate::agents::action::ActionRecord;
use crate::agents::keys::*;
use crate::llm::Totals;
use crate::memory::blackboard::entry;
use crate::processor::{ProcessFailure, ProcessOutcome, ProcessingResult, Values, keys as pkeys};
use crate::round::control::HeldAction;
use crate::round::state::AgentState;

pub(super) fn phases(r: &ProcessingResult) -> Vec<v1::PhaseTiming> {
    r.phases
        .iter()
        .map(|p| v1::PhaseTiming {
            phase: p.phase.as_str().to_owned(),
            seconds: p.execution_time.as_secs_f64(),
            success: p.success,
            error: p.error.clone().unwrap_or_default(),
        })
        .collect()
}

/// An agent's processor run as its step records it: the run's local data, its phase results and, for a
/// run an error stopped, the error as a person reads it.
pub(super) fn ran(
    run: Result<ProcessOutcome<Values>, ProcessFailure>,
) -> (Values, ProcessingResult, Option<String>) {
    match run {
        Ok(o) => (o.output, o.result, None),
        Err(f) => {
            let error = crate::round::failure::user_text(&f.error);
            (f.local, f.result, Some(error))
        }
    }
}

/// Whether an AppAgent batch did not do what a FINISH would claim (issue 31): an action failed, or
/// the action the FINISH rests on — each one proposed with status FINISH, and the batch's last
/// action — ran and the executor saw it change nothing (`effect: none_observed`). The agent then
/// observes again, as after a failed action, and sees the effect in its next prompt.
pub(super) fn unfinished(actions: &[ActionRecord]) -> bool {
    ActionRecord::any_failed(actions)
        || actions
            .iter()
            .filter(|a| a.status == "FINISH")
            .chain(actions.last())
            .any(|a| a.result.none_observed())
}

impl Round {
    /// Why a proposal that did not run is held for a person, if it is (the operator's policy, the model's
    /// CONFIRM unless the task never confirms, or a task that confirms all: [`crate::agents::AgentSettings::hold`]).
    pub(super) fn holds(
        &self,
        batch: &[(&str, &serde_json::Map<String, serde_json::Value>)],
        ran: &[ActionRecord],
        confirm: bool,
        acts: bool,
    ) -> Option<crate::agents::policy::Hold> {
        let s = &self.services.settings;
        s.hold(confirm, acts, batch).filter(|_| ran.is_empty())
    }

    pub(super) fn globals(&self) -> Values {
        Values::new()
            .with(pkeys::REQUEST, self.request.clone())
            .with(pkeys::SESSION_ID, self.session_id.clone())
            .with(pkeys::AGENT_NAME, self.active_name())
            .with(pkeys::ROUND, self.round)
            .with(pkeys::ROUND_STEP, self.round_step)
            .with(pkeys::SESSION_STEP, self.session_step)
            .with(DISPATCHER, self.dispatcher.clone())
            .with(BLACKBOARD, self.blackboard.clone())
            .with(PREVIOUS_SUBTASKS, self.previous_subtasks.clone())
            .with(SUBTASK, self.subtask.clone())
            .with(HOST_MESSAGE, self.host_message.clone())
    }

    /// The new active agent's state: an agent that just received control starts in CONTINUE.
    pub(super) fn settle(&mut self, was: &Active, after: &AgentState) {
        self.state = if *was != self.active && self.end.is_none() {
            AgentState::Continue
        } else {
            after.clone()
        };
    }

    pub(super) fn begin(&mut self) {
        self.session_step += 1;
        self.round_step += 1;
    }

    /// The row of a step the active agent starts now, from the state before it (what the step adds is set
    /// by the caller).
    pub(super) fn row(&self) -> v1::Step {
        let kind = match self.active {
            Active::Host => v1::AgentKind::Host,
            // A third-party agent is recorded as an AppAgent kind under its own name.
            Active::App(_) | Active::Agent(_) => v1::AgentKind::App,
        };
        v1::Step {
            agent_name: self.active_name(),
            agent_kind: kind as i32,
            state_before: self.state.to_string(),
            subtask: self.subtask.clone(),
            started_at: Some(SystemTime::now().into()),
            ..Default::default()
        }
    }

    /// Completes the step after the transition: numbering, the actions (a window selected again first:
    /// every action sent to the executor is in the step), cost, and what the round decided with its state
    /// (what a runner resuming after a crash restores).
    pub(super) fn finish(
        &mut self,
        mut step: v1::Step,
        actions: &[ActionRecord],
        totals: Totals,
        mut memory: Map<String, Value>,
        carry: Carry,
        after: &AgentState,
    ) -> StepOutput {
        self.totals.add(totals);
        if let Some(archived) = self.archived.take() {
            memory.insert("archived_subtask".into(), archived.clone());
            let last = if step.agent_name == self.host.name {
                self.host.memory.last_mut()
            } else if let super::Active::Agent(server) = &self.active
                && step.agent_name == super::third_step::agent_name(server)
            {
                self.third.get_mut(server).and_then(|m| m.last_mut())
            } else {
                self.apps
                    .values_mut()
                    .find(|a| a.name == step.agent_name)
                    .and_then(|a| a.memory.last_mut())
            };
            if let Some(item) = last {
                item.set("archived_subtask", archived);
            }
        }
        step.session_id.clone_from(&self.session_id);
        step.step = self.session_step;
        step.round = self.round;
        step.round_step = self.round_step;
        step.state_after = after.to_string();
        step.actions = carry
            .actions
            .iter()
            .chain(actions)
            .map(ActionRecord::to_proto)
            .collect();
        step.cost = totals.cost;
        step.input_tokens = totals.usage.input_tokens;
        step.output_tokens = totals.usage.output_tokens;
        step.finished_at = Some(SystemTime::now().into());
        StepOutput {
            step,
            memory_item: Some(memory),
            blackboard: carry.blackboard,
            artifacts: vec![],
            events: vec![],
            control: self.control(),
            uploads: self.services.uploads.clone(),
        }
    }

    /// Asks `questions`: the runner writes them and waits for the answers.
    pub(super) fn ask(&mut self, questions: Vec<String>) -> AgentState {
        self.pending = questions;
        AgentState::Pending
    }

    /// Holds an action: the runner writes it and waits for the decision.
    pub(super) fn hold(&mut self, held: Held, info: HeldAction) -> AgentState {
        self.held = Some((held, info));
        AgentState::Confirm
    }

    /// Takes the answers (the runner wrote them to the store, with its timeout fallback); false when the
    /// round ended because none arrived.
    pub(super) fn apply_answers(&mut self, answers: Option<Vec<String>>) -> bool {
        let questions = std::mem::take(&mut self.pending);
        let Some(answers) = answers else {
            self.end = Some(RoundEnd::Failed("the questions were not answered".into()));
            self.state = AgentState::Fail;
            return false;
        };
        // The store has them already (one entry per answer, written by whoever answered); this is the
        // round's own copy of the board, the same the store gives a rebuilt round.
        for (i, q) in questions.iter().enumerate() {
            let a = answers.get(i).cloned().unwrap_or_default();
            Arc::make_mut(&mut self.blackboard).add_question(q, &a);
        }
        self.state = AgentState::Continue;
        true
    }

    pub(super) fn trajectory(
        &mut self,
        local: &mut Values,
        carry: &mut Carry,
    ) -> Map<String, Value> {
        let item = local.take(MEMORY_ITEM).ok().flatten().unwrap_or_default();
        if let Some(t) = local.take(TRAJECTORY).ok().flatten() {
            Arc::make_mut(&mut self.blackboard).add_trajectory(t.clone());
            carry.blackboard.push(entry(
                v1::BlackboardKind::Trajectory,
                0,
                Value::Object(t),
                String::new(),
            ));
        }
        item.0
    }
}
