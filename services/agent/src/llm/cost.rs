//! Prices per model and usage/cost totals.
//!
//! The price table is configuration (`--llm-prices 'gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6'`: US dollars per
//! million input/output tokens). Totals are plain values added up by the caller per step, round and
//! session, so nothing here is shared mutable state.

use super::types::Usage;

pub use crate::config::prices::{Price, PriceParseError, PriceTable};

impl PriceTable {
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
