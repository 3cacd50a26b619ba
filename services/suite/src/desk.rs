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
use x11rb::protocol::xproto::{ConfigureWindowAux, ConnectionExt as _};

use crate::task::SetupApp;

/// Pause between readiness polls.
const POLL: Duration = Duration::from_millis(50);

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

/// SIGTERM to a process group, then SIGKILL after `grace`.
async fn stop_group(pid: u32, grace: Duration) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: signalling a process group this suite created; no memory is involved.
    unsafe {
        libc::kill(-pid, libc::SIGTERM);
    }
    let until = Instant::now() + grace;
    // SAFETY: signal 0 only checks whether the group still exists.
    while Instant::now() < until && unsafe { libc::kill(-pid, 0) } == 0 {
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
        Ok(Self { desktop, backend })
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

    /// Starts `app` and waits until its window is listed with controls (at most `timeout`), then sizes it.
    /// Starts `app` and waits until its window is listed; `moved` places it elsewhere and larger than the
    /// task asks (a replay's desktop).
    pub async fn start_app(
        &self,
        app: &SetupApp,
        timeout: Duration,
        moved: bool,
    ) -> Result<RunningApp, DeskError> {
        let span = tracing::info_span!("suite.start_app", command = %app.command);
        self.launch(app, timeout, moved).instrument(span).await
    }

    async fn launch(
        &self,
        app: &SetupApp,
        timeout: Duration,
        moved: bool,
    ) -> Result<RunningApp, DeskError> {
        let mut command = tokio::process::Command::new(&app.command);
        command
            .args(&app.args)
            .env_remove("NO_AT_BRIDGE")
            .envs(self.env())
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
        if moved {
            // A replay's desktop differs from the recording's: the window elsewhere and larger.
            let (w, h) = app
                .size
                .unwrap_or((window.rect.width(), window.rect.height()));
            self.resize(
                &app.command,
                window.handle,
                Some((160, 120)),
                w + 120,
                h + 90,
            )
            .await?;
        } else if let Some((w, h)) = app.size {
            self.resize(&app.command, window.handle, None, w, h).await?;
        }
        Ok(running)
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
            if let Some(w) = window {
                let limits = TreeLimits {
                    max_nodes: 64,
                    max_depth: 8,
                    deadline: Instant::now() + Duration::from_secs(2),
                    max_value_chars: 0,
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

    async fn resize(
        &self,
        command: &str,
        window: u64,
        at: Option<(i32, i32)>,
        w: u32,
        h: u32,
    ) -> Result<(), DeskError> {
        let fail = |message: String| DeskError::Resize {
            command: command.to_owned(),
            message,
        };
        let window = u32::try_from(window).map_err(|_| fail("not an X11 window".into()))?;
        let (conn, _) = x11rb::connect(Some(self.display())).map_err(|e| fail(e.to_string()))?;
        let mut aux = ConfigureWindowAux::new().width(w).height(h);
        if let Some((x, y)) = at {
            aux = aux.x(x).y(y);
        }
        conn.configure_window(window, &aux)
            .map_err(|e| fail(e.to_string()))?;
        conn.flush().map_err(|e| fail(e.to_string()))?;
        // The window manager applies it asynchronously: wait until the client area has the size.
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let geometry = conn
                .get_geometry(window)
                .map_err(|e| fail(e.to_string()))?
                .reply()
                .map_err(|e| fail(e.to_string()))?;
            if (u32::from(geometry.width), u32::from(geometry.height)) == (w, h) {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(fail(format!(
                    "it stayed {}x{} instead of {w}x{h}",
                    geometry.width, geometry.height
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the task's applications and every window not in `baseline` (what the task itself opened),
    /// then waits (at most `timeout`) until the window list is back to the baseline.
    pub async fn clean_up(
        &self,
        apps: Vec<RunningApp>,
        baseline: &[WindowInfo],
        timeout: Duration,
    ) -> Result<(), DeskError> {
        let grace = Duration::from_secs(2);
        for app in &apps {
            if let Some(pid) = app.pid() {
                stop_group(pid, grace).await;
            }
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
