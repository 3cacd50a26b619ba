//! Record-step latency and throughput, and commit → watcher delivery latency, on real Postgres.
//!
//! Run: `cargo bench -p ufo-session --bench record_step` (uses `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; creates and drops a scratch database). Sizes via
//! `UFO_BENCH_STEPS` (per writer, default 1000) and `UFO_BENCH_DELIVERIES` (default 500). Durable runs also
//! record steps with screenshots (two of `UFO_BENCH_ARTIFACT_BYTES`, default 300000, and a crop of a tenth
//! of that; `UFO_BENCH_ARTIFACT_STEPS` with 1 writer, default 200, an eighth of that per writer with 16):
//! each put into the blob directory (in the system temp dir) first, then referenced by the step, the
//! measured time covering both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use sqlx::{Connection as _, Executor as _};
use ufo_proto::v1::{AgentKind, ArtifactKind, EventDraft, EventKind, RecordStepRequest, Step};
use ufo_session::blob::dir::DirBlobStore;
use ufo_session::grpc::validate::{Limits, record_step};
use ufo_session::store::blobbed::BlobbedStore;
use ufo_session::store::{NewSession, Store, postgres};
use ufo_session::watch::{WatchOptions, watch};
use uuid::Uuid;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn session(store: &dyn Store) -> Uuid {
    let id = Uuid::new_v4();
    store
        .create_session(NewSession {
            id,
            request: "benchmark".into(),
            config: json!({}),
            owner: "bench".into(),
            kind: ufo_proto::v1::SessionKind::Task,
            desktop: None,
            lease: None,
        })
        .await
        .unwrap();
    store.begin_round(id, 1, None).await.unwrap();
    id
}

/// `len` bytes that neither compress (like PNG) nor repeat across steps (so none is deduplicated).
fn noise(seed: u64, len: usize) -> bytes::Bytes {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out.into()
}

/// A realistic step: an action with arguments, a memory item, a trajectory entry, STEP_STARTED, and
/// artifacts of the given sizes, put into `store`'s blob store first.
async fn step(
    store: &dyn Store,
    id: Uuid,
    n: u64,
    artifacts: &[usize],
) -> ufo_session::store::StepRecord {
    let s = |v| ufo_proto::json::to_struct(v).unwrap();
    let mut blobs = Vec::new();
    for (i, &len) in artifacts.iter().enumerate() {
        let data = noise(id.as_u64_pair().0 ^ (n << 8) ^ i as u64, len);
        let put = store.put_blob(data, None).await.unwrap();
        blobs.push(ufo_proto::v1::StepBlob {
            kind: KINDS[i % KINDS.len()].into(),
            content_type: "image/png".into(),
            sha256: put.sha256,
            size: put.size,
            width: 1280,
            height: 800,
            metadata: None,
        });
    }
    let request = RecordStepRequest {
        step: Some(Step {
            session_id: id.to_string(),
            step: n,
            round: 1,
            round_step: u32::try_from(n).unwrap(),
            agent_name: "AppAgent/mousepad".into(),
            agent_kind: AgentKind::App.into(),
            state_before: "CONTINUE".into(),
            state_after: "CONTINUE".into(),
            subtask: "type the report".into(),
            observation: "The editor shows an empty document with the cursor in the text area."
                .into(),
            thought: "I should type the text into the text view.".into(),
            plan: vec!["type the text".into(), "save the file".into()],
            comment: "Typing the report.".into(),
            status: "CONTINUE".into(),
            actions: vec![ufo_proto::v1::Action {
                function: "set_edit_text".into(),
                arguments: Some(s(json!({"id": "3", "text": "quarterly report"}))),
                status: "CONTINUE".into(),
                ..Default::default()
            }],
            cost: 0.001,
            input_tokens: 1500,
            output_tokens: 120,
            ..Default::default()
        }),
        memory_item: Some(s(
            json!({"step": n, "agent": "AppAgent", "thought": "type"}),
        )),
        blackboard: vec![ufo_proto::v1::BlackboardEntry {
            kind: ufo_proto::v1::BlackboardKind::Trajectory.into(),
            value: Some(s(json!({"step": n, "action": "set_edit_text"}))),
            ..Default::default()
        }],
        events: vec![EventDraft {
            kind: EventKind::StepStarted.into(),
            step: n,
            round: 1,
            ..Default::default()
        }],
        blobs,
        ..Default::default()
    };
    let limits = Limits {
        max_batch: 100,
        max_artifact_bytes: 32 << 20,
    };
    record_step(request, limits).unwrap()
}

fn report(name: &str, h: &Histogram<u64>) {
    println!(
        "{name}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        h.len(),
        h.value_at_quantile(0.50) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0
    );
}

const KINDS: [ArtifactKind; 3] = [
    ArtifactKind::CleanScreenshot,
    ArtifactKind::AnnotatedScreenshot,
    ArtifactKind::SelectedControlScreenshot,
];

/// `writers` concurrent writers, each recording `steps` steps (carrying artifacts of the sizes in
/// `artifacts`) into its own session.
async fn record(store: &Arc<dyn Store>, writers: usize, steps: usize, artifacts: &[usize]) {
    let ids: Vec<Uuid> = futures::future::join_all((0..writers).map(|_| session(&**store))).await;
    let started = Instant::now();
    let tasks: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let store = Arc::clone(store);
            let artifacts = artifacts.to_vec();
            tokio::spawn(async move {
                let mut h = Histogram::<u64>::new(3).unwrap();
                for n in 1..=steps as u64 {
                    let t = Instant::now();
                    let record = step(&*store, id, n, &artifacts).await;
                    store.record_step(record).await.unwrap();
                    h.record(t.elapsed().as_micros() as u64).unwrap();
                }
                h
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new(3).unwrap();
    for t in tasks {
        all.add(t.await.unwrap()).unwrap();
    }
    let elapsed = started.elapsed();
    let with = if artifacts.is_empty() {
        String::new()
    } else {
        let sizes: Vec<String> = artifacts
            .iter()
            .map(|b| format!("{} KB", b / 1000))
            .collect();
        format!(" with artifacts of {}", sizes.join(" + "))
    };
    report(&format!("record_step{with}, {writers} writer(s)"), &all);
    println!(
        "record_step{with}, {writers} writer(s): throughput {:.0} steps/s ({} steps in {:.2} s)",
        all.len() as f64 / elapsed.as_secs_f64(),
        all.len(),
        elapsed.as_secs_f64()
    );
}

/// Commit → watcher latency: the writer records one step at a time and waits for the watcher (on
/// `watcher_store`) to receive its STEP_FINISHED before the next.
async fn delivery(name: &str, writer: &Arc<dyn Store>, watcher_store: Arc<dyn Store>, n: usize) {
    let id = session(&**writer).await;
    let from = writer.get_session(id).await.unwrap().last_seq + 1;
    let mut rx = watch(
        watcher_store,
        id,
        from,
        WatchOptions {
            buffer: 64,
            page: 100,
            kinds: ufo_session::watch::Kinds::ALL,
        },
    );
    let mut h = Histogram::<u64>::new(3).unwrap();
    for k in 1..=n as u64 {
        let record = step(&**writer, id, k, &[]).await;
        writer.record_step(record).await.unwrap();
        let committed = Instant::now();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("event not delivered within 10 s")
                .unwrap()
                .unwrap();
            if event.kind == EventKind::StepFinished as i32 && event.step == k {
                break;
            }
        }
        h.record(committed.elapsed().as_micros() as u64).unwrap();
    }
    report(name, &h);
}

#[tokio::main]
async fn main() {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let steps = env_usize("UFO_BENCH_STEPS", 1000);
    let deliveries = env_usize("UFO_BENCH_DELIVERIES", 500);
    let artifact_bytes = env_usize("UFO_BENCH_ARTIFACT_BYTES", 300_000);
    let artifact_steps = env_usize("UFO_BENCH_ARTIFACT_STEPS", 200);
    let scratch = format!("ufo_session_bench_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    admin
        .execute(format!("CREATE DATABASE {scratch}").as_str())
        .await
        .unwrap();
    let url = match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{scratch}"),
        None => panic!("DATABASE_URL has no database name"),
    };
    for async_commit in [false, true] {
        let options = |max_connections| postgres::PgOptions {
            max_connections,
            async_commit,
            acquire_timeout: std::time::Duration::from_secs(30),
            batching: postgres::StepBatching {
                max_steps: env_usize("UFO_BENCH_STEP_BATCH", 32),
                writers: env_usize("UFO_BENCH_STEP_WRITERS", 2),
            },
        };
        let dir = tempfile::tempdir().unwrap();
        let blobs = Arc::new(DirBlobStore::open(dir.path()).unwrap());
        let rows = postgres::connect(&url, options(32), blobs.as_ref())
            .await
            .unwrap();
        let store: Arc<dyn Store> = Arc::new(BlobbedStore::new(Arc::new(rows), blobs.clone()));
        // Warm the pool and the caches.
        record(&store, 4, 50, &[]).await;
        println!(
            "--- synchronous_commit = {} ---",
            if async_commit {
                "off (--pg-async-commit)"
            } else {
                "on (default, durable)"
            }
        );
        record(&store, 1, steps, &[]).await;
        record(&store, 16, steps, &[]).await;
        if !async_commit {
            // A step with its screenshots: what the agent sends (two full-size images and a crop).
            let shots = [artifact_bytes, artifact_bytes, artifact_bytes / 10];
            record(&store, 1, artifact_steps, &shots).await;
            record(&store, 16, artifact_steps / 8, &shots).await;
        }
        let same = Arc::clone(&store);
        delivery(
            "delivery, same replica (in-process notifier)",
            &store,
            same,
            deliveries,
        )
        .await;
        let replica = postgres::connect(&url, options(4), blobs.as_ref())
            .await
            .unwrap();
        let replica: Arc<dyn Store> = Arc::new(BlobbedStore::new(Arc::new(replica), blobs.clone()));
        delivery(
            "delivery, other replica (LISTEN/NOTIFY)",
            &store,
            replica,
            deliveries,
        )
        .await;
    }
    admin
        .execute(format!("DROP DATABASE IF EXISTS {scratch} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
