//! A private, accessible X desktop the executor can bring along (`ufo-executor --desktop headless`, which
//! `ufo up` uses on a machine without a display) and that tests and benchmarks run on: Xvfb on a display
//! number no other run uses, a private D-Bus session bus, the AT-SPI bus launcher and the xfwm4 window
//! manager. Every step waits on a readiness condition (never a fixed sleep); everything is torn down by
//! the process ids recorded here when the [`Desktop`] is dropped.
//!
//! Programs are started without any inherited `NO_AT_BRIDGE` (it would hide them from AT-SPI).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _};

/// How long any start-up step may take.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between readiness polls.
const POLL: Duration = Duration::from_millis(10);
/// Where Debian's at-spi2-core puts the AT-SPI bus launcher.
pub const ATSPI_BUS_LAUNCHER: &str = "/usr/libexec/at-spi-bus-launcher";
/// The session-bus name the launcher owns (and answers `GetAddress` on).
const ATSPI_BUS_NAME: &str = "org.a11y.Bus";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The runtime directories' name prefix: `ufo-desktop-PID-N` under the temporary directory.
const RUNTIME_DIR_PREFIX: &str = "ufo-desktop-";

/// Removes the runtime directories under `dir` that desktops of executors no longer running left
/// behind (a SIGKILLed executor cannot remove its own; its desktop's programs die with it), and says how
/// many it removed. A directory counts as left behind when the process its name carries is gone
/// (`/proc/PID` absent) and the directory is this user's; anything else is kept, and a failure to read or
/// remove one is logged, not returned: starting a desktop must not depend on it.
pub(crate) fn remove_stale_runtime_dirs(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUNTIME_DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, n)| n.parse::<u32>().is_ok())
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if !ours || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), pid, "removed a desktop runtime directory its executor left behind");
                removed += 1;
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a left-behind desktop runtime directory");
            }
        }
    }
    removed
}

/// Why a desktop could not start.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// A program could not be started (usually: its package is not installed).
    #[error("cannot start {program} (install the Debian packages {packages})")]
    Spawn {
        /// The program.
        program: String,
        /// What to install.
        packages: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A step did not become ready in time.
    #[error("timed out after {READY_TIMEOUT:?} waiting for {0}")]
    Timeout(&'static str),
    /// Xvfb exited without announcing a display (none free, or it could not start: run
    /// `Xvfb -displayfd 1` to see why).
    #[error("Xvfb printed no display number (run `Xvfb -displayfd 1` to see why it cannot start)")]
    NoDisplay,
    /// The session bus did not print its address.
    #[error("dbus-daemon printed no address")]
    NoBusAddress,
    /// A local failure (files, pipes).
    #[error("i/o failed while starting the desktop")]
    Io(#[from] std::io::Error),
    /// The session bus or AT-SPI could not be reached.
    #[error("cannot reach the session bus")]
    Bus(#[from] zbus::Error),
    /// The X server could not be queried.
    #[error("cannot query the X server: {0}")]
    X11(String),
}

const PACKAGES: &str = "xvfb dbus at-spi2-core xfwm4";

/// A running private desktop; dropping it stops every process it started.
pub struct Desktop {
    pub(crate) display: String,
    pub(crate) bus_address: String,
    pub(crate) runtime_dir: PathBuf,
    /// Started processes, each the leader of its own process group, in start order.
    pub(crate) children: Vec<(&'static str, Child)>,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop")
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

pub(crate) async fn poll<T, F, Fut>(what: &'static str, mut check: F) -> Result<T, DesktopError>
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
            return Err(DesktopError::Timeout(what));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn spawn(command: &mut Command, program: &str) -> Result<Child, DesktopError> {
    command.spawn().map_err(|source| DesktopError::Spawn {
        program: program.to_owned(),
        packages: PACKAGES,
        source,
    })
}

impl Desktop {
    /// Starts Xvfb (`width`×`height`×24), a session bus, the AT-SPI bus and xfwm4.
    pub async fn start(width: u32, height: u32) -> Result<Self, DesktopError> {
        Self::start_on(width, height, None).await
    }

    /// [`Desktop::start`] on display `:preferred` when it is free, else on one Xvfb chooses.
    pub async fn start_on(
        width: u32,
        height: u32,
        preferred: Option<u32>,
    ) -> Result<Self, DesktopError> {
        remove_stale_runtime_dirs(&std::env::temp_dir());
        let runtime_dir = std::env::temp_dir().join(format!(
            "{RUNTIME_DIR_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(runtime_dir.join("cache"))?;
        // The runtime directory must be private (GLib and D-Bus refuse or warn otherwise).
        std::fs::set_permissions(
            &runtime_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        let mut desk = Self {
            display: String::new(),
            bus_address: String::new(),
            runtime_dir,
            children: Vec::new(),
        };
        match preferred {
            Some(number) => {
                if let Err(e) = desk.start_xvfb(width, height, Some(number)).await {
                    tracing::warn!(
                        display = number,
                        error = %e,
                        "the preferred display is taken; choosing a free one"
                    );
                    desk.stop_children();
                    desk.start_xvfb(width, height, None).await?;
                }
            }
            None => desk.start_xvfb(width, height, None).await?,
        }
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

    /// The first essential desktop process (X server, session bus) that has exited, if any: a supervisor
    /// stops the executor then. The AT-SPI bus launcher may exit by itself once the accessibility bus
    /// runs, and the window manager is not essential to reading or driving applications.
    pub fn exited(&mut self) -> Option<String> {
        self.children
            .iter_mut()
            .filter(|(name, _)| matches!(*name, "Xvfb" | "dbus-daemon"))
            .find_map(|(name, child)| {
                child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|status| format!("{name} exited ({status})"))
            })
    }

    /// A command for `program` on this desktop, in its own process group, without NO_AT_BRIDGE, and
    /// stopped by the kernel when the executor dies (even by SIGKILL, when no `Drop` runs).
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env_remove("NO_AT_BRIDGE")
            .env_remove("WAYLAND_DISPLAY")
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // The AT-SPI bus launcher stops the accessibility bus it started when it is asked to quit, and
        // only then; the other programs have nothing to clean up.
        let signal = if program == ATSPI_BUS_LAUNCHER {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        };
        ufo_common::process::die_with_parent(&mut c, signal);
        c
    }

    /// Starts Xvfb on a display it chooses itself: with `-displayfd` the server binds each display
    /// number's sockets until it finds a free one and writes that number to its stdout once it accepts
    /// connections. Choosing the number here instead raced with concurrent desktops: two starts could
    /// pick the same free number, the losing Xvfb exited, and the loser's readiness check connected to
    /// the winner's server, so two desktops shared one display.
    ///
    /// With `number`, the server takes `:number` (and announces it the same way) or exits when it is
    /// taken.
    async fn start_xvfb(
        &mut self,
        width: u32,
        height: u32,
        number: Option<u32>,
    ) -> Result<(), DesktopError> {
        let mut command = Command::new("Xvfb");
        command
            .args(number.map(|n| format!(":{n}")))
            .args([
                "-displayfd".into(),
                "1".into(),
                "-screen".into(),
                "0".into(),
                format!("{width}x{height}x24"),
                "-nolisten".into(),
                "tcp".into(),
                "-noreset".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        ufo_common::process::die_with_parent(&mut command, libc::SIGKILL);
        let mut child = spawn(&mut command, "Xvfb")?;
        let out = child.stdout.take();
        // Recorded first, so the server is stopped (and the read below ends) if the start fails.
        self.children.push(("Xvfb", child));
        let out = out.ok_or(DesktopError::NoDisplay)?;
        let read = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).map(|_| line)
        });
        let line = match tokio::time::timeout(READY_TIMEOUT, read).await {
            Ok(Ok(read)) => read?,
            Ok(Err(e)) => return Err(std::io::Error::other(e).into()),
            Err(_) => return Err(DesktopError::Timeout("the X server")),
        };
        let number: u32 = line.trim().parse().map_err(|_| DesktopError::NoDisplay)?;
        self.display = format!(":{number}");
        Ok(())
    }

    /// Starts the session bus with this desktop's environment: services it activates (at-spi-bus-launcher
    /// when something asks for `org.a11y.Bus` before the launcher started here owns it) inherit it. With
    /// the caller's environment instead (no XDG_RUNTIME_DIR, no DISPLAY), an activated launcher put its
    /// accessibility bus at `~/.cache/at-spi/bus`, one path for every desktop on the machine: a second
    /// desktop's launcher replaced the first's socket, and the first's clients failed with "Server GUID
    /// mismatch" (the address they were given names the replaced daemon's GUID).
    fn start_bus(&mut self) -> Result<(), DesktopError> {
        let mut command = self.command("dbus-daemon");
        // The daemon tells the services it starts its own address.
        command
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped());
        let mut child = spawn(&mut command, "dbus-daemon")?;
        let out = child.stdout.take();
        self.children.push(("dbus-daemon", child));
        let out = out.ok_or(DesktopError::NoBusAddress)?;
        // dbus-daemon prints its address once it listens: reading that line is the readiness check.
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        if line.trim().is_empty() {
            return Err(DesktopError::NoBusAddress);
        }
        self.bus_address = line.trim().to_owned();
        Ok(())
    }

    async fn start_atspi(&mut self) -> Result<(), DesktopError> {
        let child = spawn(
            self.command(ATSPI_BUS_LAUNCHER).arg("--launch-immediately"),
            ATSPI_BUS_LAUNCHER,
        )?;
        self.children.push(("at-spi-bus-launcher", child));
        let session = zbus::connection::Builder::address(self.bus_address.as_str())?
            .build()
            .await?;
        // Asking `org.a11y.Bus` for its address before the launcher owns the name would make the session
        // bus activate a second launcher: wait for the owner first (NameHasOwner activates nothing).
        let dbus = zbus::fdo::DBusProxy::new(&session).await?;
        poll("the AT-SPI bus launcher", || {
            let dbus = dbus.clone();
            async move {
                let name = zbus::names::BusName::try_from(ATSPI_BUS_NAME).ok()?;
                dbus.name_has_owner(name).await.ok().filter(|&owned| owned)
            }
        })
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

    async fn start_wm(&mut self) -> Result<(), DesktopError> {
        let child = spawn(
            self.command("xfwm4")
                .args(["--compositor=off", "--sm-client-disable"]),
            "xfwm4",
        )?;
        self.children.push(("xfwm4", child));
        let x11 = |e: &dyn std::fmt::Display| DesktopError::X11(e.to_string());
        let (conn, screen) = x11rb::connect(Some(&self.display)).map_err(|e| x11(&e))?;
        let root = conn.setup().roots[screen].root;
        let atom = conn
            .intern_atom(false, b"_NET_SUPPORTING_WM_CHECK")
            .map_err(|e| x11(&e))?
            .reply()
            .map_err(|e| x11(&e))?
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

    /// Stops a process this desktop started (and its process group).
    pub fn stop_process(&mut self, pid: u32) {
        if let Some(i) = self.children.iter().position(|(_, c)| c.id() == pid) {
            let (_, mut c) = self.children.remove(i);
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
        self.stop_children();
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

impl Desktop {
    /// Stops every process started so far, newest first.
    fn stop_children(&mut self) {
        while let Some((_, mut c)) = self.children.pop() {
            stop(&mut c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_dirs_of_dead_executors_are_removed_and_no_other() {
        let tmp = tempfile::tempdir().unwrap();
        // A pid that ran and is gone: a child that exited and was reaped.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(!Path::new("/proc").join(dead.to_string()).exists());
        let live = std::process::id();
        let make = |name: &str| {
            let p = tmp.path().join(name);
            std::fs::create_dir_all(p.join("cache")).unwrap();
            std::fs::write(p.join("cache/bus"), b"x").unwrap();
            p
        };
        let stale = make(&format!("ufo-desktop-{dead}-0"));
        let stale2 = make(&format!("ufo-desktop-{dead}-7"));
        let running = make(&format!("ufo-desktop-{live}-0"));
        let unrelated = [
            make(&format!("ufo-desktop-{dead}")),
            make(&format!("ufo-desktop-{dead}-x")),
            make(&format!("other-{dead}-0")),
        ];
        let file = tmp.path().join(format!("ufo-desktop-{dead}-1"));
        std::fs::write(&file, b"not a directory").unwrap();

        assert_eq!(remove_stale_runtime_dirs(tmp.path()), 2);
        assert!(!stale.exists() && !stale2.exists());
        assert!(
            running.exists(),
            "a running executor's directory was removed"
        );
        for p in unrelated.iter().chain([&file]) {
            assert!(p.exists(), "{} was removed", p.display());
        }
        assert_eq!(remove_stale_runtime_dirs(tmp.path()), 0);
        assert_eq!(remove_stale_runtime_dirs(&tmp.path().join("absent")), 0);
    }

    /// The accessibility bus address `org.a11y.Bus` gives on `desk`'s session bus.
    async fn atspi_address(desk: &Desktop) -> String {
        let session = zbus::connection::Builder::address(desk.bus_address())
            .unwrap()
            .build()
            .await
            .unwrap();
        let bus = atspi::proxy::bus::BusProxy::new(&session).await.unwrap();
        poll("the AT-SPI bus", || {
            let bus = bus.clone();
            async move { bus.get_address().await.ok().filter(|a| !a.is_empty()) }
        })
        .await
        .unwrap()
    }

    /// Desktops started at once get a display each and keep their accessibility bus under their own
    /// runtime directory, also when the session bus activates the launcher itself (here after the one
    /// started at start-up was stopped): before, an activated launcher used `~/.cache/at-spi/bus`, one
    /// socket for every desktop, and concurrent desktops broke each other ("Server GUID mismatch").
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_desktops_keep_their_displays_and_buses_apart() {
        let desks = futures::future::join_all((0..4).map(|_| Desktop::start(320, 240))).await;
        let mut desks: Vec<Desktop> = desks.into_iter().map(Result::unwrap).collect();
        let mut displays: Vec<&str> = desks.iter().map(Desktop::display).collect();
        displays.sort_unstable();
        displays.dedup();
        assert_eq!(displays.len(), 4, "displays shared: {displays:?}");
        for desk in &mut desks {
            let own = format!("unix:path={}/", desk.runtime_dir.display());
            assert!(atspi_address(desk).await.starts_with(&own));
            let launcher = desk
                .children
                .iter()
                .find(|(name, _)| *name == "at-spi-bus-launcher")
                .map(|(_, c)| c.id())
                .unwrap();
            desk.stop_process(launcher);
            let activated = atspi_address(desk).await;
            assert!(
                activated.starts_with(&own),
                "an activated launcher's bus {activated} is not under {own}"
            );
        }
        for desk in &mut desks {
            assert_eq!(desk.exited(), None);
        }
    }

    /// `ufo up` keeps its headless display between starts: the preferred number is taken when free, a
    /// taken one falls back to a free display, and a number freed again is taken again. (A high number,
    /// which `-displayfd`'s search from 0 in concurrent tests does not reach.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_preferred_display_is_taken_when_free_and_replaced_when_not() {
        let number = 4000 + std::process::id() % 20000;
        let first = Desktop::start_on(320, 240, Some(number)).await.unwrap();
        assert_eq!(first.display(), format!(":{number}"));
        let second = Desktop::start_on(320, 240, Some(number)).await.unwrap();
        assert_ne!(second.display(), first.display());
        assert!(second.display().starts_with(':'), "{}", second.display());
        drop(first);
        let third = Desktop::start_on(320, 240, Some(number)).await.unwrap();
        assert_eq!(third.display(), format!(":{number}"));
    }
}
