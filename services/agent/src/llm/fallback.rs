//! A backup model used after the primary fails (the reference's `use_backup_engine`).

use async_trait::async_trait;

use super::error::LlmError;
use super::types::{ChatModel, ChatRequest, ChatResponse};

/// Calls `primary`; when it fails (after its own retries), calls `backup`.
pub struct Fallback<P, B> {
    primary: P,
    backup: B,
}

impl<P, B> Fallback<P, B> {
    /// Pairs a primary with its backup.
    pub fn new(primary: P, backup: B) -> Self {
        Self { primary, backup }
    }
}

#[async_trait]
impl<P: ChatModel, B: ChatModel> ChatModel for Fallback<P, B> {
    fn model_name(&self) -> &str {
        self.primary.model_name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        match self.primary.chat(request).await {
            Ok(response) => Ok(response),
            Err(primary) => {
                tracing::warn!(
                    primary = self.primary.model_name(),
                    backup = self.backup.model_name(),
                    error = %primary,
                    "primary model failed; using the backup"
                );
                self.backup
                    .chat(request)
                    .await
                    .map_err(|backup| LlmError::BothFailed {
                        primary: Box::new(primary),
                        backup: Box::new(backup),
                    })
            }
        }
    }
}
