//! The client against a small HTTP server standing in for the agent service: what it sends (path, bearer
//! token, body), how the API's `{code, message}` refusals, other error pages, silence past the call timeout
//! and an empty port come back as [`ClientError`]s.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use ufo_client::{AgentClient, ClientError, NewTask, Timeouts};

async fn serve(router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

fn stand_in() -> Router {
    Router::new()
        .route(
            "/v1/tasks",
            post(|headers: HeaderMap, Json(body): Json<Value>| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                (
                    StatusCode::ACCEPTED,
                    Json(json!({"id": "t-1", "status": "queued", "sent": body, "auth": auth})),
                )
            }),
        )
        .route(
            "/v1/tasks/{id}",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    Json(json!({"code": "not_found", "message": "session t-9 not found"})),
                )
            }),
        )
        .route(
            "/v1/tasks/{id}/steps",
            get(|| async { (StatusCode::BAD_GATEWAY, "<html>bad gateway</html>") }),
        )
        .route(
            "/v1/tasks/{id}/cancel",
            post(|| async {
                std::future::pending::<()>().await;
                StatusCode::OK
            }),
        )
}

#[tokio::test]
async fn a_submitted_task_carries_its_body_and_the_token() {
    let url = serve(stand_in()).await;
    let client = AgentClient::new(&url, Some("k-1".into()), Timeouts::default()).unwrap();
    let task = NewTask {
        max_steps: Some(3),
        ..NewTask::request("open mousepad")
    };
    let created = client.submit(&task).await.unwrap();
    assert_eq!(created["id"], "t-1");
    assert_eq!(created["auth"], "Bearer k-1");
    assert_eq!(
        created["sent"],
        json!({"request": "open mousepad", "limits": {"max_steps": 3}})
    );
}

#[tokio::test]
async fn the_apis_error_body_is_surfaced() {
    let url = serve(stand_in()).await;
    let client = AgentClient::new(&url, None, Timeouts::default()).unwrap();
    match client.get("t-9").await {
        Err(ClientError::Api {
            status,
            code,
            message,
        }) => {
            assert_eq!(
                (status, code.as_str(), message.as_str()),
                (404, "not_found", "session t-9 not found")
            );
        }
        other => panic!("expected the API's error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_error_page_that_is_not_the_apis_is_told_apart() {
    let url = serve(stand_in()).await;
    let client = AgentClient::new(&url, None, Timeouts::default()).unwrap();
    let err = client.steps("t-1", None, None).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::NotTheApi { status: 502, url: u } if *u == url),
        "{err:?}"
    );
    assert_eq!(err.http_status(), Some(502));
}

#[tokio::test]
async fn a_call_past_its_timeout_fails_as_timed_out() {
    let url = serve(stand_in()).await;
    let timeouts = Timeouts {
        call: Some(Duration::from_millis(200)),
        ..Timeouts::default()
    };
    let client = AgentClient::new(&url, None, timeouts).unwrap();
    let err = client.cancel("t-1", None).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Unreachable { cause, .. } if cause == "timed out"),
        "{err:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_unreachable() {
    // Bind then drop a listener: the port is free and nothing answers on it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = AgentClient::new(&url, None, Timeouts::default()).unwrap();
    let err = client.get("t-1").await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Unreachable { url: u, .. } if *u == url),
        "{err:?}"
    );
    let err = client.events_until_end("t-1", 1).await.unwrap_err();
    assert!(matches!(err, ClientError::NoGrpcAddress), "{err:?}");
    let err = client
        .clone()
        .with_grpc(url.clone())
        .events_until_end("t-1", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::GrpcUnreachable { url: u, .. } if *u == url),
        "{err:?}"
    );
}
