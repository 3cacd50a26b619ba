//! What a person is told when the agents fail, and what the log keeps. A task's result (and the step
//! that failed) names the cause in a person's terms — the model endpoint cannot be reached, refused the
//! key, answered an error; the executor cannot be reached — and ends with the trace id; never transport
//! internals (URLs, "tcp connect error", "error decoding response body"), strategy or phase names. The
//! whole error chain is logged once, at the point of failure, with the same trace id, so an operator
//! finds the internal cause of what the person saw.

use std::error::Error;

use ufo_common::error::chain;

use crate::dispatch::DispatchError;
use crate::llm::LlmError;
use crate::processor::ProcessingError;

/// The person-facing text for `error` (see the module doc), after logging its whole chain with the
/// current trace id.
pub fn user_text(error: &(dyn Error + 'static)) -> String {
    let trace = ufo_common::telemetry::current_trace_id();
    tracing::error!(
        trace_id = trace.as_deref().unwrap_or("none"),
        error = %chain(error),
        "a step failed"
    );
    let reason = reason(error);
    match trace {
        Some(id) => format!("{reason} (trace {id})"),
        None => reason,
    }
}

/// The cause in a person's terms: the first model or executor error of the chain, else what the
/// failing strategy said.
fn reason(error: &(dyn Error + 'static)) -> String {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(llm) = e.downcast_ref::<LlmError>() {
            return model(llm);
        }
        if let Some(dispatch) = e.downcast_ref::<DispatchError>() {
            return executor(dispatch);
        }
        current = e.source();
    }
    match error.downcast_ref::<ProcessingError>() {
        Some(ProcessingError::StrategyFailed { source, .. }) => source.to_string(),
        Some(_) => "an internal error stopped the step (see the agent log)".to_owned(),
        None => error.to_string(),
    }
}

/// A model error in a person's terms.
pub fn model(error: &LlmError) -> String {
    match error {
        LlmError::Status { status, body, .. } => {
            let what = match status {
                401 | 403 => "refused the API key",
                404 => "does not know the model or the path",
                429 => "is limiting requests",
                500.. => "failed",
                _ => "refused the request",
            };
            match provider_message(body) {
                Some(m) => format!("the model endpoint {what} (HTTP {status}): {m}"),
                None => format!("the model endpoint {what} (HTTP {status})"),
            }
        }
        LlmError::Transport { host, failure, .. } => {
            let host = if host.is_empty() {
                String::new()
            } else {
                format!(" {host}")
            };
            format!(
                "the model endpoint{host} cannot be reached ({})",
                failure.phrase()
            )
        }
        LlmError::Timeout(d) => format!("the model did not answer within {} s", d.as_secs()),
        LlmError::Decode(_) => {
            "the model endpoint's reply is not an OpenAI-compatible chat completion".to_owned()
        }
        LlmError::Config(_) => {
            "the model is not configured correctly (see the agent log)".to_owned()
        }
        LlmError::TooLarge { .. } | LlmError::Unusable { .. } => error.to_string(),
        LlmError::BothFailed { primary, backup } => format!(
            "the model and its backup failed: {}; {}",
            model(primary),
            model(backup)
        ),
    }
}

/// An executor error in a person's terms.
pub fn executor(error: &DispatchError) -> String {
    match error {
        DispatchError::Rpc { code, .. } => match code {
            tonic::Code::Unauthenticated => "the executor refused the agent's token".to_owned(),
            tonic::Code::Unavailable
            | tonic::Code::Cancelled
            | tonic::Code::Unknown
            | tonic::Code::Internal => "the executor cannot be reached".to_owned(),
            tonic::Code::DeadlineExceeded => "the executor did not answer in time".to_owned(),
            other => format!("the executor refused the call ({other:?})"),
        },
        DispatchError::Unreachable { .. }
        | DispatchError::Mismatch { .. }
        | DispatchError::Address(_)
        | DispatchError::Unrecorded(_) => error.to_string(),
    }
}

/// The provider's own explanation (`{"error": {"message": …}}`), at most 200 characters.
fn provider_message(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let m = v.get("error")?.get("message")?.as_str()?.trim();
    (!m.is_empty()).then(|| crate::agents::text::truncate(m, 200))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::StrategyError;

    #[test]
    fn model_and_executor_failures_read_as_causes_not_internals() {
        let wrapped = |source: LlmError| ProcessingError::StrategyFailed {
            phase: crate::processor::ProcessingPhase::LlmInteraction,
            strategy: "host_llm_interaction".into(),
            message: "host llm interaction failed".into(),
            source: StrategyError::with_source("host llm interaction failed", source),
        };
        for (error, expected) in [
            (
                LlmError::Transport {
                    host: "127.0.0.1".into(),
                    failure: crate::llm::error::NetworkFailure::Refused,
                    cause: "Connection refused (os error 111)".into(),
                },
                "the model endpoint 127.0.0.1 cannot be reached (connection refused)",
            ),
            (
                LlmError::Status {
                    status: 401,
                    body: r#"{"error": {"message": "Incorrect API key provided"}}"#.into(),
                    retry_after: None,
                },
                "the model endpoint refused the API key (HTTP 401): Incorrect API key provided",
            ),
            (
                LlmError::Status {
                    status: 502,
                    body: "<html>bad gateway for http://10.0.0.1:8000/v1</html>".into(),
                    retry_after: None,
                },
                "the model endpoint failed (HTTP 502)",
            ),
            (
                LlmError::Decode("error decoding response body for url (http://x/v1)".into()),
                "the model endpoint's reply is not an OpenAI-compatible chat completion",
            ),
        ] {
            assert_eq!(reason(&wrapped(error)), expected);
        }
        let rpc = DispatchError::Rpc {
            code: tonic::Code::Unavailable,
            message: "error trying to connect: tcp connect error: Connection refused".into(),
        };
        let wrapped = ProcessingError::StrategyFailed {
            phase: crate::processor::ProcessingPhase::DataCollection,
            strategy: "desktop_data_collection".into(),
            message: "desktop data collection failed".into(),
            source: StrategyError::with_source("desktop data collection failed", rpc),
        };
        assert_eq!(reason(&wrapped), "the executor cannot be reached");
        let plain = ProcessingError::StrategyFailed {
            phase: crate::processor::ProcessingPhase::DataCollection,
            strategy: "desktop_data_collection".into(),
            message: "x".into(),
            source: StrategyError::msg("capture_desktop_screenshot returned no image"),
        };
        assert_eq!(
            user_text(&plain),
            "capture_desktop_screenshot returned no image"
        );
    }
}
