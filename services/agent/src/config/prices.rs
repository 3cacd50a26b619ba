//! Model prices (`--llm-prices`, `--llm-default-price`): US dollars per million input/output tokens.
//! What a call costs is computed in [`crate::llm::cost`]. A model served from this machine or a private
//! network ([`is_local_endpoint`]) costs nothing per token: without a price it is priced 0 (with a note
//! at start and in `--check-model`), instead of being refused at submission.

use std::collections::HashMap;

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input_per_million: f64,
    /// Per million output (completion) tokens.
    pub output_per_million: f64,
}

/// Whether a model endpoint URL names this machine or a private network: a loopback or private address
/// (127.0.0.0/8, ::1, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) or `localhost`. Such a server
/// (Ollama, vLLM, LM Studio) charges nothing per token.
pub fn is_local_endpoint(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private())
        }
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

/// The price of a model served locally without a price of its own: nothing.
pub const FREE: Price = Price {
    input_per_million: 0.0,
    output_per_million: 0.0,
};

/// Prices by model name. A model not in the table costs 0 (and is reported as unpriced).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
    /// The operator's price for models not in the table (`--llm-default-price`).
    default: Option<Price>,
}

/// Why a price table specification could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid price entry {entry:?}: expected MODEL=INPUT/OUTPUT in dollars per million tokens")]
pub struct PriceParseError {
    /// The offending entry.
    pub entry: String,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a model's price.
    pub fn with(
        mut self,
        model: impl Into<String>,
        input_per_million: f64,
        output_per_million: f64,
    ) -> Self {
        self.prices.insert(
            model.into(),
            Price {
                input_per_million,
                output_per_million,
            },
        );
        self
    }

    /// Parses `model=in/out,model2=in/out`.
    pub fn parse(spec: &str) -> Result<Self, PriceParseError> {
        let mut table = Self::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || PriceParseError {
                entry: entry.to_owned(),
            };
            let (model, prices) = entry.split_once('=').ok_or_else(bad)?;
            let (input, output) = prices.split_once('/').ok_or_else(bad)?;
            let input: f64 = input.trim().parse().map_err(|_| bad())?;
            let output: f64 = output.trim().parse().map_err(|_| bad())?;
            if model.trim().is_empty() || input < 0.0 || output < 0.0 {
                return Err(bad());
            }
            table = table.with(model.trim(), input, output);
        }
        Ok(table)
    }

    /// The models priced by name.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.prices.keys().map(String::as_str)
    }

    /// Whether models not in the table have the operator's default price.
    pub fn has_default(&self) -> bool {
        self.default.is_some()
    }

    /// The same table pricing every other model at `default`.
    pub fn with_default(mut self, default: Option<Price>) -> Self {
        self.default = default;
        self
    }

    /// The price of `model`: its own, else the default price, if configured.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.prices.get(model).copied().or(self.default)
    }

    /// Parses a default price `IN/OUT` (US dollars per million input/output tokens).
    pub fn parse_price(spec: &str) -> Result<Price, PriceParseError> {
        let table = Self::parse(&format!("default={spec}"))?;
        table.price("default").ok_or_else(|| PriceParseError {
            entry: spec.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_private_endpoints_are_local() {
        for (url, local) in [
            ("http://127.0.0.1:11434/v1", true),
            ("http://127.8.9.10/v1", true),
            ("http://[::1]:8000/v1", true),
            ("http://10.1.2.3:8000/v1", true),
            ("http://172.16.0.1/v1", true),
            ("http://172.31.255.254/v1", true),
            ("http://172.32.0.1/v1", false),
            ("http://192.168.1.5:8000/v1", true),
            ("http://[fd12:3456::1]:8000/v1", true),
            ("http://[fe80::1]:8000/v1", false),
            ("http://localhost:8000/v1", true),
            ("http://LOCALHOST./v1", true),
            ("https://api.openai.com/v1", false),
            ("http://8.8.8.8/v1", false),
            ("http://localhost.example.com/v1", false),
            ("not a url", false),
        ] {
            assert_eq!(is_local_endpoint(url), local, "{url}");
        }
    }
}
