//! The blackboard (questions, requests, trajectories, images with their metadata) and artifacts
//! (content-addressed bytes referenced from a session's steps).

use chrono::{DateTime, Utc};
use serde_json::Value as Json;
use sha2::{Digest as _, Sha256};
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::{
    Artifact, ArtifactKind, ArtifactRef, Blackboard, BlackboardEntry, BlackboardKind,
};
use uuid::Uuid;

use super::db::{AsConn, query};
use super::events::{Totals, append, lock_session};
use super::sessions::session_in;
use super::{Backend, SqlStore, db_int, now, rows, settle};
use crate::store::{
    ArtifactKey, DbEnum as _, NewArtifact, NewBlackboardEntry, NewEvent, StoreError, StoreResult,
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
    let row = query(
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
    .fetch_one(conn.conn())
    .await?;
    rows::blackboard_entry(&row)
}

/// Stores an artifact's bytes once per content and a reference to them from (session, step, kind), in the
/// caller's transaction. (SQLite's path; Postgres does the same in one statement or in `ufo_record_steps`.)
pub(super) async fn insert_artifact(
    conn: &mut impl AsConn,
    session_id: Uuid,
    step: u64,
    artifact: ArtifactRow<'_>,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    query(
        "INSERT INTO artifact_blobs (sha256, size, data, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (sha256) DO NOTHING",
    )
    .bind(artifact.sha256)
    .bind(i64::try_from(artifact.size).unwrap_or(i64::MAX))
    .bind(artifact.data)
    .bind(at)
    .execute(conn.conn())
    .await?;
    query(
        "INSERT INTO artifacts (session_id, step, kind, sha256, content_type, metadata, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (session_id, step, kind, sha256) DO NOTHING",
    )
    .bind(session_id)
    .bind(db_int(step))
    .bind(artifact.kind.db())
    .bind(artifact.sha256)
    .bind(artifact.content_type)
    .bind(SqlJson(artifact.metadata))
    .bind(at)
    .execute(conn.conn())
    .await?;
    Ok(())
}

/// The columns of one artifact to store (borrowed from the request).
#[derive(Debug, Clone, Copy)]
pub(super) struct ArtifactRow<'a> {
    pub kind: ArtifactKind,
    pub sha256: &'a str,
    pub content_type: &'a str,
    pub metadata: &'a Json,
    /// `None` when the blob store holds the bytes (the row keeps the reference and size).
    pub data: Option<&'a [u8]>,
    pub size: u64,
}

/// Stores an artifact statement by statement in one transaction: the session must exist; the bytes once per
/// content; the reference to them. Returns the stored reference. (SQLite's path; Postgres does the same in
/// one statement, see `postgres::put_artifact`.)
async fn put_artifact_statements(
    store: &SqlStore,
    artifact: &NewArtifact,
    sha256: &str,
    at: DateTime<Utc>,
) -> StoreResult<ArtifactRef> {
    let mut tx = store.begin().await?;
    let outcome: StoreResult<(_, u64)> = async {
        session_in(&mut tx, artifact.session_id).await?;
        let row = ArtifactRow {
            kind: artifact.kind,
            sha256,
            content_type: &artifact.content_type,
            metadata: &artifact.metadata,
            data: artifact.blob.is_none().then_some(artifact.data.as_ref()),
            size: artifact
                .blob
                .as_ref()
                .map_or(artifact.data.len() as u64, |b| b.size),
        };
        insert_artifact(&mut tx, artifact.session_id, artifact.step, row, at).await?;
        let row = query(
            "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size \
             FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
             WHERE a.session_id = $1 AND a.step = $2 AND a.kind = $3 AND a.sha256 = $4",
        )
        .bind(artifact.session_id)
        .bind(db_int(artifact.step))
        .bind(artifact.kind.db())
        .bind(sha256)
        .fetch_one(tx.conn())
        .await?;
        Ok((rows::artifact_ref(&row)?, 0))
    }
    .await;
    Ok(settle(tx, outcome).await?.0)
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
        let outcome: StoreResult<(_, u64)> = async {
            lock_session(&mut tx, id, None).await?;
            super::events::wake_parked(&mut tx, id, &events, at).await?;
            let mut stored = Vec::with_capacity(entries.len());
            for entry in &entries {
                stored.push(insert_entry(&mut tx, id, entry, 0, at).await?);
            }
            let (_, last_seq) = append(&mut tx, id, &events, Totals::default(), at).await?;
            Ok(((stored, last_seq), last_seq))
        }
        .await;
        let (value, last_seq) = settle(tx, outcome).await?;
        if !events.is_empty() {
            self.notifier.notify(id, last_seq);
        }
        Ok(value)
    }

    #[instrument(name = "store.put_artifact", skip_all,
        fields(session = %artifact.session_id, step = artifact.step, size = artifact.data.len()))]
    pub(super) async fn put_artifact_impl(
        &self,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactRef> {
        let sha256 = match &artifact.blob {
            Some(blob) => blob.sha256.clone(),
            None => hex::encode(Sha256::digest(artifact.data.as_ref())),
        };
        match &self.backend {
            Backend::Postgres { pool, .. } => {
                postgres::put_artifact(pool, &artifact, &sha256, now()).await
            }
            Backend::Sqlite { .. } => {
                put_artifact_statements(self, &artifact, &sha256, now()).await
            }
        }
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
            ArtifactKey::Id(sha256) => {
                query(
                    "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size, b.data \
                     FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
                     WHERE a.sha256 = $1 ORDER BY a.created_at LIMIT 1",
                )
                .bind(sha256)
                .fetch_optional(self.read())
                .await?
            }
            ArtifactKey::Place {
                session_id,
                step,
                kind,
            } => {
                query(
                    "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size, b.data \
                     FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
                     WHERE a.session_id = $1 AND a.step = $2 AND a.kind = $3 \
                     ORDER BY a.created_at DESC LIMIT 1",
                )
                .bind(session_id)
                .bind(db_int(*step))
                .bind(kind.db())
                .fetch_optional(self.read())
                .await?
            }
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
            // NULL when the bytes live in the blob store (filled in by `BlobbedStore`).
            data: row
                .try_get::<Option<Vec<u8>>, _>("data")?
                .unwrap_or_default()
                .into(),
        })
    }
}
