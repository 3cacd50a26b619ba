//! Group commit of recorded steps.
//!
//! Every RecordStep of this process goes through a queue; a few writer tasks each take whatever is queued
//! (up to a maximum) and record it with one call of `ufo_record_steps` (migration 0042: the steps
//! with their artifact references): one round trip, one
//! transaction, one WAL flush for the lot. Nothing waits for a batch to fill: a lone writer's step goes out
//! at once, and under load the steps that arrived during the previous call share the next one. Each step
//! keeps its own outcome (a refused step writes nothing and does not affect the others); if the call itself
//! fails, its steps are retried one call each, so an error reaches only the step that causes it.

use std::sync::Arc;

use sqlx::types::Json;
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::store::{DbEnum as _, StepArtifact, StoreError, StoreResult};

/// How steps are grouped into commits.
#[derive(Debug, Clone, Copy)]
pub struct StepBatching {
    /// Most steps recorded in one call and transaction (1: every step commits on its own).
    pub max_steps: usize,
    /// Calls in flight at once (each on its own connection).
    pub writers: usize,
}

impl Default for StepBatching {
    fn default() -> Self {
        Self {
            max_steps: 32,
            writers: 2,
        }
    }
}

/// What `ufo_record_step` returned for one step: outcome, detail, newest sequence number, blackboard
/// entries and artifact references as JSON rows.
pub(super) type Outcome = (String, Option<String>, Option<i64>, JsonRows, JsonRows);

/// A row of `ufo_record_steps`: the step's index in the call (1-based), then its [`Outcome`].
type IndexedOutcome = (i32, String, Option<String>, Option<i64>, JsonRows, JsonRows);

/// A JSON array of rows a stored function returned.
type JsonRows = Option<Json<serde_json::Value>>;

/// One step's columns, owned so it can wait in the queue.
pub(super) struct PendingStep {
    pub session: Uuid,
    pub step: i64,
    pub round: i64,
    pub round_step: i64,
    pub agent_name: String,
    pub agent_kind: String,
    pub state_before: String,
    pub state_after: String,
    pub subtask: String,
    pub observation: String,
    pub thought: String,
    pub plan: serde_json::Value,
    pub comment: String,
    pub status: String,
    pub actions: serde_json::Value,
    pub phases: serde_json::Value,
    pub cost: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub extra: serde_json::Value,
    pub content_hash: [u8; 32],
    pub at: chrono::DateTime<chrono::Utc>,
    pub memory: serde_json::Value,
    pub lease_owner: Option<String>,
    /// Blackboard entries: kind, value, artifact id.
    pub board: Vec<(String, serde_json::Value, Option<String>)>,
    /// Events: kind, payload, step, round.
    pub events: Vec<(String, serde_json::Value, i64, i64)>,
    /// The step's artifacts (references to blobs in the blob store).
    pub artifacts: Vec<StepArtifact>,
}

struct Queued {
    step: PendingStep,
    /// The caller's span, linked from the batch's span.
    caller: Option<tracing::Id>,
    reply: oneshot::Sender<StoreResult<Outcome>>,
}

/// The queue and its writer tasks (stopped when dropped).
pub(crate) struct StepWriter {
    queue: mpsc::Sender<Queued>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for StepWriter {
    fn drop(&mut self) {
        for writer in &self.writers {
            writer.abort();
        }
    }
}

impl StepWriter {
    pub(super) fn start(pool: sqlx::PgPool, batching: StepBatching) -> Self {
        let max_steps = batching.max_steps.max(1);
        let (queue, rx) = mpsc::channel(max_steps * batching.writers.max(1) * 4);
        let rx = Arc::new(Mutex::new(rx));
        let writers = (0..batching.writers.max(1))
            .map(|_| tokio::spawn(write_batches(pool.clone(), Arc::clone(&rx), max_steps)))
            .collect();
        Self { queue, writers }
    }

    /// Records `step` in the next batch and returns its outcome.
    pub(super) async fn record(&self, step: PendingStep) -> StoreResult<Outcome> {
        let (reply, outcome) = oneshot::channel();
        let queued = Queued {
            step,
            caller: tracing::Span::current().id(),
            reply,
        };
        self.queue
            .send(queued)
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::PoolClosed))?;
        outcome
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::PoolClosed))?
    }
}

/// One writer task: takes what is queued (at least one step, at most `max_steps`) and records it.
async fn write_batches(
    pool: sqlx::PgPool,
    queue: Arc<Mutex<mpsc::Receiver<Queued>>>,
    max_steps: usize,
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut rx = queue.lock().await;
            match rx.recv().await {
                Some(first) => batch.push(first),
                None => return,
            }
            while batch.len() < max_steps {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
        }
        let span = tracing::info_span!("store.record_step_batch", steps = batch.len());
        for queued in &batch {
            span.follows_from(queued.caller.clone());
        }
        write_batch(&pool, batch).instrument(span).await;
    }
}

async fn write_batch(pool: &sqlx::PgPool, mut batch: Vec<Queued>) {
    // One locking order for every batch: by session, then step.
    batch.sort_by_key(|q| (q.step.session, q.step.step));
    let steps: Vec<&PendingStep> = batch.iter().map(|q| &q.step).collect();
    match call(pool, &steps).await {
        Ok(mut outcomes) if outcomes.len() == batch.len() => {
            outcomes.sort_by_key(|(index, _)| *index);
            for (queued, (_, outcome)) in batch.into_iter().zip(outcomes) {
                // The caller may have gone away; its step is recorded all the same.
                let _ = queued.reply.send(Ok(outcome));
            }
        }
        Ok(outcomes) => {
            let error = format!(
                "ufo_record_steps returned {} outcomes for {} steps",
                outcomes.len(),
                batch.len()
            );
            for queued in batch {
                let _ = queued.reply.send(Err(StoreError::Corrupt(error.clone())));
            }
        }
        Err(error) if batch.len() == 1 => {
            if let Some(queued) = batch.pop() {
                let _ = queued.reply.send(Err(error.into()));
            }
        }
        Err(error) => {
            tracing::warn!(%error, steps = batch.len(), "a step batch failed; recording its steps one by one");
            for queued in batch {
                let outcome = call(pool, &[&queued.step])
                    .await
                    .map_err(StoreError::from)
                    .and_then(|mut outcomes| match outcomes.pop() {
                        Some((_, outcome)) => Ok(outcome),
                        None => Err(StoreError::Corrupt(
                            "ufo_record_steps returned no outcome".into(),
                        )),
                    });
                let _ = queued.reply.send(outcome);
            }
        }
    }
}

const RECORD_STEPS: &str = "SELECT r_index, r_outcome, r_detail, r_last_seq, r_board, r_artifacts \
    FROM ufo_record_steps($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
    $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, \
    $40, $41, $42, $43, $44)";

/// Ranges of each step's entries in the flattened arrays (1-based, inclusive; first > last when none).
fn ranges(lens: impl Iterator<Item = usize>) -> (Vec<i32>, Vec<i32>) {
    let (mut first, mut last) = (Vec::new(), Vec::new());
    let mut next = 1i32;
    for len in lens {
        let len = i32::try_from(len).unwrap_or(i32::MAX);
        first.push(next);
        next = next.saturating_add(len);
        last.push(next - 1);
    }
    (first, last)
}

async fn call(
    pool: &sqlx::PgPool,
    steps: &[&PendingStep],
) -> Result<Vec<(i32, Outcome)>, sqlx::Error> {
    fn col<'a, T>(steps: &[&'a PendingStep], f: impl Fn(&'a PendingStep) -> T) -> Vec<T> {
        steps.iter().map(|s| f(s)).collect()
    }
    let board: Vec<&(String, serde_json::Value, Option<String>)> =
        steps.iter().flat_map(|s| &s.board).collect();
    let events: Vec<&(String, serde_json::Value, i64, i64)> =
        steps.iter().flat_map(|s| &s.events).collect();
    let (board_first, board_last) = ranges(steps.iter().map(|s| s.board.len()));
    let (event_first, event_last) = ranges(steps.iter().map(|s| s.events.len()));
    let new: Vec<&StepArtifact> = steps.iter().flat_map(|s| &s.artifacts).collect();
    let (new_first, new_last) = ranges(steps.iter().map(|s| s.artifacts.len()));
    let rows: Vec<IndexedOutcome> = sqlx::query_as(RECORD_STEPS)
        .bind(col(steps, |s| s.session))
        .bind(col(steps, |s| s.step))
        .bind(col(steps, |s| s.round))
        .bind(col(steps, |s| s.round_step))
        .bind(col(steps, |s| s.agent_name.as_str()))
        .bind(col(steps, |s| s.agent_kind.as_str()))
        .bind(col(steps, |s| s.state_before.as_str()))
        .bind(col(steps, |s| s.state_after.as_str()))
        .bind(col(steps, |s| s.subtask.as_str()))
        .bind(col(steps, |s| s.observation.as_str()))
        .bind(col(steps, |s| s.thought.as_str()))
        .bind(col(steps, |s| Json(&s.plan)))
        .bind(col(steps, |s| s.comment.as_str()))
        .bind(col(steps, |s| s.status.as_str()))
        .bind(col(steps, |s| Json(&s.actions)))
        .bind(col(steps, |s| Json(&s.phases)))
        .bind(col(steps, |s| s.cost))
        .bind(col(steps, |s| s.input_tokens))
        .bind(col(steps, |s| s.output_tokens))
        .bind(col(steps, |s| s.started_at))
        .bind(col(steps, |s| s.finished_at))
        .bind(col(steps, |s| Json(&s.extra)))
        .bind(col(steps, |s| s.content_hash.as_slice()))
        .bind(col(steps, |s| s.at))
        .bind(col(steps, |s| Json(&s.memory)))
        .bind(col(steps, |s| s.lease_owner.as_deref()))
        .bind(board_first)
        .bind(board_last)
        .bind(board.iter().map(|b| b.0.as_str()).collect::<Vec<_>>())
        .bind(board.iter().map(|b| Json(&b.1)).collect::<Vec<_>>())
        .bind(board.iter().map(|b| b.2.as_deref()).collect::<Vec<_>>())
        .bind(event_first)
        .bind(event_last)
        .bind(events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| Json(&e.1)).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.2).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.3).collect::<Vec<_>>())
        .bind(new_first)
        .bind(new_last)
        .bind(new.iter().map(|a| a.kind.db()).collect::<Vec<_>>())
        .bind(
            new.iter()
                .map(|a| a.blob.sha256.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            new.iter()
                .map(|a| a.content_type.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(new.iter().map(|a| Json(&a.metadata)).collect::<Vec<_>>())
        .bind(
            new.iter()
                .map(|a| i64::try_from(a.blob.size).unwrap_or(i64::MAX))
                .collect::<Vec<_>>(),
        )
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(index, outcome, detail, last_seq, board, artifacts)| {
            (index, (outcome, detail, last_seq, board, artifacts))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_cover_each_steps_entries() {
        assert_eq!(
            ranges([2, 0, 3].into_iter()),
            (vec![1, 3, 3], vec![2, 2, 5])
        );
        assert_eq!(ranges(std::iter::empty()), (vec![], vec![]));
    }
}
