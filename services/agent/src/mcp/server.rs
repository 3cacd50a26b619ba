//! One MCP server as the agent uses it: connected on first use (stdio: a child process started beside the
//! agent; HTTP: a streamable-HTTP session), its tools listed at connection and listed again before their
//! next use after the server sends `notifications/tools/list_changed`, each call bounded by a timeout
//! and run in an `mcp.call` span whose W3C trace context travels in the request's `_meta`. A server that
//! dies or stops answering is dropped: its tools are unavailable (the step is told why) and it is started
//! again on a later use, after a backoff that doubles up to a cap.
//!
//! Stdio servers on the desktop (`on: desktop`) are started by the task's executor instead
//! ([`super::desktop`]).
//!
//! Stdio children: their own process group (killed as a group when the connection is dropped), and on
//! Linux `PR_SET_PDEATHSIG` = SIGKILL so an agent killed with `kill -9` leaves no orphan server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ContentBlock, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tracing::Instrument as _;

use super::config::{ServerConfig, Transport};

/// Limits shared by every server (flags `--mcp-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpLimits {
    /// A tool call's timeout unless the server sets its own.
    pub call_timeout: Duration,
    /// Connecting and listing the tools.
    pub connect_timeout: Duration,
    /// The first wait before starting a failed server again (doubles per failure).
    pub restart_backoff: Duration,
    /// The longest such wait.
    pub restart_backoff_max: Duration,
    /// Characters of a tool's result text kept.
    pub result_chars: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(20),
            restart_backoff: Duration::from_millis(500),
            restart_backoff_max: Duration::from_secs(30),
            result_chars: 20_000,
        }
    }
}

/// Why a server or one of its tools could not be used (told to the model as the action's error).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum McpError {
    /// The server could not be started or connected.
    #[error("MCP server {server} is unavailable: {reason}")]
    Unavailable {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server failed recently and is not started again before its backoff ends.
    #[error("MCP server {server} is unavailable (restarting in {wait_ms} ms): {reason}")]
    BackingOff {
        /// The server.
        server: String,
        /// Milliseconds left.
        wait_ms: u64,
        /// Its last failure.
        reason: String,
    },
    /// The server does not offer the tool.
    #[error("MCP server {server} has no tool {tool}")]
    NoSuchTool {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// The call did not answer in time (the server is restarted).
    #[error("MCP tool {server}/{tool} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The limit.
        timeout_ms: u64,
    },
    /// The call failed in the protocol or the connection broke (the server is restarted).
    #[error("MCP tool {server}/{tool} failed: {reason}")]
    Call {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

/// A tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// Its name on the server.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its input JSON schema.
    pub input_schema: Value,
}

/// A tool call's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct McpOutput {
    /// The server marked it an error (`isError`).
    pub is_error: bool,
    /// Its text content, joined (bounded by [`McpLimits::result_chars`]).
    pub text: String,
    /// Its structured content, if any.
    pub structured: Option<Value>,
}

struct Connection {
    service: RunningService<RoleClient, Listener>,
    /// The tools as last listed.
    tools: std::sync::Mutex<Vec<McpTool>>,
    /// Set by the server's `notifications/tools/list_changed`: list them again before the next use.
    stale: Arc<AtomicBool>,
    _child: Option<ChildGuard>,
    /// A server on the desktop: its process (stopped when dropped).
    desktop: Option<super::desktop::DesktopProcess>,
}

impl Connection {
    fn listed(&self) -> Vec<McpTool> {
        self.tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The client side of a connection: notes the server's `notifications/tools/list_changed`.
struct Listener {
    server: String,
    stale: Arc<AtomicBool>,
}

impl rmcp::ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        self.stale.store(true, Ordering::SeqCst);
        tracing::info!(server = %self.server, "MCP tools changed: listed again before their next use");
        std::future::ready(())
    }
}

/// Every tool `service` offers, as the agent keeps them.
/// Why an MCP server could not be connected or its tools listed (the `reason` of
/// [`McpError::Unavailable`]).
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The child process could not be started.
    #[error("cannot start {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    /// The child was started without piped stdio.
    #[error("the child's stdio is not piped")]
    NotPiped,
    /// The MCP handshake failed (the chain of causes, see `init_error`).
    #[error("initialisation failed: {0}")]
    Initialise(String),
    /// A file the HTTP transport needs could not be read.
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The CA file holds no certificate.
    #[error("the CA file {} holds no PEM certificate", .0.display())]
    NoCertificate(std::path::PathBuf),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// `tools/list` failed.
    #[error("tools/list failed: {0}")]
    List(#[source] rmcp::ServiceError),
    /// A desktop server's executor refused or failed to start it.
    #[error("the executor did not start it: {0}")]
    Desktop(#[source] super::desktop::DesktopError),
    /// A desktop server outside a task (no executor to start it on).
    #[error("it runs on the desktop, and no task's executor is bound to it here")]
    NoDesktop,
    /// `tools/list` did not answer within the connect timeout.
    #[error("tools/list: no answer within {} ms", .0.as_millis())]
    ListTimeout(Duration),
    /// The connection was not made within the connect timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

async fn list_tools(
    service: &RunningService<RoleClient, Listener>,
) -> Result<Vec<McpTool>, ConnectError> {
    let listed = service
        .peer()
        .list_all_tools()
        .await
        .map_err(ConnectError::List)?;
    Ok(listed
        .into_iter()
        .map(|t| McpTool {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            input_schema: Value::Object((*t.input_schema).clone()),
        })
        .collect())
}

#[derive(Default)]
struct State {
    conn: Option<Arc<Connection>>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: String,
}

/// One configured server (see the module doc).
pub struct McpServer {
    config: ServerConfig,
    limits: McpLimits,
    state: Mutex<State>,
    /// The task's executor, for a server on the desktop.
    desktop: Option<Arc<dyn crate::dispatch::CommandDispatcher>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .finish()
    }
}

impl McpServer {
    /// A server, not yet connected.
    pub fn new(config: ServerConfig, limits: McpLimits) -> Self {
        Self {
            config,
            limits,
            state: Mutex::new(State::default()),
            desktop: None,
        }
    }

    /// A server on the desktop, started through `executor` (the task's).
    pub fn on_executor(
        config: ServerConfig,
        limits: McpLimits,
        executor: Arc<dyn crate::dispatch::CommandDispatcher>,
    ) -> Self {
        Self {
            desktop: Some(executor),
            ..Self::new(config, limits)
        }
    }

    /// Its limits.
    pub fn limits(&self) -> McpLimits {
        self.limits
    }

    /// Its configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    fn call_timeout(&self) -> Duration {
        self.config
            .call_timeout_ms
            .map_or(self.limits.call_timeout, Duration::from_millis)
    }

    /// Its tools, connecting (or restarting it) first when needed, and listing them again when the
    /// server said they changed.
    pub async fn tools(&self) -> Result<Vec<McpTool>, McpError> {
        let conn = self.connection().await?;
        self.current_tools(&conn).await
    }

    /// `conn`'s tools, listed again first when they changed (a listing that fails drops the connection,
    /// as a failed call does).
    async fn current_tools(&self, conn: &Connection) -> Result<Vec<McpTool>, McpError> {
        if !conn.stale.swap(false, Ordering::SeqCst) {
            return Ok(conn.listed());
        }
        let relisted = tokio::time::timeout(self.limits.connect_timeout, list_tools(&conn.service))
            .instrument(tracing::info_span!("mcp.relist", server = %self.name()))
            .await
            .unwrap_or(Err(ConnectError::ListTimeout(self.limits.connect_timeout)));
        match relisted {
            Ok(tools) => {
                tracing::info!(server = %self.name(), tools = tools.len(), "MCP tools listed again");
                tools.clone_into(
                    &mut conn
                        .tools
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                Ok(tools)
            }
            Err(reason) => {
                let reason = reason.to_string();
                self.drop_connection(&reason).await;
                Err(McpError::Unavailable {
                    server: self.name().to_owned(),
                    reason,
                })
            }
        }
    }

    async fn connection(&self) -> Result<Arc<Connection>, McpError> {
        let mut state = self.state.lock().await;
        if let Some(c) = &state.conn {
            if !c.service.is_closed() {
                return Ok(c.clone());
            }
            let why = c
                .desktop
                .as_ref()
                .and_then(super::desktop::DesktopProcess::ended);
            state.conn = None;
            state.last_error = why.unwrap_or_else(|| "the server closed the connection".into());
            self.failed(&mut state);
        }
        if let Some(at) = state.retry_at {
            let now = Instant::now();
            if at > now {
                return Err(McpError::BackingOff {
                    server: self.name().to_owned(),
                    wait_ms: u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX),
                    reason: state.last_error.clone(),
                });
            }
        }
        let connect = tokio::time::timeout(self.limits.connect_timeout, self.connect());
        let result = match connect
            .instrument(tracing::info_span!("mcp.connect", server = %self.name()))
            .await
        {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Timeout(self.limits.connect_timeout)),
        };
        match result {
            Ok(c) => {
                let c = Arc::new(c);
                state.conn = Some(c.clone());
                state.failures = 0;
                state.retry_at = None;
                tracing::info!(server = %self.name(), tools = c.listed().len(), "MCP server connected");
                Ok(c)
            }
            Err(reason) => {
                let reason = reason.to_string();
                state.last_error.clone_from(&reason);
                self.failed(&mut state);
                tracing::warn!(server = %self.name(), %reason, "MCP server unavailable");
                Err(McpError::Unavailable {
                    server: self.name().to_owned(),
                    reason,
                })
            }
        }
    }

    /// Counts a failure and sets when the server may be started again.
    fn failed(&self, state: &mut State) {
        let shift = state.failures.min(16);
        state.failures = state.failures.saturating_add(1);
        let wait = self
            .limits
            .restart_backoff
            .saturating_mul(1u32 << shift)
            .min(self.limits.restart_backoff_max);
        state.retry_at = Some(Instant::now() + wait);
    }

    /// Drops the connection after a failed call (the child is killed with it).
    async fn drop_connection(&self, reason: &str) {
        let mut state = self.state.lock().await;
        if state.conn.take().is_some() {
            reason.clone_into(&mut state.last_error);
            self.failed(&mut state);
        }
    }

    async fn connect(&self) -> Result<Connection, ConnectError> {
        let stale = Arc::new(AtomicBool::new(false));
        let listener = || Listener {
            server: self.name().to_owned(),
            stale: stale.clone(),
        };
        let mut desktop = None;
        let (service, child) = match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
                ..
            } if self.config.transport.on_desktop() => {
                let exec = self.desktop.clone().ok_or(ConnectError::NoDesktop)?;
                let (process, pipe) = super::desktop::DesktopProcess::start(
                    exec,
                    self.name(),
                    command,
                    args,
                    env,
                    cwd.as_deref(),
                    self.call_timeout(),
                )
                .await
                .map_err(ConnectError::Desktop)?;
                let served = listener().serve(tokio::io::split(pipe)).await;
                let service = match served {
                    Ok(s) => s,
                    Err(e) => {
                        let mut reason = init_error(&e);
                        // The program may have ended at once (a bad argument, a missing module).
                        for _ in 0..20 {
                            if let Some(why) = process.ended() {
                                reason = format!("{reason} ({why})");
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        return Err(ConnectError::Initialise(reason));
                    }
                };
                desktop = Some(process);
                (service, None)
            }
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
                ..
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .envs(env)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::inherit())
                    .kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                guard_child(&mut cmd);
                let mut child = cmd.spawn().map_err(|source| ConnectError::Spawn {
                    command: command.clone(),
                    source,
                })?;
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(ConnectError::NotPiped);
                };
                let guard = ChildGuard::new(child);
                let service = listener()
                    .serve((stdout, stdin))
                    .await
                    .map_err(|e| ConnectError::Initialise(init_error(&e)))?;
                (service, Some(guard))
            }
            Transport::Http {
                url,
                token_file,
                ca_file,
            } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(path) = token_file {
                    let token =
                        std::fs::read_to_string(path).map_err(|source| ConnectError::Read {
                            what: "token file",
                            path: path.clone(),
                            source,
                        })?;
                    config = config.auth_header(token.trim().to_owned());
                }
                ufo_common::tls::install_crypto_provider();
                let mut builder = reqwest::Client::builder();
                if let Some(path) = ca_file {
                    let pem = std::fs::read(path).map_err(|source| ConnectError::Read {
                        what: "CA file",
                        path: path.clone(),
                        source,
                    })?;
                    let certs = reqwest::Certificate::from_pem_bundle(&pem)
                        .ok()
                        .filter(|c| !c.is_empty())
                        .ok_or_else(|| ConnectError::NoCertificate(path.clone()))?;
                    for cert in certs {
                        builder = builder.add_root_certificate(cert);
                    }
                }
                let client = builder.build().map_err(ConnectError::Client)?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let service = listener()
                    .serve(transport)
                    .await
                    .map_err(|e| ConnectError::Initialise(init_error(&e)))?;
                (service, None)
            }
        };
        // A change announced from here on is listed again at the next use.
        let tools = list_tools(&service).await?;
        Ok(Connection {
            service,
            tools: std::sync::Mutex::new(tools),
            stale,
            _child: child,
            desktop,
        })
    }

    /// Calls `tool` with `arguments` (see the module doc for timeouts and restarts).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<McpOutput, McpError> {
        let span = tracing::info_span!(
            "mcp.call",
            otel.name = %format!("mcp.call {}/{}", self.name(), tool),
            server = %self.name(),
            tool = %tool,
            is_error = tracing::field::Empty,
        );
        self.call_inner(tool, arguments).instrument(span).await
    }

    async fn call_inner(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<McpOutput, McpError> {
        let conn = self.connection().await?;
        if !self
            .current_tools(&conn)
            .await?
            .iter()
            .any(|t| t.name == tool)
        {
            return Err(McpError::NoSuchTool {
                server: self.name().to_owned(),
                tool: tool.to_owned(),
            });
        }
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        params.meta = Some(trace_meta());
        let timeout = self.call_timeout();
        let answer = tokio::time::timeout(timeout, conn.service.call_tool(params)).await;
        drop(conn);
        let result = match answer {
            Err(_) => {
                let e = McpError::Timeout {
                    server: self.name().to_owned(),
                    tool: tool.to_owned(),
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                };
                // A server that hangs holds the call forever: start it again before the next use.
                self.drop_connection(&e.to_string()).await;
                return Err(e);
            }
            Ok(Err(e)) => {
                let e = McpError::Call {
                    server: self.name().to_owned(),
                    tool: tool.to_owned(),
                    reason: e.to_string(),
                };
                self.drop_connection(&e.to_string()).await;
                return Err(e);
            }
            Ok(Ok(r)) => r,
        };
        let is_error = result.is_error.unwrap_or(false);
        tracing::Span::current().record("is_error", is_error);
        let text = result
            .content
            .iter()
            .map(|c| match c {
                ContentBlock::Text(t) => t.text.clone(),
                other => json!(other).to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(McpOutput {
            is_error,
            text: truncate(&text, self.limits.result_chars),
            structured: result.structured_content,
        })
    }
}

/// `text` cut to `max` characters (on a character boundary), marked with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The current span's W3C trace context (`traceparent`, `tracestate`) as request `_meta` (SEP-414).
fn trace_meta() -> RequestMetaObject {
    let mut headers = http::HeaderMap::new();
    ufo_common::telemetry::inject_http(&mut headers);
    let mut meta = Map::new();
    for key in ["traceparent", "tracestate"] {
        if let Some(v) = headers.get(key).and_then(|v| v.to_str().ok()) {
            meta.insert(key.to_owned(), Value::String(v.to_owned()));
        }
    }
    RequestMetaObject(rmcp::model::MetaObject(meta))
}

/// A stdio server's process: its whole group is killed when the connection is dropped.
struct ChildGuard {
    child: tokio::process::Child,
}

impl ChildGuard {
    fn new(child: tokio::process::Child) -> Self {
        Self { child }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) with a negative pid signals the child's own process group (it was made
            // its leader at spawn); no memory is touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.start_kill();
    }
}

/// Makes a stdio server the leader of its own process group and, on Linux, asks the kernel to kill it
/// when the agent dies.
fn guard_child(cmd: &mut tokio::process::Command) {
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    ufo_common::process::die_with_parent(cmd.as_std_mut(), libc::SIGKILL);
}

/// Why initialising a connection failed, down to the innermost cause: rmcp keeps the transport's error
/// out of the `source()` chain, so the HTTP client's own error (e.g. "invalid peer certificate:
/// UnknownIssuer") is dug out by type.
fn init_error(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError;
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    use ufo_common::error::chain;
    match e {
        ClientInitializeError::TransportError { error, context } => {
            let inner = error.error.as_ref();
            match inner.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::Client(http)) => format!("{context}: {}", chain(http)),
                _ => format!("{context}: {}", chain(inner)),
            }
        }
        other => chain(other),
    }
}
