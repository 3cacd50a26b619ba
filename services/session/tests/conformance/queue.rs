//! The task queue: claims, leases, renewal, fencing, requeue.

use std::sync::Arc;
use std::time::Duration;

use ufo_proto::v1::SessionStatus;
use ufo_session::store::{Store, StoreError};
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
