//! REST handlers: thin adapters from JSON to [`Tasks`] and back. Their `#[utoipa::path]` attributes are the
//! OpenAPI document; the error responses every operation shares are added in [`super::openapi`].

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use ufo_proto::v1::{ArtifactKind, SessionStatus};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use super::model::{
    AnswersBody, CancelBody, ConfirmationBody, FollowUpBody, HealthView, ListQuery, ScreenshotKind,
    ScreenshotQuery, StepPage, StepView, StepsQuery, SubmitTask, TaskPage, TaskView,
};

/// Queues a task; 202 with the task and its links.
#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = SubmitTask,
    responses((status = 202, description = "queued", body = TaskView)))]
pub async fn submit_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<SubmitTask>,
) -> Result<Response, ApiError> {
    // The gRPC form takes "" as "not a replay"; here an empty id is a mistake.
    if body.replay_of.as_deref() == Some("") {
        return Err(ApiError::invalid("replay_of must be a task id (a UUID)"));
    }
    let task = state.tasks.submit(&caller, body.into_proto()).await?;
    let view = TaskView::from_snapshot(task);
    let location = view.links.self_.clone();
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        axum::Json(view),
    )
        .into_response())
}

/// Lists tasks, newest first.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks", params(ListQuery),
    responses((status = 200, description = "a page of tasks", body = TaskPage)))]
pub async fn list_tasks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<TaskPage>, ApiError> {
    if query.page_size == Some(0) {
        return Err(ApiError::invalid("page_size must be at least 1"));
    }
    let status = query
        .status
        .map_or(SessionStatus::Unspecified, |s| s.to_proto());
    let (sessions, next_page_token) = state
        .tasks
        .list(
            &caller,
            query.page_size.unwrap_or(0),
            query.page_token.unwrap_or_default(),
            status,
        )
        .await?;
    Ok(axum::Json(TaskPage {
        tasks: sessions.into_iter().map(TaskView::from_session).collect(),
        next_page_token,
    }))
}

/// A task: status, rounds, current state, pending questions, held action, totals.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "tasks", params(("id" = Uuid, Path, description = "task id")),
    responses((status = 200, description = "the task", body = TaskView)))]
pub async fn get_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<TaskView>, ApiError> {
    let task = state.tasks.get(&id.to_string(), &caller).await?;
    Ok(axum::Json(TaskView::from_snapshot(task)))
}

/// A task's recorded steps.
#[utoipa::path(get, path = "/v1/tasks/{id}/steps", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id"), StepsQuery),
    responses((status = 200, description = "steps in order", body = StepPage)))]
pub async fn list_steps(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Query(query): Query<StepsQuery>,
) -> Result<axum::Json<StepPage>, ApiError> {
    if query.limit == Some(0) {
        return Err(ApiError::invalid("limit must be at least 1"));
    }
    if query.from == Some(0) {
        return Err(ApiError::invalid("from must be at least 1"));
    }
    let steps = state
        .tasks
        .steps(
            &id.to_string(),
            &caller,
            query.from.unwrap_or(1),
            query.limit.unwrap_or(0),
        )
        .await?;
    Ok(axum::Json(StepPage {
        steps: steps.into_iter().map(StepView::from).collect(),
    }))
}

/// A step's screenshot (PNG or JPEG bytes): as stored, or drawn again from the clean one and the step's
/// recipe (the annotated image as the model was sent it, the selected control's crop).
#[utoipa::path(get, path = "/v1/tasks/{id}/steps/{n}/screenshot", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id"),
           ("n" = u64, Path, minimum = 1, description = "step number"), ScreenshotQuery),
    responses((status = 200, description = "image bytes")))]
pub async fn screenshot(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, n)): Path<(Uuid, u64)>,
    Query(query): Query<ScreenshotQuery>,
) -> Result<Response, ApiError> {
    let kind = match query.kind.unwrap_or_default() {
        ScreenshotKind::Clean => ArtifactKind::CleanScreenshot,
        ScreenshotKind::Annotated => ArtifactKind::AnnotatedScreenshot,
        ScreenshotKind::Desktop => ArtifactKind::DesktopScreenshot,
        ScreenshotKind::Selected => ArtifactKind::SelectedControlScreenshot,
        ScreenshotKind::After => ArtifactKind::AfterScreenshot,
    };
    let artifact = state
        .tasks
        .artifact(&id.to_string(), &caller, n, kind)
        .await?;
    let content_type = artifact
        .r#ref
        .map(|r| r.content_type)
        .filter(|t| t == "image/png" || t == "image/jpeg")
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    Ok(([(header::CONTENT_TYPE, content_type)], artifact.data).into_response())
}

/// Answers the pending questions, in order.
#[utoipa::path(post, path = "/v1/tasks/{id}/answers", tag = "human in the loop",
    params(("id" = Uuid, Path, description = "task id")), request_body = AnswersBody,
    responses((status = 200, description = "the task after the answers", body = TaskView)))]
pub async fn answer(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<AnswersBody>,
) -> Result<axum::Json<TaskView>, ApiError> {
    let task = state
        .tasks
        .answer(
            &id.to_string(),
            &caller,
            body.question_ids,
            body.answers.into_iter().map(|a| a.0).collect(),
        )
        .await?;
    Ok(axum::Json(TaskView::from_snapshot(task)))
}

/// Approves or rejects the held action.
#[utoipa::path(post, path = "/v1/tasks/{id}/confirmation", tag = "human in the loop",
    params(("id" = Uuid, Path, description = "task id")), request_body = ConfirmationBody,
    responses((status = 200, description = "the task after the decision", body = TaskView)))]
pub async fn confirm(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<ConfirmationBody>,
) -> Result<axum::Json<TaskView>, ApiError> {
    let task = state
        .tasks
        .confirm(
            &id.to_string(),
            &caller,
            &body.action_id,
            body.approve,
            body.reason.as_deref().unwrap_or_default(),
        )
        .await?;
    Ok(axum::Json(TaskView::from_snapshot(task)))
}

/// Adds a follow-up request: a new round in the same session.
#[utoipa::path(post, path = "/v1/tasks/{id}/requests", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id")), request_body = FollowUpBody,
    responses((status = 202, description = "the round is queued", body = TaskView)))]
pub async fn add_request(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<FollowUpBody>,
) -> Result<Response, ApiError> {
    let task = state
        .tasks
        .add_request(&id.to_string(), &caller, body.request)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(TaskView::from_snapshot(task)),
    )
        .into_response())
}

/// Asks the task to stop; a queued task is cancelled at once.
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id")), request_body(content = Option<CancelBody>),
    responses((status = 202, description = "cancellation requested", body = TaskView)))]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    // The body is optional (`curl -X POST .../cancel` works), so it is parsed here rather than extracted;
    // when present it must be a JSON object like every other body (`[]` or `null` is 400).
    let body: Option<CancelBody> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(e.to_string()))?;
        if !value.is_object() {
            return Err(ApiError::invalid("the body must be a JSON object"));
        }
        Some(serde_json::from_value(value).map_err(|e| ApiError::invalid(e.to_string()))?)
    };
    let body = body.unwrap_or_default();
    let reason = body.reason.unwrap_or_default();
    let task = state.tasks.cancel(&id.to_string(), &caller, reason).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(TaskView::from_snapshot(task)),
    )
        .into_response())
}

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "alive", body = HealthView)))]
pub async fn healthz() -> axum::Json<HealthView> {
    axum::Json(HealthView {
        status: "ok".into(),
    })
}

/// Readiness: the session service answers and the service is not shutting down.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "ready", body = HealthView)))]
pub async fn readyz(State(state): State<AppState>) -> Result<axum::Json<HealthView>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::new(
            ufo_common::ErrorCode::Unavailable,
            "shutting down",
        ));
    }
    state.tasks.ready().await?;
    Ok(axum::Json(HealthView {
        status: "ok".into(),
    }))
}
