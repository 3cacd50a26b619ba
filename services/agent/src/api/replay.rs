//! `POST /v1/tasks` with `replay_of`: the replayed task's recorded steps become the new task's replay plan
//! (see [`crate::replay`]), and a replay task's view says how many steps the recording decided and how
//! many fell back to the model.
//!
//! A person's demonstration (`ufo record`, a session of kind `demonstration`) is replayed as the agents'
//! steps that do what the person did ([`crate::runner::demonstration::plan`], the plan reuse follows).
//!
//! Who may replay what: a caller replays only the tasks it may see — its own; an admin may replay any
//! task (it sees them all), and the replay is the admin's. Another caller's task is 404, like a missing
//! one, so ids do not leak.

use ufo_common::ErrorCode;
use ufo_proto::v1::{
    ListRoundsRequest, ListStepsRequest, Replay, Reuse, Session, SessionStatus, Step,
    SubmitTaskRequest,
};

use super::auth::Caller;
use super::error::ApiError;
use super::service::{Tasks, task_id};
use crate::replay::{OnMismatch, ReplaySpec};
use crate::runner::demonstration;
use crate::runner::task_config::TaskConfig;

impl Tasks {
    /// The replay plan of a submission (none without `replay_of`); an absent request becomes the replayed
    /// task's (a given one only names the replay: the recording is what runs).
    pub(super) async fn replay_plan(
        &self,
        caller: &Caller,
        req: &mut SubmitTaskRequest,
    ) -> Result<Option<ReplaySpec>, ApiError> {
        let on_mismatch = ufo_proto::v1::OnMismatch::try_from(req.on_mismatch)
            .map_err(|_| ApiError::invalid("on_mismatch must be fail or model"))?;
        if !req.replay_of.is_empty() && req.reuse == Some(true) {
            return Err(ApiError::invalid(
                "reuse and replay_of exclude each other: a replay follows the named task already",
            ));
        }
        if req.replay_of.is_empty() {
            if on_mismatch != ufo_proto::v1::OnMismatch::Unspecified {
                return Err(ApiError::invalid("on_mismatch needs replay_of"));
            }
            return Ok(None);
        }
        task_id(&req.replay_of)
            .map_err(|_| ApiError::invalid("replay_of must be a task id (a UUID)"))?;
        let original = self.session(&req.replay_of, caller).await?;
        if SessionStatus::try_from(original.status) != Ok(SessionStatus::Finished) {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "task {} has not finished; only a finished task can be replayed",
                    original.id
                ),
            ));
        }
        let steps = self.all_steps(&original.id).await?;
        let mut rounds = self
            .client()
            .list_rounds(ListRoundsRequest {
                session_id: original.id.clone(),
            })
            .await?
            .into_inner()
            .rounds;
        rounds.sort_by_key(|r| r.number);
        let follow_ups = rounds
            .into_iter()
            .filter(|r| r.number >= 2)
            .map(|r| r.request)
            .collect();
        // A person's demonstration (`ufo record`): its steps are the person's, which a task's replay
        // skips; they become the agents' steps that do the same, as reuse makes them.
        let shown = original
            .config
            .as_ref()
            .is_some_and(|c| c.fields.contains_key("demonstration"));
        let spec = if shown {
            ReplaySpec {
                of: original.id.clone(),
                on_mismatch: OnMismatch::from_proto(req.on_mismatch),
                steps: demonstration::plan(&original.request, &demonstration::from_rows(&steps)),
                follow_ups: Vec::new(),
                reuse: None,
            }
        } else {
            ReplaySpec::from_steps(
                &original.id,
                OnMismatch::from_proto(req.on_mismatch),
                &steps,
                follow_ups,
            )
        };
        if spec.steps.is_empty() {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                if shown {
                    format!(
                        "demonstration {} has no step an agent can follow",
                        original.id
                    )
                } else {
                    format!("task {} has no recorded steps to replay", original.id)
                },
            ));
        }
        if req.request.is_empty() {
            req.request.clone_from(&original.request);
        }
        Ok(Some(spec))
    }

    pub(super) async fn all_steps(&self, session_id: &str) -> Result<Vec<Step>, ApiError> {
        let mut steps: Vec<Step> = Vec::new();
        loop {
            let page = self
                .client()
                .list_steps(ListStepsRequest {
                    session_id: session_id.to_owned(),
                    from_step: steps.last().map_or(1, |s| s.step + 1),
                    limit: 100,
                })
                .await?
                .into_inner()
                .steps;
            if page.is_empty() {
                return Ok(steps);
            }
            steps.extend(page);
        }
    }

    /// A replay task's origin and counts, or a reuse task's (none for other tasks): each step's
    /// `extra.replay.source` / `extra.reuse.source` says whether the recording or the model decided it.
    pub(super) async fn replay_view(
        &self,
        session: &Session,
    ) -> Result<(Option<Replay>, Option<Reuse>), ApiError> {
        let Some(spec) = TaskConfig::from_struct(session.config.clone())
            .ok()
            .and_then(|c| c.replay)
        else {
            return Ok((None, None));
        };
        let (mut recorded, mut fell_back) = (0, 0);
        let key = if spec.reuse.is_some() {
            "reuse"
        } else {
            "replay"
        };
        if session.totals.is_some_and(|t| t.steps > 0) {
            for step in self.all_steps(&session.id).await? {
                let extra = ufo_proto::json::from_optional_struct(step.extra);
                match extra[key]["source"].as_str() {
                    Some("recording" | "reused") => recorded += 1,
                    Some("model") => fell_back += 1,
                    _ => {}
                }
            }
        }
        Ok(match &spec.reuse {
            Some(info) => (
                None,
                Some(Reuse {
                    of: spec.of,
                    score: info.score,
                    reused: recorded,
                    fell_back,
                }),
            ),
            None => (
                Some(Replay {
                    of: spec.of,
                    on_mismatch: spec.on_mismatch.to_proto() as i32,
                    replayed: recorded,
                    fell_back,
                }),
                None,
            ),
        })
    }
}
