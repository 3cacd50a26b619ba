//! Screen change tracking for the settle protocol (see `executor.proto`, `Settle`): a thread with its own
//! X connection holds a DAMAGE object on the root window and counts every change the server reports
//! (without a compositor, drawing into any window damages the root). Observations wait on that count:
//! first for a change after the action's mark, then for a quiet time without changes, bounded by a
//! timeout. Nothing here sleeps a fixed time; waits end on events or on the bounds.

use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::damage::{ConnectionExt as _, ReportLevel};
use x11rb::protocol::xfixes::ConnectionExt as _;

use crate::backend::{SettleOptions, SettleOutcome, SettleReport};

/// How often the watcher thread checks whether it should stop while no event arrives.
const STOP_CHECK_MS: i32 = 250;

/// Counts screen changes on one display.
pub struct Damage {
    /// (changes seen so far, when the last one was seen).
    rx: watch::Receiver<(u64, Instant)>,
    stop: Arc<AtomicBool>,
}

impl Drop for Damage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Damage {
    /// Starts watching `display`; `None` when the server has no DAMAGE extension.
    pub fn start(display: Option<&str>) -> Option<Self> {
        let (conn, screen) = x11rb::connect(display).ok()?;
        let root = conn.setup().roots.get(screen)?.root;
        // DAMAGE needs XFIXES (its regions) negotiated first.
        conn.xfixes_query_version(5, 0).ok()?.reply().ok()?;
        conn.damage_query_version(1, 1).ok()?.reply().ok()?;
        let damage = conn.generate_id().ok()?;
        conn.damage_create(damage, root, ReportLevel::NON_EMPTY)
            .ok()?
            .check()
            .ok()?;
        let (tx, rx) = watch::channel((0u64, Instant::now()));
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::Builder::new()
            .name("x-damage".into())
            .spawn(move || {
                let fd = conn.stream().as_raw_fd();
                while !stopping.load(Ordering::Relaxed) {
                    let mut seen = false;
                    loop {
                        match conn.poll_for_event() {
                            Ok(Some(Event::DamageNotify(_))) => seen = true,
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(_) => return,
                        }
                    }
                    if seen {
                        // Empty the damage region so the next drawing is reported again.
                        if conn.damage_subtract(damage, 0u32, 0u32).is_err()
                            || conn.flush().is_err()
                        {
                            return;
                        }
                        tx.send_modify(|(n, at)| {
                            *n += 1;
                            *at = Instant::now();
                        });
                    }
                    let mut pfd = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    let r = unsafe { libc::poll(&mut pfd, 1, STOP_CHECK_MS) };
                    if r < 0
                        && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                    {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Self { rx, stop })
    }

    /// The number of changes seen so far (an action's mark).
    pub fn mark(&self) -> u64 {
        self.rx.borrow().0
    }

    /// Waits until the screen changed after `mark` (taken at `since`) and then stayed unchanged for
    /// `opts.quiet`, within the bounds of `opts`.
    pub async fn settle(&self, mark: u64, since: Instant, opts: &SettleOptions) -> SettleReport {
        let start = Instant::now();
        let deadline = start + opts.timeout;
        let report = |outcome| SettleReport {
            outcome,
            waited: start.elapsed(),
        };
        let mut rx = self.rx.clone();
        // First, a change after the action.
        let first_by = (since + opts.first_change).min(deadline);
        loop {
            if rx.borrow_and_update().0 > mark {
                break;
            }
            if Instant::now() >= first_by {
                return report(SettleOutcome::NoChange);
            }
            match tokio::time::timeout_at(first_by.into(), rx.changed()).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(_)) => return report(SettleOutcome::Unsupported),
            }
        }
        // Then quiet: no change for `quiet`.
        loop {
            let last = rx.borrow_and_update().1;
            let now = Instant::now();
            if now >= last + opts.quiet {
                return report(SettleOutcome::Settled);
            }
            if now >= deadline {
                return report(SettleOutcome::Timeout);
            }
            let until = (last + opts.quiet).min(deadline);
            if let Ok(Err(_)) = tokio::time::timeout_at(until.into(), rx.changed()).await {
                return report(SettleOutcome::Unsupported);
            }
        }
    }
}
