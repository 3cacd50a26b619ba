//! `POST /v1/desktop/calls`: the MCP desktop tools over REST, for `ufo mcp` (stdio), which serves them
//! to its MCP client through this route so the policy, the executor registry and the caller's direct
//! session ([`super::direct`]) stay in the agent. The caller is the request's API key, as on `/mcp`; the
//! arguments are checked here again, exactly as `/mcp` checks them.

use axum::Extension;
use axum::extract::State;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ufo_common::ErrorCode;
use ufo_mcp_server::ToolError;
use ufo_mcp_server::desktop::{END_DIRECT_SESSION, call, end_call};
use utoipa::ToSchema;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::Json;

/// A desktop tool call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopCallBody {
    /// The tool: `list_windows`, `list_controls`, `screenshot`, `click`, `type_text`, `press_keys`,
    /// `scroll`, `launch_app` or `end_direct_session`.
    #[schema(
        pattern = "^(list_windows|list_controls|screenshot|click|type_text|press_keys|scroll|launch_app|end_direct_session)$"
    )]
    pub tool: String,
    /// Its arguments, as the MCP tool takes them (`executor` names a registered executor).
    #[schema(value_type = Object)]
    pub arguments: serde_json::Map<String, Value>,
}

/// An image a call returned.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DesktopImage {
    /// `image/png` or `image/jpeg`.
    pub mime_type: String,
    /// The bytes, base64.
    pub data: String,
}

/// What a desktop call did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DesktopCallView {
    /// The tool called.
    pub tool: String,
    /// The executor's name.
    pub executor: String,
    /// The last command's result (`end_direct_session`: `{session_id, steps}`).
    #[schema(value_type = Object)]
    pub result: Value,
    /// The caller's direct session the call was recorded in (absent for `end_direct_session`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub session_id: Option<String>,
    /// Its step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<u64>,
    /// Screenshots, in order.
    #[serde(default)]
    pub images: Vec<DesktopImage>,
    /// The time the executor reported spending on the call's commands, in microseconds (absent for
    /// `end_direct_session`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub executor_us: Option<u64>,
}

fn api_error(e: ToolError) -> ApiError {
    let code = serde_json::from_value::<ErrorCode>(Value::String(e.code.clone()))
        .unwrap_or(ErrorCode::Internal);
    ApiError::new(code, e.message)
}

/// Runs one desktop tool call as the caller, recorded in its direct session on that executor.
#[utoipa::path(post, path = "/v1/desktop/calls", tag = "desktop", request_body = DesktopCallBody,
    responses((status = 200, description = "what the call did, and where it was recorded", body = DesktopCallView)))]
pub async fn desktop_call(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<DesktopCallBody>,
) -> Result<axum::Json<DesktopCallView>, ApiError> {
    let desktop = state.tasks.desktop();
    if body.tool == END_DIRECT_SESSION {
        let executor = end_call(Some(&body.arguments)).map_err(api_error)?;
        let result = desktop
            .end(&caller.name, &executor)
            .await
            .map_err(api_error)?;
        return Ok(axum::Json(DesktopCallView {
            tool: body.tool,
            executor,
            result,
            session_id: None,
            step: None,
            images: Vec::new(),
            executor_us: None,
        }));
    }
    let checked = call(&body.tool, Some(&body.arguments))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "tool must be one of {}, {END_DIRECT_SESSION}, not {:?}",
                ufo_mcp_server::desktop::NAMES.join(", "),
                body.tool
            ))
        })?
        .map_err(api_error)?;
    let outcome = desktop
        .run(&caller.name, &checked)
        .await
        .map_err(api_error)?;
    let (session_id, step) = outcome.recorded.unzip();
    Ok(axum::Json(DesktopCallView {
        tool: checked.tool.to_owned(),
        executor: checked.executor,
        result: outcome.result,
        session_id,
        step,
        images: outcome
            .images
            .into_iter()
            .map(|i| DesktopImage {
                mime_type: i.mime_type,
                data: base64::engine::general_purpose::STANDARD.encode(i.bytes),
            })
            .collect(),
        executor_us: outcome.executor_us,
    }))
}
