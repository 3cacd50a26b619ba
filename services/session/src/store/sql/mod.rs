//! The store's SQL, written once for both databases.
//!
//! The SQL is the common subset of Postgres and SQLite (`$n` placeholders, `RETURNING`, `ON CONFLICT`) and
//! runs through [`db`]'s enums, which bind the same Rust values to either database's native query. What
//! truly differs stays with its backend: `postgres/` (row locking, the claim query, the sequence bump that
//! notifies other replicas, one-statement artifact and event writes, the group-commit step writer) and
//! `sqlite/` (opening the file, its statements); this module picks them by [`db::Dialect`].
//!
//! Layout: [`store_impl`] (the `Store` trait, delegating), `sessions` (sessions and rounds), `queue`
//! (claim/renew/release), `desktops` (the desktop pool, checked out inside the claim), `steps` (record/read steps and memory; SQLite's statement-by-statement record),
//! `board` (blackboard, artifacts), `knowledge` (documents, experiences, full-text search), `events` (sequence allocation, append, read), `prune` (retention),
//! `rows` (row → protobuf), [`db`] (the two databases behind one API).

mod board;
pub(crate) mod db;
mod desktops;
pub use desktops::POOL_CHANNEL;
mod events;
mod knowledge;

pub use knowledge::IndexOptions;
mod prune;
mod queue;
mod rows;
mod sessions;
mod steps;
mod store_impl;

pub(crate) use steps::{Recorded, StepWrite};

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::store::postgres::StepWriter;
use crate::store::{Notifier, StoreError, StoreResult};
use db::{AsConn as _, Dialect, On, PoolConn, Query, Row, Tx};

/// The database a [`SqlStore`] runs on, with what only that database has.
pub(crate) enum Backend {
    /// One pool for reads and writes; steps go through the group-commit queue.
    Postgres {
        pool: sqlx::PgPool,
        steps: StepWriter,
    },
    /// A single writer connection (SQLite allows one writer at a time) and a set of readers.
    Sqlite {
        write: Arc<crate::store::sqlite::lend::Connections>,
        read: Arc<crate::store::sqlite::lend::Connections>,
    },
}

/// The SQL store: Postgres (`postgres::connect`) or SQLite (`sqlite::open`).
pub struct SqlStore {
    /// The database and its pools.
    pub(crate) backend: Backend,
    /// Wakes this process's watchers.
    pub(crate) notifier: Arc<Notifier>,
    /// Background work owned by the store (the Postgres listener), stopped when the store is dropped.
    pub(crate) background: Option<tokio::task::JoinHandle<()>>,
    /// The knowledge rows' in-memory retrieval index (a cache of the rows; `knowledge.rs`).
    pub(crate) knowledge: knowledge::IndexCache,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &self.dialect().name())
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

impl SqlStore {
    /// Which database this store runs on.
    pub(crate) fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::Postgres { .. } => Dialect::Postgres,
            Backend::Sqlite { .. } => Dialect::Sqlite,
        }
    }

    /// Where writes outside a transaction run.
    fn write(&self) -> On<'_> {
        match &self.backend {
            Backend::Postgres { pool, .. } => On::PostgresPool(pool),
            Backend::Sqlite { write, .. } => On::SqlitePool(write),
        }
    }

    /// Where plain reads run.
    fn read(&self) -> On<'_> {
        match &self.backend {
            Backend::Postgres { pool, .. } => On::PostgresPool(pool),
            Backend::Sqlite { read, .. } => On::SqlitePool(read),
        }
    }

    /// Begins a write transaction.
    async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Ok(match &self.backend {
            Backend::Postgres { pool, .. } => Tx::Postgres(pool.begin().await?),
            Backend::Sqlite { write, .. } => Tx::Sqlite(
                crate::store::sqlite::lend::WriteTx::begin(write.lend().await?),
            ),
        })
    }

    /// Begins a write transaction with `first` as its first statement; returns the transaction and
    /// `first`'s rows (on failure, rolled back).
    async fn begin_with(&self, first: Query<'_>) -> Result<(Tx, Vec<Row>), sqlx::Error> {
        let mut tx = self.begin().await?;
        match first.fetch_all(tx.conn()).await {
            Ok(rows) => Ok((tx, rows)),
            Err(error) => {
                tx.abandon().await;
                Err(error)
            }
        }
    }

    /// A read connection for several statements.
    async fn read_conn(&self) -> Result<PoolConn, sqlx::Error> {
        Ok(match &self.backend {
            Backend::Postgres { pool, .. } => PoolConn::Postgres(pool.acquire().await?),
            Backend::Sqlite { read, .. } => PoolConn::Sqlite(read.lend().await?),
        })
    }
}

/// Ends a write transaction: commits on success; on failure rolls back *before* returning, so the row
/// locks it took are released before the caller sees the error (a transaction merely dropped is rolled
/// back later, when its connection is next used, and would hold its locks until then).
async fn settle<T>(tx: Tx, outcome: StoreResult<T>) -> StoreResult<T> {
    match outcome {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(error) => {
            tx.abandon().await;
            Err(error)
        }
    }
}

/// Rows per multi-row insert. A request may carry up to `--max-batch` (at most 100,000) events or
/// artifacts; one statement binds at most 32,766 values on SQLite and 65,535 on Postgres, so larger
/// batches are inserted in statements of this many rows (7,000 values for events).
const ROWS_PER_INSERT: usize = 1_000;

/// `{head} ($1, .., $columns), ($columns+1, ..), .. {tail}`: a multi-row insert of `rows` rows.
fn values_sql(head: &str, columns: usize, rows: usize, tail: &str) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * columns * 6);
    sql.push_str(head);
    for row in 0..rows {
        sql.push_str(if row == 0 { " (" } else { ", (" });
        for column in 1..=columns {
            if column > 1 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "${}", row * columns + column);
        }
        sql.push(')');
    }
    if !tail.is_empty() {
        sql.push(' ');
        sql.push_str(tail);
    }
    sql
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
