//! The X half of the settle protocol's activity log ([`super::activity`]): a thread with its own X
//! connection holds a DAMAGE object on the root window (without a compositor, drawing into any window
//! damages the root) and records every batch of drawing with its rectangles. Nothing here sleeps a
//! fixed time: the thread waits on the connection, waking only to check whether it should stop.

use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::damage::{ConnectionExt as _, ReportLevel};
use x11rb::protocol::xfixes::ConnectionExt as _;

use super::activity::{Activity, Area};

/// How often the watcher thread checks whether it should stop while no event arrives.
const STOP_CHECK_MS: i32 = 250;

/// Watches one display's drawing; stops when dropped.
pub struct Damage {
    stop: Arc<AtomicBool>,
}

impl Drop for Damage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Damage {
    /// Starts recording `display`'s drawing into `activity`; `None` when the server has no DAMAGE
    /// extension.
    pub fn start(display: Option<&str>, activity: Arc<Activity>) -> Option<Self> {
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
        // Each batch's damage is moved into this region and read back as rectangles.
        let parts = conn.generate_id().ok()?;
        conn.xfixes_create_region(parts, &[]).ok()?.check().ok()?;
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
                        // Empty the damage (so the next drawing is reported again), keeping what it
                        // held: the rectangles drawn since the last batch.
                        let fetched = conn
                            .damage_subtract(damage, 0u32, parts)
                            .ok()
                            .and_then(|_| conn.xfixes_fetch_region(parts).ok())
                            .and_then(|c| c.reply().ok());
                        let Some(region) = fetched else { return };
                        let areas: Vec<Area> = region
                            .rectangles
                            .iter()
                            .map(|r| (r.x, r.y, r.width, r.height))
                            .collect();
                        activity.drawn(areas);
                        // Waiting for the reply may have queued new events: read them first.
                        continue;
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
        Some(Self { stop })
    }
}
