//! A real, private, accessible X desktop for tests and benchmarks (this crate's and the end-to-end
//! tests'): Xvfb on a display number no other run uses, a private D-Bus session bus, the AT-SPI bus
//! launcher, the xfwm4 window manager, and applications started on it. Every step waits on a readiness
//! condition (never a fixed sleep); everything is torn down by the process ids recorded here.
//!
//! Applications are started without any inherited `NO_AT_BRIDGE` (it would hide them from AT-SPI).

#![allow(clippy::missing_errors_doc)]

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _};

use crate::backend::linux::LinuxBackend;
use crate::backend::{Backend, TreeLimits, WindowInfo};

/// How long any start-up step may take.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between readiness polls.
const POLL: Duration = Duration::from_millis(10);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A running private desktop; dropping it stops every process it started.
pub struct Desktop {
    display: String,
    bus_address: String,
    runtime_dir: std::path::PathBuf,
    /// Started processes, each the leader of its own process group, in start order.
    children: Vec<Child>,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop")
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

async fn poll<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > until {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

impl Desktop {
    /// Starts Xvfb (`width`×`height`×24), a session bus, the AT-SPI bus and xfwm4.
    pub async fn start(width: u32, height: u32) -> anyhow::Result<Self> {
        let runtime_dir = std::env::temp_dir().join(format!(
            "ufo-desktop-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(runtime_dir.join("cache"))?;
        let mut desk = Self {
            display: String::new(),
            bus_address: String::new(),
            runtime_dir,
            children: Vec::new(),
        };
        desk.start_xvfb(width, height).await?;
        desk.start_bus()?;
        desk.start_atspi().await?;
        desk.start_wm().await?;
        Ok(desk)
    }

    /// The X display, e.g. ":117".
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The private session bus address.
    pub fn bus_address(&self) -> &str {
        &self.bus_address
    }

    /// Environment a program needs to run on this desktop.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("DISPLAY".into(), self.display.clone()),
            ("DBUS_SESSION_BUS_ADDRESS".into(), self.bus_address.clone()),
            (
                "XDG_RUNTIME_DIR".into(),
                self.runtime_dir.display().to_string(),
            ),
            // GLib falls back to the cache directory for the AT-SPI bus socket (`~/.cache/at-spi/bus`)
            // when it does not use the runtime directory; a per-desktop cache keeps concurrent desktops
            // (parallel tests, a second test run) from sharing, and deleting, one socket.
            (
                "XDG_CACHE_HOME".into(),
                self.runtime_dir.join("cache").display().to_string(),
            ),
            ("GSETTINGS_BACKEND".into(), "memory".into()),
            ("GDK_BACKEND".into(), "x11".into()),
        ]
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env_remove("NO_AT_BRIDGE")
            .env_remove("WAYLAND_DISPLAY")
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        c
    }

    async fn start_xvfb(&mut self, width: u32, height: u32) -> anyhow::Result<()> {
        // A display number derived from the pid and a counter, skipping ones in use.
        let base = 200 + (std::process::id() % 400) * 8 + NEXT.fetch_add(1, Ordering::Relaxed) % 8;
        for n in (base..base + 400).map(|n| 200 + (n - 200) % 3_000) {
            if std::path::Path::new(&format!("/tmp/.X{n}-lock")).exists() {
                continue;
            }
            let mut child = Command::new("Xvfb")
                .args([
                    format!(":{n}"),
                    "-screen".into(),
                    "0".into(),
                    format!("{width}x{height}x24"),
                    "-nolisten".into(),
                    "tcp".into(),
                    "-noreset".into(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .context("cannot start Xvfb")?;
            let display = format!(":{n}");
            let until = Instant::now() + READY_TIMEOUT;
            loop {
                if x11rb::connect(Some(&display)).is_ok() {
                    self.display = display;
                    self.children.push(child);
                    return Ok(());
                }
                if child.try_wait()?.is_some() || Instant::now() > until {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
        }
        bail!("no free X display for Xvfb")
    }

    fn start_bus(&mut self) -> anyhow::Result<()> {
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("cannot start dbus-daemon")?;
        let out = child.stdout.take().context("no dbus-daemon stdout")?;
        self.children.push(child);
        // dbus-daemon prints its address once it listens: reading that line is the readiness check.
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        if line.trim().is_empty() {
            bail!("dbus-daemon printed no address");
        }
        self.bus_address = line.trim().to_owned();
        Ok(())
    }

    async fn start_atspi(&mut self) -> anyhow::Result<()> {
        let child = self
            .command("/usr/libexec/at-spi-bus-launcher")
            .arg("--launch-immediately")
            .spawn()
            .context("cannot start at-spi-bus-launcher")?;
        self.children.push(child);
        let session = zbus::connection::Builder::address(self.bus_address.as_str())?
            .build()
            .await?;
        poll("the AT-SPI bus", || {
            let session = session.clone();
            async move {
                let bus = atspi::proxy::bus::BusProxy::new(&session).await.ok()?;
                bus.get_address().await.ok().filter(|a| !a.is_empty())
            }
        })
        .await?;
        Ok(())
    }

    async fn start_wm(&mut self) -> anyhow::Result<()> {
        let child = self
            .command("xfwm4")
            .args(["--compositor=off", "--sm-client-disable"])
            .spawn()
            .context("cannot start xfwm4")?;
        self.children.push(child);
        let (conn, screen) = x11rb::connect(Some(&self.display))?;
        let root = conn.setup().roots[screen].root;
        let atom = conn
            .intern_atom(false, b"_NET_SUPPORTING_WM_CHECK")?
            .reply()?
            .atom;
        poll("the window manager", || {
            let ok = conn
                .get_property(false, root, atom, AtomEnum::WINDOW, 0, 1)
                .ok()
                .and_then(|c| c.reply().ok())
                .is_some_and(|r| r.value_len > 0);
            async move { ok.then_some(()) }
        })
        .await
    }

    /// A backend connected to this desktop.
    pub async fn backend(&self) -> anyhow::Result<LinuxBackend> {
        Ok(LinuxBackend::connect_to(Some(&self.display), Some(&self.bus_address)).await?)
    }

    /// Starts `program` on this desktop and waits until its window is listed and its controls are
    /// readable through AT-SPI; returns its pid and window.
    pub async fn launch(
        &mut self,
        backend: &dyn Backend,
        program: &str,
        args: &[&str],
    ) -> anyhow::Result<(u32, WindowInfo)> {
        let child = self
            .command(program)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let pid = child.id();
        self.children.push(child);
        let window = self.wait_window(backend, pid).await?;
        Ok((pid, window))
    }

    /// Waits until process `pid` has a titled top-level window whose accessible tree can be read.
    pub async fn wait_window(&self, backend: &dyn Backend, pid: u32) -> anyhow::Result<WindowInfo> {
        poll("the application window", || async move {
            let w = backend
                .windows()
                .await
                .ok()?
                .into_iter()
                .find(|w| w.pid == Some(pid) && !w.title.is_empty())?;
            let limits = TreeLimits {
                max_nodes: 10_000,
                max_depth: 64,
                deadline: Instant::now() + Duration::from_secs(5),
                max_value_chars: 0,
            };
            match backend.control_tree(&w, &limits).await {
                Ok(tree) => (tree.nodes.len() > 1).then_some(w),
                Err(e) => {
                    tracing::debug!(error = %e, pid, "application not readable yet");
                    None
                }
            }
        })
        .await
    }

    /// Stops a process this desktop started (and its process group).
    pub fn stop_process(&mut self, pid: u32) {
        if let Some(i) = self.children.iter().position(|c| c.id() == pid) {
            let mut c = self.children.remove(i);
            stop(&mut c);
        }
    }
}

/// SIGTERM to the process group, then SIGKILL if it has not exited shortly after.
fn stop(child: &mut Child) {
    let Ok(pid) = i32::try_from(child.id()) else {
        return;
    };
    // SAFETY: signalling a process group we created; no memory is involved.
    unsafe {
        libc::kill(-pid, libc::SIGTERM);
    }
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    let _ = child.wait();
}

impl Drop for Desktop {
    fn drop(&mut self) {
        while let Some(mut c) = self.children.pop() {
            stop(&mut c);
        }
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}
