//! Resolving a held action (CONFIRM): approval runs it after checking its controls again, rejection
//! finishes the subtask as REJECTED.

use super::output::StepOutput;
use super::record::Carry;
use super::{Active, Decision, Held, Round, RoundEnd};
use crate::agents::action::{ActionRecord, Precheck, run_actions};
use crate::agents::host::strategies::run_host_function;
use crate::agents::target::TargetRegistry;
use crate::memory::MemoryItem;
use crate::round::control::HeldAction;
use crate::round::state::{AgentState, AppStatus, HostStatus, Outcome};

impl Round {
    /// Runs or rejects the held action and records that as a step. The decision's event was written once,
    /// by whoever made it; this step records what followed. An approved action whose runner stopped while
    /// running it is not here: the runner that took the task over recorded it from its intent with an
    /// unknown outcome (see `runner::intent`).
    pub(super) async fn resolve_held(
        &mut self,
        held: Held,
        info: HeldAction,
        decision: Decision,
        carry: Carry,
    ) -> StepOutput {
        self.begin();
        let mut step = self.row();
        step.comment.clone_from(&decision.reason);
        let was = self.active.clone();
        let mut actions = Vec::new();
        let after = if !decision.approve {
            let why = format!("the user rejected {}: {}", info.function, decision.reason);
            self.archive(Outcome::Rejected, &why);
            if matches!(held, Held::App { .. }) {
                self.active = Active::Host;
                AgentState::Finish
            } else {
                AgentState::Continue
            }
        } else {
            let ran = match &held {
                Held::Host { response, targets } => {
                    step.status = response.status.to_string();
                    let mut registry = TargetRegistry::new();
                    // Registration order is label order, so re-registering gives every target its label back.
                    registry.register(targets.clone());
                    let settings = &self.services.settings;
                    run_host_function(self.dispatcher.as_ref(), response, &registry, settings)
                        .await
                        .map(|(record, target)| (vec![record], target))
                }
                Held::App {
                    actions,
                    controls,
                    status,
                    ..
                } => {
                    step.status = status.to_string();
                    // Time has passed while the action was held: check every control, the first included.
                    let precheck = if self.services.settings.precheck_controls {
                        Precheck::All
                    } else {
                        Precheck::Off
                    };
                    let p = &self.services.settings.policy;
                    run_actions(self.dispatcher.as_ref(), actions, controls, precheck, p)
                        .await
                        .map(|records| (records, None))
                }
            };
            match ran {
                Err(e) => {
                    self.end = Some(RoundEnd::Failed(crate::round::failure::user_text(&e)));
                    AgentState::Error
                }
                Ok((records, target)) => {
                    let failed = ActionRecord::any_failed(&records);
                    actions = records;
                    // Approved: it runs as if the model had said CONTINUE (or what it said besides).
                    match held {
                        Held::Host { response, .. } => {
                            let status = match &response.status {
                                HostStatus::Confirm => HostStatus::Continue,
                                other => other.clone(),
                            };
                            self.host_transition(&status, &response, target, failed)
                        }
                        Held::App {
                            status,
                            result,
                            questions,
                            ..
                        } => {
                            let next = match status {
                                AppStatus::Confirm => AppStatus::Continue,
                                other => other,
                            };
                            let unfinished = super::step::unfinished(&actions);
                            self.app_transition(&next, &result, &questions, unfinished)
                        }
                    }
                }
            }
        };
        self.settle(&was, &after);
        let outcome = if decision.approve {
            Outcome::Approved
        } else {
            Outcome::Rejected
        };
        let mut memory = MemoryItem::new();
        memory
            .set("agent_name", step.agent_name.clone())
            .set("session_step", self.session_step)
            .set("step", self.session_step)
            .set("status", outcome.to_string())
            .set("confirmation_reason", decision.reason.clone());
        ActionRecord::remember(&actions, &mut memory, crate::agents::action::ERROR_CHARS);
        match &self.active {
            Active::Host => self.host.memory.push(memory.clone()),
            Active::App(k) => {
                if let Some(a) = self.apps.get_mut(k) {
                    a.memory.push(memory.clone());
                }
            }
            Active::Agent(server) => self
                .third
                .entry(server.clone())
                .or_default()
                .push(memory.clone()),
        }
        self.finish(step, &actions, Default::default(), memory.0, carry, &after)
    }
}
