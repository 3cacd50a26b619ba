//! The processing phases (seed 004, "ProcessorTemplate Structure" / "Execution Order").

use std::fmt;

/// A phase of one processor run. Phases always run in the order of [`ProcessingPhase::ORDER`]; a phase
/// with no registered strategy is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcessingPhase {
    /// Initialisation (optional).
    Setup,
    /// Gather context from the device: screenshots, windows, controls.
    DataCollection,
    /// Build the prompt, ask the model, parse its decision.
    LlmInteraction,
    /// Run the decided commands on the device.
    ActionExecution,
    /// Record memory and blackboard entries.
    MemoryUpdate,
    /// Clean-up (optional).
    Cleanup,
}

impl ProcessingPhase {
    /// The fixed execution order.
    pub const ORDER: [ProcessingPhase; 6] = [
        ProcessingPhase::Setup,
        ProcessingPhase::DataCollection,
        ProcessingPhase::LlmInteraction,
        ProcessingPhase::ActionExecution,
        ProcessingPhase::MemoryUpdate,
        ProcessingPhase::Cleanup,
    ];

    /// The seeds' snake_case name (`data_collection`, ...), used in spans, logs and stored timings.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessingPhase::Setup => "setup",
            ProcessingPhase::DataCollection => "data_collection",
            ProcessingPhase::LlmInteraction => "llm_interaction",
            ProcessingPhase::ActionExecution => "action_execution",
            ProcessingPhase::MemoryUpdate => "memory_update",
            ProcessingPhase::Cleanup => "cleanup",
        }
    }

    /// Position in [`ProcessingPhase::ORDER`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ProcessingPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
