//! The event log under watchers: replay, live follow, resume, concurrency, slow readers.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Barrier;
use ufo_proto::v1::{EventKind, SessionStatus};
use ufo_session::store::{NewEvent, StatusChange, Store};
use ufo_session::watch::{WatchOptions, watch};
use uuid::Uuid;

use super::*;

pub async fn watch_replays_then_follows_and_resumes(store: Arc<dyn Store>, replica: Replica) {
    let id = session(&*store).await;
    for n in 1..=3 {
        store.record_step(record(id, n, "before")).await.unwrap();
    }
    // A watcher on another replica follows live writes made here.
    let other = replica().await;
    let mut rx = watch(Arc::clone(&other), id, 1, OPTIONS);
    let mut got = Vec::new();
    let first_n = 5;
    while got.len() < first_n {
        got.push(rx.recv().await.unwrap().unwrap());
    }
    drop(rx);
    let seen = got.last().unwrap().seq;
    for n in 4..=6 {
        store
            .record_step(record(id, n, "while away"))
            .await
            .unwrap();
    }
    let live = watch(Arc::clone(&other), id, seen + 1, OPTIONS);
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for n in 7..=9 {
                store.record_step(record(id, n, "live")).await.unwrap();
            }
            finish(&*store, id).await;
        })
    };
    got.extend(drain(live).await);
    writer.await.unwrap();
    assert_gap_free(&got);
    assert_eq!(
        got,
        all_events(&*store, id).await,
        "nothing missed, nothing repeated"
    );
    assert_eq!(got.last().unwrap().kind, EventKind::TaskFinished as i32);

    // Resuming after the terminal event ends at once; a replay from 1 ends after it.
    let after = drain(watch(Arc::clone(&other), id, seen + 100, OPTIONS)).await;
    assert!(after.is_empty());
    let end = got.last().unwrap().seq;
    assert!(
        drain(watch(Arc::clone(&other), id, end + 1, OPTIONS))
            .await
            .is_empty()
    );
    assert_eq!(drain(watch(other, id, 1, OPTIONS)).await, got);
}

/// 16 writers into 16 sessions plus 4 writers into one shared session; watchers start mid-way.
pub async fn concurrent_writers_and_watchers(store: Arc<dyn Store>) {
    const STEPS: u64 = 12;
    let own: Vec<Uuid> = futures::future::join_all((0..16).map(|_| session(&*store))).await;
    let shared = session(&*store).await;
    let barrier = Arc::new(Barrier::new(16 + 4 + 1));
    let mut writers = Vec::new();
    for (w, &id) in own.iter().enumerate() {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        writers.push(tokio::spawn(async move {
            for n in 1..=STEPS {
                if n == STEPS / 2 + 1 {
                    barrier.wait().await;
                }
                store
                    .record_step(record(id, n, &format!("w{w}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for w in 0..4u64 {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        writers.push(tokio::spawn(async move {
            // Interleaved step numbers: writer w records w+1, w+5, ...
            for i in 0..STEPS {
                if i == STEPS / 2 {
                    barrier.wait().await;
                }
                let n = i * 4 + w + 1;
                store
                    .record_step(record(shared, n, &format!("shared{w}")))
                    .await
                    .unwrap();
            }
        }));
    }
    barrier.wait().await;
    let mut watchers = HashMap::new();
    for &id in own.iter().step_by(3).chain([&shared]) {
        // Two watchers per watched session: one replays from 1, one from a later point.
        watchers.insert((id, 1), watch(Arc::clone(&store), id, 1, OPTIONS));
        watchers.insert((id, 4), watch(Arc::clone(&store), id, 4, OPTIONS));
    }
    for w in writers {
        w.await.unwrap();
    }
    for &id in own.iter().chain([&shared]) {
        finish(&*store, id).await;
    }
    for ((id, from), rx) in watchers {
        let stored = all_events(&*store, id).await;
        assert_gap_free(&stored);
        let got = drain(rx).await;
        assert_eq!(
            got,
            stored[usize::try_from(from).unwrap() - 1..],
            "watcher of {id} from {from}"
        );
    }
    for &id in &own {
        let s = store.get_session(id).await.unwrap();
        assert_eq!(s.totals.unwrap().steps, STEPS);
        // created, round started, (started + finished) per step, task finished
        assert_eq!(s.last_seq, 2 + 2 * STEPS + 1);
        assert_gap_free(&all_events(&*store, id).await);
    }
    let s = store.get_session(shared).await.unwrap();
    assert_eq!(s.totals.unwrap().steps, 4 * STEPS);
    let steps = store.list_steps(shared, 1, 1000).await.unwrap();
    assert_eq!(
        steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        (1..=4 * STEPS).collect::<Vec<_>>()
    );
    let board = store.get_blackboard(shared).await.unwrap();
    assert_eq!(
        board
            .trajectories
            .iter()
            .map(|t| t.index)
            .collect::<Vec<_>>(),
        (0..4 * STEPS).collect::<Vec<_>>(),
        "one trajectory entry per step, indices without gaps"
    );
    assert_eq!(
        store.get_memory(shared, None).await.unwrap().len() as u64,
        4 * STEPS
    );
    let events = all_events(&*store, shared).await;
    assert_gap_free(&events);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventKind::StepFinished as i32)
            .count() as u64,
        4 * STEPS
    );
}

/// A slow watcher (tiny buffer, not read for a while) neither slows writers nor loses events.
pub async fn slow_watcher_catches_up(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let mut rx = watch(
        Arc::clone(&store),
        id,
        1,
        WatchOptions {
            buffer: 1,
            page: 3,
            kinds: ufo_session::watch::Kinds::ALL,
        },
    );
    for n in 1..=30 {
        store
            .record_step(record(id, n, "fast writer"))
            .await
            .unwrap();
    }
    store
        .set_session_status(StatusChange {
            id,
            status: SessionStatus::Failed,
            result: "boom".into(),
            lease_owner: None,
        })
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(e) = rx.recv().await {
        got.push(e.unwrap());
    }
    assert_eq!(got, all_events(&*store, id).await);
    assert_eq!(got.last().unwrap().kind, EventKind::TaskFailed as i32);
}

/// Issue 37: a commit made by this store hands its events to the session's watchers, exactly as a read
/// of the store returns them, so that a watcher that keeps up delivers them without reading them back
/// (`watch` takes them when they start at the next sequence number it owes).
pub async fn commits_hand_their_events_to_watchers(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let mut wakeups = store.subscribe(id);
    let _ = wakeups.mark_seen();
    let appended = store
        .append_events(
            id,
            vec![
                NewEvent {
                    kind: EventKind::StepStarted,
                    payload: json!({"intent": true, "actions": [{"function": "click_input", "x": 0.5}]}),
                    step: 1,
                    round: 1,
                },
                NewEvent {
                    kind: EventKind::Warning,
                    payload: json!({"source": "grounding", "message": "no model answer"}),
                    step: 1,
                    round: 1,
                },
            ],
            None,
        )
        .await
        .unwrap();
    let first = appended[0].seq;
    let announced = wakeups.mark_seen();
    assert_eq!(announced.seq, appended[1].seq);
    let fed = announced
        .events_from(first)
        .expect("the append hands its events over");
    assert_eq!(fed, appended.as_slice());
    assert_eq!(fed, store.read_events(id, first, 100).await.unwrap());
    assert!(
        announced.events_from(first + 1).is_none(),
        "only a watcher that stopped right before them takes them"
    );

    let recorded = store.record_step(record(id, 1, "fed")).await.unwrap();
    let announced = wakeups.mark_seen();
    assert_eq!(announced.seq, recorded.last_seq);
    let next = appended[1].seq + 1;
    let fed = announced
        .events_from(next)
        .expect("the step hands its events over");
    let read = store.read_events(id, next, 100).await.unwrap();
    assert_eq!(fed, read.as_slice());
    assert_eq!(
        fed.last().map(|e| e.kind),
        Some(EventKind::StepFinished.into())
    );

    // A watcher started now replays from the store and then follows live commits: every event once.
    let rx = watch(Arc::clone(&store), id, 1, OPTIONS);
    store.record_step(record(id, 2, "live")).await.unwrap();
    finish(&*store, id).await;
    let got = drain(rx).await;
    assert_gap_free(&got);
    assert_eq!(got, all_events(&*store, id).await);
}

/// Issue 37: a watcher woken by a commit of this process finds the commit's events in the wake-up, even
/// on Postgres, where the `LISTEN` connection hears of the same commit, often before the writer hands
/// the events over: that wake-up waits until the write has ended. Each woken watcher looks at once, as
/// `watch` does; a look that finds no events would be a read of the store.
pub async fn own_commits_wake_watchers_with_their_events(store: Arc<dyn Store>) {
    let id = session(&*store).await;
    let mut wakeups = store.subscribe(id);
    let _ = wakeups.mark_seen();
    for step in 1..=20 {
        let looking = tokio::spawn(async move {
            wakeups.changed().await;
            let announced = wakeups.mark_seen();
            (announced, wakeups)
        });
        let appended = store
            .append_events(
                id,
                vec![NewEvent {
                    kind: EventKind::StepStarted,
                    payload: json!({"intent": true}),
                    step,
                    round: 1,
                }],
                None,
            )
            .await
            .unwrap();
        let (announced, back) = looking.await.unwrap();
        wakeups = back;
        assert_eq!(
            announced.events_from(appended[0].seq),
            Some(appended.as_slice()),
            "append {step}: the first wake-up carries the commit's events"
        );
    }
    // A listener's wake-up held back during a write is released when the write ends, also when the
    // write fails: a refused append (a lease the caller does not hold) leaves no watcher waiting.
    let refused = store
        .append_events(
            id,
            vec![NewEvent {
                kind: EventKind::Warning,
                payload: json!({}),
                step: 21,
                round: 1,
            }],
            Some("someone-else".into()),
        )
        .await;
    assert!(refused.is_err());
    finish(&*store, id).await;
    let rx = watch(Arc::clone(&store), id, 1, OPTIONS);
    let got = drain(rx).await;
    assert_gap_free(&got);
    assert_eq!(got, all_events(&*store, id).await);
}
