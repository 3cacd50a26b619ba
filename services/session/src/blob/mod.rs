//! Content-addressed blob storage for artifact bytes (screenshots, UI trees), kept out of the database.
//!
//! [`BlobStore`] is one object-safe async trait used as `Arc<dyn BlobStore>`, with two backends that pass the
//! same conformance suite (`tests/blob_conformance.rs`):
//! - [`dir`]: a local directory (the default, next to the embedded SQLite file or at `--blob-dir`). A blob is
//!   written to a temporary file, fsynced, renamed into place and its directory fsynced: it is whole or absent.
//! - [`s3`]: any S3-compatible object store (several replicas share it), through the `object_store` crate.
//!
//! A blob's name is the lowercase hex SHA-256 of its bytes ([`BlobHash`]), so identical bytes are stored once
//! and a name can never point at other content. The database holds only references; [`sweep`] deletes blobs
//! no row references once they are older than a grace period (left by a crash between upload and commit).

pub mod dir;
pub mod s3;
pub mod sweep;

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};

/// Result of a blob store operation.
pub type BlobResult<T> = Result<T, BlobError>;

/// Why a blob store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The name is not 64 lowercase hex digits (never a path: it cannot escape the store).
    #[error("invalid blob hash {0:?}: expected 64 lowercase hex digits")]
    InvalidHash(String),
    /// The bytes do not hash to the name the caller gave.
    #[error("blob content hashes to {actual}, not the expected {expected}")]
    HashMismatch {
        /// The name the caller gave.
        expected: BlobHash,
        /// The SHA-256 of the bytes received.
        actual: BlobHash,
    },
    /// No blob with this hash.
    #[error("blob {0} not found")]
    NotFound(BlobHash),
    /// The backend is misconfigured (bad endpoint, missing bucket name...).
    #[error("blob store configuration: {0}")]
    Config(String),
    /// The local file system failed.
    #[error("blob store i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The object store failed (network, permissions, server error).
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
}

/// Lowercase hex SHA-256 of a blob's bytes: its name in every backend.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobHash(String);

impl BlobHash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(bytes)))
    }

    /// Validates a caller's hash: exactly 64 lowercase hex digits, so it is safe as a file or object name.
    pub fn parse(s: &str) -> BlobResult<Self> {
        let valid = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if valid {
            Ok(Self(s.to_owned()))
        } else {
            Err(BlobError::InvalidHash(s.chars().take(80).collect()))
        }
    }

    /// The hex string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobHash({})", self.0)
    }
}

/// What [`BlobStore::list`] reports about one stored blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// Its name.
    pub hash: BlobHash,
    /// Its length in bytes.
    pub size: u64,
    /// When it was last written (the sweeper's grace period counts from here).
    pub modified: SystemTime,
}

/// Hashes `bytes` and checks them against the caller's expectation (shared by every backend's `put`).
pub(crate) fn verified_hash(bytes: &[u8], expected: Option<&BlobHash>) -> BlobResult<BlobHash> {
    let actual = BlobHash::of(bytes);
    match expected {
        Some(expected) if *expected != actual => Err(BlobError::HashMismatch {
            expected: expected.clone(),
            actual,
        }),
        _ => Ok(actual),
    }
}

/// Durable, content-addressed storage of immutable byte strings.
///
/// Contracts shared by every backend (checked by the conformance suite):
/// - `put` returns only once the blob is durable, and a concurrent or later `get` sees it whole or not at all;
/// - putting bytes that are already stored is a cheap success (the blob's modification time may be refreshed,
///   which only delays its sweeping);
/// - `delete` of an absent blob succeeds; `get` of one gives [`BlobError::NotFound`].
#[async_trait]
pub trait BlobStore: Send + Sync + fmt::Debug + 'static {
    /// Stores `bytes` under their SHA-256 and returns it; with `expected`, refuses bytes that hash to
    /// anything else ([`BlobError::HashMismatch`]) and stores nothing.
    async fn put(&self, bytes: Bytes, expected: Option<&BlobHash>) -> BlobResult<BlobHash>;

    /// The bytes of a blob.
    async fn get(&self, hash: &BlobHash) -> BlobResult<Bytes>;

    /// A stored blob's size and time, or `None` when it is absent.
    async fn stat(&self, hash: &BlobHash) -> BlobResult<Option<BlobInfo>>;

    /// Whether a blob is stored.
    async fn exists(&self, hash: &BlobHash) -> BlobResult<bool> {
        Ok(self.stat(hash).await?.is_some())
    }

    /// Deletes a blob (the sweeper's operation); absent blobs are not an error.
    async fn delete(&self, hash: &BlobHash) -> BlobResult<()>;

    /// Every stored blob, in no particular order (the sweeper's scan). Foreign names are skipped.
    async fn list(&self) -> BlobResult<Vec<BlobInfo>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_parse_refuses_paths_and_uppercase() {
        let good = BlobHash::of(b"x");
        assert_eq!(BlobHash::parse(good.as_str()).ok(), Some(good.clone()));
        for bad in [
            "",
            "../etc/passwd",
            &good.as_str().to_uppercase(),
            &good.as_str()[1..],
            &format!("{}0", good.as_str()),
            &format!("../{}", &good.as_str()[3..]),
        ] {
            assert!(
                matches!(BlobHash::parse(bad), Err(BlobError::InvalidHash(_))),
                "{bad:?} was accepted"
            );
        }
    }
}
