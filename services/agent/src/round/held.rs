//! Resolving a held action (CONFIRM): approval runs it after checking its controls again, rejection
//! finishes the subtask as REJECTED.

use std::time::SystemTime;

use serde_json::Value;
use ufo_proto::v1;

use super::record::{Carry, StepRecord};
use super::{Active, Decision, Held, Round, RoundEnd};
use crate::agents::action::{ActionRecord, Precheck, run_actions};
use crate::agents::host::strategies::run_host_function;
use crate::control::HeldAction;
use crate::dispatch::{CommandResult, ResultStatus};
use crate::memory::MemoryItem;
use crate::response::{AgentState, AppStatus, HostStatus, Outcome};
use crate::target::TargetRegistry;

/// Why an approved action is recorded as not run when a resumed runner finds it already started.
const UNKNOWN_OUTCOME: &str = "an earlier runner stopped while running this approved action, before its \
result was recorded: it may or may not have happened, so it is not run again and the agent observes first";

/// Records the held actions with an unknown outcome (status `none`), without running them.
fn unknown_outcome(held: Held, actions: &mut Vec<ActionRecord>, draft_status: &mut String) {
    let result = || CommandResult {
        status: ResultStatus::None,
        error: UNKNOWN_OUTCOME.into(),
        result: Value::Null,
        call_id: String::new(),
        images: Vec::new(),
        warnings: Vec::new(),
        settle: None,
    };
    match held {
        Held::Host { response, .. } => {
            *draft_status = response.status.to_string();
            actions.push(ActionRecord {
                function: response.function.clone(),
                arguments: response.arguments.clone(),
                status: response.status.to_string(),
                target: None,
                result: result(),
            });
        }
        Held::App {
            actions: specs,
            controls,
            status,
        } => {
            *draft_status = status.to_string();
            actions.extend(specs.into_iter().map(|spec| {
                let label = super::resume::label(&spec);
                ActionRecord {
                    target: controls
                        .iter()
                        .find(|c| label.as_deref() == Some(c.label.as_str()))
                        .cloned(),
                    function: spec.function,
                    arguments: spec.arguments,
                    status: spec.status.to_string(),
                    result: result(),
                }
            }));
        }
    }
}

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
        let after = match (held, decision.approve) {
            (held, true) if decision.already_started => {
                draft.comment = UNKNOWN_OUTCOME.into();
                unknown_outcome(held, &mut draft.actions, &mut draft.status);
                // The agent that proposed it stays active and looks at the screen again before deciding.
                AgentState::Continue
            }
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
                        self.end = Some(RoundEnd::Failed(format!("executor unreachable: {e}")));
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
                match run_actions(self.dispatcher.as_ref(), &actions, &controls, precheck).await {
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
                        self.end = Some(RoundEnd::Failed(format!("executor unreachable: {e}")));
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
                if decision.approve && decision.already_started {
                    Outcome::ApprovedOutcomeUnknown
                } else if decision.approve {
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
