//! The LLM client against the scripted OpenAI-compatible server: wire format (vision parts, JSON mode,
//! auth headers, Azure routing), retries honouring Retry-After, the backup model, re-asking, and cost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use ufo_agent::config::ApiKey;
use ufo_agent::llm::openai::{Flavor, OpenAiCompatible, OpenAiConfig};
use ufo_agent::llm::retry::RetryPolicy;
use ufo_agent::llm::{
    ChatModel, ChatRequest, ContentPart, Fallback, ImageData, LlmError, Message, PriceTable,
    ResponseFormat, Role, ask_json,
};
use ufo_agent::testing::ScriptedLlm;

fn request_with_image() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::text(Role::System, "sys"),
            Message {
                role: Role::User,
                parts: vec![
                    ContentPart::Text("look".into()),
                    ContentPart::Image(ImageData::png(vec![1u8, 2, 3])),
                ],
            },
        ],
        temperature: Some(0.0),
        max_tokens: None,
        response_format: ResponseFormat::JsonObject,
    }
}

#[tokio::test]
async fn sends_vision_parts_json_mode_and_bearer_key_and_prices_the_call() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.set_usage(1000, 500);
    llm.push_text("{\"ok\": true}");
    let mut config = OpenAiConfig::openai(llm.base_url(), "gpt-test");
    config.api_key = Some(ApiKey::new("sk-secret"));
    assert!(!format!("{config:?}").contains("sk-secret"));
    let prices = Arc::new(PriceTable::parse("gpt-test=2/8").unwrap());
    let model = OpenAiCompatible::new(config, prices).unwrap();
    let response = model.chat(&request_with_image()).await.unwrap();
    assert_eq!(response.text, "{\"ok\": true}");
    assert_eq!(response.usage.input_tokens, 1000);
    assert!((response.cost - (1000.0 * 2.0 + 500.0 * 8.0) / 1e6).abs() < 1e-12);
    let req = &llm.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-secret"));
    assert_eq!(req.body["model"], "gpt-test");
    assert_eq!(req.body["response_format"], json!({"type": "json_object"}));
    assert_eq!(req.body["messages"][0]["content"], "sys");
    assert_eq!(req.image_urls(), ["data:image/png;base64,AQID"]);
}

#[tokio::test]
async fn azure_uses_deployment_api_version_and_api_key_header() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_text("hi");
    let mut config = OpenAiConfig::openai(llm.root_url(), "gpt-4o");
    config.flavor = Flavor::Azure {
        deployment: "dep1".into(),
        api_version: "2024-10-21".into(),
    };
    config.api_key = Some(ApiKey::new("azure-key"));
    let model = OpenAiCompatible::new(config, Arc::new(PriceTable::new())).unwrap();
    model.chat(&request_with_image()).await.unwrap();
    let req = &llm.requests()[0];
    assert_eq!(req.path, "/openai/deployments/dep1/chat/completions");
    assert_eq!(req.query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(req.header("api-key"), Some("azure-key"));
    assert_eq!(req.header("authorization"), None);
    assert!(req.body.get("model").is_none());
}

#[tokio::test]
async fn retries_429_and_5xx_honouring_retry_after_but_not_4xx() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_status(429, Some("0"));
    llm.push_status(503, Some("0"));
    llm.push_text("done");
    let mut config = OpenAiConfig::openai(llm.base_url(), "m");
    // A backoff this long would blow the timeout below: only Retry-After: 0 makes it finish.
    config.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_secs(30),
        max_delay: Duration::from_secs(60),
    };
    let model = OpenAiCompatible::new(config, Arc::new(PriceTable::new())).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), model.chat(&request_with_image()))
        .await
        .unwrap();
    assert_eq!(response.unwrap().text, "done");
    assert_eq!(llm.requests().len(), 3);

    llm.push_status(400, None);
    let err = model.chat(&request_with_image()).await.unwrap_err();
    assert!(matches!(err, LlmError::Status { status: 400, .. }), "{err}");
    assert_eq!(llm.requests().len(), 4);
}

#[tokio::test]
async fn backup_model_answers_after_the_primary_fails() {
    let primary = ScriptedLlm::start().await.unwrap();
    let backup = ScriptedLlm::start().await.unwrap();
    for _ in 0..3 {
        primary.push_status(500, None);
    }
    backup.push_text("from backup");
    let model = Fallback::new(
        common::model(&primary, "primary"),
        common::model(&backup, "backup"),
    );
    let response = model.chat(&request_with_image()).await.unwrap();
    assert_eq!(response.text, "from backup");
    assert_eq!(
        primary.requests().len(),
        3,
        "primary retried before falling back"
    );
    assert_eq!(backup.requests()[0].body["model"], "backup");

    let err = model.chat(&request_with_image()).await.unwrap_err();
    assert!(matches!(err, LlmError::BothFailed { .. }), "{err}");
}

#[tokio::test]
async fn re_asks_telling_the_model_what_was_wrong_and_sums_usage() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_text("Sure! I will click the button.");
    llm.push_text("```json\n{\"status\": \"CONTINUE\"}\n```");
    llm.push_text("Here: {\"status\": \"CONTINUE\", \"thought\": \"ok\"} -- done");
    let model = common::model(&llm, "m");
    let validate = |m: serde_json::Map<String, serde_json::Value>| {
        m.get("thought")
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or("the field 'thought' is missing".to_owned())
    };
    let asked = ask_json(model.as_ref(), &request_with_image(), 2, validate)
        .await
        .unwrap();
    assert_eq!(asked.value, "ok");
    assert_eq!(asked.attempts, 3);
    assert_eq!(asked.totals.calls, 3);
    assert_eq!(asked.totals.usage.input_tokens, 300);
    let requests = llm.requests();
    assert!(
        requests[1].role_text("user").contains("no JSON object"),
        "{}",
        requests[1].role_text("user")
    );
    assert!(
        requests[2]
            .role_text("user")
            .contains("'thought' is missing")
    );
    assert!(requests[2].role_text("assistant").contains("```json"));

    llm.push_text("nope");
    llm.push_text("still nope");
    let err = ask_json(model.as_ref(), &request_with_image(), 1, validate)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Unusable { attempts: 2, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn scripted_server_fails_loudly_when_the_script_is_exhausted() {
    let llm = ScriptedLlm::start().await.unwrap();
    let mut config = OpenAiConfig::openai(llm.base_url(), "m");
    config.retry = RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    };
    let model = OpenAiCompatible::new(config, Arc::new(PriceTable::new())).unwrap();
    let err = model.chat(&request_with_image()).await.unwrap_err();
    assert!(err.to_string().contains("script exhausted"), "{err}");
}

#[tokio::test]
async fn json_schema_is_sent_where_supported_and_degrades_to_json_object() {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push_text("{}");
    llm.push_text("{}");
    let mut request = request_with_image();
    request.response_format = ufo_agent::agents::response::host_response_format();
    let mut config = OpenAiConfig::openai(llm.base_url(), "m");
    config.json_schema = true;
    let with_schema = OpenAiCompatible::new(config.clone(), Arc::new(PriceTable::new())).unwrap();
    with_schema.chat(&request).await.unwrap();
    config.json_schema = false;
    let without = OpenAiCompatible::new(config, Arc::new(PriceTable::new())).unwrap();
    without.chat(&request).await.unwrap();
    let reqs = llm.requests();
    assert_eq!(reqs[0].body["response_format"]["type"], "json_schema");
    assert_eq!(
        reqs[0].body["response_format"]["json_schema"]["name"],
        "host_agent_response"
    );
    assert_eq!(
        reqs[0].body["response_format"]["json_schema"]["schema"]["required"],
        json!(["observation", "thought", "status"])
    );
    assert_eq!(
        reqs[1].body["response_format"],
        json!({"type": "json_object"})
    );
}
