//! A private Postgres cluster for the benchmark: started from the installed server binaries in a temporary
//! directory on a free port, with `pg_stat_statements` loaded so the throughput run can count the
//! statements each step costs, and with nothing else on it, so the CPU of its processes (read from /proc) is
//! the store's own. Started as the `postgres` user when the bench runs as root (initdb refuses root).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, bail};
use tokio::process::Command;

/// A running private cluster; stopped (immediately) when dropped.
pub struct PrivatePostgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
}

impl PrivatePostgres {
    /// initdb + start, waiting until it accepts connections (`pg_ctl -w`).
    pub async fn start(bin_dir: Option<PathBuf>) -> anyhow::Result<Self> {
        let bin = match bin_dir {
            Some(dir) => dir,
            None => newest_server_bin()?,
        };
        let as_postgres = std::fs::metadata("/proc/self")?.uid() == 0;
        let dir = tempfile::Builder::new().prefix("ufo-bench-pg").tempdir()?;
        if as_postgres {
            run(Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()))
            .await?;
        }
        let port = ufo_testkit::free_port()?;
        let cluster = Self {
            data: dir.path().join("data"),
            _dir: dir,
            bin,
            as_postgres,
            port,
        };
        run(cluster
            .command("initdb")
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&cluster.data))
        .await?;
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 \
             -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top",
            cluster._dir.path().display()
        );
        run(cluster
            .command("pg_ctl")
            .args(["-w", "-t", "120", "-D"])
            .arg(&cluster.data)
            .arg("-l")
            .arg(cluster._dir.path().join("server.log"))
            .args(["-o", &options, "start"]))
        .await?;
        let admin = sqlx::PgPool::connect(&cluster.admin_url()).await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&admin)
            .await?;
        admin.close().await;
        Ok(cluster)
    }

    /// The superuser's URL of the `postgres` database (where `pg_stat_statements` is installed).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's pid (first line of `postmaster.pid`).
    pub fn postmaster_pid(&self) -> anyhow::Result<u32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid"))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("postmaster.pid has no pid")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.stdin(Stdio::null());
        command
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let path = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        };
        let _ = command
            .args(["-w", "-m", "immediate", "-D"])
            .arg(&self.data)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn run(command: &mut Command) -> anyhow::Result<()> {
    let out = command.output().await.context("start a Postgres tool")?;
    if !out.status.success() {
        bail!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `/usr/lib/postgresql/<newest>/bin` (Debian's layout).
fn newest_server_bin() -> anyhow::Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .with_context(|| {
            format!(
                "no Postgres server in {} (pass --pg-bin-dir)",
                root.display()
            )
        })?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .context("no Postgres server with initdb under /usr/lib/postgresql (pass --pg-bin-dir)")
}
