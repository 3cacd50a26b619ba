//! Waiting like a person before an action (issue 31): a control that is disabled or not visible at
//! the moment of an action (GTK makes a file chooser's "Save" sensitive a moment after the name is
//! typed) is watched — its accessibility state read again on every desktop change the backend sees,
//! and at least every [`RECHECK`] — until it is usable or the executor's action wait
//! (`--action-wait-ms`) runs out. A control that is gone does not come back and fails at once. Enter
//! waits the same way for a dialog's default button, the control it presses: GTK's file chooser drops
//! an Enter that comes while "Save" is still insensitive after a path was typed.

use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::{ActionKind, BackendError, ControlState, RawNode, WindowInfo};
use crate::executor::Executor;
use crate::keys::{Key, KeyStroke, NamedKey};

/// Longest time between two reads of a watched control's state (backends that see no desktop changes
/// are read this often; the others at every change and at least this often).
pub const RECHECK: Duration = Duration::from_millis(50);

/// Why a control cannot be acted on now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// It does not accept input.
    Disabled,
    /// It is hidden, scrolled out or has no area.
    NotVisible,
}

impl Unusable {
    /// What the control is, for messages: "disabled", "not visible".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::NotVisible => "not visible",
        }
    }

    fn of(state: &ControlState) -> Option<Self> {
        if !state.enabled {
            Some(Self::Disabled)
        } else if !state.visible || state.rect.is_empty() {
            Some(Self::NotVisible)
        } else {
            None
        }
    }
}

/// How the wait for a usable control ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Usable {
    /// Usable, after waiting this long (zero: at once).
    Ready(ControlState, Duration),
    /// Still unusable when the wait ran out, after this long.
    Not(Unusable, Duration),
}

impl Executor {
    /// Reads `control`'s live state before an action of `kind` and, while it is disabled or not
    /// visible, watches it until it is usable, the action wait runs out or `deadline` passes.
    pub(crate) async fn wait_usable(
        &self,
        control: &RawNode,
        kind: ActionKind,
        deadline: Instant,
    ) -> Result<Usable, BackendError> {
        let started = Instant::now();
        let until = (started + self.limits.action_wait).min(deadline);
        let span = tracing::info_span!(
            "executor.wait_usable",
            control = %control.name,
            waited_ms = tracing::field::Empty,
            usable = tracing::field::Empty,
        );
        async {
            let mut first = true;
            loop {
                let mark = self.backend.change_mark();
                let state = self.backend.action_state(control, kind).await?;
                let problem = Unusable::of(&state);
                let now = Instant::now();
                // Usable at the first look is no wait (the look itself is the live check).
                let waited = if first {
                    Duration::ZERO
                } else {
                    now.duration_since(started)
                };
                first = false;
                let span = tracing::Span::current();
                match problem {
                    None => {
                        span.record("waited_ms", waited.as_millis() as u64);
                        span.record("usable", true);
                        return Ok(Usable::Ready(state, waited));
                    }
                    Some(p) if now >= until => {
                        span.record("waited_ms", waited.as_millis() as u64);
                        span.record("usable", false);
                        return Ok(Usable::Not(p, waited));
                    }
                    Some(_) => {
                        let wake = (now + RECHECK).min(until);
                        let seen = match mark {
                            Some(m) => self.backend.activity_after(m, wake).await,
                            None => false,
                        };
                        if !seen {
                            tokio::time::sleep_until(wake.into()).await;
                        }
                    }
                }
            }
        }
        .instrument(span.clone())
        .await
    }
}

/// Where `keys` press Enter with no modifier held (the key that presses a dialog's default button):
/// the indices of those presses.
pub fn plain_enters(keys: &[KeyStroke]) -> Vec<usize> {
    let mut held = 0usize;
    let mut at = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match k.key {
            Key::Named(n) if n.is_modifier() => {
                held = if k.down {
                    held + 1
                } else {
                    held.saturating_sub(1)
                };
            }
            Key::Named(NamedKey::Enter) if k.down && held == 0 => at.push(i),
            _ => {}
        }
    }
    at
}

impl Executor {
    /// Sends `keys` to the focused window as a person types them: before each plain Enter, the
    /// screen settles from the keys before it, and while the application of `window` shows a default
    /// button (the one Enter presses) that is disabled, the Enter waits for it to accept input,
    /// within the action wait. Returns remarks for the result (how long it waited, or that the button
    /// stayed disabled), and, when the keys start with such an Enter, the change mark taken just
    /// before it was sent: what the desktop did while the Enter waited (the button turning enabled)
    /// is not the keys' effect.
    pub(crate) async fn send_keys_patiently(
        &self,
        window: Option<&WindowInfo>,
        keys: &[KeyStroke],
        deadline: Instant,
    ) -> Result<(Vec<String>, Option<(u64, Instant)>), BackendError> {
        let mut remarks = Vec::new();
        let mut restart = None;
        let mut sent = 0;
        for at in plain_enters(keys) {
            if at > sent {
                let mark = self.backend.change_mark();
                let since = Instant::now();
                self.backend.send_keys(&keys[sent..at]).await?;
                if let Some(mark) = mark
                    && self.limits.settle_between_actions
                    && !self.limits.settle.timeout.is_zero()
                {
                    self.backend
                        .settle(mark, since, &self.limits.settle, window)
                        .await;
                }
            }
            sent = at;
            if let Some(w) = window
                && let Some(remark) = self.wait_default_button(w, deadline).await
            {
                remarks.push(remark);
                if at == 0 {
                    restart = self.backend.change_mark().map(|m| (m, Instant::now()));
                }
            }
        }
        self.backend.send_keys(&keys[sent..]).await?;
        Ok((remarks, restart))
    }

    /// Waits, within the action wait, while the application of `window` shows default buttons and
    /// none accepts input; a remark when it waited.
    async fn wait_default_button(&self, window: &WindowInfo, deadline: Instant) -> Option<String> {
        let started = Instant::now();
        let until = (started + self.limits.action_wait).min(deadline);
        let span = tracing::info_span!(
            "executor.wait_default_button",
            waited_ms = tracing::field::Empty,
        );
        async {
            let mut first = true;
            loop {
                let mark = self.backend.change_mark();
                // A backend that cannot tell (or an application that does not answer) does not hold
                // the key back.
                let buttons = self.backend.default_buttons(window).await.ok()?;
                let waited = started.elapsed();
                tracing::Span::current().record("waited_ms", waited.as_millis() as u64);
                let disabled = !buttons.is_empty() && buttons.iter().all(|(_, on)| !on);
                let names = || {
                    buttons
                        .iter()
                        .map(|(n, _)| format!("'{n}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let now = Instant::now();
                if !disabled {
                    return (!first).then(|| {
                        format!(
                            "waited {} ms for the default button {} to accept Enter",
                            waited.as_millis(),
                            names()
                        )
                    });
                }
                if now >= until {
                    return Some(format!(
                        "the default button {} was still disabled after {} ms; Enter was sent anyway",
                        names(),
                        waited.as_millis()
                    ));
                }
                first = false;
                let wake = (now + RECHECK).min(until);
                let seen = match mark {
                    Some(m) => self.backend.activity_after(m, wake).await,
                    None => false,
                };
                if !seen {
                    tokio::time::sleep_until(wake.into()).await;
                }
            }
        }
        .instrument(span.clone())
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::parse_keys;

    fn enters(keys: &str) -> Vec<usize> {
        plain_enters(&parse_keys(keys, 1000).unwrap_or_default())
    }

    #[test]
    fn plain_enters_are_found_and_modified_ones_are_not() {
        assert_eq!(enters("{ENTER}"), vec![0]);
        assert_eq!(enters("ab~"), vec![4]);
        assert!(enters("^{ENTER}").is_empty());
        assert!(enters("%(x{ENTER})").is_empty());
        assert_eq!(enters("+a{ENTER}{ENTER}"), vec![4, 6]);
        assert!(enters("abc").is_empty());
    }
}
