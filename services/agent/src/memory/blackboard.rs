//! The blackboard shared by the HostAgent and its AppAgents (seed 002, "Shared State Communication"):
//! questions with answers, requests, trajectories (history keys of memory items) and saved images with
//! metadata, rendered into prompts and converted to/from `ufo.v1.Blackboard`.

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use crate::vision::Screenshot;

/// An image on the blackboard: metadata plus the stored artifact (bytes are kept when known locally).
#[derive(Debug, Clone, PartialEq)]
pub struct BlackboardImage {
    /// Application, saving reason, step, ...
    pub metadata: Map<String, Value>,
    /// The artifact holding the bytes, once stored.
    pub artifact_id: String,
    /// The image, when this process has it.
    pub screenshot: Option<Screenshot>,
}

/// The stored question entries as `{question, answer}` pairs: an answer entry (`{question, answer, answers:
/// <index>}`, appended when a person answers) fills in the question it answers instead of being listed
/// again, so the board reads the same rebuilt from the store as it does in the round that took the answers.
fn questions(entries: &[v1::BlackboardEntry]) -> Vec<Value> {
    let mut sorted: Vec<_> = entries.iter().collect();
    sorted.sort_by_key(|e| e.index);
    let mut out: Vec<Value> = Vec::new();
    let mut at: Vec<u64> = Vec::new();
    for entry in sorted {
        let e = ufo_proto::json::from_optional_struct(entry.value.clone());
        match e.get("answers").and_then(Value::as_u64) {
            Some(asked) => {
                let target = at.iter().position(|&j| j == asked);
                match target {
                    Some(pos) if out[pos]["answer"].is_null() => {
                        out[pos]["answer"] = e["answer"].clone();
                    }
                    Some(_) => {}
                    None => out.push(json!({"question": e["question"], "answer": e["answer"]})),
                }
            }
            None => {
                at.push(entry.index);
                out.push(json!({"question": e["question"], "answer": e["answer"]}));
            }
        }
    }
    out
}

/// The shared blackboard.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blackboard {
    /// `{question, answer}` objects.
    pub questions: Vec<Value>,
    /// `{request}` objects.
    pub requests: Vec<Value>,
    /// Trajectory entries (history keys of memory items).
    pub trajectories: Vec<Value>,
    /// Saved images.
    pub images: Vec<BlackboardImage>,
}

impl Blackboard {
    /// Whether nothing is on it.
    pub fn is_empty(&self) -> bool {
        self.questions.is_empty()
            && self.requests.is_empty()
            && self.trajectories.is_empty()
            && self.images.is_empty()
    }

    /// Adds an answered (or unanswered) question.
    pub fn add_question(&mut self, question: &str, answer: &str) {
        self.questions
            .push(json!({"question": question, "answer": answer}));
    }

    /// Adds a request.
    pub fn add_request(&mut self, request: &str) {
        self.requests.push(json!({"request": request}));
    }

    /// Adds a trajectory entry.
    pub fn add_trajectory(&mut self, entry: Map<String, Value>) {
        self.trajectories.push(Value::Object(entry));
    }

    /// The prompt text (seed 000 `blackboard_to_prompt`); images are listed by metadata, their pixels go
    /// to the prompt as image parts by the caller.
    pub fn to_prompt(&self) -> String {
        let mut out = String::from("[Blackboard]\n");
        let section = |out: &mut String, title: &str, items: &[Value], prefix: &str| {
            if items.is_empty() {
                return;
            }
            out.push_str(&format!("{title}:\n"));
            for (i, v) in items.iter().enumerate() {
                out.push_str(&format!("  {prefix}_{i}: {v}\n"));
            }
        };
        section(
            &mut out,
            "Questions and answers",
            &self.questions,
            "question",
        );
        section(&mut out, "Requests", &self.requests, "request");
        section(&mut out, "Trajectories", &self.trajectories, "step");
        if !self.images.is_empty() {
            out.push_str("Saved images:\n");
            for (i, img) in self.images.iter().enumerate() {
                out.push_str(&format!(
                    "  image_{i}: {}\n",
                    Value::Object(img.metadata.clone())
                ));
            }
        }
        out
    }

    /// Rebuilds the blackboard from the stored proto (image bytes stay in their artifacts).
    pub fn from_proto(b: &v1::Blackboard) -> Self {
        let values = |entries: &[v1::BlackboardEntry]| -> Vec<Value> {
            let mut sorted: Vec<_> = entries.iter().collect();
            sorted.sort_by_key(|e| e.index);
            sorted
                .into_iter()
                .map(|e| ufo_proto::json::from_optional_struct(e.value.clone()))
                .collect()
        };
        let mut images: Vec<_> = b.images.iter().collect();
        images.sort_by_key(|e| e.index);
        Self {
            questions: questions(&b.questions),
            requests: values(&b.requests),
            trajectories: values(&b.trajectories),
            images: images
                .into_iter()
                .map(|e| BlackboardImage {
                    metadata: e
                        .value
                        .clone()
                        .map(ufo_proto::json::struct_to_map)
                        .unwrap_or_default(),
                    artifact_id: e.artifact_id.clone(),
                    screenshot: None,
                })
                .collect(),
        }
    }

    /// The whole blackboard as the proto (indexes assigned in order).
    pub fn to_proto(&self) -> v1::Blackboard {
        let entries = |kind: v1::BlackboardKind, values: &[Value]| -> Vec<v1::BlackboardEntry> {
            values
                .iter()
                .enumerate()
                .map(|(i, v)| entry(kind, i as u64, v.clone(), String::new()))
                .collect()
        };
        v1::Blackboard {
            questions: entries(v1::BlackboardKind::Question, &self.questions),
            requests: entries(v1::BlackboardKind::Request, &self.requests),
            trajectories: entries(v1::BlackboardKind::Trajectory, &self.trajectories),
            images: self
                .images
                .iter()
                .enumerate()
                .map(|(i, img)| {
                    entry(
                        v1::BlackboardKind::Image,
                        i as u64,
                        Value::Object(img.metadata.clone()),
                        img.artifact_id.clone(),
                    )
                })
                .collect(),
        }
    }
}

/// One blackboard entry as the proto.
pub fn entry(
    kind: v1::BlackboardKind,
    index: u64,
    value: Value,
    artifact_id: String,
) -> v1::BlackboardEntry {
    v1::BlackboardEntry {
        kind: kind as i32,
        index,
        value: ufo_proto::json::to_struct(value).ok(),
        artifact_id,
        step: 0,
        created_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_round_trips() {
        let mut b = Blackboard::default();
        assert!(b.is_empty());
        b.add_question("Which file?", "report.txt");
        b.add_request("write a report");
        b.add_trajectory(
            json!({"subtask": "copy", "result": "42"})
                .as_object()
                .cloned()
                .unwrap(),
        );
        b.images.push(BlackboardImage {
            metadata: json!({"application": "editor"})
                .as_object()
                .cloned()
                .unwrap(),
            artifact_id: "abc".into(),
            screenshot: None,
        });
        let text = b.to_prompt();
        assert!(
            text.contains("report.txt")
                && text.contains("\"result\":\"42\"")
                && text.contains("editor"),
            "{text}"
        );
        assert_eq!(Blackboard::from_proto(&b.to_proto()), b);
    }

    #[test]
    fn a_stored_answer_fills_in_its_question() {
        let stored = |index: u64, value: Value| {
            entry(v1::BlackboardKind::Question, index, value, String::new())
        };
        let board = v1::Blackboard {
            questions: vec![
                stored(
                    0,
                    json!({"question": "Which file?", "answer": null, "id": "q2-1"}),
                ),
                stored(
                    1,
                    json!({"question": "Which folder?", "answer": null, "id": "q2-2"}),
                ),
                stored(
                    2,
                    json!({"question": "Which file?", "answer": "a.txt", "answers": 0}),
                ),
            ],
            ..Default::default()
        };
        let mut answered = Blackboard::default();
        answered.add_question("Which file?", "a.txt");
        let b = Blackboard::from_proto(&board);
        assert_eq!(b.questions[0], answered.questions[0]);
        assert_eq!(
            b.questions[1],
            json!({"question": "Which folder?", "answer": null})
        );
        assert_eq!(b.questions.len(), 2);
    }
}
