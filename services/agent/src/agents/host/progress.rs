//! HostAgent no-progress detection (issue 31): a HostAgent that runs the same function and has it fail
//! the same way again and again (selecting a window a modal dialog keeps from activating) is stuck.
//! After `host_repeat_warn` such failures in a row its next prompt says so; after `host_repeat_fail`
//! more the HostAgent fails the round with that reason instead of asking the model again, so the round
//! does not run to the step limit.
//!
//! Each memory item records the step's failure ([`FAILURE_KEY`]: the function, its target and its
//! error with numbers blanked, so "waited 2003 ms" and "waited 2010 ms" are one failure); the repeat
//! count is the number of newest items with the same failure.

use crate::agents::action::{ActionOutcome, ActionRecord};
use crate::agents::common::Progress;
use crate::agents::settings::AgentSettings;
use crate::memory::Memory;

/// Memory item key of the step's failed function and how it failed (absent when none failed).
pub const FAILURE_KEY: &str = "host_failure";

/// What the failure of `record` is compared by: its action and its error, numbers blanked. `None` when
/// it did not fail.
pub fn failure_key(record: &ActionRecord) -> Option<String> {
    if record.outcome() != ActionOutcome::Failure {
        return None;
    }
    let mut error = String::with_capacity(record.result.error.len());
    let mut in_number = false;
    for c in record.result.error.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                error.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            error.push(c);
        }
    }
    Some(format!("{} [failure: {error}]", record.action_text()))
}

/// The newest failure and how many times in a row it happened.
pub fn repeats(memory: &Memory) -> Option<(String, u32)> {
    let last = memory.last()?.str(FAILURE_KEY).to_owned();
    if last.is_empty() {
        return None;
    }
    let times = memory
        .items()
        .iter()
        .rev()
        .take_while(|m| m.str(FAILURE_KEY) == last)
        .count() as u32;
    Some((last, times))
}

/// Judges the HostAgent's progress before it decides.
pub fn judge(memory: &Memory, settings: &AgentSettings) -> Progress {
    let Some((failure, times)) = repeats(memory) else {
        return Progress::Fine;
    };
    let warn = settings.host_repeat_warn.max(1);
    let limit = warn.saturating_add(settings.host_repeat_fail);
    if times >= limit {
        Progress::Fail(format!(
            "no progress: `{failure}` happened {times} times in a row"
        ))
    } else if times >= warn {
        Progress::Warn(format!(
            "`{failure}` happened {times} times in a row: repeating it will fail again. Do something \
             else first (deal with what is in the way, e.g. a dialog in front of the window, or \
             select another window), or FAIL; after {} more such failures the round fails.",
            limit - times
        ))
    } else {
        Progress::Fine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::CommandResult;
    use crate::memory::MemoryItem;
    use serde_json::Map;

    fn failed(error: &str) -> ActionRecord {
        ActionRecord {
            function: "select_application_window".into(),
            arguments: Map::new(),
            status: "ASSIGN".into(),
            target: None,
            result: CommandResult::failure(error),
        }
    }

    fn step(memory: &mut Memory, record: Option<&ActionRecord>) {
        let mut item = MemoryItem::new();
        if let Some(key) = record.and_then(failure_key) {
            item.set(FAILURE_KEY, key);
        }
        memory.push(item);
    }

    #[test]
    fn the_same_failure_warns_after_n_and_fails_after_m_more() {
        let settings = AgentSettings {
            host_repeat_warn: 2,
            host_repeat_fail: 2,
            ..AgentSettings::default()
        };
        let mut m = Memory::default();
        step(
            &mut m,
            Some(&failed("did not activate 'Main' (waited 2003 ms)")),
        );
        assert_eq!(judge(&m, &settings), Progress::Fine);
        step(
            &mut m,
            Some(&failed("did not activate 'Main' (waited 2010 ms)")),
        );
        assert!(
            matches!(judge(&m, &settings), Progress::Warn(w) if w.contains("2 times") && w.contains("2 more")),
            "{:?}",
            judge(&m, &settings)
        );
        step(
            &mut m,
            Some(&failed("did not activate 'Main' (waited 2001 ms)")),
        );
        step(
            &mut m,
            Some(&failed("did not activate 'Main' (waited 2001 ms)")),
        );
        assert!(
            matches!(judge(&m, &settings), Progress::Fail(r) if r.starts_with("no progress: `select_application_window [failure: did not activate 'Main' (waited # ms)]` happened 4 times"))
        );
        // Another failure, or a step that did not fail, starts the count again.
        step(&mut m, Some(&failed("no such window")));
        assert_eq!(judge(&m, &settings), Progress::Fine);
        step(&mut m, None);
        assert_eq!(judge(&m, &settings), Progress::Fine);
        let ok = ActionRecord {
            result: CommandResult::success(serde_json::json!({})),
            ..failed("")
        };
        assert_eq!(failure_key(&ok), None);
    }
}
