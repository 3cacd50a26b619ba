//! Batches: runs commands in order against one desktop, one batch at a time (two agents must not
//! interleave clicks on one screen), each under its deadline, timed, with the early-exit rule — after the
//! first failure the rest of the batch is skipped, as the reference's command dispatcher does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::Instrument as _;

use crate::backend::{Backend, SettleOptions, SettleReport, WindowInfo};
use crate::effect::Effect;
use crate::encode::Format;
use crate::geometry::Point;
use crate::tools::{Cx, Tool, ToolError};
use crate::tree::ControlListing;

/// Limits the tools enforce, from the configuration.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest `wait`.
    pub max_wait: Duration,
    /// Most nodes per tree walk.
    pub max_tree_nodes: u32,
    /// Deepest tree level.
    pub max_tree_depth: u32,
    /// Most key strokes per keyboard_input.
    pub max_key_strokes: usize,
    /// Longest set_edit_text text and keyboard_input key text, in bytes.
    pub max_text_bytes: usize,
    /// Longest summary text, in bytes.
    pub max_summary_bytes: usize,
    /// Most arguments of one launch_application.
    pub max_launch_args: usize,
    /// Longest launch_application argument, in bytes.
    pub max_launch_arg_bytes: usize,
    /// Directories launch arguments must lie in (resolved; empty: launches take no arguments).
    pub launch_dirs: Vec<PathBuf>,
    /// Control types listed for agents.
    pub control_types: Vec<String>,
    /// Longest current text listed for an editable control, in characters.
    pub max_value_chars: usize,
    /// How the first observation after an action waits for the screen to settle (timeout 0: never).
    pub settle: SettleOptions,
    /// An action right after another one waits the same way for the earlier one to settle.
    pub settle_between_actions: bool,
    /// How long an action waits for its target to be there, enabled and visible before failing
    /// (0: fail at once), watching its accessibility state.
    pub action_wait: Duration,
    /// Each action settles at once and its result says what it was observed to change
    /// ([`crate::effect`]).
    pub effect_check: bool,
    /// How long the effect check of a launch or a close waits for the window set to change.
    pub effect_window_wait: Duration,
    /// Most steps one `record_input` recording keeps (a start may ask fewer).
    pub record_max_events: u32,
    /// Longest `record_input` recording (a start may ask less).
    pub record_max_duration: Duration,
    /// Most steps of one recording that keep a screenshot (the later ones keep none).
    pub record_max_screenshots: u32,
    /// Most bytes of encoded screenshots one recording keeps (a step whose screenshot would pass it
    /// keeps none).
    pub record_max_screenshot_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_wait: Duration::from_secs(60),
            max_tree_nodes: 5_000,
            max_tree_depth: 64,
            max_key_strokes: 20_000,
            max_text_bytes: 1024 * 1024,
            max_summary_bytes: 64 * 1024,
            max_launch_args: 16,
            max_launch_arg_bytes: 4096,
            launch_dirs: Vec::new(),
            control_types: crate::tree::DEFAULT_CONTROL_TYPES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            max_value_chars: 256,
            settle: SettleOptions {
                timeout: Duration::from_millis(2_000),
                quiet: Duration::from_millis(40),
                first_change: Duration::from_millis(300),
                animation_hz: 10.0,
                whole_screen: false,
            },
            settle_between_actions: true,
            action_wait: Duration::from_millis(1_000),
            effect_check: true,
            effect_window_wait: Duration::from_millis(5_000),
            record_max_events: 2_000,
            record_max_duration: Duration::from_secs(600),
            record_max_screenshots: 200,
            record_max_screenshot_bytes: 64 * 1024 * 1024,
        }
    }
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Tool name.
    pub tool: String,
    /// Parameters object (or null).
    pub params: Value,
    /// Echoed in the outcome.
    pub call_id: String,
}

/// Per-batch options.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Deadline of each command.
    pub deadline: Duration,
    /// Screenshot encoding.
    pub format: Format,
}

/// Status of one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done.
    Success,
    /// Failed; `error` says why.
    Failure,
    /// Not run because an earlier command failed.
    Skipped,
}

/// An encoded screenshot.
#[derive(Debug, Clone)]
pub struct Shot {
    /// Encoding.
    pub format: Format,
    /// Encoded bytes.
    pub data: Vec<u8>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Screen position of pixel (0, 0).
    pub origin: Point,
    /// Screen pixels per image pixel.
    pub scale: f64,
}

/// What a tool produced.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// Structured result.
    pub result: Value,
    /// Screenshots.
    pub images: Vec<Shot>,
    /// Non-fatal remarks.
    pub warnings: Vec<String>,
}

/// The result of one command.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Echo of the command's call id.
    pub call_id: String,
    /// Success, failure or skipped.
    pub status: Status,
    /// Why it failed or was skipped.
    pub error: String,
    /// The tool's output (empty unless successful).
    pub output: ToolOutput,
    /// Time spent inside the executor.
    pub duration: Duration,
    /// How long this command waited for the screen to settle after an earlier action before it ran
    /// (an observation, or an action right after another); `None` when no unsettled action preceded
    /// it (or settling is off).
    pub settle: Option<SettleReport>,
    /// On an action that ran: what it was observed to change (`None` with effect checks off).
    pub effect: Option<Effect>,
}

/// What the executor remembers about the desktop between commands and batches.
#[derive(Debug, Default)]
pub(crate) struct DesktopState {
    /// The last window listing (ids are positions in it).
    pub windows: Vec<WindowInfo>,
    /// The window app actions work on.
    pub selected: Option<WindowInfo>,
    /// The last control listing of the selected window.
    pub listing: Option<ControlListing>,
    /// The change mark taken before the latest action no observation has waited for yet.
    pub unsettled: Option<(u64, Instant)>,
    /// The settle wait the latest action's effect check already did, reported by the next command.
    pub settled: Option<SettleReport>,
    /// The window the latest `close_application` asked to close (for its effect's description).
    pub closed: Option<WindowInfo>,
}

/// Runs batches against one desktop.
pub struct Executor {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) limits: Limits,
    pub(crate) apps: Vec<(String, PathBuf)>,
    pub(crate) state: tokio::sync::Mutex<DesktopState>,
    pub(crate) launch_env: Vec<(String, String)>,
    pub(crate) shell: crate::shell::ShellConfig,
    /// Programs `launch_application` started since the last reset (ended by [`Executor::reset`]).
    pub(crate) launched: std::sync::Mutex<Vec<tokio::process::Child>>,
    /// How [`Executor::reset`] resets the desktop.
    pub(crate) reset: crate::reset::ResetConfig,
    /// The `record_input` recording, from its start until its steps are collected by a stop.
    pub(crate) recording: std::sync::Mutex<Option<crate::record::Recording>>,
    /// The steps and screenshots of the last recording collected by a stop, until the next start (its
    /// steps' screenshots are fetched one at a time after the stop).
    pub(crate) recorded: std::sync::Mutex<Option<Arc<std::sync::Mutex<crate::record::Shared>>>>,
    /// Programs callers started with `process_start` (MCP servers on the desktop's side).
    pub(crate) processes: Arc<crate::process::Processes>,
}

impl Executor {
    /// An executor driving `backend`, launching only `apps` (name, program).
    pub fn new(backend: Arc<dyn Backend>, limits: Limits, apps: Vec<(String, PathBuf)>) -> Self {
        Self {
            backend,
            limits,
            apps,
            state: tokio::sync::Mutex::new(DesktopState::default()),
            launch_env: Vec::new(),
            shell: crate::shell::ShellConfig::default(),
            launched: std::sync::Mutex::new(Vec::new()),
            reset: crate::reset::ResetConfig::default(),
            recording: std::sync::Mutex::new(None),
            recorded: std::sync::Mutex::new(None),
            processes: crate::process::Processes::new(Default::default(), Vec::new()),
        }
    }

    /// The processes `process_start` may start (off by default), with `env` added to their
    /// environment besides the executor's own (e.g. a private desktop's DISPLAY).
    pub fn with_processes(mut self, processes: Arc<crate::process::Processes>) -> Self {
        self.processes = processes;
        self
    }

    /// The processes callers started.
    pub fn processes(&self) -> &Arc<crate::process::Processes> {
        &self.processes
    }

    /// How the desktop is reset between tasks (`Reset`).
    pub fn with_reset(mut self, reset: crate::reset::ResetConfig) -> Self {
        self.reset = reset;
        self
    }

    /// `run_command`'s rules (off by default: [`crate::shell::ShellConfig::default`] allows nothing).
    pub fn with_shell(mut self, shell: crate::shell::ShellConfig) -> Self {
        self.shell = shell;
        self
    }

    /// Extra environment for launched programs (e.g. the DISPLAY of a test desktop).
    pub fn with_launch_env(mut self, env: Vec<(String, String)>) -> Self {
        self.launch_env = env;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Names launch_application accepts.
    pub fn app_names(&self) -> Vec<String> {
        self.apps.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Runs `commands` in order for a local caller; waits for any other batch on this desktop to
    /// finish first.
    pub async fn execute(&self, commands: Vec<CommandSpec>, options: BatchOptions) -> Vec<Outcome> {
        self.execute_as(&crate::process::Caller::local(), commands, options)
            .await
    }

    /// Runs `commands` in order for `caller`; waits for any other batch on this desktop to finish
    /// first, unless every command only talks to the caller's processes (a long `process_read` must
    /// not hold the desktop).
    pub async fn execute_as(
        &self,
        caller: &crate::process::Caller,
        commands: Vec<CommandSpec>,
        options: BatchOptions,
    ) -> Vec<Outcome> {
        let processes_only = !commands.is_empty()
            && commands
                .iter()
                .all(|c| c.tool.parse::<Tool>().is_ok_and(Tool::is_process));
        let mut own = DesktopState::default();
        let mut locked: Option<tokio::sync::MutexGuard<'_, DesktopState>> = None;
        let state: &mut DesktopState = if processes_only {
            &mut own
        } else {
            locked.insert(self.state.lock().await)
        };
        let mut failed: Option<String> = None;
        let mut outcomes = Vec::with_capacity(commands.len());
        for cmd in commands {
            if let Some(first) = &failed {
                outcomes.push(Outcome {
                    call_id: cmd.call_id,
                    status: Status::Skipped,
                    error: format!("skipped: an earlier command ({first}) failed"),
                    output: ToolOutput::default(),
                    duration: Duration::ZERO,
                    settle: None,
                    effect: None,
                });
                continue;
            }
            let started = Instant::now();
            let span = tracing::info_span!(
                "executor.command",
                tool = %cmd.tool,
                call_id = %cmd.call_id,
                status = tracing::field::Empty,
            );
            let (result, settle, effect) = self
                .command(state, caller, &cmd.tool, cmd.params, options)
                .instrument(span.clone())
                .await;
            let (status, error, output) = match result {
                Ok(output) => (Status::Success, String::new(), output),
                Err(error) => {
                    failed = Some(cmd.tool.clone());
                    (Status::Failure, error.to_string(), ToolOutput::default())
                }
            };
            let outcome = Outcome {
                call_id: cmd.call_id,
                status,
                error,
                output,
                duration: started.elapsed(),
                settle,
                effect: if status == Status::Success {
                    effect
                } else {
                    None
                },
            };
            // The span's status lets a trace show which command of a batch failed.
            span.record("status", format!("{:?}", outcome.status).to_lowercase());
            if outcome.status == Status::Failure {
                tracing::info!(tool = %cmd.tool, error = %outcome.error, "command failed");
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Runs one command within `options.deadline` (settling included), with the settle report of an
    /// observation.
    async fn command(
        &self,
        st: &mut DesktopState,
        caller: &crate::process::Caller,
        name: &str,
        params: Value,
        options: BatchOptions,
    ) -> (
        Result<ToolOutput, ToolError>,
        Option<SettleReport>,
        Option<Effect>,
    ) {
        let started = Instant::now();
        let tool = match name.parse::<Tool>() {
            Ok(tool) => tool,
            Err(unknown) => return (Err(unknown), None, None),
        };
        let settle = self.before_command(st, tool).await;
        let checked = self.limits.effect_check && tool.kind().changes_screen();
        let before = if checked {
            Some((self.effect_before().await, params.clone()))
        } else {
            None
        };
        let deadline = started + options.deadline;
        let mut cx = Cx {
            exec: self,
            st,
            deadline,
            format: options.format,
            watched: None,
            caller,
        };
        let left = options.deadline.saturating_sub(started.elapsed());
        let result = tokio::time::timeout(left, tool.run(&mut cx, params))
            .await
            .unwrap_or(Err(ToolError::Deadline(
                tool.name(),
                options.deadline.as_millis(),
            )));
        let watched = cx.watched.take();
        let effect = match (&result, before) {
            (Ok(_), Some((before, params))) => {
                let check = self.effect_after(st, tool, &params, before, watched);
                let left = deadline.saturating_duration_since(Instant::now());
                Some(
                    tokio::time::timeout(left, check)
                        .await
                        .unwrap_or_else(|_| Effect {
                            kind: crate::effect::EffectKind::Unverifiable,
                            description: format!(
                                "{}: the command's deadline passed before its effect was seen",
                                tool.name()
                            ),
                        }),
                )
            }
            _ => None,
        };
        (result, settle, effect)
    }

    /// The settle protocol (`executor.proto`, `Settle`): an action marks the screen's change counter;
    /// the first observation after it waits for the screen to settle and reports how.
    ///
    /// An action right after another one (the next action of a batch, or of the next batch before any
    /// observation) first waits the same way for the earlier one's effect: a person sees the screen
    /// react before pressing the next key, and applications drop input that comes while they are busy
    /// (GTK's file chooser ignores an Enter sent while it completes a typed path). Off with
    /// [`Limits::settle_between_actions`] false.
    ///
    /// With effect checks on, an action settles at its end (its effect is read once the screen has
    /// settled); the next command then reports that wait as its own.
    async fn before_command(&self, st: &mut DesktopState, tool: Tool) -> Option<SettleReport> {
        if tool.kind().changes_screen() {
            let report = if self.limits.settle_between_actions {
                self.settle_pending(st).await
            } else {
                None
            };
            let report = report.or(st.settled.take());
            if let Some(mark) = self.backend.change_mark() {
                st.unsettled = Some((mark, Instant::now()));
            }
            return report;
        }
        if !tool.kind().waits_for_settle() {
            return None;
        }
        let report = self.settle_pending(st).await;
        report.or(st.settled.take())
    }

    /// Waits for the screen to settle after the latest action nothing has waited for yet.
    pub(crate) async fn settle_pending(&self, st: &mut DesktopState) -> Option<SettleReport> {
        if self.limits.settle.timeout.is_zero() {
            return None;
        }
        let (mark, since) = st.unsettled.take()?;
        let span = tracing::info_span!(
            "executor.settle",
            waited_ms = tracing::field::Empty,
            outcome = tracing::field::Empty,
            ignored = tracing::field::Empty,
            scope = if st.selected.is_some() && !self.limits.settle.whole_screen {
                "window"
            } else {
                "screen"
            }
        );
        let report = self
            .backend
            .settle(mark, since, &self.limits.settle, st.selected.as_ref())
            .instrument(span.clone())
            .await;
        span.record("waited_ms", report.waited.as_secs_f64() * 1e3);
        span.record("outcome", format!("{:?}", report.outcome));
        span.record("ignored", report.ignored);
        Some(report)
    }
}
