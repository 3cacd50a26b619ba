//! The stand-in's decisions: follow a task's demonstration using only what the prompt says.
//!
//! - **HostAgent**: a subtask is done when `[Previous subtasks]` lists it as FINISH. For the next one it
//!   assigns the listed window whose title contains the subtask's `app` (passing the previous subtask's
//!   result as the message), launches the program when the subtask says so and no such window is listed,
//!   looks again (bounded) when the window is not there yet, and fails naming the windows it saw.
//!   After the last subtask it finishes with that subtask's result.
//! - **AppAgent**: the subtask comes from `[Current subtask]`. The steps done are the longest run of the
//!   demonstration's actions that the *successful* previous actions end with, matched by tool and control
//!   name. The next step's control is looked up by kind and name in `[Available controls]`; when it is
//!   not listed the stand-in answers SCREENSHOT (bounded), then FAIL naming what it saw. A failed action is
//!   retried (bounded) and then reported as FAIL with the executor's error. When every step succeeded it
//!   answers FINISH with the texts it read (or the subtask's declared result).
//!
//! Nothing here reads ids, coordinates or state from the task beyond the demonstration: a task passes
//! only if the system observed the right window, listed the control, acted and reported truthfully.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::prompt::{AgentKind, Control, Outcome, PastAction, Prompt};
use crate::demo::{Action, Nth, Step};
use crate::task::Subtask;

/// How patient the stand-in is.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// Looks again (SCREENSHOT, or a HostAgent step without a function) at one step before giving up.
    pub max_waits: u32,
    /// Retries of one failed action (and re-assignments of one failed subtask) before giving up.
    pub max_retries: u32,
}

/// Counts the stand-in keeps between calls: only how often it waited or retried where (bounds, never
/// progress — progress is always read from the prompt).
#[derive(Debug, Default)]
pub struct Waits(HashMap<String, u32>);

impl Waits {
    fn bump(&mut self, key: String) -> u32 {
        let n = self.0.entry(key).or_insert(0);
        *n += 1;
        *n
    }
}

/// The reply (the JSON the agent parses) for one prompt of the task whose demonstration is `subtasks`.
/// A task without one (a learning task) follows the earlier task retrieved into the prompt
/// ([`super::learn`]), and fails saying why when there is none to follow.
pub fn decide(subtasks: &[Subtask], p: &Prompt, waits: &mut Waits, patience: Patience) -> Value {
    if subtasks.is_empty() {
        let subtask = (p.agent == AgentKind::App).then_some(p.subtask.as_str());
        let plan = super::learn::plan_from(&p.knowledge, &p.request, subtask).and_then(|plan| {
            if plan.is_empty() {
                Err("the retrieved earlier task has no step to follow".to_owned())
            } else {
                Ok(plan)
            }
        });
        return match plan {
            Ok(plan) => decide(&plan, p, waits, patience),
            Err(why) => match p.agent {
                AgentKind::Host => host_reply(
                    "FAIL",
                    "nothing to follow".into(),
                    json!({"result": why, "comment": why, "thought": why}),
                ),
                AgentKind::App | AgentKind::ThirdParty => fail("nothing to follow".into(), why),
            },
        };
    }
    match p.agent {
        AgentKind::Host => host(subtasks, p, waits, patience),
        AgentKind::App => app(subtasks, p, waits, patience),
        AgentKind::ThirdParty => third_party(subtasks, p, patience),
    }
}

fn host_reply(status: &str, observation: String, fields: Value) -> Value {
    let mut reply = json!({
        "observation": observation, "thought": "following the demonstration", "status": status,
        "current_subtask": "", "message": "", "plan": [], "comment": "", "function": "",
        "arguments": {}, "result": ""
    });
    if let (Some(r), Some(f)) = (reply.as_object_mut(), fields.as_object()) {
        r.extend(f.clone());
    }
    reply
}

fn host(subtasks: &[Subtask], p: &Prompt, waits: &mut Waits, patience: Patience) -> Value {
    let latest = |what: &str| p.subtasks.iter().rev().find(|s| s.subtask == what);
    let windows: Vec<String> = p.windows.iter().map(|w| format!("{:?}", w.name)).collect();
    let seen = format!("{} windows listed: {}", windows.len(), windows.join(", "));
    let mut previous_result = String::new();
    for (i, sub) in subtasks.iter().enumerate() {
        if let Some(done) = latest(&sub.what).filter(|s| s.status == "FINISH") {
            previous_result = done.result.clone();
            continue;
        }
        let plan: Vec<&str> = subtasks[i + 1..].iter().map(|s| s.what.as_str()).collect();
        if let Some(failed) = latest(&sub.what) {
            let fails = p.subtasks.iter().filter(|s| s.subtask == sub.what).count();
            if fails > patience.max_retries as usize {
                let why = format!("subtask {:?} failed: {}", sub.what, failed.result);
                return host_reply("FAIL", seen, json!({"result": why, "comment": why}));
            }
        }
        // A window titled exactly so, else one whose title contains it ("Ticket" is the dialog, not
        // "ticket.txt - Mousepad").
        let wanted = sub.app.to_lowercase();
        let apps = || p.windows.iter().filter(|w| w.kind == "APPLICATION");
        // A third-party agent (no window) by its exact name.
        let agents = || {
            p.windows
                .iter()
                .filter(|w| w.kind.eq_ignore_ascii_case("third_party_agent"))
        };
        let window = apps()
            .find(|w| w.name.to_lowercase() == wanted)
            .or_else(|| apps().find(|w| w.name.to_lowercase().contains(&wanted)))
            .or_else(|| agents().find(|w| w.name.to_lowercase() == wanted));
        if let Some(w) = window {
            return host_reply(
                "ASSIGN",
                format!(
                    "{seen}; assigning {:?} to [{}]{}",
                    sub.what, w.label, w.name
                ),
                json!({"current_subtask": sub.what, "message": previous_result, "plan": plan,
                       "control_label": w.label, "control_text": w.name,
                       "function": "select_application_window", "arguments": {"id": w.label}}),
            );
        }
        if let Some(program) = &sub.launch {
            if let Some(last) = p
                .actions
                .last()
                .filter(|a| a.function == "launch_application")
                && let Outcome::NotDone(why) = &last.outcome
            {
                let why = format!("launching {program} did not work: {why}");
                return host_reply("FAIL", seen, json!({"result": why, "comment": why}));
            }
            if waits.bump(format!("host|launch|{i}")) <= patience.max_retries + 1 {
                return host_reply(
                    "ASSIGN",
                    format!("{seen}; no window like {:?}: launching {program}", sub.app),
                    json!({"current_subtask": sub.what, "message": previous_result, "plan": plan,
                           "function": "launch_application",
                           "arguments": {"name": program, "args": sub.launch_args}}),
                );
            }
        }
        if waits.bump(format!("host|wait|{i}")) <= patience.max_waits {
            return host_reply(
                "CONTINUE",
                format!("{seen}; waiting for a window like {:?}", sub.app),
                json!({"current_subtask": sub.what, "plan": plan}),
            );
        }
        let why = format!("no window whose title contains {:?}; {seen}", sub.app);
        return host_reply("FAIL", seen, json!({"result": why, "comment": why}));
    }
    host_reply(
        "FINISH",
        format!("{seen}; every subtask is done"),
        json!({"result": previous_result}),
    )
}

fn app_reply(status: &str, observation: String, thought: String, fields: Value) -> Value {
    let mut reply = json!({
        "observation": observation, "thought": thought, "status": status, "plan": [],
        "comment": "", "result": ""
    });
    if let (Some(r), Some(f)) = (reply.as_object_mut(), fields.as_object()) {
        r.extend(f.clone());
    }
    reply
}

fn fail(observation: String, why: String) -> Value {
    app_reply(
        "FAIL",
        observation,
        why.clone(),
        json!({"result": why, "comment": why}),
    )
}

/// Whether a previous action is this step having been done.
fn is_step(step: &Step, a: &PastAction) -> bool {
    if Some(a.function.as_str()) != step.function() {
        return false;
    }
    match (&step.target, &step.action) {
        (Some(t), _) => a.target.as_deref().is_some_and(|n| same_name(n, &t.name)),
        (None, Action::Press(keys)) => a
            .arguments
            .as_ref()
            .is_none_or(|args| args["keys"].as_str() == Some(keys)),
        (None, _) => true,
    }
}

/// A name as a person reads it: without surrounding spaces (GTK pads menu items), a trailing colon
/// (labels like "Name:") or the difference between "…" and "...".
pub fn same_name(listed: &str, wanted: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .trim_end_matches(':')
            .trim_end()
            .replace('…', "...")
    };
    norm(listed) == norm(wanted)
}

/// The control a step names, among those listed.
fn find<'a>(controls: &'a [Control], step: &Step) -> Option<&'a Control> {
    let t = step.target.as_ref()?;
    let mut matching = controls
        .iter()
        .filter(|c| same_name(&c.name, &t.name) && t.kind.matches(&c.kind));
    match t.nth {
        Nth::Index(n) => matching.nth(n - 1),
        Nth::Last => matching.next_back(),
    }
}

/// Controls whose name resembles the one wanted, else what is listed (for failure messages).
fn similar(controls: &[Control], name: &str) -> String {
    let lower = name.trim().to_lowercase();
    let shown = |c: &&Control| format!("{:?} ({})", c.name.trim(), c.kind);
    let near: Vec<String> = controls
        .iter()
        .filter(|c| {
            let n = c.name.trim().to_lowercase();
            !n.is_empty() && !lower.is_empty() && (n.contains(&lower) || lower.contains(&n))
        })
        .take(8)
        .map(|c| shown(&c))
        .collect();
    if near.is_empty() {
        let listed: Vec<String> = controls.iter().take(30).map(|c| shown(&c)).collect();
        format!("none with a similar name; listed: {}", listed.join(", "))
    } else {
        format!("similar: {}", near.join(", "))
    }
}

/// The action JSON for a step on a listed control (None for `wait for`).
fn action_for(step: &Step, control: Option<&Control>, status: &str) -> Option<Value> {
    let mut arguments = match control {
        Some(c) => json!({"id": c.label, "name": c.name}),
        None => json!({}),
    };
    let (function, extra) = match &step.action {
        Action::Click => ("click_input", json!({"button": "left"})),
        Action::DoubleClick => ("click_input", json!({"button": "left", "double": true})),
        Action::Type(s) => (
            "keyboard_input",
            json!({"keys": crate::demo::escape_text(s)}),
        ),
        Action::SetText(s) => ("set_edit_text", json!({"text": s})),
        Action::Press(keys) => ("keyboard_input", json!({"keys": keys})),
        Action::Read => ("texts", json!({})),
        Action::WaitFor => return None,
    };
    if let (Some(a), Some(e)) = (arguments.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    Some(json!({"function": function, "arguments": arguments, "status": status}))
}

fn app(subtasks: &[Subtask], p: &Prompt, waits: &mut Waits, patience: Patience) -> Value {
    let seen = format!("{} controls listed", p.controls.len());
    let Some(sub) = subtasks.iter().find(|s| s.what == p.subtask) else {
        return fail(
            seen,
            format!("the subtask {:?} is not in the demonstration", p.subtask),
        );
    };
    if p.host_message.is_empty()
        && let Some(step) = sub.steps.iter().find(|s| s.uses_value())
    {
        return fail(
            seen,
            format!(
                "{:?} needs the value the HostAgent passes, and it passed none",
                step.text
            ),
        );
    }
    if !sub.api.is_empty()
        && sub
            .api
            .iter()
            .all(|c| p.functions.iter().any(|f| *f == c.function()))
    {
        return through_api(sub, p, &seen, patience);
    }
    if sub.steps.is_empty() {
        return fail(
            seen,
            format!(
                "the subtask {:?} is done only through the API, and its tools are not offered",
                sub.what
            ),
        );
    }
    let steps: Vec<Step> = sub
        .steps
        .iter()
        .map(|s| s.with_value(&p.host_message))
        .collect();
    let acting: Vec<(usize, &Step)> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.function().is_some())
        .collect();
    let done: Vec<&PastAction> = p
        .actions
        .iter()
        .filter(|a| a.outcome == Outcome::Success)
        .collect();
    let k = (0..=acting.len().min(done.len()))
        .rev()
        .find(|&k| {
            let tail = &done[done.len() - k..];
            acting[..k]
                .iter()
                .zip(tail)
                .all(|((_, step), a)| is_step(step, a))
        })
        .unwrap_or(0);
    let reads: Vec<String> = acting[..k]
        .iter()
        .zip(&done[done.len() - k..])
        .filter(|((_, s), _)| s.action == Action::Read)
        .filter_map(|(_, a)| a.read.clone())
        .collect();
    let result = sub
        .result
        .clone()
        .map(|r| r.replace("{read}", &reads.join("\n")))
        .unwrap_or_else(|| {
            if reads.is_empty() {
                format!("done: {}", sub.what)
            } else {
                reads.join("\n")
            }
        });
    // Steps from the one after the last done action up to the next action (waits included).
    let from = if k == 0 { 0 } else { acting[k - 1].0 + 1 };
    let to = acting.get(k).map_or(steps.len(), |(i, _)| i + 1);
    let progress = format!("{k} of {} actions done", acting.len());
    let plan: Vec<&str> = steps[from..].iter().map(|s| s.text.as_str()).collect();
    for (index, step) in steps.iter().enumerate().take(to).skip(from) {
        let control = match &step.target {
            // `press` without a control needs nothing listed.
            None => None,
            Some(t) => match find(&p.controls, step) {
                Some(c) => Some(c),
                None => {
                    let observation = format!("{seen}; {progress}; {t} is not listed");
                    if waits.bump(format!("app|{}|{index}", sub.what)) <= patience.max_waits {
                        return app_reply(
                            "SCREENSHOT",
                            observation,
                            format!("waiting for {t} to appear before: {}", step.text),
                            json!({"plan": plan}),
                        );
                    }
                    let why = format!(
                        "{t} is not among the {} listed controls ({}) for step {:?}",
                        p.controls.len(),
                        similar(&p.controls, &t.name),
                        step.text
                    );
                    return fail(observation, why);
                }
            },
        };
        if step.action == Action::WaitFor {
            continue;
        }
        // The previous attempts of this very step, failed, at the end of the list: retry, bounded.
        let failures = p
            .actions
            .iter()
            .rev()
            .take_while(|a| a.outcome != Outcome::Success && is_step(step, a))
            .collect::<Vec<_>>();
        if let Some(last) = failures.first()
            && failures.len() > patience.max_retries as usize
        {
            let why = match &last.outcome {
                Outcome::NotDone(e) => e.clone(),
                _ => "no outcome".into(),
            };
            return fail(
                format!("{seen}; {progress}"),
                format!(
                    "{:?} did not work {} times: {why}",
                    step.text,
                    failures.len()
                ),
            );
        }
        // The last action finishes the subtask with it (as a person closing a dialog would say): the
        // agent finishes only if it succeeds, and the window may be gone afterwards. A read must be
        // seen first, so a subtask ending in a read finishes on the next call.
        let last = index + 1 == steps.len() && step.action != Action::Read;
        let status = if last { "FINISH" } else { "CONTINUE" };
        let Some(action) = action_for(step, control, status) else {
            continue;
        };
        let next = control.map_or_else(String::new, |c| format!(" → [{}]{}", c.label, c.name));
        return app_reply(
            status,
            format!("{seen}; {progress}; next: {}{next}", step.text),
            format!("step {} of {}: {}", index + 1, sub.steps.len(), step.text),
            json!({"plan": plan, "action": action, "result": if last { result } else { String::new() }}),
        );
    }
    app_reply(
        "FINISH",
        format!("{seen}; {progress}"),
        "every step of the subtask succeeded".into(),
        json!({"result": result}),
    )
}

/// A third-party agent's step: the subtask's `api` calls when its function list offers them all (with
/// `{result}` in their arguments replaced by the HostAgent's message), else FAIL saying so.
fn third_party(subtasks: &[Subtask], p: &Prompt, patience: Patience) -> Value {
    let seen = format!("{} functions offered", p.functions.len());
    let Some(sub) = subtasks.iter().find(|s| s.what == p.subtask) else {
        return fail(
            seen,
            format!("the subtask {:?} is not in the demonstration", p.subtask),
        );
    };
    let missing: Vec<String> = sub
        .api
        .iter()
        .map(|c| c.function())
        .filter(|f| !p.functions.contains(f))
        .collect();
    if sub.api.is_empty() || !missing.is_empty() {
        return fail(
            seen,
            format!(
                "the subtask's API calls are not offered (missing: {}; offered: {})",
                missing.join(", "),
                p.functions.join(", ")
            ),
        );
    }
    let mut sub = sub.clone();
    for call in &mut sub.api {
        for v in call.arguments.values_mut() {
            with_value(v, &p.host_message);
        }
    }
    through_api(&sub, p, &seen, patience)
}

/// `{result}` in every string of `v` replaced by the HostAgent's message.
fn with_value(v: &mut Value, value: &str) {
    match v {
        Value::String(s) => *s = s.replace(crate::demo::VALUE, value),
        Value::Array(a) => a.iter_mut().for_each(|x| with_value(x, value)),
        Value::Object(o) => o.values_mut().for_each(|x| with_value(x, value)),
        _ => {}
    }
}

/// A subtask through the application's own API, when the function list offers every call of its `api`:
/// all of them in one batch, the last carrying FINISH (the agent finishes only if every call succeeds).
/// Done when the successful previous actions end with the whole batch; a failed batch is sent again
/// (bounded), then FAIL with the error.
fn through_api(sub: &Subtask, p: &Prompt, seen: &str, patience: Patience) -> Value {
    let calls: Vec<String> = sub.api.iter().map(|c| c.function()).collect();
    let done: Vec<&PastAction> = p
        .actions
        .iter()
        .filter(|a| a.outcome == Outcome::Success)
        .collect();
    let result = sub
        .result
        .clone()
        .unwrap_or_else(|| format!("done: {}", sub.what));
    if done.len() >= calls.len()
        && done[done.len() - calls.len()..]
            .iter()
            .zip(&calls)
            .all(|(a, f)| a.function == *f)
    {
        return app_reply(
            "FINISH",
            format!("{seen}; the API calls succeeded"),
            "every API call of the subtask succeeded".into(),
            json!({"result": result}),
        );
    }
    // Each earlier batch began with the first call; none of them got through (else it would be done).
    let attempts = p.actions.iter().filter(|a| a.function == calls[0]).count();
    if attempts > patience.max_retries as usize {
        let why = p
            .actions
            .iter()
            .rev()
            .find_map(|a| match &a.outcome {
                Outcome::NotDone(e) if calls.contains(&a.function) => {
                    Some(format!("{}: {e}", a.function))
                }
                _ => None,
            })
            .unwrap_or_else(|| "no outcome".into());
        return fail(
            seen.to_owned(),
            format!("the API calls did not work {attempts} times: {why}"),
        );
    }
    let n = sub.api.len();
    let actions: Vec<Value> = sub
        .api
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"function": c.function(), "arguments": c.arguments,
                   "status": if i + 1 == n { "FINISH" } else { "CONTINUE" }})
        })
        .collect();
    app_reply(
        "FINISH",
        format!("{seen}; the application's API offers {}", calls.join(", ")),
        format!("through the API in one batch: {}", calls.join(", ")),
        json!({"action": actions, "result": result}),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
