//! What every agent of a task shares: the models, the label font, the optional grounding source and the
//! settings.

use std::sync::Arc;

use async_trait::async_trait;

use super::settings::AgentSettings;
use crate::llm::ChatModel;
use crate::vision::Marker;

pub use crate::vision::grounding::GroundingSource;

/// Why knowledge could not be retrieved: the step goes on without it (see [`retrieve_or_nothing`]).
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    /// The knowledge store did not answer, or refused the search.
    #[error("knowledge search failed: {0}")]
    Store(String),
}

pub use super::knowledge::{KnowledgeUsed, Retrieved, USED_TITLE_CHARS};

/// Retrieved knowledge for a subtask (seed 001 "RAG": experience, demonstrations, documents, search),
/// rendered as prompt text.
#[async_trait]
pub trait KnowledgeSource: Send + Sync {
    /// Knowledge useful for `text` (the HostAgent's request, an AppAgent's subtask) in `application`
    /// ("" = any application), rendered for the prompt ("" when none), with the items it holds.
    async fn retrieve(&self, text: &str, application: &str) -> Result<Retrieved, KnowledgeError>;
}

/// What `source` retrieves for `text` in `application`, or nothing — without a source, or when it
/// fails (a warning says why): knowledge helps a prompt, it never stops a step.
pub async fn retrieve_or_nothing(
    source: Option<&Arc<dyn KnowledgeSource>>,
    text: &str,
    application: &str,
) -> Retrieved {
    let Some(source) = source else {
        return Retrieved::default();
    };
    source
        .retrieve(text, application)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "knowledge retrieval failed; prompting without it");
            Retrieved::default()
        })
}

/// Shared by the HostAgent and its AppAgents.
#[derive(Clone)]
pub struct AgentServices {
    /// The HostAgent's model (primary + backup already combined).
    pub host_model: Arc<dyn ChatModel>,
    /// The AppAgents' model.
    pub app_model: Arc<dyn ChatModel>,
    /// Set-of-marks drawing.
    pub marker: Arc<Marker>,
    /// Optional second control source merged by IoU.
    pub grounding: Option<Arc<dyn GroundingSource>>,
    /// Optional retrieved knowledge for the HostAgent's and AppAgents' prompts.
    pub knowledge: Option<Arc<dyn KnowledgeSource>>,
    /// Limits and switches.
    pub settings: Arc<AgentSettings>,
    /// A replay task's plan: the recording decides each step, the model only where it falls back.
    pub replay: Option<Arc<crate::replay::ReplaySpec>>,
    /// A reuse task's plan (issue 33): filled for the new request by one model call, then followed like a
    /// replay whose missing targets go to the model.
    pub reuse: Option<Arc<crate::replay::reuse::Reuse>>,
    /// Puts screenshots into the session service's blob store as they are captured (none: their bytes
    /// go with the step).
    pub uploads: Option<Arc<crate::store::blobs::BlobUploads>>,
    /// The operator's MCP servers (`--mcp-servers`): API actions of applications and third-party agents
    /// (none: GUI actions only). Shared by every task of the process.
    pub mcp: Option<Arc<crate::mcp::McpHub>>,
}

impl std::fmt::Debug for AgentServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentServices")
            .field("host_model", &self.host_model.model_name())
            .field("app_model", &self.app_model.model_name())
            .field("grounding", &self.grounding.is_some())
            .field("knowledge", &self.knowledge.is_some())
            .field("settings", &self.settings)
            .field("replay", &self.replay.as_ref().map(|r| &r.of))
            .field("reuse", &self.reuse.as_ref().map(|r| &r.of))
            .field("mcp", &self.mcp.is_some())
            .finish()
    }
}
