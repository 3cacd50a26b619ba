//! The executor's side of the effect check ([`crate::effect`]): what it reads before an action, and
//! after it once the screen has settled, to judge what the action did. Bounded: the settle wait's own
//! limits, and for a launch or a close `--effect-window-wait-ms` for the window set to change.

use std::time::Instant;

use serde_json::Value;
use tracing::Instrument as _;

use crate::backend::{BackendError, SettleOutcome};
use crate::effect::{Before, Effect, Observed, Watched, judge, what};
use crate::executor::{DesktopState, Executor};
use crate::tools::Tool;
use crate::wait::RECHECK;

impl Executor {
    /// The window-level facts before an action: the window set and the active window.
    pub(crate) async fn effect_before(&self) -> Before {
        Before {
            windows: self.backend.window_set().await.ok(),
            active: self.backend.active_window(),
        }
    }

    /// Settles after an action of `tool` that succeeded and judges what it did, from `before`, the
    /// target `watched` (when it had one) and what the desktop reports now.
    pub(crate) async fn effect_after(
        &self,
        st: &mut DesktopState,
        tool: Tool,
        params: &Value,
        before: Before,
        watched: Option<Watched>,
    ) -> Effect {
        let span = tracing::info_span!(
            "executor.effect",
            tool = tool.name(),
            effect = tracing::field::Empty,
        );
        async {
            let mark = st.unsettled.map(|(m, _)| m);
            let report = self.settle_pending(st).await;
            st.settled = report;
            let mut after = self.effect_before().await;
            if matches!(tool, Tool::LaunchApplication | Tool::CloseApplication) {
                after = self.window_set_change(&before, after).await;
            }
            let target_after = match &watched {
                Some(w) => match self.backend.control_facts(&w.node).await {
                    Ok(f) => Some(Some(f)),
                    Err(BackendError::Gone(_)) => Some(None),
                    Err(_) => None,
                },
                None => None,
            };
            // The window the action worked in: the selected one (a close acted on the one it closed).
            let window = st.selected.clone();
            let selected = match tool {
                Tool::SelectApplicationWindow => st.selected.clone(),
                _ => None,
            };
            let closed = match tool {
                Tool::CloseApplication => st.closed.take(),
                _ => None,
            };
            let observed = Observed {
                tool,
                what: what(
                    tool,
                    params,
                    watched.as_ref().map(|w| &w.node),
                    closed.as_ref().or(window.as_ref()),
                ),
                before,
                after,
                target: watched,
                target_after,
                changes: mark.and_then(|m| {
                    self.backend
                        .changes_since(m, self.limits.settle.animation_hz, window.as_ref())
                }),
                window,
                selected,
                settle: report
                    .map(|r| r.outcome)
                    .filter(|o| *o != SettleOutcome::Unsupported),
            };
            let effect = judge(&observed);
            tracing::Span::current().record("effect", effect.kind.as_str());
            effect
        }
        .instrument(span)
        .await
    }

    /// For a launch or a close: the window-level facts once the window set differs from `before`'s,
    /// watching the desktop (at every change it reports, at least every [`RECHECK`]) for at most
    /// `--effect-window-wait-ms`; `after` as last read when it does not change in time.
    async fn window_set_change(&self, before: &Before, mut after: Before) -> Before {
        let until = Instant::now() + self.limits.effect_window_wait;
        let same = |a: &Before| {
            let ids = |b: &Before| {
                b.windows
                    .as_ref()
                    .map(|w| w.iter().map(|(h, _)| *h).collect::<Vec<_>>())
            };
            ids(a) == ids(before)
        };
        while same(&after) && Instant::now() < until {
            let mark = self.backend.change_mark();
            let wake = (Instant::now() + RECHECK).min(until);
            let seen = match mark {
                Some(m) => self.backend.activity_after(m, wake).await,
                None => false,
            };
            if !seen {
                tokio::time::sleep_until(wake.into()).await;
            }
            after = self.effect_before().await;
        }
        after
    }
}
