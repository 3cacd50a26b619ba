//! Screenshot retention (issue 22, point 4): the rule the flags or a PruneImages call give, and the
//! periodic pass `--retain-interval-s` runs. Steps' records are always kept; only screenshots go.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{PruneRule, Store};

/// Longest age a rule may name, in days (a hundred years; longer ages are this).
pub const MAX_DAYS: u32 = 36_500;

/// The rule for "older than `days`" and/or "beyond the newest `tasks`" (0 = off); `None` when both are off.
pub fn rule(days: u32, tasks: u32) -> Option<PruneRule> {
    let age = chrono::Duration::days(i64::from(days.min(MAX_DAYS)));
    let rule = PruneRule {
        created_before: (days > 0).then(|| chrono::Utc::now() - age),
        keep_newest: (tasks > 0).then_some(u64::from(tasks)),
    };
    (rule.created_before.is_some() || rule.keep_newest.is_some()).then_some(rule)
}

/// Prunes every `interval` (the cutoff recomputed each time) until `shutdown` fires; failures are logged.
pub async fn run(
    store: Arc<dyn Store>,
    (days, tasks): (u32, u32),
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(rule) = rule(days, tasks) else {
            return;
        };
        match store.prune_images(rule).await {
            Ok(done) if done.sessions > 0 => {
                tracing::info!(
                    sessions = done.sessions,
                    artifacts = done.artifacts,
                    blobs = done.blobs,
                    "screenshots pruned"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(error = %error, "screenshot retention pass failed"),
        }
    }
}
