//! The X half of the settle protocol's activity log ([`super::activity`]): a thread with its own X
//! connection holds a DAMAGE object on the root window (without a compositor, drawing into any window
//! damages the root) and records every batch of drawing with its rectangles. Nothing here sleeps a
//! fixed time: the thread waits on the connection, waking only to check whether it should stop.
//!
//! The same connection follows the root window's children (the window manager's frames and the
//! override-redirect menus and popups): each map, unmap, move or restack is recorded with where the
//! window was and is, so a settle wait scoped to the selected window also watches the dialogs and
//! menus an action opens.

use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::collections::HashMap;
use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::damage::{ConnectionExt as _, ReportLevel};

use x11rb::protocol::xfixes::ConnectionExt as _;
use x11rb::protocol::xproto::{
    ChangeWindowAttributesAux, ConnectionExt as _, EventMask, MapState, Window,
};

use super::activity::{Activity, Area};

/// A child of the root window: where it is, whether it bypasses the window manager (menus, popups,
/// tooltips) and whether it is mapped.
#[derive(Debug, Clone, Copy)]
struct Top {
    area: Area,
    override_redirect: bool,
    mapped: bool,
}

/// The root window's children, followed through SubstructureNotify events.
#[derive(Debug, Default)]
struct Tops(HashMap<Window, Top>);

impl Tops {
    /// The children now (one query at start; events keep it current afterwards).
    fn read(conn: &impl x11rb::connection::Connection, root: Window) -> Option<Self> {
        let tree = conn.query_tree(root).ok()?.reply().ok()?;
        let mut tops = HashMap::new();
        for w in tree.children {
            let attrs = conn
                .get_window_attributes(w)
                .ok()
                .and_then(|c| c.reply().ok());
            let geo = conn.get_geometry(w).ok().and_then(|c| c.reply().ok());
            if let (Some(a), Some(g)) = (attrs, geo) {
                tops.insert(
                    w,
                    Top {
                        area: (g.x, g.y, g.width, g.height),
                        override_redirect: a.override_redirect,
                        mapped: a.map_state != MapState::UNMAPPED,
                    },
                );
            }
        }
        Some(Self(tops))
    }

    /// The mapped override-redirect windows.
    fn popups(&self) -> Vec<Area> {
        self.0
            .values()
            .filter(|t| t.mapped && t.override_redirect)
            .map(|t| t.area)
            .collect()
    }

    /// Applies one event; the places it concerns when it changed something visible.
    fn apply(&mut self, root: Window, event: &Event) -> Option<Vec<Area>> {
        match event {
            Event::CreateNotify(e) if e.parent == root => {
                self.0.insert(
                    e.window,
                    Top {
                        area: (e.x, e.y, e.width, e.height),
                        override_redirect: e.override_redirect,
                        mapped: false,
                    },
                );
                None
            }
            Event::MapNotify(e) if e.event == root => {
                let t = self.0.entry(e.window).or_insert(Top {
                    area: (0, 0, 0, 0),
                    override_redirect: e.override_redirect,
                    mapped: false,
                });
                t.mapped = true;
                t.override_redirect = e.override_redirect;
                Some(vec![t.area])
            }
            Event::UnmapNotify(e) if e.event == root => {
                let t = self.0.get_mut(&e.window)?;
                t.mapped = false;
                Some(vec![t.area])
            }
            Event::ConfigureNotify(e) if e.event == root => {
                let t = self.0.get_mut(&e.window)?;
                let before = t.area;
                t.area = (e.x, e.y, e.width, e.height);
                t.override_redirect = e.override_redirect;
                t.mapped.then(|| vec![before, t.area])
            }
            Event::DestroyNotify(e) if e.event == root => {
                let t = self.0.remove(&e.window)?;
                t.mapped.then(|| vec![t.area])
            }
            _ => None,
        }
    }
}

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
        // The top-level windows: followed from here on (a failure only leaves settle waits without
        // them: the selected window's own rectangles still count).
        let followed = conn
            .change_window_attributes(
                root,
                &ChangeWindowAttributesAux::new().event_mask(EventMask::SUBSTRUCTURE_NOTIFY),
            )
            .ok()
            .and_then(|c| c.check().ok())
            .is_some();
        let mut tops = if followed {
            Tops::read(&conn, root).unwrap_or_default()
        } else {
            Tops::default()
        };
        activity.windows_changed(Vec::new(), tops.popups());
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
                            Ok(Some(e)) => {
                                if let Some(areas) = tops.apply(root, &e) {
                                    activity.windows_changed(areas, tops.popups());
                                }
                            }
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
