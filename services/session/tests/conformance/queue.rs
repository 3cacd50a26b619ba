//! The task queue: claims, leases, renewal, fencing, requeue.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use ufo_proto::v1::{BlackboardKind, Event, EventKind, ParkReason, RoundStatus, SessionStatus};
use ufo_session::store::{NewBlackboardEntry, NewEvent, ParkTask, Store, StoreError};
use uuid::Uuid;

use super::*;

pub async fn leases_expire_and_renewals_hold(store: Arc<dyn Store>) {
    let expiring = session(&*store).await;
    let renewed = session(&*store).await;
    let short = Duration::from_millis(300);
    let a1 = store.claim_task("a".into(), short).await.unwrap().unwrap();
    let a2 = store.claim_task("a".into(), short).await.unwrap().unwrap();
    assert_eq!(a1.id, expiring.to_string(), "oldest first");
    assert_eq!(a2.id, renewed.to_string());
    assert_eq!(a1.status, SessionStatus::Running as i32);
    assert!(store.claim_task("b".into(), short).await.unwrap().is_none());
    store
        .renew_lease(renewed, "a".into(), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(
        store.renew_lease(renewed, "b".into(), short).await,
        Err(StoreError::LeaseLost(_))
    ));

    // Worker "a" stops renewing `expiring`: "b" gets it once the lease is over, and only it.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let taken = loop {
        if let Some(s) = store
            .claim_task("b".into(), Duration::from_secs(60))
            .await
            .unwrap()
        {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "expired lease never reclaimed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(taken.id, expiring.to_string());
    assert_eq!(taken.lease_owner, "b");
    assert!(
        store.claim_task("c".into(), short).await.unwrap().is_none(),
        "the renewed lease still holds"
    );
    // "a" is fenced out of the session it lost.
    assert!(matches!(
        store.renew_lease(expiring, "a".into(), short).await,
        Err(StoreError::LeaseLost(_))
    ));
    let mut fenced = record(expiring, 1, "stale");
    fenced.lease_owner = Some("a".into());
    assert!(matches!(
        store.record_step(fenced).await,
        Err(StoreError::LeaseLost(_))
    ));
    let mut owned = record(expiring, 1, "fresh");
    owned.lease_owner = Some("b".into());
    store.record_step(owned).await.unwrap();

    // Release with requeue puts it back in the queue for anyone.
    store
        .release_task(expiring, "b".into(), true)
        .await
        .unwrap();
    assert!(matches!(
        store.release_task(expiring, "b".into(), true).await,
        Err(StoreError::LeaseLost(_))
    ));
    let again = store.claim_task("c".into(), short).await.unwrap().unwrap();
    assert_eq!(again.id, expiring.to_string());
    assert!(matches!(
        store.renew_lease(Uuid::new_v4(), "c".into(), short).await,
        Err(StoreError::NotFound(_))
    ));
}

/// An append under a lease (the agent's intent before it acts) writes only while that worker holds
/// the session: another worker's gets `LeaseLost`, a missing session `NotFound`, and neither writes an
/// event or moves the sequence, whatever the batch's size (more rows than one insert takes too).
pub async fn appends_are_fenced_by_the_lease(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let claimed = store
        .claim_task("a".into(), Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, id.to_string());
    let before = store.read_events(id, 1, 100_000).await.unwrap();
    let last = before.last().map_or(0, |e| e.seq);
    let intents = |n: usize| -> Vec<NewEvent> {
        (0..n)
            .map(|i| NewEvent {
                kind: EventKind::StepStarted,
                payload: json!({"intent": true, "i": i}),
                step: 1,
                round: 1,
            })
            .collect()
    };
    for n in [1, 1_500] {
        assert!(
            matches!(
                store.append_events(id, intents(n), Some("b".into())).await,
                Err(StoreError::LeaseLost(_))
            ),
            "{n} events under another worker's lease"
        );
        assert!(
            matches!(
                store
                    .append_events(Uuid::new_v4(), intents(n), Some("a".into()))
                    .await,
                Err(StoreError::NotFound(_))
            ),
            "{n} events to no session, under a lease"
        );
        assert!(
            matches!(
                store.append_events(Uuid::new_v4(), intents(n), None).await,
                Err(StoreError::NotFound(_))
            ),
            "{n} events to no session"
        );
    }
    assert_eq!(
        store.read_events(id, 1, 100_000).await.unwrap(),
        before,
        "refused appends write nothing"
    );
    let mine = store
        .append_events(id, intents(1_500), Some("a".into()))
        .await
        .unwrap();
    assert_eq!(mine.len(), 1_500);
    assert_eq!(mine[0].seq, last + 1, "numbered right after the last event");
    let unfenced = store.append_events(id, intents(2), None).await.unwrap();
    assert_eq!(unfenced[0].seq, last + 1_501);
    let all = store.read_events(id, 1, 100_000).await.unwrap();
    assert_gap_free(&all);
    assert_eq!(all.len() as u64, last + 1_502);
    assert_eq!(
        store.get_session(id).await.unwrap().last_seq,
        last + 1_502,
        "the session's sequence counts every stored event"
    );
}

pub async fn concurrent_claims_never_share(store: Arc<dyn Store>) {
    for _ in 0..12 {
        session(&*store).await;
    }
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(s) = store
                .claim_task(format!("w{w}"), Duration::from_secs(60))
                .await
                .unwrap()
            {
                mine.push(s.id);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!(count, 12);
    assert_eq!(all.len(), 12, "a session was claimed twice");
}

fn park(id: Uuid, worker: &str, reason: ParkReason, seen_seq: u64, until: Duration) -> ParkTask {
    ParkTask {
        id,
        worker: worker.into(),
        reason,
        until: chrono::Utc::now() + chrono::Duration::from_std(until).unwrap(),
        seen_seq,
    }
}

/// Appends decision `kind` with a blackboard entry (one transaction) to session `id`.
async fn decided_with_a_board_entry(store: &dyn Store, id: Uuid, kind: EventKind) {
    store
        .append_blackboard(
            id,
            vec![NewBlackboardEntry {
                kind: BlackboardKind::Question,
                value: json!({"question": "which?", "answer": "blue", "answers": 0}),
                artifact_id: None,
            }],
            vec![answered(kind)],
        )
        .await
        .unwrap();
}

fn answered(kind: EventKind) -> NewEvent {
    NewEvent {
        kind,
        payload: json!({"step": 1, "id": "q-1", "answer": "blue"}),
        step: 1,
        round: 0,
    }
}

/// A session waiting for a person gives up its lease (parked): the queue goes on without it; an answer
/// or a decision queues it again in its old place, and so does its timeout; an answer that arrived before
/// the park refuses it; a parked session is cancelled at once; queue places follow the claim order.
pub async fn parked_sessions_free_the_queue_until_a_person_acts(store: Arc<dyn Store>) {
    let long = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    let asking = session(&*store).await;
    let holding = session(&*store).await;
    let later = session(&*store).await;
    for (place, id) in (1..).zip([asking, holding, later]) {
        assert_eq!(store.get_session(id).await.unwrap().queue_place, place);
    }
    let (listed, _) = store.list_sessions(None, None, None, 10).await.unwrap();
    let places: Vec<u32> = listed.iter().map(|s| s.queue_place).collect();
    assert_eq!(places, [3, 2, 1], "newest first, each with its place");

    let claimed = store.claim_task("w".into(), long).await.unwrap().unwrap();
    assert_eq!(claimed.id, asking.to_string());
    assert_eq!(store.get_session(asking).await.unwrap().queue_place, 0);
    assert_eq!(store.get_session(later).await.unwrap().queue_place, 2);

    // Only the lease holder parks, and only for a question or an approval.
    let seen = claimed.last_seq;
    assert!(matches!(
        store
            .park_task(park(asking, "other", ParkReason::Question, seen, hour))
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    assert!(matches!(
        store
            .park_task(park(asking, "w", ParkReason::Unspecified, seen, hour))
            .await,
        Err(StoreError::FailedPrecondition(_))
    ));
    assert!(
        store
            .park_task(park(asking, "w", ParkReason::Question, seen, hour))
            .await
            .unwrap()
    );
    let parked = store.get_session(asking).await.unwrap();
    assert_eq!(parked.status, SessionStatus::Waiting as i32);
    assert_eq!(parked.parked_for, ParkReason::Question as i32);
    assert!(parked.lease_owner.is_empty() && parked.parked_until.is_some());
    let events = store.read_events(asking, 1, 100).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::TaskParked as i32);
    assert!(matches!(
        store.renew_lease(asking, "w".into(), long).await,
        Err(StoreError::LeaseLost(_))
    ));

    // The queue goes on without the parked session.
    let next = store.claim_task("w".into(), long).await.unwrap().unwrap();
    assert_eq!(next.id, holding.to_string());
    // A decision written before the park refuses it: the worker reads it and goes on.
    store
        .append_events(holding, vec![answered(EventKind::ActionApproved)], None)
        .await
        .unwrap();
    assert!(
        !store
            .park_task(park(
                holding,
                "w",
                ParkReason::Approval,
                next.last_seq,
                hour
            ))
            .await
            .unwrap()
    );
    let still = store.get_session(holding).await.unwrap();
    assert_eq!(still.status, SessionStatus::Running as i32);
    assert_eq!(still.lease_owner, "w");
    assert_eq!(still.parked_for, ParkReason::Unspecified as i32);
    let third = store.claim_task("w".into(), long).await.unwrap().unwrap();
    assert_eq!(third.id, later.to_string());
    assert!(
        store.claim_task("w".into(), long).await.unwrap().is_none(),
        "a parked session is not claimable"
    );

    // The answer (an event) queues it again, ahead of sessions queued after it.
    store
        .append_events(asking, vec![answered(EventKind::QuestionAnswered)], None)
        .await
        .unwrap();
    let woken = store.get_session(asking).await.unwrap();
    assert_eq!(woken.status, SessionStatus::Queued as i32);
    assert_eq!(woken.parked_for, ParkReason::Unspecified as i32);
    assert_eq!(woken.queue_place, 1);
    let resumed = store.claim_task("v".into(), long).await.unwrap().unwrap();
    assert_eq!(resumed.id, asking.to_string());
    assert_eq!(resumed.status, SessionStatus::Running as i32);

    // A decision written with a blackboard entry wakes it the same way.
    let seen = store.get_session(asking).await.unwrap().last_seq;
    assert!(
        store
            .park_task(park(asking, "v", ParkReason::Approval, seen, hour))
            .await
            .unwrap()
    );
    decided_with_a_board_entry(&*store, asking, EventKind::ActionRejected).await;
    assert_eq!(
        store.get_session(asking).await.unwrap().status,
        SessionStatus::Queued as i32
    );
    let resumed = store.claim_task("v".into(), long).await.unwrap().unwrap();
    assert_eq!(resumed.id, asking.to_string());

    // Nobody answers: the session is claimable once its wait times out, still WAITING (the worker applies
    // the timeout fallback).
    let seen = store.get_session(later).await.unwrap().last_seq;
    assert!(
        store
            .park_task(park(
                later,
                "w",
                ParkReason::Question,
                seen,
                Duration::from_millis(300)
            ))
            .await
            .unwrap()
    );
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let timed_out = loop {
        if let Some(s) = store.claim_task("x".into(), long).await.unwrap() {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a timed-out park never claimable"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(timed_out.id, later.to_string());
    assert_eq!(timed_out.status, SessionStatus::Waiting as i32);
    assert_eq!(timed_out.lease_owner, "x");
    assert_eq!(timed_out.parked_for, ParkReason::Unspecified as i32);

    // A parked session has no runner to see a cancel request: it is cancelled at once.
    let seen = timed_out.last_seq;
    assert!(
        store
            .park_task(park(later, "x", ParkReason::Question, seen, hour))
            .await
            .unwrap()
    );
    let cancelled = store
        .request_cancel(later, "no longer needed".into())
        .await
        .unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled as i32);
    assert_eq!(cancelled.parked_for, ParkReason::Unspecified as i32);
    // An ended session cannot be parked.
    assert!(
        store
            .park_task(park(later, "x", ParkReason::Question, 0, hour))
            .await
            .is_err()
    );
}

/// A direct session (an MCP client's own desktop calls) runs from its creation without a lease, takes
/// steps without one, and no claim ever returns it, however long it stays RUNNING; it takes no follow-up
/// request; cancelling it ends it at once; creating its id again as a task is refused.
pub async fn direct_sessions_are_never_claimed(store: Arc<dyn Store>) {
    let direct = Uuid::new_v4();
    let created = store
        .create_session(ufo_session::store::NewSession {
            id: direct,
            request: "desktop calls of tests on desk".into(),
            config: json!({"executor": "desk"}),
            owner: "tests".into(),
            kind: ufo_proto::v1::SessionKind::Direct,
            desktop: None,
            lease: None,
        })
        .await
        .unwrap();
    assert_eq!(created.kind, ufo_proto::v1::SessionKind::Direct as i32);
    assert_eq!(created.status, SessionStatus::Running as i32);
    assert!(created.lease_owner.is_empty());
    assert_eq!(created.queue_place, 0);
    let rounds = store.list_rounds(direct).await.unwrap();
    assert_eq!(
        rounds[0].status,
        ufo_proto::v1::RoundStatus::Running as i32,
        "round 1 runs at once"
    );
    // Steps go in without a lease, as the agent records each call.
    store.record_step(record(direct, 1, "click")).await.unwrap();
    store.record_step(record(direct, 2, "type")).await.unwrap();
    assert_eq!(store.list_steps(direct, 1, 10).await.unwrap().len(), 2);

    // A task queued after it is claimed; the direct session never is (a RUNNING session without a lease
    // would be claimable if it were a task).
    let task = session(&*store).await;
    let claimed = store
        .claim_task("w".into(), Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, task.to_string());
    assert_eq!(claimed.kind, ufo_proto::v1::SessionKind::Task as i32);
    assert!(
        store
            .claim_task("w".into(), Duration::from_millis(1))
            .await
            .unwrap()
            .is_none(),
        "a direct session was claimed"
    );
    let read = store.get_session(direct).await.unwrap();
    assert_eq!(read.kind, ufo_proto::v1::SessionKind::Direct as i32);
    assert_eq!(read.status, SessionStatus::Running as i32);
    assert!(read.lease_owner.is_empty());

    // The same id again as a task: refused, not silently the direct session.
    let again = store
        .create_session(ufo_session::store::NewSession {
            id: direct,
            request: "desktop calls of tests on desk".into(),
            config: json!({}),
            owner: "tests".into(),
            kind: ufo_proto::v1::SessionKind::Task,
            desktop: None,
            lease: None,
        })
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists(_))),
        "{again:?}"
    );
    assert!(matches!(
        store.add_round(direct, "more".into()).await,
        Err(StoreError::FailedPrecondition(_))
    ));

    // Nobody runs it, so a cancel ends it at once.
    let cancelled = store.request_cancel(direct, "idle".into()).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled as i32);
    assert!(
        store
            .claim_task("w".into(), Duration::from_millis(1))
            .await
            .unwrap()
            .is_none()
    );
}

/// Ends expired direct sessions until `want` is among them (its lease lapses meanwhile); every session
/// ended on the way.
async fn sweep_until(
    store: &dyn Store,
    want: Uuid,
    unleased_idle: Option<Duration>,
) -> Vec<ufo_proto::v1::Session> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut ended = Vec::new();
    loop {
        ended.extend(
            store
                .end_expired_direct("agent-b".into(), 100, unleased_idle)
                .await
                .unwrap(),
        );
        if ended.iter().any(|s| s.id == want.to_string()) {
            return ended;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the direct session {want} was never ended: {ended:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A direct session is leased to the agent that made it from its creation; once the lease lapses (the
/// agent went away) any replica ends it — FAILED, its running round too, TASK_FAILED, a result naming
/// the lapsed lease and who ended it — exactly once, with every step kept. A renewed one, one ended by
/// its agent and a task whose lease lapsed are left alone; one without a lease (an agent of before
/// direct leases) is ended only when asked to, once it has not changed for that long.
pub async fn expired_direct_sessions_end_with_the_reason(store: Arc<dyn Store>) {
    let direct = |lease: Option<Duration>| ufo_session::store::NewSession {
        id: Uuid::new_v4(),
        request: "desktop calls of tests on desk".into(),
        config: json!({"executor": "desk"}),
        owner: "tests".into(),
        kind: ufo_proto::v1::SessionKind::Direct,
        desktop: None,
        lease: lease.map(|duration| ufo_session::store::NewLease {
            owner: "agent-a".into(),
            duration,
        }),
    };
    let short = Some(Duration::from_millis(300));
    let gone = store.create_session(direct(short)).await.unwrap();
    assert_eq!(gone.status, SessionStatus::Running as i32);
    assert_eq!(gone.lease_owner, "agent-a");
    assert!(gone.lease_expires_at.is_some());
    let gone_id = Uuid::parse_str(&gone.id).unwrap();
    let kept = store.create_session(direct(short)).await.unwrap();
    let kept_id = Uuid::parse_str(&kept.id).unwrap();
    let closed = store.create_session(direct(short)).await.unwrap();
    let closed_id = Uuid::parse_str(&closed.id).unwrap();
    let task = session(&*store).await;
    store
        .claim_task("runner".into(), Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();

    // The agent records under its lease; another worker is fenced out.
    let mut step = record(gone_id, 1, "click");
    step.lease_owner = Some("agent-a".into());
    store.record_step(step).await.unwrap();
    let mut fenced = record(gone_id, 2, "stale");
    fenced.lease_owner = Some("agent-b".into());
    assert!(matches!(
        store.record_step(fenced).await,
        Err(StoreError::LeaseLost(_))
    ));
    // The live agent renews `kept` and ends `closed` itself.
    store
        .renew_lease(kept_id, "agent-a".into(), Duration::from_secs(60))
        .await
        .unwrap();
    store
        .set_session_status(ufo_session::store::StatusChange {
            id: closed_id,
            status: SessionStatus::Finished,
            result: "ended by end_direct_session".into(),
            lease_owner: Some("agent-a".into()),
        })
        .await
        .unwrap();

    let ended = sweep_until(&*store, gone_id, None).await;
    assert_eq!(
        ended.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [gone.id.as_str()],
        "only the lapsed direct session is ended"
    );
    let read = store.get_session(gone_id).await.unwrap();
    assert_eq!(read.status, SessionStatus::Failed as i32);
    assert!(read.lease_owner.is_empty());
    for words in [
        "went away",
        "held by agent-a",
        "expired at",
        "1 step(s)",
        "agent-b",
    ] {
        assert!(read.result.contains(words), "{words:?}: {}", read.result);
    }
    assert_eq!(ended[0].result, read.result);
    assert_eq!(
        store.list_rounds(gone_id).await.unwrap()[0].status,
        ufo_proto::v1::RoundStatus::Failed as i32
    );
    let events = all_events(&*store, gone_id).await;
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::TaskFailed as i32);
    assert_eq!(store.list_steps(gone_id, 1, 10).await.unwrap().len(), 1);

    // Ended once; the agent that lost it can neither renew nor record.
    assert!(
        store
            .end_expired_direct("agent-c".into(), 100, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .renew_lease(gone_id, "agent-a".into(), Duration::from_secs(60))
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    let mut late = record(gone_id, 2, "late");
    late.lease_owner = Some("agent-a".into());
    assert!(store.record_step(late).await.is_err());
    let kept = store.get_session(kept_id).await.unwrap();
    assert_eq!(kept.status, SessionStatus::Running as i32);
    assert_eq!(kept.lease_owner, "agent-a");
    assert_eq!(
        store.get_session(closed_id).await.unwrap().status,
        SessionStatus::Finished as i32
    );
    let task = store.get_session(task).await.unwrap();
    assert_eq!(
        task.status,
        SessionStatus::Running as i32,
        "a task is the runners'"
    );

    // Without a lease: left alone unless an idle limit is given, then ended once unchanged that long.
    let legacy = store.create_session(direct(None)).await.unwrap();
    assert!(legacy.lease_owner.is_empty());
    let legacy_id = Uuid::parse_str(&legacy.id).unwrap();
    assert!(
        store
            .end_expired_direct("agent-b".into(), 100, None)
            .await
            .unwrap()
            .is_empty()
    );
    let ended = sweep_until(&*store, legacy_id, Some(Duration::from_millis(200))).await;
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].status, SessionStatus::Failed as i32);
    assert!(ended[0].result.contains("no lease"), "{}", ended[0].result);
}

/// A claim asked to start its session (issue 36) begins the session's first open round in the claim's
/// transaction (ROUND_STARTED right after TASK_CLAIMED) and answers with the session's rounds and
/// whether it is fresh — nothing stored that a runner reads back at a task's start. Fresh at the first
/// claim; not after a release, nor with a step recorded; a running round is not begun again; a later
/// BeginRound (an agent that does not use the start) changes nothing; without `start`, nothing is begun.
pub async fn claims_start_their_session(store: Arc<dyn Store>) {
    let store = &*store;
    let minute = Duration::from_secs(60);
    let kinds = |events: Vec<Event>| {
        events
            .iter()
            .map(|e| EventKind::try_from(e.kind).unwrap())
            .collect::<Vec<_>>()
    };
    let claim = |worker: &'static str, start: bool| async move {
        store
            .claim_task_reaching(worker.into(), minute, None, start)
            .await
            .unwrap()
            .expect("a session is claimable")
    };

    // The first claim: fresh, round 1 begun with it.
    let fresh = wanting(store, None).await;
    let first = claim("w1", true).await;
    assert_eq!(first.session.id, fresh.to_string());
    let start = first.start.expect("the claim was asked to start it");
    assert!(start.fresh, "{start:?}");
    assert_eq!(start.rounds.len(), 1);
    assert_eq!(start.rounds[0].status, RoundStatus::Running as i32);
    assert!(start.rounds[0].started_at.is_some());
    assert_eq!(store.list_rounds(fresh).await.unwrap(), start.rounds);
    assert_eq!(
        kinds(all_events(store, fresh).await),
        [
            EventKind::TaskCreated,
            EventKind::TaskClaimed,
            EventKind::RoundStarted
        ]
    );
    assert_eq!(first.session.last_seq, 3);
    assert_eq!(first.session, store.get_session(fresh).await.unwrap());
    store
        .begin_round(fresh, 1, Some("w1".into()))
        .await
        .unwrap();
    assert_eq!(all_events(store, fresh).await.len(), 3, "begun once");

    // Released back to the queue: claimed again, not fresh, its running round not begun twice.
    store.release_task(fresh, "w1".into(), true).await.unwrap();
    let again = claim("w2", true).await;
    assert_eq!(again.session.id, fresh.to_string());
    let start = again.start.unwrap();
    assert!(!start.fresh, "a release is read back at the start");
    assert_eq!(start.rounds.len(), 1);
    assert_eq!(start.rounds[0].status, RoundStatus::Running as i32);
    assert_eq!(
        kinds(all_events(store, fresh).await)[3..],
        [EventKind::TaskReleased, EventKind::TaskClaimed]
    );
    end(store, fresh, "w2").await;

    // A recorded step (nothing else): not fresh.
    let stepped = session(store).await;
    store
        .record_step(record(stepped, 1, "typed"))
        .await
        .unwrap();
    let claimed = claim("w3", true).await;
    assert_eq!(claimed.session.id, stepped.to_string());
    assert!(
        !claimed.start.unwrap().fresh,
        "a step is read back at the start"
    );
    end(store, stepped, "w3").await;

    // Not asked: nothing begun, no start.
    let plain = wanting(store, None).await;
    let claimed = claim("w4", false).await;
    assert_eq!(claimed.session.id, plain.to_string());
    assert!(claimed.start.is_none());
    assert_eq!(
        store.list_rounds(plain).await.unwrap()[0].status,
        RoundStatus::Pending as i32
    );
}

/// What an idle runner must claim signals the pool (`subscribe_pool`, seen by `replica`: another store
/// on the same database, reached only through Postgres `LISTEN/NOTIFY` there), so it is claimed at once
/// instead of at the runners' next claim interval: a new task; a parked task queued again by an answer
/// (`append_events`) or by a decision written with a blackboard entry (`append_blackboard`).
pub async fn a_new_task_and_a_woken_one_signal_the_pool(
    store: Arc<dyn Store>,
    replica: super::Replica,
) {
    let other = replica().await;
    let mut signals = other.subscribe_pool();
    signals.mark_unchanged();
    let asking = session(&*store).await;
    signalled(&mut signals, "a new task").await;

    claimed_and_parked(&*store, asking, ParkReason::Question).await;
    signals.mark_unchanged();
    store
        .append_events(asking, vec![answered(EventKind::QuestionAnswered)], None)
        .await
        .unwrap();
    signalled(&mut signals, "an answer that queues a parked task again").await;
    assert_eq!(
        store.get_session(asking).await.unwrap().status,
        SessionStatus::Queued as i32
    );

    claimed_and_parked(&*store, asking, ParkReason::Approval).await;
    signals.mark_unchanged();
    decided_with_a_board_entry(&*store, asking, EventKind::ActionApproved).await;
    signalled(
        &mut signals,
        "a decision with a blackboard entry that queues a parked task again",
    )
    .await;
    assert_eq!(
        store.get_session(asking).await.unwrap().status,
        SessionStatus::Queued as i32
    );
}

/// Claims `id`, the only claimable session, and parks it for `reason` for an hour.
async fn claimed_and_parked(store: &dyn Store, id: Uuid, reason: ParkReason) {
    let hour = Duration::from_secs(3600);
    let claimed = store.claim_task("w".into(), hour).await.unwrap().unwrap();
    assert_eq!(claimed.id, id.to_string());
    assert!(
        store
            .park_task(park(id, "w", reason, claimed.last_seq, hour))
            .await
            .unwrap()
    );
}

/// Waits for the pool's next signal, failing with `what` after [`DEADLINE`].
async fn signalled(signals: &mut tokio::sync::watch::Receiver<u64>, what: &str) {
    tokio::time::timeout(DEADLINE, signals.changed())
        .await
        .unwrap_or_else(|_| panic!("{what} signals the pool"))
        .unwrap();
}
