//! What one step leaves behind, shaped for `RecordStepRequest`: the step row (with what the round decided
//! next), memory item, blackboard entries and artifacts (stored by the runner with the step).

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
            events: Vec::new(),
            lease_owner: lease_owner.to_owned(),
            artifacts: Vec::new(),
        }
    }

    /// What the round decided after this step (stored with it).
    pub fn control(&self) -> Option<crate::control::StepControl> {
        crate::control::StepControl::of(&self.step).ok()
    }
}

/// Entries and actions gathered before the step runs (the round's request, a window selected again).
#[derive(Debug, Default)]
pub(crate) struct Carry {
    pub blackboard: Vec<v1::BlackboardEntry>,
    pub actions: Vec<crate::agents::action::ActionRecord>,
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
