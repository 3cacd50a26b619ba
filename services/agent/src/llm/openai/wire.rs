//! OpenAI chat-completions wire format. Private to the provider module.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::types::{ChatRequest, ContentPart, Message, ResponseFormat, Role};

#[derive(Serialize)]
pub(super) struct WireRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    pub messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
}

#[derive(Serialize)]
pub(super) struct WireMessage {
    role: &'static str,
    content: WireContent,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart {
    Text { text: String },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Serialize)]
struct WireImageUrl {
    url: String,
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn message(m: &Message) -> WireMessage {
    // A text-only message is sent as a plain string: every OpenAI-compatible server accepts that.
    let content = match m.parts.as_slice() {
        [ContentPart::Text(t)] => WireContent::Text(t.clone()),
        parts => WireContent::Parts(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text(text) => WirePart::Text { text: text.clone() },
                    ContentPart::Image(img) => WirePart::ImageUrl {
                        image_url: WireImageUrl {
                            url: format!(
                                "data:{};base64,{}",
                                img.mime,
                                base64::engine::general_purpose::STANDARD.encode(&img.bytes)
                            ),
                        },
                    },
                })
                .collect(),
        ),
    };
    WireMessage {
        role: role(m.role),
        content,
    }
}

/// Builds the wire request. `json_schema` says whether the endpoint accepts `json_schema`; when it does
/// not, a schema request degrades to `json_object`.
pub(super) fn request<'a>(
    model: Option<&'a str>,
    req: &ChatRequest,
    json_object: bool,
    json_schema: bool,
) -> WireRequest<'a> {
    let response_format = match &req.response_format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => {
            json_object.then(|| serde_json::json!({"type": "json_object"}))
        }
        ResponseFormat::JsonSchema { name, schema } => {
            if json_schema {
                Some(serde_json::json!({
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema}
                }))
            } else {
                json_object.then(|| serde_json::json!({"type": "json_object"}))
            }
        }
    };
    WireRequest {
        model,
        messages: req.messages.iter().map(message).collect(),
        temperature: req.temperature,
        max_tokens: req.max_tokens,
        response_format,
    }
}

#[derive(Deserialize)]
pub(super) struct WireResponse {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub(super) struct WireChoice {
    pub message: WireReply,
}

#[derive(Deserialize)]
pub(super) struct WireReply {
    #[serde(default)]
    pub content: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}
