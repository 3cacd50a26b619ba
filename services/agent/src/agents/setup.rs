//! Building the agents' settings and a task's [`AgentServices`] from the agent flags
//! ([`crate::config::AgentArgs`]).

use std::sync::Arc;
use std::time::Duration;

use super::policy::{Policy, PolicyError};
use super::services::AgentServices;
use super::services::GroundingSource;
use super::settings::AgentSettings;
use super::target::TargetInfo;
use crate::config::GroundingMode;
use crate::config::{AgentArgs, LlmArgs};
use crate::llm::LlmError;
use crate::vision::grounding::omniparser::{OmniParserClient, OmniParserOptions};
use crate::vision::grounding::{
    GroundingError, OcrGrounding, OcrOptions, Preprocess, builtin_engine,
};
use crate::vision::{Marker, Palette, Screenshot, VisionError};

/// A grounding source whose engine could not start: every call fails with the cause.
#[derive(Debug)]
struct Unavailable(String);

#[async_trait::async_trait]
impl GroundingSource for Unavailable {
    async fn detect(&self, _shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError> {
        Err(GroundingError::Unavailable(self.0.clone()))
    }
}

impl AgentArgs {
    /// Whether windows may be grounded by the built-in OCR (grounding not off, no `--grounding-url`).
    pub fn uses_builtin_ocr(&self) -> bool {
        self.grounding != GroundingMode::Off && self.grounding_url.is_none()
    }

    /// Reads and checks the operator's consent policy (`--policy-file`); none: the default policy.
    /// Called once at start, so a bad file stops the service before it takes a task.
    pub fn load_policy(&self) -> Result<Arc<Policy>, PolicyError> {
        Ok(Arc::new(match &self.policy_file {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        }))
    }

    /// The settings these flags describe, with the policy [`Self::load_policy`] read.
    pub fn settings(&self, policy: Arc<Policy>) -> AgentSettings {
        AgentSettings {
            max_steps: self.max_steps,
            max_replans: self.max_replans,
            max_reasks: self.max_reasks,
            history_keys: self.history_keys.clone(),
            third_party_agents: self.third_party_agents.clone(),
            shell_agent: self
                .shell_agent
                .then(|| self.shell_agent_description.clone()),
            iou_threshold: self.iou_threshold,
            grounding_mode: self.grounding,
            grounding_min_named: self.grounding_min_named,
            prompt_image_max: (
                self.prompt_image_width.max(1),
                self.prompt_image_height.max(1),
            ),
            include_last_control: self.include_last_control,
            include_clean: self.include_clean,
            include_annotated: self.include_annotated,
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
            replay_wait: Duration::from_millis(self.replay_wait_ms),
            launch_window_timeout: Duration::from_millis(self.launch_window_timeout_ms),
            launch_poll_interval: Duration::from_millis(self.launch_poll_ms.max(1)),
            host_previous_actions: self.host_previous_actions,
            host_repeat_warn: self.host_repeat_warn.max(1),
            host_repeat_fail: self.host_repeat_fail,
            policy,
        }
    }

    /// Reads and checks the MCP servers file (`--mcp-servers`); none: `None`. Called once at start (the
    /// servers themselves start on first use).
    pub fn load_mcp(&self) -> Result<Option<Arc<crate::mcp::McpHub>>, crate::mcp::McpConfigError> {
        let Some(path) = &self.mcp_servers else {
            return Ok(None);
        };
        let ms = Duration::from_millis;
        let limits = crate::mcp::McpLimits {
            call_timeout: ms(self.mcp_call_timeout_ms.max(1)),
            connect_timeout: ms(self.mcp_connect_timeout_ms.max(1)),
            restart_backoff: ms(self.mcp_restart_backoff_ms),
            restart_backoff_max: ms(self.mcp_restart_backoff_max_ms),
            result_chars: self.mcp_result_chars.max(1),
        };
        Ok(Some(Arc::new(crate::mcp::McpHub::load(path, limits)?)))
    }

    /// The grounding source these flags describe (once per process; share the result): the
    /// OmniParser-protocol service of `--grounding-url`, else the built-in OCR; `None` with
    /// `--grounding off`. A bad URL or token file is an error (the service does not start); an engine
    /// that cannot start is not fatal: the source then fails every call with the cause, and each step
    /// goes on with accessibility controls only.
    pub fn grounding(&self) -> Result<Option<Arc<dyn GroundingSource>>, GroundingError> {
        if self.grounding == GroundingMode::Off {
            return Ok(None);
        }
        if let Some(url) = &self.grounding_url {
            let token = match &self.grounding_token_file {
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .map_err(|e| {
                            GroundingError::Config(format!(
                                "cannot read the grounding token file {}: {e}",
                                path.display()
                            ))
                        })?
                        .trim()
                        .to_owned(),
                ),
                None => None,
            };
            let options = OmniParserOptions {
                timeout: Duration::from_millis(self.grounding_timeout_ms.max(1)),
                max_response_bytes: self.grounding_max_response_bytes.max(1),
                max_text_chars: self.grounding_text_chars.max(1),
                max_elements: self.grounding_max_elements,
                cache_entries: self.grounding_cache,
                token,
            };
            return Ok(Some(Arc::new(OmniParserClient::new(url, options)?)));
        }
        let options = OcrOptions {
            preprocess: Preprocess {
                upscale: self.grounding_upscale.clamp(1, 4),
                ..Preprocess::default()
            },
            min_confidence: self.grounding_min_confidence,
            max_text_chars: self.grounding_text_chars.max(1),
            max_elements: self.grounding_max_elements,
            timeout: Duration::from_millis(self.grounding_timeout_ms.max(1)),
            cache_entries: self.grounding_cache,
            ..OcrOptions::default()
        };
        Ok(Some(
            match builtin_engine(self.grounding_tessdata.as_deref(), &self.grounding_lang) {
                Ok(engine) => Arc::new(OcrGrounding::new(engine, options)),
                Err(e) => {
                    tracing::warn!(error = %e, "visual grounding is unavailable; windows get accessibility controls only");
                    Arc::new(Unavailable(e.to_string()))
                }
            },
        ))
    }

    /// Whether grounding works as configured, for `--check-model` (and so `ufo doctor`): ready (or off),
    /// or not with the cause and the fix.
    pub async fn check_grounding(&self) -> GroundingReadiness {
        use GroundingReadiness::{NotReady, Ready};
        if self.grounding == GroundingMode::Off {
            return Ready("visual grounding is off (--grounding off)".into());
        }
        if let Some(url) = &self.grounding_url {
            let options = OmniParserOptions {
                timeout: Duration::from_millis(self.grounding_timeout_ms.max(1)),
                ..OmniParserOptions::default()
            };
            let client = match self.grounding() {
                Ok(Some(_)) => match OmniParserClient::new(url, options) {
                    Ok(client) => client,
                    Err(e) => return NotReady(e.to_string()),
                },
                Ok(None) => return Ready("visual grounding is off".into()),
                Err(e) => {
                    return NotReady(format!(
                        "{e}; fix: correct --grounding-url / --grounding-token-file"
                    ));
                }
            };
            return match client.probe().await {
                Ok(()) => Ready(format!("grounding service {url} is ready")),
                Err(e) => NotReady(format!(
                    "grounding service {url}: {e}; fix: start it or correct --grounding-url (steps go on with accessibility controls only)"
                )),
            };
        }
        match builtin_engine(self.grounding_tessdata.as_deref(), &self.grounding_lang) {
            Ok(engine) => Ready(format!("built-in OCR grounding: {}", engine.name())),
            Err(e) => NotReady(format!(
                "{e}; fix: apt-get install tesseract-ocr tesseract-ocr-eng (windows without accessibility get no visual grounding until then)"
            )),
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

/// What `--check-model` says of visual grounding (it degrades: a note, not a failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroundingReadiness {
    /// It works as configured, or is off: what it is.
    Ready(String),
    /// It does not: the cause and the fix.
    NotReady(String),
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
    /// Step limit; `None` or 0 = the configured default. Submission refuses one above the agents'
    /// `--max-steps`.
    pub max_steps: Option<u32>,
}

impl AgentServices {
    /// The services for one task.
    pub fn for_task(
        llm: &LlmArgs,
        agents: &AgentArgs,
        policy: Arc<Policy>,
        marker: Arc<Marker>,
        task: &TaskOverrides,
    ) -> Result<Self, SetupError> {
        let mut settings = agents.settings(policy);
        settings.temperature = task.temperature.or(llm.llm_temperature);
        settings.confirm_always = task.confirm_always;
        settings.confirm_never = task.confirm_never;
        if let Some(n) = task.max_steps.filter(|n| *n > 0) {
            // Submission refuses a limit above `--max-steps`; a task queued before the operator
            // lowered it is held to the new one, and the log says so.
            if n > settings.max_steps {
                tracing::warn!(
                    task_max_steps = n,
                    agent_max_steps = settings.max_steps,
                    "the task's step limit is above --max-steps; the round stops at --max-steps"
                );
            }
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
            reuse: None,
            uploads: None,
            mcp: None,
        })
    }
}
