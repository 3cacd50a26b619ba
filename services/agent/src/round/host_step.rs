//! A HostAgent step and the HostAgent FSM transition after it (seed 002; ASSIGN caches AppAgents per
//! application).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use super::output::StepOutput;
use super::record::{Carry, artifact};
use super::{Round, RoundEnd};
use crate::agents::action::ActionRecord;
use crate::agents::keys::*;
use crate::memory::MemoryItem;
use crate::round::control::HeldAction;
use crate::round::state::{AgentState, HostStatus};

use super::step::{phases, ran};

impl Round {
    pub(super) async fn host_step(&mut self, mut carry: Carry) -> StepOutput {
        self.begin();
        let row = self.row();
        let was = self.active.clone();
        let globals = Arc::new(self.globals());
        let (mut local, result, error) = ran(self.host_proc.process(&self.host, globals).await);
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
        } else if let Some(reason) = self.host_stuck() {
            // The same function failed the same way `--host-repeat-warn` + `--host-repeat-fail`
            // times in a row: the round ends now instead of running to the step limit.
            tracing::warn!(%reason, "HostAgent makes no progress");
            self.end = Some(RoundEnd::Failed(format!("HostAgent: {reason}")));
            AgentState::Fail
        } else {
            self.host_transition(
                &status,
                &response,
                selected,
                ActionRecord::any_failed(&actions),
            )
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
        let (name, step) = (&self.host.name, self.session_step);
        let knowledge = super::output::knowledge(&mut local, &mut extra, name, "", step);
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
        record.events.extend(knowledge);
        if let Some(d) = desktop {
            record
                .artifacts
                .push(artifact(v1::ArtifactKind::DesktopScreenshot, &d, json!({})));
        }
        record
    }
}

impl Round {
    /// The no-progress reason when the HostAgent's newest steps failed the same way often enough to
    /// end the round ([`crate::agents::host::progress`]).
    fn host_stuck(&self) -> Option<String> {
        use crate::agents::common::Progress;
        match crate::agents::host::progress::judge(&self.host.memory, &self.services.settings) {
            Progress::Fail(reason) => Some(reason),
            Progress::Fine | Progress::Warn(_) => None,
        }
    }
}
