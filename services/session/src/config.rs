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

    /// Let the kernel back the process's memory with transparent huge pages where the allocator asks for
    /// them. Off by default: a request's buffers are freed and taken again within milliseconds, and each
    /// fresh 2 MB page is zeroed whole on its first touch (docs/benchmark.md, 2026-11-30 evening). Linux
    /// only.
    #[arg(long, env = "UFO_SESSION_TRANSPARENT_HUGE_PAGES")]
    pub transparent_huge_pages: bool,

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

    /// Threads of the service's async runtime. Default: 1 with the embedded SQLite store (its single
    /// writer is the bound, and one thread spends ~15 % less CPU on the same work: docs/benchmark.md,
    /// 2026-12-01), one per core with Postgres.
    #[arg(long, env = "UFO_SESSION_RUNTIME_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub runtime_threads: Option<u16>,

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

    /// Blob store of artifact bytes (screenshots): a directory or an S3-compatible bucket.
    #[command(flatten)]
    pub blobs: BlobArgs,

    /// Retention of screenshots (steps' records are always kept).
    #[command(flatten)]
    pub retention: RetentionArgs,

    /// Limits of the knowledge store (help documents, experiences).
    #[command(flatten)]
    pub knowledge: KnowledgeArgs,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Malformed-request checks in front of the gRPC server.
    #[command(flatten)]
    pub request_checks: ufo_common::checked::RequestCheckArgs,

    /// Whether the gRPC server offers reflection.
    #[command(flatten)]
    pub reflection: ufo_common::grpc::ReflectionArgs,
}

/// Limits of the knowledge store (issue 33): what a document, an experience and a search may be.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct KnowledgeArgs {
    /// Largest help document AddDocument accepts, in bytes (INVALID_ARGUMENT beyond).
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_DOCUMENT_BYTES", default_value_t = 2 * 1024 * 1024,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub knowledge_max_document_bytes: u32,

    /// Most characters of one stored section; longer sections are split into parts.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_SECTION_CHARS", default_value_t = 2_000,
        value_parser = clap::value_parser!(u32).range(64..=1_000_000))]
    pub knowledge_max_section_chars: u32,

    /// Most sections one document may have (INVALID_ARGUMENT beyond; nothing is stored).
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_SECTIONS", default_value_t = 2_000,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub knowledge_max_sections: u32,

    /// Largest experience or demonstration text (title + body), in bytes.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_EXPERIENCE_BYTES", default_value_t = 64 * 1024,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub knowledge_max_experience_bytes: u32,

    /// Longest search query, in characters.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_QUERY_CHARS", default_value_t = 4_000,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub knowledge_max_query_chars: u32,

    /// Hits a search returns when it asks for 0.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_DEFAULT_HITS", default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub knowledge_default_hits: u32,

    /// Most hits (and listed items) one call returns; larger requests are clamped.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_HITS", default_value_t = 200,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub knowledge_max_hits: u32,

    /// Most hits of one search from the same source (sections of one document) when the request says 0;
    /// 0 = no cap.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_HITS_PER_SOURCE", default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub knowledge_hits_per_source: u32,

    /// Longest application name, source and owner, in bytes.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_NAME_BYTES", default_value_t = 512,
        value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub knowledge_max_name_bytes: u32,

    /// Most callers one experience or demonstration may be shared with by name (an admin's
    /// `ShareKnowledge`; a longer list, or a share that would exceed it, is refused: share it with
    /// everyone instead).
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_MAX_SHARE_CALLERS", default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub knowledge_max_share_callers: u32,

    /// Most changed knowledge rows a search applies to its in-memory index as a delta (re-read by id);
    /// more, and the index is rebuilt from all rows (docs/knowledge.md "Ranking").
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_INDEX_MAX_DELTA", default_value_t = 10_000,
        value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub knowledge_index_max_delta: u32,

    /// Entries of the knowledge change log (`knowledge_changes`) kept for the replicas' indexes; a
    /// replica further behind rebuilds its index from all rows.
    #[arg(long, env = "UFO_SESSION_KNOWLEDGE_CHANGES_KEPT", default_value_t = 100_000,
        value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    pub knowledge_changes_kept: u32,
}

/// How long screenshots are kept (issue 22, point 4): a session's screenshots go when it is ended and
/// older than `--retain-images-days` or beyond the newest `--retain-images-tasks` sessions; its steps stay.
#[derive(Clone, Debug, clap::Args)]
pub struct RetentionArgs {
    /// Days an ended session's screenshots are kept; 0 keeps them forever.
    #[arg(long, env = "UFO_SESSION_RETAIN_IMAGES_DAYS", default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=36_500))]
    pub retain_images_days: u32,

    /// Sessions whose screenshots are kept, newest first; 0 keeps every session's.
    #[arg(long, env = "UFO_SESSION_RETAIN_IMAGES_TASKS", default_value_t = 0)]
    pub retain_images_tasks: u32,

    /// Seconds between retention passes (when a retention flag is set); 0 runs none (PruneImages only).
    #[arg(long, env = "UFO_SESSION_RETAIN_INTERVAL_S", default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub retain_interval_s: u64,
}

/// Where artifact bytes are stored. The database keeps only references (hash, size, content type).
///
/// - `--blob-s3-bucket` set: an S3-compatible object store (for several replicas sharing one store);
/// - else a local directory: `--blob-dir`, by default `<sqlite file name without extension>.blobs` next to
///   the SQLite file, or `ufo-session.blobs` in the working directory with Postgres (replicas sharing one
///   database must share this directory too, or use S3).
#[derive(Clone, clap::Args)]
pub struct BlobArgs {
    /// Directory of the local blob store (created if missing); default: `<sqlite stem>.blobs` next to the
    /// SQLite file, or `ufo-session.blobs` in the working directory with Postgres.
    #[arg(long, env = "UFO_SESSION_BLOB_DIR")]
    pub blob_dir: Option<PathBuf>,

    /// Bucket of an S3-compatible blob store (must exist); takes precedence over --blob-dir.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_BUCKET")]
    pub blob_s3_bucket: Option<String>,

    /// Endpoint URL of a non-AWS S3 server (MinIO, Ceph radosgw...); AWS's when absent.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_ENDPOINT")]
    pub blob_s3_endpoint: Option<String>,

    /// Region of the S3 bucket.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_REGION", default_value = "us-east-1")]
    pub blob_s3_region: String,

    /// S3 access key id; the standard AWS environment/instance credentials when absent.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_ACCESS_KEY_ID")]
    pub blob_s3_access_key_id: Option<String>,

    /// S3 secret access key.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_SECRET_ACCESS_KEY")]
    pub blob_s3_secret_access_key: Option<String>,

    /// Key prefix of blobs inside the bucket.
    #[arg(long, env = "UFO_SESSION_BLOB_S3_PREFIX", default_value = "blobs")]
    pub blob_s3_prefix: String,

    /// Allow a plain-HTTP S3 endpoint (local test servers only).
    #[arg(long, env = "UFO_SESSION_BLOB_S3_ALLOW_HTTP", default_value_t = false)]
    pub blob_s3_allow_http: bool,

    /// Largest blob PutBlob accepts, in bytes (RESOURCE_EXHAUSTED beyond; also bounded by
    /// --max-message-bytes).
    #[arg(long, env = "UFO_SESSION_MAX_BLOB_BYTES", default_value_t = 16 * 1024 * 1024,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub max_blob_bytes: u64,

    /// Age in seconds after which a blob no row references is deleted by the sweeper. Must exceed the
    /// longest time between a screenshot's upload and its step's commit.
    #[arg(long, env = "UFO_SESSION_BLOB_SWEEP_GRACE_S", default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub blob_sweep_grace_s: u64,

    /// Seconds between sweeps of unreferenced blobs; 0 disables the sweeper.
    #[arg(long, env = "UFO_SESSION_BLOB_SWEEP_INTERVAL_S", default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub blob_sweep_interval_s: u64,
}

impl Config {
    /// The blob store these flags select.
    pub fn blob_location(&self) -> BlobLocation {
        let b = &self.blobs;
        if let Some(bucket) = &b.blob_s3_bucket {
            return BlobLocation::S3(crate::blob::s3::S3Options {
                bucket: bucket.clone(),
                endpoint: b.blob_s3_endpoint.clone(),
                region: b.blob_s3_region.clone(),
                access_key_id: b.blob_s3_access_key_id.clone(),
                secret_access_key: b.blob_s3_secret_access_key.clone(),
                prefix: b.blob_s3_prefix.clone(),
                allow_http: b.blob_s3_allow_http,
            });
        }
        if let Some(dir) = &b.blob_dir {
            return BlobLocation::Dir(dir.clone());
        }
        if self.database_url.is_some() {
            return BlobLocation::Dir(PathBuf::from(DEFAULT_BLOB_DIR));
        }
        let stem = self.sqlite_path.file_stem().map_or_else(
            || "ufo-session".into(),
            |s| s.to_string_lossy().into_owned(),
        );
        BlobLocation::Dir(self.sqlite_path.with_file_name(format!("{stem}.blobs")))
    }
}

/// The blob directory of a Postgres store without `--blob-dir` (relative to the working directory).
pub const DEFAULT_BLOB_DIR: &str = "ufo-session.blobs";

/// The blob store [`Config::blob_location`] selected.
#[derive(Debug, Clone)]
pub enum BlobLocation {
    /// A local directory.
    Dir(PathBuf),
    /// An S3-compatible bucket.
    S3(crate::blob::s3::S3Options),
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
            .field("runtime_threads", &self.runtime_threads())
            .field("pool_size", &self.pool_size)
            .field("max_page_size", &self.max_page_size)
            .field("lease_default_ms", &self.lease_default_ms)
            .field("lease_max_ms", &self.lease_max_ms)
            .field("watch_buffer", &self.watch_buffer)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("blobs", &self.blob_location())
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The async runtime's thread count: `--runtime-threads`, else 1 on SQLite and one per core on
    /// Postgres.
    pub fn runtime_threads(&self) -> usize {
        match (self.runtime_threads, &self.database_url) {
            (Some(n), _) => usize::from(n),
            (None, None) => 1,
            (None, Some(_)) => std::thread::available_parallelism().map_or(1, usize::from),
        }
    }

    /// Every flag at its default (or its `UFO_SESSION_*` environment value): a base for tests and embedding.
    pub fn defaults() -> Self {
        Self::parse_from(["ufo-session"])
    }
}
