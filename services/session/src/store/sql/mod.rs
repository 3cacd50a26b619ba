//! The store's SQL, written once and compiled once per backend.
//!
//! `postgres/mod.rs` and `sqlite/mod.rs` each include this module with `#[path]` after defining `Db` (the
//! sqlx database type) and a `dialect` module (row locking, the claim query, the sequence bump that notifies
//! other replicas). Writing the SQL against a concrete `Db` this way avoids sqlx's generic-executor bounds;
//! the SQL itself is the common subset of both databases (`$n` placeholders, `RETURNING`, `ON CONFLICT`).
//!
//! Layout: [`store_impl`] (the `Store` trait, delegating), `sessions` (sessions and rounds), `queue`
//! (claim/renew/release), `steps` (record/read steps and memory), `board` (blackboard, artifacts),
//! `events` (sequence allocation, append, read), `rows` (row → protobuf).

mod board;
mod events;
mod prune;
mod queue;
mod rows;
mod sessions;
mod steps;
mod store_impl;

// The statement-by-statement paths are SQLite's; the Postgres copy of this module does not use them.
#[allow(unused_imports)]
pub(crate) use board::put_artifact_statements;
#[allow(unused_imports)]
pub(crate) use steps::{Recorded, StepWrite};

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Db, dialect};
use crate::store::{Notifier, StoreError, StoreResult};

/// A connection of this backend (a pooled one or a transaction's).
type Conn = <Db as sqlx::Database>::Connection;

/// The SQL store of this backend.
pub struct SqlStore {
    /// How steps reach the database (Postgres: a group-commit queue; SQLite: its writer connection).
    #[allow(dead_code)] // read by the Postgres dialect only
    pub(crate) steps: dialect::StepWriter,
    /// Pool for transactions (SQLite: a single connection, its only writer).
    pub(crate) write: sqlx::Pool<Db>,
    /// Pool for plain reads (Postgres: the same pool).
    pub(crate) read: sqlx::Pool<Db>,
    /// Wakes this process's watchers.
    pub(crate) notifier: Arc<Notifier>,
    /// Background work owned by the store (the Postgres listener), stopped when the store is dropped.
    pub(crate) background: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &dialect::NAME)
            .finish_non_exhaustive()
    }
}

impl Drop for SqlStore {
    fn drop(&mut self) {
        if let Some(task) = &self.background {
            task.abort();
        }
    }
}

/// Ends a write transaction: commits on success; on failure rolls back *before* returning, so the row
/// locks it took are released before the caller sees the error (a transaction merely dropped is rolled
/// back later, when its connection is next used, and would hold its locks until then).
async fn settle<T>(tx: sqlx::Transaction<'static, Db>, outcome: StoreResult<T>) -> StoreResult<T> {
    match outcome {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(error) => {
            if let Err(rollback) = tx.rollback().await {
                tracing::warn!(error = %rollback, "rollback failed; the connection is discarded");
            }
            Err(error)
        }
    }
}

/// The current time at the databases' common precision (microseconds), so values read back compare equal
/// and SQLite's text timestamps sort chronologically.
fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// A protobuf/API unsigned number as a database integer (validated inputs never exceed `i64::MAX`).
fn db_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A database integer as an API unsigned number (columns are checked non-negative).
fn api_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A database integer as an API `u32` (round numbers and counts).
fn api_u32(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The lease check shared by every fenced write: `wanted` must hold the lease when given.
fn check_lease(id: uuid::Uuid, stored: Option<&str>, wanted: Option<&str>) -> StoreResult<()> {
    match wanted {
        Some(worker) if stored != Some(worker) => Err(StoreError::LeaseLost(id.to_string())),
        _ => Ok(()),
    }
}
