//! The REST router in-process (`oneshot`) against the real session service on a fresh Postgres database:
//! every endpoint, and every error class with its status and code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::api_support::{KEY, Session, agent_config, driver::png, router};
use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt as _;
use ufo_agent::round::control::{HeldAction, Next, StepControl};
use ufo_agent::runner::hitl;
use ufo_proto::v1::{
    ArtifactKind, ClaimTaskRequest, PutBlobRequest, RecordStepRequest, SessionStatus,
    SetSessionStatusRequest, Step, StepBlob,
};

async fn send(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let (status, _, bytes) = send_raw(app, method, uri, body.map(|b| b.to_string()), true).await;
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

async fn send_raw(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    auth: bool,
) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let mut req = Request::builder().method(method).uri(uri);
    if auth {
        req = req.header(header::AUTHORIZATION, format!("Bearer {KEY}"));
    }
    let req = match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b)),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, headers, bytes.to_vec())
}

fn assert_error(result: &(StatusCode, Value), status: StatusCode, code: &str, mentions: &str) {
    assert_eq!(result.0, status, "{}", result.1);
    assert_eq!(result.1["code"], code, "{}", result.1);
    let message = result.1["message"].as_str().unwrap();
    assert!(
        message.contains(mentions),
        "{message:?} should mention {mentions:?}"
    );
}

async fn submit(app: &Router, request: &str) -> Value {
    let (status, body) = send(
        app,
        "POST",
        "/v1/tasks",
        Some(json!({ "request": request })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body
}

#[tokio::test]
async fn health_readiness_openapi_and_auth() {
    let session = Session::start().await;
    let app = router(&agent_config(&session.url, &[]));
    let (status, _, body) = send_raw(&app, "GET", "/healthz", None, false).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["status"],
        "ok"
    );
    let (status, _, _) = send_raw(&app, "GET", "/readyz", None, false).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = send_raw(&app, "GET", "/openapi.json", None, false).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/v1/tasks",
        "/v1/tasks/{id}",
        "/v1/tasks/{id}/steps",
        "/v1/tasks/{id}/steps/{n}/screenshot",
        "/v1/tasks/{id}/answers",
        "/v1/tasks/{id}/confirmation",
        "/v1/tasks/{id}/requests",
        "/v1/tasks/{id}/cancel",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert_eq!(
        doc["paths"]["/v1/tasks"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
            ["$ref"],
        "#/components/schemas/Error"
    );
    // The step cap is the smaller of --max-steps-cap (500) and the agents' --max-steps (30): a task
    // cannot ask for more steps than a round runs (issue 31).
    assert_eq!(
        doc["components"]["schemas"]["LimitsBody"]["properties"]["max_steps"]["maximum"],
        30
    );

    // Auth: missing and wrong keys are 401 {code: unauthenticated}.
    let (status, _, body) = send_raw(&app, "GET", "/v1/tasks", None, false).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_error(
        &(status, body),
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "missing bearer token",
    );
    let req = Request::get("/v1/tasks")
        .header(header::AUTHORIZATION, "Bearer wrong")
        .body(Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // Unknown endpoints are JSON 404s.
    assert_error(
        &send(&app, "GET", "/v2/nothing", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint",
    );

    // Readiness follows the session service.
    session.stop().await;
    let (status, _, body) = send_raw(&app, "GET", "/readyz", None, false).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_error(
        &(status, body),
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "session service",
    );
    let result = send(&app, "GET", "/v1/tasks", None).await;
    assert_error(
        &result,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "session service",
    );
}

#[tokio::test]
async fn submitting_validates_every_field() {
    let session = Session::start().await;
    let app = router(&agent_config(
        &session.url,
        &[
            "--executors",
            "lab=http://10.0.0.5:50051",
            "--max-body-bytes",
            "2048",
        ],
    ));
    let task = submit(&app, "open mousepad").await;
    assert_eq!(task["status"], "queued");
    let id = task["id"].as_str().unwrap();
    assert_eq!(task["links"]["self"], format!("/v1/tasks/{id}"));
    assert_eq!(task["rounds"][0]["request"], "open mousepad");

    let (status, headers, _) = send_raw(
        &app,
        "POST",
        "/v1/tasks",
        Some(json!({"request": "x", "executor": "lab", "limits": {"max_steps": 5}, "confirm_policy": "always"}).to_string()),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/v1/tasks/")
    );

    let cases = [
        (json!({"request": "   "}), "request must not be empty"),
        (
            json!({"request": "x", "limits": {"max_steps": 501}}),
            "limits.max_steps",
        ),
        // Above the agents' --max-steps (30): refused, naming the flags, instead of the round
        // stopping at 30 without a word.
        (
            json!({"request": "x", "limits": {"max_steps": 40}}),
            "limits.max_steps must be at most 30: the operator's cap (the smaller of \
             --max-steps-cap and the agents' --max-steps); got 40",
        ),
        (
            json!({"request": "x", "limits": {"max_cost": 1000.0}}),
            "limits.max_cost",
        ),
        (
            json!({"request": "x", "limits": {"timeout_seconds": 999999}}),
            "limits.timeout_seconds",
        ),
        (
            json!({"request": "x", "model": {"temperature": 3.0}}),
            "model.temperature",
        ),
        (json!({"request": "x", "bogus": 1}), "bogus"),
        (json!({"request": 5}), "request"),
        (
            json!({"request": "x", "confirm_policy": "sometimes"}),
            "confirm_policy",
        ),
    ];
    for (body, mentions) in cases {
        let result = send(&app, "POST", "/v1/tasks", Some(body.clone())).await;
        assert_error(
            &result,
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            mentions,
        );
    }
    // An executor outside the operator's registry is refused as a bad request (issue 16: 400).
    let result = send(
        &app,
        "POST",
        "/v1/tasks",
        Some(json!({"request": "x", "executor": "nowhere"})),
    )
    .await;
    assert_error(
        &result,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "executor",
    );
    let (status, _, body) =
        send_raw(&app, "POST", "/v1/tasks", Some("{not json".into()), true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "invalid_argument"
    );
    let req = Request::post("/v1/tasks")
        .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("hello"))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = json!({ "request": "x".repeat(4096) }).to_string();
    let (status, _, body) = send_raw(&app, "POST", "/v1/tasks", Some(big), true).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "payload_too_large"
    );
    session.stop().await;
}

#[tokio::test]
async fn listing_reading_and_paths() {
    let session = Session::start().await;
    let app = router(&agent_config(&session.url, &["--max-page-size", "2"]));
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            submit(&app, &format!("task {i}")).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let (status, page) = send(&app, "GET", "/v1/tasks?page_size=50", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        page["tasks"].as_array().unwrap().len(),
        2,
        "clamped to the cap"
    );
    let token = page["next_page_token"].as_str().unwrap();
    assert!(!token.is_empty());
    let (_, next) = send(
        &app,
        "GET",
        &format!("/v1/tasks?page_size=2&page_token={token}"),
        None,
    )
    .await;
    assert_eq!(next["tasks"].as_array().unwrap().len(), 1);
    let (_, queued) = send(&app, "GET", "/v1/tasks?status=queued", None).await;
    assert_eq!(queued["tasks"].as_array().unwrap().len(), 2);
    let (_, finished) = send(&app, "GET", "/v1/tasks?status=finished", None).await;
    assert!(finished["tasks"].as_array().unwrap().is_empty());
    assert_error(
        &send(&app, "GET", "/v1/tasks?status=sleeping", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "status",
    );
    assert_error(
        &send(&app, "GET", "/v1/tasks?page_size=-1", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "page_size",
    );

    let (status, task) = send(&app, "GET", &format!("/v1/tasks/{}", ids[0]), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task["request"], "task 0");
    assert_eq!(task["totals"]["steps"], 0);
    assert_error(
        &send(&app, "GET", "/v1/tasks/not-a-uuid", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "invalid path",
    );
    let unknown = uuid::Uuid::new_v4();
    assert_error(
        &send(&app, "GET", &format!("/v1/tasks/{unknown}"), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "",
    );
    assert_error(
        &send(&app, "GET", &format!("/v1/tasks/{unknown}/steps"), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "",
    );
    let (status, steps) = send(&app, "GET", &format!("/v1/tasks/{}/steps", ids[0]), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(steps["steps"].as_array().unwrap().is_empty());
    session.stop().await;
}

/// Claims the task as a worker and records one step with a screenshot, optionally asking a question.
/// Records step 1 the way the runner does: its control value says what comes next, and the question entries
/// and the hold's events go with it.
async fn record_step(session: &Session, id: &str, next: Next) {
    let mut c = session.client();
    // The task wants a desktop of the pool (the default executor); a runner registers the executors it
    // reaches before it claims, and so does this stand-in worker.
    let want = c
        .get_session(ufo_proto::v1::GetSessionRequest {
            session_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .desktop_want;
    if let Some(want) = want.filter(|w| !w.name.is_empty()) {
        c.register_desktop(ufo_proto::v1::RegisterDesktopRequest {
            name: want.name,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let claimed = c
        .claim_task(ClaimTaskRequest {
            worker_id: "w".into(),
            lease_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(claimed.id, id);
    c.begin_round(ufo_proto::v1::BeginRoundRequest {
        session_id: id.into(),
        number: 1,
        lease_owner: "w".into(),
    })
    .await
    .unwrap();
    let shot = c
        .put_blob(PutBlobRequest {
            data: png().into(),
            sha256: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut next = next;
    next.assign_ids(1);
    let mut step = Step {
        session_id: id.into(),
        step: 1,
        round: 1,
        round_step: 1,
        agent_name: "HostAgent".into(),
        agent_kind: ufo_proto::v1::AgentKind::Host as i32,
        state_after: "PENDING".into(),
        thought: "need a name".into(),
        ..Default::default()
    };
    StepControl {
        next: next.clone(),
        round: None,
    }
    .write(&mut step);
    let (blackboard, events) = hitl::writes(&next);
    c.record_step(RecordStepRequest {
        step: Some(step),
        blackboard,
        events,
        blobs: vec![StepBlob {
            kind: ArtifactKind::CleanScreenshot as i32,
            content_type: "image/png".into(),
            sha256: shot.sha256,
            size: shot.size,
            ..Default::default()
        }],
        lease_owner: "w".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.set_session_status(SetSessionStatusRequest {
        session_id: id.into(),
        status: SessionStatus::Waiting as i32,
        result: String::new(),
        lease_owner: "w".into(),
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn steps_screenshots_and_answers() {
    let session = Session::start().await;
    let app = router(&agent_config(&session.url, &[]));
    let id = submit(&app, "rename a file").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/answers"),
            Some(json!({"answers": ["a"], "question_ids": ["q1-1"]})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "no question is pending",
    );
    record_step(
        &session,
        &id,
        Next::ask(["which name?".to_owned(), "which folder?".to_owned()]),
    )
    .await;

    let (status, steps) = send(&app, "GET", &format!("/v1/tasks/{id}/steps"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(steps["steps"][0]["thought"], "need a name");
    assert_eq!(steps["steps"][0]["screenshots"], json!(["clean"]));
    let (status, headers, bytes) = send_raw(
        &app,
        "GET",
        &format!("/v1/tasks/{id}/steps/1/screenshot?kind=clean"),
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "image/png");
    assert_eq!(bytes, png());
    assert_error(
        &send(
            &app,
            "GET",
            &format!("/v1/tasks/{id}/steps/1/screenshot?kind=annotated"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
        "",
    );
    assert_error(
        &send(
            &app,
            "GET",
            &format!("/v1/tasks/{id}/steps/1/screenshot?kind=thermal"),
            None,
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "kind",
    );
    assert_error(
        &send(
            &app,
            "GET",
            &format!("/v1/tasks/{id}/steps/0/screenshot"),
            None,
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "n must be at least 1",
    );

    let (_, task) = send(&app, "GET", &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(task["status"], "waiting");
    assert_eq!(task["state"], "HostAgent:PENDING");
    assert_eq!(task["pending_questions"].as_array().unwrap().len(), 2);
    let q0 = task["pending_questions"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let q1 = task["pending_questions"][1]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!q0.is_empty() && q0 != q1, "{task}");
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/answers"),
            Some(json!({"answers": ["a", "b", "c"], "question_ids": [q0, q1]})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "answers",
    );
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/answers"),
            Some(json!({"answers": [], "question_ids": []})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "answers",
    );
    let (status, task) = send(
        &app,
        "POST",
        &format!("/v1/tasks/{id}/answers"),
        Some(json!({"answers": ["report.txt"], "question_ids": [q0]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert_eq!(
        task["pending_questions"],
        json!([{"id": q1, "index": 1, "question": "which folder?"}])
    );
    // An answer naming a question answered meanwhile is refused, saying what is pending now.
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/answers"),
            Some(json!({"answers": ["again"], "question_ids": [q0]})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        &format!("pending now: {q1}"),
    );
    let (status, task) = send(
        &app,
        "POST",
        &format!("/v1/tasks/{id}/answers"),
        Some(json!({"answers": ["docs"], "question_ids": [q1]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(task["pending_questions"].as_array().unwrap().is_empty());
    session.stop().await;
}

#[tokio::test]
async fn confirmation_follow_ups_and_cancel() {
    let session = Session::start().await;
    let app = router(&agent_config(&session.url, &[]));
    let id = submit(&app, "delete a file").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/confirmation"),
            Some(json!({"approve": true, "action_id": "h1"})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "no action is held",
    );
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/confirmation"),
            Some(json!({"approve": "yes", "action_id": "h1"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "approve",
    );
    let held = HeldAction {
        agent_name: "AppAgent".into(),
        function: "click_input".into(),
        arguments_json: r#"{"id":"7"}"#.into(),
        target_name: "Delete".into(),
        reason: "irreversible".into(),
        ..Default::default()
    };
    record_step(&session, &id, Next::Hold { action: held }).await;
    let (_, task) = send(&app, "GET", &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(task["held_action"]["function"], "click_input");
    assert_eq!(task["held_action"]["arguments"], json!({"id": "7"}));
    let held_id = task["held_action"]["id"].as_str().unwrap().to_owned();
    assert!(!held_id.is_empty(), "{task}");
    for (body, status, mentions) in [
        (
            json!({"approve": true}),
            StatusCode::BAD_REQUEST,
            "action_id".to_owned(),
        ),
        (
            json!({"approve": true, "action_id": ""}),
            StatusCode::BAD_REQUEST,
            format!("held now: {held_id} (click_input on \"Delete\")"),
        ),
        (
            json!({"approve": true, "action_id": "h0"}),
            StatusCode::CONFLICT,
            format!("held now: {held_id}"),
        ),
    ] {
        let (got, error) = send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/confirmation"),
            Some(body.clone()),
        )
        .await;
        assert_eq!(got, status, "{body}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(&mentions),
            "{body}: {error}"
        );
    }
    let (status, task) = send(
        &app,
        "POST",
        &format!("/v1/tasks/{id}/confirmation"),
        Some(json!({"approve": false, "reason": "not that one", "action_id": held_id})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert!(task["held_action"].is_null());
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/confirmation"),
            Some(json!({"approve": true, "action_id": held_id})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "no action is held",
    );

    let (status, task) = send(
        &app,
        "POST",
        &format!("/v1/tasks/{id}/requests"),
        Some(json!({"request": "and then empty the bin"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{task}");
    assert_eq!(task["rounds"].as_array().unwrap().len(), 2);
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{id}/requests"),
            Some(json!({"request": ""})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        "request",
    );

    // A queued task is cancelled at once; with a body or without.
    let other = submit(&app, "something else").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _, body) = send_raw(
        &app,
        "POST",
        &format!("/v1/tasks/{other}/cancel"),
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["status"],
        "cancelled"
    );
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{other}/cancel"),
            Some(json!({"reason": "again"})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "has ended",
    );
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{other}/answers"),
            Some(json!({"answers": ["x"], "question_ids": ["q1-1"]})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "has ended",
    );
    assert_error(
        &send(
            &app,
            "POST",
            &format!("/v1/tasks/{other}/requests"),
            Some(json!({"request": "more"})),
        )
        .await,
        StatusCode::CONFLICT,
        "failed_precondition",
        "cancelled",
    );
    // A running task gets a cancel request that its runner honours.
    let (status, task) = send(
        &app,
        "POST",
        &format!("/v1/tasks/{id}/cancel"),
        Some(json!({"reason": "changed my mind"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{task}");
    assert_eq!(task["cancel_requested"], true);
    let unknown = uuid::Uuid::new_v4();
    assert_error(
        &send(&app, "POST", &format!("/v1/tasks/{unknown}/cancel"), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "",
    );
    session.stop().await;
}
