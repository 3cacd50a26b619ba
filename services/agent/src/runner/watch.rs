//! What a running task learns from outside while it works: a lease keeper (renews the lease; reports a
//! lost lease or a cancel request) and an event follower (the session's event log: cancel requests,
//! answers and decisions, the moment they are written, by whichever replica served the person).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use ufo_proto::v1::{EventKind, RenewLeaseRequest, WatchEventsRequest};

use super::hitl::decision_of;
use crate::round::Decision;
use crate::store::client::SessionClient;

/// Why a task must stop working (set once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A person asked to cancel.
    Cancel,
    /// Another worker holds the lease now.
    LeaseLost,
}

/// Shared between the task loop and its watchers.
#[derive(Debug, Default)]
pub struct Signals {
    /// Fires when the task must stop; see `reason`.
    pub stop: CancellationToken,
    reason: Mutex<Option<StopReason>>,
    /// Woken on every answer or decision.
    pub changed: Notify,
    decisions: Mutex<HashMap<u64, Decision>>,
    /// Takeover (docs/live.md): whether a person has the desktop, and their inputs, from the events.
    person: Mutex<Person>,
    /// Woken on every takeover, input and hand-back.
    pub person_changed: Notify,
}

/// What the events say about a takeover.
#[derive(Debug, Default)]
struct Person {
    /// A takeover was requested after the last hand-back.
    taken: bool,
    /// Who asked.
    by: String,
    /// Every input event: (seq, input, by).
    inputs: Vec<(u64, super::person::PersonInput, String)>,
}

impl Signals {
    /// Records `reason` (the first one wins) and fires `stop`.
    pub fn stop_with(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.stop.cancel();
    }

    /// Why the task must stop, if it must.
    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }

    /// Whether a person has taken the desktop over (and not handed it back).
    pub fn taken_over(&self) -> bool {
        self.person.lock().is_ok_and(|p| p.taken)
    }

    /// The first person's input after event `after`, with who sent it.
    pub fn person_input(&self, after: u64) -> Option<(u64, super::person::PersonInput, String)> {
        let p = self.person.lock().ok()?;
        p.inputs.iter().find(|(seq, _, _)| *seq > after).cloned()
    }

    /// Who took the desktop over last.
    pub fn taken_by(&self) -> String {
        self.person.lock().map(|p| p.by.clone()).unwrap_or_default()
    }

    fn person_event(&self, event: &ufo_proto::v1::Event) {
        let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
        let by = payload["by"].as_str().unwrap_or_default().to_owned();
        if let Ok(mut p) = self.person.lock() {
            match EventKind::try_from(event.kind) {
                Ok(EventKind::TakeoverRequested) => {
                    p.taken = true;
                    p.by = by;
                }
                Ok(EventKind::HandedBack) => p.taken = false,
                Ok(EventKind::PersonInput) => {
                    match serde_json::from_value(payload["input"].clone()) {
                        Ok(input) => p.inputs.push((event.seq, input, by)),
                        Err(e) => {
                            tracing::warn!(seq = event.seq, error = %e, "unreadable person input")
                        }
                    }
                }
                _ => return,
            }
        }
        self.person_changed.notify_waiters();
    }

    /// The decision on the action held at `step`, if made.
    pub fn decision(&self, step: u64) -> Option<Decision> {
        self.decisions
            .lock()
            .ok()
            .and_then(|d| d.get(&step).cloned())
    }
}

/// Renews the lease every third of its length until `done` fires.
pub async fn keep_lease(
    mut client: SessionClient,
    session_id: String,
    worker_id: String,
    lease_ms: u32,
    signals: Arc<Signals>,
    done: CancellationToken,
) {
    let period = Duration::from_millis(u64::from(lease_ms / 3).max(50));
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let renewed = client
            .renew_lease(RenewLeaseRequest {
                session_id: session_id.clone(),
                worker_id: worker_id.clone(),
                lease_ms,
            })
            .await;
        match renewed {
            Ok(lease) if lease.get_ref().cancel_requested => signals.stop_with(StopReason::Cancel),
            Ok(_) => {}
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::NotFound
                ) =>
            {
                tracing::warn!(session_id, "lease lost");
                signals.stop_with(StopReason::LeaseLost);
                return;
            }
            // A transient failure: the lease outlives two more attempts.
            Err(status) => tracing::warn!(session_id, error = %status, "cannot renew the lease"),
        }
    }
}

/// The kinds of event [`follow_events`] acts on; the session service sends it no other (a step's own
/// events would otherwise come back to the runner that wrote them).
const FOLLOWED: [EventKind; 7] = [
    EventKind::CancelRequested,
    EventKind::QuestionAnswered,
    EventKind::ActionApproved,
    EventKind::ActionRejected,
    EventKind::TakeoverRequested,
    EventKind::PersonInput,
    EventKind::HandedBack,
];

/// Follows the session's events from the start (decisions made before a crash count too) until `done`
/// fires, reconnecting from the last seen sequence number after a failure.
pub async fn follow_events(
    mut client: SessionClient,
    session_id: String,
    signals: Arc<Signals>,
    done: CancellationToken,
) {
    let mut next_seq = 1;
    while !done.is_cancelled() {
        let stream = client
            .watch_events(WatchEventsRequest {
                session_id: session_id.clone(),
                from_seq: next_seq,
                kinds: FOLLOWED.iter().map(|&k| k as i32).collect(),
            })
            .await;
        let mut stream = match stream {
            Ok(s) => s.into_inner(),
            Err(status) => {
                tracing::warn!(session_id, error = %status, "cannot watch events; retrying");
                tokio::select! {
                    () = done.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        loop {
            let item = tokio::select! {
                () = done.cancelled() => return,
                item = stream.next() => item,
            };
            let Some(Ok(event)) = item else { break };
            next_seq = event.seq + 1;
            if let (Some((step, decision)), Ok(mut decisions)) =
                (decision_of(&event), signals.decisions.lock())
            {
                decisions.entry(step).or_insert(decision);
            }
            match EventKind::try_from(event.kind) {
                Ok(EventKind::CancelRequested) => signals.stop_with(StopReason::Cancel),
                Ok(
                    EventKind::QuestionAnswered
                    | EventKind::ActionApproved
                    | EventKind::ActionRejected,
                ) => signals.changed.notify_waiters(),
                Ok(
                    EventKind::TakeoverRequested | EventKind::PersonInput | EventKind::HandedBack,
                ) => signals.person_event(&event),
                _ => {}
            }
        }
        // The stream ended (the task ended, or the session service restarted): reconnect unless done.
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
