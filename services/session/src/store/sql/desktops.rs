//! The desktop pool (issue 36): desktops register, are checked out to one session at a time inside the
//! claim ([`SqlStore::claim_task_impl`](super::SqlStore)), renewed with the session's lease, and checked in
//! by the worker after the session's end and the desktop's reset.
//!
//! A check-out is `(task_id, lease_owner, lease_expires_at)` on the desktop row. It is never given to a
//! second session while its session may still run: a busy desktop becomes available again only by a
//! check-in, by its session parking (it gives the desktop back unreset), or when its lease lapsed *and*
//! its session ended (the runner died between the end and the check-in; the next session's runner resets
//! it first, `needs_reset`). A session whose runner died mid-task keeps its desktop: the claim that takes
//! the session over takes the desktop with it.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::instrument;
use ufo_proto::v1::{Desktop, DesktopChange, DesktopState};
use uuid::Uuid;

use super::db::{AsConn, On, Query, Tx, query};
use super::{SqlStore, now, rows};
use crate::store::{DesktopCheckIn, DesktopWant, NewDesktop, StoreError, StoreResult};

/// How many claimable sessions one claim looks at for one it can give a desktop to. Sessions further
/// back wait for a later claim; a queue whose first 256 sessions all wait for busy desktops is not
/// starved of desktops that fit later ones for longer than those sessions wait.
pub(super) const CLAIM_SCAN: i64 = 256;

/// The stored form of a want.
pub(super) fn want_text(want: &DesktopWant) -> String {
    serde_json::to_string(want).unwrap_or_default()
}

/// A stored want.
pub(super) fn want_of(text: &str) -> StoreResult<DesktopWant> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("desktop_want: {e}")))
}

/// A desktop's labels, by key.
type Labels = BTreeMap<String, String>;

fn labels_of(text: &str) -> StoreResult<Labels> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("desktop labels: {e}")))
}

fn labels_text(labels: &BTreeMap<String, String>) -> String {
    serde_json::to_string(labels).unwrap_or_else(|_| "{}".to_owned())
}

fn expiry(at: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX)
}

/// A `desktops` row.
pub(super) fn desktop(row: &rows::Row) -> StoreResult<Desktop> {
    let stored: String = row.try_get("state")?;
    let draining: bool = row.try_get("draining")?;
    let state = match stored.as_str() {
        "broken" => DesktopState::Broken,
        "busy" => DesktopState::Busy,
        "free" if draining => DesktopState::Draining,
        "free" => DesktopState::Free,
        other => return Err(StoreError::Corrupt(format!("desktop state = {other:?}"))),
    };
    Ok(Desktop {
        name: row.try_get("name")?,
        labels: labels_of(&row.try_get::<String, _>("labels")?)?
            .into_iter()
            .collect(),
        state: state.into(),
        task_id: row
            .try_get::<Option<Uuid>, _>("task_id")?
            .map(|id| id.to_string())
            .unwrap_or_default(),
        worker_id: row
            .try_get::<Option<String>, _>("lease_owner")?
            .unwrap_or_default(),
        lease_expires_at: rows::opt_ts(row.try_get("lease_expires_at")?),
        last_heartbeat: Some(rows::ts(row.try_get("last_heartbeat")?)),
        version: row.try_get("version")?,
        reason: row.try_get("reason")?,
        draining,
        needs_reset: row.try_get("needs_reset")?,
        generation: super::api_u64(row.try_get("generation")?),
    })
}

/// Desktop `name`, read inside the caller's transaction (it exists: the caller checked it out).
pub(super) async fn desktop_in(conn: &mut impl AsConn, name: &str) -> StoreResult<Desktop> {
    let row = desktop_query(name)
        .fetch_optional(conn.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("desktop {name}")))?;
    desktop(&row)
}

/// The statement reading desktop `name` as [`desktop`] parses it.
pub(super) fn desktop_query(name: &str) -> Query<'_> {
    query("SELECT * FROM desktops WHERE name = $1").bind(name)
}

/// A desktop that may be checked out, as [`AVAILABLE_DESKTOPS`] lists it.
struct Available {
    name: String,
    labels: BTreeMap<String, String>,
}

/// What the claim gives a candidate session.
pub(super) enum Fit {
    /// It needs no desktop.
    NoDesktop,
    /// This desktop, checked out to it now (or still: it held it already).
    Desktop(String),
    /// It needs one and none that fits is available.
    Wait,
}

/// The desktops the claim in `tx` may hand out, loaded once per claim (and locked on Postgres).
pub(super) struct Pool {
    available: Option<Vec<Available>>,
    /// Desktops checked out now, by session (loaded once per claim).
    held: Option<std::collections::HashMap<Uuid, String>>,
    /// The desktops the claiming worker can reach; `None`: any.
    reachable: Option<std::collections::HashSet<String>>,
}

impl Pool {
    pub(super) fn new(reachable: Option<std::collections::HashSet<String>>) -> Self {
        Self {
            available: None,
            held: None,
            reachable,
        }
    }

    /// Loads (once per claim) the desktops checked out now and the ones that may be handed out.
    async fn load(&mut self, tx: &mut Tx) -> StoreResult<()> {
        if self.held.is_none() {
            let rows = query("SELECT name, task_id FROM desktops WHERE task_id IS NOT NULL")
                .fetch_all(tx.conn())
                .await?;
            let mut held = std::collections::HashMap::with_capacity(rows.len());
            for row in &rows {
                held.insert(row.try_get::<Uuid, _>("task_id")?, row.try_get("name")?);
            }
            self.held = Some(held);
        }
        if self.available.is_none() {
            let listed = query(AVAILABLE_DESKTOPS)
                .bind(now())
                .fetch_all(tx.conn())
                .await?;
            let mut available = Vec::with_capacity(listed.len());
            for row in &listed {
                let name: String = row.try_get("name")?;
                if self.reachable.as_ref().is_some_and(|r| !r.contains(&name)) {
                    continue;
                }
                available.push(Available {
                    name,
                    labels: labels_of(&row.try_get::<String, _>("labels")?)?,
                });
            }
            self.available = Some(available);
        }
        Ok(())
    }

    /// Whether [`Pool::fit`] would give a candidate session that wants `want` something as the pool
    /// stands (read, nothing written or locked): the claim locks a candidate only once it can be given
    /// what it needs, so claims that find nothing hold no row another claim or a hand-over wants.
    pub(super) async fn may_fit(
        &mut self,
        tx: &mut Tx,
        id: Uuid,
        want: Option<&str>,
    ) -> StoreResult<bool> {
        let Some(want) = want else {
            return Ok(true);
        };
        let want = want_of(want)?;
        self.load(tx).await?;
        if self.held.as_ref().is_some_and(|h| h.contains_key(&id)) {
            return Ok(true);
        }
        Ok(self
            .available
            .as_ref()
            .is_some_and(|a| a.iter().any(|d| want.fits(&d.name, &d.labels))))
    }

    /// Finds (and checks out to `id` for `worker`) a desktop for a candidate session that wants `want`
    /// (the stored JSON; `None`: no desktop) and last held `last`. The desktops were listed without a
    /// lock: the check-out is fenced on the desktop still being available, and a desktop another claim
    /// took meanwhile is passed over for the next one that fits.
    pub(super) async fn fit(
        &mut self,
        tx: &mut Tx,
        id: Uuid,
        want: Option<&str>,
        last: Option<&str>,
        worker: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<Fit> {
        let Some(want) = want else {
            return Ok(Fit::NoDesktop);
        };
        let want = want_of(want)?;
        self.load(tx).await?;
        // Its runner died mid-task: the session takes its desktop with it.
        if let Some(name) = self.held.as_ref().and_then(|h| h.get(&id)).cloned() {
            // Unless the dead runner's check-in got there first (then it is free like any other).
            let kept = query(
                "UPDATE desktops SET lease_owner = $2, lease_expires_at = $3 \
                 WHERE name = $1 AND task_id = $4",
            )
            .bind(&name)
            .bind(worker)
            .bind(until)
            .bind(id)
            .execute(tx.conn())
            .await?;
            if kept == 1 {
                return Ok(Fit::Desktop(name));
            }
        }
        let available = self.available.get_or_insert_with(Vec::new);
        loop {
            // The desktop it had before it parked, when it is free and still fits; else the least
            // recently freed one that fits.
            let fits = |d: &Available| want.fits(&d.name, &d.labels);
            let chosen = available
                .iter()
                .position(|d| Some(d.name.as_str()) == last && fits(d))
                .or_else(|| available.iter().position(fits));
            let Some(index) = chosen else {
                return Ok(Fit::Wait);
            };
            let desktop = available.remove(index);
            let taken = query(CHECK_OUT)
                .bind(&desktop.name)
                .bind(id)
                .bind(worker)
                .bind(until)
                .bind(now())
                .execute(tx.conn())
                .await?;
            if taken == 1 {
                return Ok(Fit::Desktop(desktop.name));
            }
        }
    }
}

/// The desktops a session may be given at time $1: free ones, and busy ones whose check-out lapsed after
/// their session ended (the runner died before the check-in; they are reset first); least recently freed
/// first. Read without a lock: [`CHECK_OUT`] takes one only if it is still available.
const AVAILABLE_DESKTOPS: &str = "SELECT d.name, d.labels FROM desktops d \
    LEFT JOIN sessions s ON s.id = d.task_id WHERE NOT d.draining AND (d.state = 'free' \
    OR (d.state = 'busy' AND d.lease_expires_at < $1 \
        AND (s.id IS NULL OR s.status IN ('finished', 'failed', 'cancelled')))) \
    ORDER BY d.freed_at, d.name";

/// Checks desktop $1 out to session $2 for worker $3 until $4 if it is still available at time $5 as
/// [`AVAILABLE_DESKTOPS`] lists them (one whose check-out lapsed is marked to be reset first). On Postgres a concurrent check-out of the
/// same desktop makes this wait for its commit and then re-check the row, so two claims never both take
/// it; SQLite's single writer serialises them.
const CHECK_OUT: &str = "UPDATE desktops SET state = 'busy', task_id = $2, lease_owner = $3, \
    lease_expires_at = $4, needs_reset = CASE WHEN state = 'busy' THEN TRUE ELSE FALSE END \
    WHERE name = $1 AND NOT draining AND (state = 'free' \
    OR (state = 'busy' AND lease_expires_at < $5 AND (task_id IS NULL OR NOT EXISTS (SELECT 1 \
        FROM sessions s WHERE s.id = desktops.task_id \
        AND s.status NOT IN ('finished', 'failed', 'cancelled')))))";

/// Renews the check-out of session `id`'s desktop with its lease (a no-op without one).
pub(super) async fn renew_with_session<'e>(
    on: impl Into<On<'e>>,
    id: Uuid,
    worker: &str,
    until: DateTime<Utc>,
) -> StoreResult<()> {
    query("UPDATE desktops SET lease_expires_at = $3 WHERE task_id = $1 AND lease_owner = $2")
        .bind(id)
        .bind(worker)
        .bind(until)
        .execute(on)
        .await?;
    Ok(())
}

/// Gives session `id`'s desktop back without a reset (the session parks: another session may use the
/// desktop meanwhile; the parked one prefers it again when it is woken).
pub(super) async fn release_for_park(
    conn: &mut impl AsConn,
    id: Uuid,
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    let released = query(
        "UPDATE desktops SET state = 'free', task_id = NULL, lease_owner = NULL, \
         lease_expires_at = NULL, needs_reset = FALSE, freed_at = $2 WHERE task_id = $1",
    )
    .bind(id)
    .bind(at)
    .execute(conn.conn())
    .await?;
    if released > 0 {
        signal_pool(conn).await?;
    }
    Ok(released > 0)
}

/// The Postgres notification channel of [`crate::store::Notifier::notify_pool`]: every replica of the
/// session service wakes its `WatchPool` streams when a transaction that freed a desktop commits.
pub const POOL_CHANNEL: &str = "ufo_pool";

/// Signals the pool to every replica once the transaction on `conn` commits (Postgres `pg_notify`; the
/// embedded store has one process, which signals locally after the commit).
pub(super) async fn signal_pool(conn: &mut impl AsConn) -> StoreResult<()> {
    if conn.conn().dialect() == super::db::Dialect::Postgres {
        query("SELECT pg_notify($1, '')::text AS notified")
            .bind(POOL_CHANNEL)
            .fetch_one(conn.conn())
            .await?;
    }
    Ok(())
}

/// Signals the pool (as [`signal_pool`]) for session `id`, new or queued again, wanting `want` (the
/// stored JSON; `None`: no desktop), when a claim could take it now: it needs no desktop, or one that
/// fits is available. One that must wait for a desktop is taken at that desktop's check-in (the
/// hand-over claims it, or the check-in signals), so a burst of such tasks wakes no runner for nothing.
/// Returns whether it signalled (the caller then signals this process after the commit).
pub(super) async fn signal_if_claimable(
    tx: &mut Tx,
    id: Uuid,
    want: Option<&str>,
) -> StoreResult<bool> {
    let claimable = Pool::new(None).may_fit(tx, id, want).await?;
    if claimable {
        signal_pool(tx).await?;
    }
    Ok(claimable)
}

/// The check-in (fenced by session and worker); `RETURNING` the row.
const CHECK_IN: &str = "UPDATE desktops SET state = CASE WHEN $4 THEN 'broken' ELSE 'free' END, \
    task_id = NULL, lease_owner = NULL, lease_expires_at = NULL, needs_reset = FALSE, reason = $5, \
    freed_at = $6 WHERE name = $1 AND task_id = $2 AND lease_owner = $3 RETURNING *";

/// [`CHECK_IN`] on Postgres, notifying every replica's pool watchers on commit when the desktop is free.
const CHECK_IN_NOTIFY: &str = "UPDATE desktops SET state = CASE WHEN $4 THEN 'broken' ELSE 'free' END, \
    task_id = NULL, lease_owner = NULL, lease_expires_at = NULL, needs_reset = FALSE, reason = $5, \
    freed_at = $6 WHERE name = $1 AND task_id = $2 AND lease_owner = $3 \
    RETURNING *, CASE WHEN $4 THEN '' ELSE pg_notify('ufo_pool', name)::text END AS notified";

impl SqlStore {
    #[instrument(name = "store.register_desktop", skip_all, fields(desktop = %new.name, generation = new.generation))]
    pub(super) async fn register_desktop_impl(&self, new: NewDesktop) -> StoreResult<Desktop> {
        let at = now();
        let generation = super::db_int(new.generation);
        // The update is fenced by the connection's generation: a replaced connection's late write
        // (below the stored generation) updates nothing and returns no row. 0 is unfenced.
        let row = query(
            "INSERT INTO desktops (name, labels, version, last_heartbeat, freed_at, generation) \
             VALUES ($1, $2, $3, $4, $4, $5) ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, \
             version = CASE WHEN excluded.version = '' THEN desktops.version ELSE excluded.version END, \
             last_heartbeat = excluded.last_heartbeat, \
             generation = CASE WHEN excluded.generation = 0 THEN desktops.generation \
             ELSE excluded.generation END \
             WHERE excluded.generation = 0 OR excluded.generation >= desktops.generation RETURNING *",
        )
        .bind(&new.name)
        .bind(labels_text(&new.labels))
        .bind(&new.version)
        .bind(at)
        .bind(generation)
        .fetch_optional(self.write())
        .await?;
        match row {
            Some(row) => desktop(&row),
            None => {
                let stored = self.get_desktop_impl(&new.name).await?;
                Err(StoreError::FailedPrecondition(format!(
                    "desktop {} was registered by a newer connection (generation {}); this write of \
                     generation {} comes from a connection it replaced and is refused",
                    new.name, stored.generation, new.generation
                )))
            }
        }
    }

    #[instrument(name = "store.get_desktop", skip_all, fields(desktop = %name))]
    pub(super) async fn get_desktop_impl(&self, name: &str) -> StoreResult<Desktop> {
        desktop_in(&mut self.read_conn().await?, name).await
    }

    #[instrument(name = "store.list_desktops", skip_all)]
    pub(super) async fn list_desktops_impl(&self) -> StoreResult<Vec<Desktop>> {
        query("SELECT * FROM desktops ORDER BY name")
            .fetch_all(self.read())
            .await?
            .iter()
            .map(desktop)
            .collect()
    }

    #[instrument(name = "store.count_waiting_for_desktop", skip_all)]
    pub(super) async fn count_waiting_for_desktop_impl(&self) -> StoreResult<u64> {
        let row = query(
            "SELECT COUNT(*) AS n FROM sessions WHERE status = 'queued' AND waiting_for_desktop",
        )
        .fetch_one(self.read())
        .await?;
        Ok(super::api_u64(row.try_get("n")?))
    }

    /// Fenced by (session, worker): the write changes nothing unless the desktop is checked out to them.
    async fn fenced_desktop(&self, name: &str, updated: Option<rows::Row>) -> StoreResult<Desktop> {
        match updated {
            Some(row) => desktop(&row),
            None => Err(self.not_checked_out(name).await),
        }
    }

    /// Why a fenced write to desktop `name` changed nothing.
    async fn not_checked_out(&self, name: &str) -> StoreError {
        match self.get_desktop_impl(name).await {
            Ok(stored) => StoreError::FailedPrecondition(format!(
                "desktop {name} is not checked out to this session and worker (it is held by {:?})",
                stored.task_id
            )),
            Err(e) => e,
        }
    }

    /// The check-in statement `back` runs in `tx` (the row, or `None` when the fence refused it).
    async fn check_in_in(
        tx: &mut Tx,
        back: &DesktopCheckIn,
        at: DateTime<Utc>,
        notify: bool,
    ) -> StoreResult<Option<rows::Row>> {
        let statement = if notify {
            tx.conn().dialect().pick(CHECK_IN_NOTIFY, CHECK_IN)
        } else {
            CHECK_IN
        };
        Ok(query(statement)
            .bind(&back.name)
            .bind(back.session)
            .bind(&back.worker)
            .bind(back.broken.is_some())
            .bind(back.broken.clone().unwrap_or_default())
            .bind(at)
            .fetch_optional(tx.conn())
            .await?)
    }

    #[instrument(name = "store.check_in_desktop", skip_all, fields(desktop = %back.name, session = %back.session))]
    pub(super) async fn check_in_desktop_impl(&self, back: DesktopCheckIn) -> StoreResult<Desktop> {
        let at = now();
        let mut tx = self.begin().await?;
        let outcome = Self::check_in_in(&mut tx, &back, at, true).await;
        let updated = super::settle(tx, outcome).await?;
        if updated.is_some() && back.broken.is_none() {
            self.notifier.notify_pool();
        }
        self.fenced_desktop(&back.name, updated).await
    }

    /// The hand-over (issue 36): checks `back` in and, when it comes back free, claims for the same
    /// worker the oldest claimable session this desktop fits (or one that needs no desktop), in one
    /// transaction (with `start`, also starting it: [`SqlStore::claim_in`]). Other replicas are
    /// signalled only when the desktop is still free after it.
    #[instrument(name = "store.check_in_and_claim", skip_all, fields(desktop = %back.name, session = %back.session, claimed, fresh))]
    pub(super) async fn check_in_and_claim_impl(
        &self,
        back: DesktopCheckIn,
        lease: Duration,
        start: bool,
    ) -> StoreResult<crate::store::HandOver> {
        let asked = std::time::Instant::now();
        if self.dialect() == super::db::Dialect::Postgres {
            let reachable = std::collections::HashSet::from([back.name.clone()]);
            let handed = self
                .claim_postgres(&back.worker, lease, Some(reachable), start, Some(&back))
                .await;
            tracing::debug!(
                total_ms = asked.elapsed().as_secs_f64() * 1e3,
                ok = handed.is_ok(),
                "hand-over transaction done"
            );
            let Some((Some(checked_in), claimed)) = handed? else {
                return Err(self.not_checked_out(&back.name).await);
            };
            return Ok(self.handed_over(&back, checked_in, claimed));
        }
        let mut tx = self.begin().await?;
        // How long the hand-over waited for a write transaction (SQLite's single writer, a Postgres
        // connection) and how long it then took: issue 36's scheduling overhead is mostly this call.
        let writer_wait_ms = asked.elapsed().as_secs_f64() * 1e3;
        // The check-in and the claim are dated once the transaction is ours (see `claim_task_impl`).
        let at = now();
        let outcome: StoreResult<_> = async {
            let Some(row) = Self::check_in_in(&mut tx, &back, at, false).await? else {
                return Ok(None);
            };
            let checked_in = desktop(&row)?;
            if back.broken.is_some() {
                return Ok(Some((checked_in, None, 0)));
            }
            let reachable = std::collections::HashSet::from([back.name.clone()]);
            let (claimed, last_seq) = self
                .claim_in(&mut tx, at, &back.worker, lease, Some(reachable), start)
                .await?;
            let taken = claimed
                .as_ref()
                .is_some_and(|(claim, _)| claim.session.desktop == back.name);
            if !taken {
                signal_pool(&mut tx).await?;
            }
            Ok(Some((checked_in, claimed, last_seq)))
        }
        .await;
        let settled = super::settle(tx, outcome).await;
        tracing::debug!(
            writer_wait_ms,
            total_ms = asked.elapsed().as_secs_f64() * 1e3,
            ok = settled.is_ok(),
            "hand-over transaction done"
        );
        let Some((checked_in, claimed, last_seq)) = settled? else {
            return Err(self.not_checked_out(&back.name).await);
        };
        let claimed = claimed.map(|(claim, id)| (claim, id, last_seq));
        Ok(self.handed_over(&back, checked_in, claimed))
    }

    /// A hand-over's answer once it committed (either store): the pool's watchers are woken when the
    /// desktop came back free and stays free, the claimed session's watchers with its newest event.
    fn handed_over(
        &self,
        back: &DesktopCheckIn,
        checked_in: Desktop,
        claimed: Option<(crate::store::Claim, Uuid, u64)>,
    ) -> crate::store::HandOver {
        if let Some((_, id, _)) = &claimed {
            tracing::Span::current().record("claimed", tracing::field::display(id));
        }
        let taken = claimed
            .as_ref()
            .is_some_and(|(claim, _, _)| claim.session.desktop == back.name);
        if back.broken.is_none() && !taken {
            self.notifier.notify_pool();
        }
        (
            checked_in,
            claimed.map(|(claim, id, last_seq)| {
                self.notifier.notify(id, last_seq);
                claim
            }),
        )
    }

    #[instrument(name = "store.renew_desktop", skip_all, fields(desktop = %name, session = %session))]
    pub(super) async fn renew_desktop_impl(
        &self,
        name: &str,
        session: Uuid,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Desktop> {
        let updated = query(
            "UPDATE desktops SET lease_expires_at = $4 \
             WHERE name = $1 AND task_id = $2 AND lease_owner = $3 RETURNING *",
        )
        .bind(name)
        .bind(session)
        .bind(worker)
        .bind(expiry(now(), lease))
        .fetch_optional(self.write())
        .await?;
        self.fenced_desktop(name, updated).await
    }

    #[instrument(name = "store.set_desktop_state", skip_all, fields(desktop = %name, ?change))]
    pub(super) async fn set_desktop_state_impl(
        &self,
        name: &str,
        change: DesktopChange,
    ) -> StoreResult<Desktop> {
        let statement = match change {
            DesktopChange::Drain => {
                "UPDATE desktops SET draining = TRUE WHERE name = $1 RETURNING *"
            }
            DesktopChange::Undrain => {
                "UPDATE desktops SET draining = FALSE WHERE name = $1 RETURNING *"
            }
            DesktopChange::Ready => {
                "UPDATE desktops SET state = CASE WHEN state = 'broken' THEN 'free' ELSE state END, \
                 reason = CASE WHEN state = 'broken' THEN '' ELSE reason END WHERE name = $1 RETURNING *"
            }
            DesktopChange::Unspecified => {
                return Err(StoreError::FailedPrecondition(
                    "a desktop change is drain, undrain or ready".into(),
                ));
            }
        };
        let frees = matches!(change, DesktopChange::Undrain | DesktopChange::Ready);
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            let row = query(statement)
                .bind(name)
                .fetch_optional(tx.conn())
                .await?;
            if row.is_some() && frees {
                signal_pool(&mut tx).await?;
            }
            Ok(row)
        }
        .await;
        let row = super::settle(tx, outcome)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("desktop {name}")))?;
        if frees {
            self.notifier.notify_pool();
        }
        desktop(&row)
    }

    #[instrument(name = "store.remove_desktop", skip_all, fields(desktop = %name))]
    pub(super) async fn remove_desktop_impl(&self, name: &str) -> StoreResult<()> {
        let removed = query("DELETE FROM desktops WHERE name = $1 AND task_id IS NULL")
            .bind(name)
            .execute(self.write())
            .await?;
        if removed == 0 {
            let stored = self.get_desktop_impl(name).await?;
            return Err(StoreError::FailedPrecondition(format!(
                "desktop {name} is checked out to session {}: drain it and remove it once it is free",
                stored.task_id
            )));
        }
        Ok(())
    }
}
