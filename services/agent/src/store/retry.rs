//! Store writes under transient failures: each is retried with bounded exponential backoff while the
//! session service is unreachable or says the failure is transient (UNAVAILABLE, connection loss, deadline,
//! ABORTED, UNKNOWN, INTERNAL); the writes carry what makes them idempotent (RecordStep is deduplicated on
//! its content, appended intents are facts read as a set), so a retry after a lost reply writes nothing
//! twice. Any other code is a deterministic refusal and is returned at once.

use std::future::Future;
use std::time::Duration;

use tonic::Code;

/// How a store write is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// The first pause; doubled after each failure.
    pub first: Duration,
    /// The longest pause.
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 8,
            first: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

/// Whether a failure with `code` may pass by itself (the same request may succeed later).
pub fn transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Internal
    )
}

/// Runs `call` until it succeeds, fails deterministically, or `retry.attempts` transient failures.
pub async fn retried<T, F, Fut>(retry: &Retry, what: &str, mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let mut pause = retry.first;
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(status) if transient(status.code()) && attempt < retry.attempts.max(1) => {
                tracing::warn!(what, attempt, error = %status, "store write failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(retry.max);
                attempt += 1;
            }
            Err(status) => return Err(status),
        }
    }
}

impl crate::config::RunnerConfig {
    /// How store writes are retried (`--store-retry-attempts`).
    pub fn store_retry(&self) -> Retry {
        Retry {
            attempts: self.store_retry_attempts.max(1),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn transient_failures_are_retried_and_refusals_are_not() {
        let retry = Retry {
            attempts: 4,
            first: Duration::from_millis(1),
            max: Duration::from_millis(2),
        };
        let calls = AtomicU32::new(0);
        let out = retried(&retry, "t", || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(tonic::Status::unavailable("down")),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(out.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        calls.store(0, Ordering::SeqCst);
        let out: Result<(), _> = retried(&retry, "t", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(tonic::Status::invalid_argument("no"))
        })
        .await;
        assert_eq!(out.unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        calls.store(0, Ordering::SeqCst);
        let out: Result<(), _> = retried(&retry, "t", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(tonic::Status::unavailable("down"))
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 4, "bounded");
    }
}
