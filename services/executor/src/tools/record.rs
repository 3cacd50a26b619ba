//! `record_input`: starts, reads and stops the recording of what a person does on the desktop (a human
//! demonstration, [`crate::record`]). Like `wait_for_change` it is the agent's own tool, never offered
//! to a model: the agent starts a recording for `ufo record`, reads its steps while it runs and stops
//! it to store them, then reads each step's screenshot (`screenshot`, one image a call: a recording's
//! screenshots together would pass a message's bound).

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Cx, Kind, Output, ToolDef, ToolError};
use crate::record::{RecordedEvent, RecordedWindow, Recording, Shared};

/// What `record_input` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecordAction {
    /// Start a recording (refused while one runs or waits to be collected).
    Start,
    /// The steps recorded so far, from `from`.
    Poll,
    /// Stop the recording and collect all its steps (also after it ended at its bound).
    Stop,
    /// The screenshot of step `index` (of the recording, or of the last one stopped until the next
    /// start), as the command's image.
    Screenshot,
}

/// `record_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordInput {
    /// `start`, `poll` or `stop`.
    pub action: RecordAction,
    /// start: most steps to keep (at most the executor's maximum, which is the default).
    #[serde(default)]
    pub max_events: Option<u32>,
    /// start: longest recording in seconds (at most the executor's maximum, which is the default).
    #[serde(default)]
    pub max_seconds: Option<f64>,
    /// poll: the index of the first step to return (0: all).
    #[serde(default)]
    pub from: Option<u32>,
    /// screenshot: the index of the step whose screenshot to return.
    #[serde(default)]
    pub index: Option<u32>,
}

/// What `record_input` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RecordReport {
    /// `recording` while it runs, `stopped` once it ended.
    #[schemars(extend("enum" = ["recording", "stopped"]))]
    pub state: &'static str,
    /// Why it ended: `asked`, `max_events`, `max_duration` or `input_ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["asked", "max_events", "max_duration", "input_ended"]))]
    pub ended: Option<&'static str>,
    /// The steps from `from` (poll), all of them (stop), none (start).
    pub events: Vec<RecordedEvent>,
    /// Index of the first step returned.
    pub from: u32,
    /// Steps recorded so far.
    pub total: u32,
    /// Milliseconds since the recording started.
    pub elapsed_ms: u64,
    /// The recording's most steps.
    pub max_events: u32,
    /// The recording's longest time, in seconds.
    pub max_seconds: f64,
    /// start: the windows on the desktop when it started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<RecordedWindow>,
    /// Steps that keep no screenshot because of the executor's `--record-max-screenshots` or
    /// `--record-max-screenshot-mb`.
    #[serde(skip_serializing_if = "is_zero")]
    pub screenshots_left_out: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ToolDef for RecordInput {
    const NAME: &'static str = "record_input";
    const DESCRIPTION: &'static str = "Record what a person does on the desktop (clicks, typed text, \
                                       keys), each step resolved to its control and with a \
                                       screenshot: start, poll, stop, screenshot.";
    const KIND: Kind = Kind::Query;
    type Output = RecordReport;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let exec = cx.exec;
        let limits = &exec.limits;
        if self.action != RecordAction::Start
            && (self.max_events.is_some() || self.max_seconds.is_some())
        {
            return Err(ToolError::invalid(
                Self::NAME,
                "max_events and max_seconds are for action start",
            ));
        }
        if self.action != RecordAction::Poll && self.from.is_some() {
            return Err(ToolError::invalid(Self::NAME, "from is for action poll"));
        }
        if (self.action == RecordAction::Screenshot) != self.index.is_some() {
            return Err(ToolError::invalid(
                Self::NAME,
                "index is for action screenshot, which needs it",
            ));
        }
        match self.action {
            RecordAction::Start => {
                let max_events = match self.max_events {
                    None => limits.record_max_events,
                    Some(n) if (1..=limits.record_max_events).contains(&n) => n,
                    Some(_) => {
                        return Err(ToolError::invalid(
                            Self::NAME,
                            format!(
                                "max_events must be 1..={} (the executor's --record-max-events)",
                                limits.record_max_events
                            ),
                        ));
                    }
                };
                let max = limits.record_max_duration;
                let max_duration = match self.max_seconds {
                    None => max,
                    Some(s) if s.is_finite() && s > 0.0 && s <= max.as_secs_f64() => {
                        Duration::from_secs_f64(s)
                    }
                    Some(_) => {
                        return Err(ToolError::invalid(
                            Self::NAME,
                            format!(
                                "max_seconds must be above 0 and at most {} (the executor's \
                                 --record-max-seconds)",
                                max.as_secs_f64()
                            ),
                        ));
                    }
                };
                if let Some(busy) = busy(exec) {
                    return Err(ToolError::Recording(busy));
                }
                let (rec, windows) = Recording::start(
                    exec.backend.clone(),
                    limits.clone(),
                    max_events,
                    max_duration,
                    cx.format,
                )
                .await?;
                let mut slot = exec
                    .recording
                    .lock()
                    .map_err(|_| ToolError::Recording("its state is unusable".into()))?;
                if slot.is_some() {
                    // Another batch started one while this one listed the windows.
                    return Err(ToolError::Recording(
                        "another recording started meanwhile; stop it first".into(),
                    ));
                }
                let report = report(&rec, 0, windows);
                *slot = Some(rec);
                // The last stopped recording's screenshots are not read any more.
                if let Ok(mut recorded) = exec.recorded.lock() {
                    *recorded = None;
                }
                Ok(Output::from(report))
            }
            RecordAction::Poll => {
                let slot = exec
                    .recording
                    .lock()
                    .map_err(|_| ToolError::Recording("its state is unusable".into()))?;
                let rec = slot.as_ref().ok_or_else(not_started)?;
                Ok(Output::from(report(
                    rec,
                    self.from.unwrap_or(0),
                    Vec::new(),
                )))
            }
            RecordAction::Stop => {
                let rec = exec
                    .recording
                    .lock()
                    .map_err(|_| ToolError::Recording("its state is unusable".into()))?
                    .take()
                    .ok_or_else(not_started)?;
                let left = cx.deadline.saturating_duration_since(Instant::now());
                let shared = rec.shared.clone();
                let (started, max_events, max_duration) =
                    (rec.started, rec.max_events, rec.max_duration);
                rec.stop(left.saturating_sub(Duration::from_millis(50)))
                    .await;
                let s = shared
                    .lock()
                    .map_err(|_| ToolError::Recording("its state is unusable".into()))?;
                let left_out = s.shots_left_out;
                let report = RecordReport {
                    state: "stopped",
                    ended: s.ended.map(|e| e.as_str()),
                    events: s.events.clone(),
                    from: 0,
                    total: count(s.events.len()),
                    elapsed_ms: ms(started.elapsed()),
                    max_events,
                    max_seconds: max_duration.as_secs_f64(),
                    windows: Vec::new(),
                    screenshots_left_out: left_out,
                };
                drop(s);
                if let Ok(mut recorded) = exec.recorded.lock() {
                    *recorded = Some(shared);
                }
                Ok(Output::from(report))
            }
            RecordAction::Screenshot => {
                let index = self.index.unwrap_or_default();
                let shared = recorded(exec)?;
                let s = shared
                    .lock()
                    .map_err(|_| ToolError::Recording("its state is unusable".into()))?;
                let event = s.events.get(index as usize).cloned().ok_or_else(|| {
                    ToolError::invalid(
                        Self::NAME,
                        format!(
                            "the recording has {} steps; no step {index}",
                            s.events.len()
                        ),
                    )
                })?;
                let shot = s.shots.get(&(index as usize)).cloned().ok_or_else(|| {
                    ToolError::Recording(format!("step {index} kept no screenshot"))
                })?;
                let report = RecordReport {
                    state: if s.ended.is_some() {
                        "stopped"
                    } else {
                        "recording"
                    },
                    ended: s.ended.map(|e| e.as_str()),
                    events: vec![event],
                    from: index,
                    total: count(s.events.len()),
                    elapsed_ms: 0,
                    max_events: 0,
                    max_seconds: 0.0,
                    windows: Vec::new(),
                    screenshots_left_out: s.shots_left_out,
                };
                Ok(Output {
                    result: report,
                    images: vec![shot],
                    warnings: Vec::new(),
                })
            }
        }
    }
}

/// The steps of the recording running (or ended, not yet collected), else of the last one stopped.
fn recorded(
    exec: &crate::executor::Executor,
) -> Result<std::sync::Arc<std::sync::Mutex<Shared>>, ToolError> {
    if let Some(rec) = exec
        .recording
        .lock()
        .map_err(|_| ToolError::Recording("its state is unusable".into()))?
        .as_ref()
    {
        return Ok(rec.shared.clone());
    }
    exec.recorded
        .lock()
        .map_err(|_| ToolError::Recording("its state is unusable".into()))?
        .clone()
        .ok_or_else(not_started)
}

fn not_started() -> ToolError {
    ToolError::Recording("no recording was started; start one with action start first".into())
}

/// Why a start is refused now, when it is.
fn busy(exec: &crate::executor::Executor) -> Option<String> {
    let slot = exec.recording.lock().ok()?;
    let rec = slot.as_ref()?;
    let events = rec.shared.lock().map(|s| s.events.len()).unwrap_or(0);
    Some(if rec.running() {
        format!(
            "a recording is already running (started {} s ago, {events} steps); stop it first",
            rec.started.elapsed().as_secs()
        )
    } else {
        format!(
            "the last recording ended with {events} steps that were not collected; stop it first"
        )
    })
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The report of a recording that is kept (start, poll): its steps from `from`.
fn report(rec: &Recording, from: u32, windows: Vec<RecordedWindow>) -> RecordReport {
    let (events, total, ended, left_out) = match rec.shared.lock() {
        Ok(s) => (
            s.events
                .get(from as usize..)
                .map(<[RecordedEvent]>::to_vec)
                .unwrap_or_default(),
            count(s.events.len()),
            s.ended,
            s.shots_left_out,
        ),
        Err(_) => (Vec::new(), 0, None, 0),
    };
    RecordReport {
        state: if ended.is_some() {
            "stopped"
        } else {
            "recording"
        },
        ended: ended.map(|e| e.as_str()),
        events,
        from,
        total,
        elapsed_ms: ms(rec.started.elapsed()),
        max_events: rec.max_events,
        max_seconds: rec.max_duration.as_secs_f64(),
        windows,
        screenshots_left_out: left_out,
    }
}
