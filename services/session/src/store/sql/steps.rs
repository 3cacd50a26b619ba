//! Steps: the atomic record (step row, memory item, blackboard entries, artifact links, totals, events)
//! and reading steps and memory back.

use serde_json::{Value as Json, json};
use sqlx::types::Json as SqlJson;
use tracing::instrument;
use ufo_proto::v1::{
    AgentKind, ArtifactRef, BlackboardEntry, EventKind, MemoryItem, SessionStatus, Step,
};
use uuid::Uuid;

use super::board::{artifact_statements, entry_statement};
use super::db::{AsConn, Batch, Dialect, Row, query};
use super::events::{Appended, Totals, append_in};
use super::sessions::session_in;
use super::{Backend, SqlStore, api_u64, check_lease, db_int, now, rows};
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
         WHERE a.session_id = $1 AND a.step >= $2 AND a.step <= $3 ORDER BY a.step, a.created_at, a.kind, a.sha256",
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

/// Adds to `batch` the statements writing a checked step: step row, memory item, blackboard entries,
/// round count, `events` (numbered after `last_seq`) and totals. Returns the indexes of the blackboard
/// inserts (each returns its entry as stored) and the append's place. (SQLite's path; Postgres does the
/// same in its stored function, see `postgres::record_step`.)
fn step_statements<'q>(
    batch: &mut Batch<'q>,
    w: &'q StepWrite<'q>,
    events: &'q [NewEvent],
    last_seq: i64,
) -> (Vec<usize>, Appended) {
    let record = w.record;
    let s = &record.step;
    let id = record.session_id;
    let step_no = db_int(s.step);
    let at = w.at;
    batch.push(
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
        .bind(at),
    );
    batch.push(
        query(
            "INSERT INTO memory_items (session_id, step, agent_name, item) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(step_no)
        .bind(&s.agent_name)
        .bind(SqlJson(&record.memory_item)),
    );
    let board = record
        .blackboard
        .iter()
        .map(|entry| batch.push(entry_statement(id, entry, step_no, at)))
        .collect();
    batch.push(
        query("UPDATE rounds SET steps = steps + 1 WHERE session_id = $1 AND number = $2")
            .bind(id)
            .bind(i64::from(s.round)),
    );
    let totals = Totals {
        steps: 1,
        cost: s.cost,
        input_tokens: db_int(s.input_tokens),
        output_tokens: db_int(s.output_tokens),
    };
    let appended = append_in(batch, Dialect::Sqlite, id, events, totals, at, last_seq);
    (board, appended)
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
const READ_FOR_STEP: &str = "SELECT s.status, s.lease_owner, s.last_seq, st.content_hash, \
    r.status AS round_status FROM sessions s \
    LEFT JOIN steps st ON st.session_id = s.id AND st.step = $2 \
    LEFT JOIN rounds r ON r.session_id = s.id AND r.number = $3 \
    WHERE s.id = $1";

/// What [`READ_FOR_STEP`] found, checked: `None` when the identical step is recorded already, the
/// session's newest sequence number when the step may be written.
fn step_head(head: &Row, record: &StepRecord) -> StoreResult<Option<i64>> {
    let id = record.session_id;
    let s = &record.step;
    if let Some(existing) = head.try_get::<Option<Vec<u8>>, _>("content_hash")? {
        if existing.as_slice() != record.content_hash.as_slice() {
            return Err(StoreError::AlreadyExists(format!(
                "step {} of session {id} was recorded with different content",
                s.step
            )));
        }
        return Ok(None);
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
    Ok(Some(head.try_get("last_seq")?))
}

impl SqlStore {
    /// Records a step in a transaction of two commands: `BEGIN` with the checks' read, then every write
    /// with the `COMMIT` ([`Batch`]). (SQLite's path; Postgres does the same in one call of a stored function, see
    /// `postgres::record_step`.)
    async fn record_step_statements(&self, w: &StepWrite<'_>) -> StoreResult<Recorded> {
        let record = w.record;
        let id = record.session_id;
        let s = &record.step;
        let (tx, head) = self
            .begin_with(
                query(READ_FOR_STEP)
                    .bind(id)
                    .bind(db_int(s.step))
                    .bind(i64::from(s.round)),
            )
            .await?;
        let last_seq = match head.first().map(|head| step_head(head, record)) {
            Some(Ok(Some(last_seq))) => last_seq,
            outcome => {
                // Nothing was written: a duplicate, a refusal, or no such session.
                tx.abandon().await;
                return match outcome {
                    Some(Ok(_)) => Ok(Recorded::Duplicate),
                    Some(Err(e)) => Err(e),
                    None => Err(StoreError::NotFound(format!("session {id}"))),
                };
            }
        };
        let mut events = record.events.clone();
        events.push(w.finished_event());
        let mut batch = Batch::default();
        let references = artifact_statements(&mut batch, id, s.step, &record.artifacts, w.at);
        let (entries, appended) = step_statements(&mut batch, w, &events, last_seq);
        let results = tx.commit_with(batch).await?;
        let last_seq = api_u64(appended.last_seq(id, &results)?);
        let board = entries
            .iter()
            .map(|&i| {
                let row = results
                    .get(i)
                    .and_then(|rows| rows.first())
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "session {id}: a blackboard entry not returned"
                        ))
                    })?;
                rows::blackboard_entry(row)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        // In the order reading them back gives (`artifacts_of`).
        let mut added = references
            .iter()
            .filter_map(|&i| results.get(i))
            .flatten()
            .map(|row| {
                let kind: String = row.try_get("kind")?;
                let sha256: String = row.try_get("sha256")?;
                Ok(((kind, sha256), row))
            })
            .collect::<StoreResult<Vec<((String, String), &Row)>>>()?;
        added.sort_by(|a, b| a.0.cmp(&b.0));
        let artifacts = added
            .into_iter()
            .map(|(_, row)| rows::artifact_ref(row))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Recorded::New {
            last_seq,
            board,
            artifacts,
        })
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
