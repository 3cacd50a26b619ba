//! Issue 22, screenshots off the critical path: blobs are put with PutBlob before the step that references
//! them, and a step commits only when its blobs are durable. The session service is a real process killed
//! with SIGKILL between an upload and its commit: afterwards no step references a missing blob, a step
//! naming a blob the store lacks is refused with FAILED_PRECONDITION naming the hash, and the orphan left
//! by the crash is swept. Run on the embedded store (SQLite) and on Postgres, each with a blob directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use ufo_proto::v1::{
    AgentKind, ArtifactKind, BeginRoundRequest, CreateSessionRequest, GetArtifactRequest,
    ListStepsRequest, PutBlobRequest, RecordStepRequest, Step, StepBlob,
};
use ufo_session::blob::BlobHash;
use ufo_testkit::process::{ProcessBuilder, ServiceProcess, free_port};
use ufo_testkit::wait::poll_until;

use client::Client;

const MAX_BLOB: usize = 512 * 1024;

/// A session service process on `port` over `database` (None: SQLite in `dir`) with blobs in `dir/blobs`,
/// sweeping every second blobs older than a second that no row references.
async fn start(dir: &Path, database: Option<&str>, port: u16) -> (ServiceProcess, Client) {
    let mut builder = ProcessBuilder::new("ufo-session", env!("CARGO_BIN_EXE_ufo-session"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--blob-dir")
        .arg(dir.join("blobs"))
        .arg("--blob-sweep-grace-s=1")
        .arg("--blob-sweep-interval-s=1")
        .arg(format!("--max-blob-bytes={MAX_BLOB}"))
        .env_remove("UFO_SESSION_AUTH_TOKEN")
        .env_remove("UFO_SESSION_DATABASE_URL");
    builder = match database {
        Some(url) => builder.arg("--database-url").arg(url),
        None => builder
            .arg("--sqlite-path")
            .arg(dir.join("session.sqlite3")),
    };
    let mut process = builder.spawn().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    process
        .wait_grpc_ready(&url, Duration::from_secs(60))
        .await
        .unwrap();
    let client = client::connect(&url, None).await;
    (process, client)
}

fn blob_path(dir: &Path, hash: &BlobHash) -> PathBuf {
    dir.join("blobs")
        .join(&hash.as_str()[..2])
        .join(hash.as_str())
}

fn step(session: &str, n: u64, blobs: Vec<StepBlob>) -> RecordStepRequest {
    RecordStepRequest {
        step: Some(Step {
            session_id: session.into(),
            step: n,
            round: 1,
            round_step: u32::try_from(n).unwrap(),
            agent_name: "AppAgent/mousepad".into(),
            agent_kind: AgentKind::App.into(),
            ..Default::default()
        }),
        blobs,
        ..Default::default()
    }
}

fn shot(hash: &BlobHash, size: usize) -> StepBlob {
    StepBlob {
        kind: ArtifactKind::CleanScreenshot.into(),
        content_type: "image/png".into(),
        sha256: hash.as_str().into(),
        size: size as u64,
        width: 1280,
        height: 800,
        metadata: None,
    }
}

async fn put(c: &mut Client, data: &Bytes) -> BlobHash {
    let stored = c
        .put_blob(PutBlobRequest {
            data: data.clone(),
            sha256: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.size, data.len() as u64);
    BlobHash::parse(&stored.sha256).unwrap()
}

async fn kill_between_upload_and_commit(database: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let (mut process, mut c) = start(dir.path(), database, port).await;
    let session = c
        .create_session(CreateSessionRequest {
            request: "type hello".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    c.begin_round(BeginRoundRequest {
        session_id: session.id.clone(),
        number: 1,
        lease_owner: String::new(),
    })
    .await
    .unwrap();

    // Step 1: uploaded, then committed referencing its blob.
    let first = Bytes::from(vec![1u8; 200 * 1024]);
    let first_hash = put(&mut c, &first).await;
    let recorded = c
        .record_step(step(&session.id, 1, vec![shot(&first_hash, first.len())]))
        .await
        .unwrap()
        .into_inner();
    let refs = recorded.step.unwrap().artifacts;
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].id, first_hash.as_str());
    let metadata = ufo_proto::json::from_struct(refs[0].metadata.clone().unwrap());
    assert_eq!(
        (metadata["width"].as_u64(), metadata["height"].as_u64()),
        (Some(1280), Some(800)),
        "the row keeps the image's dimensions: {metadata}"
    );

    // Step 2's screenshot is uploaded; the service dies before the step is recorded.
    let orphan = Bytes::from(vec![2u8; 150 * 1024]);
    let orphan_hash = put(&mut c, &orphan).await;
    assert!(blob_path(dir.path(), &orphan_hash).exists());
    process.kill().unwrap();
    drop(c);

    let (mut process, mut c) = start(dir.path(), database, port).await;
    // No step references a missing blob: every recorded step's artifacts are served whole.
    let steps = c
        .list_steps(ListStepsRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    assert_eq!(steps.len(), 1, "only the committed step exists");
    for artifact in steps.iter().flat_map(|s| &s.artifacts) {
        let served = c
            .get_artifact(GetArtifactRequest {
                artifact_id: artifact.id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(served.data.len() as u64, artifact.size);
        assert_eq!(BlobHash::of(&served.data).as_str(), artifact.id);
    }

    // A step naming a blob the store does not hold is refused, naming the hash, and writes nothing.
    let never = BlobHash::of(b"never uploaded");
    let refused = c
        .record_step(step(&session.id, 2, vec![shot(&never, 10)]))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains(never.as_str()), "{refused:?}");
    // A size that does not match the stored blob is refused the same way.
    let wrong_size = c
        .record_step(step(&session.id, 2, vec![shot(&orphan_hash, 3)]))
        .await
        .unwrap_err();
    assert_eq!(wrong_size.code(), tonic::Code::FailedPrecondition);
    assert!(wrong_size.message().contains(orphan_hash.as_str()));
    let after = c
        .list_steps(ListStepsRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    assert_eq!(after.len(), 1, "a refused step writes nothing");

    // The orphan is swept; the referenced blob stays.
    let orphan_file = blob_path(dir.path(), &orphan_hash);
    poll_until(
        "the orphaned blob to be swept",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            let gone = !orphan_file.exists();
            async move { Ok(gone.then_some(())) }
        },
    )
    .await
    .unwrap();
    assert!(blob_path(dir.path(), &first_hash).exists());
    let served = c
        .get_artifact(GetArtifactRequest {
            artifact_id: first_hash.as_str().into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(served.data, first);

    // Bad uploads: a wrong hash, an empty body, a blob over --max-blob-bytes.
    let mismatch = c
        .put_blob(PutBlobRequest {
            data: Bytes::from_static(b"some bytes"),
            sha256: first_hash.as_str().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        mismatch.code(),
        tonic::Code::InvalidArgument,
        "{mismatch:?}"
    );
    let empty = c.put_blob(PutBlobRequest::default()).await.unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument, "{empty:?}");
    let large = c
        .put_blob(PutBlobRequest {
            data: Bytes::from(vec![0u8; MAX_BLOB + 1]),
            sha256: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(large.code(), tonic::Code::ResourceExhausted, "{large:?}");
    assert!(large.message().contains("--max-blob-bytes"), "{large:?}");

    process.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill_between_upload_and_commit() {
    kill_between_upload_and_commit(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_between_upload_and_commit() {
    let db = ufo_testkit::postgres::TestDatabase::create().await.unwrap();
    kill_between_upload_and_commit(Some(db.url())).await;
    db.drop_database().await.unwrap();
}

/// Postgres without `--blob-dir` still has a blob store: the directory `ufo-session.blobs` in the working
/// directory. PutBlob stores there; a step referencing a blob never put is refused naming its hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_a_blob_dir_keeps_blobs_in_the_default_directory() {
    let db = ufo_testkit::postgres::TestDatabase::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let mut process = ProcessBuilder::new("ufo-session", env!("CARGO_BIN_EXE_ufo-session"))
        .current_dir(dir.path())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--database-url")
        .arg(db.url())
        .env_remove("UFO_SESSION_AUTH_TOKEN")
        .env_remove("UFO_SESSION_BLOB_DIR")
        .env_remove("UFO_SESSION_BLOB_S3_BUCKET")
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    process
        .wait_grpc_ready(&url, Duration::from_secs(60))
        .await
        .unwrap();
    let mut c = client::connect(&url, None).await;
    let pixels = Bytes::from_static(b"pixels of the default directory");
    let stored = put(&mut c, &pixels).await;
    let file = dir
        .path()
        .join(ufo_session::config::DEFAULT_BLOB_DIR)
        .join(&stored.as_str()[..2])
        .join(stored.as_str());
    assert_eq!(std::fs::read(&file).unwrap(), pixels.to_vec());
    let session = c
        .create_session(CreateSessionRequest {
            request: "look".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    c.begin_round(BeginRoundRequest {
        session_id: session.id.clone(),
        number: 1,
        lease_owner: String::new(),
    })
    .await
    .unwrap();
    let hash = BlobHash::of(b"pixels");
    let refused = c
        .record_step(step(&session.id, 1, vec![shot(&hash, 6)]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains(hash.as_str()), "{refused:?}");
    drop(c);
    process.stop().await.unwrap();
    db.drop_database().await.unwrap();
}
