//! The AppAgent (seed 001): its state and its processor — data collection as a `ComposedStrategy`
//! (screenshot capture, then control info, then a replayed step's wait for its targets), LLM
//! interaction, action execution, memory update; fail_fast as seed 001's table.

pub mod memory_update;
pub mod progress;
pub mod prompt;
pub mod replay_wait;
pub mod strategies;

use std::sync::Arc;

use crate::agents::target::TargetInfo;
use crate::memory::Memory;
use crate::processor::{BuildError, ComposedStrategy, Provided, Strategy, StrategyRegistry};
use crate::vision::Screenshot;

use super::common::{AgentProcessor, Phases};
use super::keys;
use super::services::AgentServices;

/// An AppAgent's durable state: one per application, cached by the HostAgent's round.
#[derive(Debug, Clone)]
pub struct AppAgent {
    /// `AppAgent/<application>`.
    pub name: String,
    /// The application (process name) this agent drives.
    pub app_root: String,
    /// The window selected for it.
    pub window: TargetInfo,
    /// One item per step.
    pub memory: Memory,
    /// The last acted-on control's screenshot (next step's first image).
    pub last_control: Option<Screenshot>,
    /// Models, font, settings.
    pub services: AgentServices,
}

impl AppAgent {
    /// A fresh AppAgent for `window`.
    pub fn new(window: TargetInfo, services: AgentServices) -> Self {
        let app_root = window.app_root();
        Self {
            name: format!("AppAgent/{app_root}"),
            app_root,
            window,
            memory: Memory::default(),
            last_control: None,
            services,
        }
    }

    /// Action representations of earlier steps (for repeat counts in the prompt).
    pub fn previous_actions(&self) -> Vec<String> {
        self.memory
            .items()
            .iter()
            .map(|m| m.str("action_representation").to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The plan of the latest step.
    pub fn previous_plan(&self) -> Vec<String> {
        self.memory.previous_plan()
    }
}

/// The AppAgent processor template.
#[derive(Debug, Default, Clone, Copy)]
pub struct AppProcessor;

impl AgentProcessor for AppProcessor {
    type Agent = AppAgent;
    const NAME: &'static str = "AppAgentProcessor";

    fn strategies(&self, s: &mut StrategyRegistry<AppAgent>) -> Result<(), BuildError> {
        let members: Vec<Arc<dyn Strategy<AppAgent>>> = vec![
            Arc::new(strategies::AppScreenshotCapture),
            Arc::new(strategies::AppControlInfo),
            Arc::new(replay_wait::AppReplayWait),
        ];
        Phases {
            data: ComposedStrategy::new("app_data_collection", true, members)?,
            llm: strategies::AppLlmInteraction,
            act: strategies::AppActionExecution,
            memory: memory_update::AppMemoryUpdate,
        }
        .register(s)
    }

    fn own_inputs(&self) -> Vec<Provided> {
        vec![keys::SUBTASK.provided(), keys::HOST_MESSAGE.provided()]
    }
}
