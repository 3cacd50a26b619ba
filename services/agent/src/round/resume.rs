//! Crash resume of a round: every recorded step carries, in its [`crate::round::control::StepControl`], the
//! round's state after the step ([`RoundState`]) — the active agent (and its window), the current subtask
//! and host message, the re-plan count and what running a held action needs (the proposed actions and
//! their controls, or the HostAgent's response and target list). The FSM state, the questions waited on
//! and the held action follow from the control's [`Next`]. A runner that claims the task after a
//! crash rebuilds the round from the last step's control plus the stored memory items (HostAgent and every
//! AppAgent, by agent name) and the blackboard, so the next step is the one the dead runner would have
//! produced: a held action stays held and runs (or is rejected) on the decision found in the store,
//! pending questions take the stored answers.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Active, Held, Round};
use crate::agents::action::ActionRecord;
use crate::agents::response::ActionSpec;
use crate::agents::target::TargetInfo;
use crate::dispatch::{Command, ResultStatus, execute_one};
use crate::round::control::{Next, StepControl};
use crate::round::state::AgentState;

/// The round's state after a step (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundState {
    /// The active AppAgent's application; `None` for the HostAgent.
    pub active: Option<String>,
    /// The active AppAgent's window.
    pub window: Option<TargetInfo>,
    /// The current subtask.
    pub subtask: String,
    /// The HostAgent's message for the AppAgent.
    pub host_message: String,
    /// AppAgent failures sent back to the HostAgent so far.
    pub replans: u32,
    /// The action held for confirmation, with what running it needs.
    pub held: Option<Held>,
    /// The active third-party agent's MCP server (`active` is `None` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub third_party: Option<String>,
}

/// The control label an action names (its `id` argument), if any.
pub(super) fn label(spec: &ActionSpec) -> Option<String> {
    match spec.arguments.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Round {
    /// After a restore that left an AppAgent active: selects its window again before the agent acts. If the
    /// window is gone, control returns to the HostAgent, which observes the desktop and re-plans.
    /// Returns the selection as an action of the next step (it reached the executor).
    pub(super) async fn reselect_window(&mut self) -> Option<ActionRecord> {
        let Active::App(key) = self.active.clone() else {
            return None;
        };
        let window = self.apps.get(&key).map(|a| a.window.clone())?;
        let arguments = json!({"id": window.id, "name": window.name});
        let command = Command::act("select_application_window", arguments.clone());
        let record = |result| ActionRecord {
            function: "select_application_window".into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            status: String::new(),
            target: Some(window.clone()),
            result,
        };
        match execute_one(self.dispatcher.as_ref(), command).await {
            Ok(r) if r.status == ResultStatus::Success => {
                tracing::info!(application = %key, "window selected again after resume");
                Some(record(r))
            }
            Ok(r) => {
                tracing::warn!(application = %key, error = %r.error, "window gone after resume; the HostAgent re-plans");
                self.active = Active::Host;
                self.state = AgentState::Continue;
                self.held = None;
                self.pending.clear();
                Some(record(r))
            }
            Err(e) => {
                self.end = Some(super::RoundEnd::Failed(format!(
                    "executor unreachable: {e}"
                )));
                None
            }
        }
    }

    /// The round's state after the current step (see the module doc).
    pub(super) fn state_after(&self) -> RoundState {
        let third_party = match &self.active {
            Active::Agent(server) => Some(server.clone()),
            _ => None,
        };
        let (active, window) = match &self.active {
            Active::Host | Active::Agent(_) => (None, None),
            Active::App(key) => (
                Some(key.clone()),
                self.apps.get(key).map(|a| a.window.clone()),
            ),
        };
        RoundState {
            active,
            window,
            subtask: self.subtask.clone(),
            host_message: self.host_message.clone(),
            replans: self.replans,
            held: self.held.as_ref().map(|(held, _)| held.clone()),
            third_party,
        }
    }

    /// Restores the state a step recorded in its control value. Call after [`Round::with_stored_memory`],
    /// so the active AppAgent gets its memory back. The round then continues exactly where that step left
    /// it: a held action waits for (or takes) its decision, pending questions their answers.
    pub fn restore(&mut self, control: &StepControl) -> Result<(), RestoreError> {
        let Some(snap) = control.round.as_deref() else {
            return Err(RestoreError::NoState);
        };
        match (&snap.active, &snap.window) {
            (Some(key), Some(window)) => {
                let agent = self.app_for(window.clone());
                self.apps.insert(key.clone(), agent);
                self.active = Active::App(key.clone());
                // The executor's selection may not have survived (another runner, another connection).
                self.reselect = true;
            }
            (Some(key), None) => {
                return Err(RestoreError::NoWindow(key.clone()));
            }
            (None, _) => {
                self.active = match &snap.third_party {
                    Some(server) => {
                        let name = super::third_step::agent_name(server);
                        let memory = crate::memory::Memory::from_proto(&self.stored_memory, &name);
                        self.third.insert(server.clone(), memory);
                        Active::Agent(server.clone())
                    }
                    None => Active::Host,
                }
            }
        }
        self.subtask.clone_from(&snap.subtask);
        self.host_message.clone_from(&snap.host_message);
        self.replans = snap.replans;
        // The FSM state follows from what the step decided: asking, holding, or going on.
        (self.state, self.pending, self.held) = match (&control.next, &snap.held) {
            (Next::Ask { questions }, _) => {
                let texts = questions.iter().map(|q| q.text.clone()).collect();
                (AgentState::Pending, texts, None)
            }
            (Next::Hold { action }, Some(held)) => {
                let held = Some((held.clone(), action.clone()));
                (AgentState::Confirm, Vec::new(), held)
            }
            _ => (AgentState::Continue, Vec::new(), None),
        };
        Ok(())
    }
}

/// Why a round's state could not be restored from its last step (the HostAgent then takes over from its
/// memory).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// The round has no recorded step.
    #[error("the round has no recorded step")]
    NoStep,
    /// The step's control value holds no round state.
    #[error("the step has no round state")]
    NoState,
    /// The step's control value cannot be read.
    #[error("the step's control value cannot be read: {0}")]
    BadControl(String),
    /// The stored state names an AppAgent without its window.
    #[error("the stored state names {0} without its window")]
    NoWindow(String),
}
