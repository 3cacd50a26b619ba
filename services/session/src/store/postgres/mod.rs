//! The Postgres store: the production backend.
//!
//! Watchers in any replica wake through `LISTEN/NOTIFY`: the statement that allocates sequence numbers
//! also calls `pg_notify('ufo_session_events', '<session>:<last_seq>')`, which Postgres delivers on commit;
//! one listener connection per process fans notifications out to the local [`Notifier`]. Writes in this
//! process also notify locally right after commit, so local watchers do not wait for the round trip.

use std::sync::Arc;
use std::time::Duration;

use std::str::FromStr as _;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tracing::Instrument as _;

use crate::store::{Notifier, StoreError};

type Db = sqlx::Postgres;

// The shared SQL is compiled once per backend on purpose (see `sql/mod.rs`).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

/// The Postgres implementation of [`Store`](crate::store::Store).
pub type PgStore = sql::SqlStore;

/// The notification channel of committed events.
pub const CHANNEL: &str = "ufo_session_events";

/// Embedded Postgres migrations (`migrations/` at the repository root).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

mod dialect {
    pub(super) const NAME: &str = "postgres";

    /// An artifact in one statement (one round trip, no explicit transaction): the bytes once per content,
    /// the reference to them, both only when the session exists. A reference that already existed is
    /// returned as stored.
    const PUT_ARTIFACT: &str = "WITH s AS (SELECT id FROM sessions WHERE id = $1), \
        blob AS (INSERT INTO artifact_blobs (sha256, size, data, created_at) SELECT $2, $3, $4, $5 FROM s \
          ON CONFLICT (sha256) DO NOTHING), \
        art AS (INSERT INTO artifacts (session_id, step, kind, sha256, content_type, metadata, created_at) \
          SELECT $1, $6, $7, $2, $8, $9, $5 FROM s ON CONFLICT (session_id, step, kind, sha256) DO NOTHING \
          RETURNING content_type, metadata), \
        earlier AS (SELECT content_type, metadata FROM artifacts \
          WHERE session_id = $1 AND step = $6 AND kind = $7 AND sha256 = $2) \
        SELECT EXISTS (SELECT 1 FROM s) AS found, \
          COALESCE((SELECT content_type FROM art), (SELECT content_type FROM earlier)) AS content_type, \
          COALESCE((SELECT metadata FROM art), (SELECT metadata FROM earlier)) AS metadata";

    pub(super) async fn put_artifact(
        write: &sqlx::PgPool,
        artifact: &crate::store::NewArtifact,
        sha256: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> crate::store::StoreResult<ufo_proto::v1::ArtifactRef> {
        use crate::store::DbEnum as _;
        use sqlx::types::Json;

        let size = i64::try_from(artifact.data.len()).unwrap_or(i64::MAX);
        let step = i64::try_from(artifact.step).unwrap_or(i64::MAX);
        let (found, content_type, metadata): (
            bool,
            Option<String>,
            Option<Json<serde_json::Value>>,
        ) = sqlx::query_as(PUT_ARTIFACT)
            .bind(artifact.session_id)
            .bind(sha256)
            .bind(size)
            .bind(&artifact.data)
            .bind(at)
            .bind(step)
            .bind(artifact.kind.db())
            .bind(&artifact.content_type)
            .bind(Json(&artifact.metadata))
            .fetch_one(write)
            .await?;
        if !found {
            return Err(crate::store::StoreError::NotFound(format!(
                "session {}",
                artifact.session_id
            )));
        }
        Ok(ufo_proto::v1::ArtifactRef {
            id: sha256.to_owned(),
            session_id: artifact.session_id.to_string(),
            step: artifact.step,
            kind: artifact.kind.into(),
            content_type: content_type.unwrap_or_else(|| artifact.content_type.clone()),
            size: artifact.data.len() as u64,
            metadata: match metadata.map(|m| m.0) {
                Some(serde_json::Value::Object(map)) => {
                    Some(ufo_proto::json::object_to_struct(map))
                }
                _ => None,
            },
        })
    }

    /// Links the step's artifacts (already put for this session) to `step` in two statements whatever
    /// their number; `FailedPrecondition` naming the first one the session does not have.
    pub(super) async fn link_artifacts(
        conn: &mut sqlx::PgConnection,
        id: uuid::Uuid,
        artifact_ids: &[String],
        step: i64,
    ) -> crate::store::StoreResult<()> {
        sqlx::query(
            "UPDATE artifacts a SET step = $3 WHERE a.session_id = $1 AND a.sha256 = ANY($2) AND a.step = 0 \
             AND NOT EXISTS (SELECT 1 FROM artifacts b WHERE b.session_id = $1 AND b.sha256 = a.sha256 \
             AND b.step = $3)",
        )
        .bind(id)
        .bind(artifact_ids)
        .bind(step)
        .execute(&mut *conn)
        .await?;
        let linked: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT sha256 FROM artifacts WHERE session_id = $1 AND step = $3 \
             AND sha256 = ANY($2)",
        )
        .bind(id)
        .bind(artifact_ids)
        .bind(step)
        .fetch_all(&mut *conn)
        .await?;
        match artifact_ids.iter().find(|sha| !linked.contains(sha)) {
            Some(missing) => Err(crate::store::StoreError::FailedPrecondition(format!(
                "artifact {missing} was not put for session {id}"
            ))),
            None => Ok(()),
        }
    }

    /// Locks the session row for the transaction.
    pub(super) const LOCK_SESSION: &str = "SELECT * FROM sessions WHERE id = $1 FOR UPDATE";

    /// Locks the session row and reads what recording step $2 of round $3 needs to check.
    pub(super) const LOCK_FOR_STEP: &str = "SELECT s.status, s.lease_owner, st.content_hash, \
        r.status AS round_status FROM sessions s \
        LEFT JOIN steps st ON st.session_id = s.id AND st.step = $2 \
        LEFT JOIN rounds r ON r.session_id = s.id AND r.number = $3 \
        WHERE s.id = $1 FOR UPDATE OF s";

    /// The oldest claimable session at time $1; rows other claimers hold are skipped, not waited for.
    pub(super) const CLAIM_CANDIDATE: &str = "SELECT id, lease_owner FROM sessions \
        WHERE (status = 'queued' AND NOT cancel_requested) \
        OR (status IN ('running', 'waiting') AND (lease_expires_at IS NULL OR lease_expires_at < $1)) \
        ORDER BY queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED";

    /// Allocates $2 sequence numbers, adds totals and notifies every replica on commit.
    pub(super) const BUMP_SESSION: &str = "UPDATE sessions SET last_seq = last_seq + $2, \
        steps = steps + $3, cost = cost + $4, input_tokens = input_tokens + $5, \
        output_tokens = output_tokens + $6, updated_at = $7 WHERE id = $1 \
        RETURNING last_seq, pg_notify('ufo_session_events', id::text || ':' || last_seq::text)::text AS notified";

    /// A checked step in one statement (one round trip instead of six): step row, memory item, blackboard
    /// entries (indices continue each kind), round count, sequence bump with totals and notification, and
    /// the events. Data-modifying CTEs all run, referenced or not, against the same snapshot; the session
    /// row is locked by the caller, so the MAX(idx) reads cannot race.
    const WRITE_STEP: &str = "WITH step_row AS ( \
          INSERT INTO steps (session_id, step, round, round_step, agent_name, agent_kind, state_before, \
            state_after, subtask, observation, thought, plan, comment, status, actions, phases, cost, \
            input_tokens, output_tokens, started_at, finished_at, extra, content_hash, recorded_at) \
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
            $20, $21, $22, $23, $24)), \
        memory AS (INSERT INTO memory_items (session_id, step, agent_name, item) VALUES ($1, $2, $5, $25)), \
        board AS (INSERT INTO blackboard (session_id, kind, idx, value, artifact_id, step, created_at) \
          SELECT $1, b.kind, COALESCE((SELECT MAX(x.idx) FROM blackboard x \
              WHERE x.session_id = $1 AND x.kind = b.kind), -1) \
            + row_number() OVER (PARTITION BY b.kind ORDER BY b.ord), b.value, b.artifact_id, $2, $24 \
          FROM unnest($26::text[], $27::jsonb[], $28::text[]) WITH ORDINALITY AS b(kind, value, artifact_id, ord) \
          RETURNING kind, idx, value, artifact_id), \
        round_count AS (UPDATE rounds SET steps = steps + 1 WHERE session_id = $1 AND number = $3), \
        bump AS (UPDATE sessions SET last_seq = last_seq + cardinality($29::text[]), steps = steps + 1, \
            cost = cost + $17, input_tokens = input_tokens + $18, output_tokens = output_tokens + $19, \
            updated_at = $24 WHERE id = $1 \
          RETURNING last_seq, pg_notify('ufo_session_events', id::text || ':' || last_seq::text)::text AS notified), \
        event_rows AS (INSERT INTO events (session_id, seq, kind, payload, step, round, created_at) \
          SELECT $1, bump.last_seq - cardinality($29::text[]) + e.ord, e.kind, e.payload, e.step, e.round, $24 \
          FROM bump, unnest($29::text[], $30::jsonb[], $31::bigint[], $32::bigint[]) \
            WITH ORDINALITY AS e(kind, payload, step, round, ord)) \
        SELECT bump.last_seq, (SELECT COALESCE(jsonb_agg(jsonb_build_array(b.kind, b.idx, b.value, \
          b.artifact_id) ORDER BY b.kind, b.idx), '[]'::jsonb) FROM board b) AS board FROM bump";

    pub(super) async fn write_step(
        conn: &mut sqlx::PgConnection,
        write: &super::sql::StepWrite<'_>,
    ) -> crate::store::StoreResult<(u64, Vec<ufo_proto::v1::BlackboardEntry>)> {
        use crate::store::DbEnum as _;
        use serde_json::json;
        use sqlx::types::Json;

        let record = write.record;
        let s = &record.step;
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let ts = |t: &Option<prost_types::Timestamp>| {
            t.as_ref().and_then(|t| {
                chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
            })
        };
        let mut events = record.events.clone();
        events.push(write.finished_event());
        let (last_seq, board): (i64, Json<serde_json::Value>) = sqlx::query_as(WRITE_STEP)
            .bind(record.session_id)
            .bind(int(s.step))
            .bind(i64::from(s.round))
            .bind(i64::from(s.round_step))
            .bind(&s.agent_name)
            .bind(&write.kind)
            .bind(&s.state_before)
            .bind(&s.state_after)
            .bind(&s.subtask)
            .bind(&s.observation)
            .bind(&s.thought)
            .bind(Json(json!(s.plan)))
            .bind(&s.comment)
            .bind(&s.status)
            .bind(Json(write.actions))
            .bind(Json(crate::store::step_json::phases_to_json(&s.phases)))
            .bind(s.cost)
            .bind(int(s.input_tokens))
            .bind(int(s.output_tokens))
            .bind(ts(&s.started_at))
            .bind(ts(&s.finished_at))
            .bind(Json(ufo_proto::json::from_optional_struct(s.extra.clone())))
            .bind(record.content_hash.as_slice())
            .bind(write.at)
            .bind(Json(&record.memory_item))
            .bind(
                record
                    .blackboard
                    .iter()
                    .map(|b| b.kind.db())
                    .collect::<Vec<_>>(),
            )
            .bind(
                record
                    .blackboard
                    .iter()
                    .map(|b| Json(b.value.clone()))
                    .collect::<Vec<_>>(),
            )
            .bind(
                record
                    .blackboard
                    .iter()
                    .map(|b| b.artifact_id.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(events.iter().map(|e| e.kind.db()).collect::<Vec<_>>())
            .bind(
                events
                    .iter()
                    .map(|e| Json(e.payload.clone()))
                    .collect::<Vec<_>>(),
            )
            .bind(events.iter().map(|e| int(e.step)).collect::<Vec<_>>())
            .bind(
                events
                    .iter()
                    .map(|e| i64::from(e.round))
                    .collect::<Vec<_>>(),
            )
            .fetch_one(&mut *conn)
            .await?;
        let created_at = Some(prost_types::Timestamp {
            seconds: write.at.timestamp(),
            nanos: i32::try_from(write.at.timestamp_subsec_nanos()).unwrap_or(0),
        });
        let board = board
            .0
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|row| {
                let text = row[0].as_str().unwrap_or_default();
                let kind = ufo_proto::v1::BlackboardKind::from_db(text).ok_or_else(|| {
                    crate::store::StoreError::Corrupt(format!("blackboard kind {text:?}"))
                })?;
                Ok(ufo_proto::v1::BlackboardEntry {
                    kind: kind.into(),
                    index: row[1].as_u64().unwrap_or_default(),
                    value: match &row[2] {
                        serde_json::Value::Object(map) => {
                            Some(ufo_proto::json::object_to_struct(map.clone()))
                        }
                        _ => None,
                    },
                    artifact_id: row[3].as_str().unwrap_or_default().to_owned(),
                    step: s.step,
                    created_at,
                })
            })
            .collect::<crate::store::StoreResult<Vec<_>>>()?;
        Ok((u64::try_from(last_seq).unwrap_or(0), board))
    }
}

/// How to connect to Postgres.
#[derive(Debug, Clone, Copy)]
pub struct PgOptions {
    /// Pool size.
    pub max_connections: u32,
    /// Commit without waiting for the WAL flush (`synchronous_commit = off`): several times faster on
    /// slow disks, but a database crash can lose the last few hundred milliseconds of commits.
    pub async_commit: bool,
}

/// Connects to Postgres, runs the migrations and starts the notification listener.
pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
    let mut connect = PgConnectOptions::from_str(url)?;
    if options.async_commit {
        connect = connect.options([("synchronous_commit", "off")]);
    }
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections)
        .connect_with(connect)
        .await?;
    MIGRATOR.run(&pool).await?;
    from_pool(pool).await
}

/// A store on an existing, migrated pool (tests use the pool `#[sqlx::test]` gives them).
pub async fn from_pool(pool: sqlx::PgPool) -> Result<PgStore, StoreError> {
    let notifier = Notifier::new();
    let listener = listen(&pool).await?;
    let background = tokio::spawn(
        forward(pool.clone(), listener, Arc::clone(&notifier))
            .instrument(tracing::info_span!("store.pg_listener")),
    );
    Ok(sql::SqlStore {
        write: pool.clone(),
        read: pool,
        notifier,
        background: Some(background),
    })
}

async fn listen(pool: &sqlx::PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Forwards notifications to local watchers. When the connection drops, notifications may have been lost,
/// so after listening again every watcher is woken to re-read from its last sequence number.
async fn forward(pool: sqlx::PgPool, mut listener: PgListener, notifier: Arc<Notifier>) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                if let Some((id, seq)) = notification.payload().split_once(':')
                    && let (Ok(id), Ok(seq)) = (id.parse(), seq.parse())
                {
                    notifier.notify(id, seq);
                }
            }
            Ok(None) | Err(_) => {
                tracing::warn!("event listener lost its connection; reconnecting");
                listener = loop {
                    match listen(&pool).await {
                        Ok(fresh) => break fresh,
                        Err(error) => {
                            tracing::warn!(%error, "event listener cannot reconnect yet");
                            // Back off between attempts while the database is unreachable.
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                };
                notifier.wake_all();
            }
        }
    }
}
