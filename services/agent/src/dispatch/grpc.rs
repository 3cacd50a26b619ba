//! The executor's gRPC client as a [`CommandDispatcher`]: commands become `ufo.v1.Command`s (parameters as
//! `Struct`), screenshots come back as bytes with their transform. One span per batch.

use std::net::Ipv6Addr;
use std::time::Duration;

use async_trait::async_trait;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tracing::Instrument as _;
use ufo_common::grpc::ClientContext;
use ufo_proto::v1;
use ufo_proto::v1::executor_client::ExecutorClient;

use super::tools::{ExecutorCatalog, ToolSpec};
use super::{Command, CommandDispatcher, CommandResult, DispatchError, ResultStatus, ToolType};
use crate::vision::Screenshot;

/// How calls reach an executor: the gRPC connection to an executor that listens, or the stream a
/// dial-out executor opened to this agent. Everything above it (the Executor client, retries, the
/// catalog) is the same code for both.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Dialled in: HTTP/2 to the executor's address.
    Channel(Channel),
    /// Dialled out: the executor's stream ([`super::dialout`]).
    Tunnel(super::dialout::TunnelChannel),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<tonic::body::Body>> for Transport {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        match self {
            Self::Channel(c) => c.poll_ready(cx).map_err(Into::into),
            Self::Tunnel(t) => t.poll_ready(cx),
        }
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        match self {
            Self::Channel(c) => {
                let call = c.call(request);
                Box::pin(async move { call.await.map_err(Into::into) })
            }
            Self::Tunnel(t) => t.call(request),
        }
    }
}

/// The Executor client's transport with its call context (bearer token, trace context).
pub type ExecutorTransport = InterceptedService<Transport, ClientContext>;

/// Dispatches to an executor over gRPC.
#[derive(Debug, Clone)]
pub struct GrpcDispatcher {
    client: ExecutorClient<ExecutorTransport>,
    command_deadline_ms: u32,
    catalog: std::sync::Arc<super::tools::CatalogCache>,
    /// Total time to keep retrying an unreachable executor (zero: no retries).
    retry_budget: Duration,
    /// The executor as `host:port`, for errors shown to users.
    label: String,
}

impl GrpcDispatcher {
    /// Connects lazily to `address` (`http://host:port`, or `https://host:port` for an executor serving
    /// TLS), sending `token` as a bearer token when set. An `https` executor's certificate is verified
    /// against `ca_pem` (PEM certificates) when given, else against the public web PKI roots; the host name
    /// of `address` must match the certificate.
    pub fn connect_lazy(
        address: &str,
        token: Option<&str>,
        command_deadline_ms: u32,
        max_message_bytes: usize,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, DispatchError> {
        let mut endpoint = Endpoint::from_shared(address.to_owned())
            .map_err(|e| DispatchError::Address(e.to_string()))?;
        if address.starts_with("https://") {
            ufo_common::tls::install_crypto_provider();
            let tls = match ca_pem {
                Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                None => ClientTlsConfig::new().with_webpki_roots(),
            };
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| DispatchError::Address(format!("TLS for {address}: {e}")))?;
        }
        let channel = endpoint.connect_lazy();
        let label = parse_address(address).map_or_else(
            || "(unparsable address)".to_owned(),
            |(host, port)| match port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            },
        );
        Self::over(
            Transport::Channel(channel),
            token,
            command_deadline_ms,
            max_message_bytes,
            label,
        )
    }

    /// Dispatches to the dial-out executor `name` over its stream (`channel`, from the hub).
    pub fn dial_out(
        channel: super::dialout::TunnelChannel,
        name: &str,
        command_deadline_ms: u32,
        max_message_bytes: usize,
    ) -> Result<Self, DispatchError> {
        Self::over(
            Transport::Tunnel(channel),
            None,
            command_deadline_ms,
            max_message_bytes,
            format!("{}{name}", super::dialout::SCHEME),
        )
    }

    fn over(
        transport: Transport,
        token: Option<&str>,
        command_deadline_ms: u32,
        max_message_bytes: usize,
        label: String,
    ) -> Result<Self, DispatchError> {
        let ctx = ClientContext::new(token).map_err(|e| DispatchError::Address(e.to_string()))?;
        let client = ExecutorClient::with_interceptor(transport, ctx)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes);
        Ok(Self {
            client,
            command_deadline_ms,
            catalog: Default::default(),
            retry_budget: Duration::ZERO,
            label,
        })
    }

    /// The Executor client itself, for the calls that are not command batches (the live desktop, a
    /// person's input; docs/live.md).
    pub fn client(&self) -> ExecutorClient<ExecutorTransport> {
        self.client.clone()
    }

    /// Keeps retrying an unreachable executor for up to `budget` in total (observations while it is
    /// UNAVAILABLE, actions only when the connection was refused before sending).
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }

    /// Resets the executor's desktop between tasks of the pool (issue 36): once, no retries (the caller
    /// bounds it). `Rpc` with FAILED_PRECONDITION carries the executor's reason when a step failed.
    pub async fn reset(&self, task_id: &str) -> Result<v1::ResetResponse, DispatchError> {
        let request = v1::ResetRequest {
            task_id: task_id.to_owned(),
        };
        self.client
            .clone()
            .reset(request)
            .instrument(tracing::info_span!("executor.reset", executor = %self.label))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| status_error(&s))
    }

    fn unreachable(&self, waited: Duration, cause: String) -> DispatchError {
        DispatchError::Unreachable {
            executor: self.label.clone(),
            waited_ms: waited.as_millis() as u64,
            cause,
        }
    }
}

fn status_error(s: &tonic::Status) -> DispatchError {
    DispatchError::Rpc {
        code: s.code(),
        message: s.message().to_owned(),
    }
}

fn to_proto(c: Command) -> v1::Command {
    v1::Command {
        tool_name: c.tool_name,
        parameters: Some(ufo_proto::json::object_to_struct(c.parameters)),
        tool_type: v1::ToolType::from(c.tool_type) as i32,
        call_id: c.call_id,
    }
}

fn from_proto(r: v1::Result) -> CommandResult {
    let status = match v1::ResultStatus::try_from(r.status) {
        Ok(v1::ResultStatus::Success) => ResultStatus::Success,
        Ok(v1::ResultStatus::Skipped) => ResultStatus::Skipped,
        Ok(v1::ResultStatus::None) => ResultStatus::None,
        _ => ResultStatus::Failure,
    };
    CommandResult {
        status,
        error: r.error,
        result: r
            .result
            .map_or(serde_json::Value::Null, ufo_proto::json::from_value),
        call_id: r.call_id,
        duration_us: r.duration_us,
        images: r.images.into_iter().map(image).collect(),
        warnings: r.warnings,
        settle: r.settle.map(|s| super::Settle {
            outcome: match v1::SettleOutcome::try_from(s.outcome) {
                Ok(v1::SettleOutcome::Settled) => super::SettleOutcome::Settled,
                Ok(v1::SettleOutcome::NoChange) => super::SettleOutcome::NoChange,
                Ok(v1::SettleOutcome::Timeout) => super::SettleOutcome::Timeout,
                Ok(v1::SettleOutcome::Unsupported) => super::SettleOutcome::Unsupported,
                _ => super::SettleOutcome::Unspecified,
            },
            waited_us: s.waited_us,
            draws: s.draws,
            accessibility_events: s.accessibility_events,
            animations: s.animations,
            ignored: s.ignored,
        }),
        // An executor that did not say (or said what this build does not know): no effect to report.
        effect: r.effect.and_then(|e| {
            Some(super::Effect {
                kind: super::EffectKind::from_proto(e.kind)?,
                description: e.description,
            })
        }),
    }
}

fn image(i: v1::Image) -> Screenshot {
    let t = i.transform.unwrap_or_default();
    Screenshot {
        mime: if i.format == v1::ImageFormat::Jpeg as i32 {
            "image/jpeg".into()
        } else {
            "image/png".into()
        },
        bytes: i.data,
        width: i.width,
        height: i.height,
        origin_x: t.origin_x,
        origin_y: t.origin_y,
        scale: if t.scale > 0.0 { t.scale } else { 1.0 },
    }
}

#[async_trait]
impl CommandDispatcher for GrpcDispatcher {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        let sent = commands.len();
        let tools: Vec<&str> = commands.iter().map(|c| c.tool_name.as_str()).collect();
        let span = tracing::info_span!("executor.execute", tools = ?tools, commands = sent);
        let request = v1::ExecuteRequest {
            commands: commands.into_iter().map(to_proto).collect(),
            command_deadline_ms: self.command_deadline_ms,
            image_format: v1::ImageFormat::Png as i32,
            jpeg_quality: 0,
        };
        let observe_only = request
            .commands
            .iter()
            .all(|c| c.tool_type == v1::ToolType::DataCollection as i32);
        let retryable = |s: &tonic::Status| {
            // The executor may come back restarted with other tools: fetch its catalog again.
            if super::tools::is_transport_failure(s.code()) {
                self.catalog.invalidate();
            }
            if observe_only {
                // A connection dropped under the call surfaces as CANCELLED: repeating an
                // observation is harmless, and the budget bounds it.
                matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Cancelled)
            } else {
                super::retry::refused_before_sending(s)
            }
        };
        let response = super::retry::retrying(self.retry_budget, retryable, || {
            let mut client = self.client.clone();
            let request = request.clone();
            async move { client.execute(request).await }
        })
        .instrument(span)
        .await
        .map_err(|e| match e {
            super::retry::Exhausted::Final(s) => status_error(&s),
            super::retry::Exhausted::Budget { last, waited } => {
                let refused = super::retry::refused_before_sending(&last);
                let cause = format!(
                    "{:?}{}",
                    last.code(),
                    if refused { ": connection refused" } else { "" }
                );
                self.unreachable(waited, cause)
            }
        })?
        .into_inner();
        if response.results.len() != sent {
            return Err(DispatchError::Mismatch {
                sent,
                got: response.results.len(),
            });
        }
        Ok(response.results.into_iter().map(from_proto).collect())
    }

    async fn catalog(
        &self,
    ) -> Result<std::sync::Arc<super::tools::ExecutorCatalog>, DispatchError> {
        let unavailable = |e: &DispatchError| {
            matches!(
                e,
                DispatchError::Rpc {
                    code: tonic::Code::Unavailable,
                    ..
                }
            )
        };
        self.catalog
            .get_or_fetch(|| async {
                super::retry::retrying(self.retry_budget, unavailable, || {
                    fetch_catalog(self.client.clone())
                })
                .await
                .map_err(|e| match e {
                    super::retry::Exhausted::Final(e) => e,
                    super::retry::Exhausted::Budget { waited, .. } => {
                        self.unreachable(waited, "Unavailable".into())
                    }
                })
            })
            .await
    }
}

/// Asks an executor for its tools and capabilities.
async fn fetch_catalog(
    mut client: ExecutorClient<ExecutorTransport>,
) -> Result<ExecutorCatalog, DispatchError> {
    let span = tracing::info_span!("executor.catalog");
    async move {
        // Both at once: a task's first observation waits for one round trip to its desktop, not two.
        let mut second = client.clone();
        let (tools, caps) = tokio::try_join!(
            async {
                client
                    .list_tools(v1::ListToolsRequest {})
                    .await
                    .map_err(|s| status_error(&s))
            },
            async {
                second
                    .get_capabilities(v1::GetCapabilitiesRequest {})
                    .await
                    .map_err(|s| status_error(&s))
            },
        )?;
        let (tools, caps) = (tools.into_inner().tools, caps.into_inner());
        Ok(ExecutorCatalog {
            tools: tools
                .into_iter()
                .map(|t| ToolSpec {
                    kind: ToolType::from_wire(t.tool_type),
                    parameters: t.parameters_schema.map_or(serde_json::Value::Null, |s| {
                        serde_json::Value::Object(ufo_proto::json::struct_to_map(s))
                    }),
                    name: t.name,
                    description: t.description,
                })
                .collect(),
            allowed_applications: caps.allowed_applications,
        })
    }
    .instrument(span)
    .await
}

/// `http(s)://host[:port][/]` split into host and port; `None` when malformed. Hosts are letters, digits,
/// dots and dashes, or a bracketed IPv6 literal.
pub fn parse_address(text: &str) -> Option<(String, Option<u16>)> {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        host.parse::<Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (host.to_owned(), port)
    } else {
        let (host, port) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        let ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !ok {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    Some((host, port))
}
