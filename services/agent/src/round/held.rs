//! Resolving a held action (CONFIRM): approval runs it after checking its controls again, rejection
//! finishes the subtask as REJECTED.

use std::time::SystemTime;

use ufo_proto::v1;

use super::record::{Carry, StepRecord};
use super::{Active, Decision, Held, Round, RoundEnd};
use crate::agents::action::{ActionRecord, Precheck, run_actions};
use crate::agents::host::strategies::run_host_function;
use crate::control::HeldAction;
use crate::dispatch::ResultStatus;
use crate::memory::MemoryItem;
use crate::response::{AgentState, AppStatus, HostStatus, Outcome};
use crate::target::TargetRegistry;

impl Round {
    /// Runs or rejects the held action and records that as a step.
    pub(super) async fn resolve_held(
        &mut self,
        held: Held,
        info: HeldAction,
        decision: Decision,
        carry: Carry,
    ) -> StepRecord {
        // The decision's event was written once, by whoever made it; this step records what followed.
        self.begin();
        let started = SystemTime::now();
        let was = self.active.clone();
        let mut draft = self.empty_draft(AgentState::Confirm, started);
        draft.comment = decision.reason.clone();
        draft.kind = match held {
            Held::Host { .. } => v1::AgentKind::Host,
            Held::App { .. } => v1::AgentKind::App,
        };
        let rejected = || format!("the user rejected {}: {}", info.function, decision.reason);
        // An approved action whose runner stopped while running it is not here: the runner that took the
        // task over recorded it from its intent with an unknown outcome (see `runner::intent`).
        let after = match (held, decision.approve) {
            (Held::Host { response, targets }, true) => {
                draft.status = response.status.to_string();
                let mut registry = TargetRegistry::new();
                // Registration order is label order, so re-registering gives every target its label back.
                registry.register(targets);
                match run_host_function(
                    self.dispatcher.as_ref(),
                    &response,
                    &registry,
                    &self.services.settings,
                )
                .await
                {
                    Ok((record, target)) => {
                        let failed = record.result.status == ResultStatus::Failure;
                        draft.actions.push(record);
                        let status = match &response.status {
                            HostStatus::Confirm => HostStatus::Continue,
                            other => other.clone(),
                        };
                        self.host_transition(&status, &response, target, failed)
                    }
                    Err(e) => {
                        self.end = Some(RoundEnd::Failed(crate::failure::user_text(&e)));
                        AgentState::Error
                    }
                }
            }
            (
                Held::App {
                    actions,
                    controls,
                    status,
                },
                true,
            ) => {
                draft.status = status.to_string();
                // Time has passed while the action was held: check every control, the first included.
                let precheck = if self.services.settings.precheck_controls {
                    Precheck::All
                } else {
                    Precheck::Off
                };
                let policy = &self.services.settings.policy;
                match run_actions(
                    self.dispatcher.as_ref(),
                    &actions,
                    &controls,
                    precheck,
                    policy,
                )
                .await
                {
                    Ok(records) => {
                        let failed = records
                            .iter()
                            .any(|r| r.result.status == ResultStatus::Failure);
                        draft.actions = records;
                        let next = match status {
                            AppStatus::Confirm => AppStatus::Continue,
                            other => other,
                        };
                        self.app_transition(&next, "", &[], failed)
                    }
                    Err(e) => {
                        self.end = Some(RoundEnd::Failed(crate::failure::user_text(&e)));
                        AgentState::Error
                    }
                }
            }
            (Held::Host { .. }, false) => {
                self.archive(Outcome::Rejected, &rejected());
                AgentState::Continue
            }
            (Held::App { .. }, false) => {
                self.archive(Outcome::Rejected, &rejected());
                self.active = Active::Host;
                AgentState::Finish
            }
        };
        self.settle(&was, &after);
        let mut memory = MemoryItem::new();
        memory
            .set("agent_name", draft.agent.clone())
            .set("session_step", self.session_step)
            .set("step", self.session_step)
            .set(
                "status",
                if decision.approve {
                    Outcome::Approved
                } else {
                    Outcome::Rejected
                }
                .to_string(),
            )
            .set("confirmation_reason", decision.reason.clone())
            .set("action", Round::actions_json(&draft.actions))
            .set(
                "action_representation",
                draft
                    .actions
                    .iter()
                    .map(ActionRecord::representation)
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        match &self.active {
            Active::Host => self.host.memory.push(memory.clone()),
            Active::App(k) => {
                if let Some(a) = self.apps.get_mut(k) {
                    a.memory.push(memory.clone());
                }
            }
        }
        self.finish(draft, memory.0, carry, &after)
    }
}
