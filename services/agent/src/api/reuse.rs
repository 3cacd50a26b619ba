//! `POST /v1/tasks` with reuse on (`reuse: true`, or the server's `--reuse`): the caller's closest earlier
//! finished task becomes the new task's plan (docs/knowledge.md "Reuse", [`crate::replay::reuse`]).
//!
//! The candidates are the caller's own experiences and demonstrations retrieved for the request (the
//! session service's knowledge search, owner-scoped: another caller's task or recording is never a
//! candidate unless an admin shared it with the caller; failed and bad-rated tasks are never retrieved),
//! each scored by [`similarity`] of its task's request (a demonstration's: what the person said they
//! show) and the new one; the best at `--reuse-min-score` or above wins. Its plan — an experience's
//! recorded steps of round 1, the data a replay runs; a demonstration's steps made HostAgent and AppAgent
//! steps ([`crate::runner::demonstration::plan`]) — is copied into the new task's configuration, so any
//! runner replica follows the same plan.

use tracing::Instrument as _;
use ufo_proto::v1::{KnowledgeKind, SearchKnowledgeRequest, SessionStatus, SubmitTaskRequest};

use super::auth::{Caller, Role};
use super::error::ApiError;
use super::service::Tasks;
use crate::replay::reuse::{ReuseInfo, similarity};
use crate::replay::{OnMismatch, ReplaySpec};
use crate::runner::demonstration;
use crate::store::knowledge::QUERY_CHARS;

impl Tasks {
    /// The plan of a task that reuses an earlier one, or none (reuse off, a replay, or no match).
    pub(super) async fn reuse_plan(
        &self,
        caller: &Caller,
        req: &SubmitTaskRequest,
    ) -> Result<Option<ReplaySpec>, ApiError> {
        let limits = self.limits();
        if !req.replay_of.is_empty() || !req.reuse.unwrap_or(limits.reuse) {
            return Ok(None);
        }
        let span = tracing::info_span!(
            "reuse.match",
            owner = %caller.name,
            candidates = tracing::field::Empty,
            of = tracing::field::Empty,
            score = tracing::field::Empty,
            steps = tracing::field::Empty
        );
        self.best_match(caller, req, limits.reuse_min_score, limits.reuse_candidates)
            .instrument(span)
            .await
    }

    async fn best_match(
        &self,
        caller: &Caller,
        req: &SubmitTaskRequest,
        min_score: f64,
        candidates: u32,
    ) -> Result<Option<ReplaySpec>, ApiError> {
        let span = tracing::Span::current();
        let hits = self
            .knowledge()
            .client()
            .search_knowledge(SearchKnowledgeRequest {
                query: req.request.chars().take(QUERY_CHARS).collect(),
                application: String::new(),
                owner: caller.name.clone(),
                kinds: vec![
                    KnowledgeKind::Experience.into(),
                    KnowledgeKind::Demonstration.into(),
                ],
                limit: candidates,
                per_source: None,
            })
            .await?
            .into_inner()
            .hits;
        span.record("candidates", hits.len());
        let mut best: Option<(f64, ufo_proto::v1::Session, bool)> = None;
        for (shared, item) in hits.into_iter().filter_map(|h| Some((h.shared, h.item?))) {
            // The owner check is the store's; this one keeps it true whatever the store answers: the
            // caller's own task, or another's an admin shared with them (read as its owner's).
            if item.task_id.is_empty() || !(item.owner == caller.name || shared) || !item.succeeded
            {
                continue;
            }
            let owner = Caller::new(item.owner.clone(), Role::User);
            let Ok(session) = self.session(&item.task_id, &owner).await else {
                continue;
            };
            if session.owner != item.owner
                || SessionStatus::try_from(session.status) != Ok(SessionStatus::Finished)
            {
                continue;
            }
            let score = similarity(&session.request, &req.request);
            let shown = item.kind == KnowledgeKind::Demonstration as i32;
            tracing::debug!(task = %session.id, score, demonstration = shown, "reuse candidate");
            if score >= min_score && best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                best = Some((score, session, shown));
            }
        }
        let Some((score, original, shown)) = best else {
            return Ok(None);
        };
        // Round 1 only: a follow-up round of the earlier task is another request.
        let steps: Vec<_> = self
            .all_steps(&original.id)
            .await?
            .into_iter()
            .filter(|s| s.round <= 1)
            .collect();
        let mut spec = if shown {
            ReplaySpec {
                of: original.id.clone(),
                on_mismatch: OnMismatch::Model,
                steps: demonstration::plan(&original.request, &demonstration::from_rows(&steps)),
                follow_ups: Vec::new(),
                reuse: None,
            }
        } else {
            ReplaySpec::from_steps(&original.id, OnMismatch::Model, &steps, Vec::new())
        };
        if spec.steps.is_empty() {
            return Ok(None);
        }
        spec.reuse = Some(ReuseInfo {
            request: original.request.clone(),
            score,
        });
        span.record("of", original.id.as_str());
        span.record("score", score);
        span.record("steps", spec.steps.len());
        tracing::info!(of = %original.id, score, demonstration = shown, "the task reuses an earlier task");
        Ok(Some(spec))
    }
}
