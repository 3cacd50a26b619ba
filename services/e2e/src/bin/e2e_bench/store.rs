//! The two session stores the benchmark compares: Postgres (a database on the bench's private cluster)
//! and the embedded one (an SQLite file), each with its screenshots in a local blob directory. A
//! [`Storage`] configures a cluster for its store, measures the bytes it holds and names the processes
//! whose CPU counts.

use std::path::PathBuf;

use anyhow::Context as _;

use ufo_testkit::{Cluster, ClusterBuilder, TestDatabase};

use crate::measure::{Watched, dir_bytes, pg_database_bytes};
use crate::pg::PrivatePostgres;

/// Which store a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Postgres (the bench's private cluster) + blob directory.
    Postgres,
    /// SQLite file + blob directory.
    Embedded,
}

impl Kind {
    /// Column heading.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Postgres => "Postgres + blob dir",
            Kind::Embedded => "embedded (SQLite + dir)",
        }
    }
}

/// One run's store: a fresh database (or SQLite file in the cluster's directory) and blob directory.
pub struct Storage<'a> {
    /// Where the service binaries are (`--services-from`); default: next to the bench.
    services_from: Option<PathBuf>,
    pg: Option<&'a PrivatePostgres>,
    db: Option<TestDatabase>,
    blobs: tempfile::TempDir,
}

impl<'a> Storage<'a> {
    /// A fresh store of this kind (`pg` must be given for Postgres).
    pub async fn create(kind: Kind, pg: Option<&'a PrivatePostgres>) -> anyhow::Result<Self> {
        let (pg, db) = match (kind, pg) {
            (Kind::Postgres, Some(pg)) => (
                Some(pg),
                Some(TestDatabase::create_from(&pg.admin_url()).await?),
            ),
            (Kind::Postgres, None) => anyhow::bail!("the Postgres run needs the private cluster"),
            (Kind::Embedded, _) => (None, None),
        };
        Ok(Self {
            services_from: None,
            pg,
            db,
            blobs: tempfile::Builder::new()
                .prefix("ufo-bench-blobs")
                .tempdir()?,
        })
    }

    /// The same store taking the service binaries from `dir` (e.g. an earlier build's, to compare).
    pub fn with_services_from(mut self, dir: Option<PathBuf>) -> Self {
        self.services_from = dir;
        self
    }

    /// The cluster's session flags for this store; the service binaries are the ones next to the bench
    /// (`cargo build --release -p ufo-e2e -p ufo-agent -p ufo-session -p ufo-executor`) unless
    /// `--services-from` names another directory.
    pub fn configure(&self, builder: ClusterBuilder) -> anyhow::Result<ClusterBuilder> {
        let exe = std::env::current_exe()?;
        let bin_dir = match &self.services_from {
            Some(dir) => dir.clone(),
            None => exe.parent().context("the bench's directory")?.to_owned(),
        };
        let builder = builder.binaries_from(bin_dir);
        let builder = match &self.db {
            Some(db) => builder.database_url(db.url()),
            None => builder,
        };
        Ok(builder.session_args([
            std::ffi::OsString::from("--blob-dir"),
            self.blobs.path().as_os_str().to_owned(),
        ]))
    }

    /// The database's name on the private cluster (Postgres only).
    pub fn database(&self) -> Option<&str> {
        self.db.as_ref().map(TestDatabase::name)
    }

    /// The private cluster (Postgres only).
    pub fn postgres(&self) -> Option<&PrivatePostgres> {
        self.pg
    }

    /// Bytes the store holds now: the database's size (`pg_database_size`, or the SQLite file's pages,
    /// write-ahead log included) and the blob directory's.
    pub async fn bytes(&self, cluster: &Cluster) -> anyhow::Result<(u64, u64)> {
        let database = match &self.db {
            Some(db) => pg_database_bytes(db.url()).await?,
            None => sqlite_pages(cluster.dir().join("session.sqlite3")).await?,
        };
        Ok((database, dir_bytes(self.blobs.path())))
    }

    /// The processes whose CPU counts: the cluster's services and, for Postgres, the private cluster
    /// with all its backends.
    pub fn watched(&self, cluster: &Cluster) -> anyhow::Result<Vec<Watched>> {
        let mut watched: Vec<Watched> = [
            ("ufo-agent", &cluster.agent),
            ("ufo-session", &cluster.session),
            ("ufo-executor", &cluster.executor),
        ]
        .into_iter()
        .filter_map(|(label, p)| {
            Some(Watched {
                label: label.to_owned(),
                pid: p.as_ref()?.pid()?,
                children: false,
            })
        })
        .collect();
        if let Some(pg) = self.pg {
            watched.push(Watched {
                label: "postgres".into(),
                pid: pg.postmaster_pid()?,
                children: true,
            });
        }
        Ok(watched)
    }
}

/// Logical size of an SQLite database (page count × page size, seen through its write-ahead log).
async fn sqlite_pages(file: PathBuf) -> anyhow::Result<u64> {
    use sqlx::ConnectOptions as _;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(file)
        .read_only(true)
        .connect()
        .await?;
    let bytes: i64 = sqlx::query_scalar(
        "SELECT p.page_count * s.page_size FROM pragma_page_count() p, pragma_page_size() s",
    )
    .fetch_one(&mut conn)
    .await?;
    Ok(bytes.max(0).unsigned_abs())
}
