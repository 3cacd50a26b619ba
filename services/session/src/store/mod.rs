//! The storage contract of the session service and its two implementations.
//!
//! [`Store`] is one object-safe async trait used as `Arc<dyn Store>`:
//! - [`postgres`]: the production store; live watch via `LISTEN/NOTIFY`.
//! - [`sqlite`]: the embedded default (a local file, zero setup); live watch via an in-process notifier.
//!
//! Both run the same SQL (`sql/`, one [`SqlStore`] whose statements bind to either database) and pass the
//! same conformance suite (`tests/conformance`). Differences — row locking, the claim query, notification,
//! Postgres's one-statement writes — live in each backend's module.
//!
//! Artifact bytes live in a blob store ([`crate::blob`], a directory by default, S3 when configured): rows
//! keep references (hash, size, type, metadata). [`blobbed::BlobbedStore`] puts the bytes and wraps the
//! row store; [`migrate`] runs the migrations and, once, moves bytes rows still carried out to the blobs.

pub mod blobbed;
pub mod error;
pub mod migrate;
pub mod notify;
pub mod postgres;
mod sql;
pub mod sqlite;
pub mod step_json;
pub mod types;

pub use error::StoreError;
pub use notify::{Notifier, Subscription};
pub use sql::{IndexOptions, SqlStore};
pub use types::*;

use std::time::Duration;

use async_trait::async_trait;
use ufo_proto::v1::{
    Artifact, ArtifactRef, Blackboard, BlackboardEntry, Desktop, DesktopChange, Event,
    ExperienceRating, KnowledgeHit, KnowledgeItem, Lease, MemoryItem, Round, Session,
    SessionStatus, Step,
};

use crate::knowledge::{
    DocumentUpload, KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare, NewKnowledge,
};
use uuid::Uuid;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// What [`Store::check_in_and_claim`] returns: the desktop as checked in, and the session claimed for it
/// (with the desktop checked out to it) when one was.
pub type HandOver = (Desktop, Option<Claim>);

/// Durable storage of sessions, rounds, steps, memory, blackboard, artifacts and events.
///
/// Contracts shared by every method:
/// - unknown session ids give [`StoreError::NotFound`]; a `lease_owner` that does not hold the session's lease
///   gives [`StoreError::LeaseLost`]; state conflicts give [`StoreError::FailedPrecondition`];
/// - every method that appends events allocates their sequence numbers in the same transaction as its other
///   writes: per session they start at 1 and have no gaps, and they become visible in sequence order;
/// - inputs are already validated by the caller (non-empty names, known enum values, sizes within limits).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates a QUEUED session with round 1 PENDING (a DIRECT one: RUNNING with round 1 RUNNING, no lease)
    /// and appends TASK_CREATED. Idempotent on `new.id`: the same id with the same request and kind returns
    /// the stored session; otherwise `AlreadyExists`.
    async fn create_session(&self, new: NewSession) -> StoreResult<Session>;

    /// The session with this id.
    async fn get_session(&self, id: Uuid) -> StoreResult<Session>;

    /// Sessions newest first (by creation time, then id), optionally of one status and one owner, after
    /// `cursor`. Returns at most `limit` sessions and the cursor of the next page when more exist.
    async fn list_sessions(
        &self,
        status: Option<SessionStatus>,
        owner: Option<&str>,
        cursor: Option<PageCursor>,
        limit: u32,
    ) -> StoreResult<(Vec<Session>, Option<PageCursor>)>;

    /// Moves a session to `status` and appends the matching event (TASK_FINISHED/FAILED/CANCELLED for an
    /// end, none between RUNNING and WAITING). Ending a session ends its running round and drops the lease.
    /// Setting the status a session already has is a no-op. An ended session cannot change status.
    async fn set_session_status(&self, change: StatusChange) -> StoreResult<Session>;

    /// Sets `cancel_requested` and appends CANCEL_REQUESTED; a QUEUED, parked or DIRECT session is
    /// cancelled at once (TASK_CANCELLED). Idempotent; an ended session is returned unchanged.
    async fn request_cancel(&self, id: Uuid, reason: String) -> StoreResult<Session>;

    /// Adds the next round (PENDING) for a follow-up request and appends REQUEST_ADDED; an ended session is
    /// queued again (its result cleared). Refused while another round is pending, and for a DIRECT
    /// session (`FailedPrecondition`).
    async fn add_round(&self, id: Uuid, request: String) -> StoreResult<Round>;

    /// Marks a PENDING round RUNNING and appends ROUND_STARTED; a RUNNING round is returned unchanged.
    async fn begin_round(
        &self,
        id: Uuid,
        number: u32,
        lease_owner: Option<String>,
    ) -> StoreResult<Round>;

    /// Ends a RUNNING round with `status` and appends ROUND_FINISHED; ending it again with the same status
    /// is a no-op.
    async fn finish_round(&self, end: RoundEnd) -> StoreResult<Round>;

    /// Every round of a session, in order.
    async fn list_rounds(&self, id: Uuid) -> StoreResult<Vec<Round>>;

    /// Records a step in one transaction: the step row, memory item, blackboard entries, artifact links,
    /// totals (session and round), the given events and STEP_FINISHED. Re-recording the same
    /// (session, step) with an identical request writes nothing and returns `duplicate = true`; with a
    /// different request, `AlreadyExists`. The round must be RUNNING and the session not ended.
    async fn record_step(&self, record: StepRecord) -> StoreResult<RecordedStep>;

    /// Steps from `from_step` (1-based) in order, at most `limit`.
    async fn list_steps(&self, id: Uuid, from_step: u64, limit: u32) -> StoreResult<Vec<Step>>;

    /// One step with its artifact references.
    async fn get_step(&self, id: Uuid, step: u64) -> StoreResult<Step>;

    /// Memory items in step order, optionally of one agent.
    async fn get_memory(&self, id: Uuid, agent: Option<String>) -> StoreResult<Vec<MemoryItem>>;

    /// The whole blackboard of a session, each kind in index order.
    async fn get_blackboard(&self, id: Uuid) -> StoreResult<Blackboard>;

    /// Appends blackboard entries (indices assigned per kind) and events in one transaction. Returns the
    /// stored entries and the newest sequence number.
    async fn append_blackboard(
        &self,
        id: Uuid,
        entries: Vec<NewBlackboardEntry>,
        events: Vec<NewEvent>,
    ) -> StoreResult<(Vec<BlackboardEntry>, u64)>;

    /// Adds a reference from (session, step, kind) to a blob already durable in the blob store (the
    /// desktop after a task's last step). Idempotent.
    async fn add_artifact(&self, artifact: NewArtifact) -> StoreResult<ArtifactRef>;

    /// An artifact by content id, or by (session, step, kind).
    async fn get_artifact(&self, key: ArtifactKey) -> StoreResult<Artifact>;

    /// Removes the screenshot artifacts of ended sessions `rule` selects whose images are still kept,
    /// and records when (`Session.images_pruned_at`); every step's record stays. Blob rows no artifact
    /// references any more are removed with them (the sweeper then deletes their blobs).
    async fn prune_images(&self, rule: PruneRule) -> StoreResult<PruneOutcome>;

    /// Stores `data` durably in the blob store (checked against `expected` when given) and returns its
    /// reference; idempotent. Only [`blobbed::BlobbedStore`] holds a blob store: a row store alone refuses.
    async fn put_blob(&self, data: bytes::Bytes, expected: Option<String>) -> StoreResult<BlobRef> {
        let _ = (data, expected);
        Err(StoreError::FailedPrecondition(
            "a row store keeps no bytes: open it with its blob store (BlobbedStore)".into(),
        ))
    }

    /// Which of these hex SHA-256 an artifact row references (the blob sweeper keeps exactly those).
    async fn referenced_blobs(&self, hashes: Vec<String>) -> StoreResult<Vec<String>>;

    /// Appends events in one transaction and returns them with their sequence numbers.
    async fn append_events(
        &self,
        id: Uuid,
        events: Vec<NewEvent>,
        lease_owner: Option<String>,
    ) -> StoreResult<Vec<Event>>;

    /// Stored events with `seq >= from_seq`, in order, at most `limit`. Never blocks on writers.
    async fn read_events(&self, id: Uuid, from_seq: u64, limit: u32) -> StoreResult<Vec<Event>>;

    /// Wakes the caller whenever events of `id` are committed (by this process or, for Postgres, any
    /// replica). The value is a hint (a sequence number known to exist); readers re-read the store.
    fn subscribe(&self, id: Uuid) -> Subscription;

    /// Claims the oldest claimable task (QUEUED, or RUNNING/WAITING with an expired lease; never a DIRECT
    /// session) for `worker` for `lease`, and appends TASK_CLAIMED. Concurrent claims never return the
    /// same session.
    ///
    /// A session with a `desktop_want` is claimed only together with a desktop that fits it, checked out
    /// to it in the same transaction (`Session.desktop`; one it held already is kept); sessions that find
    /// none are passed over in favour of later ones and marked `waiting_for_desktop`. A desktop is never
    /// checked out to two sessions.
    async fn claim_task(&self, worker: String, lease: Duration) -> StoreResult<Option<Session>> {
        Ok(self
            .claim_task_reaching(worker, lease, None, false)
            .await?
            .map(|claim| claim.session))
    }

    /// [`Store::claim_task`] checking out only desktops in `reachable` (when given): the ones the
    /// worker can reach; with the desktop checked out. With `start`, the same transaction also begins
    /// the session's first open round (PENDING → RUNNING, ROUND_STARTED after TASK_CLAIMED, as
    /// [`Store::begin_round`]) and reads what its runner needs ([`Claim::start`]).
    async fn claim_task_reaching(
        &self,
        worker: String,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
    ) -> StoreResult<Option<Claim>>;

    /// Extends the lease held by `worker`; `LeaseLost` when another worker holds it or none does.
    async fn renew_lease(&self, id: Uuid, worker: String, lease: Duration) -> StoreResult<Lease>;

    /// Drops the lease held by `worker` and appends TASK_RELEASED; with `requeue`, the session goes back to
    /// the queue. Releasing a session the worker does not hold gives `LeaseLost`.
    async fn release_task(&self, id: Uuid, worker: String, requeue: bool) -> StoreResult<()>;

    /// Parks the session `park.worker` holds while it waits for a person: drops the lease, keeps it
    /// WAITING with `parked_for` and `parked_until`, appends TASK_PARKED and returns `true`. A parked
    /// session is claimed again only once an answer (QUESTION_ANSWERED) or a decision (ACTION_APPROVED /
    /// ACTION_REJECTED) is appended — that write queues it again in its old place — or once
    /// `parked_until` passes. Returns `false` and changes nothing when such an event was appended after
    /// `park.seen_seq`. `LeaseLost` when the worker does not hold the lease; `FailedPrecondition` unless
    /// the session is RUNNING or WAITING; a parked session cancelled is cancelled at once.
    async fn park_task(&self, park: ParkTask) -> StoreResult<bool>;

    /// Ends the DIRECT sessions whose agent went away, at most `limit`: RUNNING or WAITING with a lease
    /// that expired — or without a lease (an agent of before direct leases) and unchanged for
    /// `unleased_idle` when that is given — become FAILED (TASK_FAILED) with a result naming the lapsed
    /// lease and `worker`. Returns them as ended; concurrent calls never end one twice.
    async fn end_expired_direct(
        &self,
        worker: String,
        limit: u32,
        unleased_idle: Option<Duration>,
    ) -> StoreResult<Vec<Session>>;

    /// Registers a desktop of the pool (issue 36), or refreshes its labels, version (when given) and
    /// heartbeat; its state and check-out are kept. Idempotent. Fenced by `new.generation`: a write below
    /// the stored generation changes nothing and gives `FailedPrecondition` (a replaced connection's
    /// late write must not overwrite the newer connection's labels); 0 is unfenced.
    async fn register_desktop(&self, new: NewDesktop) -> StoreResult<Desktop>;

    /// One desktop; `NotFound` when it is not registered.
    async fn get_desktop(&self, name: &str) -> StoreResult<Desktop>;

    /// Every desktop, by name.
    async fn list_desktops(&self) -> StoreResult<Vec<Desktop>>;

    /// How many QUEUED sessions wait for a desktop (their last claim found none free that fits).
    async fn count_waiting_for_desktop(&self) -> StoreResult<u64>;

    /// Gives a desktop checked out to (`session`, `worker`) back: free, or broken with the reason.
    /// `FailedPrecondition` when it is not checked out to them (a lapsed check-out handed on).
    async fn check_in_desktop(&self, back: DesktopCheckIn) -> StoreResult<Desktop>;

    /// The hand-over ([`HandOver`]): [`Store::check_in_desktop`] and, when the desktop comes back free, a claim for
    /// `back.worker` (with `lease`) of the oldest claimable session that this desktop fits or that needs
    /// no desktop, in one transaction (the claim's rules are [`Store::claim_task`]'s, with only this
    /// desktop reachable). Returns the desktop as checked in, and the claimed session with the desktop
    /// checked out to it, if any. `FailedPrecondition` as for the check-in, and then nothing is claimed.
    /// `start` as for [`Store::claim_task_reaching`].
    async fn check_in_and_claim(
        &self,
        back: DesktopCheckIn,
        lease: Duration,
        start: bool,
    ) -> StoreResult<crate::store::HandOver>;

    /// Changes whenever a waiting session may have become claimable — a desktop checked in free, given
    /// back by a parked session, undrained or made ready — here or (Postgres) in any replica. A hint:
    /// claim to know.
    fn subscribe_pool(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Extends the check-out of a desktop held by (`session`, `worker`) while the worker resets it.
    async fn renew_desktop(
        &self,
        name: &str,
        session: Uuid,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Desktop>;

    /// Drains, undrains or marks ready a desktop; `NotFound` when it is not registered.
    async fn set_desktop_state(&self, name: &str, change: DesktopChange) -> StoreResult<Desktop>;

    /// Removes a desktop; `FailedPrecondition` while it is checked out, `NotFound` when unknown.
    async fn remove_desktop(&self, name: &str) -> StoreResult<()>;

    /// Replaces the document sections of (`application`, `source`) with `sections` in one transaction;
    /// returns the stored sections and how many earlier ones were replaced.
    async fn replace_document(
        &self,
        application: String,
        source: String,
        sections: Vec<NewKnowledge>,
    ) -> StoreResult<(Vec<KnowledgeItem>, u32)> {
        let done = self
            .replace_documents(vec![DocumentUpload {
                application,
                source,
                sections,
            }])
            .await?;
        Ok(done.into_iter().next().unwrap_or_default())
    }

    /// Replaces several documents in one transaction (all or none); one result per document, in order.
    async fn replace_documents(
        &self,
        documents: Vec<DocumentUpload>,
    ) -> StoreResult<Vec<(Vec<KnowledgeItem>, u32)>>;

    /// Stores an experience or demonstration, replacing an earlier one of the same kind and task.
    async fn put_experience(&self, item: NewKnowledge) -> StoreResult<KnowledgeItem>;

    /// Rates the experience of `task_id` owned by `owner`; `NotFound` when there is none of theirs.
    async fn rate_experience(
        &self,
        task_id: uuid::Uuid,
        owner: String,
        rating: ExperienceRating,
    ) -> StoreResult<KnowledgeItem>;

    /// The best full-text matches, best first: documents for everyone, experiences and demonstrations of
    /// `search.owner` and those shared with them, never failed or bad-rated ones.
    async fn search_knowledge(&self, search: KnowledgeSearch) -> StoreResult<Vec<KnowledgeHit>>;

    /// Stored items, newest first.
    async fn list_knowledge(&self, filter: KnowledgeFilter) -> StoreResult<Vec<KnowledgeItem>>;

    /// Deletes the selected items; returns how many.
    async fn delete_knowledge(&self, which: KnowledgeDelete) -> StoreResult<u32>;

    /// Adds callers (or everyone) to an experience's or demonstration's sharing, or takes them off
    /// (`share.unshare`); returns the item. `NotFound` for no such item; `InvalidArgument` for a
    /// document or more than `share.max_callers` names.
    async fn share_knowledge(&self, share: KnowledgeShare) -> StoreResult<KnowledgeItem>;
}
