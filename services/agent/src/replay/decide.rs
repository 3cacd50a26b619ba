//! The seam between a replay and the agents: for replayed step `n`, the reply the model would have given
//! — the recorded step `n`'s reply with each action's target found again by its selector in what this step
//! observed. The LLM-interaction strategies call [`app_reply`] / [`host_reply`] instead of the model when
//! the task is a replay; everything else (observing, acting, recording) runs as in any step.
//!
//! Coordinates are never replayed, except by `click_on_coordinates` (and `drag_on_coordinates`), whose
//! recorded arguments are the coordinates: the step's mark says so.

use serde_json::{Value, json};

use super::plan::{OnMismatch, RecordedStep, ReplaySpec, StepAgent};
use super::wait::{Waited, only_waited};
use crate::agents::response::{ActionSpec, AppResponse, HostResponse};
use crate::agents::target::TargetInfo;
use crate::memory::MemoryItem;

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

impl<T> Decision<T> {
    /// The same decision, its reply (if any) mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decision<U> {
        match self {
            Decision::Replayed(reply, mark) => Decision::Replayed(f(reply), mark),
            Decision::Model(mark) => Decision::Model(mark),
        }
    }
}

/// A replayed step that cannot go on (`on_mismatch: fail`): the message names the step and the selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Mismatch(pub String);

fn mark(spec: &ReplaySpec, step: u64, source: &str, note: Option<String>) -> Value {
    let mut m = json!({"of": spec.of, "step": step, "source": source});
    if spec.reuse.is_some() {
        // A reused step (docs/knowledge.md "Reuse"): stored as `Step.extra.reuse`.
        m["reuse"] = json!(true);
        if source == "recording" {
            m["source"] = json!("reused");
        }
    }
    if let Some(note) = note {
        m["note"] = json!(note);
    }
    m
}

/// Why replayed step `n` cannot go on: the step that went wrong (`n`, or the one before it when its
/// replayed action failed) and what went wrong.
struct Why {
    at: u64,
    what: String,
}

impl Why {
    fn at(at: u64, what: String) -> Self {
        Self { at, what }
    }
}

fn decided<T>(
    spec: &ReplaySpec,
    n: u64,
    reply: Result<(T, Option<String>), Why>,
) -> Result<Decision<T>, Mismatch> {
    match reply {
        Ok((reply, note)) => Ok(Decision::Replayed(reply, mark(spec, n, "recording", note))),
        Err(Why { at, what }) => match spec.on_mismatch {
            OnMismatch::Model => {
                tracing::info!(step = n, %what, "replay falls back to the model");
                Ok(Decision::Model(mark(spec, n, "model", Some(what))))
            }
            OnMismatch::Fail => Err(Mismatch(format!(
                "replay of task {} failed at step {at}: {what}",
                spec.of
            ))),
        },
    }
}

/// When the replayed step before `n` (the agent's `previous` memory item) ran a recorded action that
/// failed — its control was found by selector but the action did not work (e.g. the control is off the
/// screen) — why step `n` cannot simply replay on: that action, its selector and the executor's error.
/// A step the model decided (a fallback) is left to the model's next look.
fn failed_before(spec: &ReplaySpec, n: u64, previous: Option<&MemoryItem>) -> Option<Why> {
    let prev = previous?;
    let at = n.checked_sub(1)?;
    if prev.get("step").and_then(Value::as_u64) != Some(at) {
        return None;
    }
    let recorded = spec.step(at)?;
    let actions = prev.get("action")?.as_array()?;
    let (i, failed) = actions
        .iter()
        .enumerate()
        .find(|(_, a)| matches!(a["outcome"].as_str(), Some("failure" | "denied")))?;
    let function = failed["function"].as_str().unwrap_or_default();
    let same = recorded.actions.get(i).filter(|a| a.function == function);
    if same.is_some_and(|a| a.failed) {
        // It failed when recorded too, and the recording went on: so does the replay.
        return None;
    }
    let selector = same
        .and_then(|a| a.selector.as_ref())
        .map(|s| format!(" on {}", s.describe()))
        .unwrap_or_default();
    let error = failed["result"]["error"].as_str().unwrap_or_default();
    Some(Why {
        at,
        what: format!(
            "the replayed {function}{selector} (recorded step {at}) failed: {}",
            if error.is_empty() {
                "no reason given"
            } else {
                error
            }
        ),
    })
}

fn recorded(spec: &ReplaySpec, n: u64, agent: StepAgent) -> Result<&RecordedStep, Why> {
    let step = spec.step(n).ok_or_else(|| {
        Why::at(
            n,
            format!(
                "the recording has {} steps; step {n} has none to replay",
                spec.steps.len()
            ),
        )
    })?;
    if step.agent != agent {
        return Err(Why::at(
            n,
            format!(
                "recorded step {n} was taken by the {}, but the {} is active now",
                name(step.agent),
                name(agent)
            ),
        ));
    }
    if let Some(server) = &step.third_party {
        return Err(Why::at(
            n,
            format!(
                "recorded step {n} was taken by the third-party agent {server}, but the {} is active now",
                name(agent)
            ),
        ));
    }
    Ok(step)
}

/// The recorded step `n` when the third-party agent `server` took it.
fn recorded_third<'a>(spec: &'a ReplaySpec, n: u64, server: &str) -> Result<&'a RecordedStep, Why> {
    let step = spec.step(n).ok_or_else(|| {
        Why::at(
            n,
            format!(
                "the recording has {} steps; step {n} has none to replay",
                spec.steps.len()
            ),
        )
    })?;
    match (&step.third_party, step.agent) {
        (Some(s), StepAgent::App) if s == server => Ok(step),
        (Some(s), _) => Err(Why::at(
            n,
            format!(
                "recorded step {n} was taken by the third-party agent {s}, but {server} is active now"
            ),
        )),
        (None, agent) => Err(Why::at(
            n,
            format!(
                "recorded step {n} was taken by the {}, but the third-party agent {server} is active now",
                name(agent)
            ),
        )),
    }
}

/// The AppAgent-shaped reply of recorded `step` with `actions`.
fn app_response(step: &RecordedStep, actions: Vec<ActionSpec>) -> AppResponse {
    AppResponse {
        observation: step.observation.clone(),
        thought: step.thought.clone(),
        plan: step.plan.clone(),
        comment: step.comment.clone(),
        actions,
        status: step.status.clone().into(),
        result: step.result.clone(),
        questions: step.questions.clone(),
        ..AppResponse::default()
    }
}

fn name(a: StepAgent) -> &'static str {
    match a {
        StepAgent::Host => "HostAgent",
        StepAgent::App => "AppAgent",
    }
}

/// Joins the notes of a step's mark.
fn join(notes: Vec<String>) -> Option<String> {
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// The AppAgent's reply for replayed step `n`, its targets found among `controls` (this step's listing);
/// `previous` is the agent's memory of its step before (a replayed action that failed there stops the
/// replay, or hands this step to the model); `waited` is how the step waited for its targets
/// ([`super::wait`]): a mismatch says how long, and a step that only waited and waited for the next
/// step's targets instead drops its recorded pauses.
pub fn app_reply(
    spec: &ReplaySpec,
    n: u64,
    controls: &[TargetInfo],
    previous: Option<&MemoryItem>,
    waited: Option<&Waited>,
) -> Result<Decision<AppResponse>, Mismatch> {
    if let Some(why) = failed_before(spec, n, previous) {
        return decided(spec, n, Err(why));
    }
    let clause = waited.map(Waited::clause).unwrap_or_default();
    let reply = recorded(spec, n, StepAgent::App).and_then(|step| {
        let mut actions = Vec::new();
        let mut notes: Vec<String> = waited.and_then(Waited::note).into_iter().collect();
        let paused_for_next = waited.is_some_and(|w| w.for_next) && only_waited(step);
        if paused_for_next && !step.actions.is_empty() && notes.is_empty() {
            notes.push(
                "the recorded wait was not replayed: the next recorded step's targets were listed"
                    .into(),
            );
        }
        for a in &step.actions {
            if paused_for_next {
                // The pause was honoured by waiting for what came next (the note says how long).
                continue;
            }
            let mut arguments = a.arguments.clone();
            if COORDINATE_FUNCTIONS.contains(&a.function.as_str()) {
                notes.push(format!("{} replays its recorded coordinates", a.function));
            } else if arguments.contains_key("id") {
                let Some(selector) = &a.selector else {
                    return Err(Why::at(
                        n,
                        format!("{} of recorded step {n} has no selector", a.function),
                    ));
                };
                let found = selector.find(controls).ok_or_else(|| {
                    Why::at(
                        n,
                        format!(
                            "no control matches the selector of {} (recorded step {n}): {}{clause}",
                            a.function,
                            selector.describe()
                        ),
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
        Ok((app_response(step, actions), join(notes)))
    });
    decided(spec, n, reply)
}

/// The reply of the third-party agent `server` for replayed step `n`: the recorded calls with their
/// recorded arguments (a replayed API action runs the same call; there are no targets to find again).
/// `previous` is the agent's memory of its step before, as for [`app_reply`]. A reused plan's
/// third-party steps are the model's (their arguments often carry what earlier steps read off the
/// screen, which a new request changes); the step's mark says so.
pub fn third_reply(
    spec: &ReplaySpec,
    n: u64,
    server: &str,
    previous: Option<&MemoryItem>,
) -> Result<Decision<AppResponse>, Mismatch> {
    if spec.reuse.is_some() {
        return Ok(Decision::Model(mark(
            spec,
            n,
            "model",
            Some(format!(
                "the third-party agent {server} decides its own steps"
            )),
        )));
    }
    if let Some(why) = failed_before(spec, n, previous) {
        return decided(spec, n, Err(why));
    }
    let reply = recorded_third(spec, n, server).map(|step| {
        let actions = step
            .actions
            .iter()
            .map(|a| ActionSpec {
                function: a.function.clone(),
                arguments: a.arguments.clone(),
                status: a.status.clone().into(),
            })
            .collect();
        (app_response(step, actions), None)
    });
    decided(spec, n, reply)
}

/// The HostAgent's reply for replayed step `n`, the window it selects found among `targets`; `waited`
/// as for [`app_reply`].
pub fn host_reply(
    spec: &ReplaySpec,
    n: u64,
    targets: &[TargetInfo],
    waited: Option<&Waited>,
) -> Result<Decision<HostResponse>, Mismatch> {
    let clause = waited.map(Waited::clause).unwrap_or_default();
    let reply = recorded(spec, n, StepAgent::Host).and_then(|step| {
        let mut arguments = serde_json::Map::new();
        let (mut label, mut text) = (String::new(), String::new());
        if let Some(a) = step.actions.iter().find(|a| a.function == step.function) {
            arguments = a.arguments.clone();
            if step.function == "select_application_window" {
                let Some(selector) = &a.selector else {
                    return Err(Why::at(n, format!("the window selection of recorded step {n} has no selector")));
                };
                let found = selector.find(targets).ok_or_else(|| {
                    Why::at(n, format!(
                        "no window matches the selector of select_application_window (recorded step {n}): {}{clause}",
                        selector.describe()
                    ))
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
        Ok((response, waited.and_then(Waited::note)))
    });
    decided(spec, n, reply)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::replay::plan::RecordedAction;
    use crate::replay::selector::Selector;

    fn spec(on_mismatch: OnMismatch, failed_when_recorded: bool) -> ReplaySpec {
        let click = RecordedAction {
            function: "click_input".into(),
            arguments: serde_json::Map::from_iter([("id".to_owned(), json!("5"))]),
            status: "CONTINUE".into(),
            selector: Some(Selector {
                control_type: "ListItem".into(),
                name: "Otto".into(),
                ..Selector::default()
            }),
            failed: failed_when_recorded,
        };
        let step =
            |n: u64, actions: Vec<RecordedAction>| RecordedStep::blank(n, StepAgent::App, actions);
        ReplaySpec {
            of: "t1".into(),
            on_mismatch,
            steps: vec![step(1, vec![click]), step(2, Vec::new())],
            follow_ups: Vec::new(),
            reuse: None,
        }
    }

    /// The agent's memory of step `n` whose click ended with `outcome`.
    fn memory(n: u64, outcome: &str) -> MemoryItem {
        let mut m = MemoryItem::new();
        m.set("step", n).set(
            "action",
            json!([{"function": "click_input", "outcome": outcome,
                    "result": {"error": "ListItem 'Otto' is off the screen"}}]),
        );
        m
    }

    #[test]
    fn a_replayed_action_that_failed_stops_the_replay_naming_its_step_and_selector() {
        let failed = memory(1, "failure");
        let e = app_reply(&spec(OnMismatch::Fail, false), 2, &[], Some(&failed), None).unwrap_err();
        assert_eq!(
            e.0,
            "replay of task t1 failed at step 1: the replayed click_input on ListItem \"Otto\" \
             (sibling 0) (recorded step 1) failed: ListItem 'Otto' is off the screen"
        );
        // With the model allowed, the model decides the next step, told why.
        match app_reply(&spec(OnMismatch::Model, false), 2, &[], Some(&failed), None).unwrap() {
            Decision::Model(mark) => {
                assert_eq!(mark["source"], "model");
                assert!(mark["note"].as_str().unwrap().contains("off the screen"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failure_the_recording_had_too_or_an_earlier_one_does_not_stop_the_replay() {
        let failed = memory(1, "failure");
        // The recording failed there as well and went on: replay step 2 as recorded.
        let d = app_reply(&spec(OnMismatch::Fail, true), 2, &[], Some(&failed), None).unwrap();
        assert!(matches!(d, Decision::Replayed(..)), "{d:?}");
        // A success, or a memory of another step, is no reason either.
        let ok = memory(1, "success");
        let d = app_reply(&spec(OnMismatch::Fail, false), 2, &[], Some(&ok), None).unwrap();
        assert!(matches!(d, Decision::Replayed(..)), "{d:?}");
        let d = app_reply(
            &spec(OnMismatch::Fail, false),
            2,
            &[],
            Some(&memory(7, "failure")),
            None,
        );
        assert!(matches!(d.unwrap(), Decision::Replayed(..)));
    }

    fn third_spec(reuse: bool) -> ReplaySpec {
        let write = RecordedAction {
            function: "mcp__files__write_file".into(),
            arguments: serde_json::Map::from_iter([
                ("path".to_owned(), json!("/tmp/out.txt")),
                ("content".to_owned(), json!("42")),
            ]),
            status: "FINISH".into(),
            selector: None,
            failed: false,
        };
        let mut third = RecordedStep::blank(2, StepAgent::App, vec![write]);
        third.third_party = Some("files".into());
        third.status = "FINISH".into();
        third.result = "wrote 42".into();
        ReplaySpec {
            of: "t1".into(),
            on_mismatch: OnMismatch::Fail,
            steps: vec![RecordedStep::blank(1, StepAgent::App, Vec::new()), third],
            follow_ups: Vec::new(),
            reuse: reuse.then(|| crate::replay::plan::ReuseInfo {
                request: "old".into(),
                score: 1.0,
            }),
        }
    }

    #[test]
    fn a_third_party_step_replays_the_same_call_with_the_same_arguments() {
        match third_reply(&third_spec(false), 2, "files", None).unwrap() {
            Decision::Replayed(reply, mark) => {
                assert_eq!(reply.actions.len(), 1);
                assert_eq!(reply.actions[0].function, "mcp__files__write_file");
                assert_eq!(reply.actions[0].arguments["content"], "42");
                assert_eq!(reply.actions[0].arguments["path"], "/tmp/out.txt");
                assert_eq!(reply.status.to_string(), "FINISH");
                assert_eq!(reply.result, "wrote 42");
                assert_eq!(mark["source"], "recording");
                assert_eq!(mark["step"], 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_third_party_step_is_not_replayed_by_another_agent_or_in_a_reuse() {
        let e = third_reply(&third_spec(false), 2, "other", None).unwrap_err();
        assert!(
            e.0.contains("taken by the third-party agent files, but other is active now"),
            "{e}"
        );
        // The AppAgent at a step a third-party agent took, and a third-party agent at an AppAgent's.
        let e = app_reply(&third_spec(false), 2, &[], None, None).unwrap_err();
        assert!(
            e.0.contains("third-party agent files, but the AppAgent is active now"),
            "{e}"
        );
        let e = third_reply(&third_spec(false), 1, "files", None).unwrap_err();
        assert!(
            e.0.contains("taken by the AppAgent, but the third-party agent files"),
            "{e}"
        );
        // A reuse hands the third-party agent's steps to the model.
        match third_reply(&third_spec(true), 2, "files", None).unwrap() {
            Decision::Model(mark) => assert_eq!(mark["source"], "model"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_mismatch_says_how_long_it_waited_and_a_pause_waits_for_the_next_target_instead() {
        let waited = Waited {
            waited: std::time::Duration::from_millis(5003),
            missing: Some("ListItem \"Otto\" (sibling 0) was not listed".into()),
            looks: 5,
            ..Waited::default()
        };
        let e = app_reply(&spec(OnMismatch::Fail, false), 1, &[], None, Some(&waited)).unwrap_err();
        assert!(
            e.0.ends_with("ListItem \"Otto\" (sibling 0) (waited 5003 ms for it)"),
            "{e}"
        );
        // A recorded pause before step 1's target: dropped, the wait noted.
        let mut s = spec(OnMismatch::Fail, false);
        let pause = RecordedAction {
            function: "wait".into(),
            arguments: serde_json::Map::from_iter([("seconds".to_owned(), json!(3))]),
            status: "CONTINUE".into(),
            selector: None,
            failed: false,
        };
        s.steps[1].actions = vec![pause];
        s.steps.swap(0, 1);
        let found = Waited {
            waited: std::time::Duration::from_millis(1200),
            for_next: true,
            looks: 2,
            ..Waited::default()
        };
        match app_reply(&s, 1, &[], None, Some(&found)).unwrap() {
            Decision::Replayed(reply, mark) => {
                assert!(reply.actions.is_empty(), "{reply:?}");
                assert_eq!(
                    mark["note"],
                    "waited 1200 ms for the next recorded step's targets, instead of the recorded pause"
                );
            }
            other => panic!("{other:?}"),
        }
        // Without a wait for the next step (nothing to watch), the pause is replayed as recorded.
        match app_reply(&s, 1, &[], None, None).unwrap() {
            Decision::Replayed(reply, _) => assert_eq!(reply.actions[0].function, "wait"),
            other => panic!("{other:?}"),
        }
    }
}
