//! Launch → wait for the new window → select it, as one HostAgent function: a program's window appears
//! some time after its process starts, so the HostAgent looks at the window list (bounded by
//! `launch_window_timeout`) until a window of the launched program that was not there before appears, and
//! selects it. With status ASSIGN the round then hands the subtask to that window's AppAgent in the same
//! step; a launch whose window never appears fails with that reason, so nothing is assigned.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::agents::response::HostResponse;
use crate::agents::settings::AgentSettings;
use crate::agents::target::{TargetInfo, TargetKind};
use crate::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError, execute_one};

/// What identifies a window across two listings (positional ids alone shift when windows open).
fn identity(w: &TargetInfo) -> String {
    let handle = w
        .extra
        .get("handle")
        .map(Value::to_string)
        .unwrap_or_default();
    let pid = w.extra.get("pid").map(Value::to_string).unwrap_or_default();
    format!("{handle}|{pid}|{}|{}", w.id, w.name)
}

async fn windows(dispatcher: &dyn CommandDispatcher) -> Result<Vec<TargetInfo>, DispatchError> {
    let r = execute_one(
        dispatcher,
        Command::observe(
            "get_desktop_app_target_info",
            json!({"remove_empty": true, "refresh_app_windows": true}),
        ),
    )
    .await?;
    Ok(r.result
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| TargetInfo::from_json(v, TargetKind::Application))
        .collect())
}

/// Whether `w` is a window of the program launched as `name` (process `pid` when the executor said).
fn belongs(w: &TargetInfo, name: &str, pid: Option<u64>) -> bool {
    if let (Some(pid), Some(p)) = (pid, w.extra.get("pid").and_then(Value::as_u64))
        && p == pid
    {
        return true;
    }
    // A single-instance program hands the launch to its running process: match by program name.
    let (root, name) = (w.app_root().to_lowercase(), name.to_lowercase());
    !root.is_empty() && !name.is_empty() && (root.contains(&name) || name.contains(&root))
}

/// Launches the program `response.arguments` name, waits for its new window and selects it. Returns the
/// launch's result (with the window and the wait added) and the selected window.
pub async fn launch_and_wait(
    dispatcher: &dyn CommandDispatcher,
    response: &HostResponse,
    settings: &AgentSettings,
) -> Result<(CommandResult, Option<TargetInfo>), DispatchError> {
    let name = response
        .arguments
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let span = tracing::info_span!("host.launch", application = %name);
    async move {
        let before: HashSet<String> = windows(dispatcher).await?.iter().map(identity).collect();
        let mut launched = execute_one(
            dispatcher,
            Command::act(
                "launch_application",
                Value::Object(response.arguments.clone()),
            ),
        )
        .await?;
        if !launched.is_success() {
            return Ok((launched, None));
        }
        let pid = launched.result.get("pid").and_then(Value::as_u64);
        let started = Instant::now();
        let deadline = started + settings.launch_window_timeout;
        let window = loop {
            if let Some(w) = windows(dispatcher)
                .await?
                .into_iter()
                .find(|w| !before.contains(&identity(w)) && belongs(w, &name, pid))
            {
                break Some(w);
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(settings.launch_poll_interval.min(deadline - Instant::now())).await;
        };
        let waited_ms = started.elapsed().as_millis() as u64;
        let Some(mut window) = window else {
            let mut r = CommandResult::failure(format!(
                "'{name}' was started but no new window of it appeared within {} ms",
                settings.launch_window_timeout.as_millis()
            ));
            r.result = json!({"launched": launched.result, "waited_ms": waited_ms});
            return Ok((r, None));
        };
        let selected = execute_one(
            dispatcher,
            Command::act(
                "select_application_window",
                json!({"id": window.id, "name": window.name}),
            ),
        )
        .await?;
        if !selected.is_success() {
            let mut r = CommandResult::failure(format!(
                "'{name}' opened window '{}' but it could not be selected: {}",
                window.name, selected.error
            ));
            r.result = json!({"launched": launched.result, "waited_ms": waited_ms});
            return Ok((r, None));
        }
        tracing::info!(window = %window.name, waited_ms, "launched window appeared");
        launched.result = json!({
            "launched": launched.result,
            "window": {"id": window.id, "name": window.name, "application": window.app_root()},
            "waited_ms": waited_ms,
        });
        // Not a label of this step's target list: the window is new.
        window.label = "new".into();
        Ok((launched, Some(window)))
    }
    .instrument(span)
    .await
}
