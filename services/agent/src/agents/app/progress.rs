//! No-progress detection: an AppAgent that runs the same action again and again while the screen stays
//! the same is stuck (a click that does nothing, a text that does not take). After `no_progress_warn`
//! such repeats the next prompt says so; after `no_progress_fail` more the AppAgent fails the subtask back
//! to the HostAgent with that reason instead of asking the model again, so the round does not burn its
//! step limit on one control.
//!
//! Each memory item records the screen the step saw ([`SCREEN_KEY`], a hash of the clean screenshot) and
//! what it ran ([`ACTION_KEY`], the actions without their outcomes). The repeat count at a step is the
//! number of newest items that ran the same actions and saw the screen this step sees.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::agents::settings::AgentSettings;
use crate::memory::Memory;
use crate::vision::Screenshot;

/// Memory item key of the screen a step saw.
pub const SCREEN_KEY: &str = "screen_hash";
/// Memory item key of the actions a step ran (without outcomes; absent when it ran none).
pub const ACTION_KEY: &str = "action_key";

/// A hash of the screenshot's encoding (the executor encodes equal pixels to equal bytes).
pub fn screen_hash(shot: &Screenshot) -> String {
    let mut h = DefaultHasher::new();
    (shot.width, shot.height, shot.origin_x, shot.origin_y).hash(&mut h);
    shot.bytes.hash(&mut h);
    format!("{:016x}", h.finish())
}

pub use crate::agents::common::Progress;

/// The same actions on the screen `screen`: (actions, times) over the newest memory items.
pub fn repeats(memory: &Memory, screen: &str) -> Option<(String, u32)> {
    let last = memory.last()?.str(ACTION_KEY).to_owned();
    if last.is_empty() {
        return None;
    }
    let times = memory
        .items()
        .iter()
        .rev()
        .take_while(|m| m.str(ACTION_KEY) == last && m.str(SCREEN_KEY) == screen)
        .count() as u32;
    (times > 0).then_some((last, times))
}

/// Judges the AppAgent's progress before a step that sees `screen`.
pub fn judge(memory: &Memory, screen: &str, settings: &AgentSettings) -> Progress {
    let Some((action, times)) = repeats(memory, screen) else {
        return Progress::Fine;
    };
    let warn = settings.no_progress_warn.max(1);
    if times >= warn.saturating_add(settings.no_progress_fail) {
        Progress::Fail(format!(
            "no progress: `{action}` ran {times} times in a row and the screen did not change"
        ))
    } else if times >= warn {
        Progress::Warn(format!(
            "`{action}` ran {times} times in a row and the screen did not change: it has no effect. \
             Do something else (another control or function), or FAIL if the subtask cannot be done \
             here; after {} more such repeats the subtask fails.",
            warn.saturating_add(settings.no_progress_fail) - times
        ))
    } else {
        Progress::Fine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryItem;

    fn step(memory: &mut Memory, screen: &str, action: &str) {
        let mut item = MemoryItem::new();
        item.set(SCREEN_KEY, screen);
        if !action.is_empty() {
            item.set(ACTION_KEY, action);
        }
        memory.push(item);
    }

    #[test]
    fn warns_after_n_repeats_and_fails_after_m_more() {
        let settings = AgentSettings {
            no_progress_warn: 2,
            no_progress_fail: 2,
            ..AgentSettings::default()
        };
        let mut m = Memory::default();
        assert_eq!(judge(&m, "s", &settings), Progress::Fine);
        step(&mut m, "s", "click_input on [1]OK");
        assert_eq!(judge(&m, "s", &settings), Progress::Fine);
        step(&mut m, "s", "click_input on [1]OK");
        assert!(
            matches!(judge(&m, "s", &settings), Progress::Warn(w) if w.contains("2 times") && w.contains("2 more"))
        );
        // A changed screen is progress.
        assert_eq!(judge(&m, "t", &settings), Progress::Fine);
        step(&mut m, "s", "click_input on [1]OK");
        assert!(matches!(judge(&m, "s", &settings), Progress::Warn(_)));
        step(&mut m, "s", "click_input on [1]OK");
        assert!(
            matches!(judge(&m, "s", &settings), Progress::Fail(r) if r.contains("ran 4 times"))
        );
        // Another action, or a step without actions, starts the count again.
        step(&mut m, "s", "click_input on [2]Cancel");
        assert_eq!(judge(&m, "s", &settings), Progress::Fine);
        step(&mut m, "s", "");
        assert_eq!(judge(&m, "s", &settings), Progress::Fine);
    }
}
