//! The embedded SQLite store: the zero-setup default (one local file).
//!
//! SQLite allows one writer at a time, so writes go through a pool of exactly one connection (no
//! "database is locked" lock upgrades) while reads use a separate pool in WAL mode and never wait for the
//! writer. Watchers of this process wake through the in-process [`Notifier`] after each commit.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::store::{Notifier, StoreError};

type Db = sqlx::Sqlite;

// The shared SQL is compiled once per backend on purpose (see `sql/mod.rs`).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

/// The SQLite implementation of [`Store`](crate::store::Store).
pub type SqliteStore = sql::SqlStore;

/// Embedded SQLite migrations (`services/session/migrations_sqlite/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations_sqlite");

mod dialect {
    pub(super) const NAME: &str = "sqlite";

    /// Steps are written by the single writer connection, one transaction each.
    pub(crate) struct StepWriter;

    /// Stores an artifact in a transaction of several statements.
    pub(super) async fn put_artifact(
        write: &sqlx::SqlitePool,
        artifact: &crate::store::NewArtifact,
        sha256: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> crate::store::StoreResult<ufo_proto::v1::ArtifactRef> {
        super::sql::put_artifact_statements(write, artifact, sha256, at).await
    }

    /// Which of a JSON array of hex SHA-256 have an artifact_blobs row (the blob sweeper's check).
    pub(super) const REFERENCED_BLOBS: &str =
        "SELECT sha256 FROM artifact_blobs WHERE sha256 IN (SELECT value FROM json_each($1))";

    /// The single writer connection already serialises transactions: no row lock needed.
    pub(super) const LOCK_SESSION: &str = "SELECT * FROM sessions WHERE id = $1";

    pub(super) const CLAIM_CANDIDATE: &str = "SELECT id, lease_owner FROM sessions \
        WHERE (status = 'queued' AND NOT cancel_requested) \
        OR (status IN ('running', 'waiting') AND (lease_expires_at IS NULL OR lease_expires_at < $1)) \
        ORDER BY queued_at, id LIMIT 1";

    pub(super) const BUMP_SESSION: &str = "UPDATE sessions SET last_seq = last_seq + $2, \
        steps = steps + $3, cost = cost + $4, input_tokens = input_tokens + $5, \
        output_tokens = output_tokens + $6, updated_at = $7 WHERE id = $1 RETURNING last_seq";

    /// Events are appended in a transaction of several statements (in-process calls here).
    pub(super) async fn append_events(
        store: &super::sql::SqlStore,
        id: uuid::Uuid,
        events: &[crate::store::NewEvent],
        lease_owner: Option<&str>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> crate::store::StoreResult<i64> {
        store
            .append_events_statements(id, events, lease_owner, at)
            .await
    }

    /// Statements are in-process calls here, so the step is written in a transaction one statement at a
    /// time.
    pub(super) async fn record_step(
        store: &super::sql::SqlStore,
        write: &super::sql::StepWrite<'_>,
    ) -> crate::store::StoreResult<super::sql::Recorded> {
        store.record_step_statements(write).await
    }
}

/// Opens (creating if needed) the SQLite file at `path`, runs the migrations.
pub async fn open(path: &Path, read_connections: u32) -> Result<SqliteStore, StoreError> {
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10));
    let write = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await?;
    MIGRATOR.run(&write).await?;
    let read = SqlitePoolOptions::new()
        .max_connections(read_connections.max(1))
        .connect_with(options.read_only(true))
        .await?;
    Ok(sql::SqlStore {
        steps: dialect::StepWriter,
        write,
        read,
        notifier: Notifier::new(),
        background: None,
    })
}
