//! [`Store`] for this backend's [`SqlStore`]: each method delegates to the module that owns it.

use std::time::Duration;

use async_trait::async_trait;
use ufo_proto::v1::{
    Artifact, ArtifactRef, Blackboard, BlackboardEntry, Desktop, DesktopChange, Event,
    ExperienceRating, KnowledgeHit, KnowledgeItem, Lease, MemoryItem, Round, Session,
    SessionStatus, Step,
};
use uuid::Uuid;

use super::SqlStore;
use crate::knowledge::{
    DocumentUpload, KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare, NewKnowledge,
};
use crate::store::{
    ArtifactKey, DesktopCheckIn, NewArtifact, NewBlackboardEntry, NewDesktop, NewEvent, NewSession,
    PageCursor, PruneOutcome, PruneRule, RecordedStep, RoundEnd, StatusChange, StepRecord, Store,
    StoreResult, Subscription,
};

#[async_trait]
impl Store for SqlStore {
    async fn prune_images(&self, rule: PruneRule) -> StoreResult<PruneOutcome> {
        self.prune_images_impl(rule).await
    }

    async fn create_session(&self, new: NewSession) -> StoreResult<Session> {
        self.create_session_impl(new).await
    }

    async fn end_expired_direct(
        &self,
        worker: String,
        limit: u32,
        unleased_idle: Option<Duration>,
    ) -> StoreResult<Vec<Session>> {
        self.end_expired_direct_impl(worker, limit, unleased_idle)
            .await
    }

    async fn get_session(&self, id: Uuid) -> StoreResult<Session> {
        self.get_session_impl(id).await
    }

    async fn list_sessions(
        &self,
        status: Option<SessionStatus>,
        owner: Option<&str>,
        cursor: Option<PageCursor>,
        limit: u32,
    ) -> StoreResult<(Vec<Session>, Option<PageCursor>)> {
        self.list_sessions_impl(status, owner, cursor, limit).await
    }

    async fn set_session_status(&self, change: StatusChange) -> StoreResult<Session> {
        self.set_session_status_impl(change).await
    }

    async fn request_cancel(&self, id: Uuid, reason: String) -> StoreResult<Session> {
        self.request_cancel_impl(id, reason).await
    }

    async fn add_round(&self, id: Uuid, request: String) -> StoreResult<Round> {
        self.add_round_impl(id, request).await
    }

    async fn begin_round(
        &self,
        id: Uuid,
        number: u32,
        lease_owner: Option<String>,
    ) -> StoreResult<Round> {
        self.begin_round_impl(id, number, lease_owner).await
    }

    async fn finish_round(&self, end: RoundEnd) -> StoreResult<Round> {
        self.finish_round_impl(end).await
    }

    async fn list_rounds(&self, id: Uuid) -> StoreResult<Vec<Round>> {
        self.list_rounds_impl(id).await
    }

    async fn record_step(&self, record: StepRecord) -> StoreResult<RecordedStep> {
        self.record_step_impl(record).await
    }

    async fn list_steps(&self, id: Uuid, from_step: u64, limit: u32) -> StoreResult<Vec<Step>> {
        self.list_steps_impl(id, from_step, limit).await
    }

    async fn get_step(&self, id: Uuid, step: u64) -> StoreResult<Step> {
        self.get_step_impl(id, step).await
    }

    async fn get_memory(&self, id: Uuid, agent: Option<String>) -> StoreResult<Vec<MemoryItem>> {
        self.get_memory_impl(id, agent).await
    }

    async fn get_blackboard(&self, id: Uuid) -> StoreResult<Blackboard> {
        self.get_blackboard_impl(id).await
    }

    async fn append_blackboard(
        &self,
        id: Uuid,
        entries: Vec<NewBlackboardEntry>,
        events: Vec<NewEvent>,
    ) -> StoreResult<(Vec<BlackboardEntry>, u64)> {
        self.append_blackboard_impl(id, entries, events).await
    }

    async fn add_artifact(&self, artifact: NewArtifact) -> StoreResult<ArtifactRef> {
        self.add_artifact_impl(artifact).await
    }

    async fn get_artifact(&self, key: ArtifactKey) -> StoreResult<Artifact> {
        self.get_artifact_impl(key).await
    }

    async fn referenced_blobs(&self, hashes: Vec<String>) -> StoreResult<Vec<String>> {
        self.referenced_blobs_impl(hashes).await
    }

    async fn append_events(
        &self,
        id: Uuid,
        events: Vec<NewEvent>,
        lease_owner: Option<String>,
    ) -> StoreResult<Vec<Event>> {
        self.append_events_impl(id, events, lease_owner).await
    }

    async fn read_events(&self, id: Uuid, from_seq: u64, limit: u32) -> StoreResult<Vec<Event>> {
        self.read_events_impl(id, from_seq, limit).await
    }

    fn subscribe(&self, id: Uuid) -> Subscription {
        self.notifier.subscribe(id)
    }

    async fn claim_task_reaching(
        &self,
        worker: String,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
    ) -> StoreResult<Option<crate::store::Claim>> {
        self.claim_task_impl(worker, lease, reachable, start).await
    }

    async fn renew_lease(&self, id: Uuid, worker: String, lease: Duration) -> StoreResult<Lease> {
        self.renew_lease_impl(id, worker, lease).await
    }

    async fn release_task(&self, id: Uuid, worker: String, requeue: bool) -> StoreResult<()> {
        self.release_task_impl(id, worker, requeue).await
    }

    async fn park_task(&self, park: crate::store::ParkTask) -> StoreResult<bool> {
        self.park_task_impl(park).await
    }

    async fn replace_documents(
        &self,
        documents: Vec<DocumentUpload>,
    ) -> StoreResult<Vec<(Vec<KnowledgeItem>, u32)>> {
        self.replace_documents_impl(documents).await
    }

    async fn put_experience(&self, item: NewKnowledge) -> StoreResult<KnowledgeItem> {
        self.put_experience_impl(item).await
    }

    async fn rate_experience(
        &self,
        task_id: Uuid,
        owner: String,
        rating: ExperienceRating,
    ) -> StoreResult<KnowledgeItem> {
        self.rate_experience_impl(task_id, owner, rating).await
    }

    async fn search_knowledge(&self, search: KnowledgeSearch) -> StoreResult<Vec<KnowledgeHit>> {
        self.search_knowledge_impl(search).await
    }

    async fn list_knowledge(&self, filter: KnowledgeFilter) -> StoreResult<Vec<KnowledgeItem>> {
        self.list_knowledge_impl(filter).await
    }

    async fn share_knowledge(&self, share: KnowledgeShare) -> StoreResult<KnowledgeItem> {
        self.share_knowledge_impl(share).await
    }

    async fn delete_knowledge(&self, which: KnowledgeDelete) -> StoreResult<u32> {
        self.delete_knowledge_impl(which).await
    }

    async fn register_desktop(&self, new: NewDesktop) -> StoreResult<Desktop> {
        self.register_desktop_impl(new).await
    }

    async fn get_desktop(&self, name: &str) -> StoreResult<Desktop> {
        self.get_desktop_impl(name).await
    }

    async fn list_desktops(&self) -> StoreResult<Vec<Desktop>> {
        self.list_desktops_impl().await
    }

    async fn count_waiting_for_desktop(&self) -> StoreResult<u64> {
        self.count_waiting_for_desktop_impl().await
    }

    async fn check_in_desktop(&self, back: DesktopCheckIn) -> StoreResult<Desktop> {
        self.check_in_desktop_impl(back).await
    }

    async fn check_in_and_claim(
        &self,
        back: DesktopCheckIn,
        lease: Duration,
        start: bool,
    ) -> StoreResult<crate::store::HandOver> {
        self.check_in_and_claim_impl(back, lease, start).await
    }

    fn subscribe_pool(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notifier.subscribe_pool()
    }

    async fn renew_desktop(
        &self,
        name: &str,
        session: Uuid,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Desktop> {
        self.renew_desktop_impl(name, session, worker, lease).await
    }

    async fn set_desktop_state(&self, name: &str, change: DesktopChange) -> StoreResult<Desktop> {
        self.set_desktop_state_impl(name, change).await
    }

    async fn remove_desktop(&self, name: &str) -> StoreResult<()> {
        self.remove_desktop_impl(name).await
    }
}
