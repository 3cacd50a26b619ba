//! The agent service: UFO²'s HostAgent and AppAgents run as a durable task runner behind REST and gRPC.
//!
//! Layout, bottom to top (a module uses only modules above it in this list, except `testing`):
//! - [`config`]: every flag and file setting of `ufo-agent` (clap, env fallbacks); imports nothing else
//!   from this crate.
//! - [`llm`]: the provider-neutral [`llm::ChatModel`] trait, OpenAI-compatible and Azure clients, retries,
//!   backup model, JSON extraction and re-asking, cost totals.
//! - [`dispatch`]: commands to executors and their results ([`dispatch::CommandDispatcher`], gRPC client),
//!   the executor catalog, and the operator's executor registry ([`dispatch::registry`]).
//! - [`mcp`]: the MCP client (`--mcp-servers`): servers bound to applications (API actions) or run as
//!   third-party agents, and the dispatcher that routes `mcp__SERVER__TOOL` actions to them.
//! - [`shell`]: the built-in shell agent (`--shell-agent`): its one action `shell__run` and the dispatcher
//!   that sends it to the executor's `run_command`.
//! - [`vision`]: screenshots, set-of-marks annotation, IoU merge, downscale and crop.
//! - [`memory`]: the seeds' memory items and the shared blackboard.
//! - [`processor`]: the processor framework (phases, strategies, composition, dependency validation,
//!   middleware) the agents are built on (seeds 003 and 004).
//! - [`agents`]: the HostAgent and AppAgents (strategies, prompts, model replies, actions), the target
//!   registry ([`agents::target`]) and the consent policy ([`agents::policy`]).
//! - [`replay`]: selectors for recorded actions, and running a recorded task again without the model.
//! - [`round`]: the state machine: statuses ([`round::state`]), what a step decided next
//!   ([`round::control`]), the transitions ([`round::transition`]) and the round driver that runs the agents
//!   step by step; what people are told when a step fails ([`round::failure`]).
//! - [`store`]: everything said to the session service: the client, blob uploads, bounded retries, NUL
//!   sanitising.
//! - [`runner`]: claims queued tasks with a lease, records each step before the next acts, waits for
//!   people; a task's resolved configuration ([`runner::task_config`]).
//! - [`api`]: the user-facing REST API (axum, OpenAPI at `/openapi.json`, SSE, the viewer) and gRPC
//!   `AgentService`.
//! - [`testing`]: test doubles (a scripted OpenAI-compatible server, an in-process desktop), compiled
//!   only with the `testing` feature.
//! - [`run`]: serves REST and gRPC (with health, and reflection when asked) and runs the task runner until
//!   the shutdown token fires.

pub mod agents;
pub mod api;
pub mod config;
pub mod dispatch;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod processor;
pub mod replay;
pub mod round;
pub mod runner;
pub mod shell;
pub mod store;
/// Test doubles (a scripted OpenAI-compatible server, an in-process desktop), compiled only with the
/// `testing` feature: the service itself never contains them.
#[cfg(feature = "testing")]
pub mod testing;
pub mod vision;

pub use config::Config;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use ufo_common::grpc::{introspection, serve_until};
use ufo_proto::service_names::AGENT_SERVICE;
use ufo_proto::v1::agent_service_server::AgentServiceServer;

/// gRPC services this server exposes (for health and reflection).
const SERVICES: &[&str] = &[AGENT_SERVICE];
/// The same with dial-out executors enabled.
const SERVICES_WITH_HUB: &[&str] = &[AGENT_SERVICE, ufo_proto::service_names::EXECUTOR_HUB];

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The gRPC server failed.
    #[error(transparent)]
    Grpc(#[from] ufo_common::grpc::ServeError),
    /// The REST server failed.
    #[error("REST server failed")]
    Http(#[source] std::io::Error),
    /// Authentication is not configured.
    #[error(transparent)]
    Auth(#[from] api::auth::AuthConfigError),
    /// The executor registry is invalid.
    #[error(transparent)]
    Executors(#[from] dispatch::registry::ExecutorConfigError),
    /// The session client cannot be built.
    #[error(transparent)]
    Session(#[from] store::client::SessionClientError),
    /// The API's operations cannot be set up.
    #[error(transparent)]
    Tasks(#[from] api::service::TasksError),
    /// An `--enroll-executor` token cannot be enrolled.
    #[error("--enroll-executor: {0}")]
    Enroll(#[from] dispatch::dialout::enroll::EnrollError),
    /// An `--enroll-executor` that does not fit the rest of the configuration.
    #[error("--enroll-executor {name}: {why}")]
    EnrollConfig {
        /// The executor it names.
        name: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Enrolls the tokens of `--enroll-executor` in the enrollments file, before anything is served.
#[tracing::instrument(name = "dialout.enroll_given", skip_all)]
fn enroll_given(
    config: &Config,
    executors: &dispatch::registry::ExecutorRegistry,
) -> Result<(), RunError> {
    for given in &config.dial_out.enroll_executors {
        let Some(path) = &config.dial_out.enrollments_file else {
            return Err(RunError::EnrollConfig {
                name: given.name.clone(),
                why: "needs --executor-enrollments-file (dial-out executors are not enabled)",
            });
        };
        if executors.is_declared(&given.name) {
            return Err(RunError::EnrollConfig {
                name: given.name.clone(),
                why: "is a declared (dial-in) executor; a dial-out executor needs another name",
            });
        }
        let enrollments = dispatch::dialout::enroll::Enrollments::new(path);
        use dispatch::dialout::enroll::Given;
        match enrollments.enroll_given_file(&given.name, &given.file)? {
            Given::Stored(id) => {
                tracing::info!(executor = %given.name, token_id = %id, "enrollment token given at start enrolled")
            }
            Given::Already(id) => {
                tracing::info!(executor = %given.name, token_id = %id, "enrollment token given at start was enrolled already")
            }
            Given::Revoked(id) => {
                tracing::warn!(executor = %given.name, token_id = %id, "enrollment token given at start was revoked; it stays revoked")
            }
        }
    }
    Ok(())
}

/// The bound listeners of one agent process.
#[derive(Debug)]
pub struct Listeners {
    /// gRPC (AgentService, health, reflection).
    pub grpc: TcpListener,
    /// REST.
    pub http: TcpListener,
}

/// Serves REST and gRPC until `shutdown` fires, then drains and returns. With a `driver` and
/// `--runner-slots` > 0 the process also runs tasks.
/// Returned boxed: the service's whole state machine is compiled here, once, in this crate. An `async fn`
/// would be compiled in each crate that awaits it instead (the binary, every test crate), since an async
/// function's body is instantiated where it is polled (docs/build-time.md, "Release build, 2026-11-30").
pub fn run(
    config: Config,
    listeners: Listeners,
    driver: Option<Arc<dyn runner::TaskDriver>>,
    shutdown: CancellationToken,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    Box::pin(serve_all(config, listeners, driver, shutdown))
}

async fn serve_all(
    config: Config,
    listeners: Listeners,
    driver: Option<Arc<dyn runner::TaskDriver>>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let keys = api::ApiKeys::from_config(&config.api)?;
    let client = store::client::connect(&config.session)?;
    let watch_client = store::client::connect_streaming(&config.session)?;
    let tasks = api::Tasks::new(client.clone(), watch_client.clone(), &config)?;
    enroll_given(&config, tasks.executors())?;
    let declared = tasks.executors().desktops();
    let tasks_executors = tasks.executors().clone();
    let pool_client = client.clone();
    // Finished tasks become experiences when the agents use knowledge (and experiences).
    let experiences = if config.agents.knowledge && config.agents.knowledge_experiences {
        let recorder = runner::experience::ExperienceRecorder::new(
            store::knowledge::SessionKnowledge::from_config(&config)?.client(),
            config.agents.knowledge_experience_chars as usize,
        );
        Some(if config.agents.experience_model_summary {
            recorder.with_model_summaries(runner::experience::ModelSummaries {
                max_chars: config.agents.experience_summary_chars as usize,
                timeout: std::time::Duration::from_millis(
                    config.agents.experience_summary_timeout_ms,
                ),
            })
        } else {
            recorder
        })
    } else {
        None
    };

    let services = if config.dial_out.enrollments_file.is_some() {
        SERVICES_WITH_HUB
    } else {
        SERVICES
    };
    let intro = introspection(services, &config.reflection)
        .await
        .map_err(ufo_common::grpc::ServeError::from)?;
    let mut routes = intro.routes;
    routes.add_service(AgentServiceServer::with_interceptor(
        api::grpc::AgentApi::new(tasks.clone()),
        keys.clone(),
    ));
    // Dial-out executors connect here, authenticated by their enrollment tokens (not API keys).
    if let Some(path) = &config.dial_out.enrollments_file {
        let hub = dispatch::dialout::server::HubService::new(
            config.dial_out.hub.0.clone(),
            dispatch::dialout::enroll::Enrollments::new(path),
            std::time::Duration::from_millis(config.dial_out.heartbeat_ms),
        )
        .with_pool(
            client.clone(),
            Some(std::time::Duration::from_millis(
                config.dial_out.seen_refresh_ms,
            )),
        );
        routes.add_service(hub.server(config.runner.executor_max_message_bytes));
        tracing::info!(enrollments = %path.display(), "dial-out executors enabled");
    }
    // Tasks are stored in Postgres: NUL is refused. The API server keeps tonic's default 4 MiB limit.
    let checks = config
        .request_checks
        .checks(true, 4 * 1024 * 1024)
        .map_err(ufo_common::grpc::ServeError::from)?;
    let grpc = serve_until(
        // HTTP/2 pings find a dead peer of a long-lived stream (StreamSteps, dial-out executors).
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(20)))
            .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10))),
        routes.routes(),
        checks,
        listeners.grpc,
        intro.health_reporter,
        services,
        shutdown.clone(),
    );

    let direct = tasks.desktop().direct().clone();
    let app = api::app(api::AppState {
        tasks,
        keys,
        shutdown: shutdown.clone(),
    });
    let http_shutdown = shutdown.clone();
    let http = async move {
        // TCP_NODELAY: a small response must not wait for the client's delayed ACK (Nagle).
        let listener = axum::serve::ListenerExt::tap_io(listeners.http, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { http_shutdown.cancelled().await })
            .await
            .map_err(RunError::Http)
    };

    let runner = async {
        match driver {
            Some(driver) if config.runner.slots > 0 => {
                let mut runner =
                    runner::Runner::new(config.runner.clone(), client, watch_client, driver)
                        .with_desktops(declared)
                        .with_reachable(runner::desktop::reachable(tasks_executors.clone()));
                if !config.runner.no_desktop_reset {
                    runner = runner.with_resetter(runner::desktop::resetter(
                        tasks_executors.clone(),
                        &config.runner,
                    ));
                }
                let runner = match experiences {
                    Some(recorder) => runner.with_experiences(recorder),
                    None => runner,
                };
                runner.run(shutdown.clone()).await;
            }
            _ => tracing::info!("task runner disabled: this replica serves the API only"),
        }
    };

    // Renews the leases of this process's direct sessions and ends those of agents that went away.
    let keeper = direct.keep(shutdown.clone());

    // The pool's gauges, read from the store as often as metrics are pushed (issue 36).
    let pool_gauges = async {
        if let Some(interval) = config.telemetry.metrics_interval() {
            api::pool_metrics::observe(
                pool_client,
                config.dial_out.hub.0.clone(),
                interval,
                shutdown.clone(),
            )
            .await;
        }
    };

    let (grpc, http, (), (), ()) = tokio::join!(grpc, http, runner, pool_gauges, keeper);
    grpc?;
    http?;
    Ok(())
}
