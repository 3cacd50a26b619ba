//! Building the [`ChatModel`]s from the model flags ([`crate::config::LlmArgs`]).

use std::sync::Arc;
use std::time::Duration;

use super::cost::PriceTable;
use super::error::LlmError;
use super::fallback::Fallback;
use super::openai::{Flavor, OpenAiCompatible, OpenAiConfig};
use super::retry::RetryPolicy;
use super::types::ChatModel;
use crate::config::prices::{FREE, is_local_endpoint};
use crate::config::secret::ApiKey;
use crate::config::{LlmArgs, LlmFlavor};

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

    /// The price table of the primary endpoint, with the default price applied.
    pub fn prices(&self) -> PriceTable {
        self.prices_at(&self.llm_base_url)
    }

    /// The price table of models served at `base_url`: the operator's prices and default price; a model
    /// without either costs 0 when the endpoint is local (this machine or a private network).
    pub fn prices_at(&self, base_url: &str) -> PriceTable {
        let default = self
            .llm_default_price
            .or_else(|| is_local_endpoint(base_url).then_some(FREE));
        self.llm_prices.clone().with_default(default)
    }

    /// The endpoint of the backup model (the primary's unless --llm-backup-base-url is set).
    pub fn backup_base_url(&self) -> &str {
        self.llm_backup_base_url
            .as_deref()
            .unwrap_or(&self.llm_base_url)
    }

    /// The chat model `model` (with the backup model behind it when configured).
    pub fn model(&self, model: &str) -> Result<Arc<dyn ChatModel>, LlmError> {
        let primary = OpenAiCompatible::new(
            self.endpoint(&self.llm_base_url, model, self.llm_api_key.clone()),
            Arc::new(self.prices()),
        )?;
        let Some(backup) = &self.llm_backup_model else {
            return Ok(Arc::new(primary));
        };
        let base = self.backup_base_url();
        let key = self
            .llm_backup_api_key
            .clone()
            .or_else(|| self.llm_api_key.clone());
        let backup = OpenAiCompatible::new(
            self.endpoint(base, backup, key),
            Arc::new(self.prices_at(base)),
        )?;
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
