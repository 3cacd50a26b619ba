//! Configuration of `ufo-session`: CLI flags with environment fallbacks. Nothing else reads the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use ufo_common::telemetry::TelemetryArgs;

/// The session service.
#[derive(Clone, Parser)]
#[command(name = "ufo-session", version, about)]
pub struct Config {
    /// Address the gRPC server binds to (loopback by default).
    #[arg(long, env = "UFO_SESSION_LISTEN", default_value = "127.0.0.1:50053")]
    pub listen: SocketAddr,

    /// Postgres URL of the production store; when absent, the embedded SQLite file at --sqlite-path is used.
    #[arg(long, env = "UFO_SESSION_DATABASE_URL")]
    pub database_url: Option<String>,

    /// SQLite file of the embedded store (created if missing), used when no --database-url is given.
    #[arg(
        long,
        env = "UFO_SESSION_SQLITE_PATH",
        default_value = "ufo-session.sqlite3"
    )]
    pub sqlite_path: PathBuf,

    /// Postgres only: commit without waiting for the WAL flush (`synchronous_commit = off`). Much lower
    /// record-step latency on slow disks, but a database crash may lose the last few hundred milliseconds
    /// of committed steps. Off by default: a recorded step is durable.
    #[arg(long, env = "UFO_SESSION_PG_ASYNC_COMMIT", default_value_t = false)]
    pub pg_async_commit: bool,

    /// Postgres only: most steps recorded in one transaction. Concurrent RecordStep calls share a commit
    /// (group commit): a lone step is written at once, steps that arrive while others are being written go
    /// together in the next call. 1 commits every step on its own.
    #[arg(long, env = "UFO_SESSION_PG_STEP_BATCH", default_value_t = 32,
        value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub pg_step_batch: u32,

    /// Postgres only: group commits of steps in flight at once (each on its own pooled connection).
    #[arg(long, env = "UFO_SESSION_PG_STEP_WRITERS", default_value_t = 2,
        value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub pg_step_writers: u32,

    /// Bearer token every call must present; when absent, calls are not authenticated.
    #[arg(long, env = "UFO_SESSION_AUTH_TOKEN")]
    pub auth_token: Option<String>,

    /// Maximum database connections (Postgres pool; SQLite read pool).
    #[arg(long, env = "UFO_SESSION_POOL_SIZE", default_value_t = 16,
        value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub pool_size: u32,

    /// How long a call waits for a Postgres connection before it fails with UNAVAILABLE (while the
    /// database is down or restarting), in milliseconds.
    #[arg(long, env = "UFO_SESSION_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 5_000,
        value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub db_acquire_timeout_ms: u64,

    /// Default page size of ListSessions.
    #[arg(long, env = "UFO_SESSION_DEFAULT_PAGE_SIZE", default_value_t = 50,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub default_page_size: u32,

    /// Largest page size of ListSessions and ListSteps; larger requests are clamped.
    #[arg(long, env = "UFO_SESSION_MAX_PAGE_SIZE", default_value_t = 500,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_page_size: u32,

    /// Lease length in milliseconds when a claim or renewal asks for 0.
    #[arg(long, env = "UFO_SESSION_LEASE_DEFAULT_MS", default_value_t = 30_000,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub lease_default_ms: u32,

    /// Longest lease in milliseconds; longer requests are clamped.
    #[arg(long, env = "UFO_SESSION_LEASE_MAX_MS", default_value_t = 600_000,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub lease_max_ms: u32,

    /// Events buffered per WatchEvents stream before its reader waits for the client (the client's pace
    /// never slows writers: a waiting watcher re-reads the store from its last sequence number).
    #[arg(long, env = "UFO_SESSION_WATCH_BUFFER", default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub watch_buffer: u32,

    /// Largest gRPC message in bytes, received or sent (artifacts are bounded by it).
    #[arg(long, env = "UFO_SESSION_MAX_MESSAGE_BYTES", default_value_t = 32 * 1024 * 1024,
        value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_message_bytes: u32,

    /// Largest number of events, blackboard entries or artifact ids in one request.
    #[arg(long, env = "UFO_SESSION_MAX_BATCH", default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_batch: u32,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Malformed-request checks in front of the gRPC server.
    #[command(flatten)]
    pub request_checks: ufo_common::checked::RequestCheckArgs,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("sqlite_path", &self.sqlite_path)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("pool_size", &self.pool_size)
            .field("max_page_size", &self.max_page_size)
            .field("lease_default_ms", &self.lease_default_ms)
            .field("lease_max_ms", &self.lease_max_ms)
            .field("watch_buffer", &self.watch_buffer)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Every flag at its default (or its `UFO_SESSION_*` environment value): a base for tests and embedding.
    pub fn defaults() -> Self {
        Self::parse_from(["ufo-session"])
    }
}
