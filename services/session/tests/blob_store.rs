//! The session store with artifact bytes in the blob store ([`BlobbedStore`]): a step commits only with
//! its blobs durable, artifacts written before migration 0008 (bytes in their rows) are moved into the blob
//! store at start and then served from it, and the sweeper against real references. (The conformance
//! suite runs on blobbed stores of both backends in `sqlite.rs` and `postgres.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(unused_imports)] // this file uses only the suite's helpers
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use sqlx::PgPool;
use ufo_proto::v1::ArtifactKind;
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::blob::sweep::sweep;
use ufo_session::blob::{BlobHash, BlobStore};
use ufo_session::grpc::validate;
use ufo_session::store::blobbed::BlobbedStore;
use ufo_session::store::migrate::{self, BYTES_LEAVE_ROWS};
use ufo_session::store::{ArtifactKey, Store, StoreError, postgres, sqlite};
use uuid::Uuid;

async fn sqlite_rows(dir: &tempfile::TempDir, blobs: &dyn BlobStore) -> Arc<dyn Store> {
    Arc::new(
        sqlite::open(&dir.path().join("session.sqlite3"), 4, blobs)
            .await
            .unwrap(),
    )
}

async fn pg_rows(pool: &PgPool) -> Arc<dyn Store> {
    Arc::new(
        postgres::from_pool(pool.clone(), postgres::StepBatching::default())
            .await
            .unwrap(),
    )
}

fn blobs(dir: &tempfile::TempDir) -> Arc<DirBlobStore> {
    Arc::new(DirBlobStore::open(dir.path().join("blobs")).unwrap())
}

/// Step `n` referencing one clean screenshot put into `store`'s blob store.
async fn step_with_shot(
    store: &dyn Store,
    id: Uuid,
    n: u64,
    shot: &[u8],
) -> ufo_session::store::StepRecord {
    let mut request = conformance::step_request(id, n, "look");
    request.blobs =
        vec![conformance::put_blob(store, ArtifactKind::CleanScreenshot, shot, json!({})).await];
    validate::record_step(request, conformance::LIMITS).unwrap()
}

/// A step whose blob is not in the blob store (gone since it was put) is not recorded; put again, the step
/// commits and its row references the blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_blobs_are_durable_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = blobs(&dir);
    let rows = sqlite_rows(&dir, blob_dir.as_ref()).await;
    let store = BlobbedStore::new(rows.clone(), blob_dir.clone());
    let id = conformance::session(&store).await;
    let shot = b"pixels of step one";

    let step = step_with_shot(&store, id, 1, shot).await;
    let hash = BlobHash::of(shot);
    blob_dir.delete(&hash).await.unwrap();
    let failed = store.record_step(step.clone()).await;
    assert!(
        matches!(&failed, Err(StoreError::FailedPrecondition(m)) if m.contains(hash.as_str())),
        "{failed:?}"
    );
    assert!(matches!(
        store.get_step(id, 1).await,
        Err(StoreError::NotFound(_))
    ));

    // Put again: the step commits, the row keeps only hash and size.
    let step = step_with_shot(&store, id, 1, shot).await;
    let done = store.record_step(step).await.unwrap();
    assert_eq!(done.step.artifacts[0].id, hash.as_str());
    assert_eq!(done.step.artifacts[0].size, shot.len() as u64);
    assert_eq!(blob_dir.get(&hash).await.unwrap(), Bytes::from_static(shot));
    let key = ArtifactKey::Id(hash.as_str().into());
    let row = rows.get_artifact(key.clone()).await.unwrap();
    assert!(row.data.is_empty(), "a row holds no bytes");
    assert_eq!(row.r#ref.as_ref().unwrap().size, shot.len() as u64);
    assert_eq!(store.get_artifact(key).await.unwrap().data, shot.to_vec());
}

/// The sweeper deletes a blob no step references (an upload whose commit never came) and keeps the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_deletes_orphans_and_keeps_referenced_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(sqlite_rows(&dir, blob_dir.as_ref()).await, blob_dir.clone());
    let id = conformance::session(&store).await;
    let step = step_with_shot(&store, id, 1, b"referenced").await;
    store.record_step(step).await.unwrap();
    let after = conformance::put_blob(&store, ArtifactKind::Other, b"added later", json!({})).await;
    let added = store
        .add_artifact(conformance::new_artifact(id, 1, after))
        .await
        .unwrap();
    // Uploaded for a step that never committed.
    let orphan = blob_dir
        .put(Bytes::from_static(b"orphan"), None)
        .await
        .unwrap();

    let report = sweep(blob_dir.as_ref(), &store, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        (report.scanned, report.deleted),
        (3, 0),
        "within the grace period"
    );
    let report = sweep(blob_dir.as_ref(), &store, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((report.scanned, report.deleted), (3, 1));
    assert!(!blob_dir.exists(&orphan).await.unwrap());
    assert!(blob_dir.exists(&BlobHash::of(b"referenced")).await.unwrap());
    let kept = store.get_artifact(ArtifactKey::Id(added.id)).await.unwrap();
    assert_eq!(kept.data, b"added later".to_vec());
}

/// `all`'s migrations numbered below 8 (the schema before the blob store).
fn before_0008(all: &sqlx::migrate::Migrator) -> sqlx::migrate::Migrator {
    migrate::before(all, 8)
}

const OLD_BYTES: &[u8] = b"a screenshot stored in the database before 0008";

/// Inserts a session and an artifact with its bytes in the row, as the pre-0008 service did; evaluates to
/// the artifact's hash.
macro_rules! insert_old_artifact {
    ($pool:expr, $id:expr) => {{
        let at = chrono::Utc::now();
        let hash = BlobHash::of(OLD_BYTES).as_str().to_owned();
        sqlx::query(
            "INSERT INTO sessions (id, request, status, config, created_at, updated_at, queued_at) \
             VALUES ($1, 'old task', 'queued', '{}', $2, $2, $2)",
        )
        .bind($id)
        .bind(at)
        .execute($pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO artifact_blobs (sha256, size, data, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(hash.clone())
        .bind(OLD_BYTES.len() as i64)
        .bind(OLD_BYTES.to_vec())
        .bind(at)
        .execute($pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO artifacts (session_id, step, kind, sha256, content_type, metadata, created_at) \
             VALUES ($1, 0, 'clean_screenshot', $2, 'image/png', '{}', $3)",
        )
        .bind($id)
        .bind(hash.clone())
        .bind(at)
        .execute($pool)
        .await
        .unwrap();
        hash
    }};
}

/// Whether the migration that drops `artifact_blobs.data` has been applied.
macro_rules! bytes_left_rows {
    ($pool:expr) => {{
        let applied: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 AND success)",
        )
        .bind(BYTES_LEAVE_ROWS)
        .fetch_one($pool)
        .await
        .unwrap();
        applied
    }};
}

/// An artifact written before 0008 has been moved into the blob store: served from there, by id and by
/// place, and its bytes are in the blob directory.
async fn old_artifact_is_served_from_the_blob_store(
    store: &BlobbedStore,
    blob_dir: &DirBlobStore,
    id: Uuid,
    hash: String,
) {
    assert_eq!(
        blob_dir
            .get(&BlobHash::parse(&hash).unwrap())
            .await
            .unwrap(),
        Bytes::from_static(OLD_BYTES),
        "the bytes were moved into the blob store"
    );
    let old = store.get_artifact(ArtifactKey::Id(hash)).await.unwrap();
    assert_eq!(old.data, OLD_BYTES.to_vec());
    let place = ArtifactKey::Place {
        session_id: id,
        step: 0,
        kind: ArtifactKind::CleanScreenshot,
    };
    assert_eq!(
        store.get_artifact(place).await.unwrap().data,
        OLD_BYTES.to_vec()
    );
}

#[sqlx::test(migrations = false)]
async fn postgres_artifact_written_before_0008_is_moved_to_the_blob_store(pool: PgPool) {
    before_0008(&postgres::MIGRATOR).run(&pool).await.unwrap();
    let id = Uuid::new_v4();
    let hash = insert_old_artifact!(&pool, id);
    // The migrations alone refuse to drop bytes still in a row.
    let refused = postgres::MIGRATOR.run(&pool).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!bytes_left_rows!(&pool));
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = blobs(&dir);
    migrate::run_postgres(&postgres::MIGRATOR, &pool, blob_dir.as_ref())
        .await
        .unwrap();
    assert!(bytes_left_rows!(&pool));
    // Idempotent: a second start has nothing to move.
    migrate::run_postgres(&postgres::MIGRATOR, &pool, blob_dir.as_ref())
        .await
        .unwrap();
    let store = BlobbedStore::new(pg_rows(&pool).await, blob_dir.clone());
    old_artifact_is_served_from_the_blob_store(&store, &blob_dir, id, hash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_artifact_written_before_0008_is_moved_to_the_blob_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.sqlite3");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    before_0008(&sqlite::MIGRATOR).run(&pool).await.unwrap();
    let id = Uuid::new_v4();
    let hash = insert_old_artifact!(&pool, id);
    let refused = sqlite::MIGRATOR.run(&pool).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!bytes_left_rows!(&pool));
    pool.close().await;
    let blob_dir = blobs(&dir);
    // Opening the store moves the bytes, then migrates.
    let store = BlobbedStore::new(sqlite_rows(&dir, blob_dir.as_ref()).await, blob_dir.clone());
    old_artifact_is_served_from_the_blob_store(&store, &blob_dir, id, hash).await;
    let reopened = sqlite_rows(&dir, blob_dir.as_ref()).await;
    drop(reopened);
}
