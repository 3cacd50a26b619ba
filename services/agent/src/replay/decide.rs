//! The seam between a replay and the agents: for replayed step `n`, the reply the model would have given
//! — the recorded step `n`'s reply with each action's target found again by its selector in what this step
//! observed. The LLM-interaction strategies call [`app_reply`] / [`host_reply`] instead of the model when
//! the task is a replay; everything else (observing, acting, recording) runs as in any step.
//!
//! Coordinates are never replayed, except by `click_on_coordinates` (and `drag_on_coordinates`), whose
//! recorded arguments are the coordinates: the step's mark says so.

use serde_json::{Value, json};

use super::plan::{OnMismatch, RecordedStep, ReplaySpec, StepAgent};
use crate::response::{ActionSpec, AppResponse, HostResponse};
use crate::target::TargetInfo;

/// Functions whose recorded arguments are screen coordinates.
const COORDINATE_FUNCTIONS: &[&str] = &["click_on_coordinates", "drag_on_coordinates"];

/// What decides a replayed step.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<T> {
    /// The recording: this reply, and the step's mark (`Step.extra.replay`).
    Replayed(T, Value),
    /// The model (the recorded target is missing and the task allows it); the step's mark.
    Model(Value),
}

/// A replayed step that cannot go on (`on_mismatch: fail`): the message names the step and the selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Mismatch(pub String);

fn mark(spec: &ReplaySpec, step: u64, source: &str, note: Option<String>) -> Value {
    let mut m = json!({"of": spec.of, "step": step, "source": source});
    if let Some(note) = note {
        m["note"] = json!(note);
    }
    m
}

fn decided<T>(
    spec: &ReplaySpec,
    n: u64,
    reply: Result<(T, Option<String>), String>,
) -> Result<Decision<T>, Mismatch> {
    match reply {
        Ok((reply, note)) => Ok(Decision::Replayed(reply, mark(spec, n, "recording", note))),
        Err(why) => match spec.on_mismatch {
            OnMismatch::Model => {
                tracing::info!(step = n, %why, "replay falls back to the model");
                Ok(Decision::Model(mark(spec, n, "model", Some(why))))
            }
            OnMismatch::Fail => Err(Mismatch(format!(
                "replay of task {} failed at step {n}: {why}",
                spec.of
            ))),
        },
    }
}

fn recorded(spec: &ReplaySpec, n: u64, agent: StepAgent) -> Result<&RecordedStep, String> {
    let step = spec.step(n).ok_or_else(|| {
        format!(
            "the recording has {} steps; step {n} has none to replay",
            spec.steps.len()
        )
    })?;
    if step.agent != agent {
        return Err(format!(
            "recorded step {n} was taken by the {}, but the {} is active now",
            name(step.agent),
            name(agent)
        ));
    }
    Ok(step)
}

fn name(a: StepAgent) -> &'static str {
    match a {
        StepAgent::Host => "HostAgent",
        StepAgent::App => "AppAgent",
    }
}

/// The AppAgent's reply for replayed step `n`, its targets found among `controls` (this step's listing).
pub fn app_reply(
    spec: &ReplaySpec,
    n: u64,
    controls: &[TargetInfo],
) -> Result<Decision<AppResponse>, Mismatch> {
    let reply = recorded(spec, n, StepAgent::App).and_then(|step| {
        let mut actions = Vec::new();
        let mut note = None;
        for a in &step.actions {
            let mut arguments = a.arguments.clone();
            if COORDINATE_FUNCTIONS.contains(&a.function.as_str()) {
                note = Some(format!("{} replays its recorded coordinates", a.function));
            } else if arguments.contains_key("id") {
                let Some(selector) = &a.selector else {
                    return Err(format!(
                        "{} of recorded step {n} has no selector",
                        a.function
                    ));
                };
                let found = selector.find(controls).ok_or_else(|| {
                    format!(
                        "no control matches the selector of {} (recorded step {n}): {}",
                        a.function,
                        selector.describe()
                    )
                })?;
                arguments.insert("id".into(), json!(found.label));
                if arguments.contains_key("name") {
                    arguments.insert("name".into(), json!(found.name));
                }
            }
            actions.push(ActionSpec {
                function: a.function.clone(),
                arguments,
                status: a.status.clone().into(),
            });
        }
        let response = AppResponse {
            observation: step.observation.clone(),
            thought: step.thought.clone(),
            plan: step.plan.clone(),
            comment: step.comment.clone(),
            actions,
            status: step.status.clone().into(),
            result: step.result.clone(),
            questions: step.questions.clone(),
            ..AppResponse::default()
        };
        Ok((response, note))
    });
    decided(spec, n, reply)
}

/// The HostAgent's reply for replayed step `n`, the window it selects found among `targets`.
pub fn host_reply(
    spec: &ReplaySpec,
    n: u64,
    targets: &[TargetInfo],
) -> Result<Decision<HostResponse>, Mismatch> {
    let reply = recorded(spec, n, StepAgent::Host).and_then(|step| {
        let mut arguments = serde_json::Map::new();
        let (mut label, mut text) = (String::new(), String::new());
        if let Some(a) = step.actions.iter().find(|a| a.function == step.function) {
            arguments = a.arguments.clone();
            if step.function == "select_application_window" {
                let Some(selector) = &a.selector else {
                    return Err(format!("the window selection of recorded step {n} has no selector"));
                };
                let found = selector.find(targets).ok_or_else(|| {
                    format!(
                        "no window matches the selector of select_application_window (recorded step {n}): {}",
                        selector.describe()
                    )
                })?;
                arguments.insert("id".into(), json!(found.label));
                label.clone_from(&found.label);
                text.clone_from(&found.name);
            }
        }
        let response = HostResponse {
            observation: step.observation.clone(),
            thought: step.thought.clone(),
            current_subtask: step.subtask.clone(),
            message: step.message.clone(),
            control_label: label,
            control_text: text,
            plan: step.plan.clone(),
            status: step.status.clone().into(),
            comment: step.comment.clone(),
            questions: step.questions.clone(),
            function: step.function.clone(),
            arguments,
            result: step.result.clone(),
        };
        Ok((response, None))
    });
    decided(spec, n, reply)
}
