//! OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, LM Studio: any base URL) and Azure OpenAI
//! (deployment, `api-version`, `api-key` header), over reqwest. Wire structs live in [`wire`] only.

mod wire;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument as _;

use super::cost::PriceTable;
use super::error::LlmError;
use super::retry::{RetryPolicy, parse_retry_after};
use super::types::{ChatModel, ChatRequest, ChatResponse, Usage};
use crate::config::secret::ApiKey;

/// Which dialect of the API to speak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    /// `POST {base_url}/chat/completions`, `Authorization: Bearer <key>`.
    OpenAi,
    /// `POST {base_url}/openai/deployments/{deployment}/chat/completions?api-version=…`, `api-key: <key>`.
    Azure {
        /// Deployment name.
        deployment: String,
        /// `api-version` query parameter, e.g. `2024-10-21`.
        api_version: String,
    },
}

/// Configuration of one model endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Model name (sent as `model`; used for prices and spans).
    pub model: String,
    /// API key; `None` for local servers that need none.
    pub api_key: Option<ApiKey>,
    /// API dialect.
    pub flavor: Flavor,
    /// Timeout of one HTTP attempt.
    pub timeout: Duration,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
    /// The endpoint accepts `response_format: json_object`.
    pub json_object: bool,
    /// The endpoint accepts `response_format: json_schema`.
    pub json_schema: bool,
    /// Largest reply body read, in bytes; a larger one is [`LlmError::TooLarge`].
    pub max_reply_bytes: u64,
}

use crate::config::DEFAULT_MAX_REPLY_BYTES;

impl OpenAiConfig {
    /// An OpenAI-compatible endpoint with defaults (60 s timeout, 3 retries, JSON object mode).
    pub fn openai(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            flavor: Flavor::OpenAi,
            timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            json_object: true,
            json_schema: false,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

/// The process's one HTTP client for model calls: building a client loads and parses the platform's
/// certificate store (≈ milliseconds of CPU), and one client shares its connection pool (keep-alive to the
/// model endpoint) across tasks. Timeouts are set per request.
fn shared_http() -> Result<reqwest::Client, LlmError> {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(client) = HTTP.get() {
        return Ok(client.clone());
    }
    ufo_common::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| LlmError::Config(e.to_string()))?;
    Ok(HTTP.get_or_init(|| client).clone())
}

/// A chat model speaking the OpenAI chat-completions protocol.
#[derive(Debug, Clone)]
pub struct OpenAiCompatible {
    http: reqwest::Client,
    config: Arc<OpenAiConfig>,
    prices: Arc<PriceTable>,
    url: String,
}

impl OpenAiCompatible {
    /// Builds the client; fails on an unusable base URL.
    pub fn new(config: OpenAiConfig, prices: Arc<PriceTable>) -> Result<Self, LlmError> {
        let base = config.base_url.trim_end_matches('/');
        let url = match &config.flavor {
            Flavor::OpenAi => format!("{base}/chat/completions"),
            Flavor::Azure {
                deployment,
                api_version,
            } => format!(
                "{base}/openai/deployments/{deployment}/chat/completions?api-version={api_version}"
            ),
        };
        reqwest::Url::parse(&url).map_err(|e| LlmError::Config(format!("base url: {e}")))?;
        Ok(Self {
            http: shared_http()?,
            config: Arc::new(config),
            prices,
            url,
        })
    }

    fn system(&self) -> &'static str {
        match self.config.flavor {
            Flavor::OpenAi => "openai",
            Flavor::Azure { .. } => "az.ai.openai",
        }
    }

    async fn attempt(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let model = match self.config.flavor {
            Flavor::OpenAi => Some(self.config.model.as_str()),
            // Azure routes by deployment; the model field is ignored there.
            Flavor::Azure { .. } => None,
        };
        let body = wire::request(
            model,
            request,
            self.config.json_object,
            self.config.json_schema,
        );
        let mut http = self
            .http
            .post(&self.url)
            .timeout(self.config.timeout)
            .json(&body);
        if let Some(key) = &self.config.api_key {
            http = match self.config.flavor {
                Flavor::OpenAi => http.bearer_auth(key.expose()),
                Flavor::Azure { .. } => http.header("api-key", key.expose()),
            };
        }
        let response = http.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            // Only the start of an error body is kept, so only that much is read.
            let body = read_capped(response, 2_000, false)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
                retry_after,
            });
        }
        let body = read_capped(response, self.config.max_reply_bytes, true)
            .await
            .map_err(|e| match e {
                Capped::TooLarge => LlmError::TooLarge {
                    limit: self.config.max_reply_bytes,
                },
                Capped::Read(e) if e.is_timeout() => LlmError::Timeout(self.config.timeout),
                Capped::Read(e) => self.transport(e),
            })?;
        let wire: wire::WireResponse =
            serde_json::from_slice(&body).map_err(|e| LlmError::Decode(e.to_string()))?;
        drop(body);
        let text = wire
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| LlmError::Decode("no choices[0].message.content".into()))?;
        let usage = wire.usage.map_or(Usage::default(), |u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        });
        Ok(ChatResponse {
            text,
            model: wire.model.unwrap_or_else(|| self.config.model.clone()),
            usage,
            cost: self.prices.cost(&self.config.model, usage),
        })
    }

    fn transport(&self, e: reqwest::Error) -> LlmError {
        if e.is_timeout() {
            LlmError::Timeout(self.config.timeout)
        } else {
            // The host and the innermost cause ("Connection refused", "dns error"), not the whole URL:
            // it may carry query parameters an operator considers private.
            let host = reqwest::Url::parse(&self.config.base_url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default();
            LlmError::Transport {
                host,
                failure: super::error::NetworkFailure::of(&e),
                cause: super::check::transport_cause(&e),
            }
        }
    }
}

/// Why [`read_capped`] stopped.
enum Capped {
    /// The body is longer than the cap.
    TooLarge,
    /// Reading failed.
    Read(reqwest::Error),
}

/// Reads `response`'s body chunk by chunk, never holding more than `cap` bytes (plus one chunk): a
/// huge or endless reply must not take the agent's memory with it. A declared `Content-Length` above
/// the cap stops before reading anything. With `strict`, a longer body is [`Capped::TooLarge`];
/// without, it is cut at `cap`.
async fn read_capped(
    mut response: reqwest::Response,
    cap: u64,
    strict: bool,
) -> Result<Vec<u8>, Capped> {
    if strict && response.content_length().is_some_and(|n| n > cap) {
        return Err(Capped::TooLarge);
    }
    let cap_usize = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Capped::Read)? {
        if body.len() + chunk.len() > cap_usize {
            if strict {
                return Err(Capped::TooLarge);
            }
            body.extend_from_slice(&chunk[..cap_usize - body.len()]);
            return Ok(body);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[async_trait]
impl ChatModel for OpenAiCompatible {
    fn model_name(&self) -> &str {
        &self.config.model
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = tracing::info_span!(
            "gen_ai.chat",
            otel.name = %format!("chat {}", self.config.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.system = self.system(),
            gen_ai.request.model = %self.config.model,
            gen_ai.request.temperature = request.temperature,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cost = tracing::field::Empty,
            attempts = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        async {
            let mut retry = 0;
            loop {
                match self.attempt(request).await {
                    Ok(response) => {
                        let span = tracing::Span::current();
                        span.record("gen_ai.response.model", response.model.as_str());
                        span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
                        span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
                        span.record("gen_ai.usage.cost", response.cost);
                        span.record("attempts", retry + 1);
                        return Ok(response);
                    }
                    Err(error) => match self.config.retry.delay_for(retry, &error) {
                        Some(wait) => {
                            tracing::warn!(%error, retry, wait_ms = wait.as_millis() as u64, "retrying model call");
                            tokio::time::sleep(wait).await;
                            retry += 1;
                        }
                        None => {
                            let span = tracing::Span::current();
                            span.record("attempts", retry + 1);
                            span.record("error.type", error_type(&error));
                            return Err(error);
                        }
                    },
                }
            }
        }
        .instrument(span)
        .await
    }
}

fn error_type(e: &LlmError) -> &'static str {
    match e {
        LlmError::Status { .. } => "http_status",
        LlmError::Transport { .. } => "transport",
        LlmError::Timeout(_) => "timeout",
        LlmError::Decode(_) => "decode",
        LlmError::Config(_) => "config",
        LlmError::TooLarge { .. } => "too_large",
        LlmError::Unusable { .. } => "unusable",
        LlmError::BothFailed { .. } => "both_failed",
    }
}
