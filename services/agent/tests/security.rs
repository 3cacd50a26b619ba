//! Issue 16 ("safe to point at a real machine") over the real agent, session service and sockets:
//! executors by name only (no credential to a caller-named address, metadata addresses never), unpriced
//! models refused at submission.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use std::sync::{Arc, Mutex};

use api_support::{Agent, KEY, Session, agent_config, eventually};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_proto::v1;
use ufo_proto::v1::executor_server::{Executor, ExecutorServer};

/// A stand-in executor that records the `authorization` header of every call and fails every command.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Option<String>>>>);

#[tonic::async_trait]
impl Executor for Recorder {
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status> {
        let auth = request
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("<binary>").to_owned());
        self.0.lock().unwrap().push(auth);
        let results = request
            .into_inner()
            .commands
            .into_iter()
            .map(|c| v1::Result {
                status: v1::ResultStatus::Failure as i32,
                error: "stand-in".into(),
                call_id: c.call_id,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(v1::ExecuteResponse { results }))
    }
    async fn list_tools(
        &self,
        _r: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        Ok(Response::new(v1::ListToolsResponse::default()))
    }
    async fn get_capabilities(
        &self,
        _r: Request<v1::GetCapabilitiesRequest>,
    ) -> Result<Response<v1::Capabilities>, Status> {
        Ok(Response::new(v1::Capabilities::default()))
    }
}

async fn serve_recorder(recorder: Recorder) -> (u16, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ExecutorServer::new(recorder))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                token.cancelled_owned(),
            )
            .await
            .unwrap();
    });
    (port, stop)
}

/// `POST /v1/tasks` with `body` as `key`; returns status and JSON body.
async fn submit_as(base: &str, key: &str, body: Value) -> (u16, Value) {
    let res = reqwest::Client::new()
        .post(format!("{base}/v1/tasks"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn caller_named_addresses_are_refused_and_metadata_addresses_always() {
    let session = Session::start().await;
    let config = agent_config(
        &session.url,
        &[
            "--executors",
            "lab=http://10.0.0.5:50051",
            "--executor-address-hosts",
            "127.0.0.2,169.254.169.254,metadata.google.internal",
        ],
    );
    let agent = Agent::start(config, None).await;
    for executor in [
        "http://127.0.0.1:50051",
        "http://10.0.0.5:50051",
        "https://evil.example:443",
        "http://169.254.169.254:80",
        "http://169.254.169.254",
        "http://metadata.google.internal",
        "http://[fe80::1]:80",
        "http://100.100.100.200",
        "http://2852039166",
        "http://0xa9.0xfe.0xa9.0xfe",
        "lab2",
    ] {
        let (status, body) = submit_as(
            &agent.http,
            KEY,
            json!({"request": "x", "executor": executor}),
        )
        .await;
        assert_eq!(status, 422, "{executor}: {body}");
        assert_eq!(body["code"], "invalid_argument", "{executor}");
        assert!(body["message"].as_str().unwrap().contains("executor"));
    }
    for executor in ["lab", "http://127.0.0.2:7"] {
        let (status, body) = submit_as(
            &agent.http,
            KEY,
            json!({"request": "x", "executor": executor}),
        )
        .await;
        assert_eq!(status, 202, "{executor}: {body}");
    }
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn an_allowed_address_gets_no_token_a_registered_name_gets_its_own() {
    let session = Session::start().await;
    let named = Recorder::default();
    let caller_named = Recorder::default();
    let (named_port, _stop1) = serve_recorder(named.clone()).await;
    let (caller_port, _stop2) = serve_recorder(caller_named.clone()).await;
    let registered = format!("desk=http://127.0.0.1:{named_port}");
    let config = agent_config(
        &session.url,
        &[
            "--executors",
            &registered,
            "--default-executor",
            "desk",
            "--executor-token",
            "operator-secret",
            "--executor-address-hosts",
            "127.0.0.1",
            "--runner-slots",
            "2",
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
        ],
    );
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::from_config(&config).unwrap());
    let agent = Agent::start(config, Some(driver)).await;
    let (status, body) = submit_as(
        &agent.http,
        KEY,
        json!({"request": "look", "executor": format!("http://127.0.0.1:{caller_port}")}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = submit_as(&agent.http, KEY, json!({"request": "look"})).await;
    assert_eq!(status, 202, "{body}");
    let seen = |r: &Recorder| r.0.lock().unwrap().clone();
    let caller_calls = eventually(30, "the caller-named executor is called", || {
        let calls = seen(&caller_named);
        async move { (!calls.is_empty()).then_some(calls) }
    })
    .await;
    assert!(
        caller_calls.iter().all(Option::is_none),
        "a caller-named executor received credentials: {caller_calls:?}"
    );
    let named_calls = eventually(30, "the registered executor is called", || {
        let calls = seen(&named);
        async move { (!calls.is_empty()).then_some(calls) }
    })
    .await;
    assert!(
        named_calls
            .iter()
            .all(|h| h.as_deref() == Some("Bearer operator-secret")),
        "{named_calls:?}"
    );
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn an_unpriced_model_is_refused_at_submission_unless_a_default_price_is_set() {
    let session = Session::start().await;
    let agent = Agent::start(agent_config(&session.url, &[]), None).await;
    let (status, body) = submit_as(
        &agent.http,
        KEY,
        json!({"request": "x", "model": {"app_model": "free-lunch-1"}, "limits": {"max_cost": 0.5}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["message"].as_str().unwrap().contains("free-lunch-1"));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("model.app_model")
    );
    agent.stop().await;
    let agent = Agent::start(
        agent_config(&session.url, &["--llm-default-price", "1/2"]),
        None,
    )
    .await;
    let (status, body) = submit_as(
        &agent.http,
        KEY,
        json!({"request": "x", "model": {"app_model": "free-lunch-1"}, "limits": {"max_cost": 0.5}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    agent.stop().await;
    session.stop().await;
}
