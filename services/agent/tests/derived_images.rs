//! Issue 22, one image per observation: the annotated (set-of-marks) image and the selected control's crop
//! are not stored; each step records a recipe over its clean screenshot and the REST API draws the image
//! again on read. What `GET /v1/tasks/{id}/steps/{n}/screenshot?kind=annotated` serves must be, byte for
//! byte, the image the model received in that step's prompt (decoded from the OpenAI-format request the
//! model stand-in recorded), both when the screenshot fits the prompt and when the prompt downscales it;
//! the crop served must be the one the next step's prompt carried. An unchanged screen is stored once,
//! the blob store holds no annotated image, and an annotated PNG stored by an older agent is served as is.
//! The session service is the real one on Postgres with a blob directory; the executor is the crate's
//! desktop double.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use crate::common;
use base64::Engine as _;
use serde_json::{Value, json};
use ufo_agent::agents::{AgentServices, AgentSettings};
use ufo_agent::dispatch::CommandDispatcher;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::store::blobs::BlobUploads;
use ufo_agent::testing::ScriptedLlm;
use ufo_agent::vision::derived::RECIPE_TYPE;
use ufo_agent::vision::{Screenshot, downscale_png};
use ufo_proto::v1::{
    AddArtifactRequest, ArtifactKind, ArtifactRef, ListStepsRequest, PutBlobRequest, StepBlob,
};

/// The bytes of every blob in a directory blob store (`<root>/<2 hex>/<hash>`), by name.
fn blobs_in(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|s| s.file_name().len() == 2)
        .flat_map(|s| std::fs::read_dir(s.path()).unwrap().flatten())
        .map(|f| {
            let name = f.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(f.path()).unwrap())
        })
        .filter(|(n, _)| n.len() == 64)
        .collect();
    out.sort();
    out
}

/// The bytes of a `data:` URL.
fn data_url_bytes(url: &str) -> Vec<u8> {
    let (_, encoded) = url.split_once(";base64,").expect("a base64 data URL");
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap()
}

async fn served(http: &reqwest::Client, agent: &Agent, id: &str, n: u64, kind: &str) -> Vec<u8> {
    let response = http
        .get(format!(
            "{}/v1/tasks/{id}/steps/{n}/screenshot?kind={kind}",
            agent.http
        ))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "step {n} {kind}");
    assert_eq!(response.headers()["content-type"], "image/png");
    response.bytes().await.unwrap().to_vec()
}

/// `a == b` without printing megabytes of bytes when they differ.
fn same(a: &[u8], b: &[u8], what: &str) {
    assert!(
        a == b,
        "{what}: served {} bytes, the prompt carried {} bytes",
        a.len(),
        b.len()
    );
}

/// A served image as a prompt carries it: fitted to `max` (unchanged when it fits).
fn fitted(png: Vec<u8>, max: (u32, u32)) -> Vec<u8> {
    let decoded = image::load_from_memory(&png).unwrap();
    let shot = Screenshot {
        mime: "image/png".into(),
        bytes: png.into(),
        width: decoded.width(),
        height: decoded.height(),
        origin_x: 0,
        origin_y: 0,
        scale: 1.0,
    };
    downscale_png(&shot, max.0, max.1).unwrap().bytes.to_vec()
}

fn of_kind(refs: &[ArtifactRef], kind: ArtifactKind) -> Vec<&ArtifactRef> {
    refs.iter().filter(|a| a.kind == kind as i32).collect()
}

/// Runs host → app (reads Body) → app (finishes) → host with `settings` and checks every served image
/// against the prompts. Returns the annotated image's size the model received.
async fn prompts_and_served_images_agree(settings: AgentSettings) -> (u32, u32) {
    let max = settings.prompt_image_max;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("blobs");
    let blob_dir = root.clone();
    let session = Session::start_with(move |c| c.blobs.blob_dir = Some(blob_dir)).await;
    let llm = ScriptedLlm::start().await.unwrap();
    let services = AgentServices {
        uploads: Some(Arc::new(BlobUploads::new(session.client()))),
        mcp: None,
        ..common::services(&llm, settings)
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
    llm.push_json(&common::assign("0", "read the total in Notes"));
    llm.push_fn(common::by_name(|id| {
        common::app(
            "CONTINUE",
            json!({"function": "texts", "arguments": {"id": id("Body")}}),
            "",
        )
    }));
    llm.push_json(&common::app("FINISH", json!([]), "total=42"));
    llm.push_json(&common::host(
        "FINISH",
        json!({"result": "total=42", "comment": "done"}),
    ));

    let http = ufo_testkit::http_client();
    let task: Value = http
        .post(format!("{}/v1/tasks", agent.http))
        .bearer_auth(KEY)
        .json(&json!({"request": "read the total in Notes"}))
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

    // One model call per step: request i is step i + 1. The AppAgent steps are 2 and 3.
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let images = |step: usize| -> Vec<Vec<u8>> {
        requests[step - 1]
            .image_urls()
            .iter()
            .map(|u| data_url_bytes(u))
            .collect()
    };
    let (step2, step3) = (images(2), images(3));
    assert_eq!(step2.len(), 2, "clean + annotated");
    assert_eq!(step3.len(), 3, "last selected control + clean + annotated");

    // The annotated image served is the one the model received, byte for byte.
    let annotated = served(&http, &agent, &id, 2, "annotated").await;
    same(&annotated, &step2[1], "step 2's annotated image");
    let annotated = served(&http, &agent, &id, 3, "annotated").await;
    same(&annotated, &step3[2], "step 3's annotated image");
    assert!(step2[1] != step2[0], "the marks are drawn");
    // The crop of step 2's acted control is the image step 3's prompt carried (fitted to the prompt the
    // way every prompt image is: unchanged when it fits).
    let crop = served(&http, &agent, &id, 2, "selected").await;
    same(&fitted(crop, max), &step3[0], "the selected control's crop");

    // Rows hold recipes, the blob store no annotated image and no crop; the unchanged window is one blob.
    let steps = session
        .client()
        .list_steps(ListStepsRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .steps;
    let mut images_stored = BTreeSet::new();
    for step in &steps[1..3] {
        let refs = &step.artifacts;
        let recipe = of_kind(refs, ArtifactKind::AnnotatedScreenshot);
        assert_eq!(recipe.len(), 1, "{refs:?}");
        assert_eq!(recipe[0].content_type, RECIPE_TYPE);
        assert!(recipe[0].size < 4096, "a recipe, not an image: {refs:?}");
        let clean = of_kind(refs, ArtifactKind::CleanScreenshot);
        images_stored.extend(clean.iter().map(|c| c.id.clone()));
    }
    let crops = of_kind(&steps[1].artifacts, ArtifactKind::SelectedControlScreenshot);
    assert_eq!(crops.len(), 1);
    assert_eq!(crops[0].content_type, RECIPE_TYPE);
    assert_eq!(
        images_stored.len(),
        1,
        "the unchanged window is stored once"
    );
    for step in &steps {
        let desktop = of_kind(&step.artifacts, ArtifactKind::DesktopScreenshot);
        images_stored.extend(desktop.iter().map(|c| c.id.clone()));
    }
    let png_blobs: BTreeSet<String> = blobs_in(&root)
        .into_iter()
        .filter(|(_, bytes)| bytes.starts_with(b"\x89PNG"))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        png_blobs, images_stored,
        "only the captured screenshots are images"
    );
    let clean = served(&http, &agent, &id, 2, "clean").await;
    same(&fitted(clean, max), &step2[0], "the clean screenshot");

    // An annotated image stored by an older agent (before recipes) is served as it was stored.
    let clean_id = images_stored.first().unwrap().clone();
    let old = std::fs::read(root.join(&clean_id[..2]).join(&clean_id)).unwrap();
    let mut client = session.client();
    let blob = client
        .put_blob(PutBlobRequest {
            data: old.clone().into(),
            sha256: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    client
        .add_artifact(AddArtifactRequest {
            session_id: id.clone(),
            step: 1,
            blob: Some(StepBlob {
                kind: ArtifactKind::AnnotatedScreenshot as i32,
                content_type: "image/png".into(),
                sha256: blob.sha256,
                size: blob.size,
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    same(
        &served(&http, &agent, &id, 1, "annotated").await,
        &old,
        "a stored annotated PNG",
    );

    let size = image::load_from_memory(&step2[1]).unwrap();
    agent.stop().await;
    session.stop().await;
    (size.width(), size.height())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotated_image_served_is_the_one_the_model_received() {
    // The Notes window (400×300) fits the prompt: the model gets the full-size annotated image.
    let size = prompts_and_served_images_agree(AgentSettings::default()).await;
    assert_eq!(size, (400, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downscaled_annotated_image_is_drawn_again_as_sent() {
    let settings = AgentSettings {
        prompt_image_max: (200, 200),
        ..AgentSettings::default()
    };
    let size = prompts_and_served_images_agree(settings).await;
    assert_eq!(size, (200, 150), "the prompt's size, not the screenshot's");
}
