//! Validated inputs of the [`Store`](super::Store) methods, and the lowercase names enums have in the
//! database.

use chrono::{DateTime, Utc};
use serde_json::Value as Json;
use ufo_proto::v1::{
    ArtifactKind, BlackboardEntry, BlackboardKind, EventKind, RoundStatus, SessionKind,
    SessionStatus, Step,
};
use uuid::Uuid;

/// A session to create.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Client-chosen or generated id.
    pub id: Uuid,
    /// The first request (round 1).
    pub request: String,
    /// Task configuration (a JSON object).
    pub config: Json,
    /// Owner label.
    pub owner: String,
    /// A task (queued for the runners) or a direct session (running at once, never claimed). Never
    /// `Unspecified`.
    pub kind: SessionKind,
    /// The desktop it needs from the pool; `None`: none (the task names an executor address).
    pub desktop: Option<DesktopWant>,
    /// A direct session's lease from its creation: the worker holding it and for how long. `None`: no
    /// lease (a task gets its lease when it is claimed).
    pub lease: Option<NewLease>,
}

/// The lease a direct session is created with (renewed with [`crate::store::Store::renew_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLease {
    /// The worker (agent process) that holds it.
    pub owner: String,
    /// How long it holds without a renewal.
    pub duration: std::time::Duration,
}

/// Position in the newest-first session listing: the last session of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    /// Creation time of the last session returned.
    pub created_at: DateTime<Utc>,
    /// Its id.
    pub id: Uuid,
}

impl PageCursor {
    /// The opaque page token form: `<micros>.<uuid>` in hex.
    pub fn encode(&self) -> String {
        hex::encode(format!(
            "{}.{}",
            self.created_at.timestamp_micros(),
            self.id
        ))
    }

    /// Parses a token made by [`PageCursor::encode`]; `None` when it is not one.
    pub fn decode(token: &str) -> Option<Self> {
        let text = String::from_utf8(hex::decode(token).ok()?).ok()?;
        let (micros, id) = text.split_once('.')?;
        Some(Self {
            created_at: DateTime::from_timestamp_micros(micros.parse().ok()?)?,
            id: id.parse().ok()?,
        })
    }
}

/// A status change of a session.
#[derive(Debug, Clone)]
pub struct StatusChange {
    /// The session.
    pub id: Uuid,
    /// RUNNING, WAITING, FINISHED, FAILED or CANCELLED.
    pub status: SessionStatus,
    /// Final result or failure reason (kept for ends).
    pub result: String,
    /// When set, the change requires this worker to hold the lease.
    pub lease_owner: Option<String>,
}

/// A worker parking the session it holds while the session waits for a person ([`super::Store::park_task`]).
#[derive(Debug, Clone)]
pub struct ParkTask {
    /// The session.
    pub id: Uuid,
    /// The worker holding its lease.
    pub worker: String,
    /// What it waits for: QUESTION or APPROVAL.
    pub reason: ufo_proto::v1::ParkReason,
    /// When the wait times out (the session is claimable again from then on).
    pub until: chrono::DateTime<chrono::Utc>,
    /// The newest event the worker had read: an answer or a decision written after it refuses the park.
    pub seen_seq: u64,
}

/// The end of a round.
#[derive(Debug, Clone)]
pub struct RoundEnd {
    /// The session.
    pub id: Uuid,
    /// The round (1-based).
    pub number: u32,
    /// FINISHED, FAILED or CANCELLED.
    pub status: RoundStatus,
    /// The round's result.
    pub result: String,
    /// When set, requires this worker to hold the lease.
    pub lease_owner: Option<String>,
}

/// An event to append; the store assigns `seq` and `created_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// What happened.
    pub kind: EventKind,
    /// Details (a JSON object).
    pub payload: Json,
    /// The step it belongs to; 0 when none.
    pub step: u64,
    /// The round it belongs to; 0 when none.
    pub round: u32,
}

/// A blackboard entry to append; the store assigns its index.
#[derive(Debug, Clone, PartialEq)]
pub struct NewBlackboardEntry {
    /// Which list it goes to.
    pub kind: BlackboardKind,
    /// Its content (a JSON object).
    pub value: Json,
    /// For images: the artifact with the bytes.
    pub artifact_id: Option<String>,
}

/// One step to record, with everything that commits with it.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// The session.
    pub session_id: Uuid,
    /// The step as the agent reports it (`artifacts` ignored).
    pub step: Step,
    /// The seeds' MemoryItem (a JSON object).
    pub memory_item: Json,
    /// Blackboard entries the step wrote.
    pub blackboard: Vec<NewBlackboardEntry>,
    /// The step's artifacts: references to blobs put earlier (the blob store holds their bytes).
    pub artifacts: Vec<StepArtifact>,
    /// Events appended before STEP_FINISHED.
    pub events: Vec<NewEvent>,
    /// When set, requires this worker to hold the lease.
    pub lease_owner: Option<String>,
    /// SHA-256 of the canonical request (without the lease owner): identical content, identical hash.
    pub content_hash: [u8; 32],
}

/// What [`Store::record_step`](super::Store::record_step) did.
#[derive(Debug, Clone)]
pub struct RecordedStep {
    /// The stored step (with artifact references).
    pub step: Step,
    /// True when the identical step already existed and nothing was written.
    pub duplicate: bool,
    /// Newest sequence number of the session after the call.
    pub last_seq: u64,
    /// The blackboard entries the step wrote (empty for a duplicate).
    pub blackboard: Vec<BlackboardEntry>,
}

/// An artifact added to a step already recorded; its bytes are a blob put earlier.
#[derive(Debug, Clone)]
pub struct NewArtifact {
    /// The session it belongs to.
    pub session_id: Uuid,
    /// The step it belongs to.
    pub step: u64,
    /// What it is and where its bytes are.
    pub artifact: StepArtifact,
}

/// An artifact of a step: its bytes are a blob in the blob store, the row keeps the reference.
#[derive(Debug, Clone)]
pub struct StepArtifact {
    /// What it is.
    pub kind: ArtifactKind,
    /// MIME type.
    pub content_type: String,
    /// Metadata (a JSON object).
    pub metadata: Json,
    /// The blob holding the bytes (durable before the row references it).
    pub blob: BlobRef,
}

/// Bytes already stored in the blob store ([`crate::blob`]), referenced by an artifact row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// Hex SHA-256 of the bytes (the blob's name).
    pub sha256: String,
    /// Their length.
    pub size: u64,
}

/// How to find an artifact.
#[derive(Debug, Clone)]
pub enum ArtifactKey {
    /// By content id (hex SHA-256).
    Id(String),
    /// By where it was stored.
    Place {
        /// The session.
        session_id: Uuid,
        /// The step.
        step: u64,
        /// The kind.
        kind: ArtifactKind,
    },
}

/// The lowercase database name of a protobuf enum value: `SESSION_STATUS_QUEUED` → `queued`.
pub fn db_name(proto_name: &str, prefix: &str) -> String {
    proto_name
        .strip_prefix(prefix)
        .unwrap_or(proto_name)
        .to_ascii_lowercase()
}

/// The protobuf name of a database enum value: `queued` → `SESSION_STATUS_QUEUED`.
pub fn proto_name(db: &str, prefix: &str) -> String {
    format!("{prefix}{}", db.to_ascii_uppercase())
}

/// Database names of the enums the store keeps as text.
pub trait DbEnum: Sized + Copy {
    /// The protobuf name prefix.
    const PREFIX: &'static str;
    /// The protobuf name.
    fn proto_str(self) -> &'static str;
    /// Parses a protobuf name.
    fn from_proto_str(name: &str) -> Option<Self>;
    /// The lowercase database name.
    fn db(self) -> String {
        db_name(self.proto_str(), Self::PREFIX)
    }
    /// Parses a database name.
    fn from_db(text: &str) -> Option<Self> {
        Self::from_proto_str(&proto_name(text, Self::PREFIX))
    }
}

macro_rules! db_enum {
    ($($ty:ty => $prefix:literal),* $(,)?) => {$(
        impl DbEnum for $ty {
            const PREFIX: &'static str = $prefix;
            fn proto_str(self) -> &'static str {
                self.as_str_name()
            }
            fn from_proto_str(name: &str) -> Option<Self> {
                Self::from_str_name(name)
            }
        }
    )*};
}

db_enum! {
    SessionStatus => "SESSION_STATUS_",
    RoundStatus => "ROUND_STATUS_",
    EventKind => "EVENT_KIND_",
    BlackboardKind => "BLACKBOARD_KIND_",
    ArtifactKind => "ARTIFACT_KIND_",
    ufo_proto::v1::AgentKind => "AGENT_KIND_",
    ufo_proto::v1::KnowledgeKind => "KNOWLEDGE_KIND_",
    ufo_proto::v1::ExperienceRating => "EXPERIENCE_RATING_",
    ufo_proto::v1::ParkReason => "PARK_REASON_",
    SessionKind => "SESSION_KIND_",
}

/// True for the events that wake a parked session: an answer or a decision.
pub fn wakes(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::QuestionAnswered | EventKind::ActionApproved | EventKind::ActionRejected
    )
}

/// True for the statuses that end a session.
pub fn is_terminal(status: SessionStatus) -> bool {
    matches!(
        status,
        SessionStatus::Finished | SessionStatus::Failed | SessionStatus::Cancelled
    )
}

/// True for the events that end a session's log (unless a follow-up request reopens it).
pub fn is_terminal_event(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::TaskFinished | EventKind::TaskFailed | EventKind::TaskCancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_names_round_trip_through_the_database_form() {
        assert_eq!(SessionStatus::Queued.db(), "queued");
        assert_eq!(
            ArtifactKind::from_db("annotated_screenshot"),
            Some(ArtifactKind::AnnotatedScreenshot)
        );
        assert_eq!(EventKind::from_db("nope"), None);
    }

    #[test]
    fn page_cursor_round_trips_and_rejects_garbage() {
        let cursor = PageCursor {
            created_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            id: Uuid::new_v4(),
        };
        assert_eq!(PageCursor::decode(&cursor.encode()), Some(cursor));
        assert_eq!(PageCursor::decode("zz"), None);
        assert_eq!(PageCursor::decode(&hex::encode("1.x")), None);
    }
}

/// Which sessions' screenshots [`Store::prune_images`](super::Store::prune_images) removes: ended sessions
/// matching either rule (a rule left `None` selects nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct PruneRule {
    /// Sessions created before this time.
    pub created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Sessions with at least this many sessions newer than them.
    pub keep_newest: Option<u64>,
}

/// What a prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Sessions whose images were pruned.
    pub sessions: u64,
    /// Screenshot artifact references removed.
    pub artifacts: u64,
    /// Blob rows no artifact referenced any more, removed.
    pub blobs: u64,
}

/// Which desktop of the pool a session needs (issue 36), stored as JSON in `sessions.desktop_want`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesktopWant {
    /// The desktop of this name.
    Name(String),
    /// Any desktop.
    Any,
    /// Any desktop whose labels include all of these.
    Labels(std::collections::BTreeMap<String, String>),
}

impl DesktopWant {
    /// Whether a desktop of this name and these labels fits.
    pub fn fits(&self, name: &str, labels: &std::collections::BTreeMap<String, String>) -> bool {
        match self {
            Self::Name(wanted) => wanted == name,
            Self::Any => true,
            Self::Labels(wanted) => wanted.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }

    /// The protobuf form.
    pub fn to_proto(&self) -> ufo_proto::v1::DesktopWant {
        match self {
            Self::Name(name) => ufo_proto::v1::DesktopWant {
                name: name.clone(),
                ..Default::default()
            },
            Self::Any => ufo_proto::v1::DesktopWant {
                any: true,
                ..Default::default()
            },
            Self::Labels(labels) => ufo_proto::v1::DesktopWant {
                labels: labels.clone().into_iter().collect(),
                ..Default::default()
            },
        }
    }
}

/// A session claimed by a worker ([`super::Store::claim_task_reaching`], [`super::Store::check_in_and_claim`]).
#[derive(Debug, Clone)]
pub struct Claim {
    /// The session, as the claim left it.
    pub session: ufo_proto::v1::Session,
    /// The desktop checked out to it, when it wants one.
    pub desktop: Option<ufo_proto::v1::Desktop>,
    /// When the claim was asked to start it: its rounds (the first open one begun) and whether it is
    /// fresh (nothing recorded that its runner would read back).
    pub start: Option<ufo_proto::v1::TaskStart>,
}

/// A desktop registering (or heartbeating) into the pool.
#[derive(Debug, Clone)]
pub struct NewDesktop {
    /// Its name (the executor's).
    pub name: String,
    /// Its labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The executor's version; empty keeps the stored one.
    pub version: String,
    /// The registering connection's generation: a write below the stored one is refused (a replaced
    /// connection's late write); 0 is unfenced and keeps the stored generation.
    pub generation: u64,
}

/// A worker giving a checked-out desktop back ([`super::Store::check_in_desktop`]).
#[derive(Debug, Clone)]
pub struct DesktopCheckIn {
    /// The desktop.
    pub name: String,
    /// The session it was checked out to.
    pub session: Uuid,
    /// The worker holding the check-out.
    pub worker: String,
    /// `Some`: the reset failed, the desktop becomes broken with this reason.
    pub broken: Option<String>,
}
