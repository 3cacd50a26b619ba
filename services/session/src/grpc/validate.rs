//! Protobuf requests → validated store inputs. Every failure is INVALID_ARGUMENT naming the field.

use prost::Message as _;
use serde_json::Value as Json;
use sha2::{Digest as _, Sha256};
use tonic::Status;
use ufo_proto::v1::{
    AgentKind, ArtifactKind, BlackboardEntry, BlackboardKind, EventDraft, EventKind,
    RecordStepRequest, RoundStatus, SessionStatus, StepBlob,
};
use uuid::Uuid;

use crate::store::{NewBlackboardEntry, NewEvent, StepArtifact, StepRecord};

/// Request limits the validation enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest number of events, entries or ids in one request.
    pub max_batch: usize,
    /// Largest artifact in bytes.
    pub max_artifact_bytes: usize,
}

/// An INVALID_ARGUMENT status naming `field`.
pub fn invalid(field: &str, problem: &str) -> Status {
    Status::invalid_argument(format!("{field}: {problem}"))
}

/// A UUID field.
pub fn uuid(field: &str, value: &str) -> Result<Uuid, Status> {
    if value.is_empty() {
        return Err(invalid(field, "required"));
    }
    Uuid::parse_str(value).map_err(|_| invalid(field, "not a UUID"))
}

/// A required, non-blank text field.
pub fn required(field: &str, value: String) -> Result<String, Status> {
    if value.trim().is_empty() {
        Err(invalid(field, "required"))
    } else {
        Ok(value)
    }
}

/// An empty string as `None`.
pub fn optional(value: String) -> Option<String> {
    Some(value).filter(|v| !v.is_empty())
}

/// A positive number that fits the database (`1..=i64::MAX`).
pub fn positive(field: &str, value: u64) -> Result<u64, Status> {
    if value == 0 || i64::try_from(value).is_err() {
        Err(invalid(field, "must be between 1 and 9223372036854775807"))
    } else {
        Ok(value)
    }
}

/// A non-negative number that fits the database.
pub fn bounded(field: &str, value: u64) -> Result<u64, Status> {
    i64::try_from(value)
        .map(|_| value)
        .map_err(|_| invalid(field, "too large"))
}

/// A hex SHA-256 artifact id.
pub fn artifact_id(field: &str, value: &str) -> Result<String, Status> {
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(invalid(field, "not a hex SHA-256 artifact id"))
    }
}

/// A protobuf enum value that is known and not UNSPECIFIED.
pub fn known<E: TryFrom<i32>>(field: &str, value: i32) -> Result<E, Status> {
    if value == 0 {
        return Err(invalid(field, "required"));
    }
    E::try_from(value).map_err(|_| invalid(field, "unknown value"))
}

/// A session status a client may set.
pub fn settable_status(value: i32) -> Result<SessionStatus, Status> {
    let status: SessionStatus = known("status", value)?;
    if status == SessionStatus::Queued {
        return Err(invalid(
            "status",
            "must be RUNNING, WAITING, FINISHED, FAILED or CANCELLED",
        ));
    }
    Ok(status)
}

/// A status that ends a round.
pub fn round_end_status(value: i32) -> Result<RoundStatus, Status> {
    let status: RoundStatus = known("status", value)?;
    match status {
        RoundStatus::Finished | RoundStatus::Failed | RoundStatus::Cancelled => Ok(status),
        _ => Err(invalid("status", "must be FINISHED, FAILED or CANCELLED")),
    }
}

/// A round number (1-based).
pub fn round_number(field: &str, value: u32) -> Result<u32, Status> {
    if value == 0 {
        Err(invalid(field, "must be at least 1"))
    } else {
        Ok(value)
    }
}

/// An optional Struct as a JSON object (`{}` when absent).
pub fn object(value: Option<prost_types::Struct>) -> Json {
    match value {
        Some(s) => ufo_proto::json::from_struct(s),
        None => Json::Object(serde_json::Map::new()),
    }
}

fn batch<T>(field: &str, items: &[T], limits: Limits) -> Result<(), Status> {
    if items.len() > limits.max_batch {
        Err(invalid(
            field,
            &format!("at most {} items per request", limits.max_batch),
        ))
    } else {
        Ok(())
    }
}

/// Event drafts.
pub fn events(
    field: &str,
    drafts: Vec<EventDraft>,
    limits: Limits,
) -> Result<Vec<NewEvent>, Status> {
    batch(field, &drafts, limits)?;
    drafts
        .into_iter()
        .enumerate()
        .map(|(i, draft)| {
            let kind: EventKind = known(&format!("{field}[{i}].kind"), draft.kind)?;
            Ok(NewEvent {
                kind,
                payload: object(draft.payload),
                step: bounded(&format!("{field}[{i}].step"), draft.step)?,
                round: draft.round,
            })
        })
        .collect()
}

/// Blackboard entries to append.
pub fn entries(
    field: &str,
    entries: Vec<BlackboardEntry>,
    limits: Limits,
) -> Result<Vec<NewBlackboardEntry>, Status> {
    batch(field, &entries, limits)?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let kind: BlackboardKind = known(&format!("{field}[{i}].kind"), entry.kind)?;
            let artifact_id = optional(entry.artifact_id)
                .map(|id| artifact_id(&format!("{field}[{i}].artifact_id"), &id))
                .transpose()?;
            Ok(NewBlackboardEntry {
                kind,
                value: object(entry.value),
                artifact_id,
            })
        })
        .collect()
}

/// A RecordStep request, with the content hash that makes re-recording idempotent.
pub fn record_step(mut request: RecordStepRequest, limits: Limits) -> Result<StepRecord, Status> {
    let lease_owner = optional(std::mem::take(&mut request.lease_owner));
    // The hash covers everything the step writes (its blobs by their hashes), in protobuf's deterministic
    // encoding (Struct fields are ordered maps), and nothing about who sends it.
    let mut canonical = request.clone();
    if let Some(step) = canonical.step.as_mut() {
        step.artifacts.clear();
    }
    let content_hash: [u8; 32] = Sha256::digest(canonical.encode_to_vec()).into();
    let step = request.step.ok_or_else(|| invalid("step", "required"))?;
    let session_id = uuid("step.session_id", &step.session_id)?;
    positive("step.step", step.step)?;
    round_number("step.round", step.round)?;
    round_number("step.round_step", step.round_step)?;
    required("step.agent_name", step.agent_name.clone())?;
    let _: AgentKind = known("step.agent_kind", step.agent_kind)?;
    if !step.cost.is_finite() || step.cost < 0.0 {
        return Err(invalid(
            "step.cost",
            "must be a finite, non-negative number",
        ));
    }
    bounded("step.input_tokens", step.input_tokens)?;
    bounded("step.output_tokens", step.output_tokens)?;
    batch("step.actions", &step.actions, limits)?;
    batch("blobs", &request.blobs, limits)?;
    let artifacts = request
        .blobs
        .into_iter()
        .enumerate()
        .map(|(i, b)| step_blob(&format!("blobs[{i}]"), b, limits))
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(StepRecord {
        session_id,
        memory_item: object(request.memory_item),
        blackboard: entries("blackboard", request.blackboard, limits)?,
        artifacts,
        events: events("events", request.events, limits)?,
        lease_owner,
        content_hash,
        step,
    })
}

/// An artifact whose bytes were put with PutBlob: the row keeps hash, size, content type and (in its
/// metadata) the image's dimensions.
pub fn step_blob(field: &str, b: StepBlob, limits: Limits) -> Result<StepArtifact, Status> {
    let sha256 = artifact_id(&format!("{field}.sha256"), &b.sha256)?;
    if b.size == 0 || b.size > limits.max_artifact_bytes as u64 {
        return Err(invalid(
            &format!("{field}.size"),
            &format!("must be 1..={} bytes", limits.max_artifact_bytes),
        ));
    }
    let mut metadata = object(b.metadata);
    if let Json::Object(m) = &mut metadata
        && (b.width > 0 || b.height > 0)
    {
        m.insert("width".into(), b.width.into());
        m.insert("height".into(), b.height.into());
    }
    Ok(StepArtifact {
        kind: artifact_kind(&format!("{field}.kind"), b.kind)?,
        content_type: required(&format!("{field}.content_type"), b.content_type)?,
        metadata,
        blob: crate::store::BlobRef {
            sha256,
            size: b.size,
        },
    })
}

/// An artifact kind (not UNSPECIFIED).
pub fn artifact_kind(field: &str, value: i32) -> Result<ArtifactKind, Status> {
    known(field, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufo_proto::v1::Step;

    const LIMITS: Limits = Limits {
        max_batch: 4,
        max_artifact_bytes: 64,
    };

    fn request() -> RecordStepRequest {
        RecordStepRequest {
            step: Some(Step {
                session_id: Uuid::new_v4().to_string(),
                step: 1,
                round: 1,
                round_step: 1,
                agent_name: "HostAgent".into(),
                agent_kind: AgentKind::Host.into(),
                ..Step::default()
            }),
            ..RecordStepRequest::default()
        }
    }

    #[test]
    fn errors_name_the_field() {
        let mut bad = request();
        bad.step.as_mut().unwrap().agent_kind = 0;
        let err = record_step(bad, LIMITS).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().starts_with("step.agent_kind"),
            "{}",
            err.message()
        );

        let mut bad = request();
        bad.blobs = vec![StepBlob {
            sha256: "xyz".into(),
            ..blob(ArtifactKind::CleanScreenshot, 1)
        }];
        let err = record_step(bad, LIMITS).unwrap_err();
        assert!(
            err.message().starts_with("blobs[0].sha256"),
            "{}",
            err.message()
        );

        let err = record_step(RecordStepRequest::default(), LIMITS).unwrap_err();
        assert_eq!(err.message(), "step: required");
    }

    #[test]
    fn the_lease_owner_does_not_change_the_content_hash() {
        let a = record_step(request(), LIMITS).unwrap();
        let mut other = request();
        other.step = Some(a.step.clone());
        other.lease_owner = "worker-2".into();
        let b = record_step(other, LIMITS).unwrap();
        assert_eq!(a.content_hash, b.content_hash);
        let mut changed = request();
        let mut step = a.step.clone();
        step.thought = "different".into();
        changed.step = Some(step);
        assert_ne!(
            record_step(changed, LIMITS).unwrap().content_hash,
            a.content_hash
        );
    }

    fn blob(kind: ArtifactKind, size: u64) -> StepBlob {
        StepBlob {
            kind: kind.into(),
            content_type: "image/png".into(),
            sha256: hex::encode(Sha256::digest(b"pixels")),
            size,
            ..StepBlob::default()
        }
    }

    #[test]
    fn step_blobs_are_checked_and_hashed() {
        let bad_cases: [(StepBlob, &str); 4] = [
            (
                blob(ArtifactKind::Unspecified, 1),
                "blobs[1].kind: required",
            ),
            (
                StepBlob {
                    content_type: " ".into(),
                    ..blob(ArtifactKind::CleanScreenshot, 1)
                },
                "blobs[1].content_type: required",
            ),
            (
                blob(ArtifactKind::CleanScreenshot, 0),
                "blobs[1].size: must be 1..=64 bytes",
            ),
            (
                blob(ArtifactKind::CleanScreenshot, 65),
                "blobs[1].size: must be 1..=64 bytes",
            ),
        ];
        for (bad, message) in bad_cases {
            let mut r = request();
            r.blobs = vec![blob(ArtifactKind::CleanScreenshot, 6), bad];
            let err = record_step(r, LIMITS).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert_eq!(err.message(), message);
        }
        let mut r = request();
        r.blobs = vec![blob(ArtifactKind::CleanScreenshot, 6); 5];
        assert!(
            record_step(r, LIMITS)
                .unwrap_err()
                .message()
                .starts_with("blobs:")
        );

        let with = |data: &'static [u8]| {
            let mut r = request();
            let step = r.step.as_mut().unwrap();
            step.session_id = "7d0c4e4e-1111-4222-8333-944445555666".into();
            r.blobs = vec![StepBlob {
                sha256: hex::encode(Sha256::digest(data)),
                ..blob(ArtifactKind::CleanScreenshot, data.len() as u64)
            }];
            record_step(r, LIMITS).unwrap()
        };
        let a = with(b"pixels");
        assert_eq!(
            a.artifacts[0].blob.sha256,
            hex::encode(Sha256::digest(b"pixels")),
            "the row keeps the blob's name"
        );
        assert_eq!(with(b"pixels").content_hash, a.content_hash);
        assert_ne!(
            with(b"other pixels").content_hash,
            a.content_hash,
            "the content hash covers the blobs"
        );
    }
}
