//! The task queue for agent replicas: claim with a lease, renew, release, park.
//!
//! A lease is `(lease_owner, lease_expires_at)` on the session row. Fenced writes compare `lease_owner`;
//! once a lease expires any worker may claim the session, which changes the owner and so fences the old
//! worker out. This is what lets another replica resume a crashed worker's task.
//!
//! A session waiting for a person is *parked*: WAITING without a lease, `parked_for` (question or
//! approval) and `parked_until` (its timeout) set. It is not claimable until an answer or a decision is
//! appended ([`super::events::wake_parked`], in the same transaction: it goes back to QUEUED in its old
//! place) or `parked_until` passes (then a worker claims it to apply the timeout fallback).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use tracing::instrument;
use ufo_proto::v1::{Desktop, EventKind, Lease, ParkReason, Round, TaskStart};
use uuid::Uuid;

use super::db::{AsConn as _, Batch, query};
use super::events::{Totals, append, append_in, lock_session};
use super::sessions::session_query;
use super::{SqlStore, db_int, desktops, now, rows, settle};
use crate::store::{Claim, DbEnum as _, NewEvent, ParkTask, StoreError, StoreResult};
use crate::store::{postgres, sqlite};

pub(super) fn expiry(at: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX)
}

/// The statements of a claim after its choice, as [`SqlStore::claim_in`] adds them to its first batch:
/// what the runner of session `id` needs to start it ([`TaskStart`]): whether nothing it would read back
/// is recorded yet, the first open round begun when it was pending, and the rounds after that.
struct StartQueries {
    recorded: usize,
    begun: usize,
    rounds: usize,
}

impl StartQueries {
    fn push<'q>(batch: &mut Batch<'q>, id: Uuid, at: DateTime<Utc>) -> Self {
        // Everything a runner's start reads back: steps, memory, the board, and in the event log the
        // releases (counted against --max-releases) and intents (a dead runner's actions to settle).
        let recorded = batch.push(
            query(
                "SELECT (EXISTS (SELECT 1 FROM steps WHERE session_id = $1) \
                 OR EXISTS (SELECT 1 FROM memory_items WHERE session_id = $1) \
                 OR EXISTS (SELECT 1 FROM blackboard WHERE session_id = $1) \
                 OR EXISTS (SELECT 1 FROM events WHERE session_id = $1 AND kind IN ($2, $3))) AS recorded",
            )
            .bind(id)
            .bind(EventKind::TaskReleased.db())
            .bind(EventKind::StepStarted.db()),
        );
        // The first open round (pending or running) is begun when it is pending.
        let begun = batch.push(
            query(
                "UPDATE rounds SET status = 'running', started_at = $2 \
                 WHERE session_id = $1 AND status = 'pending' AND number = (SELECT MIN(number) \
                 FROM rounds WHERE session_id = $1 AND status IN ('pending', 'running')) RETURNING number",
            )
            .bind(id)
            .bind(at),
        );
        let rounds = batch
            .push(query("SELECT * FROM rounds WHERE session_id = $1 ORDER BY number").bind(id));
        Self {
            recorded,
            begun,
            rounds,
        }
    }

    /// The [`TaskStart`] from the batch's `results`, and the ROUND_STARTED event to append after the
    /// claim's own (as `BeginRound` appends it) when a round was begun.
    fn read(&self, results: &[Vec<rows::Row>]) -> StoreResult<(TaskStart, Option<NewEvent>)> {
        let one = |at: usize| {
            results
                .get(at)
                .ok_or_else(|| StoreError::Corrupt(format!("the claim's batch has no result {at}")))
        };
        let recorded: bool = one(self.recorded)?
            .first()
            .ok_or_else(|| StoreError::Corrupt("the claim's start read no row".into()))?
            .try_get("recorded")?;
        tracing::Span::current().record("fresh", !recorded);
        let begun = match one(self.begun)?.first() {
            Some(row) => Some(
                u32::try_from(row.try_get::<i64, _>("number")?)
                    .map_err(|_| StoreError::Corrupt("a round number out of range".into()))?,
            ),
            None => None,
        };
        let rounds = one(self.rounds)?
            .iter()
            .map(rows::round)
            .collect::<StoreResult<Vec<Round>>>()?;
        let event = begun
            .and_then(|number| rounds.iter().find(|r| r.number == number))
            .map(|round| NewEvent {
                kind: EventKind::RoundStarted,
                payload: json!({ "request": round.request }),
                step: 0,
                round: round.number,
            });
        Ok((
            TaskStart {
                rounds,
                fresh: !recorded,
            },
            event,
        ))
    }
}

/// What [`SqlStore::claim_postgres`] gives back: the checked-in desktop (with a check-in), and the
/// claim with its session's id and the last event sequence number to notify.
pub(super) type PostgresClaim = (Option<Desktop>, Option<(Claim, Uuid, u64)>);

/// A claimable session as the claim reads it.
struct Candidate {
    id: Uuid,
    /// The worker whose lease lapsed, if any.
    lease_owner: Option<String>,
    /// Its newest event's sequence number.
    last_seq: i64,
    /// Its `desktop_want` (stored JSON).
    want: Option<String>,
    /// The desktop it held last.
    last: Option<String>,
    /// Already shown as waiting for a desktop.
    waiting: bool,
}

impl Candidate {
    fn of(row: &rows::Row) -> StoreResult<Self> {
        Ok(Self {
            id: row.try_get("id")?,
            lease_owner: row.try_get("lease_owner")?,
            last_seq: row.try_get("last_seq")?,
            want: row.try_get("desktop_want")?,
            last: row.try_get("desktop")?,
            waiting: row.try_get("waiting_for_desktop")?,
        })
    }
}

/// Marks queued session $1 as waiting for a desktop (a claim passed it over: none that fits is free).
const FLAG_WAITING: &str = "UPDATE sessions SET waiting_for_desktop = TRUE \
    WHERE id = $1 AND status = 'queued' AND NOT waiting_for_desktop";

impl SqlStore {
    #[instrument(name = "store.claim_task", skip_all, fields(worker = %worker, session, start, fresh))]
    pub(super) async fn claim_task_impl(
        &self,
        worker: String,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
    ) -> StoreResult<Option<Claim>> {
        if self.dialect() == super::db::Dialect::Postgres {
            let claimed = self
                .claim_postgres(&worker, lease, reachable, start, None)
                .await?
                .and_then(|(_, claimed)| claimed);
            return Ok(claimed.map(|(claim, id, last_seq)| {
                self.notifier.notify(id, last_seq);
                claim
            }));
        }
        let mut tx = self.begin().await?;
        // Read once the transaction is ours: the lease starts when the claim can commit, not before a
        // wait for SQLite's writer (which would shorten it and date the claim too early).
        let at = now();
        let outcome = self
            .claim_in(&mut tx, at, &worker, lease, reachable, start)
            .await;
        let (claimed, last_seq) = settle(tx, outcome).await?;
        Ok(claimed.map(|(claim, id)| {
            self.notifier.notify(id, last_seq);
            claim
        }))
    }

    /// The claim on Postgres, after the check-in `back` when given (the hand-over): one call of
    /// `ufo_claim` (migration 0045), which commits on its own and answers with everything the claim
    /// returns, in rows named by their role. `None` when the check-in's fence refused it; else the
    /// checked-in desktop (with `back`) and the claim, its session's id and the last event sequence
    /// number to notify.
    pub(super) async fn claim_postgres(
        &self,
        worker: &str,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
        back: Option<&crate::store::DesktopCheckIn>,
    ) -> StoreResult<Option<PostgresClaim>> {
        let at = now();
        let reachable = match reachable {
            Some(names) => serde_json::Value::from(names.into_iter().collect::<Vec<_>>()),
            None => serde_json::Value::Null,
        };
        let asked = std::time::Instant::now();
        let rows = query(postgres::CLAIM)
            .bind(at)
            .bind(expiry(at, lease))
            .bind(worker)
            .bind(sqlx::types::Json(reachable))
            .bind(start)
            .bind(desktops::CLAIM_SCAN)
            .bind(back.map(|b| b.name.as_str()))
            .bind(back.map(|b| b.session))
            .bind(back.and_then(|b| b.broken.clone()))
            .fetch_all(self.write())
            .await?;
        tracing::debug!(
            claim_ms = asked.elapsed().as_secs_f64() * 1e3,
            rows = rows.len(),
            "claimed on Postgres"
        );
        let mut outcome = None;
        let (mut checked_in, mut session, mut desktop, mut rounds) = (None, None, None, Vec::new());
        for row in &rows {
            let role: String = row.try_get("role")?;
            match role.as_str() {
                "outcome" => outcome = Some(row),
                "checked_in" => checked_in = Some(desktops::desktop(row)?),
                "session" => session = Some(rows::session(row)?),
                "claimed" => desktop = Some(desktops::desktop(row)?),
                "round" => rounds.push(rows::round(row)?),
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "ufo_claim answered a row of role {other:?}"
                    )));
                }
            }
        }
        // No row at all: the check-in's fence refused it.
        let Some(outcome) = outcome else {
            return Ok(None);
        };
        let Some(id) = outcome.try_get::<Option<Uuid>, _>("claimed")? else {
            return Ok(Some((checked_in, None)));
        };
        tracing::Span::current().record("session", tracing::field::display(id));
        let last_seq = super::api_u64(
            outcome
                .try_get::<Option<i64>, _>("claimed_last_seq")?
                .unwrap_or(0),
        );
        let session = session.ok_or_else(|| {
            StoreError::Corrupt(format!("ufo_claim claimed session {id} without its row"))
        })?;
        let fresh: Option<bool> = outcome.try_get("fresh")?;
        let start = match fresh {
            Some(fresh) if start => {
                tracing::Span::current().record("fresh", fresh);
                Some(TaskStart { rounds, fresh })
            }
            _ => None,
        };
        let claim = Claim {
            session,
            desktop,
            start,
        };
        Ok(Some((checked_in, Some((claim, id, last_seq)))))
    }

    /// The claim of [`SqlStore::claim_task_impl`] inside `tx` on the embedded store (also the second
    /// half of a hand-over, [`SqlStore::check_in_and_claim_impl`]; Postgres does the same in one
    /// statement, [`SqlStore::claim_postgres`]): the claim and the claimed session's id, and the last
    /// event sequence number to notify once `tx` commits. With `start`, the session's first open round
    /// is begun and its [`TaskStart`] read in the same transaction.
    pub(super) async fn claim_in(
        &self,
        tx: &mut super::db::Tx,
        at: DateTime<Utc>,
        worker: &str,
        lease: Duration,
        reachable: Option<std::collections::HashSet<String>>,
        start: bool,
    ) -> StoreResult<(Option<(Claim, Uuid)>, u64)> {
        let worker = worker.to_owned();
        let tx = &mut *tx;
        async {
            let candidates = query(sqlite::CLAIM_CANDIDATES)
                .bind(at)
                .bind(desktops::CLAIM_SCAN)
                .fetch_all(tx.conn())
                .await?;
            let until = expiry(at, lease);
            let mut pool = desktops::Pool::new(reachable);
            let mut chosen = None;
            for row in &candidates {
                let candidate = Candidate::of(row)?;
                let id = candidate.id;
                if !pool.may_fit(tx, id, candidate.want.as_deref()).await? {
                    // Shown as "waiting for a desktop" until a claim gives it one: written once, not
                    // again by every claim that passes it over (each claim loop's turn would otherwise
                    // send one statement per waiting task).
                    if !candidate.waiting {
                        query(FLAG_WAITING)
                            .bind(id)
                            .execute(tx.conn())
                            .await?;
                    }
                    continue;
                }
                // SQLite's single writer: nothing to lock, nothing changed since the read.
                let locked = candidate;
                match pool
                    .fit(
                        tx,
                        id,
                        locked.want.as_deref(),
                        locked.last.as_deref(),
                        &worker,
                        until,
                    )
                    .await?
                {
                    desktops::Fit::NoDesktop => chosen = Some((locked, None)),
                    desktops::Fit::Desktop(name) => chosen = Some((locked, Some(name))),
                    desktops::Fit::Wait => {
                        // Another claim took the desktop it could have had; this claim holds the row.
                        if !locked.waiting {
                            query(FLAG_WAITING).bind(id).execute(tx.conn()).await?;
                        }
                        continue;
                    }
                }
                break;
            }
            let Some((candidate, desktop)) = chosen else {
                return Ok((None, 0));
            };
            let id = candidate.id;
            let previous = candidate.lease_owner;
            tracing::Span::current().record("session", tracing::field::display(id));
            // Two commands from here: the claim with its start's reads, then the events and the rows
            // the claim returns.
            let mut batch = Batch::default();
            batch.push(
                query(
                    "UPDATE sessions SET lease_owner = $2, lease_expires_at = $3, updated_at = $4, \
                 parked_for = NULL, parked_until = NULL, waiting_for_desktop = FALSE, \
                 desktop = COALESCE($5, desktop), \
                 status = CASE WHEN status = 'queued' THEN 'running' ELSE status END WHERE id = $1",
                )
                .bind(id)
                .bind(&worker)
                .bind(until)
                .bind(at)
                .bind(desktop.clone()),
            );
            let starting = start.then(|| StartQueries::push(&mut batch, id, at));
            let results = batch.run(tx).await?;
            let mut events = vec![NewEvent {
                kind: EventKind::TaskClaimed,
                payload: json!({ "worker": worker, "previous_owner": previous, "desktop": desktop }),
                step: 0,
                round: 0,
            }];
            let start = match starting {
                Some(queries) => {
                    let (start, begun) = queries.read(&results)?;
                    events.extend(begun);
                    Some(start)
                }
                None => None,
            };
            let mut batch = Batch::default();
            let appended = append_in(
                &mut batch,
                super::db::Dialect::Sqlite,
                id,
                &events,
                Totals::default(),
                at,
                candidate.last_seq,
            );
            let session_at = batch.push(session_query(id));
            let desktop_at = desktop.as_deref().map(|name| batch.push(desktops::desktop_query(name)));
            let results = batch.run(tx).await?;
            let last_seq = super::api_u64(appended.last_seq(id, &results)?);
            let row = |at: usize, what: &str| {
                results
                    .get(at)
                    .and_then(|rows| rows.first())
                    .ok_or_else(|| StoreError::NotFound(what.to_owned()))
            };
            let session = rows::session(row(session_at, &format!("session {id}"))?)?;
            let desktop = match (desktop_at, &desktop) {
                (Some(at), Some(name)) => {
                    Some(desktops::desktop(row(at, &format!("desktop {name}"))?)?)
                }
                _ => None,
            };
            let claimed = Claim {
                session,
                desktop,
                start,
            };
            Ok((Some((claimed, id)), last_seq))
        }
        .await
    }

    #[instrument(name = "store.renew_lease", skip_all, fields(session = %id, worker = %worker))]
    pub(super) async fn renew_lease_impl(
        &self,
        id: Uuid,
        worker: String,
        lease: Duration,
    ) -> StoreResult<Lease> {
        let at = now();
        let until = expiry(at, lease);
        let renewed = query(
            "UPDATE sessions SET lease_expires_at = $3, updated_at = $4 \
             WHERE id = $1 AND lease_owner = $2 AND status IN ('running', 'waiting') \
             RETURNING lease_expires_at, cancel_requested",
        )
        .bind(id)
        .bind(&worker)
        .bind(until)
        .bind(at)
        .fetch_optional(self.write())
        .await?;
        if renewed.is_some() {
            desktops::renew_with_session(self.write(), id, &worker, until).await?;
        }
        let Some(row) = renewed else {
            // Tell "no such session" apart from "not yours (any more)".
            self.get_session_impl(id).await?;
            return Err(StoreError::LeaseLost(id.to_string()));
        };
        Ok(Lease {
            session_id: id.to_string(),
            worker_id: worker,
            expires_at: Some(rows::ts(row.try_get("lease_expires_at")?)),
            cancel_requested: row.try_get("cancel_requested")?,
        })
    }

    #[instrument(name = "store.release_task", skip_all, fields(session = %id, worker = %worker, requeue))]
    pub(super) async fn release_task_impl(
        &self,
        id: Uuid,
        worker: String,
        requeue: bool,
    ) -> StoreResult<()> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(_, u64)> = async {
            let row = lock_session(&mut tx, id, Some(&worker)).await?;
            let status: String = row.try_get("status")?;
            let requeued = requeue && (status == "running" || status == "waiting");
            query(
                "UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL, updated_at = $2, \
             status = CASE WHEN $3 THEN 'queued' ELSE status END, \
             queued_at = CASE WHEN $3 THEN $2 ELSE queued_at END WHERE id = $1",
            )
            .bind(id)
            .bind(at)
            .bind(requeued)
            .execute(tx.conn())
            .await?;
            let released = NewEvent {
                kind: EventKind::TaskReleased,
                payload: json!({ "worker": worker, "requeued": requeued }),
                step: 0,
                round: 0,
            };
            let (_, last_seq) = append(&mut tx, id, &[released], Totals::default(), at).await?;
            Ok(((), last_seq))
        }
        .await;
        let ((), last_seq) = settle(tx, outcome).await?;
        self.notifier.notify(id, last_seq);
        Ok(())
    }

    #[instrument(name = "store.park_task", skip_all, fields(session = %park.id, worker = %park.worker))]
    pub(super) async fn park_task_impl(&self, park: ParkTask) -> StoreResult<bool> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome: StoreResult<(bool, u64, bool)> = async {
            let row = lock_session(&mut tx, park.id, Some(&park.worker)).await?;
            let status: String = row.try_get("status")?;
            if status != "running" && status != "waiting" {
                return Err(StoreError::FailedPrecondition(format!(
                    "session {} is {status}: only a running or waiting session can be parked",
                    park.id
                )));
            }
            let reason = match park.reason {
                ParkReason::Question | ParkReason::Approval => park.reason.db(),
                ParkReason::Unspecified => {
                    return Err(StoreError::FailedPrecondition(
                        "a session is parked for a question or an approval".into(),
                    ));
                }
            };
            let woken = query(
                "SELECT seq FROM events WHERE session_id = $1 AND seq > $2 \
                 AND kind IN ($3, $4, $5) LIMIT 1",
            )
            .bind(park.id)
            .bind(db_int(park.seen_seq))
            .bind(EventKind::QuestionAnswered.db())
            .bind(EventKind::ActionApproved.db())
            .bind(EventKind::ActionRejected.db())
            .fetch_optional(tx.conn())
            .await?;
            if woken.is_some() {
                return Ok((false, 0, false));
            }
            query(
                "UPDATE sessions SET status = 'waiting', lease_owner = NULL, lease_expires_at = NULL, \
                 parked_for = $2, parked_until = $3, updated_at = $4 WHERE id = $1",
            )
            .bind(park.id)
            .bind(&reason)
            .bind(park.until)
            .bind(at)
            .execute(tx.conn())
            .await?;
            let freed = desktops::release_for_park(&mut tx, park.id, at).await?;
            let parked = NewEvent {
                kind: EventKind::TaskParked,
                payload: json!({
                    "worker": park.worker,
                    "reason": reason,
                    "until": park.until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                }),
                step: 0,
                round: 0,
            };
            let (_, last_seq) = append(&mut tx, park.id, &[parked], Totals::default(), at).await?;
            Ok((true, last_seq, freed))
        }
        .await;
        let (parked, last_seq, freed) = settle(tx, outcome).await?;
        if parked {
            self.notifier.notify(park.id, last_seq);
        }
        if freed {
            self.notifier.notify_pool();
        }
        Ok(parked)
    }
}
