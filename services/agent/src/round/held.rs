//! Resolving a held action (CONFIRM): approval runs it after checking its controls again, rejection
//! finishes the subtask as REJECTED.

use std::time::SystemTime;

use serde_json::{Value, json};
use ufo_proto::v1;

use super::record::{Carry, StepRecord, event};
use super::{Active, Decision, Held, Round, RoundEnd};
use crate::agents::action::{ActionRecord, Precheck, run_actions};
use crate::agents::host::strategies::run_host_function;
use crate::dispatch::{CommandResult, ResultStatus};
use crate::memory::MemoryItem;

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
    };
    match held {
        Held::Host { response, .. } => {
            draft_status.clone_from(&response.status);
            actions.push(ActionRecord {
                function: response.function.clone(),
                arguments: response.arguments.clone(),
                status: response.status.clone(),
                target: None,
                result: result(),
            });
        }
        Held::App {
            actions: specs,
            controls,
            status,
        } => {
            *draft_status = status;
            actions.extend(specs.into_iter().map(|spec| {
                let label = super::resume::label(&spec);
                ActionRecord {
                    target: controls
                        .iter()
                        .find(|c| label.as_deref() == Some(c.label.as_str()))
                        .cloned(),
                    function: spec.function,
                    arguments: spec.arguments,
                    status: spec.status,
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
        info: v1::HeldAction,
        decision: Decision,
        mut carry: Carry,
    ) -> StepRecord {
        self.begin();
        let started = SystemTime::now();
        let payload = json!({"approve": decision.approve, "reason": decision.reason, "held_step": info.step,
                "already_started": decision.already_started});
        let kind = if decision.approve {
            v1::EventKind::ActionApproved
        } else {
            v1::EventKind::ActionRejected
        };
        carry.events.push(event(kind, payload, 0, 0));
        let was = self.active.clone();
        let mut draft = self.empty_draft("CONFIRM".into(), started);
        draft.comment = decision.reason.clone();
        draft.kind = match held {
            Held::Host { .. } => v1::AgentKind::Host,
            Held::App { .. } => v1::AgentKind::App,
        };
        let rejected = || format!("the user rejected {}: {}", info.function, decision.reason);
        let after: String = match (held, decision.approve) {
            (held, true) if decision.already_started => {
                draft.comment = UNKNOWN_OUTCOME.into();
                unknown_outcome(held, &mut draft.actions, &mut draft.status);
                // The agent that proposed it stays active and looks at the screen again before deciding.
                "CONTINUE".into()
            }
            (Held::Host { response, registry }, true) => {
                draft.status = response.status.clone();
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
                        let status = if response.status == "CONFIRM" {
                            "CONTINUE"
                        } else {
                            response.status.as_str()
                        };
                        self.host_transition(status, &response, target, failed, &mut carry)
                    }
                    Err(e) => {
                        self.end = Some(RoundEnd::Failed(format!("executor unreachable: {e}")));
                        "ERROR".into()
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
                draft.status = status.clone();
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
                        let next = if status == "CONFIRM" {
                            "CONTINUE"
                        } else {
                            status.as_str()
                        };
                        self.app_transition(next, "", &[], failed, &mut carry)
                    }
                    Err(e) => {
                        self.end = Some(RoundEnd::Failed(format!("executor unreachable: {e}")));
                        "ERROR".into()
                    }
                }
            }
            (Held::Host { .. }, false) => {
                self.archive("REJECTED", &rejected());
                "CONTINUE".into()
            }
            (Held::App { .. }, false) => {
                self.archive("REJECTED", &rejected());
                self.active = Active::Host;
                "FINISH".into()
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
                    "APPROVED_OUTCOME_UNKNOWN"
                } else if decision.approve {
                    "APPROVED"
                } else {
                    "REJECTED"
                },
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
