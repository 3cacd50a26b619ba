//! The store conformance suite: every test takes fresh stores of one backend and must pass on both
//! (`tests/postgres.rs` runs it on a fresh Postgres database per test, `tests/sqlite.rs` on a temporary file).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use ufo_proto::v1::{
    Action, AgentKind, BlackboardKind, Event, EventDraft, EventKind, PhaseTiming,
    RecordStepRequest, Step,
};
use ufo_session::grpc::validate::{self, Limits};
use ufo_session::store::{NewArtifact, NewSession, StepRecord, Store, StoreError};
use ufo_session::watch::WatchOptions;
use uuid::Uuid;

mod desktops;
mod knowledge;
mod queue;
mod records;
mod watching;

pub use desktops::*;
pub use knowledge::*;
pub use queue::*;
pub use records::*;
pub use watching::*;

/// Expands `$on!(…)` with every case that takes one store: `tests/postgres.rs` and `tests/sqlite.rs`
/// both instantiate this one list, so a case added here runs on both backends. (Cases that need a
/// second store instance, [`Replica`], are written out in each file.) Other test files share this
/// module without instantiating it.
#[allow(unused_macros)]
macro_rules! every_case {
    ($on:ident) => {
        $on!(
            create_get_and_list,
            record_step_is_atomic_and_idempotent,
            record_step_stores_its_artifacts,
            concurrent_steps_with_artifacts,
            rounds_blackboard_and_artifacts,
            cancel_and_status,
            leases_expire_and_renewals_hold,
            appends_are_fenced_by_the_lease,
            parked_sessions_free_the_queue_until_a_person_acts,
            direct_sessions_are_never_claimed,
            expired_direct_sessions_end_with_the_reason,
            concurrent_claims_never_share,
            claims_start_their_session,
            desktops_are_checked_out_to_one_session_at_a_time,
            desktop_checkouts_lapse_only_with_their_session,
            concurrent_claims_never_share_a_desktop,
            hand_overs_claim_while_other_claims_find_nothing,
            claims_check_out_only_reachable_desktops,
            desktop_registrations_are_fenced_by_their_connection,
            concurrent_writers_and_watchers,
            slow_watcher_catches_up,
            commits_hand_their_events_to_watchers,
            own_commits_wake_watchers_with_their_events,
            knowledge_documents_replace_and_search,
            knowledge_experiences_are_the_owners_and_never_failed_or_bad,
            knowledge_sharing_reaches_only_the_named_callers,
            the_largest_batches_are_stored_whole,
        );
    };
}
#[allow(unused_imports)]
pub(crate) use every_case;

/// A way to get another store instance on the same database (another replica).
pub type Replica =
    Box<dyn Fn() -> futures::future::BoxFuture<'static, Arc<dyn Store>> + Send + Sync>;

const DEADLINE: Duration = Duration::from_secs(30);

pub async fn session(store: &dyn Store) -> Uuid {
    let id = Uuid::new_v4();
    store
        .create_session(NewSession {
            id,
            request: "export the report as pdf".into(),
            config: json!({"max_steps": 30}),
            owner: "tests".into(),
            kind: ufo_proto::v1::SessionKind::Task,
            desktop: None,
            lease: None,
        })
        .await
        .unwrap();
    store.begin_round(id, 1, None).await.unwrap();
    id
}

/// Ends session `id` as FINISHED ("ok"), with no lease to check.
pub async fn finish(store: &dyn Store, id: Uuid) {
    store
        .set_session_status(ufo_session::store::StatusChange {
            id,
            status: ufo_proto::v1::SessionStatus::Finished,
            result: "ok".into(),
            lease_owner: None,
        })
        .await
        .unwrap();
}

pub fn step_request(id: Uuid, n: u64, thought: &str) -> RecordStepRequest {
    let s = |v: serde_json::Value| ufo_proto::json::to_struct(v).unwrap();
    RecordStepRequest {
        step: Some(Step {
            session_id: id.to_string(),
            step: n,
            round: 1,
            round_step: u32::try_from(n).unwrap(),
            agent_name: "AppAgent/mousepad".into(),
            agent_kind: AgentKind::App.into(),
            state_before: "CONTINUE".into(),
            state_after: "CONTINUE".into(),
            subtask: "type the text".into(),
            observation: "an empty editor".into(),
            thought: thought.into(),
            plan: vec!["type".into(), "save".into()],
            comment: "typing".into(),
            status: "CONTINUE".into(),
            actions: vec![Action {
                function: "set_edit_text".into(),
                arguments: Some(s(json!({"id": "3", "text": "hello"}))),
                status: "CONTINUE".into(),
                result: None,
                target_id: "3".into(),
                target_name: "Text View".into(),
                representation: "set_edit_text on [3]Text View".into(),
                // The replay selector: both stores must give it back as written.
                selector: Some(ufo_proto::v1::Selector {
                    control_type: "Edit".into(),
                    name: "Text View".into(),
                    ancestors: vec![ufo_proto::v1::SelectorNode {
                        name: "Untitled 1 - Mousepad".into(),
                        control_type: "Window".into(),
                    }],
                    automation_id: String::new(),
                    sibling_index: 1,
                    process: String::new(),
                }),
            }],
            phases: vec![PhaseTiming {
                phase: "llm_interaction".into(),
                seconds: 0.5,
                success: true,
                error: String::new(),
            }],
            cost: 0.25,
            input_tokens: 100,
            output_tokens: 20,
            extra: Some(s(json!({"function": "set_edit_text"}))),
            ..Step::default()
        }),
        memory_item: Some(s(json!({"step": n, "thought": thought}))),
        blackboard: vec![ufo_proto::v1::BlackboardEntry {
            kind: BlackboardKind::Trajectory.into(),
            value: Some(s(json!({"step": n, "action": "set_edit_text"}))),
            ..Default::default()
        }],
        events: vec![EventDraft {
            kind: EventKind::StepStarted.into(),
            payload: None,
            step: n,
            round: 1,
        }],
        lease_owner: String::new(),
        blobs: Vec::new(),
    }
}

/// Puts `data` into the store's blob store (as the runner does at capture) and returns a step's reference
/// to it, of `kind`, as a PNG with `metadata`.
pub async fn put_blob(
    store: &dyn Store,
    kind: ufo_proto::v1::ArtifactKind,
    data: &[u8],
    metadata: serde_json::Value,
) -> ufo_proto::v1::StepBlob {
    let blob = store
        .put_blob(bytes::Bytes::copy_from_slice(data), None)
        .await
        .unwrap();
    ufo_proto::v1::StepBlob {
        kind: kind.into(),
        content_type: "image/png".into(),
        sha256: blob.sha256,
        size: blob.size,
        width: 0,
        height: 0,
        metadata: Some(ufo_proto::json::to_struct(metadata).unwrap()),
    }
}

/// An artifact referencing `blob`, added to step `step` of session `id`.
pub fn new_artifact(id: Uuid, step: u64, blob: ufo_proto::v1::StepBlob) -> NewArtifact {
    NewArtifact {
        session_id: id,
        step,
        artifact: validate::step_blob("blob", blob, LIMITS).unwrap(),
    }
}

/// Validation limits of the suite's requests.
pub const LIMITS: Limits = Limits {
    max_batch: 100,
    max_artifact_bytes: 1 << 20,
};

pub fn record(id: Uuid, n: u64, thought: &str) -> StepRecord {
    validate::record_step(step_request(id, n, thought), LIMITS).unwrap()
}

async fn all_events(store: &dyn Store, id: Uuid) -> Vec<Event> {
    store.read_events(id, 1, 100_000).await.unwrap()
}

fn assert_gap_free(events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.seq,
            i as u64 + 1,
            "events out of order or with gaps: {events:?}"
        );
    }
}

/// Collects a watcher's events until its stream ends (a terminal event with nothing after it).
async fn drain(mut rx: tokio::sync::mpsc::Receiver<Result<Event, StoreError>>) -> Vec<Event> {
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(item) = rx.recv().await {
            out.push(item.unwrap());
        }
    })
    .await
    .expect("watcher did not end");
    out
}

const OPTIONS: WatchOptions = WatchOptions {
    buffer: 8,
    page: 50,
    kinds: ufo_session::watch::Kinds::ALL,
};
