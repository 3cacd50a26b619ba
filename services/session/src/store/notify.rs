//! In-process fan-out of "session X has new events" to the watchers of this process.
//!
//! Each watched session has one `tokio::sync::watch` channel holding the newest sequence number known to be
//! committed. Writers (or the Postgres listener) only overwrite that value, so they never wait for a watcher
//! however slow it is; a watcher that wakes re-reads the store from the last sequence number it delivered,
//! so nothing is dropped or duplicated whatever it missed while busy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use uuid::Uuid;

/// Per-session wake-ups for watchers, and one pool-wide wake-up for claimers (issue 36).
#[derive(Debug)]
pub struct Notifier {
    sessions: Mutex<HashMap<Uuid, watch::Sender<u64>>>,
    /// Bumped whenever a waiting session may have become claimable (a desktop freed, registered, made
    /// ready): `WatchPool` streams follow it.
    pool: watch::Sender<u64>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self {
            sessions: Mutex::default(),
            pool: watch::channel(0).0,
        }
    }
}

impl Notifier {
    /// A notifier with no watchers.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Tells the watchers of `id` that events up to `seq` are committed. Never blocks.
    pub fn notify(&self, id: Uuid, seq: u64) {
        let sessions = self.lock();
        if let Some(sender) = sessions.get(&id) {
            sender.send_if_modified(|known| {
                let newer = seq > *known;
                if newer {
                    *known = seq;
                }
                newer
            });
        }
    }

    /// Wakes every watcher (after notifications may have been lost, e.g. a reconnected listener).
    pub fn wake_all(&self) {
        for sender in self.lock().values() {
            sender.send_modify(|_| {});
        }
        self.notify_pool();
    }

    /// Tells the pool's watchers that a waiting session may be claimable now. Never blocks.
    pub fn notify_pool(&self) {
        self.pool.send_modify(|seq| *seq = seq.wrapping_add(1));
    }

    /// Follows [`Notifier::notify_pool`].
    pub fn subscribe_pool(&self) -> watch::Receiver<u64> {
        self.pool.subscribe()
    }

    /// Starts watching `id`: later [`Notifier::notify`] calls for it wake the subscription.
    pub fn subscribe(self: &Arc<Self>, id: Uuid) -> Subscription {
        let receiver = self
            .lock()
            .entry(id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Subscription {
            id,
            receiver,
            notifier: Arc::clone(self),
        }
    }

    /// Number of sessions with at least one watcher.
    pub fn watched_sessions(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, watch::Sender<u64>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts/removes).
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A watcher's wake-up source for one session; unregisters itself when dropped.
#[derive(Debug)]
pub struct Subscription {
    id: Uuid,
    receiver: watch::Receiver<u64>,
    notifier: Arc<Notifier>,
}

impl Subscription {
    /// The newest sequence number announced so far (0 before any), marking every notification up to now as
    /// seen: [`changed`](Self::changed) then waits for a later one.
    pub fn mark_seen(&mut self) -> u64 {
        *self.receiver.borrow_and_update()
    }

    /// Waits until a notification arrives after the previous call (or after subscribing).
    pub async fn changed(&mut self) {
        // The sender lives in the notifier's map for as long as this subscription exists, so this cannot
        // fail; if it ever did, returning lets the caller re-read the store rather than hang.
        let _ = self.receiver.changed().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut sessions = self.notifier.lock();
        // This subscription's receiver is still alive here, hence "1".
        if sessions
            .get(&self.id)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            sessions.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notify_wakes_subscribers_and_dropping_the_last_one_cleans_up() {
        let notifier = Notifier::new();
        let id = Uuid::new_v4();
        notifier.notify(id, 1);
        let mut first = notifier.subscribe(id);
        let second = notifier.subscribe(id);
        notifier.notify(id, 2);
        first.changed().await;
        drop(second);
        assert_eq!(notifier.watched_sessions(), 1);
        drop(first);
        assert_eq!(notifier.watched_sessions(), 0);
    }
}
