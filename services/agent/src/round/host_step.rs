//! A HostAgent step and the HostAgent FSM transition after it (seed 002; ASSIGN caches AppAgents per
//! application).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use super::record::{Carry, artifact};
use super::{Active, Round, RoundEnd};
use crate::agents::keys::*;
use crate::control::HeldAction;
use crate::memory::MemoryItem;
use crate::response::{AgentState, HostStatus, Outcome};
use crate::runner::StepOutput;
use crate::target::TargetKind;

use super::step::{failed, phases};

impl Round {
    pub(super) async fn host_step(&mut self, mut carry: Carry) -> StepOutput {
        self.begin();
        let row = self.row();
        let was = self.active.clone();
        let (mut local, result, error) = match self
            .host_proc
            .process(&self.host, Arc::new(self.globals()))
            .await
        {
            Ok(o) => (o.output, o.result, None),
            Err(f) => (f.local, f.result, Some(crate::failure::user_text(&f.error))),
        };
        let response = local.take(HOST_RESPONSE).ok().flatten().unwrap_or_default();
        let actions = local.take(ACTIONS).ok().flatten().unwrap_or_default();
        let totals = local.take(LLM_TOTALS).ok().flatten().unwrap_or_default();
        let registry = local
            .take(TARGET_REGISTRY)
            .ok()
            .flatten()
            .unwrap_or_default();
        let selected = local.take(SELECTED_TARGET).ok().flatten();
        let desktop = local.take(DESKTOP_SCREENSHOT).ok().flatten();
        let memory = self.trajectory(&mut local, &mut carry);
        self.host.memory.push(MemoryItem(memory.clone()));
        let status = response.status.clone();
        let confirm = status == HostStatus::Confirm;
        let batch = [(response.function.as_str(), &response.arguments)];
        let held = self.holds(&batch, &actions, confirm, status.acts());
        let after = if let Some(e) = &error {
            self.end = Some(RoundEnd::Failed(format!("HostAgent error: {e}")));
            AgentState::Error
        } else if let Some(hold) = held {
            let info = HeldAction {
                id: String::new(),
                agent_name: self.host.name.clone(),
                function: response.function.clone(),
                arguments_json: Value::Object(response.arguments.clone()).to_string(),
                target_name: response.control_text.clone(),
                reason: hold.reason(&response.comment),
                step: self.session_step,
            };
            self.subtask = response.current_subtask.clone();
            self.hold(
                super::Held::Host {
                    response: Box::new(response.clone()),
                    targets: registry.all().to_vec(),
                },
                info,
            )
        } else {
            self.host_transition(&status, &response, selected, failed(&actions))
        };
        self.settle(&was, &after);
        let mut extra = Map::new();
        extra.insert("message".into(), json!(response.message));
        extra.insert("questions".into(), json!(response.questions));
        extra.insert("result".into(), json!(response.result));
        extra.insert("function".into(), json!(response.function));
        if let Some(e) = &error {
            extra.insert("error".into(), json!(e));
        }
        crate::replay::mark(&mut local, &mut extra);
        let step = v1::Step {
            subtask: response.current_subtask.clone(),
            observation: response.observation.clone(),
            thought: response.thought.clone(),
            plan: response.plan.clone(),
            comment: response.comment.clone(),
            status: status.to_string(),
            phases: phases(&result),
            extra: Some(ufo_proto::json::object_to_struct(extra)),
            ..row
        };
        let mut record = self.finish(step, &actions, totals, memory, carry, &after);
        if let Some(d) = desktop {
            record
                .artifacts
                .push(artifact(v1::ArtifactKind::DesktopScreenshot, &d, json!({})));
        }
        record
    }

    pub(super) fn host_transition(
        &mut self,
        status: &HostStatus,
        response: &crate::response::HostResponse,
        selected: Option<crate::target::TargetInfo>,
        acted_failed: bool,
    ) -> AgentState {
        match status {
            HostStatus::Continue | HostStatus::Confirm => AgentState::Continue,
            HostStatus::Assign => {
                self.subtask = response.current_subtask.clone();
                self.host_message = response.message.clone();
                match selected {
                    Some(t) if t.kind == TargetKind::ThirdPartyAgent => {
                        // Third-party agents are registered for selection, but none runs in this service:
                        // the subtask is archived as failed so the HostAgent re-plans.
                        self.archive(
                            Outcome::Fail,
                            &format!("third-party agent {} is not available here", t.name),
                        );
                        AgentState::Continue
                    }
                    Some(t) if !acted_failed => {
                        let key = t.app_root();
                        if !self.apps.contains_key(&key) {
                            let agent = self.app_for(t.clone());
                            self.apps.insert(key.clone(), agent);
                        }
                        let Some(app) = self.apps.get_mut(&key) else {
                            return AgentState::Error;
                        };
                        app.window = t;
                        self.active = Active::App(key);
                        AgentState::Assign
                    }
                    // The selection failed; the HostAgent sees it in memory and decides again.
                    _ => AgentState::Continue,
                }
            }
            HostStatus::Pending => self.ask(response.questions.clone()),
            HostStatus::Finish => {
                let result = if response.result.is_empty() {
                    &response.comment
                } else {
                    &response.result
                };
                self.end = Some(RoundEnd::Finished(result.clone()));
                AgentState::Finish
            }
            HostStatus::Fail => {
                self.end = Some(RoundEnd::Failed(format!(
                    "HostAgent gave up: {}",
                    response.comment
                )));
                AgentState::Fail
            }
            HostStatus::Other(other) => {
                self.end = Some(RoundEnd::Failed(format!(
                    "HostAgent returned status {other:?}"
                )));
                AgentState::Error
            }
        }
    }
}
