//! What the round decided after a step, as one typed value stored with the step (in `Step.extra` under
//! [`CONTROL_KEY`], serialised by serde): continue with an agent, ask these questions, hold this action,
//! finish, or fail — plus the round's state for a runner that resumes it after a crash.
//!
//! The runner waits on it, and the API reads from it what a task waits for: the held action and the asked
//! questions each carry a stable id (derived from the step that asked or held), so a person's answer or
//! decision can name what it answers.

use serde::{Deserialize, Serialize};
use ufo_proto::v1;

use crate::round::RoundState;

/// Key of the step's [`StepControl`] in `Step.extra`.
pub const CONTROL_KEY: &str = "ufo_control";

/// A question asked of a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// Stable id: `q<step>-<n>` (the asking step, the question's position).
    pub id: String,
    /// The question.
    pub text: String,
}

/// An action held for a person's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldAction {
    /// Stable id: `h<step>` (the holding step).
    pub id: String,
    /// The agent that proposed it.
    pub agent_name: String,
    /// Its function(s), comma-separated for a batch.
    pub function: String,
    /// Its arguments as JSON (the list of actions for a batch).
    pub arguments_json: String,
    /// The control or application it targets.
    pub target_name: String,
    /// Why the agent asks.
    pub reason: String,
    /// The step that held it.
    pub step: u64,
}

impl HeldAction {
    /// An AppAgent's (or a third-party agent's) batch held at step `step`: its functions and its actions
    /// as JSON.
    pub fn batch(
        agent_name: String,
        actions: &[crate::agents::response::ActionSpec],
        target_name: String,
        reason: String,
        step: u64,
    ) -> Self {
        let functions: Vec<&str> = actions.iter().map(|a| a.function.as_str()).collect();
        Self {
            id: String::new(),
            agent_name,
            function: functions.join(", "),
            arguments_json: serde_json::to_string(actions).unwrap_or_default(),
            target_name,
            reason,
            step,
        }
    }

    /// As the API shows it.
    pub fn to_proto(&self) -> v1::HeldAction {
        v1::HeldAction {
            id: self.id.clone(),
            agent_name: self.agent_name.clone(),
            function: self.function.clone(),
            arguments_json: self.arguments_json.clone(),
            target_name: self.target_name.clone(),
            reason: self.reason.clone(),
            step: self.step,
        }
    }
}

/// What happens after a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Next {
    /// Produce the next step with this agent.
    Continue {
        /// The agent that acts next.
        agent: String,
    },
    /// Ask a person these questions and wait for the answers (they arrive on the blackboard).
    Ask {
        /// In order.
        questions: Vec<Question>,
    },
    /// Hold this action (not executed) until a person approves or rejects it.
    Hold {
        /// The held action.
        action: HeldAction,
    },
    /// The round is done.
    Finish {
        /// Its result.
        result: String,
    },
    /// The round failed.
    Fail {
        /// Why.
        reason: String,
    },
}

impl Next {
    /// Questions to ask, ids to be assigned by [`Next::assign_ids`].
    pub fn ask(questions: impl IntoIterator<Item = String>) -> Self {
        Self::Ask {
            questions: questions
                .into_iter()
                .map(|text| Question {
                    id: String::new(),
                    text,
                })
                .collect(),
        }
    }

    /// Gives the questions and the held action their ids and step, from the step `number` that asks or
    /// holds them.
    pub fn assign_ids(&mut self, number: u64) {
        match self {
            Self::Ask { questions } => {
                for (i, q) in questions.iter_mut().enumerate() {
                    q.id = format!("q{number}-{}", i + 1);
                }
            }
            Self::Hold { action } => {
                action.id = format!("h{number}");
                action.step = number;
            }
            _ => {}
        }
    }
}

/// The typed value stored with each step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepControl {
    /// What the round decided.
    pub next: Next,
    /// The round's state after the step (absent for steps of drivers without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<Box<RoundState>>,
}

impl From<Next> for StepControl {
    /// What comes next, without a round state.
    fn from(next: Next) -> Self {
        Self { next, round: None }
    }
}

/// Why a stored control value cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The step has none.
    #[error("step {0} has no control value")]
    Missing(u64),
    /// It does not decode.
    #[error("step {step}'s control value does not decode: {source}")]
    Decode {
        /// The step.
        step: u64,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

impl StepControl {
    /// The value stored with `step`.
    pub fn of(step: &v1::Step) -> Result<Self, ControlError> {
        let value = step
            .extra
            .as_ref()
            .and_then(|e| e.fields.get(CONTROL_KEY))
            .ok_or(ControlError::Missing(step.step))?;
        serde_json::from_value(ufo_proto::json::from_value(value.clone())).map_err(|source| {
            ControlError::Decode {
                step: step.step,
                source,
            }
        })
    }

    /// Stores it with `step`, replacing any earlier one.
    pub fn write(&self, step: &mut v1::Step) {
        let value = serde_json::to_value(self).unwrap_or_default();
        step.extra
            .get_or_insert_with(Default::default)
            .fields
            .insert(CONTROL_KEY.to_owned(), ufo_proto::json::to_value(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_round_trips_through_a_step_with_ids() {
        let mut next = Next::ask(["which file?".to_owned(), "which folder?".to_owned()]);
        next.assign_ids(7);
        let control = StepControl { next, round: None };
        let mut step = v1::Step {
            step: 7,
            ..Default::default()
        };
        control.write(&mut step);
        let back = StepControl::of(&step).unwrap();
        assert_eq!(back, control);
        let Next::Ask { questions } = back.next else {
            panic!("not an ask")
        };
        assert_eq!(questions[1].id, "q7-2");
        let mut hold = Next::Hold {
            action: HeldAction::default(),
        };
        hold.assign_ids(9);
        assert!(matches!(hold, Next::Hold { action } if action.id == "h9" && action.step == 9));
        assert!(matches!(
            StepControl::of(&v1::Step::default()),
            Err(ControlError::Missing(0))
        ));
    }
}
