//! Model prices (`--llm-prices`, `--llm-default-price`): US dollars per million input/output tokens.
//! What a call costs is computed in [`crate::llm::cost`].

use std::collections::HashMap;

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input_per_million: f64,
    /// Per million output (completion) tokens.
    pub output_per_million: f64,
}

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
