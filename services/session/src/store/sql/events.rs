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

use super::{Conn, SqlStore, api_u64, check_lease, db_int, dialect, now, rows, settle};
use crate::store::{DbEnum as _, NewEvent, StoreError, StoreResult};

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
    conn: &mut Conn,
    id: Uuid,
    events: &[NewEvent],
    totals: Totals,
    at: DateTime<Utc>,
) -> StoreResult<(Vec<Event>, u64)> {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let last_seq: i64 = sqlx::query_scalar(dialect::BUMP_SESSION)
        .bind(id)
        .bind(count)
        .bind(totals.steps)
        .bind(totals.cost)
        .bind(totals.input_tokens)
        .bind(totals.output_tokens)
        .bind(at)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
    if events.is_empty() {
        return Ok((Vec::new(), api_u64(last_seq)));
    }
    let first = last_seq - count + 1;
    let mut insert = sqlx::QueryBuilder::<super::Db>::new(
        "INSERT INTO events (session_id, seq, kind, payload, step, round, created_at) ",
    );
    insert.push_values(events.iter().zip(first..), |mut row, (event, seq)| {
        row.push_bind(id)
            .push_bind(seq)
            .push_bind(event.kind.db())
            .push_bind(SqlJson(event.payload.clone()))
            .push_bind(db_int(event.step))
            .push_bind(i64::from(event.round))
            .push_bind(at);
    });
    insert.build().execute(&mut *conn).await?;
    Ok((stored(id, events, first, at), api_u64(last_seq)))
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

/// Locks session `id` for the rest of the transaction and checks the lease; returns its status text.
pub(super) async fn lock_session(
    conn: &mut Conn,
    id: Uuid,
    lease_owner: Option<&str>,
) -> StoreResult<rows::Row> {
    let row = sqlx::query(dialect::LOCK_SESSION)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
    let owner: Option<String> = sqlx::Row::try_get(&row, "lease_owner")?;
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
        let last_seq =
            dialect::append_events(self, id, &events, lease_owner.as_deref(), at).await?;
        self.notifier.notify(id, api_u64(last_seq));
        let first = last_seq - i64::try_from(events.len()).unwrap_or(i64::MAX) + 1;
        Ok(stored(id, &events, first, at))
    }

    /// Appends in a transaction of several statements (lock and lease check, sequence bump, insert);
    /// returns the newest sequence number. SQLite's path; Postgres does it in one statement.
    #[allow(dead_code)]
    pub(crate) async fn append_events_statements(
        &self,
        id: Uuid,
        events: &[NewEvent],
        lease_owner: Option<&str>,
        at: DateTime<Utc>,
    ) -> StoreResult<i64> {
        let mut tx = self.write.begin().await?;
        let outcome: StoreResult<u64> = async {
            lock_session(&mut tx, id, lease_owner).await?;
            Ok(append(&mut tx, id, events, Totals::default(), at).await?.1)
        }
        .await;
        Ok(db_int(settle(tx, outcome).await?))
    }

    #[instrument(name = "store.read_events", skip_all, fields(session = %id, from_seq, limit))]
    pub(super) async fn read_events_impl(
        &self,
        id: Uuid,
        from_seq: u64,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        let found = sqlx::query(
            "SELECT * FROM events WHERE session_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(db_int(from_seq))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        found.iter().map(rows::event).collect()
    }
}
