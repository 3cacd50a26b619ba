//! The FSM transitions: what a HostAgent or AppAgent status does to the round after its step (seeds 000,
//! 001, 002). The statuses are [`crate::round::state`]; what the runner does next is
//! [`crate::round::control`].
//!
//! - HostAgent: CONTINUE and CONFIRM (once approved) go on; ASSIGN hands the subtask to the chosen
//!   application's AppAgent; PENDING asks; FINISH and FAIL end the round; an unknown status is ERROR.
//! - AppAgent: CONTINUE and SCREENSHOT go on (SCREENSHOT ran its actions and observes again); FINISH
//!   returns to the HostAgent unless an action of the batch failed or the action it rests on was seen
//!   to change nothing (`effect: none_observed`, issue 31); PENDING asks; FAIL and ERROR (an
//!   unusable reply, a failed observation) return to the HostAgent to re-plan with the reason archived in
//!   its prompt's previous subtasks, both bounded by `--max-replans` (a replay, which has no model to
//!   re-plan with, ends the round on an error instead); an unknown status ends the round.

use super::{Active, Round, RoundEnd};
use crate::agents::target::TargetKind;
use crate::round::state::{AgentState, AppStatus, HostStatus, Outcome};

impl Round {
    pub(super) fn host_transition(
        &mut self,
        status: &HostStatus,
        response: &crate::agents::response::HostResponse,
        selected: Option<crate::agents::target::TargetInfo>,
        acted_failed: bool,
    ) -> AgentState {
        match status {
            HostStatus::Continue | HostStatus::Confirm => AgentState::Continue,
            HostStatus::Assign => {
                self.subtask = response.current_subtask.clone();
                self.host_message = response.message.clone();
                match selected {
                    Some(t) if t.kind == TargetKind::ThirdPartyAgent && !acted_failed => {
                        let served =
                            crate::agents::third_party::find(&self.services, &t.name).is_some();
                        if served {
                            // The MCP server's or the shell's agent does the subtask (round::third_step).
                            self.active = Active::Agent(t.name.clone());
                            AgentState::Assign
                        } else {
                            // A name from --third-party-agents with nothing behind it: nothing can run
                            // it, so the subtask is archived as failed and the HostAgent re-plans.
                            self.archive(
                                Outcome::Fail,
                                &format!(
                                    "third-party agent {} has no MCP server (--mcp-servers) and is not the shell (--shell-agent)",
                                    t.name
                                ),
                            );
                            AgentState::Continue
                        }
                    }
                    Some(t) if !acted_failed => {
                        let key = t.app_root();
                        if !self.apps.contains_key(&key) {
                            let agent = self.app_for(t.clone());
                            self.apps.insert(key.clone(), agent);
                        }
                        let Some(app) = self.apps.get_mut(&key) else {
                            return AgentState::Error;
                        };
                        app.window = t;
                        self.active = Active::App(key);
                        AgentState::Assign
                    }
                    // The selection failed; the HostAgent sees it in memory and decides again.
                    _ => AgentState::Continue,
                }
            }
            HostStatus::Pending => self.ask(response.questions.clone()),
            HostStatus::Finish => {
                let result = if response.result.is_empty() {
                    &response.comment
                } else {
                    &response.result
                };
                self.end = Some(RoundEnd::Finished(result.clone()));
                AgentState::Finish
            }
            HostStatus::Fail => {
                self.end = Some(RoundEnd::Failed(format!(
                    "HostAgent gave up: {}",
                    response.comment
                )));
                AgentState::Fail
            }
            HostStatus::Other(other) => {
                self.end = Some(RoundEnd::Failed(format!(
                    "HostAgent returned status {other:?}"
                )));
                AgentState::Error
            }
        }
    }

    pub(super) fn app_transition(
        &mut self,
        status: &AppStatus,
        result: &str,
        questions: &[String],
        acted_failed: bool,
    ) -> AgentState {
        match status {
            // SCREENSHOT ran its actions (if any) and observes again; the subtask goes on.
            AppStatus::Continue | AppStatus::Screenshot | AppStatus::Confirm => {
                AgentState::Continue
            }
            // A batch that failed midway, or whose last action changed nothing the executor could
            // see, did not finish the subtask: look again.
            AppStatus::Finish if acted_failed => AgentState::Continue,
            AppStatus::Finish => {
                self.archive(Outcome::Finish, result);
                self.active = Active::Host;
                AgentState::Finish
            }
            AppStatus::Pending => self.ask(questions.to_vec()),
            AppStatus::Fail => {
                self.archive(Outcome::Fail, result);
                self.replan("failed");
                AgentState::Fail
            }
            AppStatus::Other(other) => {
                self.end = Some(RoundEnd::Failed(format!(
                    "AppAgent returned status {other:?}"
                )));
                AgentState::Error
            }
        }
    }

    /// An AppAgent step that ended in an error (seed 002: the HostAgent detects failures and re-plans): the
    /// subtask is archived as ERROR with the error text, which the HostAgent's next prompt shows, and
    /// control returns to it, bounded by the same re-plan limit as FAIL.
    ///
    /// A replay is the exception: it follows its recording without a model, so there is nobody to re-plan;
    /// its error (a missing target under `on_mismatch: fail`, a replayed action that failed) ends the round,
    /// naming the step and the selector.
    pub(super) fn app_error(&mut self, agent_name: &str, error: &str) -> AgentState {
        let why = format!("{agent_name} error: {error}");
        if self.services.replay.is_some() {
            self.end = Some(RoundEnd::Failed(why));
            return AgentState::Error;
        }
        self.archive(Outcome::Error, &why);
        self.replan("ended in an error");
        AgentState::Error
    }

    /// Counts a re-plan and gives control back to the HostAgent, or ends the round when the limit is
    /// passed.
    fn replan(&mut self, how: &str) {
        self.replans += 1;
        if self.replans > self.services.settings.max_replans {
            self.end = Some(RoundEnd::Failed(format!(
                "re-plan limit reached ({}) after subtask {how}: {}",
                self.services.settings.max_replans, self.subtask
            )));
        } else {
            self.active = Active::Host;
        }
    }
}
