//! Waiting for the desktop to change (`wait_for_change`, issue 31): what a replay does while the next
//! recorded target is not there yet — a person watches the window and looks again when it changes,
//! rather than sleeping a fixed time.
//!
//! On a backend that sees changes (Linux: X DAMAGE drawings and the applications' accessibility
//! events, [`Backend::change_mark`]) the wait ends on the first change that is not an animation (a
//! spinner does not count), within the selected window when one is selected (a drawing that touches
//! it, or an accessibility event of its application), and then waits for the screen to settle, so what
//! is listed next is the new state. A backend that sees no changes (Windows) reads a fingerprint of
//! the window set and of the selected window's accessibility tree every [`POLL`] and ends when it
//! differs. Either way the wait is bounded by its timeout.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::{BackendError, TreeLimits, WindowInfo};
use crate::executor::Executor;

/// How often a backend that sees no changes reads the fingerprint.
pub const POLL: Duration = Duration::from_millis(100);

/// How the change was watched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// The backend's change events (drawings, accessibility events).
    Events,
    /// Fingerprints of the window set and the selected window's tree, compared every [`POLL`].
    Tree,
}

impl Watched {
    /// As the tool's result spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Events => "events",
            Self::Tree => "tree",
        }
    }
}

/// How a wait for a change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeWait {
    /// The desktop changed (false: the wait ran out first).
    pub changed: bool,
    /// Time spent, settling included.
    pub waited: Duration,
    /// How it watched.
    pub watched: Watched,
}

impl Executor {
    /// Waits until the desktop changes — within `window` when given — or `until` passes; after a
    /// change, with `settle`, until the screen has settled too (within the settle timeout and
    /// `until`).
    pub(crate) async fn wait_for_change(
        &self,
        window: Option<&WindowInfo>,
        until: Instant,
        settle: bool,
    ) -> Result<ChangeWait, BackendError> {
        let started = Instant::now();
        let span = tracing::info_span!(
            "executor.wait_for_change",
            window = window.map_or("", |w| w.title.as_str()),
            changed = tracing::field::Empty,
            waited_ms = tracing::field::Empty,
        );
        async {
            let (changed, watched) = match self.backend.change_mark() {
                Some(mark) => (
                    self.watch_events(mark, window, until, settle).await,
                    Watched::Events,
                ),
                None => (self.watch_tree(window, until).await?, Watched::Tree),
            };
            let waited = started.elapsed();
            let span = tracing::Span::current();
            span.record("changed", changed);
            span.record("waited_ms", waited.as_millis() as u64);
            Ok(ChangeWait {
                changed,
                waited,
                watched,
            })
        }
        .instrument(span.clone())
        .await
    }

    /// The change-event wait: true on a change after `mark` that is not an animation.
    async fn watch_events(
        &self,
        mark: u64,
        window: Option<&WindowInfo>,
        until: Instant,
        settle: bool,
    ) -> bool {
        let since = Instant::now();
        let hz = self.limits.settle.animation_hz;
        let mut seen = mark;
        loop {
            if !self.backend.activity_after(seen, until).await {
                return false;
            }
            let relevant = self
                .backend
                .changes_since(mark, hz, window)
                .is_some_and(|c| {
                    !c.events.is_empty()
                        || c.drawn
                            .iter()
                            .any(|r| window.is_none_or(|w| !w.rect.intersect(r).is_empty()))
                });
            if relevant {
                break;
            }
            // Only animations (or drawing elsewhere) so far: wait for what comes after them.
            match self.backend.change_mark() {
                Some(m) => seen = m,
                None => return false,
            }
        }
        if settle && !self.limits.settle.timeout.is_zero() {
            let settling = self
                .backend
                .settle(mark, since, &self.limits.settle, window);
            // A screen still changing when the wait runs out has changed all the same.
            let _ = tokio::time::timeout_at(until.into(), settling).await;
        }
        true
    }

    /// The polling wait of a backend without change events: true when the fingerprint differs.
    async fn watch_tree(
        &self,
        window: Option<&WindowInfo>,
        until: Instant,
    ) -> Result<bool, BackendError> {
        let first = self.fingerprint(window, until).await?;
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(false);
            }
            tokio::time::sleep_until((now + POLL).min(until).into()).await;
            if self.fingerprint(window, until).await? != first {
                return Ok(true);
            }
        }
    }

    /// A hash of the window set and of `window`'s tree (names, types, states, bounds, texts). A window
    /// that is gone counts as a change (its tree hashes as empty).
    async fn fingerprint(
        &self,
        window: Option<&WindowInfo>,
        until: Instant,
    ) -> Result<u64, BackendError> {
        let mut h = DefaultHasher::new();
        self.backend.window_set().await?.hash(&mut h);
        if let Some(w) = window {
            let limits = TreeLimits {
                max_nodes: self.limits.max_tree_nodes as usize,
                max_depth: self.limits.max_tree_depth,
                deadline: until.max(Instant::now() + POLL),
                max_value_chars: self.limits.max_value_chars,
                bounds_of: Some(self.limits.control_types.clone()),
            };
            match self.backend.control_tree(w, &limits).await {
                Ok(tree) => {
                    for n in &tree.nodes {
                        (&n.name, &n.control_type, n.enabled, n.visible, &n.value).hash(&mut h);
                        n.rect.to_ltrb().hash(&mut h);
                    }
                }
                // Gone, or a window without a tree (Tk): its pixels are not compared.
                Err(BackendError::Gone(_) | BackendError::Inaccessible(_)) => 0u8.hash(&mut h),
                Err(e) => return Err(e),
            }
        }
        Ok(h.finish())
    }
}
