//! The session store with artifact bytes in the blob store ([`BlobbedStore`]): the artifact parts of the
//! store conformance suite on SQLite and Postgres, blobs durable before the step commits, artifacts written
//! before migration 0008 still served from their rows, and the sweeper against real references.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(unused_imports)] // this file runs only the artifact parts of the suite
mod conformance;

use std::borrow::Cow;
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
use ufo_session::store::{ArtifactKey, NewArtifact, Store, StoreError, postgres, sqlite};
use uuid::Uuid;

async fn sqlite_rows(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(
        sqlite::open(&dir.path().join("session.sqlite3"), 4)
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

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod blobbed_sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = BlobbedStore::new(sqlite_rows(&dir).await, blobs(&dir));
                    conformance::$name(Arc::new(store)).await;
                }
            )*
        }
        mod blobbed_postgres {
            use super::*;
            $(
                #[sqlx::test(migrations = "../../migrations")]
                async fn $name(pool: PgPool) {
                    let dir = tempfile::tempdir().unwrap();
                    let store = BlobbedStore::new(pg_rows(&pool).await, blobs(&dir));
                    conformance::$name(Arc::new(store)).await;
                }
            )*
        }
    };
}

on_both!(
    record_step_is_atomic_and_idempotent,
    record_step_stores_its_artifacts,
    concurrent_steps_with_artifacts,
    rounds_blackboard_and_artifacts,
);

/// Step `n` carrying one clean screenshot inline.
fn step_with_shot(id: Uuid, n: u64, shot: &[u8]) -> ufo_session::store::StepRecord {
    let mut request = conformance::step_request(id, n, "look");
    request.artifacts = vec![ufo_proto::v1::StepArtifact {
        kind: ArtifactKind::CleanScreenshot.into(),
        content_type: "image/png".into(),
        data: Bytes::copy_from_slice(shot),
        metadata: None,
    }];
    validate::record_step(request, conformance::LIMITS).unwrap()
}

/// A step whose blob cannot be stored is not recorded; once stored, its row references the blob (no bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_blobs_are_durable_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sqlite_rows(&dir).await;
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(rows.clone(), blob_dir.clone());
    let id = conformance::session(&store).await;
    let shot = b"pixels of step one";

    // The blob store fails (its directory is gone): the step must not commit.
    std::fs::remove_dir_all(blob_dir.root()).unwrap();
    let failed = store.record_step(step_with_shot(id, 1, shot)).await;
    assert!(matches!(failed, Err(StoreError::Blob(_))), "{failed:?}");
    assert!(matches!(
        store.get_step(id, 1).await,
        Err(StoreError::NotFound(_))
    ));

    // Back: the step commits, the blob is in the store, the row keeps only hash and size.
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(rows.clone(), blob_dir.clone());
    let done = store
        .record_step(step_with_shot(id, 1, shot))
        .await
        .unwrap();
    let hash = BlobHash::of(shot);
    assert_eq!(done.step.artifacts[0].id, hash.as_str());
    assert_eq!(done.step.artifacts[0].size, shot.len() as u64);
    assert_eq!(blob_dir.get(&hash).await.unwrap(), Bytes::from_static(shot));
    let key = ArtifactKey::Id(hash.as_str().into());
    let row = rows.get_artifact(key.clone()).await.unwrap();
    assert!(
        row.data.is_empty(),
        "the database row still holds the bytes"
    );
    assert_eq!(row.r#ref.as_ref().unwrap().size, shot.len() as u64);
    assert_eq!(store.get_artifact(key).await.unwrap().data, shot.to_vec());
}

/// The sweeper deletes a blob no step references (an upload whose commit never came) and keeps the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_deletes_orphans_and_keeps_referenced_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(sqlite_rows(&dir).await, blob_dir.clone());
    let id = conformance::session(&store).await;
    store
        .record_step(step_with_shot(id, 1, b"referenced"))
        .await
        .unwrap();
    let put = store
        .put_artifact(NewArtifact {
            session_id: id,
            step: 0,
            kind: ArtifactKind::Other,
            content_type: "text/plain".into(),
            data: Bytes::from_static(b"put on its own"),
            metadata: json!({}),
            blob: None,
        })
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
    let kept = store.get_artifact(ArtifactKey::Id(put.id)).await.unwrap();
    assert_eq!(kept.data, b"put on its own".to_vec());
}

/// `all`'s migrations numbered below 8 (the schema before the blob store).
fn before_0008(all: &sqlx::migrate::Migrator) -> sqlx::migrate::Migrator {
    sqlx::migrate::Migrator {
        migrations: Cow::Owned(
            all.migrations
                .iter()
                .filter(|m| m.version < 8)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    }
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

/// After migration 0008 an artifact written before is served from its row, and new ones go to the blobs.
async fn old_and_new_artifacts_are_served(
    store: &BlobbedStore,
    blob_dir: &DirBlobStore,
    id: Uuid,
    hash: String,
) {
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
    assert!(
        blob_dir.list().await.unwrap().is_empty(),
        "nothing was migrated"
    );
    let new = store
        .put_artifact(NewArtifact {
            session_id: id,
            step: 0,
            kind: ArtifactKind::DesktopScreenshot,
            content_type: "image/png".into(),
            data: Bytes::from_static(b"new bytes"),
            metadata: json!({}),
            blob: None,
        })
        .await
        .unwrap();
    assert!(
        blob_dir
            .exists(&BlobHash::parse(&new.id).unwrap())
            .await
            .unwrap()
    );
    let got = store.get_artifact(ArtifactKey::Id(new.id)).await.unwrap();
    assert_eq!(got.data, b"new bytes".to_vec());
}

#[sqlx::test(migrations = false)]
async fn postgres_artifact_written_before_0008_is_still_served(pool: PgPool) {
    before_0008(&postgres::MIGRATOR).run(&pool).await.unwrap();
    let id = Uuid::new_v4();
    let hash = insert_old_artifact!(&pool, id);
    postgres::MIGRATOR.run(&pool).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(pg_rows(&pool).await, blob_dir.clone());
    old_and_new_artifacts_are_served(&store, &blob_dir, id, hash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_artifact_written_before_0008_is_still_served() {
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
    pool.close().await;
    let blob_dir = blobs(&dir);
    let store = BlobbedStore::new(sqlite_rows(&dir).await, blob_dir.clone());
    old_and_new_artifacts_are_served(&store, &blob_dir, id, hash).await;
}
