//! The user-facing API of the agent service.
//!
//! - [`rest`]: REST handlers (axum) and [`openapi`]: the OpenAPI 3.1 document served at `/openapi.json`.
//! - [`grpc`]: the `ufo.v1.AgentService` gRPC service (tonic), including `StreamSteps`.
//! - [`service`]: the task operations both share, reading and writing only through the session service.
//! - [`auth`]: bearer API keys (fail-closed); [`error`] / [`extract`]: `{code, message}` errors everywhere.
//! - [`model`]: REST bodies; [`session`]: the session-service client.
//! - [`sse`]: a task's events as server-sent events; [`web`]: the task viewer and the API docs page.
//! - [`mcp`]: `/mcp`, the task tools for MCP clients (streamable HTTP), on the same [`Tasks`] and auth.

pub mod admin;
pub mod auth;
pub mod checks;
pub mod decisions;
pub mod desktop;
pub mod desktop_calls;
pub mod direct;
pub mod error;
pub mod extract;
pub mod grpc;
pub mod knowledge;
pub mod live;
pub mod mcp;
pub mod model;
pub mod openapi;
pub mod pool;
pub mod pool_metrics;
pub mod recordings;
pub mod replay;
pub mod rest;
pub mod reuse;
pub mod service;
pub mod sse;
pub mod takeover;
pub mod validate;
pub mod web;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::ApiKeys;
pub use error::ApiError;
pub use service::Tasks;

/// What every REST handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Task operations.
    pub tasks: Tasks,
    /// Accepted API keys.
    pub keys: ApiKeys,
    /// Fires on shutdown (`/readyz` turns 503 first).
    pub shutdown: CancellationToken,
}

/// The REST router: `/v1/...` behind API-key auth, `/healthz`, `/readyz` and `/openapi.json` open.
pub fn app(state: AppState) -> Router {
    let upload_limit =
        usize::try_from(state.tasks.limits().knowledge_max_upload_bytes).unwrap_or(usize::MAX);
    let (api, doc) = OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(rest::submit_task, rest::list_tasks))
        .routes(routes!(rest::get_task))
        .routes(routes!(rest::list_steps))
        .routes(routes!(rest::screenshot))
        .routes(routes!(rest::answer))
        .routes(routes!(rest::confirm))
        .routes(routes!(rest::add_request))
        .routes(routes!(rest::cancel))
        .routes(routes!(sse::events))
        .routes(routes!(desktop_calls::desktop_call))
        .routes(routes!(live::live))
        .routes(routes!(takeover::takeover))
        .routes(routes!(takeover::input))
        .routes(routes!(takeover::handback))
        .routes(routes!(admin::prune))
        .routes(routes!(admin::list_executors))
        .routes(routes!(admin::create_enrollment))
        .routes(routes!(admin::revoke_enrollment))
        .routes(routes!(pool::list_desktops))
        .routes(routes!(pool::remove_desktop))
        .routes(routes!(pool::drain_desktop))
        .routes(routes!(pool::undrain_desktop))
        .routes(routes!(pool::ready_desktop))
        .routes(routes!(knowledge::search))
        .routes(routes!(knowledge::rate))
        .routes(routes!(knowledge::share))
        .routes(routes!(knowledge::unshare))
        .routes(routes!(recordings::start_recording))
        .routes(routes!(recordings::get_recording))
        .routes(routes!(recordings::stop_recording))
        .merge(
            // Help files are larger than any other body: their own limit (413 beyond).
            OpenApiRouter::new()
                .routes(routes!(knowledge::add_documents))
                .layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            auth::require_key,
        ))
        .routes(routes!(rest::healthz))
        .routes(routes!(rest::readyz))
        .split_for_parts();
    let document = openapi::finish(
        doc,
        state.tasks.limits(),
        state.tasks.executors(),
        state.tasks.prices(),
    );
    let max_body = state.tasks.limits().max_body_bytes;
    api.merge(web::router(&state))
        .merge(mcp::router(&state))
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let document = document.clone();
                async move { axum::Json(document) }
            }),
        )
        .fallback(|| async { ApiError::new(ufo_common::ErrorCode::NotFound, "no such endpoint") })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(http_span as fn(&_) -> _),
        )
        .with_state(state)
}

fn http_span(request: &http::Request<axum::body::Body>) -> tracing::Span {
    let span = tracing::info_span!(
        "http.server",
        otel.name = %format!("{} {}", request.method(), request.uri().path()),
        otel.kind = "server",
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
    );
    ufo_common::telemetry::set_parent_from_headers(&span, request.headers());
    span
}
