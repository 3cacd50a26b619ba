//! Agent limits and switches, built from the service configuration (every value has a documented default).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::agents::policy::{Hold, Policy, Verdict};

/// Limits and switches of the agents.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Steps per round before it fails with "step limit reached".
    pub max_steps: u32,
    /// Times an AppAgent FAIL may send control back to the HostAgent to re-plan in one round.
    pub max_replans: u32,
    /// Re-asks after an unparseable or invalid reply.
    pub max_reasks: u32,
    /// Memory item keys copied into blackboard trajectories.
    pub history_keys: Vec<String>,
    /// Third-party agents offered to the HostAgent.
    pub third_party_agents: Vec<String>,
    /// The built-in shell agent's description when it is on (`--shell-agent`); `None`: off.
    pub shell_agent: Option<String>,
    /// IoU above which a grounding control duplicates an accessibility control.
    pub iou_threshold: f64,
    /// When windows are grounded visually besides their accessible controls.
    pub grounding_mode: crate::config::GroundingMode,
    /// `auto` grounds a window with fewer named, enabled accessible controls than this.
    pub grounding_min_named: usize,
    /// Prompt images are downscaled to fit this size.
    pub prompt_image_max: (u32, u32),
    /// Send the last selected control's screenshot.
    pub include_last_control: bool,
    /// Send the clean screenshot.
    pub include_clean: bool,
    /// Send the annotated screenshot.
    pub include_annotated: bool,
    /// Check before each action of a batch that its control still exists and is enabled.
    pub precheck_controls: bool,
    /// Hold every action for confirmation, not only those the model marks CONFIRM.
    pub confirm_always: bool,
    /// Run actions the model marks CONFIRM without holding them.
    pub confirm_never: bool,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Characters of an action's error text shown in prompts and trajectories.
    pub action_error_chars: usize,
    /// Newest blackboard images sent to the models as images (0 = metadata only).
    pub blackboard_images: usize,
    /// Blackboard images are downscaled to fit this size.
    pub blackboard_image_max: (u32, u32),
    /// Times the same action may run on an unchanged screen before the AppAgent is told so.
    pub no_progress_warn: u32,
    /// Further repeats after that warning before the AppAgent fails back to the HostAgent.
    pub no_progress_fail: u32,
    /// How long a replayed step waits for its recorded target to be listed and enabled (see
    /// [`crate::replay::wait`]).
    pub replay_wait: Duration,
    /// How long a launch waits for the program's window to appear.
    pub launch_window_timeout: Duration,
    /// How often the window list is looked at while waiting for a launched program's window.
    pub launch_poll_interval: Duration,
    /// Newest HostAgent actions shown in its prompt.
    pub host_previous_actions: usize,
    /// Times the same HostAgent function may fail the same way in a row before it is told so.
    pub host_repeat_warn: u32,
    /// Further such failures after that warning before the round fails with no progress.
    pub host_repeat_fail: u32,
    /// The operator's consent policy (`--policy-file`): which actions run, wait for a person, or are
    /// refused.
    pub policy: Arc<Policy>,
}

impl AgentSettings {
    /// Whether a proposed batch is held for a person (see [`crate::agents::policy`]). `model_confirm`: the model's
    /// status is CONFIRM; `acts`: its status runs actions. A batch the policy denies is not held: it is
    /// refused when it runs, and the model is told why.
    pub fn hold<'a>(
        &self,
        model_confirm: bool,
        acts: bool,
        batch: &[(&'a str, &'a Map<String, Value>)],
    ) -> Option<Hold> {
        if batch.iter().all(|(f, _)| f.is_empty()) || !(acts || model_confirm) {
            return None;
        }
        let j = self
            .policy
            .judge_batch(batch.iter().filter(|(f, _)| !f.is_empty()).copied());
        match j.verdict {
            Verdict::Deny => None,
            Verdict::Confirm => Some(Hold::Policy(j.reason())),
            Verdict::Allow if model_confirm && !self.confirm_never => Some(Hold::Model),
            Verdict::Allow if self.confirm_always => Some(Hold::Task),
            Verdict::Allow => None,
        }
    }
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            max_steps: 30,
            max_replans: 2,
            max_reasks: 2,
            history_keys: [
                "step",
                "agent_name",
                "subtask",
                "observation",
                "thought",
                "status",
                "action_representation",
                "result",
            ]
            .map(str::to_owned)
            .to_vec(),
            third_party_agents: vec![],
            shell_agent: None,
            iou_threshold: crate::vision::merge::DEFAULT_IOU_THRESHOLD,
            grounding_mode: crate::config::GroundingMode::Auto,
            grounding_min_named: 3,
            prompt_image_max: (1280, 1280),
            include_last_control: true,
            include_clean: true,
            include_annotated: true,
            precheck_controls: true,
            confirm_always: false,
            confirm_never: false,
            temperature: None,
            action_error_chars: crate::config::ERROR_CHARS,
            blackboard_images: 2,
            blackboard_image_max: (640, 640),
            no_progress_warn: 3,
            no_progress_fail: 2,
            replay_wait: Duration::from_millis(5_000),
            launch_window_timeout: Duration::from_secs(10),
            launch_poll_interval: Duration::from_millis(100),
            host_previous_actions: 10,
            host_repeat_warn: 3,
            host_repeat_fail: 3,
            policy: Arc::new(Policy::default()),
        }
    }
}
