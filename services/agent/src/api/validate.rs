//! Validation of what clients send: request texts, executors, limits, model overrides, page sizes. Every
//! rule names the field it checks; the OpenAPI document states the same rules (see [`super::openapi`]).

use ufo_proto::v1::SubmitTaskRequest;

use super::error::ApiError;
use super::service::Tasks;
use crate::runner::task_config::{ConfirmPolicy, Limits, ModelChoice, TaskConfig};

/// Text stored in the session service may not contain NUL characters (Postgres text cannot hold them).
pub(super) fn no_nul(field: &str, text: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::unprocessable(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// `http(s)://host[:port][/]`, host of letters, digits, dots and dashes (the pattern the OpenAPI document
/// states).
fn is_executor_address(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match rest.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let port_ok = port.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 5
            && p.chars().all(|c| c.is_ascii_digit())
            && p.parse::<u16>().is_ok()
    });
    host_ok && port_ok
}

impl Tasks {
    /// A page size: the default when 0, never above the cap.
    pub(super) fn page(&self, requested: u32) -> u32 {
        let size = if requested == 0 {
            self.limits().default_page_size
        } else {
            requested
        };
        size.min(self.limits().max_page_size).max(1)
    }

    pub(super) fn check_request(&self, field: &str, text: &str) -> Result<(), ApiError> {
        no_nul(field, text)?;
        if text.trim().is_empty() {
            return Err(ApiError::unprocessable(format!(
                "{field} must not be empty"
            )));
        }
        let max = self.limits().max_request_chars;
        if text.chars().count() > max {
            return Err(ApiError::unprocessable(format!(
                "{field} is longer than {max} characters"
            )));
        }
        Ok(())
    }

    fn resolve_executor(&self, executor: &str) -> Result<String, ApiError> {
        let executor = executor.trim();
        if executor.is_empty() {
            return Ok(self.limits().default_executor.clone());
        }
        if executor.starts_with("http://") || executor.starts_with("https://") {
            return if is_executor_address(executor) {
                Ok(executor.to_owned())
            } else {
                Err(ApiError::unprocessable(
                    "executor is not a valid address (http(s)://host[:port])",
                ))
            };
        }
        self.limits()
            .executors
            .iter()
            .find_map(|e| e.split_once('=').filter(|(n, _)| n.trim() == executor))
            .map(|(_, addr)| addr.trim().to_owned())
            .ok_or_else(|| {
                ApiError::unprocessable(
                    "executor is neither an http(s) address nor a registered executor name",
                )
            })
    }

    /// Validates a submission and resolves its defaults.
    pub fn resolve(&self, req: &SubmitTaskRequest) -> Result<TaskConfig, ApiError> {
        let l = self.limits();
        self.check_request("request", &req.request)?;
        let executor = self.resolve_executor(&req.executor)?;
        let limits = req.limits.unwrap_or_default();
        if limits.max_steps > l.max_steps_cap {
            return Err(ApiError::unprocessable(format!(
                "limits.max_steps must be at most {}",
                l.max_steps_cap
            )));
        }
        if !limits.max_cost.is_finite() || limits.max_cost < 0.0 || limits.max_cost > l.max_cost_cap
        {
            return Err(ApiError::unprocessable(format!(
                "limits.max_cost must be between 0 and {}",
                l.max_cost_cap
            )));
        }
        if limits.timeout_seconds > l.timeout_cap_seconds {
            return Err(ApiError::unprocessable(format!(
                "limits.timeout_seconds must be at most {}",
                l.timeout_cap_seconds
            )));
        }
        let model = req.model.clone().unwrap_or_default();
        if let Some(t) = model.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ApiError::unprocessable(
                "model.temperature must be between 0 and 2",
            ));
        }
        no_nul("executor", &req.executor)?;
        for (field, name) in [
            ("model.host_model", &model.host_model),
            ("model.app_model", &model.app_model),
        ] {
            if name.chars().count() > 200 || name.chars().any(char::is_control) {
                return Err(ApiError::unprocessable(format!(
                    "{field} must be at most 200 printable characters"
                )));
            }
        }
        if ufo_proto::v1::ConfirmPolicy::try_from(req.confirm_policy).is_err() {
            return Err(ApiError::unprocessable(
                "confirm_policy is not a known policy",
            ));
        }
        Ok(TaskConfig {
            executor,
            limits: Limits {
                max_steps: if limits.max_steps == 0 {
                    l.default_max_steps
                } else {
                    limits.max_steps
                },
                max_cost: if limits.max_cost == 0.0 {
                    l.default_max_cost
                } else {
                    limits.max_cost
                },
                timeout_seconds: if limits.timeout_seconds == 0 {
                    l.default_timeout_seconds
                } else {
                    limits.timeout_seconds
                },
            },
            model: ModelChoice {
                host_model: model.host_model,
                app_model: model.app_model,
                temperature: model.temperature,
            },
            confirm_policy: ConfirmPolicy::from_proto(req.confirm_policy),
        })
    }
}
