//! Operator endpoints, for admin keys only (`--api-admins`; 403 for any other key).
//!
//! `POST /v1/admin/prune` (issue 22, point 4): removes the screenshots of ended tasks older than N days
//! or beyond the newest N tasks, through the session service's PruneImages; every step's record stays,
//! and the task view's `images_pruned_at` says when.
//!
//! Dial-out executors (issue 36): `POST /v1/admin/executors/{name}/tokens` creates an enrollment token
//! (shown once, stored hashed), `DELETE /v1/admin/executors/{name}/tokens/{id}` revokes one (closing a
//! connection made with it), `GET /v1/admin/executors` lists the executors with their connection state,
//! labels, last heartbeat and tokens.

use axum::Extension;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use ufo_common::ErrorCode;
use ufo_proto::v1::PruneImagesRequest;
use utoipa::ToSchema;

use super::AppState;
use super::auth::{Caller, Role};
use super::error::ApiError;
use super::extract::{Json, Path};

/// Longest retention in days a request may name (a hundred years).
const MAX_DAYS: u32 = 36_500;

/// `POST /v1/admin/prune`: at least one rule.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(min_properties = 1)]
pub struct PruneBody {
    /// Prune ended tasks created more than this many days ago.
    #[schema(minimum = 1, maximum = 36_500, nullable = false)]
    #[serde(default, deserialize_with = "rule")]
    pub older_than_days: Option<u32>,
    /// Keep the screenshots of this many newest tasks; prune the ended tasks beyond them.
    #[schema(minimum = 1, maximum = 4_294_967_295_u64, nullable = false)]
    #[serde(default, deserialize_with = "rule")]
    pub keep_tasks: Option<u32>,
}

/// A rule's number: a positive integer (`7` or `7.0`); `null` and anything else are refused.
fn rule<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= f64::from(u32::MAX))
                .map(|f| f as u64)
        })
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v >= 1)
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom(format!("expected an integer of at least 1, found {n}"))
        })
}

/// What a prune removed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PruneView {
    /// Tasks whose screenshots were pruned now.
    pub tasks: u64,
    /// Screenshot references removed (their steps stay).
    pub screenshots: u64,
    /// Stored images no task references any more (the session service's sweeper deletes them).
    pub blobs: u64,
}

/// Prunes screenshots of ended tasks (admin keys only); steps, memory and events are kept.
#[utoipa::path(post, path = "/v1/admin/prune", tag = "admin", request_body = PruneBody,
    responses((status = 200, description = "what was pruned", body = PruneView),
              (status = 403, description = "the key is not an admin key")))]
pub async fn prune(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<PruneBody>,
) -> Result<axum::Json<PruneView>, ApiError> {
    if caller.role != Role::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "pruning screenshots needs an admin key (--api-admins; `ufo up --admin-key` makes one)",
        ));
    }
    let (days, tasks) = (
        body.older_than_days.unwrap_or(0),
        body.keep_tasks.unwrap_or(0),
    );
    if days == 0 && tasks == 0 {
        return Err(ApiError::invalid(
            "set older_than_days or keep_tasks (at least 1)",
        ));
    }
    if days > MAX_DAYS {
        return Err(ApiError::invalid(format!(
            "older_than_days must be at most {MAX_DAYS}"
        )));
    }
    let pruned = state
        .tasks
        .client()
        .prune_images(PruneImagesRequest {
            older_than_days: days,
            keep_tasks: tasks,
        })
        .await?
        .into_inner();
    tracing::info!(caller = %caller.name, tasks = pruned.sessions, "screenshots pruned");
    Ok(axum::Json(PruneView {
        tasks: pruned.sessions,
        screenshots: pruned.artifacts,
        blobs: pruned.blobs,
    }))
}

// ---- Dial-out executors (issue 36): enrollment tokens and who is connected ----

/// A new enrollment token, shown once.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EnrollmentView {
    /// The executor it enrolls.
    pub name: String,
    /// The token's id (to revoke it).
    pub id: String,
    /// The token: give it to `ufo-executor --enroll-token-file`. Only its hash is stored.
    pub token: String,
}

/// One enrollment token, without the token.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenView {
    /// Its id.
    pub id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it was revoked (RFC 3339).
    pub revoked_at: Option<String>,
}

/// One executor tasks may name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExecutorView {
    /// The name tasks use.
    pub name: String,
    /// `dial-in` (declared with `--executors`, the agent connects) or `dial-out` (it connects).
    pub kind: String,
    /// A dial-out executor's stream is open now.
    pub connected: bool,
    /// Labels the connected executor declared.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its version, when connected.
    pub version: Option<String>,
    /// Its address, when connected.
    pub peer: Option<String>,
    /// When it connected (RFC 3339).
    pub connected_at: Option<String>,
    /// When its last heartbeat came (RFC 3339).
    pub last_heartbeat: Option<String>,
    /// The enrollment token its connection proved.
    pub token_id: Option<String>,
    /// Calls sent over its current connection.
    pub calls: u64,
    /// Its enrollment tokens (dial-out).
    pub tokens: Vec<TokenView>,
}

/// The executors.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExecutorsView {
    /// Whether dial-out executors are enabled (`--executor-enrollments-file`).
    pub dial_out: bool,
    /// Every executor, by name.
    pub executors: Vec<ExecutorView>,
}

fn admin_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.role != Role::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("{what} needs an admin key (--api-admins)"),
        ));
    }
    Ok(())
}

fn dial_out(state: &AppState) -> Result<&crate::dispatch::registry::DialOut, ApiError> {
    state.tasks.executors().dial_out().ok_or_else(|| {
        ApiError::new(
            ErrorCode::FailedPrecondition,
            "dial-out executors are not enabled: start the agent with --executor-enrollments-file",
        )
    })
}

fn enroll_error(e: crate::dispatch::dialout::enroll::EnrollError) -> ApiError {
    use crate::dispatch::dialout::enroll::EnrollError;
    match e {
        EnrollError::BadName(_) | EnrollError::BadToken { .. } => ApiError::invalid(e.to_string()),
        EnrollError::NoToken { .. } => ApiError::new(ErrorCode::NotFound, e.to_string()),
        EnrollError::TokenOfAnother { .. } => {
            ApiError::new(ErrorCode::AlreadyExists, e.to_string())
        }
        // The agent's own files: nothing the caller can change.
        EnrollError::Io { .. } | EnrollError::Invalid { .. } | EnrollError::TokenFile { .. } => {
            tracing::error!(error = %e, "enrollments file");
            ApiError::new(
                ErrorCode::Unavailable,
                "the enrollments file cannot be used now",
            )
        }
    }
}

fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339()
}

/// Creates an enrollment token for the dial-out executor `name` (admin keys only). The token is in this
/// answer only.
#[utoipa::path(post, path = "/v1/admin/executors/{name}/tokens", tag = "admin",
    params(("name" = String, Path, description = "the executor's name")),
    responses((status = 201, description = "the token (shown once)", body = EnrollmentView),
              (status = 400, description = "a name that cannot name an executor"),
              (status = 403, description = "the key is not an admin key"),
              (status = 409, description = "dial-out is not enabled, or the name is a declared (dial-in) executor")))]
pub async fn create_enrollment(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<(axum::http::StatusCode, axum::Json<EnrollmentView>), ApiError> {
    admin_only(&caller, "enrolling an executor")?;
    let dial_out = dial_out(&state)?;
    if state.tasks.executors().is_declared(&name) {
        return Err(ApiError::new(
            ErrorCode::AlreadyExists,
            format!("{name:?} is a declared (dial-in) executor; choose another name"),
        ));
    }
    let (id, token) = dial_out.enrollments.create(&name).map_err(enroll_error)?;
    tracing::info!(caller = %caller.name, executor = %name, token_id = %id, "enrollment token created");
    Ok((
        axum::http::StatusCode::CREATED,
        axum::Json(EnrollmentView { name, id, token }),
    ))
}

/// Revokes an enrollment token (admin keys only); a connection made with it is closed.
#[utoipa::path(delete, path = "/v1/admin/executors/{name}/tokens/{id}", tag = "admin",
    params(("name" = String, Path, description = "the executor's name"),
           ("id" = String, Path, description = "the token's id")),
    responses((status = 200, description = "revoked", body = TokenView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such token")))]
pub async fn revoke_enrollment(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
) -> Result<axum::Json<TokenView>, ApiError> {
    admin_only(&caller, "revoking an enrollment token")?;
    let dial_out = dial_out(&state)?;
    dial_out
        .enrollments
        .revoke(&name, &id)
        .map_err(enroll_error)?;
    dial_out.hub.close_token(
        &name,
        &id,
        tonic::Status::unauthenticated("the enrollment token was revoked"),
    );
    tracing::info!(caller = %caller.name, executor = %name, token_id = %id, "enrollment token revoked");
    let file = dial_out.enrollments.load().map_err(enroll_error)?;
    let record = file
        .executors
        .get(&name)
        .and_then(|e| e.tokens.iter().find(|t| t.id == id))
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "the token is gone"))?;
    Ok(axum::Json(TokenView {
        id: record.id.clone(),
        created_at: record.created_at.to_rfc3339(),
        revoked_at: record.revoked_at.map(|t| t.to_rfc3339()),
    }))
}

/// Every executor tasks may name: declared ones, and dial-out ones with their connection, heartbeat and
/// tokens (admin keys only).
#[utoipa::path(get, path = "/v1/admin/executors", tag = "admin",
    responses((status = 200, description = "the executors", body = ExecutorsView),
              (status = 403, description = "the key is not an admin key")))]
pub async fn list_executors(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<axum::Json<ExecutorsView>, ApiError> {
    admin_only(&caller, "listing executors")?;
    let registry = state.tasks.executors();
    let mut executors: Vec<ExecutorView> = registry
        .names()
        .map(|name| ExecutorView {
            name: name.to_owned(),
            kind: "dial-in".into(),
            connected: false,
            labels: Default::default(),
            version: None,
            peer: None,
            connected_at: None,
            last_heartbeat: None,
            token_id: None,
            calls: 0,
            tokens: vec![],
        })
        .collect();
    if let Some(dial_out) = registry.dial_out() {
        let file = dial_out.enrollments.load().map_err(enroll_error)?;
        let mut names: std::collections::BTreeSet<String> =
            file.executors.keys().cloned().collect();
        names.extend(dial_out.hub.sessions().iter().map(|s| s.name.clone()));
        for name in names {
            let session = dial_out.hub.get(&name);
            executors.push(ExecutorView {
                kind: "dial-out".into(),
                connected: session.is_some(),
                labels: session
                    .as_ref()
                    .map(|s| s.labels.clone())
                    .unwrap_or_default(),
                version: session.as_ref().map(|s| s.version.clone()),
                peer: session.as_ref().map(|s| s.peer.clone()),
                connected_at: session.as_ref().map(|s| rfc3339(s.connected_at)),
                last_heartbeat: session
                    .as_ref()
                    .and_then(|s| s.last_heartbeat())
                    .map(rfc3339),
                token_id: session.as_ref().map(|s| s.token_id.clone()),
                calls: session.as_ref().map_or(0, |s| s.calls()),
                tokens: file
                    .executors
                    .get(&name)
                    .map(|e| {
                        e.tokens
                            .iter()
                            .map(|t| TokenView {
                                id: t.id.clone(),
                                created_at: t.created_at.to_rfc3339(),
                                revoked_at: t.revoked_at.map(|r| r.to_rfc3339()),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                name,
            });
        }
    }
    Ok(axum::Json(ExecutorsView {
        dial_out: registry.dial_out().is_some(),
        executors,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::dialout::enroll::EnrollError;
    use axum::http::StatusCode;

    #[test]
    fn every_enrollment_error_maps_to_its_http_status() {
        let io = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let cases = [
            (EnrollError::BadName("a b".into()), StatusCode::BAD_REQUEST),
            (
                EnrollError::BadToken {
                    name: "d".into(),
                    why: "is empty",
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                EnrollError::NoToken {
                    name: "d".into(),
                    id: "x".into(),
                },
                StatusCode::NOT_FOUND,
            ),
            (
                EnrollError::TokenOfAnother {
                    name: "d".into(),
                    other: "e".into(),
                },
                StatusCode::CONFLICT,
            ),
            (
                EnrollError::Io {
                    path: "/f".into(),
                    source: io(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                EnrollError::Invalid {
                    path: "/f".into(),
                    message: "bad".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                EnrollError::TokenFile {
                    name: "d".into(),
                    path: "/t".into(),
                    source: io(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
        ];
        for (error, status) in cases {
            let text = error.to_string();
            let mapped = enroll_error(error);
            assert_eq!(mapped.http_status(), status, "{text}");
            if status == StatusCode::SERVICE_UNAVAILABLE {
                assert!(!mapped.message.contains("/f") && !mapped.message.contains("/t"));
            }
        }
    }
}
