//! WatchEvents: replay a session's log from a sequence number, then follow it live.
//!
//! One producer task per watcher reads the store in pages from the next sequence number it owes the client
//! and pushes into a bounded channel (the per-watcher buffer). When it has caught up it sleeps on the
//! store's notification for the session — no polling. Because every delivery comes from a store read that
//! starts at the last delivered sequence number + 1, a watcher that fell behind (full buffer, missed
//! wake-ups while busy, a reconnected listener) catches up exactly: nothing is skipped or repeated, and
//! writers never wait for it.

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
    let span = tracing::info_span!("store.watch_events", session = %id, from_seq);
    tokio::spawn(
        async move {
            if let Err(error) = produce(&*store, id, from_seq.max(1), options, &tx).await {
                let _ = tx.send(Err(error)).await;
            }
        }
        .instrument(span),
    );
    rx
}

async fn produce(
    store: &dyn Store,
    id: Uuid,
    mut next: u64,
    options: WatchOptions,
    tx: &mpsc::Sender<Result<Event, StoreError>>,
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
        // Notifications up to here are covered by the read below; one arriving during it wakes us again.
        let announced = wakeups.mark_seen();
        let page = store.read_events(id, next, options.page).await?;
        let full = page.len() >= usize::try_from(options.page).unwrap_or(usize::MAX);
        for event in page {
            next = event.seq + 1;
            ended = terminal(&event);
            if tx.send(Ok(event)).await.is_err() {
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
