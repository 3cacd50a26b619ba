//! The scripted LLM's side of a task: reply builders in the shapes the agents parse (the seeds'
//! HostAgent and AppAgent responses) and readers that find an application or a control **by name** in the
//! prompt the agent sent, so a script proves that what the executor observed reached the prompt.

use serde_json::{Value, json};
use ufo_agent::testing::RecordedRequest;

/// A HostAgent reply with `status` and extra fields merged in.
pub fn host(status: &str, extra: Value) -> Value {
    let mut reply =
        json!({"observation": "the desktop", "thought": "next", "status": status, "plan": []});
    if let (Some(reply), Some(extra)) = (reply.as_object_mut(), extra.as_object()) {
        reply.extend(extra.clone());
    }
    reply
}

/// A HostAgent reply assigning `subtask` to the application labelled `label`.
pub fn assign(label: &str, subtask: &str) -> Value {
    host(
        "ASSIGN",
        json!({"current_subtask": subtask, "message": "go ahead",
               "function": "select_application_window", "arguments": {"id": label}}),
    )
}

/// An AppAgent reply: `actions` is one `{function, arguments}` or an array of them.
pub fn app(status: &str, actions: Value, result: &str) -> Value {
    json!({"observation": "the window", "thought": "act", "status": status,
           "action": actions, "result": result, "plan": []})
}

/// The label of the application whose name contains `needle` (case-insensitive), read from the
/// HostAgent prompt's target list (one JSON object per line with `label` and `name`).
pub fn target_label(req: &RecordedRequest, needle: &str) -> Option<String> {
    let needle = needle.to_lowercase();
    req.text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim().trim_end_matches(',')).ok())
        .find(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.to_lowercase().contains(&needle))
        })
        .and_then(|v| v["label"].as_str().map(str::to_owned))
}

/// The controls of the AppAgent prompt's `[Available controls]` list as `(label, name, type)`.
pub fn controls(req: &RecordedRequest) -> Vec<(String, String, String)> {
    req.text()
        .lines()
        .filter_map(|line| {
            let entry: Vec<Value> = serde_json::from_str(line.trim().trim_end_matches(',')).ok()?;
            match entry.as_slice() {
                [Value::String(id), Value::String(name), Value::String(kind)] => {
                    Some((id.clone(), name.clone(), kind.clone()))
                }
                _ => None,
            }
        })
        .collect()
}

/// The label of the first listed control named exactly `name` with type `kind`.
pub fn control(req: &RecordedRequest, name: &str, kind: &str) -> Option<String> {
    controls(req)
        .into_iter()
        .find(|(_, n, k)| n == name && k == kind)
        .map(|(id, _, _)| id)
}
