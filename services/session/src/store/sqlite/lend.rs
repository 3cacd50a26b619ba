//! SQLite connections lent without sqlx's pool.
//!
//! sqlx's pool pings a connection every time one is returned to it (and, by default, before lending it
//! again). On SQLite a ping is a round trip to the connection's worker thread: two thread wake-ups and a
//! spawned task per return, and the single writer could not be lent again before the ping of its last
//! return had come back. A SQLite connection's worker runs its commands in order, so there is nothing to
//! flush: what a dropped statement left queued runs before the next borrower's first command.
//!
//! Transactions are plain `BEGIN` / `COMMIT` / `ROLLBACK` statements, not sqlx's transaction commands:
//! the worker answers those only once the caller has acknowledged the answer (one more round trip between
//! the threads each). A transaction dropped before it ended (an error, a cancelled call) is rolled back
//! when its connection is next lent, before the borrower's first statement. A connection whose worker is
//! gone (`WorkerCrashed`, an I/O error) is not lent again: the next borrower opens a new one.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection as _, SqliteConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a borrower waits for a connection (sqlx's pool default) before `PoolTimedOut`.
const WAIT: Duration = Duration::from_secs(30);

/// An open connection and whether a transaction may still be open on it.
struct Held {
    conn: SqliteConnection,
    /// `BEGIN` was sent and neither `COMMIT` nor `ROLLBACK` is known to have ended it.
    in_transaction: bool,
}

/// At most `size` connections to one SQLite file, opened on first need and kept.
pub(crate) struct Connections {
    options: SqliteConnectOptions,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Held>>,
}

impl Connections {
    /// A set of at most `size` (≥ 1) connections opened with `options`.
    pub(crate) fn new(options: SqliteConnectOptions, size: u32) -> Arc<Self> {
        Arc::new(Self {
            options,
            permits: Arc::new(Semaphore::new(size.max(1) as usize)),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Lends a connection: an idle one, or a new one while fewer than `size` are open. Waits for a
    /// returned one otherwise, at most [`WAIT`].
    pub(crate) async fn lend(self: &Arc<Self>) -> Result<Lent, sqlx::Error> {
        // A free connection is lent without arming the timer.
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::time::timeout(WAIT, Arc::clone(&self.permits).acquire_owned())
                .await
                .map_err(|_| sqlx::Error::PoolTimedOut)?
                .map_err(|_| sqlx::Error::PoolClosed)?,
        };
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let held = match idle {
            Some(held) => held,
            None => Held {
                conn: SqliteConnection::connect_with(&self.options).await?,
                in_transaction: false,
            },
        };
        let mut lent = Lent {
            held: Some(held),
            broken: false,
            home: Arc::clone(self),
            _permit: permit,
        };
        if lent.held().in_transaction {
            // "no transaction is active" when it had ended after all (a COMMIT whose answer was not
            // awaited): nothing to undo.
            let rolled = lent.run("ROLLBACK").await;
            if lent.broken {
                rolled?;
            }
            lent.held().in_transaction = false;
        }
        Ok(lent)
    }

    /// How many connections are open and idle (tests).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A lent connection; dropping it gives it back (or closes it when it broke).
pub(crate) struct Lent {
    /// Taken only by `drop`.
    held: Option<Held>,
    /// The worker is gone: close the connection instead of giving it back.
    broken: bool,
    home: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Lent {
    fn held(&mut self) -> &mut Held {
        self.held
            .as_mut()
            .unwrap_or_else(|| unreachable!("a lent connection is present until dropped"))
    }

    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.held().conn
    }

    /// Looks at the outcome of a command on this connection: after an error saying the worker is gone,
    /// the connection is closed instead of lent again.
    pub(crate) fn note<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
        if let Err(sqlx::Error::WorkerCrashed | sqlx::Error::Io(_)) = outcome {
            tracing::warn!("a SQLite connection's worker is gone; it is closed, not lent again");
            self.broken = true;
        }
    }

    /// Runs one statement without values (a transaction's own).
    async fn run(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        let outcome = sqlx::query(sql).execute(self.conn()).await.map(drop);
        self.note(&outcome);
        outcome
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(held) = self.held.take().filter(|_| !self.broken) {
            self.home
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(held);
        }
    }
}

/// Where a transaction's `BEGIN` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Begin {
    /// Not sent yet: it leads the transaction's next command.
    Pending,
    /// Sent at the head of a command that has not answered (or failed before it did): it may have run.
    Sent,
    /// Ran: its command's first result came back.
    Ran,
}

/// A transaction on a lent connection. Its `BEGIN` is not sent on its own: it leads the transaction's
/// first command (see [`WriteTx::parts`]), one round trip fewer. Dropped before it ended, it is rolled
/// back when the connection is next lent.
pub(crate) struct WriteTx {
    lent: Lent,
    begin: Begin,
}

impl WriteTx {
    /// Begins a transaction on `lent` (nothing is sent yet).
    pub(crate) fn begin(mut lent: Lent) -> Self {
        lent.held().in_transaction = true;
        Self {
            lent,
            begin: Begin::Pending,
        }
    }

    /// The transaction's connection, and where its `BEGIN` is (whoever sends a command while it is not
    /// [`Begin::Ran`] puts it at the head and moves it on).
    pub(crate) fn parts(&mut self) -> (&mut SqliteConnection, &mut Begin) {
        let conn = &mut self
            .lent
            .held
            .as_mut()
            .unwrap_or_else(|| unreachable!("a lent connection is present until dropped"))
            .conn;
        (conn, &mut self.begin)
    }

    /// Commits.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.end("COMMIT").await
    }

    /// Rolls back.
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.end("ROLLBACK").await
    }

    /// The caller's own `COMMIT` (the last statement of its last command) succeeded.
    pub(crate) fn ended_by_caller(mut self) {
        self.lent.held().in_transaction = false;
    }

    /// Nothing to end when nothing was sent; otherwise `sql` (its failure leaves the connection marked
    /// "maybe in a transaction", rolled back when next lent).
    async fn end(mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        if self.begin != Begin::Pending {
            self.lent.run(sql).await?;
        }
        self.lent.held().in_transaction = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::str::FromStr as _;

    use sqlx::Row as _;

    use super::*;

    fn options(dir: &tempfile::TempDir) -> SqliteConnectOptions {
        SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("lend.sqlite3"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
    }

    /// A transaction whose `BEGIN` was sent (the store sends it with its first statement).
    async fn begun(set: &Arc<Connections>) -> WriteTx {
        let mut tx = WriteTx::begin(set.lend().await.unwrap());
        let (conn, pending) = tx.parts();
        sqlx::query("BEGIN").execute(conn).await.unwrap();
        *pending = Begin::Ran;
        tx
    }

    async fn count(set: &Arc<Connections>) -> i64 {
        let mut lent = set.lend().await.unwrap();
        sqlx::query("SELECT count(*) FROM t")
            .fetch_one(lent.conn())
            .await
            .unwrap()
            .get(0)
    }

    /// Connections are opened on need, reused, and never more than `size` at once; a borrower beyond
    /// that waits for one to come back.
    #[tokio::test]
    async fn connections_are_reused_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let set = Connections::new(options(&dir), 2);
        let a = set.lend().await.unwrap();
        let b = set.lend().await.unwrap();
        assert_eq!(set.idle(), 0);
        let third = tokio::spawn({
            let set = Arc::clone(&set);
            async move { set.lend().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(
            !third.is_finished(),
            "a third borrower waits while two are lent"
        );
        drop(a);
        third.await.unwrap().unwrap();
        drop(b);
        assert_eq!(
            set.idle(),
            2,
            "both connections are kept for the next borrowers"
        );
    }

    /// A transaction dropped without commit is rolled back before the next borrower's statements; one
    /// committed is kept; one rolled back leaves nothing.
    #[tokio::test]
    async fn a_dropped_transaction_is_rolled_back_before_the_next_borrower() {
        let dir = tempfile::tempdir().unwrap();
        let set = Connections::new(options(&dir), 1);
        let mut lent = set.lend().await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(lent.conn())
            .await
            .unwrap();
        drop(lent);

        let mut tx = begun(&set).await;
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(tx.parts().0)
            .await
            .unwrap();
        drop(tx);
        assert_eq!(count(&set).await, 0, "the dropped transaction left no row");

        let mut tx = begun(&set).await;
        sqlx::query("INSERT INTO t VALUES (2)")
            .execute(tx.parts().0)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(count(&set).await, 0);

        let mut tx = begun(&set).await;
        sqlx::query("INSERT INTO t VALUES (3)")
            .execute(tx.parts().0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(count(&set).await, 1);

        // A transaction whose statement was cancelled mid-flight, then dropped: the next borrower can
        // begin a transaction of its own (none is left open) and sees only committed rows.
        let mut tx = begun(&set).await;
        {
            let insert = sqlx::query("INSERT INTO t VALUES (4)").execute(tx.parts().0);
            futures::pin_mut!(insert);
            let _ = futures::poll!(insert);
        }
        drop(tx);
        let mut tx = begun(&set).await;
        let rows: i64 = sqlx::query("SELECT count(*) FROM t")
            .fetch_one(tx.parts().0)
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows, 1);
        tx.commit().await.unwrap();
    }

    /// A connection left marked "maybe in a transaction" whose transaction had in fact ended (a COMMIT
    /// whose answer was never awaited) is lent as usual: the ROLLBACK's "no transaction" is no error.
    #[tokio::test]
    async fn an_ended_transaction_marked_open_is_lent_as_usual() {
        let dir = tempfile::tempdir().unwrap();
        let set = Connections::new(options(&dir), 1);
        let mut lent = set.lend().await.unwrap();
        lent.held().in_transaction = true;
        drop(lent);
        let mut tx = begun(&set).await;
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(tx.parts().0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(count(&set).await, 0);
    }

    /// A connection whose worker is gone is closed, and the next borrower gets a working new one.
    #[tokio::test]
    async fn a_broken_connection_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let set = Connections::new(options(&dir), 1);
        let mut lent = set.lend().await.unwrap();
        lent.note::<()>(&Err(sqlx::Error::WorkerCrashed));
        drop(lent);
        assert_eq!(set.idle(), 0, "the broken connection was not kept");
        let mut lent = set.lend().await.unwrap();
        let one: i64 = sqlx::query("SELECT 1")
            .fetch_one(lent.conn())
            .await
            .unwrap()
            .get(0);
        assert_eq!(one, 1);
    }
}
