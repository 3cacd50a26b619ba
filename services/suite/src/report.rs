//! What a run found: one [`TaskReport`] per task, printed as a table with a summary (success rate,
//! median steps, median prompt bytes per model call) and written as JSON for tools.

use std::time::Duration;

use serde::Serialize;

use crate::standin::Tally;

/// Where a window is, `[left, top, right, bottom]` of its client area; for a replay, whether it was
/// resized and whether its size is fixed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Placed {
    /// The client area.
    pub rect: [i32; 4],
    /// A replay changed its size from the recording's.
    pub resized: bool,
    /// Its size hints fix its size (minimum = maximum): a replay only moves it.
    pub fixed_size: bool,
    /// Its minimum size is larger than the screen (with its frame): only its top-left part shows.
    pub larger_than_screen: bool,
}

/// One task's outcome and measurements.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskReport {
    /// The task's name.
    pub name: String,
    /// Task status and every check held.
    pub passed: bool,
    /// The task's final status (`finished`, `failed`, ... or `setup failed`).
    pub status: String,
    /// The agent's result or failure reason.
    pub result: String,
    /// The task id (for `ufo show`, the viewer, and a replay).
    pub task_id: String,
    /// Steps recorded.
    pub steps: u64,
    /// Model calls.
    pub calls: u64,
    /// Text bytes sent to the model, all calls.
    pub text_bytes: u64,
    /// Image bytes sent to the model, all calls.
    pub image_bytes: u64,
    /// Image pixels sent to the model, all calls.
    pub image_pixels: u64,
    /// Time the steps spent observing and acting (data collection and action execution phases: the
    /// executor's work and the agent's image work around it), seconds.
    pub observe_act_seconds: f64,
    /// From submitting the task to its end, seconds.
    pub wall_seconds: f64,
    /// Each check's verdict.
    pub checks: Vec<String>,
    /// Why it failed (checker output and the last step), empty when it passed.
    pub why: String,
    /// Each step in brief: agent, status, actions and seconds per phase (JSON report only).
    pub step_log: Vec<serde_json::Value>,
    /// Where its setup windows were (client areas `[left, top, right, bottom]`, in setup order).
    pub windows: Vec<Placed>,
    /// Steps replayed from the recording (the task view's `replay.replayed`; replays only).
    pub replayed: u64,
    /// Steps that fell back to the model (the task view's `replay.fell_back`; replays only).
    pub fell_back: u64,
    /// It ran with the model endpoint shut (replays).
    pub model_stopped: bool,
    /// Replays: which one of the `--replay-times` in a row this is (the last that ran: the first that
    /// failed, or the last of all when every one passed).
    pub replay_run: u32,
    /// Replays: how many in a row were asked for (`--replay-times`).
    pub replay_times: u32,
    /// A learning task: the task whose experience it follows (it has no demonstration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learns_from: Option<String>,
    /// A task a person showed (`[person]`): the stored demonstration's source (`recording:<id>`), what
    /// its learners' prompts cite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shown: Option<String>,
    /// A repeat (`repeat_of`): the task it repeats, run first; it ran with reuse on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat_of: Option<String>,
    /// A repeat: the task whose steps the agent reused (the task view's `reuse.of`; none: no match).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused_of: Option<String>,
    /// Of the model calls, a reuse's fill calls.
    pub fill_calls: u64,
    /// The replay of this task without the model (`--replay`), windows moved and resized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<Box<TaskReport>>,
}

impl TaskReport {
    /// Fills the model figures from the endpoint's tally.
    pub fn with_tally(mut self, t: Tally) -> Self {
        self.calls = t.calls;
        self.fill_calls = t.fills;
        self.text_bytes = t.size.text_bytes;
        self.image_bytes = t.size.image_bytes;
        self.image_pixels = t.size.image_pixels;
        self
    }

    fn per_call(&self, total: u64) -> u64 {
        total.checked_div(self.calls).unwrap_or(0)
    }

    /// Wall time per step, milliseconds (0 without steps).
    pub fn ms_per_step(&self) -> u64 {
        ((self.wall_seconds * 1000.0) as u64)
            .checked_div(self.steps)
            .unwrap_or(0)
    }

    fn replay_ms(&self) -> String {
        match &self.replay {
            Some(r) if r.passed => r.ms_per_step().to_string(),
            _ => "-".into(),
        }
    }

    /// The replay's outcome: its model calls and fallbacks, and how its windows differed from the
    /// recording's ("moved+resized", or "moved" for a window of fixed size).
    fn replay_cell(&self) -> String {
        let Some(r) = &self.replay else {
            return "-".into();
        };
        let windows = if r.windows.is_empty() {
            "no window"
        } else if r.windows.iter().all(|w| w.resized) {
            "moved+resized"
        } else {
            if r.windows.iter().all(|w| w.resized || w.fixed_size) {
                "moved (fixed size, not resized)"
            } else {
                "moved, NOT resized"
            }
        };
        let outcome = match (r.passed, r.replay_times) {
            (true, 0 | 1) => "pass".to_owned(),
            (true, times) => format!("pass ×{times}"),
            (false, 0 | 1) => format!("FAIL ({})", r.status),
            (false, times) => format!("FAIL ({}) in run {} of {times}", r.status, r.replay_run),
        };
        let larger = if r.windows.iter().any(|w| w.larger_than_screen) {
            " (a window larger than the screen)"
        } else {
            ""
        };
        format!(
            "{outcome}, {} calls, {} replayed, {} fell back, {windows}{larger}",
            r.calls, r.replayed, r.fell_back
        )
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The per-task table (Markdown, so it reads in a terminal and pastes into a report).
pub fn table(reports: &[TaskReport]) -> String {
    let mut out = String::from(
        "| task | result | steps | model calls | text B/call | image B/call | image px/call | observe+act s | wall s | ms/step | replay ms/step | replay |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in reports {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |\n",
            r.name,
            match (r.passed, &r.learns_from, &r.repeat_of) {
                (true, Some(t), _) => format!("pass, learned from {t}"),
                (false, Some(t), _) => format!("FAIL ({}), learning from {t}", r.status),
                (passed, None, Some(t)) => format!(
                    "{}, repeat of {t}: {}",
                    if passed {
                        "pass".to_owned()
                    } else {
                        format!("FAIL ({})", r.status)
                    },
                    match &r.reused_of {
                        Some(_) => format!(
                            "{} steps reused, {} fell back, {} fill call(s)",
                            r.replayed, r.fell_back, r.fill_calls
                        ),
                        None => "nothing reused".to_owned(),
                    }
                ),
                (true, None, None) if r.shown.is_some() => {
                    "pass, shown by a person (ufo record)".into()
                }
                (true, None, None) => "pass".into(),
                (false, None, None) => format!("FAIL ({})", r.status),
            },
            r.steps,
            r.calls,
            thousands(r.per_call(r.text_bytes)),
            thousands(r.per_call(r.image_bytes)),
            thousands(r.per_call(r.image_pixels)),
            r.observe_act_seconds,
            r.wall_seconds,
            r.ms_per_step(),
            r.replay_ms(),
            r.replay_cell(),
        ));
    }
    out
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// The fraction of the replayed tasks whose replay passed (1 when none was replayed).
pub fn replay_rate(reports: &[TaskReport]) -> f64 {
    let replays: Vec<&TaskReport> = reports.iter().filter_map(|r| r.replay.as_deref()).collect();
    if replays.is_empty() {
        return 1.0;
    }
    replays.iter().filter(|r| r.passed).count() as f64 / replays.len() as f64
}

/// The fraction of tasks that passed (0 when there are none).
pub fn success_rate(reports: &[TaskReport]) -> f64 {
    if reports.is_empty() {
        return 0.0;
    }
    reports.iter().filter(|r| r.passed).count() as f64 / reports.len() as f64
}

/// The summary lines.
pub fn summary(reports: &[TaskReport], wall: Duration, threshold: f64) -> String {
    let passed = reports.iter().filter(|r| r.passed).count();
    let rate = success_rate(reports);
    let text = median(reports.iter().map(|r| r.per_call(r.text_bytes)).collect());
    let image = median(reports.iter().map(|r| r.per_call(r.image_bytes)).collect());
    let total = median(
        reports
            .iter()
            .map(|r| r.per_call(r.text_bytes + r.image_bytes))
            .collect(),
    );
    let replays: Vec<&TaskReport> = reports.iter().filter_map(|r| r.replay.as_deref()).collect();
    let replay = if replays.is_empty() {
        String::new()
    } else {
        let model = median(
            reports
                .iter()
                .filter(|r| r.replay.is_some())
                .map(TaskReport::ms_per_step)
                .collect(),
        );
        format!(
            " · replayed {}/{} with the model endpoint stopped, {} model calls (median {} ms/step, \
             model-driven {} ms/step)",
            replays.iter().filter(|r| r.passed).count(),
            replays.len(),
            replays.iter().map(|r| r.calls).sum::<u64>(),
            median(replays.iter().map(|r| r.ms_per_step()).collect()),
            model,
        )
    };
    format!(
        "passed {passed}/{} ({:.1}%, threshold {:.1}%: {}) · median steps {} · median prompt bytes/call {} \
         (text {}, image {}) · suite wall time {:.1} s{replay}",
        reports.len(),
        rate * 100.0,
        threshold * 100.0,
        if rate + 1e-9 >= threshold {
            "met"
        } else {
            "NOT met"
        },
        median(reports.iter().map(|r| r.steps).collect()),
        thousands(total),
        thousands(text),
        thousands(image),
        wall.as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_summary_show_per_call_figures_and_the_threshold() {
        let a = TaskReport {
            name: "a".into(),
            passed: true,
            steps: 4,
            calls: 4,
            text_bytes: 4_000,
            image_bytes: 400_000,
            ..TaskReport::default()
        };
        let b = TaskReport {
            name: "b".into(),
            status: "failed".into(),
            steps: 9,
            ..TaskReport::default()
        };
        let t = table(&[a.clone(), b.clone()]);
        assert!(t.contains("| a | pass | 4 | 4 | 1,000 | 100,000 |"), "{t}");
        assert!(t.contains("| b | FAIL (failed) | 9 | 0 |"), "{t}");
        let learner = TaskReport {
            name: "c".into(),
            passed: true,
            learns_from: Some("a".into()),
            ..TaskReport::default()
        };
        let t = table(&[learner]);
        assert!(t.contains("| c | pass, learned from a | "), "{t}");
        let replayed = |passed: bool, run: u32| TaskReport {
            name: "d".into(),
            passed: true,
            replay: Some(Box::new(TaskReport {
                passed,
                status: if passed { "finished" } else { "failed" }.into(),
                replay_run: run,
                replay_times: 3,
                ..TaskReport::default()
            })),
            ..TaskReport::default()
        };
        let t = table(&[replayed(true, 3), replayed(false, 2)]);
        assert!(t.contains("| pass ×3, 0 calls"), "{t}");
        assert!(t.contains("| FAIL (failed) in run 2 of 3, 0 calls"), "{t}");
        let s = summary(&[a, b], Duration::from_secs(3), 0.9);
        assert!(
            s.starts_with("passed 1/2 (50.0%, threshold 90.0%: NOT met)"),
            "{s}"
        );
        assert!(s.contains("median steps 6"), "{s}");
    }
}
