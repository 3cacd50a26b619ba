//! Counting the accessibility calls an operation makes to an application, for the tests and the
//! benchmark that hold the executor to "one call beyond the action itself": every reply (or error) the
//! application sends on the connection the backend uses for it is one call. A ping before and after
//! the operation brackets its replies (a connection receives in order), so the count is exact.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use tokio::sync::Notify;
use zbus::message::Type;

use super::atspi::{Atspi, ROOT_PATH, derr};
use crate::backend::{BackendError, BackendResult};

/// Replies received on one connection, in order, while it is watched.
struct Log {
    replies: Mutex<Vec<NonZeroU32>>,
    grew: Notify,
}

impl Atspi {
    /// The bus name of the application of process `pid` and the connection the backend calls it on
    /// (for tests and benchmarks that time the application's replies themselves).
    pub async fn application_connection(
        &self,
        pid: u32,
    ) -> BackendResult<(String, zbus::Connection)> {
        let bus = self.app_for_pid(pid).await?;
        let conn = self.conn_for(&bus).await;
        Ok((bus, conn))
    }

    /// Runs `op` and counts the calls it made to the application of process `pid` (its replies on the
    /// connection used for that application).
    pub async fn calls_during<F: std::future::Future>(
        &self,
        pid: u32,
        op: F,
    ) -> BackendResult<(F::Output, usize)> {
        let (bus, conn) = self.application_connection(pid).await?;
        let log = Arc::new(Log {
            replies: Mutex::new(Vec::new()),
            grew: Notify::new(),
        });
        let mut stream = zbus::MessageStream::from(&conn);
        let reader = {
            let log = log.clone();
            tokio::spawn(async move {
                while let Some(Ok(m)) = stream.next().await {
                    let header = m.header();
                    let reply = matches!(header.message_type(), Type::MethodReturn | Type::Error);
                    if let (true, Some(serial)) = (reply, header.reply_serial()) {
                        if let Ok(mut r) = log.replies.lock() {
                            r.push(serial);
                        }
                        log.grew.notify_waiters();
                    }
                }
            })
        };
        let ping = || async {
            conn.call_method(
                Some(bus.as_str()),
                ROOT_PATH,
                Some("org.freedesktop.DBus.Peer"),
                "Ping",
                &(),
            )
            .await
            .map_err(derr)
            .and_then(|reply| {
                reply
                    .header()
                    .reply_serial()
                    .ok_or_else(|| BackendError::Failed("a reply without a serial".into()))
            })
        };
        let first = ping().await;
        let out = op.await;
        let last = ping().await;
        let counted = match (first, last) {
            (Ok(first), Ok(last)) => tokio::time::timeout(
                std::time::Duration::from_secs(5),
                between(&log, first, last),
            )
            .await
            .map_err(|_| BackendError::Failed("the pings' replies were not seen".into())),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        reader.abort();
        Ok((out, counted?))
    }
}

/// The replies the log received after `first`'s and before `last`'s, once it has `last`'s.
async fn between(log: &Log, first: NonZeroU32, last: NonZeroU32) -> usize {
    loop {
        let grew = log.grew.notified();
        if let Ok(r) = log.replies.lock() {
            let at = |s: NonZeroU32| r.iter().position(|&x| x == s);
            if let (Some(a), Some(b)) = (at(first), at(last)) {
                return b.saturating_sub(a + 1);
            }
        }
        grew.await;
    }
}
