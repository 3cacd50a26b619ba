//! HostAgent prompt: desktop screenshot and blackboard images, target list, launchable applications,
//! request, previous subtasks, previous plan, its own previous actions with their outcomes, blackboard; the
//! system prompt carries the function list built from the executor's tools.

use serde_json::{Value, json};

use crate::agents::common::{captioned, closing_sections, prompt_messages};
use crate::agents::target::TargetInfo;
use crate::llm::{ContentPart, ImageData, Message};

/// The HostAgent's system prompt: its role, the statuses, the JSON response fields and its functions
/// (the executor's desktop-level tools, see [`crate::agents::tools`]).
pub fn system(functions: &str) -> String {
    format!(
        r#"You are the HostAgent of a desktop automation system. You decompose the user's request into
subtasks, choose the application (or third-party agent) for the current subtask and hand it to an
AppAgent, launch applications when needed, and decide when the whole request is done.

Reply with ONE JSON object and nothing else, with these fields:
- "observation": what the desktop screenshot and the target list show.
- "thought": your reasoning.
- "current_subtask": the subtask to do now ("" when finished).
- "message": advice for the AppAgent doing the subtask.
- "control_label": the label of the selected target; "control_text": its name.
- "plan": the remaining subtasks after this one, as a list of strings.
- "status": one of ASSIGN (hand the subtask to the AppAgent of the selected target), CONTINUE (run the
  function yourself and look again), PENDING (ask the user "questions" and wait), CONFIRM (the function
  needs the user's approval before it runs), FINISH (the request is done; put the answer in "result"),
  FAIL (the request cannot be done).
- "comment": a short note for the user.
- "questions": a list of questions for the user (PENDING only).
- "function": "select_application_window" with "arguments": {{"id": "<label>"}} to assign a target, or
  another of the functions below with its arguments, or "" for none. "launch_application" starts one
  of the launchable applications and waits for its window; with status ASSIGN that window is assigned
  the subtask at once.
- "arguments": the function's arguments (an object).
- "result": the final answer or what was found ("" otherwise).

Your previous actions are listed with what happened to each: [success], [failure: error], [skipped:
reason] or [denied: reason] (refused by policy), a success with what the executor saw it change
([success; effect: confirmed|none_observed|unverifiable — ...]). Do not assume a failed or denied
action, or one whose effect was none_observed, took effect.

Functions:
{functions}"#
    )
}

/// Everything the HostAgent prompt shows.
#[derive(Debug, Clone, Copy)]
pub struct HostPromptInput<'a> {
    /// The user's request.
    pub request: &'a str,
    /// The labelled targets.
    pub targets: &'a [TargetInfo],
    /// Desktop screenshot (already downscaled for the prompt).
    pub desktop: Option<&'a ImageData>,
    /// Previous subtasks `{subtask, status, result}`.
    pub previous_subtasks: &'a [Value],
    /// The plan from the previous step.
    pub previous_plan: &'a [String],
    /// Rendered blackboard ("" when empty).
    pub blackboard: &'a str,
    /// The function list (one line per tool).
    pub functions: &'a str,
    /// The programs `launch_application` may start.
    pub launchable: &'a str,
    /// The HostAgent's newest actions with what happened to each.
    pub previous_actions: &'a [String],
    /// Blackboard images with their captions.
    pub blackboard_images: &'a [(String, ImageData)],
    /// The no-progress warning ("" when there is none).
    pub no_progress: &'a str,
    /// Retrieved knowledge ("" when none).
    pub knowledge: &'a str,
    /// A reused task's steps from this one on, when the model decides a step of a reuse ("" otherwise).
    pub reused_plan: &'a str,
}

/// The target list as one compact JSON object per line.
pub fn target_list(targets: &[TargetInfo]) -> String {
    targets
        .iter()
        .map(|t| {
            let mut line =
                json!({"label": t.label, "name": t.name, "kind": t.kind, "type": t.control_type});
            // A third-party agent says when to use it.
            if let (Some(d), Value::Object(m)) = (t.extra.get("description"), &mut line) {
                m.insert("description".into(), d.clone());
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Builds the messages.
pub fn messages(input: HostPromptInput<'_>) -> Vec<Message> {
    let mut parts = Vec::new();
    if let Some(img) = input.desktop {
        parts.push(ContentPart::Text("Current desktop screenshot:".into()));
        parts.push(ContentPart::Image(img.clone()));
    }
    captioned(&mut parts, input.blackboard_images);
    let subtasks = if input.previous_subtasks.is_empty() {
        "none".to_owned()
    } else {
        input
            .previous_subtasks
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let plan = if input.previous_plan.is_empty() {
        "none".to_owned()
    } else {
        input.previous_plan.join("\n")
    };
    let actions = if input.previous_actions.is_empty() {
        "none".to_owned()
    } else {
        input.previous_actions.join("\n")
    };
    let mut text = format!(
        "[Request]\n{}\n\n[Available targets]\n{}\n\n[Launchable applications]\n{}\n\n\
         [Previous subtasks]\n{}\n\n[Previous plan]\n{}\n\n[Your previous actions]\n{}\n",
        input.request,
        target_list(input.targets),
        input.launchable,
        subtasks,
        plan,
        actions
    );
    closing_sections(
        &mut text,
        input.no_progress,
        input.reused_plan,
        input.knowledge,
    );
    prompt_messages(system(input.functions), parts, text, input.blackboard)
}
