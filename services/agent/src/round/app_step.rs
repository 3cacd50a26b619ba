//! An AppAgent step and the AppAgent FSM transition after it (seed 001; FINISH and FAIL return control
//! to the HostAgent, FAIL bounded by the re-plan limit).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use super::output::StepOutput;
use super::record::{Carry, artifact, derived_artifact};
use super::{Held, Round, RoundEnd};
use crate::agents::action::ActionRecord;
use crate::agents::keys::*;
use crate::agents::target::TargetInfo;
use crate::memory::MemoryItem;
use crate::memory::blackboard::entry;
use crate::round::control::HeldAction;
use crate::round::state::{AgentState, AppStatus};

use super::resume::label;
use super::step::{phases, ran, unfinished};

impl Round {
    pub(super) async fn app_step(&mut self, key: &str, mut carry: Carry) -> StepOutput {
        self.begin();
        let row = self.row();
        let was = self.active.clone();
        let globals = Arc::new(self.globals());
        let Some(agent) = self.apps.get(key) else {
            self.end = Some(RoundEnd::Failed(format!("no AppAgent for {key}")));
            let totals = Default::default();
            return self.finish(row, &[], totals, Map::new(), carry, &AgentState::Error);
        };
        let (mut local, result, error) = ran(self.app_proc.process(agent, globals).await);
        let response = local.take(APP_RESPONSE).ok().flatten().unwrap_or_default();
        let actions = local.take(ACTIONS).ok().flatten().unwrap_or_default();
        let totals = local.take(LLM_TOTALS).ok().flatten().unwrap_or_default();
        let controls = local.take(CONTROLS).ok().flatten().unwrap_or_default();
        let clean = local.take(CLEAN_SCREENSHOT).ok().flatten();
        let annotation = local.take(ANNOTATION).ok().flatten();
        let selected = local.take(SELECTED_CONTROL_SCREENSHOT).ok().flatten();
        let crop = local.take(SELECTED_CONTROL_RECIPE).ok().flatten();
        let saved = local.take(SAVED_IMAGE).ok().flatten();
        let warnings = local.take(WARNINGS).ok().flatten().unwrap_or_default();
        let stays = local.take(crate::replay::REPLAY_STAYS).ok().flatten();
        let memory = self.trajectory(&mut local, &mut carry);
        let mut artifacts = Vec::new();
        let app_root = key.to_owned();
        if let Some(agent) = self.apps.get_mut(key) {
            agent.memory.push(MemoryItem(memory.clone()));
            if selected.is_some() {
                agent.last_control = selected;
            }
        }
        if let Some(img) = saved {
            if let Some(shot) = &img.screenshot {
                artifacts.push(artifact(
                    v1::ArtifactKind::CleanScreenshot,
                    shot,
                    Value::Object(img.metadata.clone()),
                ));
            }
            carry.blackboard.push(entry(
                v1::BlackboardKind::Image,
                0,
                Value::Object(img.metadata.clone()),
                String::new(),
            ));
            Arc::make_mut(&mut self.blackboard).images.push(img);
        }
        let status = response.status.clone();
        let agent_name = self.active_name();
        let confirm = status == AppStatus::Confirm;
        let batch = crate::agents::app::strategies::batch(&response);
        let held = self.holds(&batch, &actions, confirm, status.acts());
        let after = if let Some(e) = &error {
            self.app_error(&agent_name, e)
        } else if let (Some(hold), Some(first)) = (held, response.actions.first()) {
            let first = label(first);
            let target = controls.iter().find(|c| first.as_ref() == Some(&c.label));
            let info = HeldAction::batch(
                agent_name.clone(),
                &response.actions,
                target.map(|c| c.name.clone()).unwrap_or_default(),
                hold.reason(&response.comment),
                self.session_step,
            );
            // Only the controls the held actions name: that is all running them looks up.
            let names = |c: &&TargetInfo| {
                response
                    .actions
                    .iter()
                    .any(|a| label(a).as_ref() == Some(&c.label))
            };
            let named = controls.iter().filter(names).cloned().collect();
            let h = Held::App {
                actions: response.actions.clone(),
                controls: named,
                status: status.clone(),
                result: response.result.clone(),
                questions: response.questions.clone(),
            };
            self.hold(h, info)
        } else {
            // A replayed step takes its recording's transition: a FINISH the recording looked again
            // after stays unfinished, one it acted on finishes whatever this run's batch was seen to
            // change (a failed action still does not finish).
            let unfinished = match stays {
                Some(stays) => stays || ActionRecord::any_failed(&actions),
                None => unfinished(&actions),
            };
            self.app_transition(&status, &response.result, &response.questions, unfinished)
        };
        self.settle(&was, &after);
        let mut extra = Map::new();
        extra.insert("result".into(), json!(response.result));
        extra.insert("questions".into(), json!(response.questions));
        extra.insert("application".into(), json!(app_root));
        extra.insert("controls".into(), json!(controls.len()));
        if let Some(shot) = &clean {
            extra.insert("acted".into(), acted(&actions, shot));
        }
        if let Some(e) = &error {
            extra.insert("error".into(), json!(e));
        }
        if !warnings.is_empty() {
            extra.insert("warnings".into(), json!(warnings));
        }
        crate::replay::mark(&mut local, &mut extra);
        let step = self.session_step;
        let knowledge =
            super::output::knowledge(&mut local, &mut extra, &agent_name, &app_root, step);
        let step = v1::Step {
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
        let step = record.step.step;
        record.events.extend(knowledge);
        record.events.extend(warnings.into_iter().map(|message| {
            let payload = json!({"source": "app_agent", "message": message});
            super::output::draft(v1::EventKind::Warning, payload, step)
        }));
        if let Some(shot) = clean {
            let extra = json!({"application": app_root});
            let kind = v1::ArtifactKind::CleanScreenshot;
            record.artifacts.push(artifact(kind, &shot, extra));
        }
        // The annotated image and the crop are recipes over the clean screenshot (drawn again on read).
        for (kind, derived) in [
            (v1::ArtifactKind::AnnotatedScreenshot, annotation),
            (v1::ArtifactKind::SelectedControlScreenshot, crop),
        ] {
            if let Some(d) = derived {
                let extra = json!({"application": app_root});
                record.artifacts.push(derived_artifact(kind, &d, extra));
            }
        }
        record.artifacts.extend(artifacts);
        record
    }
}

/// What the step acted on, in the screenshot's pixels, for viewers to draw over it: per action with a
/// located target, its label, rectangle `[left, top, right, bottom]` and click point (the centre, where
/// the executor clicks a control).
fn acted(
    actions: &[crate::agents::action::ActionRecord],
    shot: &crate::vision::Screenshot,
) -> Value {
    actions
        .iter()
        .filter_map(|a| {
            let target = a.target.as_ref()?;
            let r = shot.to_pixels(target.rect?);
            Some(json!({
                "function": a.function,
                "label": target.label,
                "rect": [r.left, r.top, r.right, r.bottom],
                "point": [(r.left + r.right) / 2, (r.top + r.bottom) / 2],
            }))
        })
        .collect()
}
