//! Issue 22, screenshots off the critical path: a step's screenshot is uploaded to the session service's
//! blob store as soon as it is captured, while the model is asked, and the step then references the blob.
//!
//! The model stand-in answers only once the session service's blob directory holds a blob (the
//! screenshot of the step it is asked about): if the upload waited for the model (as when screenshots went
//! inside RecordStep after the step), the model would never answer and the task would fail. The recorded
//! step must reference exactly the blobs that were durable while the model was being asked, and the row
//! keeps no bytes (the blob store serves them). The session service is the real one on Postgres with a
//! blob directory; the executor is the crate's desktop double (the subject here is agent ⇄ session).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use crate::common;
use async_trait::async_trait;
use serde_json::{Value, json};
use ufo_agent::agents::{AgentServices, AgentSettings};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::store::blobs::BlobUploads;
use ufo_agent::testing::ScriptedLlm;
use ufo_proto::v1::{ArtifactKind, GetArtifactRequest, ListStepsRequest};
use ufo_testkit::wait::poll_until;

/// Hex names of the blobs in a directory blob store (`<root>/<2 hex>/<hash>`).
fn blobs_in(root: &Path) -> BTreeSet<String> {
    let Ok(shards) = std::fs::read_dir(root) else {
        return BTreeSet::new();
    };
    shards
        .flatten()
        .filter(|s| s.file_name().len() == 2)
        .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten().flatten())
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect()
}

/// Per model call: the blobs durable while it was asked, or why none appeared.
type Seen = Arc<Mutex<Vec<Result<BTreeSet<String>, String>>>>;

/// A model that answers (through `inner`) only once the blob store holds a blob, and remembers which
/// blobs were durable while it was being asked.
struct WaitsForUpload {
    inner: Arc<dyn ChatModel>,
    root: PathBuf,
    seen: Seen,
}

#[async_trait]
impl ChatModel for WaitsForUpload {
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let root = self.root.clone();
        let found = poll_until(
            "the step's screenshot in the blob store while the model is asked",
            Duration::from_secs(20),
            Duration::from_millis(10),
            || {
                let blobs = blobs_in(&root);
                async move { Ok((!blobs.is_empty()).then_some(blobs)) }
            },
        )
        .await
        .map_err(|e| e.to_string());
        self.seen.lock().unwrap().push(found);
        self.inner.chat(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_are_uploaded_while_the_model_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("blobs");
    let blob_dir = root.clone();
    let session = Session::start_with(move |c| c.blobs.blob_dir = Some(blob_dir)).await;
    let llm = ScriptedLlm::start().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let base = common::services(&llm, AgentSettings::default());
    let services = AgentServices {
        host_model: Arc::new(WaitsForUpload {
            inner: base.host_model.clone(),
            root: root.clone(),
            seen: seen.clone(),
        }),
        uploads: Some(Arc::new(BlobUploads::new(session.client()))),
        mcp: None,
        ..base
    };
    let desktop = Arc::new(common::desktop());
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
    ));
    let agent = Agent::start(
        agent_config(
            &session.url,
            &["--lease-ms", "5000", "--claim-interval-ms", "50"],
        ),
        Some(driver),
    )
    .await;
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "looked at the desktop", "comment": "done"}),
    ));

    let http = ufo_testkit::http_client();
    let task: Value = http
        .post(format!("{}/v1/tasks", agent.http))
        .bearer_auth(KEY)
        .json(&json!({"request": "look at the desktop"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", agent.http);
    let done = eventually(60, "the task to end", || async {
        let t: Value = http
            .get(url.clone())
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (t["status"] != "queued" && t["status"] != "running").then_some(t)
    })
    .await;
    assert_eq!(done["status"], "finished", "{done}");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one model call");
    let durable = seen[0].clone().unwrap_or_else(|e| {
        panic!("the screenshot was not uploaded while the model was asked: {e}")
    });

    let mut client = session.client();
    let steps = client
        .list_steps(ListStepsRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    assert_eq!(steps.len(), 1);
    let shots: Vec<_> = steps[0]
        .artifacts
        .iter()
        .filter(|a| a.kind == ArtifactKind::DesktopScreenshot as i32)
        .collect();
    assert_eq!(shots.len(), 1, "{:?}", steps[0].artifacts);
    let shot = shots[0];
    assert!(
        durable.contains(&shot.id),
        "the step's screenshot {} was durable while the model was asked: {durable:?}",
        shot.id
    );
    // The row keeps the reference and the dimensions; the bytes come from the blob store, whole.
    let metadata = ufo_proto::json::from_struct(shot.metadata.clone().unwrap());
    assert!(metadata["width"].as_u64().unwrap() > 0, "{metadata}");
    let served = client
        .get_artifact(GetArtifactRequest {
            artifact_id: shot.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(served.data.len() as u64, shot.size);
    let on_disk = std::fs::read(root.join(&shot.id[..2]).join(&shot.id)).unwrap();
    assert_eq!(served.data, on_disk);
    let pool = sqlx::PgPool::connect(&session.database_url).await.unwrap();
    let (columns,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_name = 'artifact_blobs' AND column_name = 'data'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(columns, 0, "the database has no place for screenshot bytes");
    pool.close().await;

    agent.stop().await;
    session.stop().await;
}

/// Screenshots nobody uploaded at capture (a driver without an uploader) are put into the blob store when
/// their step is recorded: bytes still go one way, and the step references them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_not_uploaded_at_capture_are_put_when_the_step_is_recorded() {
    let session = Session::start().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let base = common::services(&llm, AgentSettings::default());
    let services = AgentServices {
        uploads: None,
        mcp: None,
        ..base
    };
    let desktop = Arc::new(common::desktop());
    let driver: Arc<dyn TaskDriver> = Arc::new(AgentsDriver::new(
        Arc::new(move |_| Ok(services.clone())),
        Arc::new(move |_| Ok(desktop.clone() as Arc<dyn CommandDispatcher>)),
    ));
    let agent = Agent::start(
        agent_config(&session.url, &["--claim-interval-ms", "50"]),
        Some(driver),
    )
    .await;
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "seen", "comment": "done"}),
    ));
    let http = ufo_testkit::http_client();
    let task: Value = http
        .post(format!("{}/v1/tasks", agent.http))
        .bearer_auth(KEY)
        .json(&json!({"request": "look at the desktop"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/tasks/{id}", agent.http);
    let done = eventually(60, "the task to end", || async {
        let t: Value = http
            .get(url.clone())
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (t["status"] != "queued" && t["status"] != "running").then_some(t)
    })
    .await;
    assert_eq!(done["status"], "finished", "{done}");
    let mut client = session.client();
    let steps = client
        .list_steps(ListStepsRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    let shot = steps[0]
        .artifacts
        .iter()
        .find(|a| a.kind == ArtifactKind::DesktopScreenshot as i32)
        .expect("the desktop screenshot was recorded");
    let served = client
        .get_artifact(GetArtifactRequest {
            artifact_id: shot.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(served.data.len() as u64, shot.size);
    let on_disk = std::fs::read(session.blob_dir.join(&shot.id[..2]).join(&shot.id)).unwrap();
    assert_eq!(served.data, on_disk, "the screenshot is a blob");
    agent.stop().await;
    session.stop().await;
}
