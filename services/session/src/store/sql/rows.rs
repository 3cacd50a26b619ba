//! Rows → protobuf messages. A stored value that cannot be read back is `StoreError::Corrupt`.

use chrono::{DateTime, Utc};
use prost_types::Timestamp;
use serde_json::Value as Json;
use sqlx::types::Json as SqlJson;
use ufo_proto::v1::{
    AgentKind, ArtifactKind, ArtifactRef, BlackboardEntry, BlackboardKind, Event, EventKind,
    ExperienceRating, KnowledgeItem, KnowledgeKind, Round, RoundStatus, Session, SessionStatus,
    Step, Totals,
};

use super::{api_u32, api_u64};
use crate::store::step_json;
use crate::store::{DbEnum, StoreError, StoreResult};

pub(super) use super::db::Row;

/// A timestamp for protobuf.
pub(super) fn ts(t: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

pub(super) fn opt_ts(t: Option<DateTime<Utc>>) -> Option<Timestamp> {
    t.map(ts)
}

fn json(row: &Row, column: &str) -> StoreResult<Json> {
    Ok(row.try_get::<SqlJson<Json>, _>(column)?.0)
}

fn struct_of(value: Json) -> Option<prost_types::Struct> {
    match value {
        Json::Object(map) => Some(ufo_proto::json::object_to_struct(map)),
        _ => None,
    }
}

fn enum_of<E: DbEnum>(row: &Row, column: &str) -> StoreResult<E> {
    let text: String = row.try_get(column)?;
    E::from_db(&text).ok_or_else(|| StoreError::Corrupt(format!("{column} = {text:?}")))
}

/// A `sessions` row.
pub(super) fn session(row: &Row) -> StoreResult<Session> {
    let status: SessionStatus = enum_of(row, "status")?;
    Ok(Session {
        id: row.try_get::<uuid::Uuid, _>("id")?.to_string(),
        request: row.try_get("request")?,
        status: status.into(),
        config: struct_of(json(row, "config")?),
        totals: Some(Totals {
            steps: api_u64(row.try_get("steps")?),
            cost: row.try_get("cost")?,
            input_tokens: api_u64(row.try_get("input_tokens")?),
            output_tokens: api_u64(row.try_get("output_tokens")?),
        }),
        lease_owner: row
            .try_get::<Option<String>, _>("lease_owner")?
            .unwrap_or_default(),
        lease_expires_at: opt_ts(row.try_get("lease_expires_at")?),
        created_at: Some(ts(row.try_get("created_at")?)),
        updated_at: Some(ts(row.try_get("updated_at")?)),
        cancel_requested: row.try_get("cancel_requested")?,
        result: row.try_get("result")?,
        rounds: api_u32(row.try_get("rounds")?),
        last_seq: api_u64(row.try_get("last_seq")?),
        owner: row.try_get("owner")?,
        // Absent from queries that name their columns: never pruned as far as they tell.
        images_pruned_at: opt_ts(row.try_get("images_pruned_at").ok().flatten()),
        parked_for: row
            .try_get::<Option<String>, _>("parked_for")
            .ok()
            .flatten()
            .and_then(|text| ufo_proto::v1::ParkReason::from_db(&text))
            .unwrap_or_default()
            .into(),
        parked_until: opt_ts(row.try_get("parked_until").ok().flatten()),
        // Only the session reads count it.
        queue_place: row.try_get::<i64, _>("queue_place").map_or(0, api_u32),
        // Absent from queries that name their columns: a task, as every session was before kinds.
        kind: row
            .try_get::<String, _>("kind")
            .ok()
            .and_then(|text| ufo_proto::v1::SessionKind::from_db(&text))
            .unwrap_or(ufo_proto::v1::SessionKind::Task)
            .into(),
        desktop_want: row
            .try_get::<Option<String>, _>("desktop_want")
            .ok()
            .flatten()
            .map(|text| super::desktops::want_of(&text))
            .transpose()?
            .map(|want| want.to_proto()),
        desktop: row
            .try_get::<Option<String>, _>("desktop")
            .ok()
            .flatten()
            .unwrap_or_default(),
        waiting_for_desktop: row.try_get("waiting_for_desktop").unwrap_or(false),
    })
}

/// A `rounds` row.
pub(super) fn round(row: &Row) -> StoreResult<Round> {
    let status: RoundStatus = enum_of(row, "status")?;
    Ok(Round {
        session_id: row.try_get::<uuid::Uuid, _>("session_id")?.to_string(),
        number: api_u32(row.try_get("number")?),
        request: row.try_get("request")?,
        status: status.into(),
        result: row.try_get("result")?,
        created_at: Some(ts(row.try_get("created_at")?)),
        started_at: opt_ts(row.try_get("started_at")?),
        finished_at: opt_ts(row.try_get("finished_at")?),
        steps: api_u32(row.try_get("steps")?),
    })
}

/// A `steps` row (artifacts are attached by the caller).
pub(super) fn step(row: &Row) -> StoreResult<Step> {
    let kind: AgentKind = enum_of(row, "agent_kind")?;
    Ok(Step {
        session_id: row.try_get::<uuid::Uuid, _>("session_id")?.to_string(),
        step: api_u64(row.try_get("step")?),
        round: api_u32(row.try_get("round")?),
        round_step: api_u32(row.try_get("round_step")?),
        agent_name: row.try_get("agent_name")?,
        agent_kind: kind.into(),
        state_before: row.try_get("state_before")?,
        state_after: row.try_get("state_after")?,
        subtask: row.try_get("subtask")?,
        observation: row.try_get("observation")?,
        thought: row.try_get("thought")?,
        plan: step_json::plan_from_json(json(row, "plan")?),
        comment: row.try_get("comment")?,
        status: row.try_get("status")?,
        actions: step_json::actions_from_json(json(row, "actions")?),
        phases: step_json::phases_from_json(json(row, "phases")?),
        cost: row.try_get("cost")?,
        input_tokens: api_u64(row.try_get("input_tokens")?),
        output_tokens: api_u64(row.try_get("output_tokens")?),
        started_at: opt_ts(row.try_get("started_at")?),
        finished_at: opt_ts(row.try_get("finished_at")?),
        extra: step_json::extra_from_json(json(row, "extra")?),
        artifacts: Vec::new(),
    })
}

/// An `events` row.
pub(super) fn event(row: &Row) -> StoreResult<Event> {
    let kind: EventKind = enum_of(row, "kind")?;
    Ok(Event {
        session_id: row.try_get::<uuid::Uuid, _>("session_id")?.to_string(),
        seq: api_u64(row.try_get("seq")?),
        kind: kind.into(),
        payload: struct_of(json(row, "payload")?),
        created_at: Some(ts(row.try_get("created_at")?)),
        step: api_u64(row.try_get("step")?),
        round: api_u32(row.try_get("round")?),
    })
}

/// A `blackboard` row with its kind.
pub(super) fn blackboard_entry(row: &Row) -> StoreResult<BlackboardEntry> {
    let kind: BlackboardKind = enum_of(row, "kind")?;
    Ok(BlackboardEntry {
        kind: kind.into(),
        index: api_u64(row.try_get("idx")?),
        value: struct_of(json(row, "value")?),
        artifact_id: row
            .try_get::<Option<String>, _>("artifact_id")?
            .unwrap_or_default(),
        step: api_u64(row.try_get("step")?),
        created_at: Some(ts(row.try_get("created_at")?)),
    })
}

/// An `artifacts` row joined with its blob's `size`.
pub(super) fn artifact_ref(row: &Row) -> StoreResult<ArtifactRef> {
    let kind: ArtifactKind = enum_of(row, "kind")?;
    Ok(ArtifactRef {
        id: row.try_get("sha256")?,
        session_id: row.try_get::<uuid::Uuid, _>("session_id")?.to_string(),
        step: api_u64(row.try_get("step")?),
        kind: kind.into(),
        content_type: row.try_get("content_type")?,
        size: api_u64(row.try_get("size")?),
        metadata: struct_of(json(row, "metadata")?),
    })
}

/// A `knowledge` row.
pub(super) fn knowledge_item(row: &Row) -> StoreResult<KnowledgeItem> {
    let kind: KnowledgeKind = enum_of(row, "kind")?;
    let rating: ExperienceRating = enum_of(row, "rating")?;
    Ok(KnowledgeItem {
        id: row.try_get::<uuid::Uuid, _>("id")?.to_string(),
        kind: kind.into(),
        owner: row.try_get("owner")?,
        application: row.try_get("application")?,
        source: row.try_get("source")?,
        title: row.try_get("title")?,
        body: row.try_get("body")?,
        code: row.try_get("code")?,
        created_at: Some(ts(row.try_get("created_at")?)),
        task_id: row
            .try_get::<Option<uuid::Uuid>, _>("task_id")?
            .map(|t| t.to_string())
            .unwrap_or_default(),
        rating: rating.into(),
        succeeded: row.try_get("succeeded")?,
        position: api_u32(row.try_get("position")?),
        shared_with: match json(row, "shared_with")? {
            Json::Array(names) => names
                .into_iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect(),
            other => {
                return Err(StoreError::Corrupt(format!(
                    "knowledge.shared_with is not an array: {other}"
                )));
            }
        },
        shared_everyone: row.try_get("shared_everyone")?,
        model_summary: row.try_get("model_summary")?,
    })
}
