//! Takeover (docs/live.md): a person takes a task's desktop over (`POST /v1/tasks/{id}/takeover`), the
//! runner pauses the agents at the next step boundary, the person's clicks and keys
//! (`POST /v1/tasks/{id}/input`) are delivered to the desktop by the runner, each recorded as a step of
//! the person's, and `POST /v1/tasks/{id}/handback` gives the desktop back to the agents. The state is
//! the task's event log (`takeover_requested`, `person_input`, `handed_back`): durable, and the same for
//! every replica.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde::Serialize;
use serde_json::json;
use ufo_common::ErrorCode;
use ufo_proto::v1::{AppendEventsRequest, EventKind, SessionStatus};
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Json, Path};
use super::{AppState, Tasks};
use crate::runner::person::PersonInput;

/// The answer of a takeover call.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TakeoverView {
    /// The task.
    pub task_id: String,
    /// Whether a person has the desktop now (after this call).
    pub taken_over: bool,
    /// The sequence number of the event this call wrote.
    pub seq: u64,
}

impl Tasks {
    /// Whether a person has taken task `session_id`'s desktop over: a `takeover_requested` after the
    /// last `handed_back` in its events up to `last_seq`.
    async fn taken_over(&self, session_id: &str, last_seq: u64) -> Result<bool, ApiError> {
        if last_seq == 0 {
            return Ok(false);
        }
        let mut taken = false;
        let mut stream = self.watch(session_id, 1).await?;
        while let Some(event) = stream.next().await {
            let event = event?;
            match EventKind::try_from(event.kind) {
                Ok(EventKind::TakeoverRequested) => taken = true,
                Ok(EventKind::HandedBack) => taken = false,
                _ => {}
            }
            if event.seq >= last_seq {
                break;
            }
        }
        Ok(taken)
    }

    async fn person_event(
        &self,
        id: &str,
        caller: &Caller,
        kind: EventKind,
        payload: serde_json::Value,
        want_taken: Option<bool>,
    ) -> Result<TakeoverView, ApiError> {
        let session = self.session(id, caller).await?;
        if matches!(
            SessionStatus::try_from(session.status),
            Ok(SessionStatus::Finished | SessionStatus::Failed | SessionStatus::Cancelled)
        ) {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "task {} has ended: there is no desktop to take over",
                    session.id
                ),
            ));
        }
        let taken = self.taken_over(&session.id, session.last_seq).await?;
        if let Some(want) = want_taken
            && want != taken
        {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                if taken {
                    "a person has already taken this task's desktop over".to_owned()
                } else {
                    "nobody has taken this task's desktop over: POST /v1/tasks/{id}/takeover first"
                        .to_owned()
                },
            ));
        }
        let mut payload = payload;
        payload["by"] = json!(caller.name);
        let written = self
            .client()
            .append_events(AppendEventsRequest {
                session_id: session.id.clone(),
                events: vec![crate::round::output::draft(kind, payload, 0)],
                lease_owner: String::new(),
            })
            .await?
            .into_inner();
        let seq = written.events.last().map_or(0, |e| e.seq);
        Ok(TakeoverView {
            task_id: session.id,
            taken_over: kind != EventKind::HandedBack,
            seq,
        })
    }

    /// Takes task `id`'s desktop over for `caller`.
    #[tracing::instrument(skip(self, caller))]
    pub async fn takeover(&self, id: &str, caller: &Caller) -> Result<TakeoverView, ApiError> {
        self.person_event(
            id,
            caller,
            EventKind::TakeoverRequested,
            json!({}),
            Some(false),
        )
        .await
    }

    /// Hands task `id`'s desktop back to its agents.
    #[tracing::instrument(skip(self, caller))]
    pub async fn handback(&self, id: &str, caller: &Caller) -> Result<TakeoverView, ApiError> {
        self.person_event(id, caller, EventKind::HandedBack, json!({}), Some(true))
            .await
    }

    /// Queues a person's input for task `id`'s desktop, once checked: its lengths and characters here, a
    /// click's point against the executor's screens.
    #[tracing::instrument(skip(self, caller, input))]
    pub async fn person_input(
        &self,
        id: &str,
        caller: &Caller,
        input: PersonInput,
    ) -> Result<TakeoverView, ApiError> {
        let max = self.limits().viewer.max_person_input_bytes as usize;
        input.check(max).map_err(|e| ApiError::invalid(e.0))?;
        if let PersonInput::Click(c) = &input {
            let conn = self.executor_of(id, caller).await?;
            let mut client = self
                .executors()
                .dispatcher(&conn, 0, 1024 * 1024)
                .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("executor: {e}")))?
                .client();
            let caps = client
                .get_capabilities(ufo_proto::v1::GetCapabilitiesRequest {})
                .await
                .map_err(|s| {
                    ApiError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "the executor did not say where its screens are: {}",
                            s.message()
                        ),
                    )
                })?
                .into_inner();
            let on_screen = caps.screens.iter().any(|s| {
                c.x >= s.x
                    && c.y >= s.y
                    && i64::from(c.x) < i64::from(s.x) + i64::from(s.width)
                    && i64::from(c.y) < i64::from(s.y) + i64::from(s.height)
            });
            if !on_screen {
                return Err(ApiError::invalid(format!(
                    "click at ({}, {}) is not on a screen of the desktop ({})",
                    c.x,
                    c.y,
                    caps.screens
                        .iter()
                        .map(|s| format!("{}x{} at {},{}", s.width, s.height, s.x, s.y))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let payload = json!({ "input": input });
        self.person_event(id, caller, EventKind::PersonInput, payload, Some(true))
            .await
    }
}

/// Takes the task's desktop over: the agents pause at the next step boundary (after the round's first
/// step, when nothing waits for an answer or a decision) until the desktop is handed back.
#[utoipa::path(post, path = "/v1/tasks/{id}/takeover", tag = "human in the loop",
    params(("id" = Uuid, Path, description = "task id")),
    responses((status = 202, description = "takeover requested", body = TakeoverView)))]
pub async fn takeover(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<Response, ApiError> {
    let view = state.tasks.takeover(&id.to_string(), &caller).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(view)).into_response())
}

/// A person's click, keys or text for the desktop they took over; delivered by the task's runner in
/// order, each recorded as a step of the person's (`agent_kind` `person`).
#[utoipa::path(post, path = "/v1/tasks/{id}/input", tag = "human in the loop",
    params(("id" = Uuid, Path, description = "task id")), request_body = PersonInput,
    responses((status = 202, description = "queued for the desktop", body = TakeoverView)))]
pub async fn input(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<PersonInput>,
) -> Result<Response, ApiError> {
    let view = state
        .tasks
        .person_input(&id.to_string(), &caller, body)
        .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(view)).into_response())
}

/// Hands the desktop back: the agents go on, observing first; their next prompt says what the person did.
#[utoipa::path(post, path = "/v1/tasks/{id}/handback", tag = "human in the loop",
    params(("id" = Uuid, Path, description = "task id")),
    responses((status = 202, description = "handed back", body = TakeoverView)))]
pub async fn handback(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<Response, ApiError> {
    let view = state.tasks.handback(&id.to_string(), &caller).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(view)).into_response())
}
