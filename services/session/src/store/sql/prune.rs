//! Retention of screenshots (issue 22, point 4): the screenshot artifacts of ended sessions older than a
//! cutoff, or beyond the newest N sessions, are removed, and the session records when. Steps, memory,
//! blackboard and events are all kept. Blob rows that no artifact references any more go with them (their
//! bytes, for rows written before the blob store), and the blob sweeper deletes their files after its
//! grace period.

use chrono::{DateTime, Utc};
use tracing::instrument;
use uuid::Uuid;

use super::db::{AsConn as _, query};
use super::{SqlStore, api_u64, db_int, now, settle};
use crate::store::{PruneOutcome, PruneRule, StoreResult};

/// Ended sessions whose images are still kept, created before `$1`.
const OLDER_THAN: &str = "SELECT id FROM sessions WHERE images_pruned_at IS NULL \
     AND status IN ('finished', 'failed', 'cancelled') AND created_at < $1";

/// Ended sessions whose images are still kept, with at least `$1` sessions newer than them.
const BEYOND_NEWEST: &str = "SELECT s.id FROM sessions s WHERE s.images_pruned_at IS NULL \
     AND s.status IN ('finished', 'failed', 'cancelled') \
     AND (SELECT count(*) FROM sessions n WHERE n.created_at > s.created_at \
          OR (n.created_at = s.created_at AND n.id > s.id)) >= $1";

impl SqlStore {
    #[instrument(name = "store.prune_images", skip_all)]
    pub(super) async fn prune_images_impl(&self, rule: PruneRule) -> StoreResult<PruneOutcome> {
        let mut ids: Vec<Uuid> = Vec::new();
        if let Some(cutoff) = rule.created_before {
            let found = query(OLDER_THAN)
                .bind(cutoff)
                .fetch_all(self.read())
                .await?;
            for row in &found {
                ids.push(row.try_get(0)?);
            }
        }
        if let Some(keep) = rule.keep_newest {
            let found = query(BEYOND_NEWEST)
                .bind(db_int(keep))
                .fetch_all(self.read())
                .await?;
            for row in &found {
                ids.push(row.try_get(0)?);
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let mut outcome = PruneOutcome::default();
        for id in ids {
            let (artifacts, blobs) = self.prune_session(id, now()).await?;
            outcome.sessions += 1;
            outcome.artifacts += artifacts;
            outcome.blobs += blobs;
        }
        Ok(outcome)
    }

    /// Removes one session's screenshot artifacts and the blob rows nothing references any more, and
    /// records when, in one transaction. Returns (artifacts, blob rows) removed.
    async fn prune_session(&self, id: Uuid, at: DateTime<Utc>) -> StoreResult<(u64, u64)> {
        let mut tx = self.begin().await?;
        let outcome = async {
            let hashes = query(
                "DELETE FROM artifacts WHERE session_id = $1 AND kind IN ('clean_screenshot', \
                 'annotated_screenshot', 'desktop_screenshot', 'selected_control_screenshot') \
                 RETURNING sha256",
            )
            .bind(id)
            .fetch_all(tx.conn())
            .await?;
            let artifacts = hashes.len() as u64;
            let mut unique = hashes
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<Vec<String>, _>>()?;
            unique.sort_unstable();
            unique.dedup();
            let mut blobs = 0_u64;
            for hash in unique {
                blobs += query(
                    "DELETE FROM artifact_blobs WHERE sha256 = $1 \
                     AND NOT EXISTS (SELECT 1 FROM artifacts WHERE sha256 = $1)",
                )
                .bind(hash)
                .execute(tx.conn())
                .await?;
            }
            query("UPDATE sessions SET images_pruned_at = $2 WHERE id = $1")
                .bind(id)
                .bind(at)
                .execute(tx.conn())
                .await?;
            Ok((artifacts, api_u64(db_int(blobs))))
        }
        .await;
        settle(tx, outcome).await
    }
}
