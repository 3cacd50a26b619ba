//! Answers and confirmations, bound to what they decide (issue 16): an answer names the ids of the pending
//! questions it answers and a decision names the id of the held action; anything else is 409 saying what is
//! waiting now, so a prompt left open while someone else decided never decides a newer action.

use tracing::instrument;
use ufo_common::ErrorCode;
use ufo_proto::v1::{
    AppendBlackboardRequest, AppendEventsRequest, GetBlackboardRequest, PendingQuestion,
};

use super::auth::Caller;
use super::checks::no_nul;
use super::error::ApiError;
use super::service::{TaskSnapshot, Tasks};
use crate::round::control::{HeldAction, Next};
use crate::runner::hitl;

fn describe_held(held: &HeldAction) -> String {
    let on = if held.target_name.is_empty() {
        String::new()
    } else {
        format!(" on {:?}", held.target_name)
    };
    format!("{} ({}{on})", held.id, held.function)
}

fn describe_pending(pending: &[PendingQuestion]) -> String {
    pending
        .iter()
        .map(|q| {
            format!(
                "{} ({:?})",
                q.id,
                q.question.chars().take(80).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Tasks {
    /// Answers the pending questions named by `question_ids` (one answer per id, same order).
    #[instrument(skip(self, caller, answers))]
    pub async fn answer(
        &self,
        id: &str,
        caller: &Caller,
        question_ids: Vec<String>,
        answers: Vec<String>,
    ) -> Result<TaskSnapshot, ApiError> {
        if answers.is_empty() {
            return Err(ApiError::invalid("answers must not be empty"));
        }
        for answer in &answers {
            no_nul("answers", answer)?;
        }
        let max = self.limits().max_answer_chars;
        if answers.iter().any(|a| a.chars().count() > max) {
            return Err(ApiError::invalid(format!(
                "answers: each answer must be at most {max} characters"
            )));
        }
        if answers.len() > self.limits().max_answers {
            return Err(ApiError::invalid(format!(
                "answers: at most {} answers per call",
                self.limits().max_answers
            )));
        }
        let session = self.session(id, caller).await?;
        Self::still_open(&session)?;
        let mut client = self.client();
        let board = client
            .get_blackboard(GetBlackboardRequest {
                session_id: session.id.clone(),
            })
            .await?
            .into_inner();
        let pending = hitl::pending_questions(&board);
        if pending.is_empty() {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                "no question is pending",
            ));
        }
        if question_ids.len() != answers.len() {
            return Err(ApiError::invalid(format!(
                "question_ids: {} ids for {} answers; name the pending question each answer answers \
                 (pending now: {})",
                question_ids.len(),
                answers.len(),
                describe_pending(&pending)
            )));
        }
        let mut chosen = Vec::with_capacity(question_ids.len());
        for (i, qid) in question_ids.iter().enumerate() {
            if question_ids[..i].contains(qid) {
                return Err(ApiError::invalid(format!(
                    "question_ids: {qid:?} is named twice"
                )));
            }
            let question = pending.iter().find(|q| &q.id == qid).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "question {qid:?} is not pending; pending now: {}",
                        describe_pending(&pending)
                    ),
                )
            })?;
            chosen.push(question.clone());
        }
        let (entries, events) = hitl::answer_writes(&board, &chosen, &answers);
        client
            .append_blackboard(AppendBlackboardRequest {
                session_id: session.id.clone(),
                entries,
                events,
            })
            .await?;
        self.get(&session.id, caller).await
    }

    /// Approves or rejects the held action named `action_id`.
    #[instrument(skip(self, caller, reason))]
    pub async fn confirm(
        &self,
        id: &str,
        caller: &Caller,
        action_id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<TaskSnapshot, ApiError> {
        no_nul("reason", reason)?;
        if reason.chars().count() > self.limits().max_answer_chars {
            return Err(ApiError::invalid(format!(
                "reason must be at most {} characters",
                self.limits().max_answer_chars
            )));
        }
        let session = self.session(id, caller).await?;
        Self::still_open(&session)?;
        let snapshot = self.snapshot(session).await?;
        let held = match (&snapshot.next, &snapshot.held) {
            (Some(Next::Hold { action }), Some(_)) => Some(action.clone()),
            _ => None,
        };
        let session = snapshot.session;
        let held = match held {
            None => {
                return Err(ApiError::new(
                    ErrorCode::FailedPrecondition,
                    format!("action {action_id:?} is not held: no action is held for confirmation"),
                ));
            }
            Some(held) if action_id.trim().is_empty() => {
                return Err(ApiError::invalid(format!(
                    "action_id must name the held action; held now: {}",
                    describe_held(&held)
                )));
            }
            Some(held) if held.id != action_id => {
                return Err(ApiError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "action {action_id:?} is not held; held now: {}",
                        describe_held(&held)
                    ),
                ));
            }
            Some(held) => held,
        };
        self.client()
            .append_events(AppendEventsRequest {
                session_id: session.id.clone(),
                events: vec![hitl::decision_event(&held, approve, reason)],
                lease_owner: String::new(),
            })
            .await?;
        self.get(&session.id, caller).await
    }
}
