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

use crate::store::sqlite::lend::{Connections, Lent, WriteTx};
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
    Sqlite(&'e mut SqliteConnection),
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
            On::Sqlite(conn) => $map($self.sqlite().$method(conn).await?, Row::Sqlite),
        }
    };
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
            On::Sqlite(conn) => self.sqlite().execute(conn).await?.rows_affected(),
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
    Sqlite(&'c mut SqliteConnection),
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
            Conn::Sqlite(c) => Conn::Sqlite(c),
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
}

impl AsConn for Tx {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Postgres(tx) => Conn::Postgres(tx),
            Tx::Sqlite(tx) => Conn::Sqlite(tx.conn()),
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
            PoolConn::Sqlite(c) => Conn::Sqlite(c.conn()),
        }
    }
}
