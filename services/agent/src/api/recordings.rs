//! Human demonstrations over REST (issue 33, `ufo record`): `POST /v1/recordings` starts recording what
//! a person does on a registered executor (`record_input`, docs/knowledge.md), `GET /v1/recordings/{id}`
//! shows the steps so far, and `POST /v1/recordings/{id}/stop` stops it, turns its steps into a
//! demonstration ([`crate::runner::demonstration`]) and stores it in the knowledge store as the
//! caller's, kind `demonstration`, where the agents retrieve it like an experience. A recording is its
//! caller's: another caller's id is not found. Recordings in progress are kept by this agent replica
//! (the executor holds the steps); the stored demonstration is durable like any knowledge.
//!
//! The demonstration is also a session of its owner the viewer and `ufo show` display like a task
//! (view kind `demonstration`; the session store's kind DIRECT: recorded by the agent, never run by a
//! runner): one step per action of the person's, agent `Person`, with the action on its control's
//! selector and the screenshot the executor kept for it (the desktop as the person saw it when the
//! step was resolved), put in the blob store like any step's. The knowledge item's `task_id` is that
//! session: reuse follows a demonstration through it (`super::reuse`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tracing::Instrument as _;
use ufo_common::ErrorCode;
use ufo_mcp_server::ToolError;
use ufo_proto::v1::{
    self as pb, AddExperienceRequest, AgentKind, ArtifactKind, KnowledgeKind, Step,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::direct::WholeStep;
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use super::knowledge::MAX_APP_CHARS;
use crate::runner::demonstration::{DemoStep, indexed, steps, summarise};
use crate::runner::person::PERSON;
use crate::store::blobs::ArtifactUpload;

/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// A recording in progress.
#[derive(Debug, Clone)]
struct Recording {
    owner: String,
    executor: String,
    app: String,
    description: String,
    started: Instant,
    started_at: SystemTime,
}

/// The recordings this agent started and has not stopped.
#[derive(Debug, Default)]
pub struct Recordings {
    inner: Mutex<HashMap<String, Recording>>,
}

impl Recordings {
    fn get(&self, id: &str, caller: &Caller) -> Result<Recording, ApiError> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the recordings are unusable"))?;
        inner
            .get(id)
            .filter(|r| r.owner == caller.name)
            .cloned()
            .ok_or_else(not_found)
    }
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such recording")
}

/// `POST /v1/recordings`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The registered executor (a desktop) to record on; absent = the server's default.
    #[serde(default)]
    #[schema(max_length = 100)]
    pub executor: Option<String>,
    /// The application shown (e.g. `zenity`); the demonstration is retrieved for it.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f\s][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub app: String,
    /// What the person shows, as a request would say it (the demonstration's title).
    #[schema(
        min_length = 1,
        max_length = 1000,
        pattern = r"^[^\x00]*[^\x00\s][^\x00]*$"
    )]
    pub description: String,
    /// Longest recording in seconds (at most the executor's `--record-max-seconds`).
    #[serde(default)]
    pub max_seconds: Option<f64>,
    /// Most steps (at most the executor's `--record-max-events`).
    #[serde(default)]
    pub max_events: Option<u32>,
}

/// `GET /v1/recordings/{id}`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PollQuery {
    /// The first recorded event to return (0: all).
    pub from: Option<u32>,
}

/// A recording.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecordingView {
    /// Its id.
    pub id: String,
    /// The executor it records on.
    pub executor: String,
    /// The application shown.
    pub app: String,
    /// What the person shows.
    pub description: String,
    /// `recording`, or `stopped` once it ended by itself at a bound (stop it to store it).
    pub state: String,
    /// Why it ended: `max_events`, `max_duration`, `input_ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Recorded events so far (the next poll's `from`).
    pub events: u32,
    /// The steps of the events from `from` (windows that opened are events, not steps).
    pub steps: Vec<DemoStep>,
    /// Milliseconds since it started.
    pub elapsed_ms: u64,
}

/// A stored demonstration.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DemonstrationView {
    /// The knowledge item's id.
    pub id: String,
    /// Its source, as search hits cite it: `recording:<recording id>`.
    pub source: String,
    /// The recording it came from.
    pub recording: String,
    /// Its owner (the caller).
    pub owner: String,
    /// The application.
    pub app: String,
    /// What the person showed.
    pub description: String,
    /// Why the recording ended: `asked`, `max_events`, `max_duration`, `input_ended`.
    pub ended: String,
    /// The steps.
    pub steps: Vec<DemoStep>,
    /// The summary stored (what the agents' prompts quote).
    pub text: String,
    /// The session that shows it step by step with screenshots (`GET /v1/tasks/{session}/steps`,
    /// the viewer's `#/task/{session}`, `ufo show {session} --steps`).
    pub session: String,
    /// Steps stored with a screenshot.
    pub screenshots: u32,
}

fn tool_error(e: ToolError) -> ApiError {
    let code = serde_json::from_value::<ErrorCode>(Value::String(e.code.clone()))
        .unwrap_or(ErrorCode::Internal);
    ApiError::new(code, e.message)
}

fn check_text(field: &str, value: &str, max: usize, lines: bool) -> Result<(), ApiError> {
    // Blank as the documented pattern says (JavaScript's \s: U+FEFF is blank, U+0085 is not).
    let blank = |c: char| (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}';
    if value.chars().all(blank) {
        return Err(ApiError::invalid(format!("{field} is required")));
    }
    if value.contains('\0') || (!lines && value.chars().any(char::is_control)) {
        return Err(ApiError::invalid(format!(
            "{field} must not contain NUL or control characters"
        )));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "{field} must be at most {max} characters"
        )));
    }
    Ok(())
}

fn events_of(result: &Value) -> Vec<Value> {
    result
        .get("events")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn count(result: &Value, key: &str) -> u64 {
    result.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn view(id: &str, r: &Recording, result: &Value) -> RecordingView {
    RecordingView {
        id: id.to_owned(),
        executor: r.executor.clone(),
        app: r.app.clone(),
        description: r.description.clone(),
        state: result
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("recording")
            .to_owned(),
        ended: result
            .get("ended")
            .and_then(Value::as_str)
            .map(str::to_owned),
        events: u32::try_from(count(result, "total")).unwrap_or(u32::MAX),
        steps: steps(&events_of(result)),
        elapsed_ms: u64::try_from(r.started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Starts recording what a person does on an executor, as the caller.
#[utoipa::path(post, path = "/v1/recordings", tag = "knowledge", request_body = StartBody,
    responses((status = 201, description = "recording; show the steps, then stop it", body = RecordingView),
              (status = 409, description = "the executor records already (or has an uncollected recording)")))]
pub async fn start_recording(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<StartBody>,
) -> Result<(StatusCode, axum::Json<RecordingView>), ApiError> {
    check_text("app", &body.app, MAX_APP_CHARS, false)?;
    check_text(
        "description",
        &body.description,
        MAX_DESCRIPTION_CHARS,
        true,
    )?;
    if let Some(s) = body.max_seconds
        && !(s.is_finite() && s > 0.0)
    {
        return Err(ApiError::invalid("max_seconds must be a number above 0"));
    }
    let executor = state
        .tasks
        .executors()
        .resolve(body.executor.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::invalid(format!("executor: {e}")))?
        .0;
    if executor.is_empty() {
        return Err(ApiError::invalid(
            "executor must be the name of an executor the operator registered, not an address",
        ));
    }
    let recordings = state.tasks.recordings();
    // The caller's own unfinished recording on this executor (a `ufo record` that went away) is
    // abandoned: its steps are dropped, and the executor records again.
    let abandoned: Vec<String> = recordings
        .inner
        .lock()
        .map(|m| {
            m.iter()
                .filter(|(_, r)| r.executor == executor && r.owner == caller.name)
                .map(|(id, _)| id.clone())
                .collect()
        })
        .unwrap_or_default();
    for old in abandoned {
        let stopped = state
            .tasks
            .desktop()
            .record_input(&executor, json!({"action": "stop"}))
            .await;
        if let Ok(mut m) = recordings.inner.lock() {
            m.remove(&old);
        }
        tracing::warn!(recording = %old, caller = %caller.name, stopped = stopped.is_ok(),
            "an unfinished recording of the caller's on this executor was abandoned");
    }
    let mut params = Map::new();
    params.insert("action".into(), json!("start"));
    if let Some(s) = body.max_seconds {
        params.insert("max_seconds".into(), json!(s));
    }
    if let Some(n) = body.max_events {
        params.insert("max_events".into(), json!(n));
    }
    let id = Uuid::new_v4().to_string();
    let span =
        tracing::info_span!("recording.start", recording = %id, caller = %caller.name, %executor);
    let result = state
        .tasks
        .desktop()
        .record_input(&executor, Value::Object(params))
        .instrument(span)
        .await
        .map_err(tool_error)?;
    let r = Recording {
        owner: caller.name.clone(),
        executor,
        app: body.app.trim().to_owned(),
        description: body.description.trim().to_owned(),
        started: Instant::now(),
        started_at: SystemTime::now(),
    };
    let v = view(&id, &r, &result);
    recordings
        .inner
        .lock()
        .map_err(|_| ApiError::new(ErrorCode::Internal, "the recordings are unusable"))?
        .insert(id.clone(), r);
    tracing::info!(recording = %id, caller = %caller.name, "recording started");
    Ok((StatusCode::CREATED, axum::Json(v)))
}

/// The caller's recording: its steps so far.
#[utoipa::path(get, path = "/v1/recordings/{id}", tag = "knowledge",
    params(("id" = String, Path, description = "the recording's id"), PollQuery),
    responses((status = 200, description = "the steps so far", body = RecordingView),
              (status = 404, description = "no such recording of the caller's")))]
pub async fn get_recording(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<PollQuery>,
) -> Result<axum::Json<RecordingView>, ApiError> {
    let r = state.tasks.recordings().get(&id, &caller)?;
    let mut params = json!({"action": "poll"});
    if let Some(from) = query.from {
        params["from"] = json!(from);
    }
    let result = state
        .tasks
        .desktop()
        .record_input(&r.executor, params)
        .instrument(tracing::info_span!("recording.poll", recording = %id))
        .await
        .map_err(tool_error)?;
    Ok(axum::Json(view(&id, &r, &result)))
}

/// Stops the caller's recording and stores it as the caller's demonstration.
#[utoipa::path(post, path = "/v1/recordings/{id}/stop", tag = "knowledge",
    params(("id" = String, Path, description = "the recording's id")),
    responses((status = 200, description = "the stored demonstration", body = DemonstrationView),
              (status = 404, description = "no such recording of the caller's"),
              (status = 409, description = "nothing was recorded: nothing stored")))]
pub async fn stop_recording(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<axum::Json<DemonstrationView>, ApiError> {
    let recordings = state.tasks.recordings();
    let r = recordings.get(&id, &caller)?;
    let span = tracing::info_span!("recording.stop", recording = %id, caller = %caller.name,
        steps = tracing::field::Empty);
    async {
        let result = state
            .tasks
            .desktop()
            .record_input(&r.executor, json!({"action": "stop"}))
            .await;
        // The executor's recording is over (or gone) either way.
        if let Ok(mut inner) = recordings.inner.lock() {
            inner.remove(&id);
        }
        let result = result.map_err(tool_error)?;
        let events = events_of(&result);
        let shown = indexed(&events);
        let steps: Vec<DemoStep> = shown.iter().map(|(_, s)| s.clone()).collect();
        tracing::Span::current().record("steps", steps.len());
        if steps.is_empty() {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                "nothing was recorded (0 steps): no demonstration stored",
            ));
        }
        let (session, screenshots) = store_session(&state, &caller, &r, &id, &events, &shown)
            .await
            .map_err(tool_error)?;
        let max = state.tasks.knowledge_experience_chars();
        let text = summarise(&r.description, &r.app, &steps, max);
        let source = format!("recording:{id}");
        let item = state
            .tasks
            .knowledge()
            .client()
            .add_experience(AddExperienceRequest {
                kind: KnowledgeKind::Demonstration.into(),
                task_id: session.clone(),
                owner: caller.name.clone(),
                application: r.app.clone(),
                title: r.description.clone(),
                body: text.clone(),
                succeeded: true,
                source: source.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        tracing::info!(recording = %id, demonstration = %item.id, steps = steps.len(), "demonstration stored");
        Ok(axum::Json(DemonstrationView {
            id: item.id,
            source,
            recording: id.clone(),
            owner: caller.name.clone(),
            app: item.application,
            description: r.description.clone(),
            ended: result
                .get("ended")
                .and_then(Value::as_str)
                .unwrap_or("asked")
                .to_owned(),
            steps,
            text,
            session,
            screenshots,
        }))
    }
    .instrument(span)
    .await
}

/// How a step's action reads in `ufo show`: `set_edit_text "Gemini 4" on Edit "Project name:"`.
fn representation(step: &DemoStep) -> String {
    let mut text = step.action.clone();
    if let Some(said) = &step.text {
        text.push_str(&format!(" {said:?}"));
    }
    match (&step.selector, step.point) {
        (Some(sel), _) => text.push_str(&format!(" on {} {:?}", sel.control_type, sel.name)),
        (None, Some([x, y])) => text.push_str(&format!(" at ({x}, {y})")),
        (None, None) => {}
    }
    text
}

fn pair(v: &Value) -> Option<[i64; 2]> {
    let a = v.as_array()?;
    Some([a.first()?.as_i64()?, a.get(1)?.as_i64()?])
}

/// What the step acted on in its screenshot's pixels (the viewer draws it): the control's rectangle
/// and where the pointer was (a click's point, else the control's centre).
fn acted(step: &DemoStep, event: &Value, origin: [i64; 2]) -> Option<Value> {
    let r = event["control"]["rect"].as_array()?;
    let r: Vec<i64> = r.iter().filter_map(Value::as_i64).collect();
    let [l, t, rt, b] = <[i64; 4]>::try_from(r).ok()?;
    let [x, y] = pair(&event["point"]).unwrap_or([(l + rt) / 2, (t + b) / 2]);
    let [ox, oy] = origin;
    Some(json!([{"function": step.action, "label": "",
        "rect": [l - ox, t - oy, rt - ox, b - oy], "point": [x - ox, y - oy]}]))
}

/// Records the demonstration as a session of the caller's, one step per action with its screenshot
/// (read from the executor, which keeps them until its next recording): its id and how many steps
/// have a screenshot.
async fn store_session(
    state: &AppState,
    caller: &Caller,
    r: &Recording,
    id: &str,
    events: &[Value],
    shown: &[(usize, DemoStep)],
) -> Result<(String, u32), ToolError> {
    let desktop = state.tasks.desktop();
    let last = shown.len();
    let mut whole = Vec::with_capacity(last);
    let mut screenshots = 0;
    for (n, (index, step)) in (1..).zip(shown) {
        let event = events.get(*index).cloned().unwrap_or(Value::Null);
        let mut artifacts = Vec::new();
        let mut extra = Map::new();
        let mut about = json!({"recording": id, "window": step.window, "process": step.process,
                               "at_ms": step.at_ms, "resolved": event["resolved"]});
        if let Some(p) = step.point {
            about["point"] = json!(p);
        }
        if event["screenshot"].is_object() {
            let shot = desktop.record_screenshot(&r.executor, *index).await?;
            let origin = [i64::from(shot.origin_x), i64::from(shot.origin_y)];
            if let Some(marks) = acted(step, &event, origin) {
                extra.insert("acted".into(), marks);
            }
            let mut metadata = Map::new();
            metadata.insert("width".into(), json!(shot.width));
            metadata.insert("height".into(), json!(shot.height));
            metadata.insert("origin".into(), json!([shot.origin_x, shot.origin_y]));
            metadata.insert("scale".into(), json!(shot.scale));
            metadata.insert("what".into(), json!("desktop, as the person saw it"));
            artifacts.push(ArtifactUpload {
                kind: ArtifactKind::CleanScreenshot,
                content_type: shot.mime.clone(),
                data: shot.bytes.clone(),
                metadata,
            });
            screenshots += 1;
        }
        extra.insert("demonstration".into(), about);
        let status = if n == last { "FINISH" } else { "CONTINUE" };
        let representation = representation(step);
        let at = r.started_at + Duration::from_millis(step.at_ms);
        let action = pb::Action {
            function: step.action.clone(),
            arguments: Some(ufo_proto::json::object_to_struct(step.arguments.clone())),
            status: "CONTINUE".into(),
            result: Some(pb::Result {
                status: pb::ResultStatus::Success as i32,
                ..Default::default()
            }),
            target_name: step
                .selector
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            representation: representation.clone(),
            selector: step.selector.as_ref().map(|s| s.to_proto()),
            ..Default::default()
        };
        let comment = format!("the person: {representation}");
        let row = Step {
            round: 1,
            round_step: u32::try_from(n).unwrap_or(u32::MAX),
            agent_name: PERSON.into(),
            agent_kind: AgentKind::App as i32,
            state_before: "CONTINUE".into(),
            state_after: status.into(),
            subtask: r.description.clone(),
            observation: format!("in {:?} ({})", step.window, step.process),
            comment: comment.clone(),
            status: status.into(),
            actions: vec![action],
            started_at: Some(at.into()),
            finished_at: Some(at.into()),
            extra: Some(ufo_proto::json::object_to_struct(extra)),
            ..Default::default()
        };
        let memory = json!({"agent_name": PERSON, "comment": comment, "status": status,
                            "action_representation": representation});
        whole.push(WholeStep {
            step: row,
            memory: memory.as_object().cloned().unwrap_or_default(),
            artifacts,
        });
    }
    let config = json!({"executor": r.executor, "direct": true,
                        "demonstration": {"recording": id, "app": r.app}});
    let result = format!(
        "demonstrated by {} (ufo record): {last} steps, {screenshots} with a screenshot",
        caller.name
    );
    let session = desktop
        .direct()
        .record_whole(&caller.name, &r.description, config, whole, &result)
        .instrument(
            tracing::info_span!("recording.store_session", recording = %id,
            steps = last, screenshots),
        )
        .await?;
    Ok((session, screenshots))
}
