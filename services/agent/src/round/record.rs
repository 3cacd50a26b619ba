//! What one step leaves behind besides its row: entries and actions gathered before it runs, and its
//! screenshots as artifacts of the [`super::output::StepOutput`] the round produces.

use serde_json::{Value, json};
use ufo_proto::v1;

use crate::memory::blackboard::entry;
use crate::store::blobs::ArtifactUpload;
use crate::vision::Screenshot;

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

/// An artifact from a screenshot (its bytes shared, not copied).
pub(crate) fn artifact(kind: v1::ArtifactKind, shot: &Screenshot, extra: Value) -> ArtifactUpload {
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
    ArtifactUpload {
        kind,
        content_type: shot.mime.clone(),
        data: shot.bytes.clone(),
        metadata,
    }
}

/// An artifact whose bytes are a [`crate::vision::derived`] recipe; its metadata describes the image the
/// recipe draws.
pub(crate) fn derived_artifact(
    kind: v1::ArtifactKind,
    d: &crate::vision::Derived,
    extra: Value,
) -> ArtifactUpload {
    ArtifactUpload {
        content_type: crate::vision::derived::RECIPE_TYPE.to_owned(),
        data: d.recipe.clone(),
        ..artifact(kind, &d.placement, extra)
    }
}
