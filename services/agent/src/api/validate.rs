//! Validation of what clients send: request texts, executors, limits, model overrides, page sizes. Every
//! rule names the field it checks; the OpenAPI document states the same rules (see [`super::openapi`]).

use ufo_proto::v1::{DesktopWant, SubmitTaskRequest};

use super::checks::no_nul;
use super::error::ApiError;
use super::service::Tasks;
use crate::runner::task_config::{ConfirmPolicy, Limits, ModelChoice, TaskConfig};

/// The `executor` that asks for any desktop of the pool.
pub const ANY: &str = "any";

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
            return Err(ApiError::invalid(format!("{field} must not be empty")));
        }
        let max = self.limits().max_request_chars;
        if text.chars().count() > max {
            return Err(ApiError::invalid(format!(
                "{field} is longer than {max} characters"
            )));
        }
        Ok(())
    }

    fn resolve_executor(&self, executor: &str) -> Result<(String, String), ApiError> {
        self.executors()
            .resolve(executor)
            .map_err(|refusal| ApiError::invalid(refusal.to_string()))
    }

    /// Which desktop of the pool a submission needs (issue 36): labels, `any`, or the registered name it
    /// resolved to; none for a caller-named address (outside the pool).
    fn desktop_want(
        &self,
        req: &SubmitTaskRequest,
        executor_name: &str,
    ) -> Result<Option<DesktopWant>, ApiError> {
        let any = req.executor.trim() == ANY;
        if !req.labels.is_empty() {
            if !(any || req.executor.trim().is_empty()) {
                return Err(ApiError::invalid(
                    "labels choose any desktop that has them: give them without executor, or with \"any\"",
                ));
            }
            if req.labels.len() > 32 {
                return Err(ApiError::invalid("labels: at most 32"));
            }
            for (k, v) in &req.labels {
                no_nul("labels", k)?;
                no_nul("labels", v)?;
                let control = |t: &str| t.chars().any(char::is_control);
                if k.trim().is_empty()
                    || k.chars().count() > 32
                    || v.chars().count() > 32
                    || control(k)
                    || control(v)
                {
                    return Err(ApiError::invalid(
                        "labels: keys 1 to 32 characters, values at most 32, without control characters",
                    ));
                }
            }
            return Ok(Some(DesktopWant {
                labels: req.labels.clone(),
                ..DesktopWant::default()
            }));
        }
        if any {
            return Ok(Some(DesktopWant {
                any: true,
                ..DesktopWant::default()
            }));
        }
        Ok((!executor_name.is_empty()).then(|| DesktopWant {
            name: executor_name.to_owned(),
            ..DesktopWant::default()
        }))
    }

    /// Validates a submission and resolves its defaults, and the desktop it needs from the pool.
    pub fn resolve(
        &self,
        req: &SubmitTaskRequest,
    ) -> Result<(TaskConfig, Option<DesktopWant>), ApiError> {
        let l = self.limits();
        self.check_request("request", &req.request)?;
        no_nul("executor", &req.executor)?;
        let pooled = req.executor.trim() == ANY || !req.labels.is_empty();
        let (executor_name, executor) = if pooled {
            (String::new(), String::new())
        } else {
            self.resolve_executor(&req.executor)?
        };
        let want = self.desktop_want(req, &executor_name)?;
        let limits = req.limits.unwrap_or_default();
        if limits.max_steps > l.max_steps_cap {
            return Err(ApiError::invalid(format!(
                "limits.max_steps must be at most {}: the operator's cap (the smaller of \
                 --max-steps-cap and the agents' --max-steps); got {}",
                l.max_steps_cap, limits.max_steps
            )));
        }
        if !limits.max_cost.is_finite() || limits.max_cost < 0.0 || limits.max_cost > l.max_cost_cap
        {
            return Err(ApiError::invalid(format!(
                "limits.max_cost must be between 0 and {}",
                l.max_cost_cap
            )));
        }
        if limits.timeout_seconds > l.timeout_cap_seconds {
            return Err(ApiError::invalid(format!(
                "limits.timeout_seconds must be at most {}",
                l.timeout_cap_seconds
            )));
        }
        let model = req.model.clone().unwrap_or_default();
        if let Some(t) = model.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ApiError::invalid(
                "model.temperature must be between 0 and 2",
            ));
        }
        for (field, name) in [
            ("model.host_model", &model.host_model),
            ("model.app_model", &model.app_model),
        ] {
            if name.chars().count() > 200 || name.chars().any(char::is_control) {
                return Err(ApiError::invalid(format!(
                    "{field} must be at most 200 printable characters"
                )));
            }
        }
        if let Some((field, name)) = self.prices().unpriced(&model.host_model, &model.app_model) {
            return Err(ApiError::invalid(format!(
                "{field}: model {name:?} has no price, so limits.max_cost cannot hold; the operator must \
                 price it (--llm-prices) or set --llm-default-price"
            )));
        }
        if ufo_proto::v1::ConfirmPolicy::try_from(req.confirm_policy).is_err() {
            return Err(ApiError::invalid("confirm_policy is not a known policy"));
        }
        Ok((
            TaskConfig {
                executor,
                executor_name,
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
                replay: None,
            },
            want,
        ))
    }
}
