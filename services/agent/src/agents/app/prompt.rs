//! AppAgent prompt: images (last selected control, clean, annotated), control list as compact
//! `["id", "name", "type"]` lines, subtask, host message, previous actions with repeat counts, plan,
//! blackboard (text and its newest images) and optional retrieved knowledge; the system prompt carries
//! the function list built from the executor's tools.

use serde_json::Value;

use crate::agents::common::{captioned, closing_sections, prompt_messages};
use crate::agents::target::TargetInfo;
use crate::llm::{ImageData, Message};

/// The AppAgent's system prompt around its function list (the executor's tools, see
/// [`crate::agents::tools`]).
pub fn system(functions: &str) -> String {
    format!(
        r#"You are an AppAgent operating one application window to complete a subtask. The annotated
screenshot numbers each control; the control list gives ["id", "name", "type"] for each.

Reply with ONE JSON object and nothing else, with these fields:
- "observation": what the screenshots show.
- "thought": your reasoning.
- "plan": the remaining steps, as a list of strings.
- "comment": a short note for the user.
- "action": one action {{"function": ..., "arguments": {{"id": "<control id>", ...}}, "status": ...}} or a
  list of such actions to run in order (they stop at the first failure; the rest are skipped). "id" is
  a control id from the list; parameters marked "?" are optional.
- "status" (per action, or at the top level without actions): CONTINUE (act and look again), SCREENSHOT
  (take a new screenshot and decide again without acting), PENDING (ask the user "questions"), CONFIRM
  (the action needs the user's approval first), FINISH (the subtask is done after these actions; put
  what was achieved or found in "result"; if an action fails, the subtask is not finished and you look
  again), FAIL (the subtask cannot be done here).
- "save_screenshot": {{"save": true|false, "reason": "..."}} to keep this screenshot on the blackboard.
- "result": the subtask's result (FINISH) or information found.
- "questions": questions for the user (PENDING only).

Previous actions are listed with what happened to each: [success], [failure: error], [skipped: reason]
(not run because an earlier action of its batch failed) or [denied: reason] (refused by policy). Do not
assume a failed, skipped or denied action took effect. A success says what the executor saw it change:
[success; effect: confirmed — what changed], [success; effect: none_observed — ...] (it ran but nothing
changed: it did not take effect, and a FINISH resting on it does not finish the subtask) or [success;
effect: unverifiable — ...] (look at the screenshot to tell).

Functions:
{functions}"#
    )
}

/// Everything the AppAgent prompt shows.
#[derive(Debug, Clone, Copy)]
pub struct AppPromptInput<'a> {
    /// The user's request.
    pub request: &'a str,
    /// The current subtask.
    pub subtask: &'a str,
    /// The HostAgent's message.
    pub host_message: &'a str,
    /// The application.
    pub application: &'a str,
    /// Labelled controls.
    pub controls: &'a [TargetInfo],
    /// Images in order: last selected control, clean, annotated (whichever are configured).
    pub images: &'a [(&'static str, ImageData)],
    /// Previous actions with repeat counts.
    pub previous_actions: &'a [String],
    /// The plan from the previous step.
    pub plan: &'a [String],
    /// Previous subtasks `{subtask, status, result}`.
    pub previous_subtasks: &'a [Value],
    /// Rendered blackboard ("" when empty).
    pub blackboard: &'a str,
    /// Retrieved knowledge ("" when none).
    pub knowledge: &'a str,
    /// The function list (one line per tool).
    pub functions: &'a str,
    /// Blackboard images with their captions (after the step's own screenshots).
    pub blackboard_images: &'a [(String, ImageData)],
    /// A warning that the agent repeats itself without effect ("" when none).
    pub no_progress: &'a str,
    /// A reused task's steps from this one on, when the model decides a step of a reuse ("" otherwise).
    pub reused_plan: &'a str,
}

/// The control list: one `["id", "name", "type"]` JSON array per line.
pub fn control_list(controls: &[TargetInfo]) -> String {
    controls
        .iter()
        .map(|c| {
            Value::from(vec![
                c.label.clone(),
                c.name.clone(),
                c.control_type.clone(),
            ])
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Collapses consecutive repeats: `["a", "a", "b"]` → `["a (×2)", "b"]`.
pub fn with_repeat_counts(actions: &[String]) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for a in actions {
        match out.last_mut() {
            Some((last, n)) if last == a => *n += 1,
            _ => out.push((a.clone(), 1)),
        }
    }
    out.into_iter()
        .map(|(a, n)| {
            if n > 1 {
                format!("{a} (repeated {n} times)")
            } else {
                a
            }
        })
        .collect()
}

/// Builds the messages.
pub fn messages(input: AppPromptInput<'_>) -> Vec<Message> {
    let mut parts = Vec::new();
    captioned(&mut parts, input.images);
    captioned(&mut parts, input.blackboard_images);
    let none = |v: String| if v.is_empty() { "none".to_owned() } else { v };
    let mut text = format!(
        "[Request]\n{}\n\n[Application]\n{}\n\n[Current subtask]\n{}\n\n[Message from the HostAgent]\n{}\n\n\
         [Available controls]\n{}\n\n[Previous actions]\n{}\n\n[Previous plan]\n{}\n\n[Previous subtasks]\n{}\n",
        input.request,
        input.application,
        input.subtask,
        none(input.host_message.to_owned()),
        control_list(input.controls),
        none(input.previous_actions.join("\n")),
        none(input.plan.join("\n")),
        none(
            input
                .previous_subtasks
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    );
    closing_sections(
        &mut text,
        input.no_progress,
        input.reused_plan,
        input.knowledge,
    );
    prompt_messages(system(input.functions), parts, text, input.blackboard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_counts() {
        let a = |s: &str| s.to_owned();
        assert_eq!(
            with_repeat_counts(&[a("x"), a("x"), a("y"), a("x")]),
            ["x (repeated 2 times)", "y", "x"]
        );
    }
}
