//! Sessions and rounds: create, read, list, status changes, cancellation, follow-up rounds.

use serde_json::json;
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::{EventKind, Round, RoundStatus, Session, SessionKind, SessionStatus};
use uuid::Uuid;

use super::db::{AsConn, Query, query};
use super::events::{Totals, append, lock_session};
use super::{SqlStore, now, rows, settle};
use crate::store::{
    DbEnum as _, NewEvent, NewSession, PageCursor, RoundEnd, StatusChange, StoreError, StoreResult,
    is_terminal,
};
use crate::store::{postgres, sqlite};

fn event(kind: EventKind, payload: serde_json::Value, round: u32) -> NewEvent {
    NewEvent {
        kind,
        payload,
        step: 0,
        round,
    }
}

fn status_of(row: &rows::Row) -> StoreResult<SessionStatus> {
    let text: String = row.try_get("status")?;
    SessionStatus::from_db(&text).ok_or_else(|| StoreError::Corrupt(format!("status = {text:?}")))
}

/// The `queue_place` column of a session row `s`: its 1-based place among queued sessions in claim
/// order, 0 when it is not queued.
const QUEUE_PLACE: &str = "CASE WHEN s.status = 'queued' THEN (SELECT COUNT(*) FROM sessions q \
    WHERE q.status = 'queued' AND (q.queued_at < s.queued_at OR (q.queued_at = s.queued_at AND q.id <= s.id))) \
    ELSE 0 END AS queue_place";

/// The session row, read inside the caller's transaction.
pub(super) async fn session_in(conn: &mut impl AsConn, id: Uuid) -> StoreResult<Session> {
    let row = session_query(id)
        .fetch_optional(conn.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
    rows::session(&row)
}

/// The statement reading session `id` as [`rows::session`] parses it (with its place in the queue).
pub(super) fn session_query<'q>(id: Uuid) -> Query<'q> {
    Query::owned(format!(
        "SELECT s.*, {QUEUE_PLACE} FROM sessions s WHERE s.id = $1"
    ))
    .bind(id)
}

async fn round_in(conn: &mut impl AsConn, id: Uuid, number: u32) -> StoreResult<Round> {
    let row = query("SELECT * FROM rounds WHERE session_id = $1 AND number = $2")
        .bind(id)
        .bind(i64::from(number))
        .fetch_optional(conn.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("round {number} of session {id}")))?;
    rows::round(&row)
}

fn round_status_for(session: SessionStatus) -> RoundStatus {
    match session {
        SessionStatus::Failed => RoundStatus::Failed,
        SessionStatus::Cancelled => RoundStatus::Cancelled,
        _ => RoundStatus::Finished,
    }
}

fn end_event(status: SessionStatus) -> EventKind {
    match status {
        SessionStatus::Failed => EventKind::TaskFailed,
        SessionStatus::Cancelled => EventKind::TaskCancelled,
        _ => EventKind::TaskFinished,
    }
}

/// Ends session `id` inside the caller's transaction: status, result, no lease, open rounds closed.
async fn end_session(
    conn: &mut impl AsConn,
    id: Uuid,
    status: SessionStatus,
    result: &str,
) -> StoreResult<u64> {
    let at = now();
    query(
        "UPDATE sessions SET status = $2, result = $3, lease_owner = NULL, lease_expires_at = NULL, \
         parked_for = NULL, parked_until = NULL, updated_at = $4 WHERE id = $1",
    )
    .bind(id)
    .bind(status.db())
    .bind(result)
    .bind(at)
    .execute(conn.conn())
    .await?;
    query(
        "UPDATE rounds SET status = $2, finished_at = $3 \
         WHERE session_id = $1 AND status IN ('pending', 'running')",
    )
    .bind(id)
    .bind(round_status_for(status).db())
    .bind(at)
    .execute(conn.conn())
    .await?;
    let ended = event(end_event(status), json!({ "result": result }), 0);
    let (_, last_seq) = append(conn, id, &[ended], Totals::default(), at).await?;
    Ok(last_seq)
}

impl SqlStore {
    #[instrument(name = "store.create_session", skip_all, fields(session = %new.id))]
    pub(super) async fn create_session_impl(&self, new: NewSession) -> StoreResult<Session> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64, bool)> = async {
        // A direct session runs from its creation (its steps are recorded as an MCP client's calls
        // happen) and no runner ever claims it.
        let direct = new.kind == SessionKind::Direct;
        let (status, round_status) = if direct {
            (SessionStatus::Running, RoundStatus::Running)
        } else {
            (SessionStatus::Queued, RoundStatus::Pending)
        };
        // A direct session is leased to the agent that made it from the start (a task gets its lease
        // when it is claimed).
        let lease = new.lease.as_ref().filter(|_| direct);
        let inserted = query(
            "INSERT INTO sessions (id, request, status, config, owner, created_at, updated_at, queued_at, kind, \
             desktop_want, lease_owner, lease_expires_at) VALUES ($1, $2, $6, $3, $4, $5, $5, $5, $7, $8, $9, $10) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(new.id)
        .bind(&new.request)
        .bind(SqlJson(&new.config))
        .bind(&new.owner)
        .bind(at)
        .bind(status.db())
        .bind(new.kind.db())
        .bind(new.desktop.as_ref().map(super::desktops::want_text))
        .bind(lease.map(|l| l.owner.clone()))
        .bind(lease.map(|l| super::queue::expiry(at, l.duration)))
        .execute(tx.conn())
        .await?;
        if inserted == 0 {
            let existing = self.get_session_impl(new.id).await?;
            return if existing.request == new.request && existing.kind == i32::from(new.kind) {
                Ok((existing, 0, false))
            } else {
                Err(StoreError::AlreadyExists(format!(
                    "session {} exists with another request",
                    new.id
                )))
            };
        }
        query(
            "INSERT INTO rounds (session_id, number, request, status, created_at, started_at) \
             VALUES ($1, 1, $2, $4, $3, $5)",
        )
        .bind(new.id)
        .bind(&new.request)
        .bind(at)
        .bind(round_status.db())
        .bind(direct.then_some(at))
        .execute(tx.conn())
        .await?;
        let created = event(
            EventKind::TaskCreated,
            json!({ "request": new.request, "owner": new.owner, "kind": new.kind.db() }),
            1,
        );
        let (_, last_seq) = append(&mut tx, new.id, &[created], Totals::default(), at).await?;
        // A queued task a claim could take now wakes every replica's idle runners on commit (this
        // process's after it): it is claimed at once, not at their next `--claim-interval-ms`.
        let signalled = !direct
            && super::desktops::signal_if_claimable(
                &mut tx,
                new.id,
                new.desktop.as_ref().map(super::desktops::want_text).as_deref(),
            )
            .await?;
        let session = session_in(&mut tx, new.id).await?;
            Ok((session, last_seq, signalled))
        }
        .await;
        let (session, last_seq, signalled) = settle(tx, outcome).await?;
        self.notifier.notify(new.id, last_seq);
        if signalled {
            self.notifier.notify_pool();
        }
        Ok(session)
    }

    #[instrument(name = "store.get_session", skip_all, fields(session = %id))]
    pub(super) async fn get_session_impl(&self, id: Uuid) -> StoreResult<Session> {
        let mut conn = self.read_conn().await?;
        session_in(&mut conn, id).await
    }

    #[instrument(name = "store.list_sessions", skip_all, fields(limit))]
    pub(super) async fn list_sessions_impl(
        &self,
        status: Option<SessionStatus>,
        owner: Option<&str>,
        cursor: Option<PageCursor>,
        limit: u32,
    ) -> StoreResult<(Vec<Session>, Option<PageCursor>)> {
        let found = Query::owned(format!(
            "SELECT s.*, {QUEUE_PLACE} FROM sessions s WHERE ($1 IS NULL OR s.status = $1) \
             AND ($2 IS NULL OR s.created_at < $2 OR (s.created_at = $2 AND s.id < $3)) \
             AND ($5 IS NULL OR s.owner = $5) \
             ORDER BY s.created_at DESC, s.id DESC LIMIT $4"
        ))
        .bind(status.map(|s| s.db()))
        .bind(cursor.map(|c| c.created_at))
        .bind(cursor.map(|c| c.id))
        .bind(i64::from(limit) + 1)
        .bind(owner)
        .fetch_all(self.read())
        .await?;
        let more = found.len() > limit as usize;
        let mut next = None;
        let mut sessions = Vec::with_capacity(found.len().min(limit as usize));
        for row in found.iter().take(limit as usize) {
            if more {
                next = Some(PageCursor {
                    created_at: row.try_get("created_at")?,
                    id: row.try_get("id")?,
                });
            }
            sessions.push(rows::session(row)?);
        }
        Ok((sessions, next))
    }

    #[instrument(name = "store.set_session_status", skip_all, fields(session = %change.id, status = ?change.status))]
    pub(super) async fn set_session_status_impl(
        &self,
        change: StatusChange,
    ) -> StoreResult<Session> {
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
            let row = lock_session(&mut tx, change.id, change.lease_owner.as_deref()).await?;
            let current = status_of(&row)?;
            if current == change.status {
                return Ok((session_in(&mut tx, change.id).await?, 0));
            }
            if is_terminal(current) {
                return Err(StoreError::FailedPrecondition(format!(
                    "session {} has ended ({})",
                    change.id,
                    current.db()
                )));
            }
            let last_seq = if is_terminal(change.status) {
                Some(end_session(&mut tx, change.id, change.status, &change.result).await?)
            } else if matches!(current, SessionStatus::Running | SessionStatus::Waiting) {
                query("UPDATE sessions SET status = $2, updated_at = $3 WHERE id = $1")
                    .bind(change.id)
                    .bind(change.status.db())
                    .bind(now())
                    .execute(tx.conn())
                    .await?;
                None
            } else {
                return Err(StoreError::FailedPrecondition(format!(
                    "session {} is {}: claim it before moving it to {}",
                    change.id,
                    current.db(),
                    change.status.db()
                )));
            };
            let session = session_in(&mut tx, change.id).await?;
            Ok((session, last_seq.unwrap_or(0)))
        }
        .await;
        let (session, last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(change.id, last_seq);
        Ok(session)
    }

    #[instrument(name = "store.request_cancel", skip_all, fields(session = %id))]
    pub(super) async fn request_cancel_impl(
        &self,
        id: Uuid,
        reason: String,
    ) -> StoreResult<Session> {
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
            let row = lock_session(&mut tx, id, None).await?;
            let current = status_of(&row)?;
            let already: bool = row.try_get("cancel_requested")?;
            // Nobody runs a queued, a parked or a direct session: it is cancelled at once.
            let parked = row.try_get::<Option<String>, _>("parked_for")?.is_some();
            let direct = row.try_get::<String, _>("kind")? == SessionKind::Direct.db();
            let idle = current == SessionStatus::Queued || parked || direct;
            if is_terminal(current) || (already && !idle) {
                return Ok((session_in(&mut tx, id).await?, 0));
            }
            query("UPDATE sessions SET cancel_requested = TRUE, updated_at = $2 WHERE id = $1")
                .bind(id)
                .bind(now())
                .execute(tx.conn())
                .await?;
            let requested = event(EventKind::CancelRequested, json!({ "reason": reason }), 0);
            let (_, mut last_seq) =
                append(&mut tx, id, &[requested], Totals::default(), now()).await?;
            if idle {
                let result = if reason.is_empty() {
                    "cancelled"
                } else {
                    &reason
                };
                last_seq = end_session(&mut tx, id, SessionStatus::Cancelled, result).await?;
            }
            let session = session_in(&mut tx, id).await?;
            Ok((session, last_seq))
        }
        .await;
        let (session, last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(id, last_seq);
        Ok(session)
    }

    #[instrument(name = "store.add_round", skip_all, fields(session = %id))]
    pub(super) async fn add_round_impl(&self, id: Uuid, request: String) -> StoreResult<Round> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
        let row = lock_session(&mut tx, id, None).await?;
        let current = status_of(&row)?;
        if row.try_get::<String, _>("kind")? == SessionKind::Direct.db() {
            return Err(StoreError::FailedPrecondition(format!(
                "session {id} records direct desktop calls: it takes no follow-up request"
            )));
        }
        let pending: Option<i64> = query(
            "SELECT number FROM rounds WHERE session_id = $1 AND status = 'pending' LIMIT 1",
        )
        .bind(id)
        .fetch_optional(tx.conn())
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
        if let Some(number) = pending {
            return Err(StoreError::FailedPrecondition(format!(
                "round {number} of session {id} is still pending"
            )));
        }
        let number: i64 = row.try_get::<i64, _>("rounds")? + 1;
        query(
            "INSERT INTO rounds (session_id, number, request, status, created_at) \
             VALUES ($1, $2, $3, 'pending', $4)",
        )
        .bind(id)
        .bind(number)
        .bind(&request)
        .bind(at)
        .execute(tx.conn())
        .await?;
        if is_terminal(current) {
            // A follow-up to an ended session queues it again for any runner.
            query(
                "UPDATE sessions SET rounds = $2, status = 'queued', result = '', cancel_requested = FALSE, \
                 queued_at = $3, updated_at = $3 WHERE id = $1",
            )
            .bind(id)
            .bind(number)
            .bind(at)
            .execute(tx.conn())
            .await?;
        } else {
            query("UPDATE sessions SET rounds = $2, updated_at = $3 WHERE id = $1")
                .bind(id)
                .bind(number)
                .bind(at)
                .execute(tx.conn())
                .await?;
        }
        let round_number = super::api_u32(number);
        let added = event(
            EventKind::RequestAdded,
            json!({ "request": request }),
            round_number,
        );
        let (_, last_seq) = append(&mut tx, id, &[added], Totals::default(), at).await?;
        let round = round_in(&mut tx, id, round_number).await?;
            Ok((round, last_seq))
        }
        .await;
        let (round, last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(id, last_seq);
        Ok(round)
    }

    #[instrument(name = "store.begin_round", skip_all, fields(session = %id, round = number))]
    pub(super) async fn begin_round_impl(
        &self,
        id: Uuid,
        number: u32,
        lease_owner: Option<String>,
    ) -> StoreResult<Round> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
        let row = lock_session(&mut tx, id, lease_owner.as_deref()).await?;
        let round = round_in(&mut tx, id, number).await?;
        match RoundStatus::try_from(round.status) {
            Ok(RoundStatus::Running) => return Ok((round, 0)),
            Ok(RoundStatus::Pending) => {}
            _ => {
                return Err(StoreError::FailedPrecondition(format!(
                    "round {number} of session {id} has ended"
                )));
            }
        }
        if is_terminal(status_of(&row)?) {
            return Err(StoreError::FailedPrecondition(format!(
                "session {id} has ended"
            )));
        }
        query(
            "UPDATE rounds SET status = 'running', started_at = $3 WHERE session_id = $1 AND number = $2",
        )
        .bind(id)
        .bind(i64::from(number))
        .bind(at)
        .execute(tx.conn())
        .await?;
        let started = event(
            EventKind::RoundStarted,
            json!({ "request": round.request }),
            number,
        );
        let (_, last_seq) = append(&mut tx, id, &[started], Totals::default(), at).await?;
        let round = round_in(&mut tx, id, number).await?;
            Ok((round, last_seq))
        }
        .await;
        let (round, last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(id, last_seq);
        Ok(round)
    }

    #[instrument(name = "store.finish_round", skip_all, fields(session = %end.id, round = end.number))]
    pub(super) async fn finish_round_impl(&self, end: RoundEnd) -> StoreResult<Round> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
            lock_session(&mut tx, end.id, end.lease_owner.as_deref()).await?;
            let round = round_in(&mut tx, end.id, end.number).await?;
            let current = RoundStatus::try_from(round.status).unwrap_or(RoundStatus::Unspecified);
            if current == end.status {
                return Ok((round, 0));
            }
            if current != RoundStatus::Running {
                return Err(StoreError::FailedPrecondition(format!(
                    "round {} of session {} is {}",
                    end.number,
                    end.id,
                    current.db()
                )));
            }
            query(
                "UPDATE rounds SET status = $3, result = $4, finished_at = $5 \
             WHERE session_id = $1 AND number = $2",
            )
            .bind(end.id)
            .bind(i64::from(end.number))
            .bind(end.status.db())
            .bind(&end.result)
            .bind(at)
            .execute(tx.conn())
            .await?;
            let finished = event(
                EventKind::RoundFinished,
                json!({ "status": end.status.db(), "result": end.result }),
                end.number,
            );
            let (_, last_seq) = append(&mut tx, end.id, &[finished], Totals::default(), at).await?;
            let round = round_in(&mut tx, end.id, end.number).await?;
            Ok((round, last_seq))
        }
        .await;
        let (round, last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(end.id, last_seq);
        Ok(round)
    }

    #[instrument(name = "store.list_rounds", skip_all, fields(session = %id))]
    pub(super) async fn list_rounds_impl(&self, id: Uuid) -> StoreResult<Vec<Round>> {
        let mut conn = self.read_conn().await?;
        let found = query("SELECT * FROM rounds WHERE session_id = $1 ORDER BY number")
            .bind(id)
            .fetch_all(conn.conn())
            .await?;
        if found.is_empty() {
            // Only an empty answer needs telling "no rounds yet" from "no such session".
            session_in(&mut conn, id).await?;
        }
        found.iter().map(rows::round).collect()
    }

    #[instrument(name = "store.end_expired_direct", skip_all, fields(worker = %worker, ended))]
    pub(super) async fn end_expired_direct_impl(
        &self,
        worker: String,
        limit: u32,
        unleased_idle: Option<std::time::Duration>,
    ) -> StoreResult<Vec<Session>> {
        let at = now();
        let unleased_before = unleased_idle
            .and_then(|idle| chrono::Duration::from_std(idle).ok())
            .map(|idle| at - idle);
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(Vec<(Session, u64)>, u64)> = async {
            let found = query(
                self.dialect()
                    .pick(postgres::EXPIRED_DIRECT, sqlite::EXPIRED_DIRECT),
            )
            .bind(at)
            .bind(i64::from(limit))
            .bind(unleased_before)
            .fetch_all(tx.conn())
            .await?;
            let mut ended = Vec::with_capacity(found.len());
            for row in &found {
                let id: Uuid = row.try_get("id")?;
                let owner: Option<String> = row.try_get("lease_owner")?;
                let expired: Option<chrono::DateTime<chrono::Utc>> =
                    row.try_get("lease_expires_at")?;
                let steps: i64 = row.try_get("steps")?;
                let why = match (owner, expired) {
                    (Some(owner), Some(expired)) => format!(
                        "its lease, held by {owner}, expired at {} without a renewal",
                        expired.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    ),
                    _ => "it held no lease (an agent of before direct leases) and recorded nothing \
                          for longer than the idle limit"
                        .to_owned(),
                };
                let result = format!(
                    "ended: the agent holding this direct session went away ({why}); {steps} step(s) \
                     recorded; ended by {worker}"
                );
                let last_seq = end_session(&mut tx, id, SessionStatus::Failed, &result).await?;
                ended.push((session_in(&mut tx, id).await?, last_seq));
            }
            Ok((ended, 0))
        }
        .await;
        let (ended, _) = settle(tx, outcome).await?;
        tracing::Span::current().record("ended", ended.len());
        Ok(ended
            .into_iter()
            .map(|(session, last_seq)| {
                if let Ok(id) = Uuid::parse_str(&session.id) {
                    self.notifier.notify(id, last_seq);
                }
                tracing::info!(session = %session.id, result = %session.result, "expired direct session ended");
                session
            })
            .collect())
    }
}
