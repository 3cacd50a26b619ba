//! In-process fan-out of "session X has new events" to the watchers of this process.
//!
//! Each watched session has one `tokio::sync::watch` channel holding the newest sequence number known to be
//! committed and, when this process committed them, the events of that commit ([`Announced`]). Writers (or
//! the Postgres listener) only overwrite that value, so they never wait for a watcher however slow it is.
//! A watcher that wakes takes the commit's events when they start where it stopped, and otherwise re-reads
//! the store from the last sequence number it delivered, so nothing is dropped or duplicated whatever it
//! missed while busy, and a watcher that keeps up does not read the store at all.
//!
//! On Postgres the `LISTEN` connection also hears of this process's own commits, often before the writer
//! has handed their events over. A writer therefore says it is [`writing`](Notifier::writing) first: while
//! a write of this process to a session is in flight, the listener's wake-ups for that session are held
//! back, and released when the write ends (handed over, failed or cancelled), so a watcher woken by its
//! own replica's commit takes the commit's events instead of reading them back.

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

/// One watched session: its watchers' channel and this process's writes to it in flight.
#[derive(Debug)]
struct Watched {
    sender: watch::Sender<Announced>,
    /// Writes of this process to the session between [`Notifier::writing`] and their end.
    writes: u32,
    /// The newest sequence number the listener announced while `writes > 0` (0: none), announced when
    /// the last of them ends.
    held: u64,
}

/// Per-session wake-ups for watchers, and one pool-wide wake-up for claimers (issue 36).
#[derive(Debug)]
pub struct Notifier {
    sessions: Mutex<HashMap<Uuid, Watched>>,
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
        if let Some(watched) = self.lock().get(&id) {
            announce_to(&watched.sender, seq, None);
        }
    }

    /// What the Postgres listener calls for a commit it heard of (any replica's, this one's too): like
    /// [`notify`](Self::notify), but held back while this process has a write to `id` in flight (see
    /// [`writing`](Self::writing)). Never blocks.
    pub fn notify_heard(&self, id: Uuid, seq: u64) {
        if let Some(watched) = self.lock().get_mut(&id) {
            if watched.writes > 0 {
                watched.held = watched.held.max(seq);
            } else {
                announce_to(&watched.sender, seq, None);
            }
        }
    }

    /// Marks a write of this process to `id` as in flight until the returned guard is handed the
    /// commit's events ([`Writing::publish`]) or dropped (the write failed or was cancelled): meanwhile
    /// the listener's wake-ups for `id` wait ([`notify_heard`](Self::notify_heard)). Nothing is marked
    /// when no one watches `id`.
    pub fn writing(self: &Arc<Self>, id: Uuid) -> Writing {
        let marked = self.lock().get_mut(&id).is_some_and(|watched| {
            watched.writes += 1;
            true
        });
        Writing {
            notifier: Arc::clone(self),
            id,
            marked,
        }
    }

    /// Wakes every watcher (after notifications may have been lost, e.g. a reconnected listener).
    pub fn wake_all(&self) {
        for watched in self.lock().values() {
            watched.sender.send_modify(|_| {});
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
            .or_insert_with(|| Watched {
                sender: watch::channel(Announced::default()).0,
                writes: 0,
                held: 0,
            })
            .sender
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Watched>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts/removes).
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A write of this process to one session in flight ([`Notifier::writing`]).
#[derive(Debug)]
#[must_use = "the listener's wake-ups wait only while the guard lives"]
pub struct Writing {
    notifier: Arc<Notifier>,
    id: Uuid,
    /// Whether the session was watched when the write began (and `writes` counted it).
    marked: bool,
}

impl Writing {
    /// The write committed `events` (one commit's, in sequence order, as a read of the store returns
    /// them): hands them to the session's watchers so that watchers up to date need not read them back,
    /// then (on drop) releases any wake-up held back meanwhile. `events` is called only when someone
    /// watches the session. Never blocks.
    pub fn publish(self, events: impl FnOnce() -> Vec<Event>) {
        if let Some(watched) = self.notifier.lock().get(&self.id) {
            publish_to(&watched.sender, events);
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if !self.marked {
            return;
        }
        let mut sessions = self.notifier.lock();
        // A subscription keeps the entry while a watcher lives; once the last one is gone nothing waits.
        if let Some(watched) = sessions.get_mut(&self.id) {
            watched.writes = watched.writes.saturating_sub(1);
            if watched.writes == 0 && watched.held > 0 {
                let held = std::mem::take(&mut watched.held);
                announce_to(&watched.sender, held, None);
            }
        }
    }
}

/// Announces `events` (one commit's) on `sender`; `events` is called here.
fn publish_to(sender: &watch::Sender<Announced>, events: impl FnOnce() -> Vec<Event>) {
    let events: Arc<[Event]> = events().into();
    if let Some(seq) = events.last().map(|e| e.seq) {
        announce_to(sender, seq, Some(events));
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
            .is_some_and(|watched| watched.sender.receiver_count() <= 1)
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

    fn event(seq: u64) -> Event {
        Event {
            seq,
            ..Event::default()
        }
    }

    #[test]
    fn heard_commits_wait_for_the_writes_in_flight() {
        let notifier = Notifier::new();
        let id = Uuid::new_v4();
        assert!(
            !notifier.writing(id).marked,
            "nobody watches: nothing to mark"
        );
        let mut sub = notifier.subscribe(id);

        // This process's own commit: the listener hears it first, the writer hands the events over.
        let writing = notifier.writing(id);
        notifier.notify_heard(id, 1);
        assert!(!sub.receiver.has_changed().unwrap(), "held while writing");
        writing.publish(|| vec![event(1)]);
        assert!(sub.receiver.has_changed().unwrap());
        let seen = sub.mark_seen();
        assert_eq!(seen.events_from(1).map(<[Event]>::len), Some(1));

        // A write that fails or is cancelled releases what was heard meanwhile.
        let writing = notifier.writing(id);
        notifier.notify_heard(id, 2);
        notifier.notify_heard(id, 3);
        assert!(!sub.receiver.has_changed().unwrap());
        drop(writing);
        let seen = sub.mark_seen();
        assert_eq!((seen.seq, seen.events.is_none()), (3, true));

        // Another replica's commit heard during this process's write: released with the write's own
        // announcement, which wakes once; the watcher, owed 4, reads 4 and 5 from the store.
        let writing = notifier.writing(id);
        notifier.notify_heard(id, 4);
        writing.publish(|| vec![event(5)]);
        let seen = sub.mark_seen();
        assert_eq!(seen.seq, 5);
        assert!(seen.events_from(4).is_none());
        assert!(
            !sub.receiver.has_changed().unwrap(),
            "4 is older: no second wake-up"
        );

        // Two writes in flight: the heard commit waits for both.
        let (a, b) = (notifier.writing(id), notifier.writing(id));
        notifier.notify_heard(id, 6);
        drop(a);
        assert!(!sub.receiver.has_changed().unwrap());
        drop(b);
        assert_eq!(sub.mark_seen().seq, 6);

        // Without a write in flight the listener wakes at once.
        notifier.notify_heard(id, 7);
        assert_eq!(sub.mark_seen().seq, 7);
    }
}
