//! The embedded SQLite store: the zero-setup default (one local file).
//!
//! SQLite allows one writer at a time, so writes go through exactly one connection (no "database is
//! locked" lock upgrades) while reads use separate connections in WAL mode and never wait for the writer.
//! Both are lent by [`lend`], not by sqlx's pool (which pings a connection at every return). Watchers of this process wake through the in-process [`Notifier`] after each commit. The
//! statements below are the ones SQLite needs in its own words; everything else is the shared SQL of
//! `sql/`, which also writes steps, artifacts and events statement by statement in one transaction here.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

pub(crate) mod lend;

use crate::store::sql::{Backend, SqlStore};
use crate::store::{Notifier, StoreError};

/// Embedded SQLite migrations (`services/session/migrations_sqlite/`).
pub static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> =
    std::sync::LazyLock::new(|| crate::store::migrate::embedded(crate::store::migrate::SQLITE));

/// Which of a JSON array of hex SHA-256 have an artifact_blobs row (the blob sweeper's check).
pub(crate) const REFERENCED_BLOBS: &str =
    "SELECT sha256 FROM artifact_blobs WHERE sha256 IN (SELECT value FROM json_each($1))";

/// The single writer connection already serialises transactions: no row lock needed.
pub(crate) const LOCK_SESSION: &str = "SELECT * FROM sessions WHERE id = $1";

/// The DIRECT sessions whose agent went away at time $1: a lease that expired, or (from an agent of
/// before direct leases) none and no change since $3 when $3 is given; oldest first, at most $2.
pub(crate) const EXPIRED_DIRECT: &str = "SELECT id, lease_owner, lease_expires_at, steps FROM sessions \
    WHERE kind = 'direct' AND status IN ('running', 'waiting') \
    AND ((lease_expires_at IS NOT NULL AND lease_expires_at < $1) \
        OR (lease_expires_at IS NULL AND $3 IS NOT NULL AND updated_at < $3)) \
    ORDER BY created_at, id LIMIT $2";

/// The claimable tasks (never a direct session) at time $1 in claim order, at most $2 (the claim takes the first one it can
/// give what it needs: a desktop for a session with a `desktop_want`).
pub(crate) const CLAIM_CANDIDATES: &str = "SELECT id, lease_owner, last_seq, desktop_want, desktop, status, waiting_for_desktop FROM sessions \
    WHERE kind = 'task' AND ((status = 'queued' AND NOT cancel_requested) \
    OR (status IN ('running', 'waiting') AND parked_for IS NULL \
        AND (lease_expires_at IS NULL OR lease_expires_at < $1)) \
    OR (status = 'waiting' AND parked_for IS NOT NULL AND parked_until < $1)) \
    ORDER BY queued_at, id LIMIT $2";

/// Allocates $2 sequence numbers and adds totals.
pub(crate) const BUMP_SESSION: &str = "UPDATE sessions SET last_seq = last_seq + $2, \
    steps = steps + $3, cost = cost + $4, input_tokens = input_tokens + $5, \
    output_tokens = output_tokens + $6, updated_at = $7 WHERE id = $1 RETURNING last_seq";

/// [`BUMP_SESSION`] only while worker $8 holds the lease: no row when it does not (or no such session).
pub(crate) const BUMP_SESSION_FENCED: &str = "UPDATE sessions SET last_seq = last_seq + $2, \
    steps = steps + $3, cost = cost + $4, input_tokens = input_tokens + $5, \
    output_tokens = output_tokens + $6, updated_at = $7 WHERE id = $1 AND lease_owner = $8 \
    RETURNING last_seq";

/// Opens (creating if needed) the SQLite file at `path`, runs the migrations (moving bytes rows still
/// carry into `blobs`, [`crate::store::migrate`]).
pub async fn open(
    path: &Path,
    read_connections: u32,
    blobs: &dyn crate::blob::BlobStore,
) -> Result<SqlStore, StoreError> {
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10));
    let migrating = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await?;
    crate::store::migrate::run_sqlite(&MIGRATOR, &migrating, blobs).await?;
    migrating.close().await;
    let write = lend::Connections::new(options.clone(), 1);
    let read = lend::Connections::new(options.read_only(true), read_connections);
    // Open the writer now: a file that cannot be written fails the start, not the first call.
    drop(write.lend().await?);
    Ok(SqlStore {
        backend: Backend::Sqlite { write, read },
        notifier: Notifier::new(),
        background: None,
        knowledge: Default::default(),
    })
}
