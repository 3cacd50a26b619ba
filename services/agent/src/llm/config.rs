//! Model configuration flags (`--llm-*`, env `UFO_LLM_*`) and building the [`ChatModel`]s from them.

use std::sync::Arc;
use std::time::Duration;

use super::cost::PriceTable;
use super::error::LlmError;
use super::fallback::Fallback;
use super::openai::{Flavor, OpenAiCompatible, OpenAiConfig};
use super::retry::RetryPolicy;
use super::secret::ApiKey;
use super::types::ChatModel;

impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ApiKey::new(s))
    }
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
        env = "UFO_LLM_BASE_URL",
        default_value = "https://api.openai.com/v1",
        value_parser = super::check::parse_base_url
    )]
    pub llm_base_url: String,
    /// API key (never logged); omit for local servers that need none.
    #[arg(long, env = "UFO_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<ApiKey>,
    /// API dialect.
    #[arg(long, env = "UFO_LLM_FLAVOR", value_enum, default_value = "openai")]
    pub llm_flavor: LlmFlavor,
    /// Azure deployment name (Azure only); defaults to the model name.
    #[arg(long, env = "UFO_LLM_AZURE_DEPLOYMENT")]
    pub llm_azure_deployment: Option<String>,
    /// Azure `api-version` (Azure only).
    #[arg(long, env = "UFO_LLM_AZURE_API_VERSION", default_value = "2024-10-21")]
    pub llm_azure_api_version: String,
    /// Model of the HostAgent.
    #[arg(long, env = "UFO_HOST_MODEL", default_value = "gpt-4o")]
    pub host_model: String,
    /// Model of the AppAgents.
    #[arg(long, env = "UFO_APP_MODEL", default_value = "gpt-4o")]
    pub app_model: String,
    /// Backup model used after the primary fails (same endpoint unless --llm-backup-base-url is set).
    #[arg(long, env = "UFO_LLM_BACKUP_MODEL")]
    pub llm_backup_model: Option<String>,
    /// Base URL of the backup model's endpoint.
    #[arg(long, env = "UFO_LLM_BACKUP_BASE_URL", value_parser = super::check::parse_base_url)]
    pub llm_backup_base_url: Option<String>,
    /// API key of the backup endpoint (defaults to --llm-api-key).
    #[arg(long, env = "UFO_LLM_BACKUP_API_KEY", hide_env_values = true)]
    pub llm_backup_api_key: Option<ApiKey>,
    /// Timeout of one HTTP attempt, in seconds.
    #[arg(long, env = "UFO_LLM_TIMEOUT_SECS", default_value_t = 120)]
    pub llm_timeout_secs: u64,
    /// Retries of a failed call (429, 5xx, timeouts) before giving up or using the backup.
    #[arg(long, env = "UFO_LLM_MAX_RETRIES", default_value_t = 3)]
    pub llm_max_retries: u32,
    /// First backoff delay in milliseconds (doubles per retry; Retry-After wins when given).
    #[arg(long, env = "UFO_LLM_RETRY_BASE_MS", default_value_t = 500)]
    pub llm_retry_base_ms: u64,
    /// Longest single wait between retries, in milliseconds.
    #[arg(long, env = "UFO_LLM_RETRY_MAX_MS", default_value_t = 30_000)]
    pub llm_retry_max_ms: u64,
    /// The endpoint accepts `response_format: json_object`.
    #[arg(long, env = "UFO_LLM_JSON_OBJECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub llm_json_object: bool,
    /// The endpoint accepts `response_format: json_schema`.
    #[arg(long, env = "UFO_LLM_JSON_SCHEMA", default_value_t = false, action = clap::ArgAction::Set)]
    pub llm_json_schema: bool,
    /// Prices in US dollars per million input/output tokens: `model=in/out,model2=in/out`.
    #[arg(long, env = "UFO_LLM_PRICES", default_value = "gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6", value_parser = PriceTable::parse)]
    pub llm_prices: PriceTable,
    /// Price of models missing from --llm-prices, `IN/OUT` in US dollars per million tokens. Unset: a
    /// task using an unpriced model is refused at submission (its cost could not be limited).
    #[arg(long, env = "UFO_LLM_DEFAULT_PRICE", value_parser = PriceTable::parse_price)]
    pub llm_default_price: Option<super::cost::Price>,
    /// Largest model reply body read, in bytes. The body is read as a stream and the call fails with a
    /// clear error as soon as it grows past this, so a runaway reply cannot exhaust the agent's memory.
    #[arg(long, env = "UFO_LLM_MAX_REPLY_BYTES", default_value_t = super::openai::DEFAULT_MAX_REPLY_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub llm_max_reply_bytes: u64,
    /// Sampling temperature; unset means the provider default.
    #[arg(long, env = "UFO_LLM_TEMPERATURE")]
    pub llm_temperature: Option<f64>,
}

impl LlmArgs {
    fn endpoint(&self, base_url: &str, model: &str, key: Option<ApiKey>) -> OpenAiConfig {
        let flavor = match self.llm_flavor {
            LlmFlavor::Openai => Flavor::OpenAi,
            LlmFlavor::Azure => Flavor::Azure {
                deployment: self
                    .llm_azure_deployment
                    .clone()
                    .unwrap_or_else(|| model.to_owned()),
                api_version: self.llm_azure_api_version.clone(),
            },
        };
        OpenAiConfig {
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            api_key: key,
            flavor,
            timeout: Duration::from_secs(self.llm_timeout_secs.max(1)),
            retry: RetryPolicy {
                max_retries: self.llm_max_retries,
                base_delay: Duration::from_millis(self.llm_retry_base_ms),
                max_delay: Duration::from_millis(self.llm_retry_max_ms),
            },
            json_object: self.llm_json_object,
            json_schema: self.llm_json_schema,
            max_reply_bytes: self.llm_max_reply_bytes,
        }
    }

    /// The price table with the default price applied.
    pub fn prices(&self) -> PriceTable {
        self.llm_prices.clone().with_default(self.llm_default_price)
    }

    /// The chat model `model` (with the backup model behind it when configured).
    pub fn model(&self, model: &str) -> Result<Arc<dyn ChatModel>, LlmError> {
        let prices = Arc::new(self.prices());
        let primary = OpenAiCompatible::new(
            self.endpoint(&self.llm_base_url, model, self.llm_api_key.clone()),
            prices.clone(),
        )?;
        let Some(backup) = &self.llm_backup_model else {
            return Ok(Arc::new(primary));
        };
        let base = self
            .llm_backup_base_url
            .as_deref()
            .unwrap_or(&self.llm_base_url);
        let key = self
            .llm_backup_api_key
            .clone()
            .or_else(|| self.llm_api_key.clone());
        let backup = OpenAiCompatible::new(self.endpoint(base, backup, key), prices)?;
        Ok(Arc::new(Fallback::new(primary, backup)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        llm: LlmArgs,
    }

    #[test]
    fn parses_defaults_and_keeps_keys_out_of_debug() {
        let cli = Cli::try_parse_from([
            "x",
            "--llm-api-key",
            "sk-hidden",
            "--llm-backup-model",
            "mini",
        ])
        .unwrap();
        assert!(!format!("{cli:?}").contains("sk-hidden"));
        assert_eq!(cli.llm.host_model, "gpt-4o");
        assert!(cli.llm.llm_prices.price("gpt-4o").is_some());
        let model = cli.llm.model("gpt-4o").unwrap();
        assert_eq!(model.model_name(), "gpt-4o");
        assert!(Cli::try_parse_from(["x", "--llm-prices", "bad"]).is_err());
    }
}
