//! The S3-compatible backend (AWS S3, MinIO, Ceph radosgw, moto...) through the `object_store` crate.
//!
//! Objects are named `<prefix>/<hash>`. An S3 PUT is atomic (an object is whole or absent) and durable when
//! acknowledged, which is the contract of [`BlobStore::put`]; re-putting identical bytes refreshes the object's
//! modification time, which the sweeper's grace period counts from.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{BlobError, BlobHash, BlobInfo, BlobResult, BlobStore, verified_hash};

/// Where and how to reach the S3-compatible store.
#[derive(Clone, Default)]
pub struct S3Options {
    /// Bucket name (must exist).
    pub bucket: String,
    /// Endpoint URL for non-AWS servers (e.g. `http://127.0.0.1:9000`); AWS's when absent.
    pub endpoint: Option<String>,
    /// Region (any value for most non-AWS servers).
    pub region: String,
    /// Access key id; the AWS environment/instance credentials are used when absent.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Key prefix inside the bucket (so one bucket can serve several deployments).
    pub prefix: String,
    /// Allow plain-HTTP endpoints (local test servers).
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("prefix", &self.prefix)
            .field("allow_http", &self.allow_http)
            .finish_non_exhaustive()
    }
}

/// Blobs as objects in one bucket.
#[derive(Debug)]
pub struct S3BlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl S3BlobStore {
    /// Builds the client (no request is made until the first operation).
    pub fn connect(options: &S3Options) -> BlobResult<Self> {
        if options.bucket.is_empty() {
            return Err(BlobError::Config("the S3 bucket name is empty".into()));
        }
        ufo_common::tls::install_crypto_provider();
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&options.bucket)
            .with_region(&options.region)
            .with_allow_http(options.allow_http);
        if let Some(endpoint) = &options.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(key) = &options.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &options.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let store = builder
            .build()
            .map_err(|e| BlobError::Config(e.to_string()))?;
        Ok(Self {
            store: Arc::new(store),
            prefix: Path::from(options.prefix.as_str()),
        })
    }

    fn path(&self, hash: &BlobHash) -> Path {
        self.prefix.clone().join(hash.as_str())
    }
}

/// Maps the object store's "not found" to ours.
fn not_found(hash: &BlobHash, e: object_store::Error) -> BlobError {
    match e {
        object_store::Error::NotFound { .. } => BlobError::NotFound(hash.clone()),
        e => e.into(),
    }
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn put(&self, bytes: Bytes, expected: Option<&BlobHash>) -> BlobResult<BlobHash> {
        let hash = verified_hash(&bytes, expected)?;
        self.store
            .put(&self.path(&hash), PutPayload::from(bytes))
            .await?;
        Ok(hash)
    }

    async fn get(&self, hash: &BlobHash) -> BlobResult<Bytes> {
        let got = self
            .store
            .get(&self.path(hash))
            .await
            .map_err(|e| not_found(hash, e))?;
        got.bytes().await.map_err(|e| not_found(hash, e))
    }

    async fn stat(&self, hash: &BlobHash) -> BlobResult<Option<BlobInfo>> {
        match self.store.head(&self.path(hash)).await {
            Ok(meta) => Ok(Some(BlobInfo {
                hash: hash.clone(),
                size: meta.size,
                modified: meta.last_modified.into(),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, hash: &BlobHash) -> BlobResult<()> {
        match self.store.delete(&self.path(hash)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn list(&self) -> BlobResult<Vec<BlobInfo>> {
        let metas: Vec<_> = self.store.list(Some(&self.prefix)).try_collect().await?;
        Ok(metas
            .into_iter()
            .filter_map(|meta| {
                let hash = BlobHash::parse(meta.location.filename()?).ok()?;
                Some(BlobInfo {
                    hash,
                    size: meta.size,
                    modified: meta.last_modified.into(),
                })
            })
            .collect())
    }
}
