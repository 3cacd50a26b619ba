//! Operator endpoints, for admin keys only (`--api-admins`; 403 for any other key).
//!
//! `POST /v1/admin/prune` (issue 22, point 4): removes the screenshots of ended tasks older than N days
//! or beyond the newest N tasks, through the session service's PruneImages; every step's record stays,
//! and the task view's `images_pruned_at` says when.

use axum::Extension;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use ufo_common::ErrorCode;
use ufo_proto::v1::PruneImagesRequest;
use utoipa::ToSchema;

use super::AppState;
use super::auth::{Caller, Role};
use super::error::ApiError;
use super::extract::Json;

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
            "pruning screenshots needs an admin key (--api-admins)",
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
