//! Issue 22, point 4 through the agent's REST API: `POST /v1/admin/prune` is for admin keys only (403 for
//! a user key, 400 without a rule); it prunes the screenshots of ended tasks beyond the newest N while
//! every step stays listed, and the task view says when (`images_pruned_at`). Real session service on
//! Postgres with a blob directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::api_support::{Agent, Session, agent_config};
use bytes::Bytes;
use serde_json::{Value, json};
use ufo_proto::v1::{
    AgentKind, ArtifactKind, BeginRoundRequest, PutBlobRequest, RecordStepRequest, SessionStatus,
    SetSessionStatusRequest, Step, StepBlob,
};

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

/// A task of alice's with one recorded step carrying a screenshot, ended.
async fn finished_task(session: &Session, base: &str, shot: &'static [u8]) -> String {
    let (status, task) = call_as(
        base,
        "ka",
        "POST",
        "/v1/tasks",
        Some(json!({"request": "look"})),
    )
    .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let mut c = session.client();
    c.begin_round(BeginRoundRequest {
        session_id: id.clone(),
        number: 1,
        lease_owner: String::new(),
    })
    .await
    .unwrap();
    let blob = c
        .put_blob(PutBlobRequest {
            data: Bytes::from_static(shot),
            sha256: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    c.record_step(RecordStepRequest {
        step: Some(Step {
            session_id: id.clone(),
            step: 1,
            round: 1,
            round_step: 1,
            agent_name: "HostAgent".into(),
            agent_kind: AgentKind::Host.into(),
            thought: "the desktop".into(),
            ..Default::default()
        }),
        blobs: vec![StepBlob {
            kind: ArtifactKind::CleanScreenshot.into(),
            content_type: "image/png".into(),
            sha256: blob.sha256,
            size: blob.size,
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    c.set_session_status(SetSessionStatusRequest {
        session_id: id.clone(),
        status: SessionStatus::Finished.into(),
        result: "seen".into(),
        lease_owner: String::new(),
    })
    .await
    .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_prune_screenshots_and_the_task_says_when() {
    let dir = tempfile::tempdir().unwrap();
    let blob_dir = dir.path().join("blobs");
    let session = Session::start_with(move |c| c.blobs.blob_dir = Some(blob_dir)).await;
    let config = agent_config(
        &session.url,
        &["--api-keys", "alice:ka,root:kr", "--api-admins", "root"],
    );
    let agent = Agent::start(config, None).await;
    let base = agent.http.as_str();
    let old = finished_task(&session, base, b"an old screenshot").await;
    let new = finished_task(&session, base, b"a new screenshot").await;

    let rule = json!({"keep_tasks": 1});
    let (status, error) = call_as(base, "ka", "POST", "/v1/admin/prune", Some(rule.clone())).await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(error["code"], "permission_denied");
    let (status, error) = call_as(base, "kr", "POST", "/v1/admin/prune", Some(json!({}))).await;
    assert_eq!(status, 400, "{error}");
    let (status, error) = call_as(
        base,
        "kr",
        "POST",
        "/v1/admin/prune",
        Some(json!({"keep_tasks": "many"})),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    let (_, before) = call_as(base, "ka", "GET", &format!("/v1/tasks/{old}"), None).await;
    assert!(before.get("images_pruned_at").is_none(), "{before}");

    let (status, done) = call_as(base, "kr", "POST", "/v1/admin/prune", Some(rule)).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done, json!({"tasks": 1, "screenshots": 1, "blobs": 1}));

    let (_, pruned) = call_as(base, "ka", "GET", &format!("/v1/tasks/{old}"), None).await;
    let at = pruned["images_pruned_at"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{pruned}");
    let (_, kept) = call_as(base, "ka", "GET", &format!("/v1/tasks/{new}"), None).await;
    assert!(kept.get("images_pruned_at").is_none(), "{kept}");
    // Every step is kept; the screenshot is gone (404), the newer task's is served.
    let (status, steps) = call_as(base, "ka", "GET", &format!("/v1/tasks/{old}/steps"), None).await;
    assert_eq!(status, 200);
    assert_eq!(steps["steps"].as_array().unwrap().len(), 1, "{steps}");
    assert_eq!(steps["steps"][0]["thought"], "the desktop");
    let (status, _) = call_as(
        base,
        "ka",
        "GET",
        &format!("/v1/tasks/{old}/steps/1/screenshot?kind=clean"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let shot = ufo_testkit::http_client()
        .get(format!(
            "{base}/v1/tasks/{new}/steps/1/screenshot?kind=clean"
        ))
        .bearer_auth("ka")
        .send()
        .await
        .unwrap();
    assert_eq!(shot.status(), 200);
    assert_eq!(shot.bytes().await.unwrap().as_ref(), b"a new screenshot");

    agent.stop().await;
    session.stop().await;
}
