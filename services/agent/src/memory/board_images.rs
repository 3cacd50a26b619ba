//! Blackboard images back from the session store when a runner rebuilds a round (a restart, or another
//! runner taking the task over): the stored board holds only each image's metadata and the step that
//! saved it, so without this the prompts after a restart would list the images as text only. The bytes
//! are the saving step's clean screenshot artifact (the one whose metadata names the same saving reason),
//! read with `GetArtifact` — from the session service's blob store where it keeps them there.

use serde_json::{Map, Value};
use ufo_proto::v1;

use super::Blackboard;
use crate::store::client::SessionClient;
use crate::vision::Screenshot;

/// Where the rebuilt board's images are stored.
#[derive(Debug, Clone, Copy)]
pub struct StoredImages<'a> {
    /// The task's session.
    pub session_id: &'a str,
    /// The board as stored (its image entries name the step that saved each image).
    pub board: &'a v1::Blackboard,
    /// The session's recorded steps (their artifact references).
    pub steps: &'a [v1::Step],
}

/// Fills in the pixels of the newest `count` images of `board` (rebuilt from `stored.board` with
/// [`Blackboard::from_proto`]) that have none, as many as the prompts show. An image that cannot be read
/// stays metadata-only, with a warning: the step goes on without it. Returns how many were filled in.
#[tracing::instrument(name = "runner.restore_board_images", skip_all, fields(session = stored.session_id, restored))]
pub async fn restore(
    board: &mut Blackboard,
    stored: StoredImages<'_>,
    client: &SessionClient,
    count: usize,
) -> usize {
    let mut entries: Vec<&v1::BlackboardEntry> = stored.board.images.iter().collect();
    entries.sort_by_key(|e| e.index);
    let mut restored = 0;
    let newest = board
        .images
        .iter_mut()
        .zip(entries)
        .rev()
        .take(count)
        .filter(|(img, _)| img.screenshot.is_none());
    for (img, entry) in newest {
        let request = request(stored, entry, &img.metadata);
        match client.clone().get_artifact(request).await {
            Ok(artifact) => match screenshot(artifact.into_inner()) {
                Some(shot) => {
                    img.screenshot = Some(shot);
                    restored += 1;
                }
                None => tracing::warn!(
                    index = entry.index,
                    "a blackboard image's artifact holds no image; it stays text only"
                ),
            },
            Err(e) => tracing::warn!(
                index = entry.index,
                error = %e.message(),
                "cannot read a blackboard image's artifact; it stays text only"
            ),
        }
    }
    tracing::Span::current().record("restored", restored);
    restored
}

/// How to ask for `entry`'s bytes: its own artifact when it names one, else the saving step's clean
/// screenshot with the same saving reason (any of that step's clean screenshots, when none says).
fn request(
    stored: StoredImages<'_>,
    entry: &v1::BlackboardEntry,
    metadata: &Map<String, Value>,
) -> v1::GetArtifactRequest {
    let by_id = |artifact_id: String| v1::GetArtifactRequest {
        artifact_id,
        ..Default::default()
    };
    if !entry.artifact_id.is_empty() {
        return by_id(entry.artifact_id.clone());
    }
    let clean = |r: &&v1::ArtifactRef| r.kind == v1::ArtifactKind::CleanScreenshot as i32;
    let refs: Vec<&v1::ArtifactRef> = stored
        .steps
        .iter()
        .filter(|s| s.step == entry.step)
        .flat_map(|s| s.artifacts.iter())
        .filter(clean)
        .collect();
    let reason = metadata.get(SAVING_REASON);
    let same_reason = refs.iter().find(|r| {
        let m = r.metadata.clone().map(ufo_proto::json::struct_to_map);
        reason.is_some() && m.and_then(|m| m.get(SAVING_REASON).cloned()).as_ref() == reason
    });
    match same_reason.or(refs.first()) {
        Some(r) => by_id(r.id.clone()),
        None => v1::GetArtifactRequest {
            artifact_id: String::new(),
            session_id: stored.session_id.to_owned(),
            step: entry.step,
            kind: v1::ArtifactKind::CleanScreenshot as i32,
        },
    }
}

/// The metadata key the AppAgent's saved image carries its reason under.
const SAVING_REASON: &str = "saving reason";

/// The stored artifact as a screenshot (its placement from the metadata the round recorded with it; the
/// size decoded from the bytes when the metadata lacks it).
fn screenshot(artifact: v1::Artifact) -> Option<Screenshot> {
    if artifact.data.is_empty() {
        return None;
    }
    let r = artifact.r#ref.unwrap_or_default();
    let m = r
        .metadata
        .map(ufo_proto::json::struct_to_map)
        .unwrap_or_default();
    let int = |key: &str| m.get(key).and_then(Value::as_i64);
    let (width, height) = match (int("width"), int("height")) {
        (Some(w), Some(h)) => (u32::try_from(w).ok()?, u32::try_from(h).ok()?),
        _ => image::load_from_memory(&artifact.data)
            .ok()
            .map(|i| (i.width(), i.height()))?,
    };
    let mime = if r.content_type.is_empty() {
        "image/png".to_owned()
    } else {
        r.content_type
    };
    Some(Screenshot {
        mime,
        bytes: artifact.data,
        width,
        height,
        origin_x: int("origin_x")
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(0),
        origin_y: int("origin_y")
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(0),
        scale: m.get("scale").and_then(Value::as_f64).unwrap_or(1.0),
    })
}
