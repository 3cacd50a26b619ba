//! The task viewer and the API docs page, served by the agent on its REST port.
//!
//! Everything the browser loads is compiled into the binary (`include_str!`) and served from this origin;
//! a Content-Security-Policy allowing only `'self'` (and `blob:` images, which the page makes from
//! authenticated screenshot fetches) makes the browser refuse any other host, so the page works on a
//! machine with no internet and leaks nothing. The page holds the API key in `sessionStorage` and calls
//! the public REST API with it like any client: the same bearer auth and per-caller rules apply, and the
//! static assets themselves carry no data.
//!
//! - `/` (and `/ui/`): the viewer (`index.html`, `app.js`, `app.css`).
//! - `/docs`: a dependency-free renderer of `/openapi.json` (`docs.js`); `/swagger` redirects there.
//! - `/ui/config.json` (authenticated): what the page needs from the configuration (trace links, the
//!   executors tasks may name).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Serialize;

use super::AppState;
use super::auth;

/// Everything the browser may load: same origin only; screenshots arrive as `blob:` URLs.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const DOCS: &str = include_str!("assets/docs.html");
const DOCS_JS: &str = include_str!("assets/docs.js");
const FAVICON: &str = include_str!("assets/favicon.svg");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change only with the binary; revalidating is cheap and keeps an upgrade visible.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// What the page reads from the configuration.
#[derive(Debug, Serialize)]
struct PageConfig {
    /// Jaeger UI base address, if configured.
    jaeger_url: Option<String>,
    /// The service name traces are filed under.
    trace_service: &'static str,
    /// Executor names tasks may use instead of an address.
    executors: Vec<String>,
}

async fn page_config(State(state): State<AppState>) -> axum::Json<PageConfig> {
    let limits = state.tasks.limits();
    axum::Json(PageConfig {
        jaeger_url: limits.viewer.jaeger_url.clone(),
        trace_service: "ufo-agent",
        executors: state.tasks.executors().names().map(str::to_owned).collect(),
    })
}

/// The viewer's routes (merged into the REST router; not part of the OpenAPI document).
pub fn router(state: &AppState) -> Router<AppState> {
    let page = || async { asset("text/html; charset=utf-8", INDEX) };
    Router::new()
        .route(
            "/ui/config.json",
            get(page_config).route_layer(axum::middleware::from_fn_with_state(
                state.keys.clone(),
                auth::require_key,
            )),
        )
        .route("/", get(page))
        .route("/ui/", get(page))
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            "/ui/docs.js",
            get(|| async { asset("text/javascript; charset=utf-8", DOCS_JS) }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset("image/svg+xml", FAVICON) }),
        )
        .route(
            "/docs",
            get(|| async { asset("text/html; charset=utf-8", DOCS) }),
        )
        .route("/swagger", get(|| async { Redirect::permanent("/docs") }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_name_no_other_host() {
        // The page must work offline: no absolute address in what the browser loads.
        for (name, text) in [
            ("index.html", INDEX),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
            ("docs.html", DOCS),
            ("docs.js", DOCS_JS),
        ] {
            for bad in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(bad), "{name} contains {bad}");
            }
        }
    }
}
