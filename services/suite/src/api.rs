//! The agent service as the suite reaches it, the way a user does: REST with the API key to submit a task,
//! read it, its steps and screenshots, and cancel it; gRPC `StreamSteps` to follow it until it ends.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;
use tonic::metadata::MetadataValue;
use ufo_proto::v1::StreamStepsRequest;
use ufo_proto::v1::agent_service_client::AgentServiceClient;

/// A call to the agent that did not work.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub String);

fn err(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError(format!("{what}: {e}"))
}

/// The agent's APIs with a key.
#[derive(Debug, Clone)]
pub struct Agent {
    /// REST base URL.
    pub rest: String,
    /// gRPC URL.
    pub grpc: String,
    /// API key.
    pub key: String,
    http: reqwest::Client,
}

impl Agent {
    /// A client for the agent at these URLs.
    pub fn new(rest: String, grpc: String, key: String) -> Self {
        ufo_common::tls::install_crypto_provider();
        Self {
            rest,
            grpc,
            key,
            http: reqwest::Client::new(),
        }
    }

    async fn json(&self, response: reqwest::Response, what: &str) -> Result<Value, ApiError> {
        let status = response.status();
        let body = response.text().await.map_err(|e| err(what, e))?;
        if !status.is_success() {
            return Err(ApiError(format!("{what} answered {status}: {body}")));
        }
        serde_json::from_str(&body).map_err(|e| err(what, e))
    }

    /// `POST /v1/tasks`; returns the task id.
    pub async fn submit(&self, body: &Value) -> Result<String, ApiError> {
        let what = "POST /v1/tasks";
        let response = self
            .http
            .post(format!("{}/v1/tasks", self.rest))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .map_err(|e| err(what, e))?;
        let task = self.json(response, what).await?;
        task["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ApiError(format!("{what} returned no id: {task}")))
    }

    /// `GET {path}` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        let what = format!("GET {path}");
        let response = self
            .http
            .get(format!("{}{path}", self.rest))
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| err(&what, e))?;
        self.json(response, &what).await
    }

    /// Every step of a task, in order.
    pub async fn steps(&self, id: &str) -> Result<Vec<Value>, ApiError> {
        let mut steps = Vec::new();
        loop {
            let page = self
                .get(&format!(
                    "/v1/tasks/{id}/steps?from={}&limit=100",
                    steps.len() + 1
                ))
                .await?;
            let got: Vec<Value> = page["steps"].as_array().cloned().unwrap_or_default();
            if got.is_empty() {
                return Ok(steps);
            }
            steps.extend(got);
        }
    }

    /// A step's screenshot of `kind` (`annotated`, `clean`, `desktop`).
    pub async fn screenshot(&self, id: &str, step: u64, kind: &str) -> Result<Vec<u8>, ApiError> {
        let what = format!("GET screenshot {step} {kind}");
        let response = self
            .http
            .get(format!(
                "{}/v1/tasks/{id}/steps/{step}/screenshot?kind={kind}",
                self.rest
            ))
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| err(&what, e))?;
        if !response.status().is_success() {
            return Err(ApiError(format!("{what} answered {}", response.status())));
        }
        Ok(response.bytes().await.map_err(|e| err(&what, e))?.to_vec())
    }

    /// Asks the agent to cancel a task.
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<(), ApiError> {
        let what = "POST cancel";
        let response = self
            .http
            .post(format!("{}/v1/tasks/{id}/cancel", self.rest))
            .bearer_auth(&self.key)
            .json(&serde_json::json!({"reason": reason}))
            .send()
            .await
            .map_err(|e| err(what, e))?;
        self.json(response, what).await.map(|_| ())
    }

    /// Follows `StreamSteps` until the server ends it with the task; false when `timeout` passed first.
    pub async fn follow(&self, id: &str, timeout: Duration) -> Result<bool, ApiError> {
        let what = "StreamSteps";
        let follow = async {
            let mut client = AgentServiceClient::connect(self.grpc.clone())
                .await
                .map_err(|e| err(what, e))?;
            let mut request = tonic::Request::new(StreamStepsRequest {
                task_id: id.to_owned(),
                from_seq: 1,
            });
            let bearer: MetadataValue<_> = format!("Bearer {}", self.key)
                .parse()
                .map_err(|e| err(what, e))?;
            request.metadata_mut().insert("authorization", bearer);
            let mut stream = client
                .stream_steps(request)
                .await
                .map_err(|e| err(what, e))?
                .into_inner();
            while let Some(event) = stream.next().await {
                event.map_err(|e| err(what, e))?;
            }
            Ok::<_, ApiError>(())
        };
        match tokio::time::timeout(timeout, follow).await {
            Ok(r) => r.map(|()| true),
            Err(_) => Ok(false),
        }
    }
}
