//! What one step of a round produces for the runner to record: the step row, its memory item, blackboard
//! entries, artifacts, events, and what happens next ([`StepControl`]).

use ufo_proto::v1::{BlackboardEntry, EventDraft, Step};

use super::control::StepControl;
use crate::store::blobs::ArtifactUpload;

/// One produced step.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// The step; the runner sets session id, step and round numbers.
    pub step: Step,
    /// The seeds' MemoryItem of the step.
    pub memory_item: Option<serde_json::Map<String, serde_json::Value>>,
    /// Blackboard entries the step writes (trajectories, images, ...).
    pub blackboard: Vec<BlackboardEntry>,
    /// Artifacts (screenshots, UI trees).
    pub artifacts: Vec<ArtifactUpload>,
    /// Extra events (phase timings, ...); STEP_FINISHED is appended by the store.
    pub events: Vec<EventDraft>,
    /// What happens next, with the round state a driver keeps for a resume (the runner gives the questions
    /// and the held action their ids and stores it with the step).
    pub control: StepControl,
    /// The uploads started at capture ([`crate::store::blobs`]); none: the artifacts' bytes go with the step.
    pub uploads: Option<std::sync::Arc<crate::store::blobs::BlobUploads>>,
}

/// An event draft of step `step` with a JSON payload.
pub fn draft(kind: ufo_proto::v1::EventKind, payload: serde_json::Value, step: u64) -> EventDraft {
    EventDraft {
        kind: kind as i32,
        payload: ufo_proto::json::to_struct(payload).ok(),
        step,
        round: 0,
    }
}
