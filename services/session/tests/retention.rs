//! Issue 22, point 4 (retention) on both stores, with blobs in a directory: PruneImages removes the
//! screenshots of ended sessions selected by age or by count, stamps `images_pruned_at`, keeps every step's
//! record, leaves running sessions and shared (deduplicated) blobs still referenced elsewhere alone, and the
//! sweeper then deletes the blobs no row references. The RPC refuses a request without a rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;

#[allow(unused_imports)] // this file uses the suite's helpers only
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use ufo_proto::v1::{ArtifactKind, SessionStatus};
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::blob::sweep::sweep;
use ufo_session::blob::{BlobHash, BlobStore};
use ufo_session::grpc::validate;
use ufo_session::store::blobbed::BlobbedStore;
use ufo_session::store::{
    ArtifactKey, PruneOutcome, PruneRule, StatusChange, Store, StoreError, postgres, sqlite,
};
use uuid::Uuid;

async fn step_with_shot(
    store: &dyn Store,
    id: Uuid,
    n: u64,
    shot: &[u8],
) -> ufo_session::store::StepRecord {
    let mut request = conformance::step_request(id, n, "look");
    request.blobs = vec![
        conformance::put_blob(
            store,
            ArtifactKind::CleanScreenshot,
            shot,
            serde_json::json!({}),
        )
        .await,
    ];
    validate::record_step(request, conformance::LIMITS).unwrap()
}

async fn session_with_shot(store: &BlobbedStore, shot: &[u8], end: bool) -> Uuid {
    let id = conformance::session(store).await;
    let step = step_with_shot(store, id, 1, shot).await;
    store.record_step(step).await.unwrap();
    if end {
        store
            .set_session_status(StatusChange {
                id,
                status: SessionStatus::Finished,
                result: "done".into(),
                lease_owner: None,
            })
            .await
            .unwrap();
    }
    id
}

async fn retention(rows: Arc<dyn Store>, blobs: Arc<DirBlobStore>) {
    let store = BlobbedStore::new(rows, blobs.clone());
    // Oldest first: A and B show the same screen (one blob), C another and is still running.
    let shared = b"the same frame, twice";
    let a = session_with_shot(&store, shared, true).await;
    let b = session_with_shot(&store, shared, true).await;
    let c = session_with_shot(&store, b"a running task's frame", false).await;
    assert_eq!(
        blobs.list().await.unwrap().len(),
        2,
        "identical frames stored once"
    );

    // By count: keep the newest two sessions' images; A goes, its blob stays (B references it).
    let pruned = store
        .prune_images(PruneRule {
            keep_newest: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        pruned,
        PruneOutcome {
            sessions: 1,
            artifacts: 1,
            blobs: 0
        }
    );
    let session_a = store.get_session(a).await.unwrap();
    assert!(session_a.images_pruned_at.is_some());
    assert!(
        store
            .get_session(b)
            .await
            .unwrap()
            .images_pruned_at
            .is_none()
    );
    let steps = store.list_steps(a, 1, 10).await.unwrap();
    assert_eq!(steps.len(), 1, "the step's record is kept");
    assert!(steps[0].artifacts.is_empty(), "{:?}", steps[0].artifacts);
    assert_eq!(steps[0].thought, "look");
    let gone = store
        .get_artifact(ArtifactKey::Place {
            session_id: a,
            step: 1,
            kind: ArtifactKind::CleanScreenshot,
        })
        .await;
    assert!(matches!(gone, Err(StoreError::NotFound(_))), "{gone:?}");

    // By age (every ended session is older than tomorrow): B goes, C (running) stays; the shared blob is
    // no longer referenced. Pruning again finds nothing.
    let by_age = PruneRule {
        created_before: Some(chrono::Utc::now() + chrono::Duration::days(1)),
        ..Default::default()
    };
    let pruned = store.prune_images(by_age).await.unwrap();
    assert_eq!(
        pruned,
        PruneOutcome {
            sessions: 1,
            artifacts: 1,
            blobs: 1
        }
    );
    assert!(
        store
            .get_session(b)
            .await
            .unwrap()
            .images_pruned_at
            .is_some()
    );
    assert!(
        store
            .get_session(c)
            .await
            .unwrap()
            .images_pruned_at
            .is_none()
    );
    assert_eq!(
        store.prune_images(by_age).await.unwrap(),
        PruneOutcome::default()
    );

    // The sweeper deletes the blob nothing references; the running task's stays and is served.
    let report = sweep(blobs.as_ref(), &store, Duration::ZERO).await.unwrap();
    assert_eq!(report.deleted, 1);
    assert!(!blobs.exists(&BlobHash::of(shared)).await.unwrap());
    let kept = store
        .get_artifact(ArtifactKey::Place {
            session_id: c,
            step: 1,
            kind: ArtifactKind::CleanScreenshot,
        })
        .await
        .unwrap();
    assert_eq!(kept.data, b"a running task's frame".to_vec());
    // Both pruned sessions still list their steps.
    assert_eq!(store.list_steps(b, 1, 10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_retention_prunes_images_and_keeps_steps() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(DirBlobStore::open(dir.path().join("blobs")).unwrap());
    let rows = Arc::new(
        sqlite::open(&dir.path().join("session.sqlite3"), 4, blobs.as_ref())
            .await
            .unwrap(),
    );
    retention(rows, blobs).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn postgres_retention_prunes_images_and_keeps_steps(pool: PgPool) {
    let dir = tempfile::tempdir().unwrap();
    let rows = Arc::new(
        postgres::from_pool(pool, postgres::StepBatching::default())
            .await
            .unwrap(),
    );
    let blobs = Arc::new(DirBlobStore::open(dir.path().join("blobs")).unwrap());
    retention(rows, blobs).await;
}

/// Over gRPC: a request without a rule is INVALID_ARGUMENT; with one, it prunes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_images_rpc() {
    use ufo_proto::v1::PruneImagesRequest;
    let dir = tempfile::tempdir().unwrap();
    let mut config = ufo_session::Config::defaults();
    config.database_url = None;
    config.sqlite_path = dir.path().join("session.sqlite3");
    config.auth_token = None;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(ufo_session::run(config, listener, shutdown.clone()));
    let mut c = client::connect(&url, None).await;
    let refused = c
        .prune_images(PruneImagesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    let done = c
        .prune_images(PruneImagesRequest {
            older_than_days: 30,
            keep_tasks: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.sessions, 0);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
