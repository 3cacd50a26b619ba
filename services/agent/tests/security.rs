//! Issue 16 ("safe to point at a real machine") over the real agent, session service and sockets:
//! executors by name only (no credential to a caller-named address, metadata addresses never), unpriced
//! models refused at submission.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_proto::v1;

/// A stand-in executor that records the `authorization` header of every call and fails every command.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Option<String>>>>);

#[tonic::async_trait]
impl ufo_testkit::executor::TestExecutor for Recorder {
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
}

async fn serve_recorder(recorder: Recorder) -> (u16, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ufo_testkit::executor::server(recorder))
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
    let res = ufo_testkit::http_client()
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
        assert_eq!(status, 400, "{executor}: {body}");
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
    assert_eq!(status, 400, "{body}");
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

/// A REST call as `key`: status and JSON body (Null when not JSON).
async fn call_as(
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = ufo_testkit::http_client();
    let mut req = client
        .request(method.parse().unwrap(), format!("{base}{path}"))
        .bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().await.unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

fn as_key<T>(key: &str, message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut()
        .insert("authorization", format!("bearer {key}").parse().unwrap());
    req
}

async fn listed(base: &str, key: &str) -> Vec<String> {
    let (status, page) = call_as(base, key, "GET", "/v1/tasks?page_size=100", None).await;
    assert_eq!(status, 200, "{page}");
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_user_sees_and_acts_on_only_its_own_tasks_an_admin_on_all() {
    use ufo_proto::v1::agent_service_client::AgentServiceClient;
    let session = Session::start().await;
    let config = agent_config(
        &session.url,
        &[
            "--api-keys",
            "alice:ka,bob:kb,root:kr",
            "--api-admins",
            "root",
        ],
    );
    let agent = Agent::start(config, None).await;
    let base = agent.http.as_str();
    let (status, a) = submit_as(base, "ka", json!({"request": "alice's task"})).await;
    assert_eq!(status, 202, "{a}");
    let a = a["id"].as_str().unwrap().to_owned();
    let (status, b) = submit_as(base, "kb", json!({"request": "bob's task"})).await;
    assert_eq!(status, 202, "{b}");
    let b = b["id"].as_str().unwrap().to_owned();

    // Every REST route on alice's task, as bob: 404, with the message a missing task gets.
    let missing = uuid::Uuid::now_v7().to_string();
    for id in [&a, &missing] {
        for (method, path, body) in [
            ("GET", format!("/v1/tasks/{id}"), None),
            ("GET", format!("/v1/tasks/{id}/steps"), None),
            ("GET", format!("/v1/tasks/{id}/steps/1/screenshot"), None),
            (
                "POST",
                format!("/v1/tasks/{id}/answers"),
                Some(json!({"answers": ["x"], "question_ids": ["q-0"]})),
            ),
            (
                "POST",
                format!("/v1/tasks/{id}/confirmation"),
                Some(json!({"approve": true, "action_id": "held-1"})),
            ),
            (
                "POST",
                format!("/v1/tasks/{id}/requests"),
                Some(json!({"request": "more"})),
            ),
            ("POST", format!("/v1/tasks/{id}/cancel"), Some(json!({}))),
        ] {
            let (status, error) = call_as(base, "kb", method, &path, body).await;
            assert_eq!(status, 404, "{method} {path}: {error}");
            assert_eq!(error["code"], "not_found");
            assert_eq!(
                error["message"],
                format!("session {id} not found"),
                "another's task reads like a missing one"
            );
        }
    }
    assert_eq!(listed(base, "ka").await, vec![a.clone()]);
    assert_eq!(listed(base, "kb").await, vec![b.clone()]);
    assert_eq!(listed(base, "kr").await, vec![b.clone(), a.clone()]);
    let (status, seen) = call_as(base, "kr", "GET", &format!("/v1/tasks/{a}"), None).await;
    assert_eq!(status, 200, "{seen}");
    let (status, _) = call_as(base, "ka", "GET", &format!("/v1/tasks/{a}"), None).await;
    assert_eq!(status, 200);
    // Every gRPC RPC on alice's task, as bob.
    let mut grpc = AgentServiceClient::connect(agent.grpc.clone())
        .await
        .unwrap();
    let not_found = |r: Result<tonic::Response<v1::Task>, Status>, what: &str| {
        let code = r.err().map(|s| s.code());
        assert_eq!(code, Some(tonic::Code::NotFound), "{what}");
    };
    not_found(
        grpc.get_task(as_key("kb", v1::GetTaskRequest { task_id: a.clone() }))
            .await,
        "GetTask",
    );
    not_found(
        grpc.answer(as_key(
            "kb",
            v1::AnswerRequest {
                task_id: a.clone(),
                answers: vec!["x".into()],
                question_ids: vec!["q-0".into()],
            },
        ))
        .await,
        "Answer",
    );
    not_found(
        grpc.confirm(as_key(
            "kb",
            v1::ConfirmRequest {
                task_id: a.clone(),
                approve: true,
                action_id: "held-1".into(),
                ..Default::default()
            },
        ))
        .await,
        "Confirm",
    );
    not_found(
        grpc.add_request(as_key(
            "kb",
            v1::AddRequestRequest {
                task_id: a.clone(),
                request: "more".into(),
            },
        ))
        .await,
        "AddRequest",
    );
    not_found(
        grpc.cancel(as_key(
            "kb",
            v1::CancelRequest {
                task_id: a.clone(),
                reason: String::new(),
            },
        ))
        .await,
        "Cancel",
    );
    let stream = grpc
        .stream_steps(as_key(
            "kb",
            v1::StreamStepsRequest {
                task_id: a.clone(),
                from_seq: 1,
            },
        ))
        .await;
    assert_eq!(stream.err().map(|s| s.code()), Some(tonic::Code::NotFound));
    let t = grpc
        .get_task(as_key("kr", v1::GetTaskRequest { task_id: b.clone() }))
        .await
        .unwrap();
    assert_eq!(t.into_inner().id, b);
    // Bob's cancel of his own task works; alice's is untouched.
    let (status, _) = call_as(base, "kb", "POST", &format!("/v1/tasks/{b}/cancel"), None).await;
    assert_eq!(status, 202);
    let (_, task) = call_as(base, "ka", "GET", &format!("/v1/tasks/{a}"), None).await;
    assert_eq!(task["status"], "queued");
    // The owner cancels hers (so its stream ends); the owner and the admin stream it to the end.
    let (status, _) = call_as(base, "ka", "POST", &format!("/v1/tasks/{a}/cancel"), None).await;
    assert_eq!(status, 202);
    for key in ["ka", "kr"] {
        let mut stream = grpc
            .stream_steps(as_key(
                key,
                v1::StreamStepsRequest {
                    task_id: a.clone(),
                    from_seq: 1,
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let mut events = Vec::new();
        while let Some(event) = stream.message().await.unwrap() {
            events.push(event);
        }
        assert!(events.len() >= 2, "{key}: {events:?}");
        assert!(events.iter().all(|e| e.session_id == a), "{key}");
    }
    drop(grpc);
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn cancel_refuses_a_body_that_is_not_an_object() {
    let session = Session::start().await;
    let agent = Agent::start(agent_config(&session.url, &[]), None).await;
    let (_, task) = submit_as(&agent.http, KEY, json!({"request": "x"})).await;
    let id = task["id"].as_str().unwrap();
    for body in [json!([]), json!(null), json!("stop"), json!(3)] {
        let (status, error) = call_as(
            &agent.http,
            KEY,
            "POST",
            &format!("/v1/tasks/{id}/cancel"),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["code"], "invalid_argument");
    }
    let (status, _) = call_as(&agent.http, KEY, "GET", "/v1/tasks", None).await;
    assert_eq!(status, 200);
    // The scheme is case-insensitive (RFC 7235).
    let res = ufo_testkit::http_client()
        .get(format!("{}/v1/tasks", agent.http))
        .header("authorization", format!("BEARER {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    agent.stop().await;
    session.stop().await;
}
