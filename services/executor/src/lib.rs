//! The executor service: the desktop's hand and eye over gRPC. It observes (screenshots, windows, UI
//! trees) and acts (click, type, keys, scroll, launch, close) exactly as told; all judgment stays in the
//! agent service.
//!
//! Layout:
//! - [`config`]: the CLI/env configuration and its security rules.
//! - [`backend`]: the `Backend` trait and its platform implementations (AT-SPI2 + X11, UI Automation).
//! - [`tools`]: the tool registry (names, typed parameters, JSON schemas).
//! - [`executor`]: batches (serialised per desktop, deadlines, early exit, timing); `dispatch` runs tools.
//! - [`keys`], [`geometry`], [`tree`], [`encode`], [`handles`]: platform-independent logic shared by
//!   the backends.
//! - [`service`]: the gRPC service; [`run`] serves it with health and reflection.
//! - [`testing`] (Linux): a real Xvfb + D-Bus + AT-SPI desktop for tests and benchmarks.

pub mod backend;
pub mod config;
mod dispatch;
pub mod encode;
pub mod executor;
pub mod geometry;
pub mod handles;
pub mod keys;
pub mod service;
/// The private Xvfb desktop of tests and benchmarks, compiled only with the `testing` feature.
#[cfg(all(target_os = "linux", feature = "testing"))]
pub mod testing;
pub mod tools;
pub mod tree;
pub mod uia_types;

pub use config::Config;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use ufo_common::grpc::{RequireBearer, introspection, serve_until};
use ufo_proto::v1::executor_server::ExecutorServer;

use crate::backend::Backend;
use crate::executor::{Executor, Limits};
use crate::service::{ExecutorService, ServiceLimits};

/// gRPC services this server exposes (for health and reflection).
const SERVICES: &[&str] = &["ufo.v1.Executor"];

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration breaks a rule.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The desktop backend could not start.
    #[error("cannot start the desktop backend")]
    Backend(#[from] backend::BackendError),
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ufo_common::grpc::ServeError),
    /// The TLS certificate or key cannot be used.
    #[error("cannot use the TLS certificate and key")]
    Tls(#[source] tonic::transport::Error),
    /// The listener has no address.
    #[error("cannot read the listener address")]
    Listener(#[from] std::io::Error),
}

/// Serves on `listener` with the platform's backend until `shutdown` fires.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    config.validate(listener.local_addr()?)?;
    let builder = server_builder(config.tls_pem()?)?;
    let backend = backend::platform_backend(config.max_control_handles).await?;
    serve(config, builder, backend, listener, shutdown).await
}

/// Serves `backend` on `listener` until `shutdown` fires (tests pass a backend bound to their desktop).
pub async fn run_with_backend(
    config: Config,
    backend: Arc<dyn Backend>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    config.validate(listener.local_addr()?)?;
    let builder = server_builder(config.tls_pem()?)?;
    serve(config, builder, backend, listener, shutdown).await
}

/// Serves `backend` with a validated `config` and a server `builder` (plaintext or TLS).
async fn serve(
    config: Config,
    builder: tonic::transport::Server,
    backend: Arc<dyn Backend>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let limits = Limits {
        max_wait: Duration::from_secs_f64(config.max_wait_seconds.max(0.0)),
        max_tree_nodes: config.max_tree_nodes,
        max_tree_depth: config.max_tree_depth,
        max_key_strokes: config.max_key_strokes,
        max_text_bytes: config.max_text_bytes,
        control_types: config.control_types.clone(),
    };
    let executor = Arc::new(Executor::new(backend, limits, config.allowed_apps()?));
    let service = ExecutorService::new(
        executor,
        ServiceLimits {
            max_batch: config.max_batch,
            default_deadline: Duration::from_millis(config.default_deadline_ms.into()),
            max_deadline: Duration::from_millis(config.max_deadline_ms.into()),
            jpeg_quality: config.jpeg_quality,
            max_message_bytes: config.max_message_bytes,
        },
    );
    let server = ExecutorServer::new(service)
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
    let auth = RequireBearer::new(config.token.as_deref());
    let intro = introspection(SERVICES)
        .await
        .map_err(ufo_common::grpc::ServeError::from)?;
    let mut routes = intro.routes;
    routes.add_service(tonic::service::interceptor::InterceptedService::new(
        server, auth,
    ));
    tracing::info!(
        addr = %listener.local_addr()?,
        backend = %routes_backend_name(),
        tls = config.tls_cert.is_some(),
        "ufo-executor listening"
    );
    serve_until(
        builder,
        routes.routes(),
        listener,
        intro.health_reporter,
        SERVICES,
        shutdown,
    )
    .await
    .map_err(RunError::from)
}

/// A server builder that speaks TLS when a certificate chain and key (PEM) are given.
fn server_builder(tls: Option<config::TlsPem>) -> Result<tonic::transport::Server, RunError> {
    let builder = tonic::transport::Server::builder();
    let Some(config::TlsPem { cert, key }) = tls else {
        return Ok(builder);
    };
    // tonic builds its rustls config from the process-wide provider; in a workspace build rustls has
    // both ring and aws-lc-rs compiled in and then refuses to pick one, so choose ring (the provider
    // that also cross-builds for Windows) unless the process already installed one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let identity = tonic::transport::Identity::from_pem(cert, key);
    builder
        .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
        .map_err(RunError::Tls)
}

fn routes_backend_name() -> &'static str {
    if cfg!(windows) { "uia" } else { "atspi" }
}
