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
use ufo_proto::v1::{CheckInDesktopRequest, RegisterDesktopRequest, RenewDesktopRequest, Session};

use crate::config::RunnerConfig;
use crate::store::client::SessionClient;

/// Resets desktop `.0` for task `.1` through its executor; `Err` carries the reason it failed.
pub type Resetter =
    Arc<dyn Fn(String, String) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

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
            let conn = executors
                .connection(&desktop, "")
                .map_err(|e| format!("cannot reach the desktop's executor: {e}"))?;
            let dispatcher = executors
                .dispatcher(&conn, deadline, max_message)
                .map_err(|e| format!("cannot reach the desktop's executor: {e}"))?;
            match dispatcher.reset(&task).await {
                Ok(done) => {
                    tracing::info!(%desktop, closed = done.closed, removed = done.removed, hook_ran = done.hook_ran, "desktop reset");
                    Ok(())
                }
                Err(crate::dispatch::DispatchError::Rpc {
                    code: tonic::Code::FailedPrecondition,
                    message,
                }) => Err(format!("reset failed: {message}")),
                Err(e) => Err(format!("reset failed: {e}")),
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
) -> Result<(), String> {
    let desktop = session.desktop.clone();
    let timeout = Duration::from_millis(config.desktop_reset_timeout_ms);
    let renew = async {
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
    };
    let span = tracing::info_span!("desktop.reset", desktop = %desktop);
    let run = tokio::time::timeout(timeout, resetter(desktop.clone(), session.id.clone()));
    tokio::select! {
        outcome = run.instrument(span) => match outcome {
            Ok(done) => done,
            Err(_) => Err(format!("reset took longer than {} ms", timeout.as_millis())),
        },
        () = renew => Err("unreachable: the renewal loop does not end".into()),
    }
}

/// Resets the task's desktop (when a resetter is set) and gives it back: free, or broken with the
/// reason. A failed check-in is logged: the check-out then lapses with its lease and the next task's
/// runner resets the desktop first.
pub(crate) async fn check_in(
    client: &SessionClient,
    resetter: Option<&Resetter>,
    session: &Session,
    worker_id: &str,
    config: &RunnerConfig,
) {
    if session.desktop.is_empty() {
        return;
    }
    let broken = match resetter {
        Some(resetter) => reset(client, resetter, session, worker_id, config)
            .await
            .err(),
        None => None,
    };
    if let Some(reason) = &broken {
        tracing::warn!(desktop = %session.desktop, %reason, "desktop reset failed; it leaves the pool as broken");
    }
    give_back(client, session, worker_id, broken).await;
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
            })
            .await?;
    }
    Ok(())
}
