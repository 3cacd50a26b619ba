//! Sessions, steps, rounds, blackboard, artifacts and cancellation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use ufo_proto::v1::{ArtifactKind, BlackboardKind, EventKind, RoundStatus, SessionStatus};
use ufo_session::grpc::validate;
use ufo_session::store::{
    ArtifactKey, NewBlackboardEntry, NewEvent, NewSession, RoundEnd, StatusChange, Store,
    StoreError,
};
use uuid::Uuid;

use super::*;

pub async fn create_get_and_list(store: Arc<dyn Store>) {
    let first = session(&*store).await;
    let again = store
        .create_session(NewSession {
            id: first,
            request: "export the report as pdf".into(),
            config: json!({}),
            owner: String::new(),
            kind: ufo_proto::v1::SessionKind::Task,
            desktop: None,
            lease: None,
        })
        .await
        .unwrap();
    assert_eq!(again.id, first.to_string());
    let clash = store
        .create_session(NewSession {
            id: first,
            request: "something else".into(),
            config: json!({}),
            owner: String::new(),
            kind: ufo_proto::v1::SessionKind::Task,
            desktop: None,
            lease: None,
        })
        .await;
    assert!(
        matches!(clash, Err(StoreError::AlreadyExists(_))),
        "{clash:?}"
    );
    let got = store.get_session(first).await.unwrap();
    assert_eq!(got.status, SessionStatus::Queued as i32);
    assert_eq!(got.last_seq, 2, "TASK_CREATED then ROUND_STARTED");
    assert_eq!(
        ufo_proto::json::from_optional_struct(got.config),
        json!({"max_steps": 30})
    );
    assert!(matches!(
        store.get_session(Uuid::new_v4()).await,
        Err(StoreError::NotFound(_))
    ));

    let mut ids = vec![first];
    for _ in 0..4 {
        ids.push(session(&*store).await);
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = store.list_sessions(None, None, cursor, 2).await.unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.into_iter().map(|s| s.id));
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut expected: Vec<String> = ids.iter().rev().map(Uuid::to_string).collect();
    assert_eq!(seen.len(), 5);
    expected.sort();
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, expected, "every session exactly once");
    // One owner's sessions only.
    let (owned, _) = store
        .list_sessions(None, Some("tests"), None, 10)
        .await
        .unwrap();
    assert_eq!(owned.len(), 5);
    assert!(owned.iter().all(|s| s.owner == "tests"));
    let (none, _) = store
        .list_sessions(None, Some("nobody"), None, 10)
        .await
        .unwrap();
    assert!(none.is_empty());

    store
        .set_session_status(StatusChange {
            id: first,
            status: SessionStatus::Cancelled,
            result: "stop".into(),
            lease_owner: None,
        })
        .await
        .unwrap();
    let (cancelled, _) = store
        .list_sessions(Some(SessionStatus::Cancelled), None, None, 10)
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].id, first.to_string());
}

pub async fn record_step_is_atomic_and_idempotent(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let shot = put_blob(
        &*store,
        ArtifactKind::CleanScreenshot,
        &[1, 2, 3, 4],
        json!({"width": 2, "height": 2}),
    )
    .await;
    let first = validate::record_step(
        {
            let mut r = step_request(id, 1, "type hello");
            r.blobs = vec![shot.clone()];
            r
        },
        LIMITS,
    )
    .unwrap();
    let artifact = ufo_proto::v1::ArtifactRef {
        id: shot.sha256.clone(),
        session_id: id.to_string(),
        step: 1,
        kind: ArtifactKind::CleanScreenshot.into(),
        content_type: "image/png".into(),
        size: 4,
        metadata: Some(ufo_proto::json::to_struct(json!({"width": 2, "height": 2})).unwrap()),
    };
    let done = store.record_step(first.clone()).await.unwrap();
    assert!(!done.duplicate);
    let after_first = store.get_session(id).await.unwrap();
    assert_eq!(after_first.last_seq, done.last_seq);
    assert_eq!(after_first.totals.as_ref().unwrap().steps, 1);
    assert_eq!(after_first.totals.as_ref().unwrap().input_tokens, 100);

    let stored = store.get_step(id, 1).await.unwrap();
    let mut expected = first.step.clone();
    expected.artifacts = vec![artifact.clone()];
    assert_eq!(stored, expected);
    assert_eq!(done.step, expected);
    let memory = store.get_memory(id, None).await.unwrap();
    assert_eq!(memory.len(), 1);
    assert_eq!(
        ufo_proto::json::from_optional_struct(memory[0].item.clone()),
        json!({"step": 1, "thought": "type hello"})
    );
    let board = store.get_blackboard(id).await.unwrap();
    assert_eq!(board.trajectories.len(), 1);
    assert_eq!(board.trajectories[0].step, 1);
    // The response carries the entries exactly as stored, so a writer need not read the board again.
    assert_eq!(done.blackboard, board.trajectories);
    let kinds: Vec<i32> = all_events(&*store, id)
        .await
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::TaskCreated as i32,
            EventKind::RoundStarted as i32,
            EventKind::StepStarted as i32,
            EventKind::StepFinished as i32
        ]
    );

    // Identical again: nothing written.
    let again = store.record_step(first.clone()).await.unwrap();
    assert!(again.duplicate);
    assert!(again.blackboard.is_empty(), "a duplicate wrote nothing");
    assert_eq!(again.last_seq, done.last_seq);
    assert_eq!(again.step, expected);
    let after_again = store.get_session(id).await.unwrap();
    assert_eq!(after_again.totals, after_first.totals);
    assert_eq!(after_again.last_seq, after_first.last_seq);
    assert_eq!(
        store.get_blackboard(id).await.unwrap().trajectories.len(),
        1
    );

    // Different content: refused, nothing written.
    let conflict = store.record_step(record(id, 1, "something else")).await;
    assert!(
        matches!(conflict, Err(StoreError::AlreadyExists(_))),
        "{conflict:?}"
    );
    assert_eq!(store.get_session(id).await.unwrap().last_seq, done.last_seq);

    // A failing step leaves no trace: a blob the blob store does not hold refuses the whole step.
    let mut broken = record(id, 2, "second");
    broken.artifacts = validate::record_step(
        {
            let mut r = step_request(id, 2, "second");
            r.blobs = vec![ufo_proto::v1::StepBlob {
                sha256: "ab".repeat(32),
                ..shot.clone()
            }];
            r
        },
        LIMITS,
    )
    .unwrap()
    .artifacts;
    assert!(matches!(
        store.record_step(broken).await,
        Err(StoreError::FailedPrecondition(_))
    ));
    assert!(matches!(
        store.get_step(id, 2).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.get_memory(id, None).await.unwrap().len(), 1);
    assert_eq!(store.get_session(id).await.unwrap().last_seq, done.last_seq);

    // The next step's entries continue each kind's indices, as returned and as stored.
    let mut second = record(id, 2, "second");
    second
        .blackboard
        .push(ufo_session::store::NewBlackboardEntry {
            kind: ufo_proto::v1::BlackboardKind::Request,
            value: json!({"request": "then save it"}),
            artifact_id: None,
        });
    second.blackboard.push(second.blackboard[0].clone());
    let second = store.record_step(second).await.unwrap();
    let board = store.get_blackboard(id).await.unwrap();
    let mut stored: Vec<_> = board
        .trajectories
        .iter()
        .chain(&board.requests)
        .filter(|e| e.step == 2)
        .cloned()
        .collect();
    stored.sort_by_key(|e| (e.kind, e.index));
    let mut returned = second.blackboard.clone();
    returned.sort_by_key(|e| (e.kind, e.index));
    assert_eq!(returned, stored);
    assert_eq!(
        returned
            .iter()
            .map(|e| (e.kind, e.index))
            .collect::<Vec<_>>(),
        [
            (ufo_proto::v1::BlackboardKind::Request as i32, 0),
            (ufo_proto::v1::BlackboardKind::Trajectory as i32, 1),
            (ufo_proto::v1::BlackboardKind::Trajectory as i32, 2),
        ]
    );

    // Unknown session, round not running.
    assert!(matches!(
        store.record_step(record(Uuid::new_v4(), 1, "x")).await,
        Err(StoreError::NotFound(_))
    ));
    let mut later_round = record(id, 3, "x");
    later_round.step.round = 2;
    assert!(matches!(
        store.record_step(later_round).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn rounds_blackboard_and_artifacts(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    store.record_step(record(id, 1, "one")).await.unwrap();
    let round = store
        .finish_round(RoundEnd {
            id,
            number: 1,
            status: RoundStatus::Finished,
            result: "done".into(),
            lease_owner: None,
        })
        .await
        .unwrap();
    assert_eq!(round.steps, 1);
    assert_eq!(round.status, RoundStatus::Finished as i32);
    assert!(matches!(
        store.record_step(record(id, 2, "late")).await,
        Err(StoreError::FailedPrecondition(_))
    ));
    finish(&*store, id).await;
    // A follow-up request reopens the session in a new round.
    let second = store.add_round(id, "now print it".into()).await.unwrap();
    assert_eq!(second.number, 2);
    let reopened = store.get_session(id).await.unwrap();
    assert_eq!(reopened.status, SessionStatus::Queued as i32);
    assert_eq!(reopened.rounds, 2);
    assert!(matches!(
        store.add_round(id, "third".into()).await,
        Err(StoreError::FailedPrecondition(_))
    ));
    assert_eq!(store.list_rounds(id).await.unwrap().len(), 2);

    // Images keep their metadata; indices are per kind.
    let desktop = put_blob(
        &*store,
        ArtifactKind::DesktopScreenshot,
        &[9; 1000],
        json!({"application": "mousepad"}),
    )
    .await;
    let image = store
        .add_artifact(new_artifact(id, 1, desktop.clone()))
        .await
        .unwrap();
    let same_bytes = store
        .add_artifact(new_artifact(id, 1, desktop.clone()))
        .await
        .unwrap();
    assert_eq!(image, same_bytes);
    assert_eq!(image.size, 1000);
    assert_eq!(
        ufo_proto::json::from_optional_struct(image.metadata.clone()),
        json!({"application": "mousepad"})
    );
    // The same reference put again with other metadata: the stored one stands and is returned.
    let again = store
        .add_artifact(new_artifact(
            id,
            1,
            ufo_proto::v1::StepBlob {
                content_type: "image/jpeg".into(),
                metadata: Some(
                    ufo_proto::json::to_struct(json!({"application": "other"})).unwrap(),
                ),
                ..desktop.clone()
            },
        ))
        .await
        .unwrap();
    assert_eq!(again, image);
    // No session, no artifact.
    let orphan = store
        .add_artifact(new_artifact(Uuid::new_v4(), 1, desktop.clone()))
        .await;
    assert!(matches!(orphan, Err(StoreError::NotFound(_))), "{orphan:?}");
    // A blob never put: refused, nothing referenced.
    let unknown = store
        .add_artifact(new_artifact(
            id,
            1,
            ufo_proto::v1::StepBlob {
                sha256: "cd".repeat(32),
                ..desktop.clone()
            },
        ))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::FailedPrecondition(_))),
        "{unknown:?}"
    );
    let (entries, last_seq) = store
        .append_blackboard(
            id,
            vec![
                NewBlackboardEntry {
                    kind: BlackboardKind::Image,
                    value: json!({"saving_reason": "the chart"}),
                    artifact_id: Some(image.id.clone()),
                },
                NewBlackboardEntry {
                    kind: BlackboardKind::Question,
                    value: json!({"question": "which file?", "answer": "report.txt"}),
                    artifact_id: None,
                },
                NewBlackboardEntry {
                    kind: BlackboardKind::Question,
                    value: json!({"question": "save?", "answer": "yes"}),
                    artifact_id: None,
                },
            ],
            vec![NewEvent {
                kind: EventKind::QuestionAnswered,
                payload: json!({}),
                step: 0,
                round: 2,
            }],
        )
        .await
        .unwrap();
    assert_eq!(
        entries.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![0, 0, 1]
    );
    assert_eq!(last_seq, store.get_session(id).await.unwrap().last_seq);
    let board = store.get_blackboard(id).await.unwrap();
    assert_eq!(board.questions.len(), 2);
    assert_eq!(board.images[0].artifact_id, image.id);
    assert_eq!(
        ufo_proto::json::from_optional_struct(board.images[0].value.clone()),
        json!({"saving_reason": "the chart"})
    );
    let fetched = store
        .get_artifact(ArtifactKey::Id(image.id.clone()))
        .await
        .unwrap();
    assert_eq!(fetched.data, vec![9; 1000]);
    let by_place = store
        .get_artifact(ArtifactKey::Place {
            session_id: id,
            step: 1,
            kind: ArtifactKind::DesktopScreenshot,
        })
        .await
        .unwrap();
    assert_eq!(by_place.r#ref, fetched.r#ref);
    assert!(matches!(
        store.get_artifact(ArtifactKey::Id("00".repeat(32))).await,
        Err(StoreError::NotFound(_))
    ));
    assert_gap_free(&all_events(&*store, id).await);
}

pub async fn cancel_and_status(store: Arc<dyn Store>) {
    let queued = session(&*store).await;
    let cancelled = store
        .request_cancel(queued, "changed my mind".into())
        .await
        .unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled as i32);
    assert!(
        store
            .claim_task("w".into(), Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    let kinds: Vec<i32> = all_events(&*store, queued)
        .await
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        &kinds[kinds.len() - 2..],
        &[
            EventKind::CancelRequested as i32,
            EventKind::TaskCancelled as i32
        ]
    );
    assert!(matches!(
        store
            .set_session_status(StatusChange {
                id: queued,
                status: SessionStatus::Running,
                result: String::new(),
                lease_owner: None,
            })
            .await,
        Err(StoreError::FailedPrecondition(_))
    ));

    let running = session(&*store).await;
    store
        .claim_task("w".into(), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let asked = store.request_cancel(running, String::new()).await.unwrap();
    assert_eq!(asked.status, SessionStatus::Running as i32);
    assert!(asked.cancel_requested);
    let lease = store
        .renew_lease(running, "w".into(), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        lease.cancel_requested,
        "the worker learns about the cancel on renewal"
    );
    assert!(matches!(
        store
            .set_session_status(StatusChange {
                id: running,
                status: SessionStatus::Waiting,
                result: String::new(),
                lease_owner: Some("other".into()),
            })
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    let ended = store
        .set_session_status(StatusChange {
            id: running,
            status: SessionStatus::Cancelled,
            result: "cancelled".into(),
            lease_owner: Some("w".into()),
        })
        .await
        .unwrap();
    assert_eq!(ended.lease_owner, "");
    assert_eq!(
        store.list_rounds(running).await.unwrap()[0].status,
        RoundStatus::Cancelled as i32
    );
}

/// Requests at the largest batch the service can be configured to take (`--max-batch` up to 100,000)
/// are stored whole, on both databases: multi-row inserts stay within each database's bound-value limit
/// (SQLite 32,766, Postgres 65,535) whatever the batch.
pub async fn the_largest_batches_are_stored_whole(store: Arc<dyn Store>) {
    const EVENTS: usize = 10_000;
    const ARTIFACTS: usize = 1_100;
    let id = session(&*store).await;
    let drafts = || -> Vec<NewEvent> {
        (0..EVENTS)
            .map(|i| NewEvent {
                kind: EventKind::StepStarted,
                payload: json!({"i": i}),
                step: 0,
                round: 1,
            })
            .collect()
    };
    let appended = store.append_events(id, drafts(), None).await.unwrap();
    let seqs: Vec<u64> = appended.iter().map(|e| e.seq).collect();
    let first = seqs[0];
    assert!(
        seqs.iter().zip(first..).all(|(seq, want)| *seq == want),
        "one run of sequence numbers"
    );
    assert_eq!(seqs.len(), EVENTS);

    // A batch that wakes a parked session goes through the statements on Postgres too.
    let mut answered = drafts();
    answered[0].kind = EventKind::QuestionAnswered;
    let appended = store.append_events(id, answered, None).await.unwrap();
    assert_eq!(appended.len(), EVENTS);
    assert_eq!(appended[EVENTS - 1].seq, first + 2 * EVENTS as u64 - 1);

    let mut request = step_request(id, 1, "many artifacts");
    for i in 0..ARTIFACTS {
        let data = format!("pixels {i}");
        request.blobs.push(
            put_blob(
                &*store,
                ArtifactKind::CleanScreenshot,
                data.as_bytes(),
                json!({"width": 2, "height": 1}),
            )
            .await,
        );
    }
    let step_events: Vec<_> = (0..EVENTS)
        .map(|i| ufo_proto::v1::EventDraft {
            kind: EventKind::StepFinished.into(),
            payload: Some(ufo_proto::json::to_struct(json!({"i": i})).unwrap()),
            step: 1,
            round: 1,
        })
        .collect();
    request.events = step_events;
    let limits = validate::Limits {
        max_batch: 100_000,
        ..LIMITS
    };
    let done = store
        .record_step(validate::record_step(request, limits).unwrap())
        .await
        .unwrap();
    assert_eq!(done.step.artifacts.len(), ARTIFACTS);
    assert_eq!(
        done.last_seq,
        first + 3 * EVENTS as u64,
        "the step's events follow the batches, with the step's own event"
    );
    let stored = store.get_step(id, 1).await.unwrap();
    assert_eq!(
        stored.artifacts.len(),
        ARTIFACTS,
        "every artifact row is stored"
    );
    let mut read = 0;
    let mut from = first;
    loop {
        let page = store.read_events(id, from, 1_000).await.unwrap();
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        read += page.len();
    }
    assert_eq!(read, 3 * EVENTS + 1, "every event is stored");
}

/// A step referencing `artifacts` (kind, bytes), each put into the store's blob store first.
async fn with_artifacts(
    store: &dyn Store,
    id: Uuid,
    n: u64,
    thought: &str,
    artifacts: &[(ArtifactKind, &[u8])],
) -> ufo_session::store::StepRecord {
    let mut request = step_request(id, n, thought);
    for (kind, data) in artifacts {
        request
            .blobs
            .push(put_blob(store, *kind, data, json!({"width": 2, "height": 1})).await);
    }
    validate::record_step(request, LIMITS).unwrap()
}

pub async fn record_step_stores_its_artifacts(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let clean: &[u8] = b"clean pixels";
    let annotated: &[u8] = b"annotated pixels";
    let desktop: &[u8] = b"desktop pixels";
    let first = with_artifacts(
        &*store,
        id,
        1,
        "look",
        &[
            (ArtifactKind::CleanScreenshot, clean),
            (ArtifactKind::AnnotatedScreenshot, annotated),
            (ArtifactKind::DesktopScreenshot, desktop),
        ],
    )
    .await;
    let done = store.record_step(first.clone()).await.unwrap();
    assert!(!done.duplicate);
    let stored = store.get_step(id, 1).await.unwrap();
    assert_eq!(done.step, stored, "the response lists what is stored");
    let mut kinds: Vec<(i32, u64, String)> = stored
        .artifacts
        .iter()
        .map(|a| (a.kind, a.size, a.content_type.clone()))
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            (ArtifactKind::CleanScreenshot as i32, 12, "image/png".into()),
            (
                ArtifactKind::AnnotatedScreenshot as i32,
                16,
                "image/png".into()
            ),
            (
                ArtifactKind::DesktopScreenshot as i32,
                14,
                "image/png".into()
            ),
        ]
    );
    let fetched = store
        .get_artifact(ArtifactKey::Place {
            session_id: id,
            step: 1,
            kind: ArtifactKind::AnnotatedScreenshot,
        })
        .await
        .unwrap();
    assert_eq!(fetched.data.as_ref(), annotated);
    let meta = fetched.r#ref.unwrap().metadata;
    assert_eq!(
        ufo_proto::json::from_optional_struct(meta),
        json!({"width": 2, "height": 1}),
        "the metadata survives"
    );
    assert_eq!(
        store
            .get_artifact(ArtifactKey::Id(first.artifacts[0].blob.sha256.clone()))
            .await
            .unwrap()
            .data
            .as_ref(),
        clean
    );

    // Identical again: a duplicate, nothing more stored.
    let again = store.record_step(first.clone()).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(store.get_step(id, 1).await.unwrap(), stored);
    assert_eq!(store.get_session(id).await.unwrap().last_seq, done.last_seq);

    // Other bytes under the same step: the content hash covers them, so it is a conflict.
    let other = with_artifacts(
        &*store,
        id,
        1,
        "look",
        &[
            (ArtifactKind::CleanScreenshot, b"other pixels"),
            (ArtifactKind::AnnotatedScreenshot, annotated),
            (ArtifactKind::DesktopScreenshot, desktop),
        ],
    )
    .await;
    assert_ne!(other.content_hash, first.content_hash);
    let conflict = store.record_step(other.clone()).await;
    assert!(
        matches!(conflict, Err(StoreError::AlreadyExists(_))),
        "{conflict:?}"
    );
    assert!(
        matches!(
            store
                .get_artifact(ArtifactKey::Id(other.artifacts[0].blob.sha256.clone()))
                .await,
            Err(StoreError::NotFound(_))
        ),
        "a refused step references no blob"
    );

    // A step refused for another reason (its round does not exist) stores nothing either.
    let mut refused = with_artifacts(
        &*store,
        id,
        2,
        "x",
        &[(ArtifactKind::CleanScreenshot, b"never")],
    )
    .await;
    refused.step.round = 2;
    assert!(matches!(
        store.record_step(refused.clone()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .get_artifact(ArtifactKey::Id(refused.artifacts[0].blob.sha256.clone()))
            .await,
        Err(StoreError::NotFound(_))
    ));

    // The same screenshot in the next step: referenced again, its bytes stored once.
    let second = with_artifacts(
        &*store,
        id,
        2,
        "unchanged",
        &[(ArtifactKind::CleanScreenshot, clean)],
    )
    .await;
    let second = store.record_step(second).await.unwrap();
    assert_eq!(second.step.artifacts.len(), 1);
    assert_eq!(
        second.step.artifacts[0].id,
        stored_id(&stored, ArtifactKind::CleanScreenshot)
    );
    assert_eq!(second.step.artifacts[0].step, 2);

    // Identical bytes under two kinds in one step (an annotated copy with no marks): two references.
    let third = with_artifacts(
        &*store,
        id,
        3,
        "nothing to mark",
        &[
            (ArtifactKind::CleanScreenshot, b"plain"),
            (ArtifactKind::AnnotatedScreenshot, b"plain"),
        ],
    )
    .await;
    let third = store.record_step(third).await.unwrap();
    let mut kinds: Vec<i32> = third.step.artifacts.iter().map(|a| a.kind).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            ArtifactKind::CleanScreenshot as i32,
            ArtifactKind::AnnotatedScreenshot as i32
        ]
    );
    assert_eq!(third.step.artifacts[0].id, third.step.artifacts[1].id);
}

fn stored_id(step: &ufo_proto::v1::Step, kind: ArtifactKind) -> String {
    step.artifacts
        .iter()
        .find(|a| a.kind == kind as i32)
        .map(|a| a.id.clone())
        .unwrap_or_default()
}

/// Steps of many sessions recorded at once (on Postgres, grouped into shared commits): each keeps its own
/// artifacts, and the one refused stores none.
pub async fn concurrent_steps_with_artifacts(store: Arc<dyn Store>) {
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(session(&*store).await);
    }
    let shared: &[u8] = b"the same desktop in every session";
    // The blobs are put first (as the runner does at capture), then every step is recorded at once.
    let mut records = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let own = format!("window {i}").into_bytes();
        let mut record = with_artifacts(
            &*store,
            *id,
            1,
            "look",
            &[
                (ArtifactKind::CleanScreenshot, &own),
                (ArtifactKind::DesktopScreenshot, shared),
            ],
        )
        .await;
        if i == 5 {
            record.step.round = 9;
        }
        records.push(record);
    }
    let writes = records.into_iter().map(|record| {
        let store = Arc::clone(&store);
        async move {
            (
                record.artifacts[0].blob.sha256.clone(),
                store.record_step(record).await,
            )
        }
    });
    let results = futures::future::join_all(writes).await;
    for (i, (own, result)) in results.into_iter().enumerate() {
        if i == 5 {
            assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
            assert!(matches!(
                store.get_artifact(ArtifactKey::Id(own)).await,
                Err(StoreError::NotFound(_))
            ));
            continue;
        }
        let done = result.unwrap();
        assert_eq!(done.step.artifacts.len(), 2, "step of session {i}");
        assert_eq!(stored_id(&done.step, ArtifactKind::CleanScreenshot), own);
        assert_eq!(
            store.get_step(ids[i], 1).await.unwrap().artifacts,
            done.step.artifacts
        );
        let bytes = store.get_artifact(ArtifactKey::Id(own)).await.unwrap().data;
        assert_eq!(bytes.as_ref(), format!("window {i}").as_bytes());
    }
}
