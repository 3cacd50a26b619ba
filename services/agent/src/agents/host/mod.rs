//! The HostAgent (seeds 000 and 002): its state and its processor (four strategies, fail_fast exactly as
//! seed 000's table: data collection and LLM interaction stop the pipeline, action execution and memory
//! update are logged and tolerated).

pub mod launch;
pub mod progress;
pub mod prompt;
pub mod strategies;

use crate::memory::Memory;
use crate::processor::{BuildError, StrategyRegistry};

use super::common::{AgentProcessor, Phases};
use super::services::AgentServices;

/// The HostAgent's durable state (everything else is rebuilt each step).
#[derive(Debug, Clone)]
pub struct HostAgent {
    /// Always `HostAgent`.
    pub name: String,
    /// One item per step.
    pub memory: Memory,
    /// Models, font, settings.
    pub services: AgentServices,
}

impl HostAgent {
    /// A HostAgent with empty memory.
    pub fn new(services: AgentServices) -> Self {
        Self {
            name: "HostAgent".into(),
            memory: Memory::default(),
            services,
        }
    }

    /// Its newest `max` actions with what happened to each, as `step 3: launch_application … [denied: …]`.
    pub fn previous_actions(&self, max: usize) -> Vec<String> {
        let mut out: Vec<String> = self
            .memory
            .items()
            .iter()
            .rev()
            .filter(|m| !m.str("action_representation").is_empty())
            .take(max)
            .map(|m| {
                let step = m
                    .get("step")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                format!("step {step}: {}", m.str("action_representation"))
            })
            .collect();
        out.reverse();
        out
    }

    /// The plan of the latest step (seed 000: "Get previous plan from memory").
    pub fn previous_plan(&self) -> Vec<String> {
        self.memory.previous_plan()
    }
}

/// The HostAgent processor template.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostProcessor;

impl AgentProcessor for HostProcessor {
    type Agent = HostAgent;
    const NAME: &'static str = "HostAgentProcessor";

    fn strategies(&self, s: &mut StrategyRegistry<HostAgent>) -> Result<(), BuildError> {
        Phases {
            data: strategies::DesktopDataCollection,
            llm: strategies::HostLlmInteraction,
            act: strategies::HostActionExecution,
            memory: strategies::HostMemoryUpdate,
        }
        .register(s)
    }
}
