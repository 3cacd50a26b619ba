//! The Postgres store: the production backend.
//!
//! Watchers in any replica wake through `LISTEN/NOTIFY`: the statement that allocates sequence numbers
//! also calls `pg_notify('ufo_session_events', '<session>:<last_seq>')`, which Postgres delivers on commit;
//! one listener connection per process fans notifications out to the local [`Notifier`]. Writes in this
//! process also notify locally right after commit, so local watchers do not wait for the round trip.
//!
//! Besides connecting and listening, this module holds what Postgres does its own way: row locks, the
//! claim query that skips rows other replicas hold, and one-statement writes of events and
//! (through the group-commit queue of `batch`) steps. The rest is the shared SQL of `sql/`.

use std::sync::Arc;
use std::time::Duration;

use std::str::FromStr as _;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tracing::Instrument as _;

use crate::store::sql::{Backend, Recorded, SqlStore, StepWrite};
use crate::store::{Notifier, StoreError};

mod batch;
pub use batch::StepBatching;
pub(crate) use batch::StepWriter;

/// The notification channel of committed events.
pub const CHANNEL: &str = "ufo_session_events";

/// Embedded Postgres migrations (`migrations/` at the repository root).
pub static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> =
    std::sync::LazyLock::new(|| crate::store::migrate::embedded(crate::store::migrate::POSTGRES));

/// Which of a JSON array of hex SHA-256 have an artifact_blobs row (the blob sweeper's check).
pub(crate) const REFERENCED_BLOBS: &str = "SELECT sha256 FROM artifact_blobs \
    WHERE sha256 IN (SELECT jsonb_array_elements_text($1))";

/// Appends events in one statement (one round trip, no explicit transaction): the lease check, the
/// sequence bump that notifies every replica on commit, and the insert.
const APPEND_EVENTS: &str = "WITH s AS (UPDATE sessions SET last_seq = last_seq + $2, updated_at = $3 \
      WHERE id = $1 AND ($4::text IS NULL OR lease_owner = $4) \
      RETURNING id, last_seq, \
      pg_notify('ufo_session_events', id::text || ':' || last_seq::text)::text AS notified), \
    e AS (INSERT INTO events (session_id, seq, kind, payload, step, round, created_at) \
      SELECT s.id, s.last_seq - $2 + x.n, x.kind, x.payload, x.step, x.round, $3 FROM s, \
      unnest($5::text[], $6::jsonb[], $7::bigint[], $8::bigint[]) \
      WITH ORDINALITY AS x(kind, payload, step, round, n)) \
    SELECT last_seq, notified FROM s";

/// Appends `events` to session `id`; returns the newest sequence number. Only when no row was
/// updated does a second read tell a missing session from a lease that is not the caller's.
pub(crate) async fn append_events(
    pool: &sqlx::PgPool,
    id: uuid::Uuid,
    events: &[crate::store::NewEvent],
    lease_owner: Option<&str>,
    at: chrono::DateTime<chrono::Utc>,
) -> crate::store::StoreResult<i64> {
    use crate::store::{DbEnum as _, StoreError};

    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let kinds: Vec<String> = events.iter().map(|e| e.kind.db()).collect();
    let payloads: Vec<sqlx::types::Json<&serde_json::Value>> = events
        .iter()
        .map(|e| sqlx::types::Json(&e.payload))
        .collect();
    let steps: Vec<i64> = events
        .iter()
        .map(|e| i64::try_from(e.step).unwrap_or(i64::MAX))
        .collect();
    let rounds: Vec<i64> = events.iter().map(|e| i64::from(e.round)).collect();
    let appended: Option<(i64, Option<String>)> = sqlx::query_as(APPEND_EVENTS)
        .bind(id)
        .bind(count)
        .bind(at)
        .bind(lease_owner)
        .bind(kinds)
        .bind(payloads)
        .bind(steps)
        .bind(rounds)
        .fetch_optional(pool)
        .await?;
    if let Some((last_seq, _)) = appended {
        return Ok(last_seq);
    }
    let exists: Option<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM sessions WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Err(match exists {
        None => StoreError::NotFound(format!("session {id}")),
        Some(_) => StoreError::LeaseLost(id.to_string()),
    })
}

/// Locks the session row for the transaction.
pub(crate) const LOCK_SESSION: &str = "SELECT * FROM sessions WHERE id = $1 FOR UPDATE";

/// The DIRECT sessions whose agent went away at time $1: a lease that expired, or (from an agent of
/// before direct leases) none and no change since $3 when $3 is given; oldest first, at most $2, rows other callers hold skipped.
pub(crate) const EXPIRED_DIRECT: &str = "SELECT id, lease_owner, lease_expires_at, steps FROM sessions \
    WHERE kind = 'direct' AND status IN ('running', 'waiting') \
    AND ((lease_expires_at IS NOT NULL AND lease_expires_at < $1) \
        OR (lease_expires_at IS NULL AND $3 IS NOT NULL AND updated_at < $3)) \
    ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED";

/// The claim, and the hand-over (a check-in, then the claim), as one statement: `ufo_claim` of migration
/// 0045 (its header states the rules, those of the embedded store's claim in `sql/queue.rs`). $1 the
/// claim's time, $2 the lease's end, $3 the worker, $4 the desktops it reaches (a JSON array, or JSON
/// null for any), $5 whether to start the task, $6 how many candidates to look at, then the check-in:
/// $7 the desktop, $8 its session, $9 the broken reason (all NULL for a plain claim). It commits on its
/// own; no row means the check-in's fence refused it.
pub(crate) const CLAIM: &str = "SELECT * FROM ufo_claim($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Allocates $2 sequence numbers, adds totals and notifies every replica on commit.
pub(crate) const BUMP_SESSION: &str = "UPDATE sessions SET last_seq = last_seq + $2, \
    steps = steps + $3, cost = cost + $4, input_tokens = input_tokens + $5, \
    output_tokens = output_tokens + $6, updated_at = $7 WHERE id = $1 \
    RETURNING last_seq, pg_notify('ufo_session_events', id::text || ':' || last_seq::text)::text AS notified";

/// Records a step through the group-commit queue (see `batch`): the stored functions of migrations
/// 0003 and 0004 check, lock and write (see 0003's header for the outcomes).
pub(crate) async fn record_step(
    steps: &StepWriter,
    write: &StepWrite<'_>,
) -> crate::store::StoreResult<Recorded> {
    use crate::store::{DbEnum as _, StoreError};

    let record = write.record;
    let s = &record.step;
    let id = record.session_id;
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let ts = |t: &Option<prost_types::Timestamp>| {
        t.as_ref().and_then(|t| {
            chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
        })
    };
    let events = record
        .events
        .iter()
        .chain(std::iter::once(&write.finished_event()))
        .map(|e| {
            (
                e.kind.db(),
                e.payload.clone(),
                int(e.step),
                i64::from(e.round),
            )
        })
        .collect();
    let pending = batch::PendingStep {
        session: id,
        step: int(s.step),
        round: i64::from(s.round),
        round_step: i64::from(s.round_step),
        agent_name: s.agent_name.clone(),
        agent_kind: write.kind.clone(),
        state_before: s.state_before.clone(),
        state_after: s.state_after.clone(),
        subtask: s.subtask.clone(),
        observation: s.observation.clone(),
        thought: s.thought.clone(),
        plan: serde_json::json!(s.plan),
        comment: s.comment.clone(),
        status: s.status.clone(),
        actions: write.actions.clone(),
        phases: crate::store::step_json::phases_to_json(&s.phases),
        cost: s.cost,
        input_tokens: int(s.input_tokens),
        output_tokens: int(s.output_tokens),
        started_at: ts(&s.started_at),
        finished_at: ts(&s.finished_at),
        extra: ufo_proto::json::from_optional_struct(s.extra.clone()),
        content_hash: record.content_hash,
        at: write.at,
        memory: record.memory_item.clone(),
        lease_owner: record.lease_owner.clone(),
        board: record
            .blackboard
            .iter()
            .map(|b| (b.kind.db(), b.value.clone(), b.artifact_id.clone()))
            .collect(),
        events,
        artifacts: record.artifacts.clone(),
    };
    let (outcome, detail, last_seq, board, artifacts) = steps.record(pending).await?;
    let detail = detail.unwrap_or_default();
    match outcome.as_str() {
        "written" => Ok(Recorded::New {
            last_seq: u64::try_from(last_seq.unwrap_or(0)).unwrap_or(0),
            board: board_of(write, board.map(|b| b.0))?,
            artifacts: artifacts_of(write, artifacts.map(|a| a.0))?,
        }),
        "duplicate" => Ok(Recorded::Duplicate),
        "conflict" => Err(StoreError::AlreadyExists(format!(
            "step {} of session {id} was recorded with different content",
            s.step
        ))),
        "no_session" => Err(StoreError::NotFound(format!("session {id}"))),
        "lease_lost" => Err(StoreError::LeaseLost(id.to_string())),
        "ended" => Err(StoreError::FailedPrecondition(format!(
            "session {id} has ended ({detail})"
        ))),
        "no_round" => Err(StoreError::NotFound(format!(
            "round {} of session {id}",
            s.round
        ))),
        "round_not_running" => Err(StoreError::FailedPrecondition(format!(
            "round {} of session {id} is {detail}, not running",
            s.round
        ))),
        other => Err(StoreError::Corrupt(format!(
            "ufo_record_step returned {other:?}"
        ))),
    }
}

/// The blackboard entries `ufo_record_step` wrote: `[kind, idx, value, artifact_id]` rows.
fn board_of(
    write: &StepWrite<'_>,
    rows: Option<serde_json::Value>,
) -> crate::store::StoreResult<Vec<ufo_proto::v1::BlackboardEntry>> {
    use crate::store::DbEnum as _;
    let created_at = Some(prost_types::Timestamp {
        seconds: write.at.timestamp(),
        nanos: i32::try_from(write.at.timestamp_subsec_nanos()).unwrap_or(0),
    });
    rows_of(rows)
        .iter()
        .map(|row| {
            let text = row[0].as_str().unwrap_or_default();
            let kind = ufo_proto::v1::BlackboardKind::from_db(text).ok_or_else(|| {
                crate::store::StoreError::Corrupt(format!("blackboard kind {text:?}"))
            })?;
            Ok(ufo_proto::v1::BlackboardEntry {
                kind: kind.into(),
                index: row[1].as_u64().unwrap_or_default(),
                value: struct_of(&row[2]),
                artifact_id: row[3].as_str().unwrap_or_default().to_owned(),
                step: write.record.step.step,
                created_at,
            })
        })
        .collect()
}

/// The step's artifact references `ufo_record_step` returned: `[kind, sha256, content_type, metadata,
/// size]` rows.
fn artifacts_of(
    write: &StepWrite<'_>,
    rows: Option<serde_json::Value>,
) -> crate::store::StoreResult<Vec<ufo_proto::v1::ArtifactRef>> {
    use crate::store::DbEnum as _;
    rows_of(rows)
        .iter()
        .map(|row| {
            let text = row[0].as_str().unwrap_or_default();
            let kind = ufo_proto::v1::ArtifactKind::from_db(text).ok_or_else(|| {
                crate::store::StoreError::Corrupt(format!("artifact kind {text:?}"))
            })?;
            Ok(ufo_proto::v1::ArtifactRef {
                id: row[1].as_str().unwrap_or_default().to_owned(),
                session_id: write.record.session_id.to_string(),
                step: write.record.step.step,
                kind: kind.into(),
                content_type: row[2].as_str().unwrap_or_default().to_owned(),
                size: row[4].as_u64().unwrap_or_default(),
                metadata: struct_of(&row[3]),
            })
        })
        .collect()
}

fn rows_of(rows: Option<serde_json::Value>) -> Vec<serde_json::Value> {
    match rows {
        Some(serde_json::Value::Array(rows)) => rows,
        _ => Vec::new(),
    }
}

fn struct_of(value: &serde_json::Value) -> Option<prost_types::Struct> {
    match value {
        serde_json::Value::Object(map) => Some(ufo_proto::json::object_to_struct(map.clone())),
        _ => None,
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
    /// Longest wait for a pooled connection (sqlx's default is 30 s): past it a call is UNAVAILABLE.
    pub acquire_timeout: std::time::Duration,
    /// Group commit of recorded steps.
    pub batching: StepBatching,
}

/// Connects to Postgres, runs the migrations (moving bytes rows still carry into `blobs`,
/// [`crate::store::migrate`]) and starts the notification listener.
pub async fn connect(
    url: &str,
    options: PgOptions,
    blobs: &dyn crate::blob::BlobStore,
) -> Result<SqlStore, StoreError> {
    let mut connect = PgConnectOptions::from_str(url)?;
    if options.async_commit {
        connect = connect.options([("synchronous_commit", "off")]);
    }
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections)
        // No ping round trip before every use of a pooled connection: a broken connection fails the call
        // with an error (retried by the caller, e.g. the runner) and is then discarded by the pool.
        .test_before_acquire(false)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(connect)
        .await?;
    crate::store::migrate::run_postgres(&MIGRATOR, &pool, blobs).await?;
    from_pool(pool, options.batching).await
}

/// A store on an existing, migrated pool (tests use the pool `#[sqlx::test]` gives them).
pub async fn from_pool(pool: sqlx::PgPool, batching: StepBatching) -> Result<SqlStore, StoreError> {
    let notifier = Notifier::new();
    let listener = listen(&pool).await?;
    let background = tokio::spawn(
        forward(pool.clone(), listener, Arc::clone(&notifier))
            .instrument(tracing::info_span!("store.pg_listener")),
    );
    Ok(SqlStore {
        backend: Backend::Postgres {
            steps: StepWriter::start(pool.clone(), batching),
            pool,
        },
        notifier,
        background: Some(background),
        knowledge: Default::default(),
    })
}

async fn listen(pool: &sqlx::PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([CHANNEL, crate::store::sql::POOL_CHANNEL])
        .await?;
    Ok(listener)
}

/// Forwards notifications to local watchers. When the connection drops, notifications may have been lost,
/// so after listening again every watcher is woken to re-read from its last sequence number.
async fn forward(pool: sqlx::PgPool, mut listener: PgListener, notifier: Arc<Notifier>) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) if notification.channel() == crate::store::sql::POOL_CHANNEL => {
                notifier.notify_pool();
            }
            Ok(Some(notification)) => {
                if let Some((id, seq)) = notification.payload().split_once(':')
                    && let (Ok(id), Ok(seq)) = (id.parse(), seq.parse())
                {
                    notifier.notify_heard(id, seq);
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

#[cfg(test)]
mod tests {
    use ufo_proto::v1::{EventKind, RoundStatus};

    use crate::store::DbEnum as _;

    /// `ufo_claim` writes event kinds and reads round statuses by their stored names: they must be the
    /// names the store gives them (a renamed kind would otherwise be written as text no reader knows).
    #[test]
    fn the_claim_function_uses_the_stored_names_of_kinds_and_statuses() {
        let sql = include_str!("../../../../../migrations/0045_claim_function.sql");
        let names = [
            EventKind::TaskClaimed.db(),
            EventKind::RoundStarted.db(),
            EventKind::TaskReleased.db(),
            EventKind::StepStarted.db(),
            RoundStatus::Pending.db(),
            RoundStatus::Running.db(),
        ];
        for name in names {
            assert!(
                sql.contains(&format!("'{name}'")),
                "0045_claim_function.sql does not name {name:?}"
            );
        }
    }
}
