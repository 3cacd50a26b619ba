//! A private PostgreSQL cluster for one test ([`PgCluster`]): `initdb` into a temporary directory, served
//! on its own port with trust authentication, that the test can stop, start and restart (fast shutdown:
//! connected clients see `57P01 admin_shutdown`, as in a real restart) while services use it. The shared
//! server of `DATABASE_URL` must never be restarted by a test; this one belongs to the test alone.
//!
//! The binaries come from `/usr/lib/postgresql/<version>/bin` (Debian's layout; the newest version wins) or
//! `UFO_TEST_PG_BIN`. PostgreSQL refuses to run as root, so under root every command runs as the `postgres`
//! user, who is given the directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Why the cluster could not be created, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum PgClusterError {
    /// No PostgreSQL server binaries were found.
    #[error(
        "no PostgreSQL binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin; set UFO_TEST_PG_BIN"
    )]
    NoBinaries,
    /// Running as root, but there is no `postgres` user to run the server as.
    #[error("running as root and there is no `postgres` user to run the server as")]
    NoPostgresUser,
    /// A filesystem or spawn failure.
    #[error("{0}")]
    Io(String, #[source] std::io::Error),
    /// A PostgreSQL tool failed.
    #[error("{tool} failed with {status}: {output}")]
    Tool {
        /// The command.
        tool: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its output (and the server log for pg_ctl).
        output: String,
    },
    /// No free port.
    #[error("no free port")]
    Port(#[source] std::io::Error),
}

/// A PostgreSQL cluster of one test, stopped (immediately) and deleted on drop.
#[derive(Debug)]
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// (uid, gid) to run the tools as, when running as root.
    run_as: Option<(u32, u32)>,
}

impl PgCluster {
    /// Creates the cluster (`initdb`, trust authentication, fsync off) and starts it on a free port.
    pub async fn start() -> Result<Self, PgClusterError> {
        let bin = binaries()?;
        let run_as = run_as()?;
        let dir = tempfile::Builder::new()
            .prefix("ufo-pg-")
            .tempdir()
            .map_err(|e| PgClusterError::Io("cannot create a temporary directory".into(), e))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(|e| {
                PgClusterError::Io("cannot give the directory to postgres".into(), e)
            })?;
        }
        let port = crate::free_port().map_err(PgClusterError::Port)?;
        let cluster = Self {
            dir,
            bin,
            port,
            run_as,
        };
        let data = cluster.data();
        cluster
            .tool(
                "initdb",
                &[
                    "-D",
                    &data,
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ],
            )
            .await?;
        cluster.start_server().await?;
        Ok(cluster)
    }

    /// The cluster's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of database `name` as the `postgres` superuser.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name` and returns its URL.
    pub async fn create_database(&self, name: &str) -> Result<String, PgClusterError> {
        use sqlx::Connection as _;
        let sql = |e: sqlx::Error| {
            PgClusterError::Io(
                format!("create database {name}: {e}"),
                std::io::Error::other(e.to_string()),
            )
        };
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .map_err(sql)?;
        // Identifiers cannot be bound; the name is the test's own, quoted.
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .map_err(sql)?;
        admin.close().await.map_err(sql)?;
        Ok(self.url(name))
    }

    /// Stops the server with a fast shutdown (clients are disconnected) and waits until it has exited.
    pub async fn stop(&self) -> Result<(), PgClusterError> {
        let data = self.data();
        self.tool("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
            .await
            .map(drop)
    }

    /// Starts the stopped server again on the same port and waits until it accepts connections.
    pub async fn start_server(&self) -> Result<(), PgClusterError> {
        let data = self.data();
        let log = self.dir.path().join("server.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let started = self
            .tool(
                "pg_ctl",
                &[
                    "-D",
                    &data,
                    "-l",
                    &log.display().to_string(),
                    "-o",
                    &options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            )
            .await;
        started.map_err(|e| match e {
            PgClusterError::Tool {
                tool,
                status,
                output,
            } => PgClusterError::Tool {
                tool,
                status,
                output: format!(
                    "{output}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            },
            e => e,
        })?;
        Ok(())
    }

    /// Stops and starts the server: every connection is dropped, and new ones are accepted once it is back.
    pub async fn restart(&self) -> Result<(), PgClusterError> {
        self.stop().await?;
        self.start_server().await
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    async fn tool(&self, name: &str, args: &[&str]) -> Result<String, PgClusterError> {
        let mut command = tokio::process::Command::new(self.bin.join(name));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        let out = command
            .output()
            .await
            .map_err(|e| PgClusterError::Io(format!("cannot run {name}"), e))?;
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(output)
        } else {
            Err(PgClusterError::Tool {
                tool: name.to_owned(),
                status: out.status,
                output,
            })
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let mut command = std::process::Command::new(self.bin.join("pg_ctl"));
        command
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = self.run_as {
            use std::os::unix::process::CommandExt as _;
            command.uid(uid).gid(gid);
        }
        let _ = command.status();
    }
}

/// The directory of `initdb` and `pg_ctl`.
fn binaries() -> Result<PathBuf, PgClusterError> {
    if let Some(dir) = std::env::var_os("UFO_TEST_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| PgClusterError::NoBinaries)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            has_tools(&bin).then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or(PgClusterError::NoBinaries)
}

fn has_tools(bin: &Path) -> bool {
    bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()
}

/// The `postgres` user's ids when running as root (PostgreSQL refuses root); `None` otherwise.
fn run_as() -> Result<Option<(u32, u32)>, PgClusterError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    // SAFETY: getpwnam with a NUL-terminated name; the returned record is read at once, before any other
    // call that could reuse its static buffer (tests in one process may race here, but only to read the
    // same user's record).
    unsafe {
        let pw = libc::getpwnam(c"postgres".as_ptr());
        if pw.is_null() {
            return Err(PgClusterError::NoPostgresUser);
        }
        Ok(Some(((*pw).pw_uid, (*pw).pw_gid)))
    }
}
