//! Replay of a finished task without the model (issue 20).
//!
//! Layout:
//! - [`selector`]: each recorded action keeps a selector for its target (type, name, ancestors, automation
//!   id, index among identical siblings); a replay finds the control again by it in a later listing.
//! - [`plan`]: the recorded steps a replay task carries in its configuration.
//! - [`decide`]: the reply the model would have given for a replayed step (the strategies' seam).
//! - [`wait`]: a replayed step waits, bounded and watching the window, for its recorded targets (and a
//!   recorded pause for the next step's).
//! - [`reuse`]: a new request following an earlier task's plan (issue 33), its texts rewritten by one
//!   model call.
//! - the API side (`POST /v1/tasks` with `replay_of`) is `api::replay`.
pub mod decide;
pub mod phase;
pub mod plan;
pub mod reuse;
pub mod selector;
pub mod wait;

pub use plan::{OnMismatch, ReplaySpec};

use serde_json::{Map, Value};

use crate::processor::{Key, Values};

/// The step's replay mark, provided by the LLM-interaction strategies of a replay and stored as
/// `Step.extra.replay`: `{of, step, source: "recording" | "model", note?}`.
pub const REPLAY_MARK: Key<Value> = Key::new("replay_mark");

/// Set on a step decided by its recording: whether the recording's agent took the next step too
/// ([`ReplaySpec::stays`]). The AppAgent's transition follows it, not the replayed batch's observed
/// effect, so a replay takes the recording's path (issue 37).
pub const REPLAY_STAYS: Key<bool> = Key::new("replay_stays");

/// Moves a step's replay mark (if any) into its `extra`: `replay`, or `reuse` for a reused plan's step
/// (`{of, step, source: "reused" | "model", note?}`).
pub fn mark(local: &mut Values, extra: &mut Map<String, Value>) {
    if let Some(m) = local.take(REPLAY_MARK).ok().flatten() {
        put_mark(m, extra);
    }
}

/// Puts the replay mark `m` in a step's `extra`, as [`mark`] does.
pub fn put_mark(mut m: Value, extra: &mut Map<String, Value>) {
    let reuse = m
        .as_object_mut()
        .and_then(|o| o.remove("reuse"))
        .is_some_and(|r| r == Value::Bool(true));
    extra.insert(if reuse { "reuse" } else { "replay" }.into(), m);
}
