//! What the benchmark measures besides spans: percentiles, the CPU time of the system's processes read
//! from /proc (a Postgres cluster's exited backends are in its postmaster's `cutime`/`cstime`), bytes on
//! disk (blob directory and database), and the Postgres statements a run sent (`pg_stat_statements`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

/// The `p`-th percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 and p99 of unsorted values.
pub fn p50_p99(mut values: Vec<Duration>) -> (Duration, Duration) {
    values.sort();
    (percentile(&values, 50.0), percentile(&values, 99.0))
}

/// A process whose CPU time counts: `children` also counts its children (living ones, and exited ones
/// it waited for), as a postmaster's backends.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Row label (e.g. "ufo-agent").
    pub label: String,
    /// Its pid.
    pub pid: u32,
    /// Whether its children's time counts too.
    pub children: bool,
}

/// CPU time per label at one instant.
#[derive(Debug, Clone, Default)]
pub struct CpuSample(BTreeMap<String, Duration>);

impl CpuSample {
    /// Reads /proc for every watched process.
    pub fn take(watched: &[Watched]) -> anyhow::Result<Self> {
        let tick = clock_tick()?;
        let mut sample = BTreeMap::new();
        for w in watched {
            let stat = ProcStat::read(w.pid)?;
            let mut ticks = stat.utime + stat.stime;
            if w.children {
                ticks += stat.cutime + stat.cstime;
                for child in children_of(w.pid) {
                    if let Ok(c) = ProcStat::read(child) {
                        ticks += c.utime + c.stime;
                    }
                }
            }
            *sample.entry(w.label.clone()).or_default() += tick * u32::try_from(ticks)?;
        }
        Ok(Self(sample))
    }

    /// CPU used per label between `before` and `self`.
    pub fn since(&self, before: &CpuSample) -> BTreeMap<String, Duration> {
        self.0
            .iter()
            .map(|(label, t)| {
                let was = before.0.get(label).copied().unwrap_or_default();
                (label.clone(), t.saturating_sub(was))
            })
            .collect()
    }
}

struct ProcStat {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

impl ProcStat {
    fn read(pid: u32) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("read /proc/{pid}/stat"))?;
        // Fields after the command name (which may hold spaces) start at `state` (field 3).
        let rest = text.rsplit_once(')').context("malformed stat")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| -> anyhow::Result<u64> {
            f.get(i)
                .and_then(|v| v.parse::<i64>().ok())
                .map(|v| v.max(0).unsigned_abs())
                .context("malformed stat field")
        };
        Ok(Self {
            ppid: u32::try_from(num(1)?)?,
            utime: num(11)?,
            stime: num(12)?,
            cutime: num(13)?,
            cstime: num(14)?,
        })
    }
}

fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| ProcStat::read(*pid).is_ok_and(|s| s.ppid == parent))
        .collect()
}

fn clock_tick() -> anyhow::Result<Duration> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("getconf CLK_TCK")?;
    let hz: u64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok(Duration::from_nanos(1_000_000_000 / hz.max(1)))
}

/// Bytes of every file under `path` (0 if it does not exist).
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `pg_database_size` of the database at `url`.
pub async fn pg_database_bytes(url: &str) -> anyhow::Result<u64> {
    let pool = sqlx::PgPool::connect(url).await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(size.max(0).unsigned_abs())
}

/// Top-level statements of one database, from `pg_stat_statements` (read on the admin database).
pub struct Statements {
    admin: sqlx::PgPool,
    database: String,
}

impl Statements {
    /// Connects and resets the counters.
    pub async fn reset(admin_url: &str, database: &str) -> anyhow::Result<Self> {
        let admin = sqlx::PgPool::connect(admin_url).await?;
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&admin)
            .await?;
        Ok(Self {
            admin,
            database: database.to_owned(),
        })
    }

    /// Calls per statement text since the reset, most called first.
    pub async fn read(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT s.query, s.calls FROM pg_stat_statements s \
             JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 ORDER BY s.calls DESC",
        )
        .bind(&self.database)
        .fetch_all(&self.admin)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(q, c)| (q, c.max(0).unsigned_abs()))
            .collect())
    }
}

/// One statement's share of a window, from `pg_stat_statements`.
#[derive(Debug, Clone)]
pub struct StatementTime {
    /// The normalised text.
    pub query: String,
    /// Executions.
    pub calls: u64,
    /// Time inside Postgres, summed over the calls (lock waits included), in milliseconds.
    pub total_ms: f64,
    /// Its mean per call.
    pub mean_ms: f64,
}

impl Statements {
    /// Calls and time per statement text since the reset, most time first.
    pub async fn read_timed(&self) -> anyhow::Result<Vec<StatementTime>> {
        let rows: Vec<(String, i64, f64, f64)> = sqlx::query_as(
            "SELECT s.query, s.calls, s.total_exec_time, s.mean_exec_time FROM pg_stat_statements s \
             JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 ORDER BY s.total_exec_time DESC",
        )
        .bind(&self.database)
        .fetch_all(&self.admin)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(query, calls, total_ms, mean_ms)| StatementTime {
                query,
                calls: calls.max(0).unsigned_abs(),
                total_ms,
                mean_ms,
            })
            .collect())
    }
}

/// A process's resident memory now (`VmRSS` in /proc/PID/status), in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}
