//! The executor service: the desktop's hand and eye over gRPC. It observes (screenshots, windows, UI
//! trees) and acts (click, type, keys, scroll, launch, close) exactly as told; all judgment stays in the
//! agent service.
//!
//! Layout:
//! - [`config`]: the CLI/env configuration and its security rules.
//! - [`backend`]: the `Backend` trait and its platform implementations (AT-SPI2 + X11, UI Automation).
//! - [`tools`]: the tools as one `Tool` enum, one file per family (observe, controls, act, apps): names,
//!   kinds, typed parameters and results with derived JSON schemas, and the code that runs each.
//! - [`executor`]: batches (serialised per desktop, deadlines, early exit, timing, settling).
//! - [`launch`]: `launch_application`'s hard limits (argument count and size, launch directories).
//! - [`reset`]: the desktop's reset between tasks of the pool (launched programs, scratch directory,
//!   the operator's reset hook).
//! - [`process`]: programs callers talk to over stdin/stdout (MCP servers on the desktop's side:
//!   allow-list, owner, idle and exit kills, bounded output);
//! - [`shell`]: `run_command`'s rules (allow-list, no shell, arguments, working directory, timeout,
//!   output cap), off by default.
//! - [`keys`], [`geometry`], [`tree`], [`encode`], [`handles`], [`labels`]: platform-independent logic
//!   shared by the backends.
//! - [`wait`]: an action waits, bounded, for its control to become enabled and visible.
//! - [`changes`]: `wait_for_change` waits, bounded, for the window to change (a replay waiting for its
//!   next target).
//! - [`record`]: `record_input` records what a person does (clicks, typed text, keys), each step
//!   resolved to its control's selector (a human demonstration).
//! - [`effect`]: what an action was observed to change (confirmed, none observed, unverifiable), read
//!   around each action once the screen has settled.
//! - [`service`]: the gRPC service; [`run`] serves it with health and reflection, [`run_dial_out`] over a
//!   stream the executor opens to the agent ([`dialout`]), through the same routes.
//! - [`desktop`] (Linux): a private Xvfb + D-Bus + AT-SPI desktop (`--desktop headless`, `ufo up`);
//!   [`testing`] adds test helpers on it (applications started and waited for).

pub mod backend;
pub mod changes;
pub mod config;
#[cfg(target_os = "linux")]
pub mod desktop;
pub mod dialout;
pub mod effect;
mod effect_check;
pub mod encode;
pub mod executor;
pub mod geometry;
pub mod handles;
pub mod keys;
pub mod labels;
pub mod launch;
pub mod process;
pub mod record;
pub mod reset;
pub mod service;
pub mod shell;
/// Test helpers on the private desktop, compiled only with the `testing` feature.
#[cfg(all(target_os = "linux", feature = "testing"))]
pub mod testing;
pub mod tools;
pub mod tree;
pub mod uia_types;
pub mod wait;
pub mod watch;

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
    /// The private desktop could not start.
    #[cfg(target_os = "linux")]
    #[error("cannot start the headless desktop")]
    Desktop(#[from] desktop::DesktopError),
    /// A process of the private desktop exited while serving.
    #[error("the headless desktop stopped: {0}")]
    DesktopDied(String),
    /// The desktop info file cannot be written.
    #[error("cannot write the desktop info file {path}")]
    DesktopInfo {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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

/// How the agent reaches this executor.
enum Transport {
    /// The agent dials in: a gRPC server on this listener (plaintext or TLS).
    Listen(tonic::transport::Server, TcpListener),
    /// The executor dials out to the agent (`--connect`).
    Connect(dialout::Settings),
}

/// Serves on `listener` with the platform's backend until `shutdown` fires.
/// Returned boxed: the service's whole state machine is compiled here, once, in this crate. An `async fn`
/// would be compiled in each crate that awaits it instead (the binary, every test crate), since an async
/// function's body is instantiated where it is polled (docs/build-time.md, "Release build, 2026-11-30").
pub fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    Box::pin(async move {
        config.validate(listener.local_addr()?)?;
        let builder = server_builder(config.tls_pem()?)?;
        run_transport(config, Transport::Listen(builder, listener), shutdown).await
    })
}

/// Dials out to the agent of `--connect` (reconnecting until `shutdown` fires) and serves the platform's
/// backend over that stream. Boxed like [`run`].
pub fn run_dial_out(
    config: Config,
    shutdown: CancellationToken,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    Box::pin(async move {
        let settings = dialout::Settings::from_config(&config)?;
        config.validate(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
        run_transport(config, Transport::Connect(settings), shutdown).await
    })
}

/// Dials out with `backend` (tests pass a backend bound to their desktop).
pub async fn run_dial_out_with_backend(
    config: Config,
    backend: Arc<dyn Backend>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let settings = dialout::Settings::from_config(&config)?;
    config.validate(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
    serve(
        config,
        Transport::Connect(settings),
        backend,
        Vec::new(),
        shutdown,
    )
    .await
}

async fn run_transport(
    config: Config,
    transport: Transport,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    if config.desktop == config::DesktopMode::Headless {
        return run_headless(config, transport, shutdown).await;
    }
    let backend = backend::platform_backend(backend::WindowsOptions {
        max_control_handles: config.max_control_handles,
        foreground_wait: Duration::from_millis(config.foreground_wait_ms.into()),
        native_text_timeout: Duration::from_millis(config.native_text_timeout_ms.into()),
        max_native_text_chars: config.max_native_text_chars,
    })
    .await?;
    serve(config, transport, backend, Vec::new(), shutdown).await
}

/// Starts a private desktop, serves on it, and stops the server when a desktop process dies (and the
/// desktop when the server stops).
#[cfg(target_os = "linux")]
async fn run_headless(
    config: Config,
    transport: Transport,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let (width, height) = config.desktop_size;
    let mut desktop = desktop::Desktop::start_on(width, height, config.desktop_display).await?;
    tracing::info!(display = desktop.display(), "headless desktop ready");
    if let Some(path) = &config.desktop_info {
        let info = format!(
            "DISPLAY={}\nDBUS_SESSION_BUS_ADDRESS={}\n",
            desktop.display(),
            desktop.bus_address()
        );
        std::fs::write(path, info).map_err(|source| RunError::DesktopInfo {
            path: path.clone(),
            source,
        })?;
    }
    let backend: Arc<dyn Backend> = Arc::new(
        backend::linux::LinuxBackend::connect_to(
            Some(desktop.display()),
            Some(desktop.bus_address()),
        )
        .await?,
    );
    let env = desktop.env();
    let stop = shutdown.child_token();
    let server = serve(config, transport, backend, env, stop.clone());
    tokio::pin!(server);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            outcome = &mut server => return outcome,
            _ = tick.tick() => {
                if let Some(what) = desktop.exited() {
                    tracing::error!(%what, "the headless desktop died; stopping");
                    stop.cancel();
                    let _ = (&mut server).await;
                    return Err(RunError::DesktopDied(what));
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
async fn run_headless(
    _config: Config,
    _transport: Transport,
    _shutdown: CancellationToken,
) -> Result<(), RunError> {
    Err(RunError::Backend(backend::BackendError::Unsupported(
        "--desktop headless needs Linux (Xvfb)",
    )))
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
    serve(
        config,
        Transport::Listen(builder, listener),
        backend,
        Vec::new(),
        shutdown,
    )
    .await
}

/// Serves `backend` with a validated `config` over `transport`: the same service, limits and request
/// checks whichever way the agent reaches it.
async fn serve(
    config: Config,
    transport: Transport,
    backend: Arc<dyn Backend>,
    launch_env: Vec<(String, String)>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let limits = Limits {
        max_wait: Duration::from_secs_f64(config.max_wait_seconds.max(0.0)),
        max_tree_nodes: config.max_tree_nodes,
        max_tree_depth: config.max_tree_depth,
        max_key_strokes: config.max_key_strokes,
        max_text_bytes: config.max_text_bytes,
        max_summary_bytes: config.max_summary_bytes,
        max_launch_args: config.max_launch_args,
        max_launch_arg_bytes: config.max_launch_arg_bytes,
        launch_dirs: config.launch_dirs()?,
        control_types: config.control_types.clone(),
        max_value_chars: config.max_value_chars,
        settle: crate::backend::SettleOptions {
            timeout: Duration::from_millis(config.settle_timeout_ms.into()),
            quiet: Duration::from_millis(config.settle_quiet_ms.into()),
            first_change: Duration::from_millis(config.settle_first_change_ms.into()),
            animation_hz: config.settle_animation_hz,
            whole_screen: config.settle_whole_screen,
        },
        settle_between_actions: !config.no_settle_between_actions,
        action_wait: Duration::from_millis(config.action_wait_ms.into()),
        effect_check: !config.no_effect_check,
        effect_window_wait: Duration::from_millis(config.effect_window_wait_ms.into()),
        record_max_events: config.record_max_events,
        record_max_duration: Duration::from_secs_f64(config.record_max_seconds.max(0.0)),
        record_max_screenshots: config.record_max_screenshots,
        record_max_screenshot_bytes: config.record_max_screenshot_mb.saturating_mul(1024 * 1024),
    };
    let processes = crate::process::Processes::new(config.processes()?, launch_env.clone());
    let executor = Arc::new(
        Executor::new(backend, limits, config.allowed_apps()?)
            .with_launch_env(launch_env)
            .with_shell(config.shell()?)
            .with_reset(config.reset()?)
            .with_processes(processes.clone()),
    );
    let service = ExecutorService::new(
        executor,
        ServiceLimits {
            max_batch: config.max_batch,
            default_deadline: Duration::from_millis(config.default_deadline_ms.into()),
            max_deadline: Duration::from_millis(config.max_deadline_ms.into()),
            jpeg_quality: config.jpeg_quality,
            png_compression: config.png_compression,
            max_message_bytes: config.max_message_bytes,
            watch_fps: config.watch_fps,
            watch_max_fps: config.watch_max_fps,
        },
    );
    let server = ExecutorServer::new(service)
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
    // The executor stores nothing: NUL in text is the backend's to refuse or type.
    let checks = config
        .request_checks
        .checks(false, config.max_message_bytes)
        .map_err(ufo_common::grpc::ServeError::from)?;
    let (builder, listener) = match transport {
        Transport::Listen(builder, listener) => (builder, listener),
        Transport::Connect(settings) => {
            // The stream is the authentication (the enrollment token): no bearer check per call.
            let routes = tower::ServiceBuilder::new()
                .layer(ufo_common::grpc::trace_layer())
                .layer(checks.layer())
                .service(tonic::service::Routes::new(server));
            tracing::info!(
                agent = %settings.url,
                name = %settings.name,
                backend = %routes_backend_name(),
                "ufo-executor dialling out"
            );
            dialout::run(settings, routes, processes, shutdown).await;
            return Ok(());
        }
    };
    let auth = RequireBearer::new(config.token.as_deref());
    let intro = introspection(SERVICES, &config.reflection)
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
        checks,
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
    // tonic builds its rustls config from the process-wide provider.
    ufo_common::tls::install_crypto_provider();
    let identity = tonic::transport::Identity::from_pem(cert, key);
    builder
        .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
        .map_err(RunError::Tls)
}

fn routes_backend_name() -> &'static str {
    if cfg!(windows) { "uia" } else { "atspi" }
}
