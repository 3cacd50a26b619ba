//! The event log: sequence allocation, appending and reading.
//!
//! Sequence numbers come from `sessions.last_seq`, bumped by the same statement that updates the session's
//! totals, inside the writer's transaction. That row lock serialises a session's writers, so numbers have
//! no gaps and commit in order; a watcher reading `seq >= n` never sees a later event before an earlier one.

use chrono::{DateTime, Utc};
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::Event;
use uuid::Uuid;

use super::db::{AsConn, Batch, Dialect, Query, Row, Tx, query};
use super::{
    Backend, ROWS_PER_INSERT, SqlStore, api_u64, check_lease, db_int, now, rows, values_sql,
};
use crate::store::{DbEnum as _, NewEvent, StoreError, StoreResult};
use crate::store::{postgres, sqlite};

/// What a step adds to a session's totals.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub steps: i64,
    pub cost: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

/// Appends `events` (and adds `totals`) to session `id` inside the caller's transaction; returns them with
/// their sequence numbers and the newest sequence number. With no events, only the totals change.
pub(super) async fn append(
    conn: &mut impl AsConn,
    id: Uuid,
    events: &[NewEvent],
    totals: Totals,
    at: DateTime<Utc>,
) -> StoreResult<(Vec<Event>, u64)> {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let dialect = conn.conn().dialect();
    if dialect == Dialect::Sqlite && !events.is_empty() {
        // One command: the bump, then the events numbered from the bumped row.
        let (batch, bump) = sqlite_append(id, events, totals, at, None);
        let results = batch.run(conn).await?;
        let last_seq = bumped(id, &results, bump)?;
        let first = last_seq - count + 1;
        return Ok((stored(id, events, first, at), api_u64(last_seq)));
    }
    let last_seq: i64 = bump_session(dialect, id, count, totals, at)
        .fetch_optional(conn.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?
        .try_get(0)?;
    if events.is_empty() {
        return Ok((Vec::new(), api_u64(last_seq)));
    }
    let first = last_seq - count + 1;
    for (chunk, chunk_first) in events
        .chunks(ROWS_PER_INSERT)
        .zip((first..).step_by(ROWS_PER_INSERT))
    {
        insert_events(id, chunk, chunk_first, at)
            .execute(conn.conn())
            .await?;
    }
    Ok((stored(id, events, first, at), api_u64(last_seq)))
}

/// The `last_seq` the sequence bump at `bump` in a batch's `results` returned; none: no such session.
fn bumped(id: Uuid, results: &[Vec<Row>], bump: usize) -> StoreResult<i64> {
    Ok(results
        .get(bump)
        .and_then(|rows| rows.first())
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?
        .try_get(0)?)
}

/// Where a batched append's sequence bump is in its [`Batch`], and what it must return.
pub(super) struct Appended {
    bump: usize,
    last_seq: i64,
}

impl Appended {
    /// The session's newest sequence number after the batch ran; the bump returning another one (which the
    /// caller's writer lock rules out) is an error, and so is a missing session.
    pub(super) fn last_seq(&self, id: Uuid, results: &[Vec<Row>]) -> StoreResult<i64> {
        let bumped = bumped(id, results, self.bump)?;
        if bumped != self.last_seq {
            return Err(StoreError::Corrupt(format!(
                "session {id}: sequence {bumped} after an append, {} expected",
                self.last_seq
            )));
        }
        Ok(self.last_seq)
    }
}

/// Adds to `batch` the statements that append `events` (and add `totals`) to session `id`, whose newest
/// sequence number the caller read as `last_seq` in a transaction that holds the session's writer lock
/// (so the events' numbers are known before the statements run).
pub(super) fn append_in<'q>(
    batch: &mut Batch<'q>,
    dialect: Dialect,
    id: Uuid,
    events: &'q [NewEvent],
    totals: Totals,
    at: DateTime<Utc>,
    last_seq: i64,
) -> Appended {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let bump = batch.push(bump_session(dialect, id, count, totals, at));
    for (chunk, chunk_first) in events
        .chunks(ROWS_PER_INSERT)
        .zip((last_seq + 1..).step_by(ROWS_PER_INSERT))
    {
        batch.push(insert_events(id, chunk, chunk_first, at));
    }
    Appended {
        bump,
        last_seq: last_seq + count,
    }
}

/// SQLite's append of `events` (and `totals`) to session `id` as one batch: the sequence bump (only while
/// `fence` holds the session's lease, when given), then the inserts numbered from the bumped row; returns
/// the batch and the bump's place in it (no row there: nothing was written).
fn sqlite_append<'q>(
    id: Uuid,
    events: &'q [NewEvent],
    totals: Totals,
    at: DateTime<Utc>,
    fence: Option<&'q str>,
) -> (Batch<'q>, usize) {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let mut batch = Batch::default();
    let bump = batch.push(match fence {
        None => bump_session(Dialect::Sqlite, id, count, totals, at),
        Some(worker) => bump_with(sqlite::BUMP_SESSION_FENCED, id, count, totals, at).bind(worker),
    });
    for (chunk, first_index) in events
        .chunks(ROWS_PER_INSERT)
        .zip((0..).step_by(ROWS_PER_INSERT))
    {
        batch.push(insert_events_after_bump(
            id,
            chunk,
            count - first_index,
            at,
            fence,
        ));
    }
    (batch, bump)
}

/// The statement bumping session `id`'s sequence by `count` and adding `totals`; returns the new
/// `last_seq`.
fn bump_session<'q>(
    dialect: Dialect,
    id: Uuid,
    count: i64,
    totals: Totals,
    at: DateTime<Utc>,
) -> Query<'q> {
    bump_with(
        dialect.pick(postgres::BUMP_SESSION, sqlite::BUMP_SESSION),
        id,
        count,
        totals,
        at,
    )
}

/// `sql`, a sequence bump taking `$1..$7` as [`sqlite::BUMP_SESSION`] does, with those bound.
fn bump_with<'q>(
    sql: &'q str,
    id: Uuid,
    count: i64,
    totals: Totals,
    at: DateTime<Utc>,
) -> Query<'q> {
    query(sql)
        .bind(id)
        .bind(count)
        .bind(totals.steps)
        .bind(totals.cost)
        .bind(totals.input_tokens)
        .bind(totals.output_tokens)
        .bind(at)
}

/// A multi-row insert of `events` run right after the bump of session `id` (SQLite): each takes its
/// number from the bumped `last_seq`, the first `last_seq - back + 1`, the next one more (the newest
/// event's `back` is 1). Inserts nothing when the session is missing, nor, with a `fence`, unless that
/// worker holds the session's lease (the condition of [`sqlite::BUMP_SESSION_FENCED`], which ran in the
/// same transaction: both statements write or neither does).
fn insert_events_after_bump<'q>(
    id: Uuid,
    events: &'q [NewEvent],
    back: i64,
    at: DateTime<Utc>,
    fence: Option<&'q str>,
) -> Query<'q> {
    use std::fmt::Write as _;
    let mut sql = String::from(
        "INSERT INTO events (session_id, seq, kind, payload, step, round, created_at) \
         SELECT s.id, s.last_seq - v.column1 + 1, v.column2, v.column3, v.column4, v.column5, $2 \
         FROM sessions s, (VALUES ",
    );
    for row in 0..events.len() {
        let n = 3 + row * 5;
        let _ = write!(
            sql,
            "{}(${n}, ${}, ${}, ${}, ${})",
            if row == 0 { "" } else { ", " },
            n + 1,
            n + 2,
            n + 3,
            n + 4
        );
    }
    sql.push_str(") v WHERE s.id = $1");
    if fence.is_some() {
        let _ = write!(sql, " AND s.lease_owner = ${}", 3 + events.len() * 5);
    }
    let mut insert = Query::owned(sql).bind(id).bind(at);
    for (event, back) in events.iter().zip((0..=back).rev()) {
        insert = insert
            .bind(back)
            .bind(event.kind.db())
            .bind(SqlJson(&event.payload))
            .bind(db_int(event.step))
            .bind(i64::from(event.round));
    }
    match fence {
        Some(worker) => insert.bind(worker),
        None => insert,
    }
}

/// One multi-row insert of `events`, numbered from `first`.
fn insert_events<'q>(id: Uuid, events: &'q [NewEvent], first: i64, at: DateTime<Utc>) -> Query<'q> {
    let mut insert = Query::owned(values_sql(
        "INSERT INTO events (session_id, seq, kind, payload, step, round, created_at) VALUES",
        7,
        events.len(),
        "",
    ));
    for (event, seq) in events.iter().zip(first..) {
        insert = insert
            .bind(id)
            .bind(seq)
            .bind(event.kind.db())
            .bind(SqlJson(&event.payload))
            .bind(db_int(event.step))
            .bind(i64::from(event.round))
            .bind(at);
    }
    insert
}

/// `events` as stored for session `id`, the first with sequence number `first`.
pub(super) fn stored(id: Uuid, events: &[NewEvent], first: i64, at: DateTime<Utc>) -> Vec<Event> {
    events
        .iter()
        .zip(first..)
        .map(|(event, seq)| Event {
            session_id: id.to_string(),
            seq: api_u64(seq),
            kind: event.kind.into(),
            payload: match &event.payload {
                serde_json::Value::Object(map) => {
                    Some(ufo_proto::json::object_to_struct(map.clone()))
                }
                _ => None,
            },
            created_at: Some(rows::ts(at)),
            step: event.step,
            round: event.round,
        })
        .collect()
}

/// Queues session `id` again, in its old place, if it is parked and `events` hold an answer or a decision
/// (inside the caller's transaction, which holds the session's row lock). When a claim could take it
/// then, every replica's idle runners are signalled on commit
/// ([`super::desktops::signal_if_claimable`]), so it is claimed at once, not at their next
/// `--claim-interval-ms`; returns whether they were (the caller signals this process after the commit).
pub(super) async fn wake_parked(
    tx: &mut Tx,
    id: Uuid,
    events: &[NewEvent],
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    if !events.iter().any(|e| crate::store::wakes(e.kind)) {
        return Ok(false);
    }
    let woken = query(
        "UPDATE sessions SET status = 'queued', parked_for = NULL, parked_until = NULL, updated_at = $2 \
         WHERE id = $1 AND status = 'waiting' AND parked_for IS NOT NULL RETURNING desktop_want",
    )
    .bind(id)
    .bind(at)
    .fetch_optional(tx.conn())
    .await?;
    match woken {
        Some(row) => {
            let want: Option<String> = row.try_get("desktop_want")?;
            super::desktops::signal_if_claimable(tx, id, want.as_deref()).await
        }
        None => Ok(false),
    }
}

/// Locks session `id` for the rest of the transaction and checks the lease; returns its status text.
pub(super) async fn lock_session(
    conn: &mut impl AsConn,
    id: Uuid,
    lease_owner: Option<&str>,
) -> StoreResult<rows::Row> {
    let lock = conn
        .conn()
        .dialect()
        .pick(postgres::LOCK_SESSION, sqlite::LOCK_SESSION);
    let row = query(lock)
        .bind(id)
        .fetch_optional(conn.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
    let owner: Option<String> = row.try_get("lease_owner")?;
    check_lease(id, owner.as_deref(), lease_owner)?;
    Ok(row)
}

impl SqlStore {
    #[instrument(name = "store.append_events", skip_all, fields(session = %id, count = events.len()))]
    pub(super) async fn append_events_impl(
        &self,
        id: Uuid,
        events: Vec<NewEvent>,
        lease_owner: Option<String>,
    ) -> StoreResult<Vec<Event>> {
        let at = now();
        let lease_owner = lease_owner.as_deref();
        // An answer or a decision may wake a parked session: that takes the row lock and a second
        // statement, so it goes the way of the statements (the same transaction on either database).
        let wakes = events.iter().any(|e| crate::store::wakes(e.kind));
        let writing = self.notifier.writing(id);
        let (last_seq, woken) = match &self.backend {
            Backend::Postgres { pool, .. } if !wakes => (
                postgres::append_events(pool, id, &events, lease_owner, at).await?,
                false,
            ),
            Backend::Sqlite { .. } if !wakes => (
                self.append_events_sqlite(id, &events, lease_owner, at)
                    .await?,
                false,
            ),
            Backend::Postgres { .. } | Backend::Sqlite { .. } => {
                self.append_events_statements(id, &events, lease_owner, at)
                    .await?
            }
        };
        let first = last_seq - i64::try_from(events.len()).unwrap_or(i64::MAX) + 1;
        let stored = stored(id, &events, first, at);
        writing.publish(|| stored.clone());
        if woken {
            self.notifier.notify_pool();
        }
        Ok(stored)
    }

    /// Appends on SQLite in one command (`BEGIN`, the sequence bump, the inserts, `COMMIT`), fenced by
    /// `lease_owner` in the statements themselves; returns the newest sequence number. Only when nothing
    /// was written does a read tell a missing session from a lease another worker holds.
    async fn append_events_sqlite(
        &self,
        id: Uuid,
        events: &[NewEvent],
        lease_owner: Option<&str>,
        at: DateTime<Utc>,
    ) -> StoreResult<i64> {
        let (batch, bump) = sqlite_append(id, events, Totals::default(), at, lease_owner);
        let results = self.begin().await?.commit_with(batch).await?;
        if let Some(row) = results.get(bump).and_then(|rows| rows.first()) {
            return Ok(row.try_get(0)?);
        }
        let session = query("SELECT lease_owner FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(self.read())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
        let owner: Option<String> = session.try_get("lease_owner")?;
        check_lease(id, owner.as_deref(), lease_owner)?;
        // The write found no session, or the lease elsewhere, and the read saw it come back: either way
        // nothing was written, as the write's own moment says.
        Err(match lease_owner {
            Some(_) => StoreError::LeaseLost(id.to_string()),
            None => StoreError::NotFound(format!("session {id}")),
        })
    }

    /// Appends in a transaction of several statements (lock and lease check, sequence bump, insert);
    /// returns the newest sequence number and whether a parked session was queued again: an answer's or a
    /// decision's path (either database); otherwise each database appends in one command.
    async fn append_events_statements(
        &self,
        id: Uuid,
        events: &[NewEvent],
        lease_owner: Option<&str>,
        at: DateTime<Utc>,
    ) -> StoreResult<(i64, bool)> {
        let lock = self
            .dialect()
            .pick(postgres::LOCK_SESSION, sqlite::LOCK_SESSION);
        let (mut tx, session) = self.begin_with(query(lock).bind(id)).await?;
        let checked: StoreResult<(i64, bool)> = async {
            let session = session
                .first()
                .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
            let owner: Option<String> = session.try_get("lease_owner")?;
            check_lease(id, owner.as_deref(), lease_owner)?;
            let last_seq: i64 = session.try_get("last_seq")?;
            Ok((last_seq, wake_parked(&mut tx, id, events, at).await?))
        }
        .await;
        let (last_seq, woken) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                tx.abandon().await;
                return Err(e);
            }
        };
        let mut batch = Batch::default();
        let dialect = self.dialect();
        let appended = append_in(
            &mut batch,
            dialect,
            id,
            events,
            Totals::default(),
            at,
            last_seq,
        );
        let results = tx.commit_with(batch).await?;
        Ok((appended.last_seq(id, &results)?, woken))
    }

    #[instrument(name = "store.read_events", skip_all, fields(session = %id, from_seq, limit))]
    pub(super) async fn read_events_impl(
        &self,
        id: Uuid,
        from_seq: u64,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        let found =
            query("SELECT * FROM events WHERE session_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3")
                .bind(id)
                .bind(db_int(from_seq))
                .bind(i64::from(limit))
                .fetch_all(self.read())
                .await?;
        found.iter().map(rows::event).collect()
    }
}
