//! The LLM client: a provider-neutral [`ChatModel`] trait and what sits around it.
//!
//! Layout:
//! - [`types`]: messages with text and image parts, requests, responses, token usage.
//! - [`error`]: [`LlmError`], keeping the provider's status, body and `Retry-After`.
//! - [`secret`]: [`ApiKey`], whose `Debug` is redacted and which is never logged.
//! - [`retry`]: exponential backoff honouring `Retry-After` on 429/5xx.
//! - [`openai`]: OpenAI-compatible chat completions (any base URL) and Azure OpenAI; wire types stay there.
//! - [`fallback`]: a backup model used after the primary fails.
//! - [`json`]: JSON extraction tolerant of code fences and prose.
//! - [`reask`]: ask for JSON, validate, and re-ask telling the model what was wrong.
//! - [`check`]: the model endpoint checked at start (`ufo-agent --check-model`).
//! - [`cost`]: per-model price table and usage/cost totals per step, round and session.
//!
//! Seeds 000/001 "LLM Interaction": the reference retries JSON parsing `json_parsing_retry` times with the
//! backup engine; here that is [`reask::ask_json`] over a [`fallback::Fallback`] model.

pub mod check;
pub mod config;
pub mod cost;
pub mod error;
pub mod fallback;
pub mod json;
pub mod openai;
pub mod reask;
pub mod retry;
pub mod types;

pub use cost::{PriceTable, Totals};
pub use error::LlmError;
pub use fallback::Fallback;
pub use reask::{Asked, ask_json};
pub use types::{
    ChatModel, ChatRequest, ChatResponse, ContentPart, ImageData, Message, ResponseFormat, Role,
    Usage,
};
