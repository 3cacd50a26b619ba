//! The blackboard (questions, requests, trajectories, images with their metadata) and artifacts
//! (references from a session's steps to content-addressed blobs in the blob store).

use chrono::{DateTime, Utc};
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::{Artifact, ArtifactRef, Blackboard, BlackboardEntry, BlackboardKind};
use uuid::Uuid;

use super::db::{AsConn, Batch, Query, query};
use super::events::{Totals, append, lock_session};
use super::sessions::session_in;
use super::{ROWS_PER_INSERT, SqlStore, db_int, now, rows, settle, values_sql};
use crate::store::{
    ArtifactKey, DbEnum as _, NewArtifact, NewBlackboardEntry, NewEvent, StepArtifact, StoreError,
    StoreResult,
};
use crate::store::{postgres, sqlite};

/// Appends one entry at the next index of its kind, inside the caller's transaction (which holds the
/// session's lock, so indices cannot collide).
pub(super) async fn insert_entry(
    conn: &mut impl AsConn,
    id: Uuid,
    entry: &NewBlackboardEntry,
    step: i64,
    at: DateTime<Utc>,
) -> StoreResult<BlackboardEntry> {
    let row = entry_statement(id, entry, step, at)
        .fetch_one(conn.conn())
        .await?;
    rows::blackboard_entry(&row)
}

/// [`insert_entry`]'s statement (it returns the entry as stored).
pub(super) fn entry_statement<'q>(
    id: Uuid,
    entry: &'q NewBlackboardEntry,
    step: i64,
    at: DateTime<Utc>,
) -> Query<'q> {
    query(
        "INSERT INTO blackboard (session_id, kind, idx, value, artifact_id, step, created_at) \
         SELECT $1, $2, COALESCE(MAX(idx) + 1, 0), $3, $4, $5, $6 FROM blackboard \
         WHERE session_id = $1 AND kind = $2 RETURNING *",
    )
    .bind(id)
    .bind(entry.kind.db())
    .bind(SqlJson(&entry.value))
    .bind(entry.artifact_id.as_deref())
    .bind(step)
    .bind(at)
}

/// Stores the rows of `artifacts` in the caller's transaction: each blob's row (hash and size, once per
/// content) and a reference to it from (session, step, kind); both skip what is already there. Two
/// multi-row statements per [`ROWS_PER_INSERT`] artifacts. (SQLite's steps and every single artifact;
/// Postgres records a step's in `ufo_record_steps`.)
pub(super) async fn insert_artifacts(
    conn: &mut impl AsConn,
    session_id: Uuid,
    step: u64,
    artifacts: &[StepArtifact],
    at: DateTime<Utc>,
) -> StoreResult<()> {
    let mut batch = Batch::default();
    artifact_statements(&mut batch, session_id, step, artifacts, at);
    batch.run(conn).await?;
    Ok(())
}

/// Adds [`insert_artifacts`]' statements to `batch`; returns the indexes of the reference inserts, whose
/// rows are the references they added (as [`rows::artifact_ref`] reads them; not those already there).
pub(super) fn artifact_statements<'q>(
    batch: &mut Batch<'q>,
    session_id: Uuid,
    step: u64,
    artifacts: &'q [StepArtifact],
    at: DateTime<Utc>,
) -> Vec<usize> {
    let mut references = Vec::new();
    for chunk in artifacts.chunks(ROWS_PER_INSERT) {
        let mut blobs = Query::owned(values_sql(
            "INSERT INTO artifact_blobs (sha256, size, created_at) VALUES",
            3,
            chunk.len(),
            "ON CONFLICT (sha256) DO NOTHING",
        ));
        for artifact in chunk {
            blobs = blobs
                .bind(&artifact.blob.sha256)
                .bind(i64::try_from(artifact.blob.size).unwrap_or(i64::MAX))
                .bind(at);
        }
        batch.push(blobs);
        let mut rows = Query::owned(values_sql(
            "INSERT INTO artifacts (session_id, step, kind, sha256, content_type, metadata, created_at) VALUES",
            7,
            chunk.len(),
            "ON CONFLICT (session_id, step, kind, sha256) DO NOTHING \
             RETURNING session_id, step, kind, sha256, content_type, metadata, \
             (SELECT b.size FROM artifact_blobs b WHERE b.sha256 = artifacts.sha256) AS size",
        ));
        for artifact in chunk {
            rows = rows
                .bind(session_id)
                .bind(db_int(step))
                .bind(artifact.kind.db())
                .bind(&artifact.blob.sha256)
                .bind(&artifact.content_type)
                .bind(SqlJson(&artifact.metadata))
                .bind(at);
        }
        references.push(batch.push(rows));
    }
    references
}

impl SqlStore {
    #[instrument(name = "store.get_blackboard", skip_all, fields(session = %id))]
    pub(super) async fn get_blackboard_impl(&self, id: Uuid) -> StoreResult<Blackboard> {
        let mut conn = self.read_conn().await?;
        let found = query("SELECT * FROM blackboard WHERE session_id = $1 ORDER BY kind, idx")
            .bind(id)
            .fetch_all(conn.conn())
            .await?;
        if found.is_empty() {
            session_in(&mut conn, id).await?;
        }
        let mut board = Blackboard::default();
        for row in &found {
            let entry = rows::blackboard_entry(row)?;
            match BlackboardKind::try_from(entry.kind) {
                Ok(BlackboardKind::Question) => board.questions.push(entry),
                Ok(BlackboardKind::Request) => board.requests.push(entry),
                Ok(BlackboardKind::Trajectory) => board.trajectories.push(entry),
                Ok(BlackboardKind::Image) => board.images.push(entry),
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "blackboard kind {}",
                        entry.kind
                    )));
                }
            }
        }
        Ok(board)
    }

    #[instrument(name = "store.append_blackboard", skip_all, fields(session = %id, entries = entries.len()))]
    pub(super) async fn append_blackboard_impl(
        &self,
        id: Uuid,
        entries: Vec<NewBlackboardEntry>,
        events: Vec<NewEvent>,
    ) -> StoreResult<(Vec<BlackboardEntry>, u64)> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64, bool)> = async {
            lock_session(&mut tx, id, None).await?;
            let woken = super::events::wake_parked(&mut tx, id, &events, at).await?;
            let mut stored = Vec::with_capacity(entries.len());
            for entry in &entries {
                stored.push(insert_entry(&mut tx, id, entry, 0, at).await?);
            }
            let (_, last_seq) = append(&mut tx, id, &events, Totals::default(), at).await?;
            Ok(((stored, last_seq), last_seq, woken))
        }
        .await;
        let (value, last_seq, woken) = settle(tx, outcome).await?;
        if !events.is_empty() {
            self.notifier.notify(id, last_seq);
        }
        if woken {
            self.notifier.notify_pool();
        }
        Ok(value)
    }

    /// Adds an artifact to a step in one transaction: the session must exist; returns the stored reference.
    #[instrument(name = "store.add_artifact_row", skip_all,
        fields(session = %artifact.session_id, step = artifact.step))]
    pub(super) async fn add_artifact_impl(
        &self,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactRef> {
        let NewArtifact {
            session_id,
            step,
            artifact,
        } = artifact;
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            session_in(&mut tx, session_id).await?;
            insert_artifacts(
                &mut tx,
                session_id,
                step,
                std::slice::from_ref(&artifact),
                now(),
            )
            .await?;
            let row = query(
                "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size \
                 FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
                 WHERE a.session_id = $1 AND a.step = $2 AND a.kind = $3 AND a.sha256 = $4",
            )
            .bind(session_id)
            .bind(db_int(step))
            .bind(artifact.kind.db())
            .bind(&artifact.blob.sha256)
            .fetch_one(tx.conn())
            .await?;
            rows::artifact_ref(&row)
        }
        .await;
        settle(tx, outcome).await
    }

    #[instrument(name = "store.referenced_blobs", skip_all, fields(count = hashes.len()))]
    pub(super) async fn referenced_blobs_impl(
        &self,
        hashes: Vec<String>,
    ) -> StoreResult<Vec<String>> {
        let referenced = self
            .dialect()
            .pick(postgres::REFERENCED_BLOBS, sqlite::REFERENCED_BLOBS);
        let found = query(referenced)
            .bind(SqlJson(serde_json::json!(hashes)))
            .fetch_all(self.read())
            .await?;
        Ok(found
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    #[instrument(name = "store.get_artifact", skip_all)]
    pub(super) async fn get_artifact_impl(&self, key: ArtifactKey) -> StoreResult<Artifact> {
        let row = match &key {
            ArtifactKey::Id(sha256) => query(
                "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size \
                     FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
                     WHERE a.sha256 = $1 ORDER BY a.created_at LIMIT 1",
            )
            .bind(sha256)
            .fetch_optional(self.read())
            .await?,
            ArtifactKey::Place {
                session_id,
                step,
                kind,
            } => query(
                "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size \
                     FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
                     WHERE a.session_id = $1 AND a.step = $2 AND a.kind = $3 \
                     ORDER BY a.created_at DESC LIMIT 1",
            )
            .bind(session_id)
            .bind(db_int(*step))
            .bind(kind.db())
            .fetch_optional(self.read())
            .await?,
        };
        let Some(row) = row else {
            return Err(StoreError::NotFound(match key {
                ArtifactKey::Id(sha256) => format!("artifact {sha256}"),
                ArtifactKey::Place {
                    session_id,
                    step,
                    kind,
                } => format!(
                    "{} artifact of step {step} of session {session_id}",
                    kind.db()
                ),
            }));
        };
        Ok(Artifact {
            r#ref: Some(rows::artifact_ref(&row)?),
            // The bytes are the blob store's (filled in by `BlobbedStore`).
            data: Default::default(),
        })
    }
}
