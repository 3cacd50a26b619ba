//! The two databases behind one copy of the SQL: statements, bound values, rows, connections and
//! transactions of either Postgres or SQLite.
//!
//! The store's SQL is the common subset of both (`$n` placeholders, `RETURNING`, `ON CONFLICT`), so it is
//! written once against these small enums instead of against a generic sqlx database (whose executor and
//! encode bounds would have to be repeated on every function). A [`Query`] collects its values as plain
//! Rust types and binds them to the native sqlx query of the connection it runs on, so each database sees
//! exactly the types it saw before: `uuid`, `bigint`, `timestamptz`, `jsonb`, `bytea` for Postgres.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::types::Json;
use sqlx::{
    ColumnIndex, Decode, PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, Transaction,
    Type,
};

use crate::store::sqlite::lend::{Begin, Connections, Lent, WriteTx};
use uuid::Uuid;

/// Which database a connection talks to: picks the statements that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// The production backend.
    Postgres,
    /// The embedded backend.
    Sqlite,
}

impl Dialect {
    /// The database's name, for logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
        }
    }

    /// The statement written for this database.
    pub(crate) fn pick(self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self {
            Self::Postgres => postgres,
            Self::Sqlite => sqlite,
        }
    }
}

/// A value bound to a statement parameter. Every variant is nullable; `NULL` keeps its column type.
#[derive(Debug)]
pub(crate) enum Value<'q> {
    Uuid(Option<Uuid>),
    Int(Option<i64>),
    Float(f64),
    Bool(bool),
    Text(Option<Cow<'q, str>>),
    Time(Option<DateTime<Utc>>),
    Bytes(Option<&'q [u8]>),
    Json(Cow<'q, serde_json::Value>),
}

macro_rules! value_from {
    ($($t:ty => |$v:ident| $e:expr;)*) => {
        $(impl<'q> From<$t> for Value<'q> {
            fn from($v: $t) -> Self {
                $e
            }
        })*
    };
}

value_from! {
    Uuid => |v| Value::Uuid(Some(v));
    &'q Uuid => |v| Value::Uuid(Some(*v));
    Option<Uuid> => |v| Value::Uuid(v);
    i64 => |v| Value::Int(Some(v));
    Option<i64> => |v| Value::Int(v);
    f64 => |v| Value::Float(v);
    bool => |v| Value::Bool(v);
    &'q str => |v| Value::Text(Some(Cow::Borrowed(v)));
    &'q String => |v| Value::Text(Some(Cow::Borrowed(v.as_str())));
    String => |v| Value::Text(Some(Cow::Owned(v)));
    Option<&'q str> => |v| Value::Text(v.map(Cow::Borrowed));
    Option<String> => |v| Value::Text(v.map(Cow::Owned));
    DateTime<Utc> => |v| Value::Time(Some(v));
    Option<DateTime<Utc>> => |v| Value::Time(v);
    &'q [u8] => |v| Value::Bytes(Some(v));
    Option<&'q [u8]> => |v| Value::Bytes(v);
    Json<&'q serde_json::Value> => |v| Value::Json(Cow::Borrowed(v.0));
    Json<serde_json::Value> => |v| Value::Json(Cow::Owned(v.0));
}

type PgQuery<'a> = sqlx::query::Query<'a, Postgres, PgArguments>;
type SqliteQuery<'a> = sqlx::query::Query<'a, Sqlite, SqliteArguments<'a>>;

impl Value<'_> {
    fn bind_postgres<'a>(&'a self, q: PgQuery<'a>) -> PgQuery<'a> {
        match self {
            Value::Uuid(v) => q.bind(*v),
            Value::Int(v) => q.bind(*v),
            Value::Float(v) => q.bind(*v),
            Value::Bool(v) => q.bind(*v),
            Value::Text(v) => q.bind(v.as_deref()),
            Value::Time(v) => q.bind(*v),
            Value::Bytes(v) => q.bind(*v),
            Value::Json(v) => q.bind(Json(v.as_ref())),
        }
    }

    fn bind_sqlite<'a>(&'a self, q: SqliteQuery<'a>) -> SqliteQuery<'a> {
        match self {
            Value::Uuid(v) => q.bind(*v),
            Value::Int(v) => q.bind(*v),
            Value::Float(v) => q.bind(*v),
            Value::Bool(v) => q.bind(*v),
            Value::Text(v) => q.bind(v.as_deref()),
            Value::Time(v) => q.bind(*v),
            Value::Bytes(v) => q.bind(*v),
            Value::Json(v) => q.bind(Json(v.as_ref())),
        }
    }
}

/// A statement and its values, run on either database.
#[derive(Debug)]
pub(crate) struct Query<'q> {
    sql: Cow<'q, str>,
    values: Vec<Value<'q>>,
}

/// A statement with no values bound yet.
pub(crate) fn query(sql: &str) -> Query<'_> {
    Query {
        sql: Cow::Borrowed(sql),
        values: Vec::new(),
    }
}

/// Where a statement runs: a pool or one connection (a transaction's or a pooled one).
pub(crate) enum On<'e> {
    PostgresPool(&'e PgPool),
    Postgres(&'e mut PgConnection),
    /// A connection lent for this statement alone.
    SqlitePool(&'e Arc<Connections>),
    Sqlite(SqliteConn<'e>),
}

/// A SQLite connection borrowed for one command, with, for a transaction, whether its `BEGIN` is still
/// to be sent: the command then starts with it (see [`WriteTx`]).
pub(crate) struct SqliteConn<'c> {
    conn: &'c mut SqliteConnection,
    begin: Option<&'c mut Begin>,
}

impl<'c> SqliteConn<'c> {
    /// The connection, with no `BEGIN` to send.
    fn plain(conn: &'c mut SqliteConnection) -> Self {
        Self { conn, begin: None }
    }

    /// Whether this command must start with `BEGIN`.
    fn leads(&self) -> bool {
        self.begin.as_deref().is_some_and(|b| *b != Begin::Ran)
    }

    fn reborrow(&mut self) -> SqliteConn<'_> {
        SqliteConn {
            conn: self.conn,
            begin: self.begin.as_deref_mut(),
        }
    }
}

/// Runs `$q` (a sqlx query built for the database of `$on`) with the executor method `$method`, mapping a
/// row of either database with `$map`.
macro_rules! run {
    ($self:ident, $on:ident, $method:ident, $map:expr) => {
        match $on.into() {
            On::PostgresPool(pool) => $map($self.postgres().$method(pool).await?, Row::Postgres),
            On::Postgres(conn) => $map($self.postgres().$method(conn).await?, Row::Postgres),
            On::SqlitePool(set) => {
                let mut lent = set.lend().await?;
                let outcome = $self.sqlite().$method(lent.conn()).await;
                lent.note(&outcome);
                $map(outcome?, Row::Sqlite)
            }
            On::Sqlite(c) if c.leads() => $map(
                lead(c, &$self).await.and_then(|rows| $method(rows))?,
                Row::Sqlite,
            ),
            On::Sqlite(c) => $map($self.sqlite().$method(c.conn).await?, Row::Sqlite),
        }
    };
}

/// Runs `query` as the first statement of its transaction's first command, after `BEGIN`; returns its
/// rows and how many rows it changed.
async fn lead(c: SqliteConn<'_>, query: &Query<'_>) -> Result<(Vec<SqliteRow>, u64), sqlx::Error> {
    let mut results = run_sqlite(c, &[query]).await?;
    results
        .pop()
        .ok_or_else(|| sqlx::Error::Protocol("a statement returned no result".into()))
}

/// [`sqlx::Executor::fetch_one`] over [`lead`]'s rows.
fn fetch_one((rows, _): (Vec<SqliteRow>, u64)) -> Result<SqliteRow, sqlx::Error> {
    rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)
}

/// [`sqlx::Executor::fetch_optional`] over [`lead`]'s rows.
#[allow(clippy::unnecessary_wraps)]
fn fetch_optional((rows, _): (Vec<SqliteRow>, u64)) -> Result<Option<SqliteRow>, sqlx::Error> {
    Ok(rows.into_iter().next())
}

/// [`sqlx::Executor::fetch_all`] over [`lead`]'s rows.
#[allow(clippy::unnecessary_wraps)]
fn fetch_all((rows, _): (Vec<SqliteRow>, u64)) -> Result<Vec<SqliteRow>, sqlx::Error> {
    Ok(rows)
}

/// Runs `statements` on a SQLite connection in as few commands as its parameter limit allows (each
/// statement written with its own `$1..`), the first command led by `BEGIN` when the transaction's is still
/// to be sent; returns each statement's rows and changed-row count. The first failing statement stops the
/// rest.
async fn run_sqlite(
    mut c: SqliteConn<'_>,
    statements: &[&Query<'_>],
) -> Result<Vec<(Vec<SqliteRow>, u64)>, sqlx::Error> {
    let mut results = Vec::with_capacity(statements.len());
    let mut statements = statements.iter().peekable();
    while statements.peek().is_some() {
        let lead = c.leads();
        let mut sql = String::from(if lead { "BEGIN;\n" } else { "" });
        let mut values: Vec<&Value<'_>> = Vec::new();
        let mut count = 0;
        while let Some(next) = statements.peek() {
            if count > 0 && values.len() + next.values.len() > SQLITE_MAX_VALUES {
                break;
            }
            if values.is_empty() {
                sql.push_str(&next.sql);
            } else {
                renumber(&next.sql, values.len(), &mut sql);
            }
            sql.push_str(";\n");
            values.extend(next.values.iter());
            count += 1;
            statements.next();
        }
        let command = values
            .into_iter()
            .fold(sqlx::query(&sql), |q, v| v.bind_sqlite(q));
        if let (true, Some(begin)) = (lead, c.begin.as_deref_mut()) {
            *begin = Begin::Sent;
        }
        let mut stream = sqlx::Executor::fetch_many(&mut *c.conn, command);
        // `BEGIN`'s own result comes first; the worker ran it once anything came back.
        let mut skip = lead;
        let mut rows = Vec::new();
        while let Some(result) = futures::TryStreamExt::try_next(&mut stream).await? {
            if let (true, Some(begin)) = (skip, c.begin.as_deref_mut()) {
                *begin = Begin::Ran;
            }
            match result {
                sqlx::Either::Right(row) => rows.push(row),
                sqlx::Either::Left(_) if skip => skip = false,
                sqlx::Either::Left(done) => {
                    results.push((std::mem::take(&mut rows), done.rows_affected()));
                }
            }
        }
    }
    Ok(results)
}

fn one<R>(row: R, wrap: fn(R) -> Row) -> Row {
    wrap(row)
}

fn optional<R>(row: Option<R>, wrap: fn(R) -> Row) -> Option<Row> {
    row.map(wrap)
}

fn all<R>(rows: Vec<R>, wrap: fn(R) -> Row) -> Vec<Row> {
    rows.into_iter().map(wrap).collect()
}

impl<'q> Query<'q> {
    /// A statement whose text was assembled at run time (a multi-row insert).
    pub(crate) fn owned(sql: String) -> Self {
        Self {
            sql: Cow::Owned(sql),
            values: Vec::new(),
        }
    }

    /// Binds the next parameter.
    pub(crate) fn bind(mut self, value: impl Into<Value<'q>>) -> Self {
        self.values.push(value.into());
        self
    }

    fn postgres(&self) -> PgQuery<'_> {
        self.values
            .iter()
            .fold(sqlx::query(&self.sql), |q, v| v.bind_postgres(q))
    }

    fn sqlite(&self) -> SqliteQuery<'_> {
        self.values
            .iter()
            .fold(sqlx::query(&self.sql), |q, v| v.bind_sqlite(q))
    }

    /// Runs the statement; returns how many rows it changed.
    pub(crate) async fn execute<'e>(self, on: impl Into<On<'e>>) -> Result<u64, sqlx::Error> {
        Ok(match on.into() {
            On::PostgresPool(pool) => self.postgres().execute(pool).await?.rows_affected(),
            On::Postgres(conn) => self.postgres().execute(conn).await?.rows_affected(),
            On::SqlitePool(set) => {
                let mut lent = set.lend().await?;
                let outcome = self.sqlite().execute(lent.conn()).await;
                lent.note(&outcome);
                outcome?.rows_affected()
            }
            On::Sqlite(c) if c.leads() => lead(c, &self).await?.1,
            On::Sqlite(c) => self.sqlite().execute(c.conn).await?.rows_affected(),
        })
    }

    /// The one row the statement returns.
    pub(crate) async fn fetch_one<'e>(self, on: impl Into<On<'e>>) -> Result<Row, sqlx::Error> {
        Ok(run!(self, on, fetch_one, one))
    }

    /// The row the statement returns, if any.
    pub(crate) async fn fetch_optional<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> Result<Option<Row>, sqlx::Error> {
        Ok(run!(self, on, fetch_optional, optional))
    }

    /// Every row the statement returns.
    pub(crate) async fn fetch_all<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> Result<Vec<Row>, sqlx::Error> {
        Ok(run!(self, on, fetch_all, all))
    }
}

/// The most values one SQLite command binds: SQLite numbers a statement's parameters up to 32,766, and
/// a [`Batch`]'s statements share one numbering.
const SQLITE_MAX_VALUES: usize = 32_766;

/// Statements run in order inside the caller's transaction, each statement's rows returned apart. On
/// SQLite they go to the connection's worker thread as one command (one round trip between the threads
/// instead of one per statement; larger batches in as few commands as SQLite's parameter limit allows),
/// and the first failing statement stops the rest. On Postgres they run one by one.
#[derive(Debug, Default)]
pub(crate) struct Batch<'q> {
    statements: Vec<Query<'q>>,
}

impl<'q> Batch<'q> {
    /// Adds a statement; returns its index in [`Batch::run`]'s result.
    pub(crate) fn push(&mut self, statement: Query<'q>) -> usize {
        self.statements.push(statement);
        self.statements.len() - 1
    }

    /// Runs the statements; returns each one's rows, in order.
    pub(crate) async fn run(self, conn: &mut impl AsConn) -> Result<Vec<Vec<Row>>, sqlx::Error> {
        let mut rows = Vec::with_capacity(self.statements.len());
        match conn.conn() {
            Conn::Postgres(c) => {
                for statement in &self.statements {
                    let found = statement.postgres().fetch_all(&mut *c).await?;
                    rows.push(found.into_iter().map(Row::Postgres).collect());
                }
            }
            Conn::Sqlite(c) => {
                let statements: Vec<&Query<'q>> = self.statements.iter().collect();
                rows = run_sqlite(c, &statements)
                    .await?
                    .into_iter()
                    .map(|(found, _)| found.into_iter().map(Row::Sqlite).collect())
                    .collect();
                // Every statement ends with a result: fewer means the command stopped early (sqlx 0.8
                // runs every statement of a multi-statement query; a later version may not).
                if rows.len() != self.statements.len() {
                    return Err(sqlx::Error::Protocol(format!(
                        "a batch of {} statements returned {} results",
                        self.statements.len(),
                        rows.len()
                    )));
                }
            }
        }
        Ok(rows)
    }
}

/// Appends `sql` to `out` with each `$n` placeholder (outside quotes) moved up by `offset`.
fn renumber(sql: &str, offset: usize, out: &mut String) {
    let mut quote: Option<char> = None;
    let mut chars = sql.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '$') if chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let start = i + 1;
                let mut end = start;
                while let Some((j, d)) = chars.peek().copied() {
                    if !d.is_ascii_digit() {
                        break;
                    }
                    end = j + d.len_utf8();
                    chars.next();
                }
                let n: usize = sql[start..end].parse().unwrap_or(0);
                out.push('$');
                out.push_str(&(n + offset).to_string());
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
}

/// A result row of either database.
pub(crate) enum Row {
    Postgres(PgRow),
    Sqlite(SqliteRow),
}

impl Row {
    /// The value of a column (by name or position) as `T`.
    pub(crate) fn try_get<'r, T, I>(&'r self, index: I) -> Result<T, sqlx::Error>
    where
        T: Decode<'r, Postgres> + Type<Postgres> + Decode<'r, Sqlite> + Type<Sqlite>,
        I: ColumnIndex<PgRow> + ColumnIndex<SqliteRow>,
    {
        match self {
            Row::Postgres(row) => sqlx::Row::try_get(row, index),
            Row::Sqlite(row) => sqlx::Row::try_get(row, index),
        }
    }
}

/// One connection of either database, borrowed.
pub(crate) enum Conn<'c> {
    Postgres(&'c mut PgConnection),
    Sqlite(SqliteConn<'c>),
}

impl Conn<'_> {
    /// The database this connection talks to.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Conn::Postgres(_) => Dialect::Postgres,
            Conn::Sqlite(_) => Dialect::Sqlite,
        }
    }
}

impl<'e> From<Conn<'e>> for On<'e> {
    fn from(conn: Conn<'e>) -> Self {
        match conn {
            Conn::Postgres(c) => On::Postgres(c),
            Conn::Sqlite(c) => On::Sqlite(c),
        }
    }
}

/// Anything a statement can run on inside a unit of work: a transaction, a pooled connection, or a
/// connection borrowed from either.
pub(crate) trait AsConn: Send {
    /// The connection, borrowed for one statement.
    fn conn(&mut self) -> Conn<'_>;
}

impl AsConn for Conn<'_> {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Conn::Postgres(c) => Conn::Postgres(c),
            Conn::Sqlite(c) => Conn::Sqlite(c.reborrow()),
        }
    }
}

/// A write transaction of either database.
pub(crate) enum Tx {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(WriteTx),
}

impl Tx {
    /// Commits the transaction.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Postgres(tx) => tx.commit().await,
            Tx::Sqlite(tx) => tx.commit().await,
        }
    }

    /// Rolls the transaction back.
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Postgres(tx) => tx.rollback().await,
            Tx::Sqlite(tx) => tx.rollback().await,
        }
    }

    /// Rolls back after a failure, before its error goes up (so the locks are released first); a
    /// rollback that fails too is logged, and the connection is rolled back when next used.
    pub(crate) async fn abandon(self) {
        if let Err(e) = self.rollback().await {
            tracing::warn!(error = %e, "rollback failed");
        }
    }
}

impl Tx {
    /// Runs `batch` and commits, returning each statement's rows; on failure rolls back and returns the
    /// error. On SQLite the `COMMIT` ends the batch's (last) command, so it costs no round trip of its own.
    pub(crate) async fn commit_with(
        mut self,
        mut batch: Batch<'_>,
    ) -> Result<Vec<Vec<Row>>, sqlx::Error> {
        let commit = matches!(self, Tx::Sqlite(_)).then(|| batch.push(query("COMMIT")));
        match batch.run(&mut self).await {
            Ok(mut rows) => match (self, commit) {
                (Tx::Sqlite(tx), Some(commit)) => {
                    tx.ended_by_caller();
                    rows.truncate(commit);
                    Ok(rows)
                }
                (tx, _) => {
                    tx.commit().await?;
                    Ok(rows)
                }
            },
            Err(error) => {
                self.abandon().await;
                Err(error)
            }
        }
    }
}

impl AsConn for Tx {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Postgres(tx) => Conn::Postgres(tx),
            Tx::Sqlite(tx) => {
                let (conn, begin) = tx.parts();
                Conn::Sqlite(SqliteConn {
                    conn,
                    begin: Some(begin),
                })
            }
        }
    }
}

/// A connection taken from a read pool for several statements.
pub(crate) enum PoolConn {
    Postgres(PoolConnection<Postgres>),
    Sqlite(Lent),
}

impl AsConn for PoolConn {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            PoolConn::Postgres(c) => Conn::Postgres(c),
            PoolConn::Sqlite(c) => Conn::Sqlite(SqliteConn::plain(c.conn())),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::str::FromStr as _;

    use sqlx::sqlite::SqliteConnectOptions;

    use super::*;
    use crate::store::sqlite::lend::WriteTx;

    async fn table(dir: &tempfile::TempDir) -> Arc<Connections> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("batch.sqlite3"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let set = Connections::new(options, 1);
        query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
            .execute(&set)
            .await
            .unwrap();
        set
    }

    async fn ids(set: &Arc<Connections>) -> Vec<i64> {
        query("SELECT id FROM t ORDER BY id")
            .fetch_all(set)
            .await
            .unwrap()
            .iter()
            .map(|r| r.try_get(0).unwrap())
            .collect()
    }

    impl<'e> From<&'e Arc<Connections>> for On<'e> {
        fn from(set: &'e Arc<Connections>) -> Self {
            On::SqlitePool(set)
        }
    }

    #[test]
    fn placeholders_move_up_outside_quotes() {
        let mut out = String::new();
        renumber(
            "SELECT '$1', $1, \"$2\", json_extract(x, '$.a'), $12 FROM t WHERE a = $2",
            30,
            &mut out,
        );
        assert_eq!(
            out,
            "SELECT '$1', $31, \"$2\", json_extract(x, '$.a'), $42 FROM t WHERE a = $32"
        );
    }

    /// Each statement's rows come back apart, in order; the statements share one numbering of values
    /// (each written with its own `$1..`); the first failure stops the rest of the batch.
    #[tokio::test]
    async fn a_batch_returns_each_statements_rows_and_stops_at_the_first_failure() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2), ($3, $4) RETURNING id")
                .bind(1_i64)
                .bind("a")
                .bind(2_i64)
                .bind("b"),
        );
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(3_i64)
                .bind("c"),
        );
        batch.push(query("SELECT v FROM t WHERE id >= $1 ORDER BY id").bind(2_i64));
        let rows = batch.run(&mut tx).await.unwrap();
        assert_eq!(rows.len(), 3);
        let first: Vec<i64> = rows[0].iter().map(|r| r.try_get(0).unwrap()).collect();
        assert_eq!(first, [1, 2]);
        assert!(rows[1].is_empty());
        let third: Vec<String> = rows[2].iter().map(|r| r.try_get(0).unwrap()).collect();
        assert_eq!(third, ["b", "c"]);

        let mut failing = Batch::default();
        failing.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(4_i64)
                .bind("d"),
        );
        failing.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(5_i64)
                .bind("a"),
        );
        failing.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(6_i64)
                .bind("f"),
        );
        let Err(error) = failing.run(&mut tx).await else {
            panic!("a batch with a failing statement succeeded");
        };
        assert!(error.to_string().contains("UNIQUE"), "{error}");
        let after: Vec<i64> = query("SELECT id FROM t ORDER BY id")
            .fetch_all(tx.conn())
            .await
            .unwrap()
            .iter()
            .map(|r| r.try_get(0).unwrap())
            .collect();
        assert_eq!(
            after,
            [1, 2, 3, 4],
            "the statement after the failure never ran"
        );
        tx.rollback().await.unwrap();
        assert!(ids(&set).await.is_empty());
    }

    /// Values a caller controls are bound, never spliced into the batch's text: placeholders, quotes,
    /// semicolons and NUL in them come back verbatim, and the statements after them still run.
    #[tokio::test]
    async fn hostile_values_stay_values() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let hostile = ["$1", "'; DROP TABLE t; --", "\"$2\"; COMMIT; BEGIN", "a\0b"];
        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        for (id, v) in (1_i64..).zip(hostile) {
            batch.push(
                query("INSERT INTO t (id, v) VALUES ($1, $2) RETURNING v")
                    .bind(id)
                    .bind(v),
            );
        }
        let rows = tx.commit_with(batch).await.unwrap();
        let back: Vec<String> = rows.iter().map(|r| r[0].try_get(0).unwrap()).collect();
        assert_eq!(back, hostile);
        assert_eq!(ids(&set).await, [1, 2, 3, 4]);
    }

    /// More values than one SQLite statement may number go in several commands, all in order.
    #[tokio::test]
    async fn a_batch_beyond_sqlites_parameter_limit_runs_in_several_commands() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        let rows_per_statement = 5_000_i64;
        for s in 0..4_i64 {
            let mut sql = String::from("INSERT INTO t (id, v) VALUES ");
            for r in 0..rows_per_statement {
                if r > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("(${}, ${})", 2 * r + 1, 2 * r + 2));
            }
            sql.push_str(" RETURNING id");
            let mut q = Query::owned(sql);
            for r in 0..rows_per_statement {
                let id = s * rows_per_statement + r;
                q = q.bind(id).bind(format!("v{id}"));
            }
            batch.push(q);
        }
        let rows = batch.run(&mut tx).await.unwrap();
        assert_eq!(rows.len(), 4);
        for (s, found) in (0_i64..).zip(&rows) {
            let first: i64 = found[0].try_get(0).unwrap();
            assert_eq!((found.len(), first), (5_000, s * rows_per_statement));
        }
        tx.commit().await.unwrap();
        assert_eq!(ids(&set).await.len(), 20_000);
    }

    fn two_rows() -> Query<'static> {
        query("INSERT INTO t (id, v) VALUES ($1, $2), ($3, $4)")
            .bind(1_i64)
            .bind("a")
            .bind(2_i64)
            .bind("b")
    }

    /// A transaction that sent nothing ends without a command; one whose first command was sent but
    /// never answered (its caller gone: the worker runs the `BEGIN`, finds no one listening and stops) is
    /// still ended, so the connection's next transaction begins cleanly.
    #[tokio::test]
    async fn begin_unsent_or_unanswered() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        tx.commit().await.unwrap();
        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        tx.rollback().await.unwrap();

        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        {
            let insert = two_rows().execute(tx.conn());
            futures::pin_mut!(insert);
            let _ = futures::poll!(insert);
        }
        tx.rollback().await.unwrap();
        assert!(
            ids(&set).await.is_empty(),
            "nothing of the unanswered command is kept"
        );
        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        two_rows().execute(tx.conn()).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(ids(&set).await, [1, 2]);
        assert_eq!(set.idle(), 1);
    }

    /// A transaction's `BEGIN` rides in its first command, whatever sends it: undone on rollback, and a
    /// statement's changed-row count is its own (not `BEGIN`'s, which SQLite reports as the last one's).
    #[tokio::test]
    async fn begin_leads_the_first_statement() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let changed = two_rows().execute(tx.conn()).await.unwrap();
        assert_eq!(changed, 2);
        tx.rollback().await.unwrap();
        assert!(
            ids(&set).await.is_empty(),
            "the insert ran inside the transaction"
        );

        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        two_rows().execute(tx.conn()).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let changed = query("UPDATE t SET v = v WHERE id = $1")
            .bind(-1_i64)
            .execute(tx.conn())
            .await
            .unwrap();
        assert_eq!(changed, 0, "not the previous command's count");
        let row = query("SELECT count(*) FROM t")
            .fetch_one(tx.conn())
            .await
            .unwrap();
        assert_eq!(row.try_get::<i64, _>(0).unwrap(), 2);
        tx.commit().await.unwrap();
    }

    /// On SQLite the `COMMIT` rides in the batch: committed when it all ran, nothing kept when a
    /// statement failed, and the connection lent afresh either way.
    #[tokio::test]
    async fn commit_with_commits_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let set = table(&dir).await;
        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2) RETURNING v")
                .bind(1_i64)
                .bind("a"),
        );
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(2_i64)
                .bind("b"),
        );
        let rows = tx.commit_with(batch).await.unwrap();
        assert_eq!(rows.len(), 2, "the COMMIT's own result is not returned");
        assert_eq!(ids(&set).await, [1, 2]);

        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(3_i64)
                .bind("c"),
        );
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(4_i64)
                .bind("a"),
        );
        assert!(tx.commit_with(batch).await.is_err());
        assert_eq!(
            ids(&set).await,
            [1, 2],
            "nothing of the failed batch is kept"
        );

        let tx = Tx::Sqlite(WriteTx::begin(set.lend().await.unwrap()));
        let mut batch = Batch::default();
        batch.push(
            query("INSERT INTO t (id, v) VALUES ($1, $2)")
                .bind(5_i64)
                .bind("e"),
        );
        tx.commit_with(batch).await.unwrap();
        assert_eq!(ids(&set).await, [1, 2, 5]);
    }
}
