//! [`BlobbedStore`]: a [`Store`] whose artifact bytes live in a [`BlobStore`] and whose rows keep only
//! references (hash, size, content type, metadata).
//!
//! Bytes go one way: `PutBlob` stores them (content-addressed, idempotent), then a step (or `AddArtifact`)
//! references them; a reference to a blob the blob store does not hold whole is refused, so nothing commits
//! with bytes that are not durable. A blob put for a step that never committed is unreferenced, and
//! [`crate::blob::sweep`] collects it. Reads serve the bytes from the blob store.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tracing::instrument;
use ufo_proto::v1::{
    Artifact, ArtifactRef, Blackboard, BlackboardEntry, Desktop, DesktopChange, Event,
    ExperienceRating, KnowledgeHit, KnowledgeItem, Lease, MemoryItem, Round, Session,
    SessionStatus, Step,
};
use uuid::Uuid;

use crate::blob::sweep::BlobReferences;
use crate::blob::{BlobHash, BlobStore};
use crate::knowledge::{
    DocumentUpload, KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare, NewKnowledge,
};
use crate::store::{
    ArtifactKey, BlobRef, DesktopCheckIn, NewArtifact, NewBlackboardEntry, NewDesktop, NewEvent,
    NewSession, PageCursor, ParkTask, PruneOutcome, PruneRule, RecordedStep, RoundEnd,
    StatusChange, StepArtifact, StepRecord, Store, StoreError, StoreResult, Subscription,
};

/// A store with artifact bytes in a blob store.
#[derive(Clone)]
pub struct BlobbedStore {
    inner: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
}

impl std::fmt::Debug for BlobbedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobbedStore")
            .field("blobs", &self.blobs)
            .finish_non_exhaustive()
    }
}

impl BlobbedStore {
    /// `inner` keeps rows; `blobs` keeps bytes.
    pub fn new(inner: Arc<dyn Store>, blobs: Arc<dyn BlobStore>) -> Self {
        Self { inner, blobs }
    }

    /// The blob store (for the sweeper).
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        &self.blobs
    }

    /// Refuses references to blobs the blob store does not hold whole: a row references only durable bytes.
    #[instrument(name = "store.check_blobs", skip_all, fields(blobs = artifacts.len()))]
    async fn check_durable(&self, artifacts: &[StepArtifact]) -> StoreResult<()> {
        let checks = artifacts.iter().map(|a| async move {
            let hash = BlobHash::parse(&a.blob.sha256)?;
            match self.blobs.stat(&hash).await? {
                Some(info) if info.size == a.blob.size => Ok(()),
                Some(info) => Err(StoreError::FailedPrecondition(format!(
                    "blob {hash} holds {} bytes, not the {} the step says",
                    info.size, a.blob.size
                ))),
                None => Err(StoreError::FailedPrecondition(format!(
                    "blob {hash} is not in the blob store: put it with PutBlob before the step \
                     references it"
                ))),
            }
        });
        futures::future::try_join_all(checks).await.map(drop)
    }

    /// Puts `data` (checked against `sha256` when given) and returns the reference the row will keep.
    async fn put_blob(&self, data: Bytes, sha256: Option<&str>) -> StoreResult<BlobRef> {
        let expected = sha256.map(BlobHash::parse).transpose()?;
        let size = data.len() as u64;
        let hash = self.blobs.put(data, expected.as_ref()).await?;
        Ok(BlobRef {
            sha256: hash.as_str().to_owned(),
            size,
        })
    }
}

#[async_trait]
impl BlobReferences for BlobbedStore {
    async fn referenced(
        &self,
        hashes: &[BlobHash],
    ) -> Result<HashSet<BlobHash>, Box<dyn std::error::Error + Send + Sync>> {
        let names = hashes.iter().map(|h| h.as_str().to_owned()).collect();
        let kept = self.inner.referenced_blobs(names).await?;
        Ok(kept
            .iter()
            .filter_map(|h| BlobHash::parse(h).ok())
            .collect())
    }
}

#[async_trait]
impl Store for BlobbedStore {
    /// Records the step once every blob it references is durable.
    #[instrument(name = "store.record_step_blobs", skip_all,
        fields(session = %record.session_id, artifacts = record.artifacts.len()))]
    async fn record_step(&self, record: StepRecord) -> StoreResult<RecordedStep> {
        self.check_durable(&record.artifacts).await?;
        self.inner.record_step(record).await
    }

    #[instrument(name = "store.add_artifact", skip_all,
        fields(session = %artifact.session_id, step = artifact.step))]
    async fn add_artifact(&self, artifact: NewArtifact) -> StoreResult<ArtifactRef> {
        self.check_durable(std::slice::from_ref(&artifact.artifact))
            .await?;
        self.inner.add_artifact(artifact).await
    }

    /// The row's reference with the blob's bytes.
    #[instrument(name = "store.get_artifact_blob", skip_all)]
    async fn get_artifact(&self, key: ArtifactKey) -> StoreResult<Artifact> {
        let mut artifact = self.inner.get_artifact(key).await?;
        if let Some(r) = &artifact.r#ref {
            artifact.data = self
                .blobs
                .get(&BlobHash::parse(&r.id)?)
                .await?
                .to_vec()
                .into();
        }
        Ok(artifact)
    }

    async fn referenced_blobs(&self, hashes: Vec<String>) -> StoreResult<Vec<String>> {
        self.inner.referenced_blobs(hashes).await
    }

    #[instrument(name = "store.put_blob", skip_all, fields(size = data.len()))]
    async fn put_blob(&self, data: Bytes, expected: Option<String>) -> StoreResult<BlobRef> {
        self.put_blob(data, expected.as_deref()).await
    }

    async fn prune_images(&self, rule: PruneRule) -> StoreResult<PruneOutcome> {
        self.inner.prune_images(rule).await
    }

    async fn create_session(&self, new: NewSession) -> StoreResult<Session> {
        self.inner.create_session(new).await
    }

    async fn get_session(&self, id: Uuid) -> StoreResult<Session> {
        self.inner.get_session(id).await
    }

    async fn list_sessions(
        &self,
        status: Option<SessionStatus>,
        owner: Option<&str>,
        cursor: Option<PageCursor>,
        limit: u32,
    ) -> StoreResult<(Vec<Session>, Option<PageCursor>)> {
        self.inner.list_sessions(status, owner, cursor, limit).await
    }

    async fn set_session_status(&self, change: StatusChange) -> StoreResult<Session> {
        self.inner.set_session_status(change).await
    }

    async fn request_cancel(&self, id: Uuid, reason: String) -> StoreResult<Session> {
        self.inner.request_cancel(id, reason).await
    }

    async fn add_round(&self, id: Uuid, request: String) -> StoreResult<Round> {
        self.inner.add_round(id, request).await
    }

    async fn begin_round(
        &self,
        id: Uuid,
        number: u32,
        lease_owner: Option<String>,
    ) -> StoreResult<Round> {
        self.inner.begin_round(id, number, lease_owner).await
    }

    async fn finish_round(&self, end: RoundEnd) -> StoreResult<Round> {
        self.inner.finish_round(end).await
    }

    async fn list_rounds(&self, id: Uuid) -> StoreResult<Vec<Round>> {
        self.inner.list_rounds(id).await
    }

    async fn list_steps(&self, id: Uuid, from_step: u64, limit: u32) -> StoreResult<Vec<Step>> {
        self.inner.list_steps(id, from_step, limit).await
    }

    async fn get_step(&self, id: Uuid, step: u64) -> StoreResult<Step> {
        self.inner.get_step(id, step).await
    }

    async fn get_memory(&self, id: Uuid, agent: Option<String>) -> StoreResult<Vec<MemoryItem>> {
        self.inner.get_memory(id, agent).await
    }

    async fn get_blackboard(&self, id: Uuid) -> StoreResult<Blackboard> {
        self.inner.get_blackboard(id).await
    }

    async fn append_blackboard(
        &self,
        id: Uuid,
        entries: Vec<NewBlackboardEntry>,
        events: Vec<NewEvent>,
    ) -> StoreResult<(Vec<BlackboardEntry>, u64)> {
        self.inner.append_blackboard(id, entries, events).await
    }

    async fn append_events(
        &self,
        id: Uuid,
        events: Vec<NewEvent>,
        lease_owner: Option<String>,
    ) -> StoreResult<Vec<Event>> {
        self.inner.append_events(id, events, lease_owner).await
    }

    async fn read_events(&self, id: Uuid, from_seq: u64, limit: u32) -> StoreResult<Vec<Event>> {
        self.inner.read_events(id, from_seq, limit).await
    }

    fn subscribe(&self, id: Uuid) -> Subscription {
        self.inner.subscribe(id)
    }

    async fn claim_task_reaching(
        &self,
        worker: String,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
    ) -> StoreResult<Option<crate::store::Claim>> {
        self.inner
            .claim_task_reaching(worker, lease, reachable, start)
            .await
    }

    async fn renew_lease(&self, id: Uuid, worker: String, lease: Duration) -> StoreResult<Lease> {
        self.inner.renew_lease(id, worker, lease).await
    }

    async fn end_expired_direct(
        &self,
        worker: String,
        limit: u32,
        unleased_idle: Option<Duration>,
    ) -> StoreResult<Vec<Session>> {
        self.inner
            .end_expired_direct(worker, limit, unleased_idle)
            .await
    }

    async fn release_task(&self, id: Uuid, worker: String, requeue: bool) -> StoreResult<()> {
        self.inner.release_task(id, worker, requeue).await
    }

    async fn park_task(&self, park: ParkTask) -> StoreResult<bool> {
        self.inner.park_task(park).await
    }

    async fn register_desktop(&self, new: NewDesktop) -> StoreResult<Desktop> {
        self.inner.register_desktop(new).await
    }

    async fn get_desktop(&self, name: &str) -> StoreResult<Desktop> {
        self.inner.get_desktop(name).await
    }

    async fn list_desktops(&self) -> StoreResult<Vec<Desktop>> {
        self.inner.list_desktops().await
    }

    async fn count_waiting_for_desktop(&self) -> StoreResult<u64> {
        self.inner.count_waiting_for_desktop().await
    }

    async fn check_in_desktop(&self, back: DesktopCheckIn) -> StoreResult<Desktop> {
        self.inner.check_in_desktop(back).await
    }

    async fn check_in_and_claim(
        &self,
        back: DesktopCheckIn,
        lease: Duration,
        start: bool,
    ) -> StoreResult<crate::store::HandOver> {
        self.inner.check_in_and_claim(back, lease, start).await
    }

    fn subscribe_pool(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.subscribe_pool()
    }

    async fn renew_desktop(
        &self,
        name: &str,
        session: Uuid,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Desktop> {
        self.inner.renew_desktop(name, session, worker, lease).await
    }

    async fn set_desktop_state(&self, name: &str, change: DesktopChange) -> StoreResult<Desktop> {
        self.inner.set_desktop_state(name, change).await
    }

    async fn remove_desktop(&self, name: &str) -> StoreResult<()> {
        self.inner.remove_desktop(name).await
    }

    async fn replace_documents(
        &self,
        documents: Vec<DocumentUpload>,
    ) -> StoreResult<Vec<(Vec<KnowledgeItem>, u32)>> {
        self.inner.replace_documents(documents).await
    }

    async fn put_experience(&self, item: NewKnowledge) -> StoreResult<KnowledgeItem> {
        self.inner.put_experience(item).await
    }

    async fn rate_experience(
        &self,
        task_id: Uuid,
        owner: String,
        rating: ExperienceRating,
    ) -> StoreResult<KnowledgeItem> {
        self.inner.rate_experience(task_id, owner, rating).await
    }

    async fn search_knowledge(&self, search: KnowledgeSearch) -> StoreResult<Vec<KnowledgeHit>> {
        self.inner.search_knowledge(search).await
    }

    async fn list_knowledge(&self, filter: KnowledgeFilter) -> StoreResult<Vec<KnowledgeItem>> {
        self.inner.list_knowledge(filter).await
    }

    async fn share_knowledge(&self, share: KnowledgeShare) -> StoreResult<KnowledgeItem> {
        self.inner.share_knowledge(share).await
    }

    async fn delete_knowledge(&self, which: KnowledgeDelete) -> StoreResult<u32> {
        self.inner.delete_knowledge(which).await
    }
}
