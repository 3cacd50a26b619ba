//! The desktop pool's operator endpoints (issue 36), for admin keys only: `GET /v1/admin/desktops`
//! lists every desktop (name, labels, state, current task, last heartbeat, version, a broken one's
//! reason) and how many tasks wait for one; `POST /v1/admin/desktops/{name}/drain` (no new task; the
//! current one finishes), `.../undrain`, `.../ready` (a broken desktop repaired) and
//! `DELETE /v1/admin/desktops/{name}` (refused while a task holds it) change it. The pool lives in the
//! session store, so every agent replica answers the same.

use axum::Extension;
use axum::extract::State;
use serde::Serialize;
use ufo_proto::v1::{
    Desktop, DesktopChange, DesktopState, ListDesktopsRequest, RemoveDesktopRequest,
    SetDesktopStateRequest,
};
use utoipa::ToSchema;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::Path;

/// One desktop of the pool.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DesktopView {
    /// Its name (the executor's).
    pub name: String,
    /// Its labels (tasks may ask for labels).
    pub labels: std::collections::BTreeMap<String, String>,
    /// `free`, `busy`, `draining` or `broken`.
    pub state: String,
    /// The task it is checked out to.
    pub current_task: Option<String>,
    /// The replica's worker holding the check-out.
    pub worker: Option<String>,
    /// When the check-out's lease expires unless renewed (RFC 3339).
    pub lease_expires_at: Option<String>,
    /// When it was last seen (RFC 3339): the replica holding a dial-out executor's connection answers
    /// with its last heartbeat; another replica with the pool's record, written when it connected and
    /// refreshed every `--dial-out-seen-refresh-ms` of the replica holding it (declared executors: when
    /// a replica started).
    pub last_heartbeat: Option<String>,
    /// The executor's version, when it told it.
    pub version: Option<String>,
    /// Why it is broken (its reset failed).
    pub reason: Option<String>,
    /// Drained by an operator.
    pub draining: bool,
}

/// The pool.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DesktopsView {
    /// Every desktop, by name.
    pub desktops: Vec<DesktopView>,
    /// Desktops free now.
    pub free: u64,
    /// Desktops checked out to a task.
    pub busy: u64,
    /// Queued tasks waiting for a free desktop that fits them.
    pub waiting_tasks: u64,
}

/// How many desktops are in each state: what `GET /v1/admin/desktops` and the pool's OpenTelemetry
/// gauges ([`super::pool_metrics`]) report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCounts {
    /// Free now.
    pub free: u64,
    /// Checked out to a task.
    pub busy: u64,
    /// Drained by an operator, not busy.
    pub draining: u64,
    /// Their reset failed.
    pub broken: u64,
}

impl StateCounts {
    /// Counts `desktops` by state.
    pub fn of(desktops: &[Desktop]) -> Self {
        let mut counts = Self::default();
        for d in desktops {
            match DesktopState::try_from(d.state) {
                Ok(DesktopState::Free) => counts.free += 1,
                Ok(DesktopState::Busy) => counts.busy += 1,
                Ok(DesktopState::Draining) => counts.draining += 1,
                Ok(DesktopState::Broken) => counts.broken += 1,
                _ => {}
            }
        }
        counts
    }
}

fn state_name(state: i32) -> &'static str {
    match DesktopState::try_from(state) {
        Ok(DesktopState::Free) => "free",
        Ok(DesktopState::Busy) => "busy",
        Ok(DesktopState::Draining) => "draining",
        Ok(DesktopState::Broken) => "broken",
        _ => "unknown",
    }
}

fn rfc3339(t: Option<prost_types::Timestamp>) -> Option<String> {
    let t = t?;
    chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// A dial-out desktop connected to this replica was seen at `at` (its last heartbeat), which the
/// store's record (written at its connect and every `--dial-out-seen-refresh-ms`) may not know yet.
fn seen_here(d: &mut Desktop, at: std::time::SystemTime) {
    let at = prost_types::Timestamp::from(at);
    let stored = d.last_heartbeat.as_ref().map(|t| (t.seconds, t.nanos));
    if stored.is_none_or(|s| s < (at.seconds, at.nanos)) {
        d.last_heartbeat = Some(at);
    }
}

fn some(text: String) -> Option<String> {
    Some(text).filter(|t| !t.is_empty())
}

fn view(d: Desktop) -> DesktopView {
    DesktopView {
        state: state_name(d.state).to_owned(),
        labels: d.labels.into_iter().collect(),
        current_task: some(d.task_id),
        worker: some(d.worker_id),
        lease_expires_at: rfc3339(d.lease_expires_at),
        last_heartbeat: rfc3339(d.last_heartbeat),
        version: some(d.version),
        reason: some(d.reason),
        draining: d.draining,
        name: d.name,
    }
}

fn admin_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.role != super::auth::Role::Admin {
        return Err(ApiError::new(
            ufo_common::ErrorCode::PermissionDenied,
            format!("{what} needs an admin key (--api-admins)"),
        ));
    }
    Ok(())
}

/// The desktops of the pool and the tasks waiting for one (admin keys only).
#[utoipa::path(get, path = "/v1/admin/desktops", tag = "admin",
    responses((status = 200, description = "the pool", body = DesktopsView),
              (status = 403, description = "the key is not an admin key")))]
#[tracing::instrument(name = "api.list_desktops", skip_all)]
pub async fn list_desktops(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<axum::Json<DesktopsView>, ApiError> {
    admin_only(&caller, "listing desktops")?;
    let pool = state
        .tasks
        .client()
        .list_desktops(ListDesktopsRequest {})
        .await?
        .into_inner();
    let counts = StateCounts::of(&pool.desktops);
    let mut desktops = pool.desktops;
    if let Some(dial_out) = state.tasks.executors().dial_out() {
        for d in &mut desktops {
            if let Some(session) = dial_out.hub.get(&d.name) {
                seen_here(d, session.last_heartbeat().unwrap_or(session.connected_at));
            }
        }
    }
    let desktops: Vec<DesktopView> = desktops.into_iter().map(view).collect();
    Ok(axum::Json(DesktopsView {
        free: counts.free,
        busy: counts.busy,
        waiting_tasks: pool.waiting_sessions,
        desktops,
    }))
}

async fn change(
    state: &AppState,
    name: String,
    change: DesktopChange,
) -> Result<axum::Json<DesktopView>, ApiError> {
    let desktop = state
        .tasks
        .client()
        .set_desktop_state(SetDesktopStateRequest {
            name,
            change: change as i32,
        })
        .await?
        .into_inner();
    Ok(axum::Json(view(desktop)))
}

/// Drains a desktop: no new task is given it; the current one finishes (admin keys only).
#[utoipa::path(post, path = "/v1/admin/desktops/{name}/drain", tag = "admin",
    params(("name" = String, Path, description = "the desktop's name")),
    responses((status = 200, description = "drained", body = DesktopView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such desktop")))]
pub async fn drain_desktop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<axum::Json<DesktopView>, ApiError> {
    admin_only(&caller, "draining a desktop")?;
    tracing::info!(caller = %caller.name, desktop = %name, "desktop drained");
    change(&state, name, DesktopChange::Drain).await
}

/// Gives a drained desktop tasks again (admin keys only).
#[utoipa::path(post, path = "/v1/admin/desktops/{name}/undrain", tag = "admin",
    params(("name" = String, Path, description = "the desktop's name")),
    responses((status = 200, description = "undrained", body = DesktopView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such desktop")))]
pub async fn undrain_desktop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<axum::Json<DesktopView>, ApiError> {
    admin_only(&caller, "undraining a desktop")?;
    tracing::info!(caller = %caller.name, desktop = %name, "desktop undrained");
    change(&state, name, DesktopChange::Undrain).await
}

/// Marks a broken desktop (its reset failed) ready again once repaired (admin keys only).
#[utoipa::path(post, path = "/v1/admin/desktops/{name}/ready", tag = "admin",
    params(("name" = String, Path, description = "the desktop's name")),
    responses((status = 200, description = "ready", body = DesktopView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such desktop")))]
pub async fn ready_desktop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<axum::Json<DesktopView>, ApiError> {
    admin_only(&caller, "marking a desktop ready")?;
    tracing::info!(caller = %caller.name, desktop = %name, "desktop marked ready");
    change(&state, name, DesktopChange::Ready).await
}

/// Removes a desktop from the pool; refused (409) while a task holds it (admin keys only). A
/// dial-out executor that connects again, or a replica starting with it declared, registers it again.
#[utoipa::path(delete, path = "/v1/admin/desktops/{name}", tag = "admin",
    params(("name" = String, Path, description = "the desktop's name")),
    responses((status = 204, description = "removed"),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such desktop"),
              (status = 409, description = "a task holds it: drain it first")))]
pub async fn remove_desktop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<axum::http::StatusCode, ApiError> {
    admin_only(&caller, "removing a desktop")?;
    state
        .tasks
        .client()
        .remove_desktop(RemoveDesktopRequest { name: name.clone() })
        .await?;
    tracing::info!(caller = %caller.name, desktop = %name, "desktop removed");
    Ok(axum::http::StatusCode::NO_CONTENT)
}
