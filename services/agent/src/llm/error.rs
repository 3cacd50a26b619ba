//! Errors of the LLM client.

use std::time::Duration;

/// Why a chat call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with a non-success status.
    #[error("the model endpoint answered {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Response body (truncated), as the provider sent it.
        body: String,
        /// The provider's `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// The request could not be sent or the response not read.
    #[error("cannot reach the model endpoint: {0}")]
    Transport(String),
    /// The call took longer than the configured timeout.
    #[error("the model call timed out after {0:?}")]
    Timeout(Duration),
    /// The provider's response did not have the expected shape.
    #[error("unexpected response from the model endpoint: {0}")]
    Decode(String),
    /// The reply body was larger than the configured cap; reading stopped there (never retried: the
    /// same request would get the same reply).
    #[error("the model reply exceeded the size cap of {limit} bytes (--llm-max-reply-bytes)")]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The configuration is unusable (bad URL, bad header value).
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The model never produced usable output within the re-ask budget.
    #[error("the model gave no usable answer after {attempts} attempts: {last_problem}")]
    Unusable {
        /// Attempts made (first ask + re-asks).
        attempts: u32,
        /// What was wrong with the last reply.
        last_problem: String,
    },
    /// Both the primary and the backup model failed.
    #[error("primary model failed ({primary}); backup model failed ({backup})")]
    BothFailed {
        /// The primary's error.
        primary: Box<LlmError>,
        /// The backup's error.
        backup: Box<LlmError>,
    },
}

impl LlmError {
    /// Whether retrying the same call may succeed (429, 5xx, transport errors, timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::Transport(_) | Self::Timeout(_) => true,
            _ => false,
        }
    }

    /// The provider's requested wait, when it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
