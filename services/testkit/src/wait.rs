//! Waiting on a condition with a deadline (never a fixed sleep): the error says what was awaited, for how
//! long, and what was seen last.

use std::future::Future;
use std::time::Duration;

/// A condition did not hold before its deadline.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {timeout:?} waiting for {what}; last seen: {last}")]
pub struct WaitError {
    what: String,
    timeout: Duration,
    last: String,
}

impl WaitError {
    /// A timeout waiting for `what`, with the `last` observation.
    pub fn new(what: impl Into<String>, timeout: Duration, last: String) -> Self {
        Self {
            what: what.into(),
            timeout,
            last,
        }
    }
}

/// Polls `probe` every `interval` until it yields `Ok(Some(value))` or `timeout` passes. `Ok(None)` and
/// `Err(text)` mean "not yet"; the last `Err` text goes into the timeout error.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: F,
) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("nothing yet");
    loop {
        match tokio::time::timeout_at(deadline, probe()).await {
            Ok(Ok(Some(value))) => return Ok(value),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => last = e,
            Err(_) => return Err(WaitError::new(what, timeout, last)),
        }
        if tokio::time::Instant::now() + interval > deadline {
            return Err(WaitError::new(what, timeout, last));
        }
        tokio::time::sleep(interval).await;
    }
}
