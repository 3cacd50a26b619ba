//! Agent flags (env `UFO_AGENT_*`) and building [`AgentServices`] for a task from them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::services::AgentServices;
use super::settings::AgentSettings;
use crate::llm::LlmError;
use crate::llm::config::LlmArgs;
use crate::vision::{Marker, Palette, VisionError};

/// Limits and switches of the HostAgent and AppAgents.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Steps per round before it fails with "step limit reached" (a task may ask for fewer).
    #[arg(long, env = "UFO_AGENT_MAX_STEPS", default_value_t = 30)]
    pub max_steps: u32,
    /// Times an AppAgent FAIL may return control to the HostAgent to re-plan, per round.
    #[arg(long, env = "UFO_AGENT_MAX_REPLANS", default_value_t = 2)]
    pub max_replans: u32,
    /// Re-asks after an unparseable or invalid model reply.
    #[arg(long, env = "UFO_AGENT_MAX_REASKS", default_value_t = 2)]
    pub max_reasks: u32,
    /// Memory item keys copied into blackboard trajectories.
    #[arg(
        long,
        env = "UFO_AGENT_HISTORY_KEYS",
        value_delimiter = ',',
        default_value = "step,agent_name,subtask,observation,thought,status,action_representation,result"
    )]
    pub history_keys: Vec<String>,
    /// Third-party agents offered to the HostAgent as targets.
    #[arg(long, env = "UFO_AGENT_THIRD_PARTY_AGENTS", value_delimiter = ',')]
    pub third_party_agents: Vec<String>,
    /// IoU above which a grounding control duplicates an accessibility control and is dropped.
    #[arg(long, env = "UFO_AGENT_IOU_THRESHOLD", default_value_t = 0.1)]
    pub iou_threshold: f64,
    /// Width prompt images are downscaled to fit.
    #[arg(long, env = "UFO_AGENT_PROMPT_IMAGE_WIDTH", default_value_t = 1280)]
    pub prompt_image_width: u32,
    /// Height prompt images are downscaled to fit.
    #[arg(long, env = "UFO_AGENT_PROMPT_IMAGE_HEIGHT", default_value_t = 1280)]
    pub prompt_image_height: u32,
    /// Send the last selected control's screenshot to the AppAgent's model.
    #[arg(long, env = "UFO_AGENT_INCLUDE_LAST_CONTROL", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_last_control: bool,
    /// Send the clean window screenshot.
    #[arg(long, env = "UFO_AGENT_INCLUDE_CLEAN", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_clean: bool,
    /// Send the annotated (set-of-marks) screenshot.
    #[arg(long, env = "UFO_AGENT_INCLUDE_ANNOTATED", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_annotated: bool,
    /// AppAgents also capture the whole desktop each step.
    #[arg(long, env = "UFO_AGENT_SAVE_FULL_SCREEN", default_value_t = false, action = clap::ArgAction::Set)]
    pub save_full_screen: bool,
    /// AppAgents also fetch the UI tree each step.
    #[arg(long, env = "UFO_AGENT_SAVE_UI_TREE", default_value_t = false, action = clap::ArgAction::Set)]
    pub save_ui_tree: bool,
    /// Check before each action of a batch that its control still exists and is enabled.
    #[arg(long, env = "UFO_AGENT_PRECHECK_CONTROLS", default_value_t = true, action = clap::ArgAction::Set)]
    pub precheck_controls: bool,
    /// TrueType font for set-of-marks labels (default: DejaVu Sans Bold, built into the binary).
    #[arg(long, env = "UFO_AGENT_LABEL_FONT")]
    pub label_font: Option<PathBuf>,
    /// Label height in pixels.
    #[arg(long, env = "UFO_AGENT_LABEL_PX", default_value_t = 14.0)]
    pub label_px: f32,
    /// Characters of an action's error text shown to the models (the full text is stored with the step).
    #[arg(long, env = "UFO_AGENT_ACTION_ERROR_CHARS", default_value_t = crate::agents::action::ERROR_CHARS)]
    pub action_error_chars: usize,
    /// Newest blackboard images sent to the models as images (0 = their metadata only).
    #[arg(long, env = "UFO_AGENT_BLACKBOARD_IMAGES", default_value_t = 2)]
    pub blackboard_images: usize,
    /// Largest width and height of a blackboard image sent to a model (downscaled to fit).
    #[arg(long, env = "UFO_AGENT_BLACKBOARD_IMAGE_PX", default_value_t = 640)]
    pub blackboard_image_px: u32,
    /// Times the same action may run on an unchanged screen before the AppAgent is told it makes no
    /// progress.
    #[arg(long, env = "UFO_AGENT_NO_PROGRESS_WARN", default_value_t = 3)]
    pub no_progress_warn: u32,
    /// Further repeats after that warning before the AppAgent fails the subtask back to the HostAgent.
    #[arg(long, env = "UFO_AGENT_NO_PROGRESS_FAIL", default_value_t = 2)]
    pub no_progress_fail: u32,
    /// Milliseconds a launch waits for the program's window to appear.
    #[arg(
        long,
        env = "UFO_AGENT_LAUNCH_WINDOW_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub launch_window_timeout_ms: u64,
    /// Milliseconds between looks at the window list while waiting for a launched program's window.
    #[arg(long, env = "UFO_AGENT_LAUNCH_POLL_MS", default_value_t = 100)]
    pub launch_poll_ms: u64,
    /// Newest HostAgent actions (with their results) shown in its prompt.
    #[arg(long, env = "UFO_AGENT_HOST_PREVIOUS_ACTIONS", default_value_t = 10)]
    pub host_previous_actions: usize,
    /// The operator's consent policy (JSON, see docs/security.md): per tool, and per argument pattern,
    /// `allow`, `confirm` (held for a person whatever the task's confirm policy) or `deny` (refused
    /// before the executor; the model is told why). Without it every tool is allowed and launch
    /// arguments are denied. Read and checked at start.
    #[arg(long, env = "UFO_AGENT_POLICY_FILE", value_parser = load_policy)]
    pub policy_file: Option<PolicyFile>,
}

/// A consent policy read from its file at start (a bad file is a startup error naming the problem).
#[derive(Debug, Clone)]
pub struct PolicyFile {
    /// The file.
    pub path: PathBuf,
    /// What it says.
    pub policy: Arc<crate::policy::Policy>,
}

fn load_policy(path: &str) -> Result<PolicyFile, String> {
    let path = PathBuf::from(path);
    let policy = crate::policy::Policy::load(&path).map_err(|e| e.to_string())?;
    Ok(PolicyFile {
        path,
        policy: Arc::new(policy),
    })
}

impl AgentArgs {
    /// The settings these flags describe.
    pub fn settings(&self) -> AgentSettings {
        AgentSettings {
            max_steps: self.max_steps,
            max_replans: self.max_replans,
            max_reasks: self.max_reasks,
            history_keys: self.history_keys.clone(),
            third_party_agents: self.third_party_agents.clone(),
            iou_threshold: self.iou_threshold,
            prompt_image_max: (
                self.prompt_image_width.max(1),
                self.prompt_image_height.max(1),
            ),
            include_last_control: self.include_last_control,
            include_clean: self.include_clean,
            include_annotated: self.include_annotated,
            save_full_screen: self.save_full_screen,
            save_ui_tree: self.save_ui_tree,
            precheck_controls: self.precheck_controls,
            confirm_always: false,
            confirm_never: false,
            temperature: None,
            action_error_chars: self.action_error_chars,
            blackboard_images: self.blackboard_images,
            blackboard_image_max: (
                self.blackboard_image_px.max(1),
                self.blackboard_image_px.max(1),
            ),
            no_progress_warn: self.no_progress_warn.max(1),
            no_progress_fail: self.no_progress_fail,
            launch_window_timeout: Duration::from_millis(self.launch_window_timeout_ms),
            launch_poll_interval: Duration::from_millis(self.launch_poll_ms.max(1)),
            host_previous_actions: self.host_previous_actions,
            policy: self
                .policy_file
                .as_ref()
                .map(|f| f.policy.clone())
                .unwrap_or_default(),
        }
    }

    /// Loads the label font (once per process; share the result).
    pub fn marker(&self) -> Result<Arc<Marker>, VisionError> {
        Ok(Arc::new(match &self.label_font {
            Some(path) => Marker::load(path, self.label_px, Palette::default())?,
            None => Marker::embedded(self.label_px, Palette::default())?,
        }))
    }
}

/// Why the agents could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A model could not be configured.
    #[error("cannot configure the model")]
    Model(#[from] LlmError),
    /// The label font could not be loaded.
    #[error("cannot prepare set-of-marks annotation")]
    Vision(#[from] VisionError),
}

/// Per-task choices (from `SubmitTaskRequest`): model overrides, temperature, confirm policy, step limit.
#[derive(Debug, Clone, Default)]
pub struct TaskOverrides {
    /// HostAgent model; `None` = the configured default.
    pub host_model: Option<String>,
    /// AppAgent model; `None` = the configured default.
    pub app_model: Option<String>,
    /// Temperature; `None` = the configured default.
    pub temperature: Option<f64>,
    /// Hold every action (`CONFIRM_POLICY_ALWAYS`).
    pub confirm_always: bool,
    /// Never hold (`CONFIRM_POLICY_NEVER`).
    pub confirm_never: bool,
    /// Step limit; `None` or 0 = the configured default; never above it.
    pub max_steps: Option<u32>,
}

impl AgentServices {
    /// The services for one task.
    pub fn for_task(
        llm: &LlmArgs,
        agents: &AgentArgs,
        marker: Arc<Marker>,
        task: &TaskOverrides,
    ) -> Result<Self, SetupError> {
        let mut settings = agents.settings();
        settings.temperature = task.temperature.or(llm.llm_temperature);
        settings.confirm_always = task.confirm_always;
        settings.confirm_never = task.confirm_never;
        if let Some(n) = task.max_steps.filter(|n| *n > 0) {
            settings.max_steps = n.min(settings.max_steps);
        }
        Ok(Self {
            host_model: llm.model(task.host_model.as_deref().unwrap_or(&llm.host_model))?,
            app_model: llm.model(task.app_model.as_deref().unwrap_or(&llm.app_model))?,
            marker,
            grounding: None,
            knowledge: None,
            settings: Arc::new(settings),
            replay: None,
            uploads: None,
        })
    }
}
