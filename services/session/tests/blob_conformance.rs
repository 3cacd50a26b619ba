//! The blob store conformance suite, run against every backend: the local directory, and an S3-compatible
//! object store (moto's server mode, a real S3-protocol HTTP server started by the test on a free port).
//!
//! The S3 half needs `moto_server` on PATH (`pip install 'moto[server]'`; `.ci/run` installs it): when it is
//! missing the test fails and says so, it never passes without having run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::blob::s3::{S3BlobStore, S3Options};
use ufo_session::blob::sweep::{BlobReferences, sweep};
use ufo_session::blob::{BlobError, BlobHash, BlobStore};
use ufo_testkit::process::{ProcessBuilder, ServiceProcess, free_port};

/// Every contract of [`BlobStore`], on an empty store.
async fn conformance(store: Arc<dyn BlobStore>) {
    let before = SystemTime::now() - Duration::from_secs(5);

    // put: content-addressed, readable whole, listed with its size.
    let bytes = Bytes::from_static(b"a screenshot, as far as the store cares");
    let hash = store.put(bytes.clone(), None).await.unwrap();
    assert_eq!(hash, BlobHash::of(&bytes));
    assert_eq!(store.get(&hash).await.unwrap(), bytes);
    assert!(store.exists(&hash).await.unwrap());
    let stat = store.stat(&hash).await.unwrap().unwrap();
    assert_eq!(stat.size, bytes.len() as u64);
    assert!(stat.modified >= before, "modified time is in the past");

    // The same bytes again: the same name, stored once.
    assert_eq!(store.put(bytes.clone(), Some(&hash)).await.unwrap(), hash);
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].hash, hash);
    assert_eq!(listed[0].size, bytes.len() as u64);

    // A wrong expected hash is refused and stores nothing.
    let other = Bytes::from_static(b"other bytes");
    match store.put(other.clone(), Some(&hash)).await {
        Err(BlobError::HashMismatch { expected, actual }) => {
            assert_eq!(expected, hash);
            assert_eq!(actual, BlobHash::of(&other));
        }
        got => panic!("expected HashMismatch, got {got:?}"),
    }
    assert!(!store.exists(&BlobHash::of(&other)).await.unwrap());
    assert_eq!(store.list().await.unwrap().len(), 1);

    // Absent blobs: NotFound on get, false on exists, None on stat, delete is a success.
    let absent = BlobHash::of(b"never stored");
    assert!(matches!(store.get(&absent).await, Err(BlobError::NotFound(h)) if h == absent));
    assert!(!store.exists(&absent).await.unwrap());
    assert!(store.stat(&absent).await.unwrap().is_none());
    store.delete(&absent).await.unwrap();

    // Empty and large blobs round-trip.
    let empty = store.put(Bytes::new(), None).await.unwrap();
    assert_eq!(store.get(&empty).await.unwrap().len(), 0);
    let large: Bytes = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect::<Vec<u8>>()
        .into();
    let large_hash = store.put(large.clone(), None).await.unwrap();
    assert_eq!(store.get(&large_hash).await.unwrap(), large);

    // Concurrent puts of the same new bytes all succeed, and the blob is whole.
    let shared = Bytes::from(vec![7u8; 256 * 1024]);
    let puts = (0..8).map(|_| {
        let (store, shared) = (store.clone(), shared.clone());
        tokio::spawn(async move { store.put(shared, None).await })
    });
    for put in futures::future::join_all(puts).await {
        assert_eq!(put.unwrap().unwrap(), BlobHash::of(&shared));
    }
    assert_eq!(store.get(&BlobHash::of(&shared)).await.unwrap(), shared);

    let names: HashSet<_> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.hash)
        .collect();
    let expected: HashSet<_> = [hash.clone(), empty, large_hash, BlobHash::of(&shared)].into();
    assert_eq!(names, expected);

    // delete removes it from get, exists and list.
    store.delete(&hash).await.unwrap();
    assert!(matches!(
        store.get(&hash).await,
        Err(BlobError::NotFound(_))
    ));
    assert!(!store.exists(&hash).await.unwrap());
    assert_eq!(store.list().await.unwrap().len(), 3);
}

/// References held in a set (the database's role, which `tests/blob_store.rs` plays with a real store).
struct Referenced(HashSet<BlobHash>);

#[async_trait]
impl BlobReferences for Referenced {
    async fn referenced(
        &self,
        hashes: &[BlobHash],
    ) -> Result<HashSet<BlobHash>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(hashes
            .iter()
            .filter(|h| self.0.contains(h))
            .cloned()
            .collect())
    }
}

/// The sweeper deletes only unreferenced blobs older than the grace period.
async fn sweeping(store: Arc<dyn BlobStore>) {
    let kept = store.put(Bytes::from_static(b"kept"), None).await.unwrap();
    let orphan = store
        .put(Bytes::from_static(b"orphan"), None)
        .await
        .unwrap();
    let refs = Referenced([kept.clone()].into());

    // Within the grace period nothing goes, referenced or not.
    let report = sweep(store.as_ref(), &refs, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!((report.scanned, report.deleted), (2, 0));
    assert!(store.exists(&orphan).await.unwrap());

    let report = sweep(store.as_ref(), &refs, Duration::ZERO).await.unwrap();
    assert_eq!((report.scanned, report.deleted), (2, 1));
    assert_eq!(report.freed_bytes, 6);
    assert!(!store.exists(&orphan).await.unwrap());
    assert!(store.exists(&kept).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(DirBlobStore::open(dir.path().join("blobs")).unwrap());
    conformance(store.clone()).await;
    // No part files are left behind, and foreign files are never listed as blobs.
    let tmp = std::fs::read_dir(store.root().join("tmp")).unwrap().count();
    assert_eq!(tmp, 0, "leftover part files");
    std::fs::write(store.root().join("README"), b"not a blob").unwrap();
    std::fs::create_dir_all(store.root().join("ab")).unwrap();
    std::fs::write(store.root().join("ab").join("abc"), b"not a blob").unwrap();
    assert_eq!(store.list().await.unwrap().len(), 3);
}

/// Part files left by a crashed write are removed when the store is opened again; fresh ones (a write in
/// flight) are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_backend_removes_stale_part_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirBlobStore::open(dir.path()).unwrap();
    let (stale, fresh) = (
        store.root().join("tmp").join("crashed.part"),
        store.root().join("tmp").join("writing.part"),
    );
    std::fs::write(&stale, b"half a blob").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 3600))
        .unwrap();
    std::fs::write(&fresh, b"in flight").unwrap();
    DirBlobStore::open(dir.path()).unwrap();
    assert!(!stale.exists(), "the stale part file is still there");
    assert!(fresh.exists(), "a fresh part file was removed");
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_backend_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    sweeping(Arc::new(DirBlobStore::open(dir.path()).unwrap())).await;
}

/// moto's S3 server on a free port, with a fresh bucket; stopped when dropped.
struct Moto {
    _process: ServiceProcess,
    options: S3Options,
}

impl Moto {
    async fn start(bucket: &str) -> Self {
        let port = free_port().unwrap();
        let mut process = ProcessBuilder::new("moto_server", "moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "the S3 conformance test needs moto's S3 server: `pip install 'moto[server]'` \
                     (.ci/run installs it) and put `moto_server` on PATH ({e})"
                )
            });
        let endpoint = format!("http://127.0.0.1:{port}");
        process
            .wait_http_ready(&format!("{endpoint}/moto-api/"), Duration::from_secs(60))
            .await
            .unwrap();
        // object_store cannot create buckets: create it with a plain S3 `PUT /<bucket>`.
        let created = ufo_testkit::http_client()
            .put(format!("{endpoint}/{bucket}"))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success(), "create bucket: {created:?}");
        Self {
            _process: process,
            options: S3Options {
                bucket: bucket.into(),
                endpoint: Some(endpoint),
                region: "us-east-1".into(),
                access_key_id: Some("test".into()),
                secret_access_key: Some("test".into()),
                prefix: "blobs".into(),
                allow_http: true,
            },
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backend_conforms() {
    let moto = Moto::start("ufo-conformance").await;
    conformance(Arc::new(S3BlobStore::connect(&moto.options).unwrap())).await;
    // A second prefix in the same bucket is a separate store.
    let other = S3BlobStore::connect(&S3Options {
        prefix: "elsewhere".into(),
        ..moto.options.clone()
    })
    .unwrap();
    assert!(other.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backend_sweeps() {
    let moto = Moto::start("ufo-sweep").await;
    sweeping(Arc::new(S3BlobStore::connect(&moto.options).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_config_errors_are_clear() {
    let err = S3BlobStore::connect(&S3Options::default()).unwrap_err();
    assert!(matches!(err, BlobError::Config(_)), "{err:?}");
}

/// The session service configured with `--blob-s3-*` (real gRPC, real S3 server): a step's screenshot goes
/// to the bucket, its row keeps the reference, and GetArtifact serves the bytes back from the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_service_keeps_step_blobs_in_s3() {
    use ufo_proto::v1::{
        ArtifactKind, BeginRoundRequest, CreateSessionRequest, GetArtifactRequest, PutBlobRequest,
        RecordStepRequest, Step, StepBlob,
    };

    let moto = Moto::start("ufo-service").await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = ufo_session::Config::defaults();
    config.database_url = None;
    config.sqlite_path = dir.path().join("session.sqlite3");
    config.auth_token = None;
    let o = &moto.options;
    config.blobs.blob_s3_bucket = Some(o.bucket.clone());
    config.blobs.blob_s3_endpoint = o.endpoint.clone();
    config.blobs.blob_s3_access_key_id = o.access_key_id.clone();
    config.blobs.blob_s3_secret_access_key = o.secret_access_key.clone();
    config.blobs.blob_s3_prefix = "service".into();
    config.blobs.blob_s3_allow_http = true;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(ufo_session::run(config, listener, shutdown.clone()));
    let mut c = client::connect(&url, None).await;

    let session = c
        .create_session(CreateSessionRequest {
            request: "look at the screen".into(),
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
    let shot = Bytes::from_static(b"the pixels the model saw");
    let put = c
        .put_blob(PutBlobRequest {
            data: shot.clone(),
            sha256: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let recorded = c
        .record_step(RecordStepRequest {
            step: Some(Step {
                session_id: session.id.clone(),
                step: 1,
                round: 1,
                round_step: 1,
                agent_name: "HostAgent".into(),
                agent_kind: ufo_proto::v1::AgentKind::Host.into(),
                ..Default::default()
            }),
            blobs: vec![StepBlob {
                kind: ArtifactKind::CleanScreenshot.into(),
                content_type: "image/png".into(),
                sha256: put.sha256,
                size: put.size,
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let hash = BlobHash::of(&shot);
    let bucket = S3BlobStore::connect(&S3Options {
        prefix: "service".into(),
        ..moto.options.clone()
    })
    .unwrap();
    assert_eq!(bucket.get(&hash).await.unwrap(), shot);
    let stored = recorded.step.unwrap().artifacts;
    assert_eq!(stored[0].id, hash.as_str());
    let served = c
        .get_artifact(GetArtifactRequest {
            artifact_id: hash.as_str().into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(served.data, shot);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
