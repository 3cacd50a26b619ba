//! The session service: the system's durable memory.
//!
//! Layout:
//! - [`config`]: the CLI/env configuration.
//! - [`blob`]: the content-addressed blob store of artifact bytes (a directory by default, or S3) and its
//!   sweeper.
//! - [`store`]: the [`Store`](store::Store) trait and its Postgres and embedded SQLite implementations
//!   (schema in `migrations/` and `migrations_sqlite/`).
//! - [`knowledge`]: help documents (parsed, chunked), experiences and their full-text search.
//! - [`watch`]: WatchEvents' replay-then-follow producer.
//! - [`grpc`]: the `ufo.v1.SessionStore` service (validation, error mapping).
//! - [`run`]: opens the store (running migrations), then serves gRPC (with health and reflection) on a
//!   bound listener until the shutdown token fires.

pub mod blob;
pub mod config;
pub mod grpc;
pub mod knowledge;
pub mod retention;
pub mod store;
pub mod watch;

pub use config::Config;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use ufo_common::grpc::{RequireBearer, ServeError, introspection, serve_until};
use ufo_proto::v1::knowledge_store_server::KnowledgeStoreServer;
use ufo_proto::v1::session_store_server::SessionStoreServer;

use crate::blob::BlobStore;
use crate::config::BlobLocation;
use crate::grpc::knowledge::KnowledgeService;
use crate::grpc::{ServiceLimits, SessionService};
use crate::store::blobbed::BlobbedStore;
use crate::store::{Store, StoreError};

/// gRPC services this server exposes (for health and reflection).
const SERVICES: &[&str] = &[
    ufo_proto::service_names::SESSION_STORE,
    ufo_proto::service_names::KNOWLEDGE_STORE,
];

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The store could not be opened or migrated.
    #[error("cannot open the session store")]
    Store(#[from] StoreError),
    /// The blob store could not be opened.
    #[error("cannot open the blob store")]
    Blobs(#[from] blob::BlobError),
    /// The gRPC server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Opens the configured store: the blob store holding artifact bytes, then the rows (migrations run here,
/// moving any bytes rows still carry into the blob store first).
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, RunError> {
    Ok(Arc::new(open_blobbed(config).await?))
}

async fn open_blobbed(config: &Config) -> Result<BlobbedStore, RunError> {
    let blobs = open_blobs(config)?;
    let rows = open_rows(config, blobs.as_ref()).await?;
    Ok(BlobbedStore::new(rows, blobs))
}

/// Opens the blob store the configuration selects.
pub fn open_blobs(config: &Config) -> Result<Arc<dyn BlobStore>, blob::BlobError> {
    Ok(match config.blob_location() {
        BlobLocation::Dir(dir) => {
            tracing::info!(dir = %dir.display(), "blob store: directory");
            Arc::new(blob::dir::DirBlobStore::open(dir)?)
        }
        BlobLocation::S3(options) => {
            tracing::info!(bucket = %options.bucket, "blob store: s3");
            Arc::new(blob::s3::S3BlobStore::connect(&options)?)
        }
    })
}

/// Sweeps unreferenced blobs every `interval` until `shutdown` fires (failures are logged, not fatal).
async fn sweep_blobs(
    store: BlobbedStore,
    grace: Duration,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(error) = blob::sweep::sweep(store.blobs().as_ref(), &store, grace).await {
            tracing::warn!(error = %error, "blob sweep failed; retrying at the next interval");
        }
    }
}

/// Opens the row store: Postgres when a database URL is set, else the embedded SQLite file.
async fn open_rows(config: &Config, blobs: &dyn BlobStore) -> Result<Arc<dyn Store>, StoreError> {
    let index = store::IndexOptions {
        max_delta: config.knowledge.knowledge_index_max_delta,
        changes_kept: config.knowledge.knowledge_changes_kept,
    };
    Ok(match &config.database_url {
        Some(url) => {
            tracing::info!("session store: postgres");
            let options = store::postgres::PgOptions {
                max_connections: config.pool_size,
                async_commit: config.pg_async_commit,
                acquire_timeout: std::time::Duration::from_millis(config.db_acquire_timeout_ms),
                batching: store::postgres::StepBatching {
                    max_steps: config.pg_step_batch as usize,
                    writers: config.pg_step_writers as usize,
                },
            };
            Arc::new(
                store::postgres::connect(url, options, blobs)
                    .await?
                    .with_index_options(index),
            )
        }
        None => {
            tracing::info!(path = %config.sqlite_path.display(), "session store: embedded sqlite");
            Arc::new(
                store::sqlite::open(&config.sqlite_path, config.pool_size, blobs)
                    .await?
                    .with_index_options(index),
            )
        }
    })
}

/// Opens the store, then serves on `listener` until `shutdown` fires, drains and returns.
/// Returned boxed: the service's whole state machine is compiled here, once, in this crate. An `async fn`
/// would be compiled in each crate that awaits it instead (the binary, every test crate), since an async
/// function's body is instantiated where it is polled (docs/build-time.md, "Release build, 2026-11-30").
pub fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    Box::pin(open_and_serve(config, listener, shutdown))
}

async fn open_and_serve(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let blobbed = open_blobbed(&config).await?;
    let args = &config.blobs;
    if args.blob_sweep_interval_s > 0 {
        tokio::spawn(sweep_blobs(
            blobbed.clone(),
            Duration::from_secs(args.blob_sweep_grace_s),
            Duration::from_secs(args.blob_sweep_interval_s),
            shutdown.child_token(),
        ));
    }
    let store: Arc<dyn Store> = Arc::new(blobbed);
    let r = &config.retention;
    if let Some(rule) = retention::rule(r.retain_images_days, r.retain_images_tasks)
        && r.retain_interval_s > 0
    {
        tokio::spawn(retention::run(
            store.clone(),
            (r.retain_images_days, r.retain_images_tasks),
            Duration::from_secs(r.retain_interval_s),
            shutdown.child_token(),
        ));
        tracing::info!(?rule, "screenshot retention on");
    }
    serve(store, &config, listener, shutdown).await
}

/// Serves `store` on `listener` until `shutdown` fires (for callers that built the store themselves).
pub async fn serve(
    store: Arc<dyn Store>,
    config: &Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let limits = ServiceLimits::from_config(config);
    let max_bytes = config.max_message_bytes as usize;
    let knowledge =
        KnowledgeStoreServer::new(KnowledgeService::new(store.clone(), config.knowledge))
            .max_decoding_message_size(max_bytes)
            .max_encoding_message_size(max_bytes);
    let server = SessionStoreServer::new(SessionService::new(store, limits))
        .max_decoding_message_size(max_bytes)
        .max_encoding_message_size(max_bytes);
    let auth = RequireBearer::new(config.auth_token.as_deref());
    let intro = introspection(SERVICES, &config.reflection)
        .await
        .map_err(ServeError::from)?;
    let mut routes = intro.routes;
    routes.add_service(tonic::service::interceptor::InterceptedService::new(
        server,
        auth.clone(),
    ));
    routes.add_service(tonic::service::interceptor::InterceptedService::new(
        knowledge, auth,
    ));
    // The session service stores what it receives in Postgres: NUL is refused before it gets there.
    let checks = config
        .request_checks
        .checks(true, max_bytes)
        .map_err(ServeError::from)?;
    serve_until(
        tonic::transport::Server::builder(),
        routes.routes(),
        checks,
        listener,
        intro.health_reporter,
        SERVICES,
        shutdown,
    )
    .await?;
    Ok(())
}
