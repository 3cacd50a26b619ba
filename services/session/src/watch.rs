//! WatchEvents: replay a session's log from a sequence number, then follow it live.
//!
//! One producer task per watcher reads the store in pages from the next sequence number it owes the client
//! and pushes into a bounded channel (the per-watcher buffer). When it has caught up it sleeps on the
//! store's notification for the session — no polling. A commit of this process wakes it with the commit's
//! events: when they start at the next sequence number it owes, it delivers them as they are, without
//! reading the store (issue 37: watchers fed from the commit that woke them). Every other delivery comes
//! from a store read that starts at the last delivered sequence number + 1, so a watcher that fell behind
//! (full buffer, missed wake-ups while busy, another replica's commits, a reconnected listener) catches up
//! exactly: nothing is skipped or repeated, and writers never wait for it.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::Instrument as _;
use ufo_proto::v1::{Event, EventKind};
use uuid::Uuid;

use crate::store::{Store, StoreError, is_terminal_event};

/// How a watcher reads.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Events buffered for the client.
    pub buffer: usize,
    /// Events read from the store per query.
    pub page: u32,
    /// The kinds of event sent to the client.
    pub kinds: Kinds,
}

/// A set of event kinds: the ones a watcher sends (`WatchEventsRequest.kinds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds(u64);

impl Kinds {
    /// Every kind, including kinds added after this build (the default).
    pub const ALL: Self = Self(u64::MAX);

    /// Only `kinds`; an empty list means every kind. A value that is no known kind, or UNSPECIFIED, is
    /// returned as the error.
    pub fn only(kinds: impl IntoIterator<Item = i32>) -> Result<Self, i32> {
        let mut set = 0u64;
        for kind in kinds {
            match EventKind::try_from(kind) {
                Ok(EventKind::Unspecified) | Err(_) => return Err(kind),
                Ok(known) => set |= Self::bit(known as i32),
            }
        }
        Ok(if set == 0 { Self::ALL } else { Self(set) })
    }

    /// Whether events of `kind` are in the set.
    pub fn admits(self, kind: i32) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    fn bit(kind: i32) -> u64 {
        // Known kinds are below 64 (the proto's enum has 26); anything else maps to the top bit, which
        // only `ALL` holds.
        u32::try_from(kind)
            .ok()
            .and_then(|k| 1u64.checked_shl(k.min(63)))
            .unwrap_or(1 << 63)
    }
}

impl Default for Kinds {
    fn default() -> Self {
        Self::ALL
    }
}

fn terminal(event: &Event) -> bool {
    EventKind::try_from(event.kind).is_ok_and(is_terminal_event)
}

/// Starts watching session `id` from `from_seq` (1-based; 0 means 1). The receiver yields events in
/// sequence order; it ends after a terminal event with nothing after it, or with the store error that
/// stopped it. Dropping the receiver stops the producer.
pub fn watch(
    store: Arc<dyn Store>,
    id: Uuid,
    from_seq: u64,
    options: WatchOptions,
) -> mpsc::Receiver<Result<Event, StoreError>> {
    let (tx, rx) = mpsc::channel(options.buffer.max(1));
    let span = tracing::info_span!(
        "store.watch_events",
        session = %id,
        from_seq,
        fed = tracing::field::Empty,
        reads = tracing::field::Empty
    );
    tokio::spawn(
        async move {
            let mut counts = Counts::default();
            let outcome = produce(&*store, id, from_seq.max(1), options, &tx, &mut counts).await;
            let span = tracing::Span::current();
            span.record("fed", counts.fed);
            span.record("reads", counts.reads);
            if let Err(error) = outcome {
                let _ = tx.send(Err(error)).await;
            }
        }
        .instrument(span),
    );
    rx
}

/// How a watcher's deliveries were made: from the commit that woke it, or by reading the store.
#[derive(Debug, Default)]
struct Counts {
    fed: u64,
    reads: u64,
}

async fn produce(
    store: &dyn Store,
    id: Uuid,
    mut next: u64,
    options: WatchOptions,
    tx: &mpsc::Sender<Result<Event, StoreError>>,
    counts: &mut Counts,
) -> Result<(), StoreError> {
    // Subscribe before the first read so a commit between the read and the wait still wakes us.
    let mut wakeups = store.subscribe(id);
    // A client resuming after a terminal event (nothing after it) has nothing more to wait for.
    let mut ended = match next.checked_sub(1).filter(|&seen| seen >= 1) {
        Some(seen) => {
            let newest = store.get_session(id).await?.last_seq;
            newest >= 1
                && newest <= seen
                && store
                    .read_events(id, newest, 1)
                    .await?
                    .first()
                    .is_some_and(terminal)
        }
        None => false,
    };
    loop {
        // Notifications up to here are covered by what follows; one arriving meanwhile wakes us again.
        let announced = wakeups.mark_seen();
        // The commit that woke us, when it starts where we stopped: its events as the store would return
        // them, without reading them back. Otherwise (another replica's commit, commits we missed while
        // busy) a read from the last delivered sequence number.
        let (page, full) = match announced.events_from(next) {
            Some(events) => {
                counts.fed += 1;
                (events.to_vec(), false)
            }
            None => {
                counts.reads += 1;
                let page = store.read_events(id, next, options.page).await?;
                let full = page.len() >= usize::try_from(options.page).unwrap_or(usize::MAX);
                (page, full)
            }
        };
        let announced = announced.seq;
        for event in page {
            next = event.seq + 1;
            ended = terminal(&event);
            if options.kinds.admits(event.kind) && tx.send(Ok(event)).await.is_err() {
                return Ok(());
            }
        }
        // Read again at once when the page was full (more may be stored) or a newer commit was already
        // announced; otherwise everything committed is delivered: end after a terminal event, else wait.
        if full || announced >= next {
            continue;
        }
        if ended {
            return Ok(());
        }
        tokio::select! {
            () = wakeups.changed() => {}
            () = tx.closed() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_admit_what_was_asked_and_refuse_what_is_no_kind() {
        assert_eq!(Kinds::only([]), Ok(Kinds::ALL));
        let asked = [EventKind::CancelRequested, EventKind::QuestionAnswered];
        let only = Kinds::only(asked.map(|k| k as i32)).unwrap();
        assert!(only.admits(EventKind::CancelRequested as i32));
        assert!(only.admits(EventKind::QuestionAnswered as i32));
        assert!(!only.admits(EventKind::StepFinished as i32));
        assert!(
            !only.admits(9_999),
            "a kind from a newer build is not asked for"
        );
        assert!(Kinds::ALL.admits(9_999));
        assert_eq!(Kinds::only([0]), Err(0));
        assert_eq!(Kinds::only([3, -1]), Err(-1));
        assert_eq!(Kinds::only([1_000]), Err(1_000));
        // Every kind of this build has a bit of its own.
        for kind in 1..64 {
            if let Ok(known) = EventKind::try_from(kind) {
                assert!(kind < 63, "{known:?} needs a wider set");
                let one = Kinds::only([kind]).unwrap();
                assert!((1..64).filter(|&k| one.admits(k)).eq([kind]));
            }
        }
    }
}
