//! `GET /v1/tasks/{id}/events`: the task's event log as server-sent events, for browsers and scripts that
//! do not speak gRPC. It relays the same session-service watch as gRPC `StreamSteps` (replay from a
//! sequence number, then live), so the two never disagree.
//!
//! Each event's SSE `id:` is its `seq`, so a client that reconnects with `Last-Event-ID: N` (what
//! `EventSource` sends by itself) resumes at `N + 1`: no gap and no duplicate, because the log has neither.
//! Comment lines keep idle connections open through proxies. After the task's terminal event the stream
//! sends `event: end` with the task's final status and closes; a failure of the session service mid-stream
//! is sent as `event: error` with the usual `{code, message}` before closing.

use super::auth::Caller;
use axum::Extension;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt as _};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use ufo_proto::v1::{Event, EventKind};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::model::TaskStatus;
use super::service::Tasks;

/// `GET /v1/tasks/{id}/events` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// First sequence number to send (default 1: the whole log). A `Last-Event-ID` header overrides it.
    #[param(minimum = 1)]
    pub from_seq: Option<u64>,
}

/// One event of the task's log: the `data:` of an SSE message (its `event:` is `kind`, its `id:` `seq`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventView {
    /// 1-based, per task, without gaps.
    pub seq: u64,
    /// e.g. `step_finished`, `question_asked`, `action_held`, `task_finished`.
    pub kind: String,
    /// The step it belongs to; 0 when none.
    pub step: u64,
    /// The round it belongs to; 0 when none.
    pub round: u32,
    /// RFC 3339.
    pub created_at: String,
    /// Kind-specific details.
    pub payload: Json,
}

impl From<Event> for EventView {
    fn from(event: Event) -> Self {
        Self {
            seq: event.seq,
            kind: event_kind(event.kind),
            step: event.step,
            round: event.round,
            created_at: event
                .created_at
                .and_then(|t| {
                    chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
                })
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            payload: ufo_proto::json::from_optional_struct(event.payload),
        }
    }
}

/// The last message of a stream: `event: end`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StreamEnd {
    /// The task's status when the stream ended.
    pub status: TaskStatus,
    /// Its result or failure reason.
    pub result: String,
    /// The newest sequence number.
    pub last_seq: u64,
}

fn event_kind(kind: i32) -> String {
    EventKind::try_from(kind)
        .map(|k| {
            k.as_str_name()
                .trim_start_matches("EVENT_KIND_")
                .to_lowercase()
        })
        .unwrap_or_else(|_| "unspecified".to_owned())
}

/// Where to start: `Last-Event-ID + 1` when the header is present (a reconnect), else `from_seq`.
fn start_seq(headers: &HeaderMap, query: &EventsQuery) -> Result<u64, ApiError> {
    if query.from_seq == Some(0) {
        return Err(ApiError::invalid("from_seq must be at least 1"));
    }
    match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(|seen| seen.checked_add(1))
            .ok_or_else(|| {
                ApiError::invalid("Last-Event-ID must be the seq of an event (an integer)")
            }),
        None => Ok(query.from_seq.unwrap_or(1)),
    }
}

/// Streams the task's events (`text/event-stream`).
#[utoipa::path(get, path = "/v1/tasks/{id}/events", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id"), EventsQuery,
           ("Last-Event-ID" = Option<u64>, Header,
            description = "the seq of the last event received; the stream resumes after it")),
    responses((status = 200, content_type = "text/event-stream", body = String,
        description = "Server-sent events (a stream of text messages, not one JSON document). Each message is \
`id: <seq>`, `event: <kind>`, `data: <EventView JSON>` (schema `#/components/schemas/EventView`); comment \
lines (`:`) are keep-alives. After the task's terminal event the last message is `event: end` with \
`data: <StreamEnd JSON>` (`#/components/schemas/StreamEnd`); a failure mid-stream is `event: error` with \
`data: {code, message}` (`#/components/schemas/Error`).")))]
pub async fn events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let from = start_seq(&headers, &query)?;
    let id = id.to_string();
    // Unknown task (or another caller's): 404 now, not an empty stream.
    state.tasks.get(&id, &caller).await?;
    let upstream = state.tasks.watch(&id, from).await?;
    let keep_alive = Duration::from_secs(state.tasks.limits().viewer.sse_keepalive_seconds);
    let span = tracing::info_span!("sse.events", task_id = %id, from_seq = from);
    let stream = relay(upstream, state.tasks.clone(), id, caller, span).into_future_stream();
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive)))
}

enum Phase {
    Relay,
    Done,
}

struct Relay<S> {
    upstream: S,
    tasks: Tasks,
    id: String,
    caller: Caller,
    phase: Phase,
    span: tracing::Span,
}

fn relay<S>(
    upstream: S,
    tasks: Tasks,
    id: String,
    caller: Caller,
    span: tracing::Span,
) -> Relay<S> {
    Relay {
        upstream,
        tasks,
        id,
        caller,
        phase: Phase::Relay,
        span,
    }
}

impl<S> Relay<S>
where
    S: Stream<Item = Result<Event, tonic::Status>> + Send + Unpin + 'static,
{
    /// The frames: every event, then `end` (or `error`), then nothing. The upstream watch is dropped (and
    /// so cancelled) as soon as the client goes away, because axum drops this stream.
    fn into_future_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send {
        futures::stream::unfold(self, |s| {
            let span = s.span.clone();
            tracing::Instrument::instrument(Self::next_frame(s), span)
        })
    }

    async fn next_frame(mut s: Self) -> Option<(Result<SseEvent, Infallible>, Self)> {
        if matches!(s.phase, Phase::Done) {
            return None;
        }
        let frame = match s.upstream.next().await {
            Some(Ok(event)) => message(event),
            Some(Err(status)) => {
                s.phase = Phase::Done;
                failure(&ApiError::from(status))
            }
            None => {
                s.phase = Phase::Done;
                match s.tasks.get(&s.id, &s.caller).await {
                    Ok(task) => json_event(
                        "end",
                        &StreamEnd {
                            status: TaskStatus::from_proto(task.session.status),
                            result: task.session.result,
                            last_seq: task.session.last_seq,
                        },
                    ),
                    Err(e) => failure(&e),
                }
            }
        };
        Some((Ok(frame), s))
    }
}

fn message(event: Event) -> SseEvent {
    let seq = event.seq;
    let view = EventView::from(event);
    json_event(&view.kind.clone(), &view).id(seq.to_string())
}

fn failure(error: &ApiError) -> SseEvent {
    json_event(
        "error",
        &ufo_common::ErrorBody::new(error.code, error.message.clone()),
    )
}

fn json_event<T: Serialize>(name: &str, data: &T) -> SseEvent {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned());
    SseEvent::default().event(name).data(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(last: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = last {
            h.insert("last-event-id", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn last_event_id_overrides_from_seq() {
        let q = EventsQuery { from_seq: Some(3) };
        assert_eq!(start_seq(&headers(None), &q).unwrap(), 3);
        assert_eq!(start_seq(&headers(Some("7")), &q).unwrap(), 8);
        assert_eq!(
            start_seq(&headers(None), &EventsQuery::default()).unwrap(),
            1
        );
        assert!(start_seq(&headers(Some("x")), &q).is_err());
        assert!(start_seq(&headers(Some(&u64::MAX.to_string())), &q).is_err());
        assert!(start_seq(&headers(None), &EventsQuery { from_seq: Some(0) }).is_err());
    }

    #[test]
    fn kinds_are_snake_case() {
        assert_eq!(event_kind(EventKind::StepFinished as i32), "step_finished");
        assert_eq!(event_kind(999), "unspecified");
    }
}
