//! The sweeper: deletes blobs that no database row references once they are older than a grace period.
//!
//! Unreferenced blobs are normal: a step's screenshots are uploaded before the step commits, so a crash (or a
//! refused step) between the two leaves them behind. The grace period must exceed the longest time between an
//! upload and its step's commit; a blob is re-checked (age, then references) just before it is deleted, and a
//! re-upload of the same bytes refreshes its age, so a blob about to be referenced again is kept.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::{BlobHash, BlobInfo, BlobResult, BlobStore};

/// Answers which blobs the database still references (implemented by the session store).
#[async_trait]
pub trait BlobReferences: Send + Sync {
    /// The subset of `hashes` that some row references.
    async fn referenced(
        &self,
        hashes: &[BlobHash],
    ) -> Result<HashSet<BlobHash>, Box<dyn std::error::Error + Send + Sync>>;
}

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Blobs listed.
    pub scanned: usize,
    /// Blobs deleted (unreferenced and older than the grace period).
    pub deleted: usize,
    /// Bytes freed.
    pub freed_bytes: u64,
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The blob store failed.
    #[error(transparent)]
    Blob(#[from] super::BlobError),
    /// The reference check failed (nothing is deleted without it).
    #[error("cannot check blob references: {0}")]
    References(Box<dyn std::error::Error + Send + Sync>),
}

/// Hashes checked against the database per query.
const CHUNK: usize = 500;

/// Deletes every blob older than `grace` (by modification time) that `refs` does not reference.
#[tracing::instrument(skip_all, fields(grace_s = grace.as_secs()))]
pub async fn sweep(
    blobs: &dyn BlobStore,
    refs: &dyn BlobReferences,
    grace: Duration,
) -> Result<SweepReport, SweepError> {
    let listed = blobs.list().await?;
    let mut report = SweepReport {
        scanned: listed.len(),
        ..SweepReport::default()
    };
    let now = SystemTime::now();
    let old_enough = |info: &BlobInfo| {
        now.duration_since(info.modified)
            .is_ok_and(|age| age >= grace)
    };
    let candidates: Vec<BlobInfo> = listed.into_iter().filter(old_enough).collect();
    for chunk in candidates.chunks(CHUNK) {
        let hashes: Vec<BlobHash> = chunk.iter().map(|b| b.hash.clone()).collect();
        let kept = refs
            .referenced(&hashes)
            .await
            .map_err(SweepError::References)?;
        for info in chunk.iter().filter(|b| !kept.contains(&b.hash)) {
            if still_old(blobs, info, grace).await? {
                blobs.delete(&info.hash).await?;
                report.deleted += 1;
                report.freed_bytes += info.size;
            }
        }
    }
    tracing::info!(
        scanned = report.scanned,
        deleted = report.deleted,
        freed_bytes = report.freed_bytes,
        "blob sweep done"
    );
    Ok(report)
}

/// Whether the blob was not re-uploaded since it was listed (a re-upload refreshes its time).
async fn still_old(blobs: &dyn BlobStore, info: &BlobInfo, grace: Duration) -> BlobResult<bool> {
    let now = SystemTime::now();
    Ok(blobs
        .stat(&info.hash)
        .await?
        .is_some_and(|b| now.duration_since(b.modified).is_ok_and(|age| age >= grace)))
}
