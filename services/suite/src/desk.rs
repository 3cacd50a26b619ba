//! The suite's one shared desktop and the applications a task starts on it: a private accessible Xvfb
//! desktop (the executor crate's [`Desktop`]), applications started with its environment in their own
//! process groups, each awaited until its window is listed and shows controls (readiness, never a fixed
//! sleep), resized when the task asks, and torn down after the task together with any window the task
//! itself opened, until the window list is back to what it was.
//!
//! Readiness and clean-up read the window list through the executor crate's Linux backend; what a task
//! achieved is never judged here (see [`crate::check`], which uses an independent tool).

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt as _;
use tokio::sync::Mutex;
use tracing::Instrument as _;
use ufo_executor::backend::linux::LinuxBackend;
use ufo_executor::backend::{Backend as _, TreeLimits, WindowInfo};
use ufo_executor::desktop::Desktop;
use x11rb::connection::Connection as _;
use x11rb::properties::WmSizeHints;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConfigureWindowAux, ConnectionExt as _, EventMask,
};

pub use crate::report::Placed;
use crate::task::SetupApp;

/// Pause between readiness polls.
const POLL: Duration = Duration::from_millis(50);

/// How much a replay grows a window, width and height.
const GROW: (u32, u32) = (120, 90);
/// Room a replayed window keeps from each screen edge (the window frame's title bar fits in it).
const EDGE: i32 = 40;

/// The sizes a window may have (its `WM_NORMAL_HINTS`): `min` and `max` client size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeHints {
    /// Smallest width and height.
    pub min: (i32, i32),
    /// Largest width and height.
    pub max: (i32, i32),
}

impl Default for SizeHints {
    fn default() -> Self {
        Self {
            min: (1, 1),
            max: (i32::MAX, i32::MAX),
        }
    }
}

/// A replay's frame position and client size for a window recorded at `was` (client area) on a
/// `screen`, its frame `[left, right, top, bottom]` borders around the client area: larger by [`GROW`]
/// where the screen and the window's size hints allow (with [`EDGE`] pixels to spare on every side, else
/// none), else smaller by as much, else the same (a fixed-size window); moved to the other side of the
/// screen so all of it stays visible — but for a window whose minimum size is larger than the screen,
/// which keeps its left or top edge on the screen.
pub fn replay_rect(
    was: [i32; 4],
    screen: (u32, u32),
    hints: SizeHints,
    frame: [i32; 4],
) -> (i32, i32, u32, u32) {
    let (sw, sh) = (screen.0 as i32, screen.1 as i32);
    let (w, h) = (was[2] - was[0], was[3] - was[1]);
    // The client sizes that fit on the screen with the frame, with and without the margins.
    let (fit_w, fit_h) = (sw - frame[0] - frame[1], sh - frame[2] - frame[3]);
    let size = |len: i32, grow: i32, min: i32, max: i32, fit: i32| {
        let lo = min.max(1);
        for room in [fit - 2 * EDGE, fit] {
            let bigger = (len + grow).min(max).min(room);
            if bigger > len && bigger >= lo {
                return bigger;
            }
        }
        (len - grow).min(fit).max(lo)
    };
    let nw = size(w, GROW.0 as i32, hints.min.0, hints.max.0, fit_w);
    let nh = size(h, GROW.1 as i32, hints.min.1, hints.max.1, fit_h);
    // The side of the screen the window was not on; when that puts it where it was (a window about
    // as large as the screen), the other end of the little room there is.
    let other_side = |at: i32, len: i32, new: i32, screen: i32, (lead, trail): (i32, i32)| {
        let outer = new + lead + trail;
        let margin = if outer + 2 * EDGE <= screen { EDGE } else { 0 };
        let (near, far) = (margin, (screen - margin - outer).max(0));
        let (go, stay) = if at + len / 2 < screen / 2 {
            (far, near)
        } else {
            (near, far)
        };
        if go + lead == at { stay } else { go }
    };
    (
        other_side(was[0], w, nw, sw, (frame[0], frame[1])),
        other_side(was[1], h, nh, sh, (frame[2], frame[3])),
        nw as u32,
        nh as u32,
    )
}

/// The client area of `window` on the screen.
fn client_rect(
    conn: &impl x11rb::connection::Connection,
    window: u32,
) -> Result<[i32; 4], x11rb::errors::ReplyError> {
    let g = conn.get_geometry(window)?.reply()?;
    let t = conn.translate_coordinates(window, g.root, 0, 0)?.reply()?;
    let (x, y) = (i32::from(t.dst_x), i32::from(t.dst_y));
    Ok([x, y, x + i32::from(g.width), y + i32::from(g.height)])
}

/// Why the desktop or an application did not come up or go away.
#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    /// The desktop did not start.
    #[error("the suite's desktop did not start")]
    Desktop(#[from] ufo_executor::desktop::DesktopError),
    /// The backend could not connect or read.
    #[error("cannot read the desktop: {0}")]
    Backend(String),
    /// A program could not be started.
    #[error("cannot start {command}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program's window did not become ready.
    #[error(
        "{command} showed no window titled like {window:?} with controls within {waited:?} (windows: {seen})"
    )]
    NotReady {
        /// The program.
        command: String,
        /// The title wanted.
        window: String,
        /// How long the suite waited.
        waited: Duration,
        /// The windows listed meanwhile.
        seen: String,
    },
    /// The window could not be resized.
    #[error("cannot resize the window of {command}: {message}")]
    Resize {
        /// The program.
        command: String,
        /// Why.
        message: String,
    },
}

fn backend_err(e: impl std::fmt::Display) -> DeskError {
    DeskError::Backend(e.to_string())
}

/// The desktop every task runs on.
pub struct Desk {
    desktop: Desktop,
    backend: LinuxBackend,
    screen: (u32, u32),
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk")
            .field("display", &self.desktop.display())
            .finish_non_exhaustive()
    }
}

/// An application a task started.
#[derive(Debug)]
pub struct RunningApp {
    /// Its command.
    pub command: String,
    child: tokio::process::Child,
    stdout: Option<Arc<Mutex<Vec<u8>>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// How an application ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code (None when killed by a signal).
    pub code: Option<i32>,
    /// What it printed.
    pub stdout: String,
}

impl RunningApp {
    /// Waits (at most `timeout`) for it to exit and returns its code and output; None if it still runs.
    pub async fn exit(&mut self, timeout: Duration) -> Option<Exit> {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()?
            .ok()?;
        // The pipe closes when the program exits: the reader then has everything.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(timeout, reader).await;
        }
        let stdout = match &self.stdout {
            Some(buf) => String::from_utf8_lossy(&buf.lock().await).into_owned(),
            None => String::new(),
        };
        Some(Exit {
            code: status.code(),
            stdout,
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// SIGTERM to the application's process group, then SIGKILL after `grace` to what is left of it.
///
/// The group's leader is the suite's own child: once it exits it stays a zombie, still a member of its
/// group, until it is reaped, so the wait reaps it as it goes. (Without that every application that was
/// still running at the end of a task held the clean-up for the whole grace, 2 s per application.)
async fn stop_group(app: &mut RunningApp, grace: Duration) {
    let Some(pid) = app.pid() else { return };
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: signalling a process group this suite created; no memory is involved.
    unsafe {
        libc::kill(-pid, libc::SIGTERM);
    }
    let until = Instant::now() + grace;
    loop {
        // Reaps the leader once it has exited (an error leaves it to the SIGKILL below).
        let _ = app.child.try_wait();
        // SAFETY: signal 0 only checks whether the group still has a member.
        if unsafe { libc::kill(-pid, 0) } != 0 {
            return;
        }
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

fn titles(windows: &[WindowInfo]) -> String {
    windows
        .iter()
        .map(|w| format!("{:?} ({})", w.title, w.process_name))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Desk {
    /// Starts a `width`×`height` desktop and connects to it.
    pub async fn start(width: u32, height: u32) -> Result<Self, DeskError> {
        let desktop = Desktop::start(width, height).await?;
        let backend =
            LinuxBackend::connect_to(Some(desktop.display()), Some(desktop.bus_address()))
                .await
                .map_err(backend_err)?;
        Ok(Self {
            desktop,
            backend,
            screen: (width, height),
        })
    }

    /// The environment a program needs to run on it.
    pub fn env(&self) -> Vec<(String, String)> {
        self.desktop.env()
    }

    /// Its X display.
    pub fn display(&self) -> &str {
        self.desktop.display()
    }

    /// The windows listed now.
    pub async fn windows(&self) -> Result<Vec<WindowInfo>, DeskError> {
        self.backend.windows().await.map_err(backend_err)
    }

    /// Starts `app` and waits until its window is listed with controls (at most `timeout`), then sizes it
    /// as the task asks; with `recorded` (a replay: the window's rectangle when the task was recorded)
    /// it moves and resizes it instead (see [`replay_rect`]). Returns the app and where its window is.
    /// `home` is the task's private home and XDG folders ([`crate::home::TaskHome::env`]).
    pub async fn start_app(
        &self,
        app: &SetupApp,
        timeout: Duration,
        recorded: Option<Placed>,
        home: &[(String, String)],
    ) -> Result<(RunningApp, Placed), DeskError> {
        let span = tracing::info_span!("suite.start_app", command = %app.command);
        self.launch(app, timeout, recorded, home)
            .instrument(span)
            .await
    }

    async fn launch(
        &self,
        app: &SetupApp,
        timeout: Duration,
        recorded: Option<Placed>,
        home: &[(String, String)],
    ) -> Result<(RunningApp, Placed), DeskError> {
        let mut command = tokio::process::Command::new(&app.command);
        command
            .args(&app.args)
            .env_remove("NO_AT_BRIDGE")
            .envs(self.env())
            .envs(home.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(if app.output {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| DeskError::Spawn {
            command: app.command.clone(),
            source,
        })?;
        let (stdout, reader) = match child.stdout.take() {
            Some(mut out) => {
                let buf = Arc::new(Mutex::new(Vec::new()));
                let sink = buf.clone();
                let reader = tokio::spawn(async move {
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = out.read(&mut chunk).await {
                        if n == 0 {
                            break;
                        }
                        sink.lock().await.extend_from_slice(&chunk[..n]);
                    }
                });
                (Some(buf), Some(reader))
            }
            None => (None, None),
        };
        let running = RunningApp {
            command: app.command.clone(),
            child,
            stdout,
            reader,
        };
        let window = self.wait_ready(app, running.pid(), timeout).await?;
        let placed = match recorded {
            Some(was) => self.replace(&app.command, window.handle, was).await?,
            None => {
                if let Some((w, h)) = app.size {
                    self.configure(&app.command, window.handle, None, (w, h))
                        .await?;
                }
                Placed {
                    rect: self.rect_of(&app.command, window.handle)?,
                    ..Placed::default()
                }
            }
        };
        Ok((running, placed))
    }

    /// A replay's desktop differs from the recording's: the window moved and resized from where it was
    /// recorded (only moved when it has a fixed size), and all of it on the screen.
    async fn replace(&self, command: &str, window: u64, was: Placed) -> Result<Placed, DeskError> {
        let hints = self.size_hints(command, window)?;
        let frame = self.frame_extents(command, window)?;
        let (x, y, w, h) = replay_rect(was.rect, self.screen, hints, frame);
        self.configure(command, window, Some((x, y)), (w, h))
            .await?;
        let rect = self.rect_of(command, window)?;
        let (sw, sh) = (self.screen.0 as i32, self.screen.1 as i32);
        // A window whose minimum size is larger than the screen shows its left (top) part. Its
        // minimum may have grown meanwhile (the widget factory's depends on the page it shows).
        let now = self.size_hints(command, window)?;
        let min = (hints.min.0.max(now.min.0), hints.min.1.max(now.min.1));
        let too_wide = min.0 + frame[0] + frame[1] > sw;
        let too_tall = min.1 + frame[2] + frame[3] > sh;
        let inside = rect[0] >= 0
            && rect[1] >= 0
            && (rect[2] <= sw || too_wide)
            && (rect[3] <= sh || too_tall);
        if !inside || rect == was.rect {
            return Err(DeskError::Resize {
                command: command.to_owned(),
                message: format!(
                    "the replay's window ended at {rect:?} (recorded at {:?}): not moved onto the screen",
                    was.rect
                ),
            });
        }
        let resized = (rect[2] - rect[0], rect[3] - rect[1])
            != (was.rect[2] - was.rect[0], was.rect[3] - was.rect[1]);
        Ok(Placed {
            rect,
            resized,
            fixed_size: hints.min == hints.max,
            larger_than_screen: too_wide || too_tall,
        })
    }

    /// The window frame's borders around the client area, `[left, right, top, bottom]`
    /// (`_NET_FRAME_EXTENTS`; none when the window manager does not say).
    fn frame_extents(&self, command: &str, window: u64) -> Result<[i32; 4], DeskError> {
        let fail = |message: String| DeskError::Resize {
            command: command.to_owned(),
            message,
        };
        let window = u32::try_from(window).map_err(|_| fail("not an X11 window".into()))?;
        let conn = self.x11(command)?;
        let atom = conn
            .intern_atom(false, b"_NET_FRAME_EXTENTS")
            .map_err(|e| fail(e.to_string()))?
            .reply()
            .map_err(|e| fail(e.to_string()))?
            .atom;
        let reply = conn
            .get_property(false, window, atom, AtomEnum::CARDINAL, 0, 4)
            .map_err(|e| fail(e.to_string()))?
            .reply()
            .map_err(|e| fail(e.to_string()))?;
        let v: Vec<i32> = reply
            .value32()
            .into_iter()
            .flatten()
            .map(|x| i32::try_from(x).unwrap_or(0))
            .collect();
        Ok(match v.as_slice() {
            [l, r, t, b] => [*l, *r, *t, *b],
            _ => [0; 4],
        })
    }

    fn x11(&self, command: &str) -> Result<x11rb::rust_connection::RustConnection, DeskError> {
        x11rb::connect(Some(self.display()))
            .map(|(c, _)| c)
            .map_err(|e| DeskError::Resize {
                command: command.to_owned(),
                message: e.to_string(),
            })
    }

    /// The sizes the window manager lets the window have: a minimum equal to the maximum fixes it, as
    /// GTK does for a non-resizable dialog such as zenity's question.
    fn size_hints(&self, command: &str, window: u64) -> Result<SizeHints, DeskError> {
        let fail = |message: String| DeskError::Resize {
            command: command.to_owned(),
            message,
        };
        let window = u32::try_from(window).map_err(|_| fail("not an X11 window".into()))?;
        let conn = self.x11(command)?;
        let hints = WmSizeHints::get_normal_hints(&conn, window)
            .map_err(|e| fail(e.to_string()))?
            .reply()
            .map_err(|e| fail(e.to_string()))?;
        let any = SizeHints::default();
        Ok(match hints {
            Some(h) => SizeHints {
                min: h.min_size.unwrap_or(any.min),
                max: h.max_size.unwrap_or(any.max),
            },
            None => any,
        })
    }

    /// The window's client area on the screen, `[left, top, right, bottom]`.
    fn rect_of(&self, command: &str, window: u64) -> Result<[i32; 4], DeskError> {
        let fail = |message: String| DeskError::Resize {
            command: command.to_owned(),
            message,
        };
        let window = u32::try_from(window).map_err(|_| fail("not an X11 window".into()))?;
        let conn = self.x11(command)?;
        client_rect(&conn, window).map_err(|e| fail(e.to_string()))
    }

    async fn wait_ready(
        &self,
        app: &SetupApp,
        pid: Option<u32>,
        timeout: Duration,
    ) -> Result<WindowInfo, DeskError> {
        let started = Instant::now();
        let wanted = app.window.to_lowercase();
        let mut seen = Vec::new();
        loop {
            seen = self.windows().await.unwrap_or(seen);
            let window = seen
                .iter()
                .filter(|w| w.title.to_lowercase().contains(&wanted))
                .max_by_key(|w| w.pid.is_some() && w.pid == pid);
            if let Some(w) = window
                && !app.accessible
            {
                // No accessibility tree to wait for: listed (mapped by the window manager) is ready.
                return Ok(w.clone());
            }
            if let Some(w) = window {
                let limits = TreeLimits {
                    max_nodes: 64,
                    max_depth: 8,
                    deadline: Instant::now() + Duration::from_secs(2),
                    max_value_chars: 0,
                    bounds_of: None,
                };
                // Ready for the agent when its accessibility tree shows more than the frame.
                if let Ok(tree) = self.backend.control_tree(w, &limits).await
                    && tree.nodes.len() > 1
                {
                    return Ok(w.clone());
                }
            }
            if started.elapsed() > timeout {
                return Err(DeskError::NotReady {
                    command: app.command.clone(),
                    window: app.window.clone(),
                    waited: timeout,
                    seen: titles(&seen),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Asks the window manager to put the window at `at` (its frame's top-left) with a client area of
    /// `size`, and waits until it has that size and, when `at` is given, is there.
    async fn configure(
        &self,
        command: &str,
        window: u64,
        at: Option<(i32, i32)>,
        (w, h): (u32, u32),
    ) -> Result<(), DeskError> {
        let fail = |message: String| DeskError::Resize {
            command: command.to_owned(),
            message,
        };
        let window = u32::try_from(window).map_err(|_| fail("not an X11 window".into()))?;
        let conn = self.x11(command)?;
        // A maximized window (LibreOffice starts so) keeps its size whatever it is asked: the window
        // manager is asked to restore it first.
        unmaximize(&conn, window)
            .await
            .map_err(|e| fail(format!("cannot restore it from maximized: {e}")))?;
        let mut aux = ConfigureWindowAux::new().width(w).height(h);
        if let Some((x, y)) = at {
            aux = aux.x(x).y(y);
        }
        conn.configure_window(window, &aux)
            .map_err(|e| fail(e.to_string()))?;
        conn.flush().map_err(|e| fail(e.to_string()))?;
        // The window manager applies it asynchronously: wait until the client area has the size and
        // (when asked to move) another position.
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let now = client_rect(&conn, window).map_err(|e| fail(e.to_string()))?;
            let sized = ((now[2] - now[0]) as u32, (now[3] - now[1]) as u32) == (w, h);
            // The frame goes to `at`; the client area sits inside it, below the title bar.
            let moved = at.is_none_or(|(x, y)| {
                (0..=EDGE).contains(&(now[0] - x)) && (0..=EDGE).contains(&(now[1] - y))
            });
            if sized && moved {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(fail(format!(
                    "it stayed at {now:?} instead of {w}x{h}{}",
                    at.map(|(x, y)| format!(" at {x},{y}")).unwrap_or_default()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the task's applications and every window not in `baseline` (what the task itself opened),
    /// then waits (at most `timeout`) until the window list is back to the baseline.
    pub async fn clean_up(
        &self,
        mut apps: Vec<RunningApp>,
        baseline: &[WindowInfo],
        timeout: Duration,
    ) -> Result<(), DeskError> {
        let grace = Duration::from_secs(2);
        for app in &mut apps {
            stop_group(app, grace).await;
        }
        drop(apps);
        let known = |w: &WindowInfo| baseline.iter().any(|b| b.handle == w.handle);
        let until = Instant::now() + timeout;
        loop {
            let extra: Vec<WindowInfo> = self
                .windows()
                .await?
                .into_iter()
                .filter(|w| !known(w))
                .collect();
            if extra.is_empty() {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(DeskError::Backend(format!(
                    "windows left after the task: {}",
                    titles(&extra)
                )));
            }
            for pid in extra.iter().filter_map(|w| w.pid) {
                if let Ok(p) = i32::try_from(pid)
                    && p > 1
                    && pid != std::process::id()
                {
                    // SAFETY: ends a program the task opened on the suite's private desktop.
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Asks the window manager (EWMH `_NET_WM_STATE`, remove) to restore `window` from maximized, and waits
/// (at most 5 s) until its state no longer says maximized. Nothing is asked of a window that is not.
async fn unmaximize(
    conn: &x11rb::rust_connection::RustConnection,
    window: u32,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let atom = |name: &[u8]| -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
        Ok(conn.intern_atom(false, name)?.reply()?.atom)
    };
    let (state, vert, horz) = (
        atom(b"_NET_WM_STATE")?,
        atom(b"_NET_WM_STATE_MAXIMIZED_VERT")?,
        atom(b"_NET_WM_STATE_MAXIMIZED_HORZ")?,
    );
    let maximized = || -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        let reply = conn
            .get_property(false, window, state, AtomEnum::ATOM, 0, 64)?
            .reply()?;
        Ok(reply
            .value32()
            .into_iter()
            .flatten()
            .any(|a| a == vert || a == horz))
    };
    if !maximized()? {
        return Ok(());
    }
    let root = conn.setup().roots.first().ok_or("no X screen")?.root;
    // data: action 0 = remove, the two properties, source 1 = a normal application.
    let event = ClientMessageEvent::new(32, window, state, [0, vert, horz, 1, 0]);
    conn.send_event(
        false,
        root,
        EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
        event,
    )?;
    conn.flush()?;
    let until = Instant::now() + Duration::from_secs(5);
    while maximized()? {
        if Instant::now() > until {
            return Err("the window manager kept it maximized for 5 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_window_moves_and_changes_size_and_stays_on_the_screen() {
        let screen = (1280, 800);
        let any = SizeHints::default();
        let frame = [5, 5, 29, 5];
        let on_screen = |(x, y, w, h): (i32, i32, u32, u32)| {
            x >= 0
                && y >= 0
                && x + frame[0] + frame[1] + w as i32 <= 1280
                && y + frame[2] + frame[3] + h as i32 <= 800
        };
        // A mousepad window sized 900x650 where xfwm4 put it: larger, moved, all on the screen.
        let r = replay_rect([5, 29, 905, 679], screen, any, frame);
        assert_eq!((r.2, r.3), (1020, 686));
        assert!(on_screen(r) && (r.0, r.1) != (0, 0), "{r:?}");
        // A window that already fills the screen gets smaller.
        let r = replay_rect([5, 29, 1275, 795], screen, any, frame);
        assert_eq!((r.2, r.3), (1150, 676));
        assert!(on_screen(r), "{r:?}");
        // A small dialog in the middle-left goes right, larger.
        let r = replay_rect([100, 300, 400, 500], screen, any, frame);
        assert_eq!((r.2, r.3), (420, 290));
        assert_eq!(r.0 + 10 + 420, 1240, "{r:?}");
        assert!(on_screen(r), "{r:?}");
        // The widget factory: at least 1366x741, wider than the screen. It grows as tall as fits
        // without margins and keeps its left edge on the screen.
        let factory = SizeHints {
            min: (1366, 741),
            max: (i32::MAX, i32::MAX),
        };
        let r = replay_rect([0, 0, 1366, 741], screen, factory, frame);
        assert_eq!((r.0, r.1, r.2, r.3), (0, 0, 1366, 766));
        // The same window recorded at 1366x741 while its minimum was then 1277 wide (it depends on
        // the page shown), on a desktop without frames: as wide as its minimum and as tall as the
        // screen, it cannot go to the other side — it moves by the 3 pixels there are (CI, stop 49,
        // replayed it where it was).
        let narrower = SizeHints {
            min: (1277, 741),
            max: (i32::MAX, i32::MAX),
        };
        let r = replay_rect([0, 0, 1366, 741], screen, narrower, [0; 4]);
        assert_eq!((r.0, r.1, r.2, r.3), (3, 0, 1277, 800));
        // A fixed-size dialog only moves.
        let fixed = SizeHints {
            min: (300, 120),
            max: (300, 120),
        };
        let r = replay_rect([500, 300, 800, 420], screen, fixed, frame);
        assert_eq!((r.2, r.3), (300, 120));
        assert_eq!((r.0, r.1), (EDGE, 800 - EDGE - 120 - 34));
        assert!(on_screen(r));
    }
}
