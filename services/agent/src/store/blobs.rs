//! Screenshot uploads off the step's critical path (issue 22, docs/blob-store.md).
//!
//! A screenshot is put into the session service's blob store (`PutBlob`) as soon as it is captured, on a
//! task of its own, so the upload runs while the model is asked and the action executes. When the step is
//! recorded, [`split`] waits only for uploads that have not finished yet and sends `RecordStep` the blobs'
//! references (hash, size, type, dimensions) instead of their bytes; the session service refuses a step
//! whose blobs are not durable. Where an upload failed (a session service that keeps bytes in rows, an
//! older one without `PutBlob`, a transient error) the bytes go inside `RecordStep` as before: the step is
//! never lost for want of the blob store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use sha2::{Digest as _, Sha256};
use tracing::Instrument as _;
use ufo_proto::v1::{PutBlobRequest, StepArtifact, StepBlob};

use crate::store::client::SessionClient;

/// An artifact produced by a step (stored before the step is recorded).
#[derive(Debug, Clone)]
pub struct ArtifactUpload {
    /// Which artifact.
    pub kind: ufo_proto::v1::ArtifactKind,
    /// e.g. `image/png`.
    pub content_type: String,
    /// The bytes (shared with the screenshot they come from, not copied).
    pub data: bytes::Bytes,
    /// Image metadata (width, height, transform, ...).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// An upload in flight or done: the stored blob's size, or why it failed.
type Upload = Shared<BoxFuture<'static, Result<u64, tonic::Status>>>;

/// After a session service says it has no blob store (or no PutBlob), uploads pause this long: its
/// screenshots go inline without a refused call per capture.
const PAUSE_WITHOUT_STORE: Duration = Duration::from_secs(60);

/// Uploads not claimed by a step within this long are forgotten (their step failed before recording).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Uploads started at capture, keyed by the bytes' hex SHA-256, until their step claims them.
pub struct BlobUploads {
    client: SessionClient,
    started: Mutex<HashMap<String, (Instant, Upload)>>,
    paused_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for BlobUploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.started.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("BlobUploads")
            .field("pending", &pending)
            .finish_non_exhaustive()
    }
}

impl BlobUploads {
    /// Uploads through `client` (the session service that records the steps).
    pub fn new(client: SessionClient) -> Self {
        Self {
            client,
            started: Mutex::new(HashMap::new()),
            paused_until: Mutex::new(None),
        }
    }

    /// Starts putting `bytes` now (a no-op when the same bytes are already being put); their hex SHA-256.
    pub fn start(&self, bytes: &Bytes) -> String {
        let hash = sha256_hex(bytes);
        if !self.paused() {
            // The upload runs on its own task: the handle is kept in the map, not needed here.
            drop(self.upload(hash.clone(), bytes));
        }
        hash
    }

    fn paused(&self) -> bool {
        let until = self.paused_until.lock().ok().and_then(|p| *p);
        until.is_some_and(|t| Instant::now() < t)
    }

    fn upload(&self, hash: String, bytes: &Bytes) -> Upload {
        let Ok(mut started) = self.started.lock() else {
            return self.spawn(hash, bytes.clone());
        };
        let now = Instant::now();
        started.retain(|_, (at, _)| now.duration_since(*at) < FORGET_AFTER);
        started
            .entry(hash.clone())
            .or_insert_with(|| (now, self.spawn(hash, bytes.clone())))
            .1
            .clone()
    }

    /// Puts the bytes on a task of its own: it proceeds whether or not anyone waits for it yet.
    fn spawn(&self, hash: String, data: Bytes) -> Upload {
        let mut client = self.client.clone();
        let span = tracing::info_span!("blob.upload", size = data.len(), sha256 = %hash);
        let put = async move {
            let request = PutBlobRequest { data, sha256: hash };
            client.put_blob(request).await.map(|r| r.into_inner().size)
        }
        .instrument(span);
        let task = tokio::spawn(put);
        async move {
            task.await
                .unwrap_or_else(|e| Err(tonic::Status::internal(e.to_string())))
        }
        .boxed()
        .shared()
    }

    /// The reference to `bytes` once they are durable, waiting for an upload started at capture (or
    /// starting one); `None` when the upload failed.
    async fn durable(&self, bytes: &Bytes) -> Option<(String, u64)> {
        if self.paused() {
            return None;
        }
        let hash = hex::encode(Sha256::digest(bytes));
        let upload = self.upload(hash.clone(), bytes);
        let outcome = upload.await;
        if let Ok(mut started) = self.started.lock() {
            started.remove(&hash);
        }
        match outcome {
            Ok(size) => Some((hash, size)),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::Unimplemented
                ) =>
            {
                if let Ok(mut until) = self.paused_until.lock() {
                    *until = Some(Instant::now() + PAUSE_WITHOUT_STORE);
                }
                tracing::info!(reason = %status.message(),
                    "the session service keeps screenshots in its database; sending them with the steps");
                None
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), error = %status.message(), sha256 = %hash,
                    "screenshot upload failed; sending its bytes with the step");
                None
            }
        }
    }
}

/// The hex SHA-256 of `bytes`: their blob's name and artifact id.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Starts the upload of `bytes` when there is an uploader; their hex SHA-256 either way.
pub fn start(uploads: Option<&BlobUploads>, bytes: &Bytes) -> String {
    match uploads {
        Some(u) => u.start(bytes),
        None => sha256_hex(bytes),
    }
}

/// The step's artifacts as blob references (uploads waited for) and, for those whose upload failed or
/// when there is no uploader, as bytes to send inline.
#[tracing::instrument(name = "blob.await_uploads", skip_all, fields(artifacts = artifacts.len()))]
pub async fn split(
    uploads: Option<&BlobUploads>,
    artifacts: Vec<ArtifactUpload>,
) -> (Vec<StepBlob>, Vec<StepArtifact>) {
    let resolved = futures::future::join_all(artifacts.into_iter().map(|a| async move {
        let durable = match uploads {
            Some(u) => u.durable(&a.data).await,
            None => None,
        };
        (a, durable)
    }))
    .await;
    let dimension = |a: &ArtifactUpload, key: &str| {
        a.metadata
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0)
    };
    let (mut blobs, mut inline) = (Vec::new(), Vec::new());
    for (a, durable) in resolved {
        match durable {
            Some((sha256, size)) => blobs.push(StepBlob {
                kind: a.kind as i32,
                width: dimension(&a, "width"),
                height: dimension(&a, "height"),
                content_type: a.content_type,
                sha256,
                size,
                metadata: Some(ufo_proto::json::object_to_struct(a.metadata)),
            }),
            None => inline.push(StepArtifact {
                kind: a.kind as i32,
                content_type: a.content_type,
                data: a.data,
                metadata: Some(ufo_proto::json::object_to_struct(a.metadata)),
            }),
        }
    }
    (blobs, inline)
}
