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
    /// The uploads started at capture ([`crate::store::blobs`]); none: the step's recording puts them.
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

/// Moves the knowledge that reached the step's prompt (if any) into the step's `extra.knowledge` (the
/// items: kind, source, title, score, id) and answers its KNOWLEDGE_RETRIEVED event of step `step`, whose
/// payload is `{agent, application, items, kinds: {kind: count}, sources, ms}` (docs/knowledge.md
/// "Visible").
pub fn knowledge(
    local: &mut crate::processor::Values,
    extra: &mut serde_json::Map<String, serde_json::Value>,
    agent: &str,
    application: &str,
    step: u64,
) -> Option<EventDraft> {
    let retrieved = local
        .take(crate::agents::keys::KNOWLEDGE_USED)
        .ok()
        .flatten()?;
    if retrieved.used.is_empty() {
        return None;
    }
    let mut kinds = serde_json::Map::new();
    for item in &retrieved.used {
        let n = kinds.get(&item.kind).and_then(|v| v.as_u64()).unwrap_or(0);
        kinds.insert(item.kind.clone(), serde_json::json!(n + 1));
    }
    let sources: Vec<&str> = retrieved.used.iter().map(|u| u.source.as_str()).collect();
    let payload = serde_json::json!({
        "agent": agent,
        "application": application,
        "items": retrieved.used.len(),
        "kinds": kinds,
        "sources": sources,
        "ms": retrieved.ms,
    });
    extra.insert(
        "knowledge".into(),
        serde_json::to_value(&retrieved.used).unwrap_or_default(),
    );
    Some(draft(
        ufo_proto::v1::EventKind::KnowledgeRetrieved,
        payload,
        step,
    ))
}
