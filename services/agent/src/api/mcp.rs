//! `/mcp`: ufo's task tools ([`ufo_mcp_server`]) over MCP's streamable HTTP transport (rmcp), on the REST
//! server. The tools call the same [`Tasks`] operations the REST handlers call, as the caller the REST
//! auth middleware identified from the request's API key, so roles and per-caller isolation are REST's
//! (another caller's task is "not found"). In front of auth: `Host` and `Origin` checks against DNS
//! rebinding (403 `{code, message}`); rmcp bounds the body (`--mcp-endpoint-max-body-bytes`, 413).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use ufo_common::ErrorCode;
use ufo_mcp_server::{Image, ServerLimits, TaskApi, TaskOrder, TaskServer, ToolError};
use ufo_proto::v1::{ArtifactKind, Event};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::model::{LimitsBody, StepPage, StepView, SubmitTask, TaskPage, TaskStatus, TaskView};
use super::service::Tasks;
use crate::config::McpServerConfig;

impl From<ApiError> for ToolError {
    fn from(error: ApiError) -> Self {
        ToolError::new(error.code.as_str(), error.message)
    }
}

fn view<T: serde::Serialize>(value: T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| ToolError::new("internal", e.to_string()))
}

/// The task operations as MCP tools see them on this agent.
#[derive(Clone, Debug)]
pub struct AgentTasks {
    tasks: Tasks,
}

impl AgentTasks {
    /// The tools' view of `tasks`.
    pub fn new(tasks: Tasks) -> Self {
        Self { tasks }
    }
}

fn enum_value<T: serde::de::DeserializeOwned>(field: &str, value: &str) -> Result<T, ToolError> {
    serde_json::from_value(Value::String(value.to_owned()))
        .map_err(|e| ToolError::invalid(format!("{field}: {e}")))
}

#[async_trait::async_trait]
impl TaskApi for AgentTasks {
    type Caller = Caller;

    fn caller(&self, extensions: &rmcp::model::Extensions) -> Result<Caller, ToolError> {
        extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ToolError::new("unauthenticated", "missing bearer token"))
    }

    async fn submit(&self, caller: &Caller, order: &TaskOrder) -> Result<Value, ToolError> {
        if order.replay_of.as_deref() == Some("") {
            return Err(ToolError::invalid("task_id must be a task id (a UUID)"));
        }
        let body = SubmitTask {
            request: order.request.clone(),
            executor: order.executor.clone(),
            labels: None,
            limits: Some(LimitsBody {
                max_steps: order.max_steps,
                max_cost: order.max_cost,
                timeout_seconds: order.timeout_seconds,
            }),
            model: None,
            confirm_policy: None,
            replay_of: order.replay_of.clone(),
            on_mismatch: order
                .on_mismatch
                .as_deref()
                .map(|m| enum_value("on_mismatch", m))
                .transpose()?,
            reuse: None,
        };
        let task = self.tasks.submit(caller, body.into_proto()).await?;
        view(TaskView::from_snapshot(task))
    }

    async fn get(&self, caller: &Caller, id: &str) -> Result<Value, ToolError> {
        view(TaskView::from_snapshot(self.tasks.get(id, caller).await?))
    }

    async fn list(
        &self,
        caller: &Caller,
        status: Option<&str>,
        page_size: Option<u32>,
        page_token: Option<&str>,
    ) -> Result<Value, ToolError> {
        let status = status
            .map(|s| enum_value::<TaskStatus>("status", s))
            .transpose()?
            .map_or(ufo_proto::v1::SessionStatus::Unspecified, |s| s.to_proto());
        let (sessions, next_page_token) = self
            .tasks
            .list(
                caller,
                page_size.unwrap_or(0),
                page_token.unwrap_or_default().to_owned(),
                status,
            )
            .await?;
        view(TaskPage {
            tasks: sessions.into_iter().map(TaskView::from_session).collect(),
            next_page_token,
        })
    }

    async fn steps(
        &self,
        caller: &Caller,
        id: &str,
        from: u64,
        limit: u32,
    ) -> Result<Value, ToolError> {
        let steps = self.tasks.steps(id, caller, from.max(1), limit).await?;
        view(StepPage {
            steps: steps.into_iter().map(StepView::from).collect(),
        })
    }

    async fn answer(
        &self,
        caller: &Caller,
        id: &str,
        question_ids: &[String],
        answers: &[String],
    ) -> Result<Value, ToolError> {
        let task = self
            .tasks
            .answer(id, caller, question_ids.to_vec(), answers.to_vec())
            .await?;
        view(TaskView::from_snapshot(task))
    }

    async fn confirm(
        &self,
        caller: &Caller,
        id: &str,
        action_id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<Value, ToolError> {
        let task = self
            .tasks
            .confirm(id, caller, action_id, approve, reason)
            .await?;
        view(TaskView::from_snapshot(task))
    }

    async fn cancel(&self, caller: &Caller, id: &str, reason: &str) -> Result<Value, ToolError> {
        let task = self.tasks.cancel(id, caller, reason.to_owned()).await?;
        view(TaskView::from_snapshot(task))
    }

    async fn screenshot(
        &self,
        caller: &Caller,
        id: &str,
        step: u64,
        kind: &str,
    ) -> Result<Image, ToolError> {
        let kind = match kind {
            "clean" => ArtifactKind::CleanScreenshot,
            "annotated" => ArtifactKind::AnnotatedScreenshot,
            "desktop" => ArtifactKind::DesktopScreenshot,
            "selected" => ArtifactKind::SelectedControlScreenshot,
            "after" => ArtifactKind::AfterScreenshot,
            other => {
                return Err(ToolError::invalid(format!(
                    "kind must be clean, annotated, desktop, selected or after, not {other:?}"
                )));
            }
        };
        let artifact = self.tasks.artifact(id, caller, step, kind).await?;
        let mime_type = artifact
            .r#ref
            .map(|r| r.content_type)
            .filter(|t| t == "image/png" || t == "image/jpeg")
            .unwrap_or_else(|| "image/png".to_owned());
        Ok(Image {
            mime_type,
            bytes: artifact.data.to_vec(),
        })
    }

    fn desktop_tools(&self) -> bool {
        true
    }

    async fn desktop(
        &self,
        caller: &Caller,
        call: &ufo_mcp_server::DesktopCall,
    ) -> Result<ufo_mcp_server::DesktopOutcome, ToolError> {
        self.tasks.desktop().run(&caller.name, call).await
    }

    async fn end_direct(&self, caller: &Caller, executor: &str) -> Result<Value, ToolError> {
        self.tasks.desktop().end(&caller.name, executor).await
    }

    async fn events(
        &self,
        caller: &Caller,
        id: &str,
        from_seq: u64,
    ) -> Result<BoxStream<'static, Result<Event, ToolError>>, ToolError> {
        // Unknown task (or another caller's): not found now, not an empty stream.
        let task = self.tasks.get(id, caller).await?;
        let stream = self.tasks.watch(&task.session.id, from_seq).await?;
        Ok(stream
            .map(|event| event.map_err(|status| ToolError::from(ApiError::from(status))))
            .boxed())
    }
}

/// The `Host` and `Origin` checks of `/mcp`.
#[derive(Debug, Clone)]
pub struct OriginGuard {
    hosts: Arc<[String]>,
    origins: Arc<[String]>,
    max_body_bytes: usize,
}

/// `(host, port)` of a `host[:port]` authority (`[v6]:port` or a bare IPv6 address too), lower-cased.
fn split_authority(authority: &str) -> (String, Option<String>) {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').map(str::to_owned);
        return (host.to_owned(), port);
    }
    match authority.split_once(':') {
        Some((host, port)) if !port.contains(':') => (host.to_owned(), Some(port.to_owned())),
        _ => (authority, None),
    }
}

impl OriginGuard {
    /// The checks `config` asks for.
    pub fn new(config: &McpServerConfig) -> Self {
        let clean = |list: &[String]| -> Arc<[String]> {
            list.iter()
                .map(|s| s.trim().trim_end_matches('/').to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Self {
            hosts: clean(&config.mcp_allowed_hosts),
            origins: clean(&config.mcp_allowed_origins),
            max_body_bytes: config.mcp_max_body_bytes,
        }
    }

    /// An entry without a port allows its host on any port; with one, that port only.
    fn host_allowed(&self, authority: &str) -> bool {
        let (host, port) = split_authority(authority);
        self.hosts.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            let (allowed, allowed_port) = split_authority(entry);
            allowed == host && (allowed_port.is_none() || allowed_port == port)
        })
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if !self.origins.is_empty() {
            return self.origins.iter().any(|o| o == "*" || *o == origin);
        }
        match origin.split_once("://") {
            Some(("http" | "https", authority)) if !authority.contains('/') => {
                self.host_allowed(authority)
            }
            _ => false,
        }
    }

    /// `Ok` when the request may reach `/mcp`; 403 naming the refused header otherwise, and 413 for a
    /// body announced larger than `--mcp-endpoint-max-body-bytes` — answered before any of it is read
    /// (rmcp also stops reading a body without a length at the limit).
    pub fn check(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        let announced = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(length) = announced
            && length > self.max_body_bytes as u64
        {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the request body is {length} bytes; /mcp takes at most {} (--mcp-endpoint-max-body-bytes)",
                    self.max_body_bytes
                ),
            ));
        }
        let refuse = |message: String| ApiError::new(ErrorCode::PermissionDenied, message);
        let host = headers
            .get(http::header::HOST)
            .map(|h| h.to_str().map(str::to_owned))
            .transpose()
            .map_err(|_| refuse("the Host header is not text".to_owned()))?;
        if let Some(host) = host
            && !self.host_allowed(&host)
        {
            return Err(refuse(format!(
                "Host {host:?} is not allowed for /mcp (--mcp-endpoint-allowed-hosts)"
            )));
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| refuse("the Origin header is not text".to_owned()))?;
            if !self.origin_allowed(origin) {
                return Err(refuse(format!(
                    "Origin {origin:?} is not allowed for /mcp (--mcp-endpoint-allowed-origins)"
                )));
            }
        }
        Ok(())
    }
}

async fn guard(
    State(guard): State<OriginGuard>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    guard.check(request.headers())?;
    Ok(next.run(request).await)
}

/// The `/mcp` route: Host/Origin guard, then the REST API-key auth, then rmcp's streamable HTTP service
/// (sessions for clients that initialize, stateless requests for those that do not).
pub fn router(state: &AppState) -> axum::Router<AppState> {
    let config = &state.tasks.limits().mcp_server;
    if !config.mcp_enabled {
        return axum::Router::new();
    }
    let limits = ServerLimits {
        max_argument_bytes: config.mcp_max_body_bytes,
    };
    let tasks = AgentTasks::new(state.tasks.clone());
    let http = StreamableHttpServerConfig::default()
        // The guard below checks Host and Origin with the operator's lists.
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(config.mcp_max_body_bytes)
        // Clients of the 2026-07-28 revision (stateless, served request by request) get a call whose
        // first message is its answer (a desktop tool, `list_tasks`, a refusal) as one JSON body; a call
        // that reports progress or asks first (`run_task`) still streams. Sessions (older revisions)
        // always stream, as rmcp serves them.
        .with_json_response(true)
        .with_sse_keep_alive(Some(std::time::Duration::from_secs(
            config.mcp_keepalive_seconds,
        )))
        .with_cancellation_token(state.shutdown.child_token());
    let service = StreamableHttpService::new(
        move || Ok(TaskServer::new(tasks.clone(), limits)),
        Arc::new(LocalSessionManager::default()),
        http,
    );
    axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            super::auth::require_key,
        ))
        .layer(axum::middleware::from_fn_with_state(
            OriginGuard::new(config),
            guard,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn guard(args: &[&str]) -> OriginGuard {
        let config = crate::Config::parse_from(
            ["ufo-agent", "--insecure-no-auth"]
                .iter()
                .chain(args.iter()),
        );
        OriginGuard::new(&config.api.mcp_server)
    }

    fn headers(host: &str, origin: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(http::header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_and_their_origins_pass_by_default() {
        let g = guard(&[]);
        assert!(g.check(&headers("127.0.0.1:8080", None)).is_ok());
        assert!(
            g.check(&headers("localhost", Some("http://localhost:3000")))
                .is_ok()
        );
        assert!(
            g.check(&headers("[::1]:8080", Some("http://[::1]:8080")))
                .is_ok()
        );
        let e = g
            .check(&headers("127.0.0.1:8080", Some("http://evil.example")))
            .unwrap_err();
        assert_eq!(e.http_status(), http::StatusCode::FORBIDDEN);
        assert!(e.message.contains("evil.example"), "{}", e.message);
        assert!(g.check(&headers("evil.example:8080", None)).is_err());
        assert!(g.check(&headers("127.0.0.1:8080", Some("null"))).is_err());
    }

    #[test]
    fn listed_hosts_and_origins_replace_the_defaults() {
        let g = guard(&[
            "--mcp-endpoint-allowed-hosts",
            "ufo.example:8443",
            "--mcp-endpoint-allowed-origins",
            "https://app.example",
        ]);
        assert!(
            g.check(&headers("ufo.example:8443", Some("https://app.example")))
                .is_ok()
        );
        assert!(g.check(&headers("ufo.example:9999", None)).is_err());
        assert!(g.check(&headers("127.0.0.1:8080", None)).is_err());
        assert!(
            g.check(&headers("ufo.example:8443", Some("https://ufo.example")))
                .is_err()
        );
        let any = guard(&["--mcp-endpoint-allowed-hosts", "*"]);
        assert!(any.check(&headers("anything:1", None)).is_ok());
    }
}
