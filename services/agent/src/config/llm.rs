//! Model flags (`--llm-*`, `--host-model`, `--app-model`; env `UFO_LLM_*`). The models are built from
//! them in [`crate::llm::config`].

use super::prices::{Price, PriceTable};
use super::secret::ApiKey;

/// Default of [`OpenAiConfig::max_reply_bytes`]: 4 MiB, far above any chat reply.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 4 * 1024 * 1024;

/// A URL flag that cannot be used, with what is wrong and an example.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadUrl(pub String);

/// Validates a model endpoint URL (a `--llm-base-url` value parser): http or https with a host.
pub fn parse_base_url(text: &str) -> Result<String, BadUrl> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        BadUrl(format!("{text:?} is not a URL ({e}); write it with its scheme, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1"))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(BadUrl(format!(
            "{text:?} must start with http:// or https:// and name a host, e.g. https://api.openai.com/v1"
        )));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// API dialect of the model endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LlmFlavor {
    /// OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, LM Studio, ...).
    Openai,
    /// Azure OpenAI (deployment + api-version, `api-key` header).
    Azure,
}

/// LLM endpoint, models, retries and prices.
#[derive(Debug, Clone, clap::Args)]
pub struct LlmArgs {
    /// Base URL of the chat-completions endpoint (Azure: the resource URL, without /openai).
    #[arg(
        long,
        env = "UFO_AGENT_LLM_BASE_URL",
        default_value = "https://api.openai.com/v1",
        value_parser = parse_base_url
    )]
    pub llm_base_url: String,
    /// API key (never logged); omit for local servers that need none.
    #[arg(long, env = "UFO_AGENT_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<ApiKey>,
    /// API dialect.
    #[arg(
        long,
        env = "UFO_AGENT_LLM_FLAVOR",
        value_enum,
        default_value = "openai"
    )]
    pub llm_flavor: LlmFlavor,
    /// Azure deployment name (Azure only); defaults to the model name.
    #[arg(long, env = "UFO_AGENT_LLM_AZURE_DEPLOYMENT")]
    pub llm_azure_deployment: Option<String>,
    /// Azure `api-version` (Azure only).
    #[arg(
        long,
        env = "UFO_AGENT_LLM_AZURE_API_VERSION",
        default_value = "2024-10-21"
    )]
    pub llm_azure_api_version: String,
    /// Model of the HostAgent.
    #[arg(long, env = "UFO_AGENT_HOST_MODEL", default_value = "gpt-4o")]
    pub host_model: String,
    /// Model of the AppAgents.
    #[arg(long, env = "UFO_AGENT_APP_MODEL", default_value = "gpt-4o")]
    pub app_model: String,
    /// Backup model used after the primary fails (same endpoint unless --llm-backup-base-url is set).
    #[arg(long, env = "UFO_AGENT_LLM_BACKUP_MODEL")]
    pub llm_backup_model: Option<String>,
    /// Base URL of the backup model's endpoint.
    #[arg(long, env = "UFO_AGENT_LLM_BACKUP_BASE_URL", value_parser = parse_base_url)]
    pub llm_backup_base_url: Option<String>,
    /// API key of the backup endpoint (defaults to --llm-api-key).
    #[arg(long, env = "UFO_AGENT_LLM_BACKUP_API_KEY", hide_env_values = true)]
    pub llm_backup_api_key: Option<ApiKey>,
    /// Timeout of one HTTP attempt, in seconds.
    #[arg(long, env = "UFO_AGENT_LLM_TIMEOUT_SECS", default_value_t = 120)]
    pub llm_timeout_secs: u64,
    /// Retries of a failed call (429, 5xx, timeouts) before giving up or using the backup.
    #[arg(long, env = "UFO_AGENT_LLM_MAX_RETRIES", default_value_t = 3)]
    pub llm_max_retries: u32,
    /// First backoff delay in milliseconds (doubles per retry; Retry-After wins when given).
    #[arg(long, env = "UFO_AGENT_LLM_RETRY_BASE_MS", default_value_t = 500)]
    pub llm_retry_base_ms: u64,
    /// Longest single wait between retries, in milliseconds.
    #[arg(long, env = "UFO_AGENT_LLM_RETRY_MAX_MS", default_value_t = 30_000)]
    pub llm_retry_max_ms: u64,
    /// The endpoint accepts `response_format: json_object`.
    #[arg(long, env = "UFO_AGENT_LLM_JSON_OBJECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub llm_json_object: bool,
    /// The endpoint accepts `response_format: json_schema`.
    #[arg(long, env = "UFO_AGENT_LLM_JSON_SCHEMA", default_value_t = false, action = clap::ArgAction::Set)]
    pub llm_json_schema: bool,
    /// Prices in US dollars per million input/output tokens: `model=in/out,model2=in/out`.
    #[arg(long, env = "UFO_AGENT_LLM_PRICES", default_value = "gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6", value_parser = PriceTable::parse)]
    pub llm_prices: PriceTable,
    /// Price of models missing from --llm-prices, `IN/OUT` in US dollars per million tokens. Unset: a
    /// task using an unpriced model is refused at submission (its cost could not be limited).
    #[arg(long, env = "UFO_AGENT_LLM_DEFAULT_PRICE", value_parser = PriceTable::parse_price)]
    pub llm_default_price: Option<Price>,
    /// Largest model reply body read, in bytes. The body is read as a stream and the call fails with a
    /// clear error as soon as it grows past this, so a runaway reply cannot exhaust the agent's memory.
    #[arg(long, env = "UFO_AGENT_LLM_MAX_REPLY_BYTES", default_value_t = DEFAULT_MAX_REPLY_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub llm_max_reply_bytes: u64,
    /// Sampling temperature; unset means the provider default.
    #[arg(long, env = "UFO_AGENT_LLM_TEMPERATURE")]
    pub llm_temperature: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_need_a_scheme_and_a_host() {
        assert_eq!(
            parse_base_url("https://api.openai.com/v1/").unwrap(),
            "https://api.openai.com/v1"
        );
        assert!(parse_base_url("api.openai.com/v1").is_err());
        assert!(parse_base_url("localhost:11434/v1").is_err());
        assert!(parse_base_url("ftp://example.com").is_err());
    }
}
