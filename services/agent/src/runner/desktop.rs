//! The runner's side of the desktop pool (issue 36): the claim checks a desktop out to a task in the
//! session store ([`ufo_proto::v1::Session::desktop`]); the session's lease renewal renews it; when the
//! task ends the runner resets the desktop through its executor (`Reset`: what the task launched, its
//! scratch directory, the operator's hook) and checks it back in — free, or broken with the reason the
//! reset failed. A desktop handed on from a check-out that lapsed (its runner died before the check-in)
//! is reset before the new task's first command. The declared (dial-in) executors join the pool when a
//! runner starts ([`register_declared`]); dial-out executors when they connect
//! (`dispatch::dialout::server`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tracing::Instrument as _;
use ufo_proto::v1::{
    CheckInAndClaimRequest, CheckInDesktopRequest, Desktop, RegisterDesktopRequest,
    RenewDesktopRequest, Session,
};

use crate::config::RunnerConfig;
use crate::store::client::SessionClient;

/// Resets desktop `.0` for task `.1` through its executor; `Err` carries the reason it failed.
pub type Resetter =
    Arc<dyn Fn(String, String) -> BoxFuture<'static, Result<(), ResetError>> + Send + Sync>;

/// Why a desktop's reset failed: the reason it leaves the pool as broken.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// The registry does not know the desktop's executor.
    #[error("cannot reach the desktop's executor: {0}")]
    Unknown(#[from] crate::dispatch::registry::ExecutorRefusal),
    /// No connection to the desktop's executor.
    #[error("cannot reach the desktop's executor: {0}")]
    Unreachable(crate::dispatch::DispatchError),
    /// The executor tried and could not reset (its words).
    #[error("reset failed: {0}")]
    Refused(String),
    /// The reset call failed.
    #[error("reset failed: {0}")]
    Failed(crate::dispatch::DispatchError),
    /// `--desktop-reset-timeout-ms` passed.
    #[error("reset took longer than {} ms", .0.as_millis())]
    TimedOut(Duration),
}

/// The names of the desktops this replica can reach now.
pub type Reachable = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// The desktops a replica reaches: its declared executors, and the dial-out executors connected to it
/// (a dial-out executor's stream ends at one replica; another replica could not send it a command).
pub fn reachable(executors: crate::dispatch::registry::ExecutorRegistry) -> Reachable {
    Arc::new(move || {
        let mut names: Vec<String> = executors.names().map(str::to_owned).collect();
        if let Some(dial_out) = executors.dial_out() {
            names.extend(dial_out.hub.sessions().iter().map(|s| s.name.clone()));
        }
        names
    })
}

/// The production resetter: the executor the registry knows by the desktop's name.
pub fn resetter(
    executors: crate::dispatch::registry::ExecutorRegistry,
    config: &RunnerConfig,
) -> Resetter {
    let deadline = config.executor_deadline_ms;
    let max_message = config.executor_max_message_bytes;
    Arc::new(move |desktop: String, task: String| {
        let executors = executors.clone();
        Box::pin(async move {
            let conn = executors.connection(&desktop, "")?;
            let dispatcher = executors
                .dispatcher(&conn, deadline, max_message)
                .map_err(ResetError::Unreachable)?;
            match dispatcher.reset(&task).await {
                Ok(done) => {
                    tracing::info!(%desktop, closed = done.closed, removed = done.removed, hook_ran = done.hook_ran, "desktop reset");
                    Ok(())
                }
                Err(crate::dispatch::DispatchError::Rpc {
                    code: tonic::Code::FailedPrecondition,
                    message,
                }) => Err(ResetError::Refused(message)),
                Err(e) => Err(ResetError::Failed(e)),
            }
        })
    })
}

/// Resets `desktop` for `session` within `--desktop-reset-timeout-ms`, keeping its check-out alive
/// meanwhile; `Err` is the reason it is broken.
pub(crate) async fn reset(
    client: &SessionClient,
    resetter: &Resetter,
    session: &Session,
    worker_id: &str,
    config: &RunnerConfig,
) -> Result<(), ResetError> {
    let desktop = session.desktop.clone();
    let timeout = Duration::from_millis(config.desktop_reset_timeout_ms);
    let span = tracing::info_span!("desktop.reset", desktop = %desktop);
    let run = tokio::time::timeout(timeout, resetter(desktop.clone(), session.id.clone()));
    tokio::select! {
        outcome = run.instrument(span) => match outcome {
            Ok(done) => done,
            Err(_) => Err(ResetError::TimedOut(timeout)),
        },
        never = renew_during_reset(client, session, worker_id, config) => match never {},
    }
}

/// Renews the desktop's check-out every third of the lease until dropped (it never ends by itself).
async fn renew_during_reset(
    client: &SessionClient,
    session: &Session,
    worker_id: &str,
    config: &RunnerConfig,
) -> std::convert::Infallible {
    let desktop = &session.desktop;
    let every = Duration::from_millis(u64::from(config.lease_ms / 3).max(1));
    loop {
        tokio::time::sleep(every).await;
        let request = RenewDesktopRequest {
            name: desktop.clone(),
            session_id: session.id.clone(),
            worker_id: worker_id.to_owned(),
            lease_ms: config.lease_ms,
        };
        if let Err(e) = client.clone().renew_desktop(request).await {
            tracing::warn!(%desktop, error = %e, "cannot renew the desktop's check-out during its reset");
        }
    }
}

/// A task claimed (by the claim loop, or at a check-in for the claim loop to run), with the desktop
/// checked out to it.
#[derive(Debug)]
pub struct Claimed {
    /// The task's session.
    pub session: Session,
    /// The desktop checked out to it, if it wants one.
    pub desktop: Option<Desktop>,
    /// What the claim read (and begun) to start it; `None` from a session service that does not start
    /// claimed tasks (the runner asks itself then).
    pub start: Option<ufo_proto::v1::TaskStart>,
    /// When the store's answer arrived: a task's start is timed from here (`task.start`).
    pub at: std::time::Instant,
}

/// How a runner hands a desktop straight on to the next task that fits it (issue 36): the check-in and
/// that task's claim are one store call, and the claimed task goes to the claim loop through `sender`.
#[derive(Clone)]
pub struct Handover {
    /// The claim loop's inbox.
    pub sender: tokio::sync::mpsc::UnboundedSender<Claimed>,
    /// The desktops this replica can reach now; `None`: any.
    pub reachable: Option<Reachable>,
    /// No hand-over once the process is shutting down.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Handover {
    /// Whether a task may be claimed for `desktop` now.
    fn wanted(&self, desktop: &str) -> bool {
        !self.shutdown.is_cancelled()
            && !self.sender.is_closed()
            && self
                .reachable
                .as_ref()
                .is_none_or(|reachable| reachable().iter().any(|name| name == desktop))
    }
}

/// Resets the task's desktop (when a resetter is set) and gives it back: free, or broken with the
/// reason; with `handover`, a free desktop goes straight to the next task that fits it (one store call,
/// [`hand_over`]). A failed check-in is logged: the check-out then lapses with its lease and the next
/// task's runner resets the desktop first.
pub(crate) async fn check_in(
    client: &SessionClient,
    resetter: Option<&Resetter>,
    session: &Session,
    worker_id: &str,
    config: &RunnerConfig,
    handover: Option<&Handover>,
) {
    if session.desktop.is_empty() {
        return;
    }
    let broken = match resetter {
        Some(resetter) => reset(client, resetter, session, worker_id, config)
            .await
            .err()
            .map(|e| e.to_string()),
        None => None,
    };
    if let Some(reason) = &broken {
        tracing::warn!(desktop = %session.desktop, %reason, "desktop reset failed; it leaves the pool as broken");
    }
    match handover {
        Some(handover) if broken.is_none() && handover.wanted(&session.desktop) => {
            hand_over(client, session, worker_id, config, handover).await;
        }
        _ => give_back(client, session, worker_id, broken).await,
    }
}

/// Checks the desktop in free and claims the next task that fits it in the same store transaction
/// (`CheckInAndClaim`); a claimed task goes to the claim loop. A failure is logged as for [`give_back`].
async fn hand_over(
    client: &SessionClient,
    session: &Session,
    worker_id: &str,
    config: &RunnerConfig,
    handover: &Handover,
) {
    let span = tracing::info_span!("desktop.hand_over", desktop = %session.desktop, claimed = tracing::field::Empty);
    let request = CheckInAndClaimRequest {
        check_in: Some(CheckInDesktopRequest {
            name: session.desktop.clone(),
            session_id: session.id.clone(),
            worker_id: worker_id.to_owned(),
            broken_reason: String::new(),
        }),
        lease_ms: config.lease_ms,
        start: true,
    };
    let asked = std::time::Instant::now();
    let answer = client
        .clone()
        .check_in_and_claim(request)
        .instrument(span.clone())
        .await;
    let store_ms = asked.elapsed().as_secs_f64() * 1e3;
    match answer {
        Ok(answer) => {
            let answer = answer.into_inner();
            match answer.session {
                Some(next) => {
                    span.record("claimed", next.id.as_str());
                    tracing::info!(desktop = %session.desktop, next_task = %next.id, store_ms, "desktop checked in and handed over");
                    let claimed = Claimed {
                        session: next,
                        desktop: answer.desktop,
                        start: answer.start,
                        at: std::time::Instant::now(),
                    };
                    if let Err(unsent) = handover.sender.send(claimed) {
                        // The claim loop ended meanwhile (shutdown): the task's lease lapses and another
                        // replica takes it over with its desktop.
                        tracing::warn!(task_id = %unsent.0.session.id, "the claim loop has stopped; the handed-over task waits for its lease to lapse");
                    }
                }
                None => tracing::info!(desktop = %session.desktop, "desktop checked in"),
            }
        }
        Err(e) => {
            tracing::warn!(desktop = %session.desktop, error = %e, "cannot check the desktop in; it returns to the pool when its lease lapses");
        }
    }
}

/// Checks the desktop in without a reset: free, or broken with `broken` as the reason.
pub(crate) async fn give_back(
    client: &SessionClient,
    session: &Session,
    worker_id: &str,
    broken: Option<String>,
) {
    let span = tracing::info_span!("desktop.check_in", desktop = %session.desktop);
    let request = CheckInDesktopRequest {
        name: session.desktop.clone(),
        session_id: session.id.clone(),
        worker_id: worker_id.to_owned(),
        broken_reason: broken.unwrap_or_default(),
    };
    match client
        .clone()
        .check_in_desktop(request)
        .instrument(span)
        .await
    {
        Ok(_) => tracing::info!(desktop = %session.desktop, "desktop checked in"),
        Err(e) => {
            tracing::warn!(desktop = %session.desktop, error = %e, "cannot check the desktop in; it returns to the pool when its lease lapses");
        }
    }
}

/// Registers the declared executors as desktops of the pool (idempotent: every replica does it).
pub async fn register_declared(
    client: &SessionClient,
    desktops: &[(String, BTreeMap<String, String>)],
) -> Result<(), tonic::Status> {
    for (name, labels) in desktops {
        client
            .clone()
            .register_desktop(RegisterDesktopRequest {
                name: name.clone(),
                labels: labels.clone().into_iter().collect(),
                version: String::new(),
                // Unfenced: every replica registers the same declared executors alike.
                generation: 0,
            })
            .await?;
    }
    Ok(())
}

/// Follows the session store's pool signals (`WatchPool`: a desktop freed up on any replica) and wakes
/// the claim loop through `changed`, so that no replica waits out `--claim-interval-ms` for a desktop
/// another one freed. Reconnects with a backoff (100 ms doubling to 5 s) until `shutdown`; a session
/// service without `WatchPool` leaves the loop to its interval.
#[tracing::instrument(name = "runner.watch_pool", skip_all)]
pub(crate) async fn watch_pool(
    client: SessionClient,
    changed: Arc<tokio::sync::Notify>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        let mut caller = client.clone();
        let opened = tokio::select! {
            () = shutdown.cancelled() => return,
            opened = caller.watch_pool(ufo_proto::v1::WatchPoolRequest {}) => opened,
        };
        match opened {
            Ok(stream) => {
                tracing::debug!("following the pool's signals");
                let mut stream = stream.into_inner();
                // Signals may have been missed while (re)connecting.
                changed.notify_one();
                loop {
                    let next = tokio::select! {
                        () = shutdown.cancelled() => return,
                        next = stream.message() => next,
                    };
                    match next {
                        Ok(Some(_)) => {
                            backoff = Duration::from_millis(100);
                            changed.notify_one();
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(error = %e, "the pool's signals stopped; following them again");
                            break;
                        }
                    }
                }
            }
            Err(e) if e.code() == tonic::Code::Unimplemented => {
                tracing::info!(
                    "the session service sends no pool signals; claiming every --claim-interval-ms"
                );
                return;
            }
            Err(e) => tracing::debug!(error = %e, "cannot follow the pool's signals yet"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
