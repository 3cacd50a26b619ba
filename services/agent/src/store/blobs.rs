//! Screenshot uploads off the step's critical path (issue 22, docs/blob-store.md).
//!
//! Artifact bytes reach the session service one way: `PutBlob`, then the step references the blob. A
//! screenshot is put as soon as it is captured, on a task of its own, so the upload runs while the model is
//! asked and the action executes. When the step is recorded, [`references`] waits only for uploads that
//! have not finished yet (starting those nobody started), retrying transient failures like every store
//! write, and `RecordStep` carries the blobs' references (hash, size, type, dimensions); the session
//! service refuses a step whose blobs are not durable. A blob the service refuses (larger than its
//! `--max-blob-bytes`) fails the step's recording with the service's reason: nothing is recorded half.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use sha2::{Digest as _, Sha256};
use tracing::Instrument as _;
use ufo_proto::v1::{PutBlobRequest, StepBlob};

use crate::store::client::SessionClient;
use crate::store::retry::{Retry, retried};
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

/// Uploads not claimed by a step within this long are forgotten (their step failed before recording).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Uploads started at capture, keyed by the bytes' hex SHA-256, until their step claims them.
pub struct BlobUploads {
    client: SessionClient,
    started: Mutex<HashMap<String, (Instant, Upload)>>,
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
        }
    }

    /// Starts putting `bytes` now (a no-op when the same bytes are already being put); their hex SHA-256.
    pub fn start(&self, bytes: &Bytes) -> String {
        let hash = sha256_hex(bytes);
        // The upload runs on its own task: the handle is kept in the map, not needed here.
        drop(self.upload(hash.clone(), bytes));
        hash
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

    /// The hash and size of `bytes` once they are durable, waiting for an upload started at capture (or
    /// starting one); a transient failure is retried with `retry`, a refusal returned.
    async fn durable(&self, bytes: &Bytes, retry: &Retry) -> Result<(String, u64), tonic::Status> {
        let hash = sha256_hex(bytes);
        let outcome = self.upload(hash.clone(), bytes).await;
        if let Ok(mut started) = self.started.lock() {
            started.remove(&hash);
        }
        let size = match outcome {
            Ok(size) => size,
            Err(status) if crate::store::retry::transient(status.code()) => {
                tracing::warn!(code = ?status.code(), error = %status.message(), sha256 = %hash,
                    "screenshot upload failed; putting it again");
                retried(retry, "PutBlob", || {
                    let mut client = self.client.clone();
                    let request = PutBlobRequest {
                        data: bytes.clone(),
                        sha256: hash.clone(),
                    };
                    async move { client.put_blob(request).await.map(|r| r.into_inner().size) }
                })
                .await?
            }
            Err(status) => return Err(status),
        };
        Ok((hash, size))
    }
}

/// The hex SHA-256 of `bytes`: their blob's name and artifact id.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Starts the upload of `bytes` when there is an uploader (otherwise the step's recording puts them); their
/// hex SHA-256 either way.
pub fn start(uploads: Option<&BlobUploads>, bytes: &Bytes) -> String {
    match uploads {
        Some(u) => u.start(bytes),
        None => sha256_hex(bytes),
    }
}

/// The step's artifacts as references to durable blobs (uploads waited for, or made now).
#[tracing::instrument(name = "blob.await_uploads", skip_all, fields(artifacts = artifacts.len()))]
pub async fn references(
    uploads: &BlobUploads,
    artifacts: Vec<ArtifactUpload>,
    retry: &Retry,
) -> Result<Vec<StepBlob>, tonic::Status> {
    let dimension = |a: &ArtifactUpload, key: &str| {
        a.metadata
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0)
    };
    futures::future::try_join_all(artifacts.into_iter().map(|a| async move {
        let (sha256, size) = uploads.durable(&a.data, retry).await.map_err(|status| {
            tonic::Status::new(
                status.code(),
                format!(
                    "the step's {} ({} bytes) could not be stored: {}",
                    artifact_name(a.kind),
                    a.data.len(),
                    status.message()
                ),
            )
        })?;
        Ok(StepBlob {
            kind: a.kind as i32,
            width: dimension(&a, "width"),
            height: dimension(&a, "height"),
            content_type: a.content_type,
            sha256,
            size,
            metadata: Some(ufo_proto::json::object_to_struct(a.metadata)),
        })
    }))
    .await
}

/// How an error names an artifact kind (`clean screenshot`).
fn artifact_name(kind: ufo_proto::v1::ArtifactKind) -> String {
    kind.as_str_name()
        .trim_start_matches("ARTIFACT_KIND_")
        .to_ascii_lowercase()
        .replace('_', " ")
}
