//! The conformance suite on Postgres: a fresh database per test (`#[sqlx::test]`, `DATABASE_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conformance;

use std::sync::Arc;

use sqlx::PgPool;
use ufo_session::blob::BlobStore;
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::store::blobbed::BlobbedStore;
use ufo_session::store::{IndexOptions, Store, postgres};

/// The database's store with its blob store: a directory per test database, shared by its replicas.
async fn store(pool: &PgPool) -> Arc<dyn Store> {
    let rows = postgres::from_pool(pool.clone(), postgres::StepBatching::default())
        .await
        .unwrap();
    Arc::new(BlobbedStore::new(Arc::new(rows), blobs(pool).await))
}

async fn blobs(pool: &PgPool) -> Arc<dyn BlobStore> {
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("session-blobs")
        .join(database);
    Arc::new(DirBlobStore::open(dir).unwrap())
}

fn replica(pool: &PgPool) -> conformance::Replica {
    let pool = pool.clone();
    Box::new(move || {
        let pool = pool.clone();
        Box::pin(async move { store(&pool).await })
    })
}

macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {$(
        #[sqlx::test(migrations = "../../migrations")]
        async fn $name(pool: PgPool) {
            conformance::$name(store(&pool).await).await;
        }
    )*};
}

conformance::every_case!(on_postgres);

/// The pool's signal reaches another store instance through `LISTEN/NOTIFY`.
#[sqlx::test(migrations = "../../migrations")]
async fn check_in_and_claim_hands_the_desktop_on(pool: PgPool) {
    conformance::check_in_and_claim_hands_the_desktop_on(store(&pool).await, replica(&pool)).await;
}

/// A new task and a woken one signal another store instance through `LISTEN/NOTIFY`.
#[sqlx::test(migrations = "../../migrations")]
async fn a_new_task_and_a_woken_one_signal_the_pool(pool: PgPool) {
    conformance::a_new_task_and_a_woken_one_signal_the_pool(store(&pool).await, replica(&pool))
        .await;
}

/// The watcher runs on another store instance (its own listener), so only `LISTEN/NOTIFY` can wake it.
#[sqlx::test(migrations = "../../migrations")]
async fn watch_replays_then_follows_and_resumes(pool: PgPool) {
    conformance::watch_replays_then_follows_and_resumes(store(&pool).await, replica(&pool)).await;
}

/// Three stores on one database, as three session-service replicas, each with its own index.
#[sqlx::test(migrations = "../../migrations")]
async fn knowledge_replicas_see_each_others_writes(pool: PgPool) {
    let tiny = postgres::from_pool(pool.clone(), postgres::StepBatching::default())
        .await
        .unwrap()
        .with_index_options(IndexOptions {
            max_delta: 2,
            changes_kept: 3,
        });
    conformance::knowledge_replicas_see_each_others_writes(
        store(&pool).await,
        store(&pool).await,
        Arc::new(tiny),
    )
    .await;
}

/// Retrieval quality on the zenity help: the bar, a top-3 hit rate of 0.9.
#[sqlx::test(migrations = "../../migrations")]
async fn knowledge_retrieval_on_the_zenity_help(pool: PgPool) {
    conformance::knowledge_retrieval_on_the_zenity_help(store(&pool).await, 0.9).await;
}

/// Retrieval quality among realistic distractors: the zenity questions with the GNOME help
/// (`gnome-user-docs`) stored for any application beside zenity's pages; the bar, 0.9.
#[sqlx::test(migrations = "../../migrations")]
async fn knowledge_retrieval_among_the_gnome_help(pool: PgPool) {
    conformance::knowledge_retrieval_among_the_gnome_help(store(&pool).await, 0.9).await;
}

/// The databases' own search filters by sharing as the index does.
#[sqlx::test(migrations = "../../migrations")]
async fn knowledge_sql_search_follows_sharing(pool: PgPool) {
    let rows = postgres::from_pool(pool.clone(), postgres::StepBatching::default())
        .await
        .unwrap();
    conformance::knowledge_sql_search_follows_sharing(&rows).await;
}
