//! What a replay task carries: the finished task's recorded steps (the replies the model gave, with a
//! selector for each action's target), taken from the store when the replay is submitted and kept in
//! the new task's configuration, so any runner replica can run it and a resumed replay sees the same plan.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ufo_proto::v1;

use super::selector::Selector;

/// What a replayed step does when its recorded target cannot be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnMismatch {
    /// The task fails with a message naming the step and the selector.
    #[default]
    Fail,
    /// The model decides that step (counted as fallen back).
    Model,
}

impl OnMismatch {
    /// From the proto enum; UNSPECIFIED (and unknown values) mean the default.
    pub fn from_proto(value: i32) -> Self {
        match v1::OnMismatch::try_from(value) {
            Ok(v1::OnMismatch::Model) => Self::Model,
            _ => Self::Fail,
        }
    }

    /// The proto enum.
    pub fn to_proto(self) -> v1::OnMismatch {
        match self {
            Self::Fail => v1::OnMismatch::Fail,
            Self::Model => v1::OnMismatch::Model,
        }
    }

    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Model => "model",
        }
    }
}

/// One recorded action.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedAction {
    /// Tool name.
    pub function: String,
    /// Arguments as recorded (`id` is the recording's label, replaced when replayed).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Status proposed with it.
    #[serde(default)]
    pub status: String,
    /// How to find its target again; none for actions without a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
    /// It failed (or was refused) in the recording too, which went on regardless.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// The agent name of a person's steps (a takeover's input, a demonstration's actions): recorded like the
/// agents' steps, never replayed as theirs.
pub const PERSON: &str = "Person";

/// Which agent took a recorded step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepAgent {
    /// The HostAgent.
    Host,
    /// An AppAgent.
    App,
}

/// One recorded step: the reply the model gave, as the step row keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedStep {
    /// Its number in the recorded task.
    pub step: u64,
    /// Which agent took it.
    pub agent: StepAgent,
    /// The status the model returned.
    pub status: String,
    /// The subtask (HostAgent: the one it assigned).
    #[serde(default)]
    pub subtask: String,
    /// Observation, thought, plan and comment, as given.
    #[serde(default)]
    pub observation: String,
    #[serde(default)]
    #[allow(missing_docs)]
    pub thought: String,
    #[serde(default)]
    #[allow(missing_docs)]
    pub plan: Vec<String>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub comment: String,
    /// The HostAgent's message for the AppAgent.
    #[serde(default)]
    pub message: String,
    /// Questions asked (PENDING).
    #[serde(default)]
    pub questions: Vec<String>,
    /// The result given (FINISH).
    #[serde(default)]
    pub result: String,
    /// The HostAgent's function.
    #[serde(default)]
    pub function: String,
    /// The actions, in order.
    #[serde(default)]
    pub actions: Vec<RecordedAction>,
    /// The third-party agent (its MCP server's name, or the shell) that took this step, when one did
    /// (it is recorded as an AppAgent step under the name `ThirdPartyAgent/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub third_party: Option<String>,
}

/// A plan that reuses an earlier task (issue 33, [`super::reuse`]): what it was matched with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReuseInfo {
    /// The earlier task's request.
    pub request: String,
    /// How alike the two requests are (`reuse::similarity`, 0–1).
    pub score: f64,
}

/// A replay: the task it replays, the mismatch rule and the recorded steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySpec {
    /// The replayed task's id.
    pub of: String,
    /// What a step whose target is missing does.
    #[serde(default)]
    pub on_mismatch: OnMismatch,
    /// The recorded steps of all its rounds, in order (step numbers run on across rounds).
    pub steps: Vec<RecordedStep>,
    /// The requests of its follow-up rounds (round 2, 3, ...): the replay adds each as its next round
    /// when the one before finishes, so every round is replayed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<String>,
    /// Set when the plan reuses an earlier task for a new request (issue 33, [`super::reuse`]): its steps
    /// are marked `reuse` instead of `replay`, its specific texts are rewritten first, and a step whose
    /// target is missing goes to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<ReuseInfo>,
}

fn extra_text(extra: &Value, key: &str) -> String {
    extra[key].as_str().unwrap_or_default().to_owned()
}

impl RecordedStep {
    /// From a stored step row.
    pub fn from_proto(s: &v1::Step) -> Self {
        let extra = ufo_proto::json::from_optional_struct(s.extra.clone());
        let agent = if s.agent_kind == v1::AgentKind::Host as i32 {
            StepAgent::Host
        } else {
            StepAgent::App
        };
        let actions = s
            .actions
            .iter()
            // A window selected again when a runner resumed the recording is not the model's action.
            .filter(|a| agent == StepAgent::Host || a.function != "select_application_window")
            .map(|a| RecordedAction {
                function: a.function.clone(),
                arguments: match ufo_proto::json::from_optional_struct(a.arguments.clone()) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                status: a.status.clone(),
                selector: a.selector.as_ref().map(Selector::from_proto),
                failed: a.result.as_ref().is_some_and(|r| {
                    r.status == v1::ResultStatus::Failure as i32
                        || r.status == v1::ResultStatus::Denied as i32
                }),
            })
            .collect();
        let questions = extra["questions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q.as_str().map(str::to_owned))
            .collect();
        Self {
            step: s.step,
            agent,
            status: s.status.clone(),
            subtask: s.subtask.clone(),
            observation: s.observation.clone(),
            thought: s.thought.clone(),
            plan: s.plan.clone(),
            comment: s.comment.clone(),
            message: extra_text(&extra, "message"),
            questions,
            result: extra_text(&extra, "result"),
            function: extra_text(&extra, "function"),
            actions,
            third_party: extra["third_party_agent"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        }
    }
}

impl RecordedStep {
    /// Step `n` of `agent` with `actions`, status CONTINUE and nothing else.
    pub fn blank(n: u64, agent: StepAgent, actions: Vec<RecordedAction>) -> Self {
        Self {
            step: n,
            agent,
            status: "CONTINUE".into(),
            subtask: String::new(),
            observation: String::new(),
            thought: String::new(),
            plan: Vec::new(),
            comment: String::new(),
            message: String::new(),
            questions: Vec::new(),
            result: String::new(),
            function: String::new(),
            actions,
            third_party: None,
        }
    }
}

impl ReplaySpec {
    /// The replay of task `of` from its stored steps (of every round) and the requests of its follow-up
    /// rounds (`follow_ups`, round 2 on).
    pub fn from_steps(
        of: &str,
        on_mismatch: OnMismatch,
        steps: &[v1::Step],
        follow_ups: Vec<String>,
    ) -> Self {
        Self {
            of: of.to_owned(),
            on_mismatch,
            // A person's input during a takeover is not the agents' to replay (docs/live.md).
            steps: steps
                .iter()
                .filter(|s| s.agent_name != PERSON)
                .map(RecordedStep::from_proto)
                .collect(),
            follow_ups,
            reuse: None,
        }
    }

    /// The request of round `number` when it is one of the follow-ups (2 and on).
    pub fn follow_up(&self, number: usize) -> Option<&str> {
        self.follow_ups
            .get(number.checked_sub(2)?)
            .map(String::as_str)
    }

    /// The recorded step replayed as step `n` (1-based) of the replay.
    pub fn step(&self, n: u64) -> Option<&RecordedStep> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        self.steps.get(i)
    }

    /// Whether the agent that took recorded step `n` took step `n + 1` too: an AppAgent's FINISH the
    /// recording did not act on (its batch changed nothing the executor could see, so it looked again).
    /// A replay follows that transition, not what its own run of the batch observed: the next recorded
    /// step is what it replays.
    pub fn stays(&self, n: u64) -> bool {
        match (self.step(n), n.checked_add(1).and_then(|m| self.step(m))) {
            (Some(a), Some(b)) => a.agent == b.agent && a.third_party == b.third_party,
            _ => false,
        }
    }
}
