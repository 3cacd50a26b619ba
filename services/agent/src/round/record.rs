//! What one step leaves behind, shaped for `RecordStepRequest`: the step row, memory item, blackboard
//! entries, artifacts (stored by the runner with the step) and events.

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use crate::llm::Totals;
use crate::memory::blackboard::entry;
use crate::vision::Screenshot;

/// An artifact of the step, stored with it.
#[derive(Debug, Clone)]
pub struct StepArtifact {
    /// What it is.
    pub kind: v1::ArtifactKind,
    /// The image.
    pub screenshot: Screenshot,
    /// Image metadata (size, transform, application, saving reason...).
    pub metadata: Map<String, Value>,
}

/// One step, ready to persist.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// The step row.
    pub step: v1::Step,
    /// The memory item.
    pub memory_item: Map<String, Value>,
    /// Blackboard entries written by the step (index and step assigned by the store).
    pub blackboard: Vec<v1::BlackboardEntry>,
    /// Artifacts to store.
    pub artifacts: Vec<StepArtifact>,
    /// Events, in order.
    pub events: Vec<v1::EventDraft>,
    /// LLM calls, tokens and cost of the step.
    pub totals: Totals,
}

impl StepRecord {
    /// The `RecordStepRequest` linking artifacts already stored with `PutArtifact` (their ids in
    /// `artifact_ids`).
    pub fn to_request(
        &self,
        artifact_ids: Vec<String>,
        lease_owner: &str,
    ) -> v1::RecordStepRequest {
        v1::RecordStepRequest {
            step: Some(self.step.clone()),
            memory_item: Some(ufo_proto::json::object_to_struct(self.memory_item.clone())),
            blackboard: self.blackboard.clone(),
            artifact_ids,
            events: self.events.clone(),
            lease_owner: lease_owner.to_owned(),
            artifacts: Vec::new(),
        }
    }

    /// Events of this kind.
    pub fn events_of(&self, kind: v1::EventKind) -> Vec<&v1::EventDraft> {
        self.events
            .iter()
            .filter(|e| e.kind == kind as i32)
            .collect()
    }
}

/// Entries and events gathered before the step runs (answers, the round's request).
#[derive(Debug, Default)]
pub(crate) struct Carry {
    pub blackboard: Vec<v1::BlackboardEntry>,
    pub events: Vec<v1::EventDraft>,
}

impl Carry {
    pub fn request_entry(&mut self, request: &str) {
        self.blackboard.push(entry(
            v1::BlackboardKind::Request,
            0,
            json!({"request": request}),
            String::new(),
        ));
    }
}

/// An event draft.
pub(crate) fn event(kind: v1::EventKind, payload: Value, step: u64, round: u32) -> v1::EventDraft {
    v1::EventDraft {
        kind: kind as i32,
        payload: ufo_proto::json::to_struct(payload).ok(),
        step,
        round,
    }
}

/// An artifact from a screenshot.
pub(crate) fn artifact(kind: v1::ArtifactKind, shot: &Screenshot, extra: Value) -> StepArtifact {
    let mut metadata = json!({
        "width": shot.width, "height": shot.height, "origin_x": shot.origin_x,
        "origin_y": shot.origin_y, "scale": shot.scale, "content_type": shot.mime,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    if let Value::Object(m) = extra {
        metadata.extend(m);
    }
    StepArtifact {
        kind,
        screenshot: shot.clone(),
        metadata,
    }
}
