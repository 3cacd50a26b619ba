//! Retry policy: exponential backoff, honouring the provider's `Retry-After` on 429/5xx.

use std::time::Duration;

use super::error::LlmError;

/// How transient failures are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = no retry).
    pub max_retries: u32,
    /// First backoff delay; doubled each retry.
    pub base_delay: Duration,
    /// Upper bound for any single wait, including a provider's `Retry-After`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based) after `error`, or `None` when not to retry.
    pub fn delay_for(&self, retry: u32, error: &LlmError) -> Option<Duration> {
        if retry >= self.max_retries || !error.is_transient() {
            return None;
        }
        let backoff = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.min(16)));
        let wait = error.retry_after().unwrap_or(backoff);
        Some(wait.min(self.max_delay))
    }
}

/// Parses a `Retry-After` header: delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<Duration>) -> LlmError {
        LlmError::Status {
            status: code,
            body: String::new(),
            retry_after,
        }
    }

    #[test]
    fn backs_off_exponentially_and_honours_retry_after() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(
            p.delay_for(0, &status(500, None)),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            p.delay_for(2, &status(503, None)),
            Some(Duration::from_millis(400))
        );
        assert_eq!(
            p.delay_for(0, &status(429, Some(Duration::from_millis(250)))),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            p.delay_for(0, &status(429, Some(Duration::from_secs(60)))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(p.delay_for(3, &status(500, None)), None);
        assert_eq!(p.delay_for(0, &status(400, None)), None);
    }

    #[test]
    fn parses_seconds_and_dates() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
