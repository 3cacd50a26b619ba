//! The conformance suite on the embedded SQLite store: a fresh temporary file per test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conformance;

use std::sync::Arc;

use ufo_session::blob::BlobStore;
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::store::blobbed::BlobbedStore;
use ufo_session::store::{IndexOptions, Store, sqlite};

/// The file's store with its blob store (a directory beside it).
async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let blobs = blobs(dir);
    let rows = sqlite::open(&dir.path().join("session.sqlite3"), 4, blobs.as_ref())
        .await
        .unwrap();
    Arc::new(BlobbedStore::new(Arc::new(rows), blobs))
}

fn blobs(dir: &tempfile::TempDir) -> Arc<dyn BlobStore> {
    Arc::new(DirBlobStore::open(dir.path().join("blobs")).unwrap())
}

macro_rules! on_sqlite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let dir = tempfile::tempdir().unwrap();
            conformance::$name(store(&dir).await).await;
        }
    )*};
}

conformance::every_case!(on_sqlite);

/// A store and, as its "replica", the store itself: one process, whose in-process notifier signals.
fn itself(shared: Arc<dyn Store>) -> (Arc<dyn Store>, conformance::Replica) {
    let same = Arc::clone(&shared);
    let replica: conformance::Replica = Box::new(move || {
        let same = Arc::clone(&same);
        Box::pin(async move { same })
    });
    (shared, replica)
}

/// One process, one store: the in-process notifier signals the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_in_and_claim_hands_the_desktop_on() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, replica) = itself(store(&dir).await);
    conformance::check_in_and_claim_hands_the_desktop_on(shared, replica).await;
}

/// One process, one store: a new task and a woken one signal the pool in-process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_and_a_woken_one_signal_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, replica) = itself(store(&dir).await);
    conformance::a_new_task_and_a_woken_one_signal_the_pool(shared, replica).await;
}

/// One process, one store: the in-process notifier wakes the watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_then_follows_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, replica) = itself(store(&dir).await);
    conformance::watch_replays_then_follows_and_resumes(shared, replica).await;
}

/// Three stores on one file, as three processes, each with its own index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_replicas_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = sqlite::open(&dir.path().join("session.sqlite3"), 4, blobs(&dir).as_ref())
        .await
        .unwrap()
        .with_index_options(IndexOptions {
            max_delta: 2,
            changes_kept: 3,
        });
    conformance::knowledge_replicas_see_each_others_writes(
        store(&dir).await,
        store(&dir).await,
        Arc::new(tiny),
    )
    .await;
}

/// Retrieval quality on the zenity help: the bar, 0.9 (the in-memory BM25F index answers 44 of
/// the 46 questions; see docs/knowledge.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_retrieval_on_the_zenity_help() {
    let dir = tempfile::tempdir().unwrap();
    conformance::knowledge_retrieval_on_the_zenity_help(store(&dir).await, 0.9).await;
}

/// Retrieval quality among realistic distractors: the zenity questions with the GNOME help
/// (`gnome-user-docs`) stored for any application beside zenity's pages; the bar, 0.9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_retrieval_among_the_gnome_help() {
    let dir = tempfile::tempdir().unwrap();
    conformance::knowledge_retrieval_among_the_gnome_help(store(&dir).await, 0.9).await;
}

/// The databases' own search filters by sharing as the index does.
#[tokio::test]
async fn knowledge_sql_search_follows_sharing() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = blobs(&dir);
    let rows = sqlite::open(&dir.path().join("session.sqlite3"), 4, blobs.as_ref())
        .await
        .unwrap();
    conformance::knowledge_sql_search_follows_sharing(&rows).await;
}
