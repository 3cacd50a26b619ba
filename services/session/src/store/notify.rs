//! In-process fan-out of "session X has new events" to the watchers of this process.
//!
//! Each watched session has one `tokio::sync::watch` channel holding the newest sequence number known to be
//! committed and, when this process committed them, the events of that commit ([`Announced`]). Writers (or
//! the Postgres listener) only overwrite that value, so they never wait for a watcher however slow it is.
//! A watcher that wakes takes the commit's events when they start where it stopped, and otherwise re-reads
//! the store from the last sequence number it delivered, so nothing is dropped or duplicated whatever it
//! missed while busy, and a watcher that keeps up does not read the store at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use ufo_proto::v1::Event;
use uuid::Uuid;

/// What a session's watchers were last told: events up to `seq` are committed, and `events` holds the
/// last commit's events (ending at `seq`) when this process made it.
#[derive(Debug, Clone, Default)]
pub struct Announced {
    /// The newest sequence number known to be committed (0 before any).
    pub seq: u64,
    /// The events of the commit that ended at `seq`, in order, as a read of the store returns them;
    /// `None` when the announcement came without them (another replica's commit, a wake-up).
    pub events: Option<Arc<[Event]>>,
}

impl Announced {
    /// The announced commit's events when they start exactly at `next` (what a watcher that delivered
    /// everything before `next` would read next), else `None`.
    pub fn events_from(&self, next: u64) -> Option<&[Event]> {
        self.events
            .as_deref()
            .filter(|events| events.first().is_some_and(|e| e.seq == next))
    }
}

/// Per-session wake-ups for watchers, and one pool-wide wake-up for claimers (issue 36).
#[derive(Debug)]
pub struct Notifier {
    sessions: Mutex<HashMap<Uuid, watch::Sender<Announced>>>,
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
        if let Some(sender) = self.lock().get(&id) {
            announce_to(sender, seq, None);
        }
    }

    /// Tells the watchers of `id` that `events` (one commit's, in sequence order, as a read of the store
    /// returns them) are committed, handing them over so that watchers up to date need not read them
    /// back. `events` is called only when someone watches the session. Never blocks.
    pub fn publish(&self, id: Uuid, events: impl FnOnce() -> Vec<Event>) {
        if let Some(sender) = self.lock().get(&id) {
            let events: Arc<[Event]> = events().into();
            if let Some(seq) = events.last().map(|e| e.seq) {
                announce_to(sender, seq, Some(events));
            }
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
            .or_insert_with(|| watch::channel(Announced::default()).0)
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, watch::Sender<Announced>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts/removes).
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Moves `sender`'s announcement on to `seq` (with `events`, the commit's, or none) if `seq` is newer,
/// waking the watchers. The same `seq` with events where the announcement had none (on Postgres the
/// listener often hears of this process's own commit first) adds them without waking anyone again: a
/// watcher woken by the first announcement that has not looked yet takes them.
fn announce_to(sender: &watch::Sender<Announced>, seq: u64, events: Option<Arc<[Event]>>) {
    sender.send_if_modified(|known| {
        if seq > known.seq {
            *known = Announced { seq, events };
            true
        } else {
            if seq == known.seq && known.events.is_none() {
                known.events = events;
            }
            false
        }
    });
}

/// A watcher's wake-up source for one session; unregisters itself when dropped.
#[derive(Debug)]
pub struct Subscription {
    id: Uuid,
    receiver: watch::Receiver<Announced>,
    notifier: Arc<Notifier>,
}

impl Subscription {
    /// The newest announcement so far (sequence number 0 before any), marking every notification up to
    /// now as seen: [`changed`](Self::changed) then waits for a later one.
    pub fn mark_seen(&mut self) -> Announced {
        self.receiver.borrow_and_update().clone()
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
