//! One shutdown path: SIGINT or SIGTERM (SIGTERM only on Unix; the executor also builds for Windows)
//! cancels one `CancellationToken` that every server and worker of the process watches.

use tokio_util::sync::CancellationToken;

/// Returns a token cancelled on the first SIGINT/SIGTERM (Ctrl-C / Ctrl-Break on Windows).
///
/// Must be called inside a Tokio runtime. A second signal is not special: draining has its own deadline.
pub fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let fired = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received");
        fired.cancel();
    });
    token
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot install signal handlers; falling back to ctrl-c");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
