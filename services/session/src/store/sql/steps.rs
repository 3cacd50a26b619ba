//! Steps: the atomic record (step row, memory item, blackboard entries, artifact links, totals, events)
//! and reading steps and memory back.

use serde_json::{Value as Json, json};
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::{
    AgentKind, ArtifactRef, BlackboardEntry, EventKind, MemoryItem, SessionStatus, Step,
};
use uuid::Uuid;

use super::board::{insert_artifacts, insert_entry};
use super::db::{AsConn, query};
use super::events::{Totals, append};
use super::sessions::session_in;
use super::{Backend, SqlStore, api_u64, check_lease, db_int, now, rows, settle};
use crate::store::postgres;
use crate::store::step_json::{actions_from_json, actions_to_json, phases_to_json};
use crate::store::{
    DbEnum as _, NewEvent, RecordedStep, StepRecord, StoreError, StoreResult, is_terminal,
};

fn ts_of(t: &Option<prost_types::Timestamp>) -> Option<chrono::DateTime<chrono::Utc>> {
    t.as_ref().and_then(|t| {
        chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
    })
}

/// Artifact references of steps `from..=to` of a session.
async fn artifacts_of(
    conn: &mut impl AsConn,
    id: Uuid,
    from: i64,
    to: i64,
) -> StoreResult<Vec<ArtifactRef>> {
    let found = query(
        "SELECT a.session_id, a.step, a.kind, a.sha256, a.content_type, a.metadata, b.size \
         FROM artifacts a JOIN artifact_blobs b ON b.sha256 = a.sha256 \
         WHERE a.session_id = $1 AND a.step >= $2 AND a.step <= $3 ORDER BY a.step, a.created_at, a.kind",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .fetch_all(conn.conn())
    .await?;
    found.iter().map(rows::artifact_ref).collect()
}

/// What the dialect's `write_step` writes once the checks passed (the session row is locked).
pub(crate) struct StepWrite<'a> {
    pub record: &'a StepRecord,
    /// Database name of the agent kind.
    pub kind: String,
    /// The actions as stored.
    pub actions: &'a Json,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl StepWrite<'_> {
    /// STEP_FINISHED, appended after the request's own events.
    pub fn finished_event(&self) -> NewEvent {
        let s = &self.record.step;
        NewEvent {
            kind: EventKind::StepFinished,
            payload: json!({
                "agent_name": s.agent_name,
                "agent_kind": self.kind,
                "state_before": s.state_before,
                "state_after": s.state_after,
                "status": s.status,
                "round_step": s.round_step,
                "subtask": s.subtask,
            }),
            step: s.step,
            round: s.round,
        }
    }
}

/// Writes a checked step statement by statement: step row, memory item, blackboard entries, round count,
/// events and totals. Returns the newest sequence number and the blackboard entries as stored. (SQLite's
/// path; Postgres does the same in its stored function, see `postgres::record_step`.)
async fn write_step_statements(
    conn: &mut impl AsConn,
    w: &StepWrite<'_>,
) -> StoreResult<(u64, Vec<BlackboardEntry>)> {
    let record = w.record;
    let s = &record.step;
    let id = record.session_id;
    let step_no = db_int(s.step);
    let at = w.at;
    query(
            "INSERT INTO steps (session_id, step, round, round_step, agent_name, agent_kind, state_before, \
             state_after, subtask, observation, thought, plan, comment, status, actions, phases, cost, \
             input_tokens, output_tokens, started_at, finished_at, extra, content_hash, recorded_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
             $20, $21, $22, $23, $24)",
        )
        .bind(id)
        .bind(step_no)
        .bind(i64::from(s.round))
        .bind(i64::from(s.round_step))
        .bind(&s.agent_name)
        .bind(w.kind.clone())
        .bind(&s.state_before)
        .bind(&s.state_after)
        .bind(&s.subtask)
        .bind(&s.observation)
        .bind(&s.thought)
        .bind(SqlJson(json!(s.plan)))
        .bind(&s.comment)
        .bind(&s.status)
        .bind(SqlJson(w.actions))
        .bind(SqlJson(phases_to_json(&s.phases)))
        .bind(s.cost)
        .bind(db_int(s.input_tokens))
        .bind(db_int(s.output_tokens))
        .bind(ts_of(&s.started_at))
        .bind(ts_of(&s.finished_at))
        .bind(SqlJson(ufo_proto::json::from_optional_struct(s.extra.clone())))
        .bind(record.content_hash.as_slice())
        .bind(at)
        .execute(conn.conn())
        .await?;
    query("INSERT INTO memory_items (session_id, step, agent_name, item) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(step_no)
        .bind(&s.agent_name)
        .bind(SqlJson(&record.memory_item))
        .execute(conn.conn())
        .await?;
    let mut board = Vec::with_capacity(record.blackboard.len());
    for entry in &record.blackboard {
        board.push(insert_entry(conn, id, entry, step_no, at).await?);
    }
    query("UPDATE rounds SET steps = steps + 1 WHERE session_id = $1 AND number = $2")
        .bind(id)
        .bind(i64::from(s.round))
        .execute(conn.conn())
        .await?;
    let mut events = record.events.clone();
    events.push(w.finished_event());
    let totals = Totals {
        steps: 1,
        cost: s.cost,
        input_tokens: db_int(s.input_tokens),
        output_tokens: db_int(s.output_tokens),
    };
    let (_, last_seq) = append(conn, id, &events, totals, at).await?;
    Ok((last_seq, board))
}

/// What recording a step did (both backends' paths end here).
pub(crate) enum Recorded {
    /// The identical step existed; nothing was written.
    Duplicate,
    /// The step was written.
    New {
        /// The session's newest sequence number.
        last_seq: u64,
        /// The blackboard entries as stored.
        board: Vec<BlackboardEntry>,
        /// The step's artifact references.
        artifacts: Vec<ArtifactRef>,
    },
}

/// What recording step $2 of round $3 needs to check (no row lock: SQLite's single writer connection
/// already serialises transactions).
const READ_FOR_STEP: &str = "SELECT s.status, s.lease_owner, st.content_hash, \
    r.status AS round_status FROM sessions s \
    LEFT JOIN steps st ON st.session_id = s.id AND st.step = $2 \
    LEFT JOIN rounds r ON r.session_id = s.id AND r.number = $3 \
    WHERE s.id = $1";

impl SqlStore {
    /// Records a step in a transaction, statement by statement: checks, artifact references, the write.
    /// (SQLite's path; Postgres does the same in one call of a stored function, see
    /// `postgres::record_step`.)
    async fn record_step_statements(&self, w: &StepWrite<'_>) -> StoreResult<Recorded> {
        let record = w.record;
        let id = record.session_id;
        let s = &record.step;
        let step_no = db_int(s.step);
        let mut tx = self.begin().await?;
        let outcome: StoreResult<Recorded> = async {
            let head = query(READ_FOR_STEP)
                .bind(id)
                .bind(step_no)
                .bind(i64::from(s.round))
                .fetch_optional(tx.conn())
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
            if let Some(existing) = head.try_get::<Option<Vec<u8>>, _>("content_hash")? {
                if existing.as_slice() != record.content_hash.as_slice() {
                    return Err(StoreError::AlreadyExists(format!(
                        "step {} of session {id} was recorded with different content",
                        s.step
                    )));
                }
                return Ok(Recorded::Duplicate);
            }
            let owner: Option<String> = head.try_get("lease_owner")?;
            check_lease(id, owner.as_deref(), record.lease_owner.as_deref())?;
            let status: String = head.try_get("status")?;
            if SessionStatus::from_db(&status).is_none_or(is_terminal) {
                return Err(StoreError::FailedPrecondition(format!(
                    "session {id} has ended ({status})"
                )));
            }
            match head.try_get::<Option<String>, _>("round_status")? {
                None => {
                    return Err(StoreError::NotFound(format!(
                        "round {} of session {id}",
                        s.round
                    )));
                }
                Some(r) if r != "running" => {
                    return Err(StoreError::FailedPrecondition(format!(
                        "round {} of session {id} is {r}, not running",
                        s.round
                    )));
                }
                Some(_) => {}
            }
            insert_artifacts(&mut tx, id, s.step, &record.artifacts, w.at).await?;
            let (last_seq, board) = write_step_statements(&mut tx, w).await?;
            let artifacts = if record.artifacts.is_empty() {
                Vec::new()
            } else {
                artifacts_of(&mut tx, id, step_no, step_no).await?
            };
            Ok(Recorded::New {
                last_seq,
                board,
                artifacts,
            })
        }
        .await;
        settle(tx, outcome).await
    }

    #[instrument(name = "store.record_step", skip_all,
        fields(session = %record.session_id, step = record.step.step, duplicate))]
    pub(super) async fn record_step_impl(&self, record: StepRecord) -> StoreResult<RecordedStep> {
        let id = record.session_id;
        let s = &record.step;
        let kind = AgentKind::try_from(s.agent_kind).unwrap_or(AgentKind::Unspecified);
        let actions = actions_to_json(&s.actions);
        let write = StepWrite {
            record: &record,
            kind: kind.db(),
            actions: &actions,
            at: now(),
        };
        let writing = self.notifier.writing(id);
        let recorded = match &self.backend {
            Backend::Postgres { steps, .. } => postgres::record_step(steps, &write).await?,
            Backend::Sqlite { .. } => self.record_step_statements(&write).await?,
        };
        let (last_seq, blackboard, artifacts) = match recorded {
            Recorded::Duplicate => {
                tracing::Span::current().record("duplicate", true);
                let step = self.get_step_impl(id, s.step).await?;
                let last_seq = self.get_session_impl(id).await?.last_seq;
                return Ok(RecordedStep {
                    step,
                    duplicate: true,
                    last_seq,
                    blackboard: Vec::new(),
                });
            }
            Recorded::New {
                last_seq,
                board,
                artifacts,
            } => (last_seq, board, artifacts),
        };
        writing.publish(|| {
            let mut events = record.events.clone();
            events.push(write.finished_event());
            let count = u64::try_from(events.len()).unwrap_or(u64::MAX);
            let first = i64::try_from(last_seq + 1 - count).unwrap_or(i64::MAX);
            super::events::stored(id, &events, first, write.at)
        });
        tracing::Span::current().record("duplicate", false);
        let mut step = record.step;
        step.session_id = id.to_string();
        step.actions = actions_from_json(actions);
        step.artifacts = artifacts;
        Ok(RecordedStep {
            step,
            duplicate: false,
            last_seq,
            blackboard,
        })
    }

    #[instrument(name = "store.list_steps", skip_all, fields(session = %id, from_step, limit))]
    pub(super) async fn list_steps_impl(
        &self,
        id: Uuid,
        from_step: u64,
        limit: u32,
    ) -> StoreResult<Vec<Step>> {
        let mut conn = self.read_conn().await?;
        let found = query(
            "SELECT * FROM steps WHERE session_id = $1 AND step >= $2 ORDER BY step LIMIT $3",
        )
        .bind(id)
        .bind(db_int(from_step))
        .bind(i64::from(limit))
        .fetch_all(conn.conn())
        .await?;
        if found.is_empty() {
            // Only an empty page needs telling "no steps here" from "no such session".
            session_in(&mut conn, id).await?;
        }
        let mut steps = found
            .iter()
            .map(rows::step)
            .collect::<StoreResult<Vec<_>>>()?;
        if let (Some(first), Some(last)) = (steps.first(), steps.last()) {
            let (from, to) = (db_int(first.step), db_int(last.step));
            for artifact in artifacts_of(&mut conn, id, from, to).await? {
                if let Some(step) = steps.iter_mut().find(|s| s.step == artifact.step) {
                    step.artifacts.push(artifact);
                }
            }
        }
        Ok(steps)
    }

    #[instrument(name = "store.get_step", skip_all, fields(session = %id, step))]
    pub(super) async fn get_step_impl(&self, id: Uuid, step: u64) -> StoreResult<Step> {
        let mut steps = self.list_steps_impl(id, step, 1).await?;
        match steps.pop() {
            Some(found) if found.step == step => Ok(found),
            _ => Err(StoreError::NotFound(format!("step {step} of session {id}"))),
        }
    }

    #[instrument(name = "store.get_memory", skip_all, fields(session = %id))]
    pub(super) async fn get_memory_impl(
        &self,
        id: Uuid,
        agent: Option<String>,
    ) -> StoreResult<Vec<MemoryItem>> {
        let mut conn = self.read_conn().await?;
        let found = query(
            "SELECT step, agent_name, item FROM memory_items \
             WHERE session_id = $1 AND ($2 IS NULL OR agent_name = $2) ORDER BY step",
        )
        .bind(id)
        .bind(agent)
        .fetch_all(conn.conn())
        .await?;
        if found.is_empty() {
            session_in(&mut conn, id).await?;
        }
        found
            .iter()
            .map(|row| {
                let item: SqlJson<Json> = row.try_get("item")?;
                Ok(MemoryItem {
                    agent_name: row.try_get("agent_name")?,
                    step: api_u64(row.try_get("step")?),
                    item: match item.0 {
                        Json::Object(map) => Some(ufo_proto::json::object_to_struct(map)),
                        _ => None,
                    },
                })
            })
            .collect()
    }
}
