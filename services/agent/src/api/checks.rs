//! Checks on what clients send that need no task state: NUL in stored text, and whether the models a task
//! asks for are priced.

use super::error::ApiError;

/// Text stored in the session service may not contain NUL characters (Postgres text cannot hold them).
pub(crate) fn no_nul(field: &str, text: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::invalid(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// Whether every model a task may call has a price, so `max_cost` can hold (issue 16).
#[derive(Debug, Clone)]
pub struct PriceCheck {
    prices: crate::llm::PriceTable,
    /// The backup model's endpoint may be another (remote or local) one.
    backup_prices: crate::llm::PriceTable,
    host_model: String,
    app_model: String,
    backup_model: Option<String>,
}

impl PriceCheck {
    /// From the model flags.
    pub fn from_config(llm: &crate::config::LlmArgs) -> Self {
        Self {
            prices: llm.prices(),
            backup_prices: llm.prices_at(llm.backup_base_url()),
            host_model: llm.host_model.clone(),
            app_model: llm.app_model.clone(),
            backup_model: llm.llm_backup_model.clone(),
        }
    }

    /// The model names a submission may choose for `field` (`host_model` or `app_model`), as the
    /// OpenAPI pattern documents them: the priced models, and empty (the default) when the default is
    /// priced. `None` when every name is accepted (the operator set a default price).
    pub(super) fn choices(&self, field: &str) -> Option<(Vec<String>, bool)> {
        if self.prices.has_default() {
            return None;
        }
        let default = if field == "host_model" {
            &self.host_model
        } else {
            &self.app_model
        };
        let mut names: Vec<String> = self.prices.models().map(str::to_owned).collect();
        names.sort();
        Some((names, self.prices.price(default).is_some()))
    }

    /// The first model of a task choosing `host`/`app` (empty: the default) that has no price.
    pub(crate) fn unpriced(&self, host: &str, app: &str) -> Option<(&'static str, String)> {
        let pick = |chosen: &str, default: &str| {
            if chosen.is_empty() {
                default.to_owned()
            } else {
                chosen.to_owned()
            }
        };
        [
            ("model.host_model", pick(host, &self.host_model)),
            ("model.app_model", pick(app, &self.app_model)),
        ]
        .into_iter()
        .find(|(_, model)| self.prices.price(model).is_none())
        .or_else(|| {
            self.backup_model
                .iter()
                .map(|m| ("the backup model", m.clone()))
                .find(|(_, model)| self.backup_prices.price(model).is_none())
        })
    }
}
