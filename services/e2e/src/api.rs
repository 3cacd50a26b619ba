//! The agent service as a user reaches it: `POST /v1/tasks` over REST with an API key, and the task's
//! events over gRPC `AgentService.StreamSteps` until the stream ends with the task.

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use serde_json::Value;
use tonic::metadata::MetadataValue;
use ufo_proto::v1::agent_service_client::AgentServiceClient;
use ufo_proto::v1::{Event, StreamStepsRequest};

/// Submits `body` (a `POST /v1/tasks` JSON body) and returns the task JSON (202).
pub async fn submit_task(
    http: &reqwest::Client,
    rest_url: &str,
    api_key: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    let response = http
        .post(format!("{rest_url}/v1/tasks"))
        .bearer_auth(api_key)
        .json(body)
        .send()
        .await
        .context("POST /v1/tasks")?;
    let status = response.status();
    let task: Value = response.json().await.context("task JSON")?;
    if status != reqwest::StatusCode::ACCEPTED {
        bail!("POST /v1/tasks answered {status}: {task}");
    }
    Ok(task)
}

/// `GET /v1/tasks/{id}{suffix}` as JSON.
pub async fn get_json(
    http: &reqwest::Client,
    rest_url: &str,
    api_key: &str,
    path: &str,
) -> anyhow::Result<Value> {
    let response = http
        .get(format!("{rest_url}{path}"))
        .bearer_auth(api_key)
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = response.status();
    let value: Value = response.json().await.context("JSON body")?;
    if !status.is_success() {
        bail!("GET {path} answered {status}: {value}");
    }
    Ok(value)
}

/// Follows `StreamSteps(task_id, from_seq)` until the server ends the stream (after the task ends) and
/// returns every event received, in arrival order.
pub async fn stream_steps(
    grpc_url: &str,
    api_key: &str,
    task_id: &str,
    from_seq: u64,
) -> anyhow::Result<Vec<Event>> {
    let mut client = AgentServiceClient::connect(grpc_url.to_owned())
        .await
        .context("connect to AgentService")?;
    let mut request = tonic::Request::new(StreamStepsRequest {
        task_id: task_id.to_owned(),
        from_seq,
    });
    let bearer: MetadataValue<_> = format!("Bearer {api_key}").parse()?;
    request.metadata_mut().insert("authorization", bearer);
    let mut stream = client.stream_steps(request).await?.into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.context("StreamSteps")?);
    }
    Ok(events)
}
