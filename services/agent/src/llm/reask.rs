//! Ask for a JSON object, validate it, and re-ask up to N times telling the model what was wrong.

use serde_json::{Map, Value};

use super::cost::Totals;
use super::error::LlmError;
use super::json::extract_object;
use super::types::{ChatModel, ChatRequest, Message, Role};

/// A validated answer with everything spent getting it.
#[derive(Debug, Clone)]
pub struct Asked<T> {
    /// The validated value.
    pub value: T,
    /// The raw text of the accepted reply.
    pub text: String,
    /// Calls, tokens and cost of all attempts.
    pub totals: Totals,
    /// Attempts made (1 = accepted first time).
    pub attempts: u32,
}

/// Sends `request`; extracts the JSON object of the reply and passes it to `validate`. On an unparseable
/// or invalid reply, appends the reply and a correction naming the problem, and asks again, at most
/// `max_reasks` more times. Transport errors are returned at once (the model retries those itself).
pub async fn ask_json<T, E, F>(
    model: &dyn ChatModel,
    request: &ChatRequest,
    max_reasks: u32,
    mut validate: F,
) -> Result<Asked<T>, LlmError>
where
    F: FnMut(Map<String, Value>) -> Result<T, E>,
    E: std::fmt::Display,
{
    let mut request = request.clone();
    let mut totals = Totals::default();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let response = model.chat(&request).await?;
        totals.add_call(response.usage, response.cost);
        let problem = match extract_object(&response.text) {
            Ok(object) => match validate(object) {
                Ok(value) => {
                    return Ok(Asked {
                        value,
                        text: response.text,
                        totals,
                        attempts,
                    });
                }
                Err(problem) => problem.to_string(),
            },
            Err(e) => e.to_string(),
        };
        tracing::warn!(attempt = attempts, %problem, "model reply rejected");
        if attempts > max_reasks {
            return Err(LlmError::Unusable {
                attempts,
                last_problem: problem,
            });
        }
        request
            .messages
            .push(Message::text(Role::Assistant, response.text));
        request.messages.push(Message::text(
            Role::User,
            format!(
                "Your previous reply could not be used: {problem}. Reply again with only one JSON \
                 object that follows the required response format."
            ),
        ));
    }
}
