//! Provider-neutral chat types and the [`ChatModel`] trait.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::error::LlmError;

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions.
    System,
    /// The caller (prompts, re-ask corrections).
    User,
    /// The model's earlier reply (kept when re-asking).
    Assistant,
}

/// An image as raw encoded bytes; it becomes a data URL only at the wire boundary.
#[derive(Clone, PartialEq, Eq)]
pub struct ImageData {
    /// MIME type, e.g. `image/png`.
    pub mime: String,
    /// The encoded image.
    pub bytes: Bytes,
}

impl std::fmt::Debug for ImageData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never dump image bytes into logs.
        f.debug_struct("ImageData")
            .field("mime", &self.mime)
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl ImageData {
    /// A PNG image.
    pub fn png(bytes: impl Into<Bytes>) -> Self {
        Self {
            mime: "image/png".into(),
            bytes: bytes.into(),
        }
    }
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    /// Plain text.
    Text(String),
    /// An image (vision models).
    Image(ImageData),
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The speaker.
    pub role: Role,
    /// Text and image parts, in order.
    pub parts: Vec<ContentPart>,
}

impl Message {
    /// A text-only message.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            parts: vec![ContentPart::Text(text.into())],
        }
    }

    /// All text parts joined by newlines.
    pub fn joined_text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text(t) => Some(t.as_str()),
                ContentPart::Image(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Number of image parts.
    pub fn image_count(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| matches!(p, ContentPart::Image(_)))
            .count()
    }
}

/// The output format asked of the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ResponseFormat {
    /// Free text.
    #[default]
    Text,
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON object matching a schema, where the endpoint supports it.
    JsonSchema {
        /// Schema name.
        name: String,
        /// The JSON schema.
        schema: serde_json::Value,
    },
}

/// A chat completion request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Sampling temperature; `None` means the provider default.
    pub temperature: Option<f64>,
    /// Output token cap; `None` means the provider default.
    pub max_tokens: Option<u32>,
    /// Output format.
    pub response_format: ResponseFormat,
}

/// Tokens consumed by one or more calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// A model's reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The reply text.
    pub text: String,
    /// The model that answered (as the provider reports it, else the configured name).
    pub model: String,
    /// Tokens used by this call.
    pub usage: Usage,
    /// Cost of this call in US dollars, from the configured price table (0 when the model is unpriced).
    pub cost: f64,
}

/// A chat model, whatever the provider.
///
/// Contract: one call is one logical completion; implementations retry transient failures internally
/// (429/5xx/timeouts) and return the last error when they give up. Never logs API keys or image bytes.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The configured model name (used for pricing and spans).
    fn model_name(&self) -> &str;

    /// Runs one chat completion.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;
}

#[async_trait]
impl<T: ChatModel + ?Sized> ChatModel for Arc<T> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).chat(request).await
    }
}
