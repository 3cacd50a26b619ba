//! Riding out an executor that is briefly down (restarting, redeployed): calls that may safely be sent
//! again are retried with bounded exponential backoff within a total time budget.
//!
//! What may be sent again depends on the batch. Observations change nothing, so they are retried while
//! the executor is UNAVAILABLE. An action may already have run when the call failed after it was sent
//! (a reset, a timeout), so a batch with an action is retried only when the connection was refused
//! before anything was written ([`refused_before_sending`]): then the executor provably never saw it.

use std::future::Future;
use std::time::{Duration, Instant};

/// First wait between attempts; doubles up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(100);
/// Longest single wait between attempts.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// How a retried call ended without success.
#[derive(Debug)]
pub(crate) enum Exhausted<E> {
    /// An error that must not be retried.
    Final(E),
    /// Still failing (retryably) when the budget ran out, after `waited`.
    Budget {
        /// The last error.
        last: E,
        /// Time spent since the first attempt.
        waited: Duration,
    },
}

/// Calls `call` until it succeeds, fails with an error `retryable` rejects, or `budget` is spent.
pub(crate) async fn retrying<T, E, Fut>(
    budget: Duration,
    retryable: impl Fn(&E) -> bool,
    mut call: impl FnMut() -> Fut,
) -> Result<T, Exhausted<E>>
where
    Fut: Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    let mut delay = FIRST_DELAY;
    let mut attempt = 1u32;
    loop {
        let error = match call().await {
            Ok(value) => return Ok(value),
            Err(e) if !retryable(&e) => return Err(Exhausted::Final(e)),
            Err(e) => e,
        };
        let waited = start.elapsed();
        let Some(left) = budget.checked_sub(waited).filter(|l| !l.is_zero()) else {
            return Err(Exhausted::Budget {
                last: error,
                waited,
            });
        };
        let wait = delay.min(left);
        tracing::warn!(
            attempt,
            wait_ms = wait.as_millis() as u64,
            "executor unreachable; retrying"
        );
        tokio::time::sleep(wait).await;
        delay = (delay * 2).min(MAX_DELAY);
        attempt += 1;
    }
}

/// Whether `status` comes from failing to open the connection because the peer refused it — nothing of
/// the request was sent. Found by walking the error's sources to the operating system's error.
pub(crate) fn refused_before_sending(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn retries_until_success_within_the_budget() {
        let calls = AtomicU32::new(0);
        let out: Result<u32, Exhausted<&str>> = retrying(
            Duration::from_secs(5),
            |_| true,
            || async {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if n < 3 { Err("down") } else { Ok(n) }
            },
        )
        .await;
        assert_eq!(out.ok(), Some(3));
    }

    #[tokio::test]
    async fn gives_up_after_the_budget_and_never_retries_a_final_error() {
        let out: Result<(), _> = retrying(
            Duration::from_millis(300),
            |_| true,
            || async { Err("down") },
        )
        .await;
        match out {
            Err(Exhausted::Budget { waited, .. }) => assert!(waited >= Duration::from_millis(300)),
            other => panic!("{other:?}"),
        }
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retrying(
            Duration::from_secs(3),
            |_| false,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("bad")
            },
        )
        .await;
        assert!(matches!(out, Err(Exhausted::Final("bad"))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_plain_unavailable_is_not_a_refusal() {
        assert!(!refused_before_sending(&tonic::Status::unavailable(
            "reset"
        )));
    }
}
