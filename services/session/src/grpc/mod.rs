//! The `ufo.v1.SessionStore` gRPC service: validates requests, calls the [`Store`], maps errors.

pub mod desktops;
pub mod knowledge;
pub mod status;
pub mod validate;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use ufo_common::ErrorCode;
use ufo_proto::v1::session_store_server::SessionStore;
use ufo_proto::v1::{
    AddArtifactRequest, AddRoundRequest, AppendBlackboardRequest, AppendBlackboardResponse,
    AppendEventsRequest, AppendEventsResponse, Artifact, ArtifactRef, BeginRoundRequest,
    Blackboard, BlobRef, CheckInAndClaimRequest, CheckInAndClaimResponse, CheckInDesktopRequest,
    ClaimTaskRequest, ClaimTaskResponse, CreateSessionRequest, Desktop,
    EndExpiredDirectSessionsRequest, EndExpiredDirectSessionsResponse, Event, FinishRoundRequest,
    GetArtifactRequest, GetBlackboardRequest, GetMemoryRequest, GetMemoryResponse,
    GetSessionRequest, GetStepRequest, Lease, ListDesktopsRequest, ListDesktopsResponse,
    ListRoundsRequest, ListRoundsResponse, ListSessionsRequest, ListSessionsResponse,
    ListStepsRequest, ListStepsResponse, ParkReason, ParkTaskRequest, ParkTaskResponse, PoolSignal,
    PruneImagesRequest, PruneImagesResponse, PutBlobRequest, RecordStepRequest, RecordStepResponse,
    RegisterDesktopRequest, ReleaseTaskRequest, ReleaseTaskResponse, RemoveDesktopRequest,
    RemoveDesktopResponse, RenewDesktopRequest, RenewLeaseRequest, RequestCancelRequest, Round,
    Session, SessionKind, SessionStatus, SetDesktopStateRequest, SetSessionStatusRequest, Step,
    WatchEventsRequest, WatchPoolRequest,
};
use uuid::Uuid;

use self::status::status;
use self::validate::{Limits, invalid, optional, required, uuid};
use crate::config::Config;
use crate::store::{
    ArtifactKey, NewArtifact, NewLease, NewSession, PageCursor, ParkTask, RoundEnd, StatusChange,
    Store,
};
use crate::watch::{Kinds, WatchOptions, watch};

/// Limits the service applies, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct ServiceLimits {
    /// ListSessions page size when the request says 0.
    pub default_page_size: u32,
    /// Largest page (sessions, steps).
    pub max_page_size: u32,
    /// Lease when the request says 0.
    pub lease_default: Duration,
    /// Longest lease.
    pub lease_max: Duration,
    /// Per-watcher buffer.
    pub watch_buffer: usize,
    /// Largest artifact in bytes.
    pub max_artifact_bytes: usize,
    /// Largest batch in a request.
    pub max_batch: usize,
    /// Largest blob PutBlob accepts.
    pub max_blob_bytes: u64,
}

impl ServiceLimits {
    /// The limits a configuration sets.
    pub fn from_config(config: &Config) -> Self {
        Self {
            default_page_size: config.default_page_size.min(config.max_page_size),
            max_page_size: config.max_page_size,
            lease_default: Duration::from_millis(config.lease_default_ms.into()),
            lease_max: Duration::from_millis(config.lease_max_ms.into()),
            watch_buffer: config.watch_buffer as usize,
            max_artifact_bytes: config.max_message_bytes as usize,
            max_batch: config.max_batch as usize,
            max_blob_bytes: config.blobs.max_blob_bytes,
        }
    }

    fn page(&self, requested: u32) -> u32 {
        match requested {
            0 => self.default_page_size,
            n => n.min(self.max_page_size),
        }
    }

    fn lease(&self, requested_ms: u32) -> Duration {
        match requested_ms {
            0 => self.lease_default,
            ms => Duration::from_millis(ms.into()).min(self.lease_max),
        }
    }

    fn validation(&self) -> Limits {
        Limits {
            max_batch: self.max_batch,
            max_artifact_bytes: self.max_artifact_bytes,
        }
    }
}

/// The service over any store.
#[derive(Clone)]
pub struct SessionService {
    store: Arc<dyn Store>,
    limits: ServiceLimits,
}

impl SessionService {
    /// A service over `store` with `limits`.
    pub fn new(store: Arc<dyn Store>, limits: ServiceLimits) -> Self {
        Self { store, limits }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl SessionStore for SessionService {
    async fn create_session(
        &self,
        request: Request<CreateSessionRequest>,
    ) -> Result<Response<Session>, Status> {
        let r = request.into_inner();
        let id = match optional(r.id) {
            Some(id) => uuid("id", &id)?,
            None => Uuid::now_v7(),
        };
        let kind = match SessionKind::try_from(r.kind) {
            Ok(SessionKind::Unspecified | SessionKind::Task) => SessionKind::Task,
            Ok(SessionKind::Direct) => SessionKind::Direct,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "kind: {} is not a session kind",
                    r.kind
                )));
            }
        };
        let lease = match optional(r.lease_owner) {
            None if r.lease_ms > 0 => {
                return Err(invalid("lease_ms", "needs a lease_owner"));
            }
            None => None,
            Some(_) if kind != SessionKind::Direct => {
                return Err(invalid(
                    "lease_owner",
                    "only a direct session is leased on create; a task gets its lease from ClaimTask",
                ));
            }
            Some(owner) => Some(NewLease {
                owner,
                duration: self.limits.lease(r.lease_ms),
            }),
        };
        let new = NewSession {
            id,
            request: required("request", r.request)?,
            config: validate::object(r.config),
            owner: r.owner,
            kind,
            desktop: desktops::want(r.desktop)?,
            lease,
        };
        let session = self.store.create_session(new).await.map_err(status)?;
        Ok(Response::new(session))
    }

    async fn get_session(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<Session>, Status> {
        let id = uuid("session_id", &request.get_ref().session_id)?;
        Ok(Response::new(
            self.store.get_session(id).await.map_err(status)?,
        ))
    }

    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        let r = request.into_inner();
        let filter = match r.status {
            0 => None,
            value => Some(validate::known::<SessionStatus>("status", value)?),
        };
        let cursor = match r.page_token.as_str() {
            "" => None,
            token => Some(
                PageCursor::decode(token)
                    .ok_or_else(|| invalid("page_token", "not a page token"))?,
            ),
        };
        let (sessions, next) = self
            .store
            .list_sessions(
                filter,
                optional(r.owner).as_deref(),
                cursor,
                self.limits.page(r.page_size),
            )
            .await
            .map_err(status)?;
        Ok(Response::new(ListSessionsResponse {
            sessions,
            next_page_token: next.map(|c| c.encode()).unwrap_or_default(),
        }))
    }

    async fn set_session_status(
        &self,
        request: Request<SetSessionStatusRequest>,
    ) -> Result<Response<Session>, Status> {
        let r = request.into_inner();
        let change = StatusChange {
            id: uuid("session_id", &r.session_id)?,
            status: validate::settable_status(r.status)?,
            result: r.result,
            lease_owner: optional(r.lease_owner),
        };
        Ok(Response::new(
            self.store
                .set_session_status(change)
                .await
                .map_err(status)?,
        ))
    }

    async fn request_cancel(
        &self,
        request: Request<RequestCancelRequest>,
    ) -> Result<Response<Session>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        Ok(Response::new(
            self.store
                .request_cancel(id, r.reason)
                .await
                .map_err(status)?,
        ))
    }

    async fn add_round(
        &self,
        request: Request<AddRoundRequest>,
    ) -> Result<Response<Round>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let text = required("request", r.request)?;
        Ok(Response::new(
            self.store.add_round(id, text).await.map_err(status)?,
        ))
    }

    async fn begin_round(
        &self,
        request: Request<BeginRoundRequest>,
    ) -> Result<Response<Round>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let number = validate::round_number("number", r.number)?;
        Ok(Response::new(
            self.store
                .begin_round(id, number, optional(r.lease_owner))
                .await
                .map_err(status)?,
        ))
    }

    async fn finish_round(
        &self,
        request: Request<FinishRoundRequest>,
    ) -> Result<Response<Round>, Status> {
        let r = request.into_inner();
        let end = RoundEnd {
            id: uuid("session_id", &r.session_id)?,
            number: validate::round_number("number", r.number)?,
            status: validate::round_end_status(r.status)?,
            result: r.result,
            lease_owner: optional(r.lease_owner),
        };
        Ok(Response::new(
            self.store.finish_round(end).await.map_err(status)?,
        ))
    }

    async fn list_rounds(
        &self,
        request: Request<ListRoundsRequest>,
    ) -> Result<Response<ListRoundsResponse>, Status> {
        let id = uuid("session_id", &request.get_ref().session_id)?;
        let rounds = self.store.list_rounds(id).await.map_err(status)?;
        Ok(Response::new(ListRoundsResponse { rounds }))
    }

    async fn record_step(
        &self,
        request: Request<RecordStepRequest>,
    ) -> Result<Response<RecordStepResponse>, Status> {
        let record = validate::record_step(request.into_inner(), self.limits.validation())?;
        let recorded = self.store.record_step(record).await.map_err(status)?;
        Ok(Response::new(RecordStepResponse {
            step: Some(recorded.step),
            duplicate: recorded.duplicate,
            last_seq: recorded.last_seq,
            blackboard: recorded.blackboard,
        }))
    }

    async fn list_steps(
        &self,
        request: Request<ListStepsRequest>,
    ) -> Result<Response<ListStepsResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let from = validate::bounded("from_step", r.from_step)?.max(1);
        let limit = self.limits.page(r.limit);
        let steps = self
            .store
            .list_steps(id, from, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(ListStepsResponse { steps }))
    }

    async fn get_step(&self, request: Request<GetStepRequest>) -> Result<Response<Step>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let step = validate::positive("step", r.step)?;
        Ok(Response::new(
            self.store.get_step(id, step).await.map_err(status)?,
        ))
    }

    async fn get_memory(
        &self,
        request: Request<GetMemoryRequest>,
    ) -> Result<Response<GetMemoryResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let items = self
            .store
            .get_memory(id, optional(r.agent_name))
            .await
            .map_err(status)?;
        Ok(Response::new(GetMemoryResponse { items }))
    }

    async fn get_blackboard(
        &self,
        request: Request<GetBlackboardRequest>,
    ) -> Result<Response<Blackboard>, Status> {
        let id = uuid("session_id", &request.get_ref().session_id)?;
        Ok(Response::new(
            self.store.get_blackboard(id).await.map_err(status)?,
        ))
    }

    async fn append_blackboard(
        &self,
        request: Request<AppendBlackboardRequest>,
    ) -> Result<Response<AppendBlackboardResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        if r.entries.is_empty() {
            return Err(invalid("entries", "at least one entry is required"));
        }
        let limits = self.limits.validation();
        let entries = validate::entries("entries", r.entries, limits)?;
        let events = validate::events("events", r.events, limits)?;
        let (entries, last_seq) = self
            .store
            .append_blackboard(id, entries, events)
            .await
            .map_err(status)?;
        Ok(Response::new(AppendBlackboardResponse {
            entries,
            last_seq,
        }))
    }

    #[tracing::instrument(name = "session.add_artifact", skip_all,
        fields(session = %request.get_ref().session_id, step = request.get_ref().step))]
    async fn add_artifact(
        &self,
        request: Request<AddArtifactRequest>,
    ) -> Result<Response<ArtifactRef>, Status> {
        let r = request.into_inner();
        let blob = r.blob.ok_or_else(|| invalid("blob", "required"))?;
        let artifact = NewArtifact {
            session_id: uuid("session_id", &r.session_id)?,
            step: validate::positive("step", r.step)?,
            artifact: validate::step_blob("blob", blob, self.limits.validation())?,
        };
        Ok(Response::new(
            self.store.add_artifact(artifact).await.map_err(status)?,
        ))
    }

    #[tracing::instrument(name = "session.put_blob", skip_all,
        fields(size = request.get_ref().data.len()))]
    async fn put_blob(
        &self,
        request: Request<PutBlobRequest>,
    ) -> Result<Response<BlobRef>, Status> {
        let r = request.into_inner();
        if r.data.is_empty() {
            return Err(invalid("data", "required"));
        }
        if r.data.len() as u64 > self.limits.max_blob_bytes {
            return Err(ErrorCode::ResourceExhausted.status(format!(
                "data: {} bytes is more than this service's --max-blob-bytes ({})",
                r.data.len(),
                self.limits.max_blob_bytes
            )));
        }
        let expected = match r.sha256.as_str() {
            "" => None,
            hash => Some(validate::artifact_id("sha256", hash)?),
        };
        let stored = self
            .store
            .put_blob(r.data, expected)
            .await
            .map_err(status)?;
        Ok(Response::new(BlobRef {
            sha256: stored.sha256,
            size: stored.size,
        }))
    }

    #[tracing::instrument(name = "session.prune_images", skip_all)]
    async fn prune_images(
        &self,
        request: Request<PruneImagesRequest>,
    ) -> Result<Response<PruneImagesResponse>, Status> {
        let r = request.into_inner();
        let rule = crate::retention::rule(r.older_than_days, r.keep_tasks)
            .ok_or_else(|| invalid("older_than_days", "set it or keep_tasks (both are 0)"))?;
        let pruned = self.store.prune_images(rule).await.map_err(status)?;
        Ok(Response::new(PruneImagesResponse {
            sessions: pruned.sessions,
            artifacts: pruned.artifacts,
            blobs: pruned.blobs,
        }))
    }

    async fn get_artifact(
        &self,
        request: Request<GetArtifactRequest>,
    ) -> Result<Response<Artifact>, Status> {
        let r = request.into_inner();
        let key = if !r.artifact_id.is_empty() {
            ArtifactKey::Id(validate::artifact_id("artifact_id", &r.artifact_id)?)
        } else if !r.session_id.is_empty() {
            ArtifactKey::Place {
                session_id: uuid("session_id", &r.session_id)?,
                step: validate::bounded("step", r.step)?,
                kind: validate::artifact_kind("kind", r.kind)?,
            }
        } else {
            return Err(invalid(
                "artifact_id",
                "required (or session_id, step and kind)",
            ));
        };
        Ok(Response::new(
            self.store.get_artifact(key).await.map_err(status)?,
        ))
    }

    async fn append_events(
        &self,
        request: Request<AppendEventsRequest>,
    ) -> Result<Response<AppendEventsResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        if r.events.is_empty() {
            return Err(invalid("events", "at least one event is required"));
        }
        let events = validate::events("events", r.events, self.limits.validation())?;
        let events = self
            .store
            .append_events(id, events, optional(r.lease_owner))
            .await
            .map_err(status)?;
        Ok(Response::new(AppendEventsResponse { events }))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        request: Request<WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let from_seq = validate::bounded("from_seq", r.from_seq)?;
        if r.kinds.len() > 64 {
            return Err(invalid("kinds", "at most 64 kinds"));
        }
        let kinds = Kinds::only(r.kinds)
            .map_err(|kind| invalid("kinds", &format!("{kind} is not an event kind")))?;
        // Unknown sessions fail the call itself rather than the first message.
        self.store.get_session(id).await.map_err(status)?;
        let options = WatchOptions {
            buffer: self.limits.watch_buffer,
            page: self.limits.max_page_size,
            kinds,
        };
        let events = watch(Arc::clone(&self.store), id, from_seq, options);
        let stream = ReceiverStream::new(events).map(|item| item.map_err(status));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn claim_task(
        &self,
        request: Request<ClaimTaskRequest>,
    ) -> Result<Response<ClaimTaskResponse>, Status> {
        let r = request.into_inner();
        let worker = required("worker_id", r.worker_id)?;
        if r.reachable_desktops.len() > 10_000 {
            return Err(invalid("reachable_desktops", "at most 10000 names"));
        }
        let reachable = r
            .only_reachable
            .then(|| r.reachable_desktops.into_iter().collect());
        let claim = self
            .store
            .claim_task_reaching(worker, self.limits.lease(r.lease_ms), reachable, r.start)
            .await
            .map_err(status)?;
        Ok(Response::new(match claim {
            Some(claim) => ClaimTaskResponse {
                session: Some(claim.session),
                desktop: claim.desktop,
                start: claim.start,
            },
            None => ClaimTaskResponse::default(),
        }))
    }

    async fn end_expired_direct_sessions(
        &self,
        request: Request<EndExpiredDirectSessionsRequest>,
    ) -> Result<Response<EndExpiredDirectSessionsResponse>, Status> {
        let r = request.into_inner();
        let worker = required("worker_id", r.worker_id)?;
        let limit = match r.limit {
            0 => 100,
            n if n > 1000 => return Err(invalid("limit", "at most 1000")),
            n => n,
        };
        let unleased_idle = (r.unleased_idle_seconds > 0)
            .then(|| Duration::from_secs(r.unleased_idle_seconds.into()));
        let sessions = self
            .store
            .end_expired_direct(worker, limit, unleased_idle)
            .await
            .map_err(status)?;
        Ok(Response::new(EndExpiredDirectSessionsResponse { sessions }))
    }

    async fn renew_lease(
        &self,
        request: Request<RenewLeaseRequest>,
    ) -> Result<Response<Lease>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let worker = required("worker_id", r.worker_id)?;
        Ok(Response::new(
            self.store
                .renew_lease(id, worker, self.limits.lease(r.lease_ms))
                .await
                .map_err(status)?,
        ))
    }

    async fn release_task(
        &self,
        request: Request<ReleaseTaskRequest>,
    ) -> Result<Response<ReleaseTaskResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let worker = required("worker_id", r.worker_id)?;
        self.store
            .release_task(id, worker, r.requeue)
            .await
            .map_err(status)?;
        Ok(Response::new(ReleaseTaskResponse {}))
    }

    async fn park_task(
        &self,
        request: Request<ParkTaskRequest>,
    ) -> Result<Response<ParkTaskResponse>, Status> {
        let r = request.into_inner();
        let id = uuid("session_id", &r.session_id)?;
        let worker = required("worker_id", r.worker_id)?;
        let reason = match validate::known::<ParkReason>("reason", r.reason)? {
            ParkReason::Unspecified => {
                return Err(invalid("reason", "QUESTION or APPROVAL is required"));
            }
            known => known,
        };
        let until = r
            .until
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
            .ok_or_else(|| invalid("until", "a valid timestamp is required"))?;
        let parked = self
            .store
            .park_task(ParkTask {
                id,
                worker,
                reason,
                until,
                seen_seq: validate::bounded("seen_seq", r.seen_seq)?,
            })
            .await
            .map_err(status)?;
        Ok(Response::new(ParkTaskResponse { parked }))
    }

    async fn register_desktop(
        &self,
        request: Request<RegisterDesktopRequest>,
    ) -> Result<Response<Desktop>, Status> {
        Ok(Response::new(
            self.register_desktop_rpc(request.into_inner()).await?,
        ))
    }

    async fn check_in_desktop(
        &self,
        request: Request<CheckInDesktopRequest>,
    ) -> Result<Response<Desktop>, Status> {
        Ok(Response::new(
            self.check_in_desktop_rpc(request.into_inner()).await?,
        ))
    }

    async fn check_in_and_claim(
        &self,
        request: Request<CheckInAndClaimRequest>,
    ) -> Result<Response<CheckInAndClaimResponse>, Status> {
        Ok(Response::new(
            self.check_in_and_claim_rpc(request.into_inner()).await?,
        ))
    }

    type WatchPoolStream = Pin<Box<dyn Stream<Item = Result<PoolSignal, Status>> + Send + 'static>>;

    #[tracing::instrument(name = "session.watch_pool", skip_all)]
    async fn watch_pool(
        &self,
        _request: Request<WatchPoolRequest>,
    ) -> Result<Response<Self::WatchPoolStream>, Status> {
        // Every change after the subscription is sent (merged while the client is slow: a hint).
        let pool = self.store.subscribe_pool();
        let stream = tokio_stream::wrappers::WatchStream::from_changes(pool)
            .map(|seq| Ok(PoolSignal { seq }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn renew_desktop(
        &self,
        request: Request<RenewDesktopRequest>,
    ) -> Result<Response<Desktop>, Status> {
        Ok(Response::new(
            self.renew_desktop_rpc(request.into_inner()).await?,
        ))
    }

    async fn list_desktops(
        &self,
        _request: Request<ListDesktopsRequest>,
    ) -> Result<Response<ListDesktopsResponse>, Status> {
        Ok(Response::new(self.list_desktops_rpc().await?))
    }

    async fn set_desktop_state(
        &self,
        request: Request<SetDesktopStateRequest>,
    ) -> Result<Response<Desktop>, Status> {
        Ok(Response::new(
            self.set_desktop_state_rpc(request.into_inner()).await?,
        ))
    }

    async fn remove_desktop(
        &self,
        request: Request<RemoveDesktopRequest>,
    ) -> Result<Response<RemoveDesktopResponse>, Status> {
        self.remove_desktop_rpc(request.into_inner()).await?;
        Ok(Response::new(RemoveDesktopResponse {}))
    }
}
