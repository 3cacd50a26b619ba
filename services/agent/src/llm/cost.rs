//! Prices per model and usage/cost totals.
//!
//! The price table is configuration (`--llm-prices 'gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6'`: US dollars per
//! million input/output tokens). Totals are plain values added up by the caller per step, round and
//! session, so nothing here is shared mutable state.

use std::collections::HashMap;

use super::types::Usage;

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

    /// Cost of `usage` on `model` in US dollars (0 when unpriced).
    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        self.price(model).map_or(0.0, |p| {
            (usage.input_tokens as f64 * p.input_per_million
                + usage.output_tokens as f64 * p.output_per_million)
                / 1_000_000.0
        })
    }
}

/// Calls, tokens and cost added up over a step, a round or a session.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// LLM calls made (including re-asks and retries that returned a response).
    pub calls: u64,
    /// Tokens used.
    pub usage: Usage,
    /// US dollars.
    pub cost: f64,
}

impl Totals {
    /// Adds one call.
    pub fn add_call(&mut self, usage: Usage, cost: f64) {
        self.calls += 1;
        self.usage.add(usage);
        self.cost += cost;
    }

    /// Adds other totals.
    pub fn add(&mut self, other: Totals) {
        self.calls += other.calls;
        self.usage.add(other.usage);
        self.cost += other.cost;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prices() {
        let t = PriceTable::parse("gpt-4o=2.5/10, mini=0.15/0.6").unwrap();
        let cost = t.cost(
            "gpt-4o",
            Usage {
                input_tokens: 1_000_000,
                output_tokens: 100_000,
            },
        );
        assert!((cost - 3.5).abs() < 1e-9);
        assert_eq!(t.cost("unknown", Usage::default()), 0.0);
        assert!(PriceTable::parse("gpt=1").is_err());
        assert!(PriceTable::parse("gpt=a/b").is_err());
    }

    #[test]
    fn totals_accumulate() {
        let mut step = Totals::default();
        step.add_call(
            Usage {
                input_tokens: 10,
                output_tokens: 2,
            },
            0.5,
        );
        step.add_call(
            Usage {
                input_tokens: 5,
                output_tokens: 1,
            },
            0.25,
        );
        let mut round = Totals::default();
        round.add(step);
        round.add(step);
        assert_eq!(round.calls, 4);
        assert_eq!(round.usage.input_tokens, 30);
        assert!((round.cost - 1.5).abs() < 1e-9);
    }
}
