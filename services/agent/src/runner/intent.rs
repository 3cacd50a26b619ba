//! Intent before action. Before any batch holding an action reaches an executor, the runner appends a
//! STEP_STARTED event `{intent: true, step, round, agent, actions: [{tool, arguments}]}` fenced by its lease
//! (one small write per batch; a runner that lost the lease is refused before anything runs). A runner that
//! takes the task over and finds intents for the step after the last recorded one knows the previous runner
//! stopped between sending those actions and recording their step: it records that step with those actions
//! and the outcome [`UNKNOWN`], and the agents then observe again before deciding — nothing is replayed.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use ufo_proto::v1::{
    AgentKind, AppendEventsRequest, Event, EventKind, GetSessionRequest, Step, WatchEventsRequest,
};

use super::ahead::RecordAhead;
use crate::agents::action::ActionRecord;
use crate::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError, ResultStatus};
use crate::round::control::{Next, StepControl};
use crate::round::output::StepOutput;
use crate::round::state::AgentState;
use crate::store::client::SessionClient;
use crate::store::retry::{Retry, retried};

/// The recorded outcome of an action whose runner stopped before recording its step.
pub const UNKNOWN: &str = "unknown — the previous runner stopped while running it";

/// Where the intents of one step of one task go before their actions run: its event log, under the
/// runner's lease.
#[derive(Clone, Debug)]
pub struct StoreIntents {
    pub(super) client: SessionClient,
    pub(super) session_id: String,
    pub(super) worker_id: String,
    pub(super) step: u64,
    pub(super) round: u32,
    pub(super) retry: Retry,
    /// The previous step's record when it runs ahead ([`super::ahead`]): waited for before the intent.
    pub(super) previous: Option<RecordAhead>,
}

impl StoreIntents {
    /// Records that `agent` is about to send `commands` (the actions among them) to the executor, once
    /// every earlier step is durable: an error when one could not be recorded (nothing may run then).
    pub async fn record(&self, agent: &str, commands: &[Command]) -> Result<(), IntentError> {
        if let Some(previous) = &self.previous {
            previous
                .durable()
                .await
                .map_err(|status| IntentError::PreviousStep {
                    step: previous.step(),
                    status,
                })?;
        }
        self.append(agent, commands).await
    }

    #[tracing::instrument(name = "runner.intent", skip_all, fields(step = self.step))]
    async fn append(&self, agent: &str, commands: &[Command]) -> Result<(), IntentError> {
        let intent = Intent {
            intent: true,
            step: self.step,
            round: self.round,
            agent: agent.to_owned(),
            actions: commands
                .iter()
                .map(|c| IntendedAction {
                    tool: c.tool_name.clone(),
                    arguments: c.parameters.clone(),
                })
                .collect(),
        };
        let payload = serde_json::to_value(&intent).unwrap_or_default();
        let mut draft = crate::round::output::draft(EventKind::StepStarted, payload, self.step);
        draft.round = self.round;
        let request = AppendEventsRequest {
            session_id: self.session_id.clone(),
            events: vec![draft],
            lease_owner: self.worker_id.clone(),
        };
        let client = self.client.clone();
        retried(&self.retry, "record the step's intent", || {
            let mut client = client.clone();
            let request = request.clone();
            async move { client.append_events(request).await }
        })
        .await
        .map(|_| ())
        .map_err(IntentError::Store)
    }
}

/// Why a batch's intent could not be recorded (then nothing of the batch runs).
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    /// The previous step, recorded ahead, did not become durable.
    #[error("step {step} could not be recorded, so nothing more may run: {}", status.message())]
    PreviousStep {
        /// That step.
        step: u64,
        /// The store's refusal.
        status: tonic::Status,
    },
    /// The store refused or did not answer.
    #[error("cannot record the intent before acting: {}", .0.message())]
    Store(tonic::Status),
}

/// A dispatcher that records the intent of every batch holding an action before sending it.
pub struct IntentGate {
    inner: Arc<dyn CommandDispatcher>,
    current: Mutex<Option<(Arc<StoreIntents>, String)>>,
}

impl IntentGate {
    /// Gates `inner`.
    pub fn new(inner: Arc<dyn CommandDispatcher>) -> Self {
        Self {
            inner,
            current: Mutex::new(None),
        }
    }

    /// The step about to run: its intents go to `sink`, under `agent`'s name.
    pub fn begin(&self, sink: Arc<StoreIntents>, agent: String) {
        if let Ok(mut current) = self.current.lock() {
            *current = Some((sink, agent));
        }
    }
}

#[async_trait]
impl CommandDispatcher for IntentGate {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        let acts: Vec<Command> = commands
            .iter()
            .filter(|c| c.tool_type == crate::dispatch::ToolType::Action)
            .cloned()
            .collect();
        if !acts.is_empty() {
            let current = self.current.lock().ok().and_then(|c| c.clone());
            if let Some((sink, agent)) = current {
                sink.record(&agent, &acts)
                    .await
                    .map_err(|e| DispatchError::Unrecorded(e.to_string()))?;
            }
        }
        self.inner.execute(commands).await
    }

    async fn catalog(&self) -> Result<Arc<crate::dispatch::tools::ExecutorCatalog>, DispatchError> {
        self.inner.catalog().await
    }
}

/// One recorded intent: the payload of its STEP_STARTED event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// Marks a STEP_STARTED event as an intent.
    pub intent: bool,
    /// The step the actions belong to.
    pub step: u64,
    /// Its round.
    #[serde(default)]
    pub round: u32,
    /// The agent that was acting.
    pub agent: String,
    /// The actions, in order.
    pub actions: Vec<IntendedAction>,
}

/// One action of an intent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntendedAction {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
}

fn intent_of(event: &Event, step: u64) -> Option<Intent> {
    if event.kind != EventKind::StepStarted as i32 || event.step != step {
        return None;
    }
    let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
    serde_json::from_value(payload)
        .ok()
        .filter(|i: &Intent| i.intent)
}

/// The intents recorded for `step` in `events`, in order.
pub fn intents(events: &[Event], step: u64) -> Vec<Intent> {
    events.iter().filter_map(|e| intent_of(e, step)).collect()
}

/// The session's event log up to now, from its start (read while the steps are, when a task starts:
/// [`after_step`] then keeps what follows its last recorded step).
pub async fn events_so_far(
    client: &SessionClient,
    session_id: &str,
) -> Result<Vec<Event>, tonic::Status> {
    let mut client = client.clone();
    let request = GetSessionRequest {
        session_id: session_id.to_owned(),
    };
    let last = client.get_session(request).await?.into_inner().last_seq;
    let mut log = Vec::new();
    if last == 0 {
        return Ok(log);
    }
    let request = WatchEventsRequest {
        session_id: session_id.to_owned(),
        from_seq: 1,
        kinds: Vec::new(),
    };
    let mut events = client.watch_events(request).await?.into_inner();
    while let Some(event) = events.next().await {
        let event = event?;
        let seq = event.seq;
        log.push(event);
        if seq >= last {
            break;
        }
    }
    Ok(log)
}

/// The events of `log` after the STEP_FINISHED of `last_step` (every event when no step is recorded;
/// none when that event is not in the log, e.g. a step written by other tools: nothing to resume then).
/// The log is read from its start ([`events_so_far`]), as the runner's event follower reads it.
pub fn after_step(log: Vec<Event>, last_step: u64) -> Vec<Event> {
    let mut tail = (last_step == 0).then(Vec::new);
    for event in log {
        if event.kind == EventKind::StepFinished as i32 && event.step == last_step {
            tail = Some(Vec::new());
        } else if let Some(tail) = tail.as_mut() {
            tail.push(event);
        }
    }
    tail.unwrap_or_default()
}

/// The step a runner records for intents whose step was never recorded: their actions with the outcome
/// [`UNKNOWN`], the round's state of the step before (`previous`) with the acting agent continuing, so it
/// observes again.
pub fn unknown_step(
    intents: &[Intent],
    previous: Option<&Step>,
    request: Option<&str>,
) -> StepOutput {
    let agent = intents.last().map(|i| i.agent.clone()).unwrap_or_default();
    let actions: Vec<ActionRecord> = intents
        .iter()
        .flat_map(|i| i.actions.iter())
        .map(|a| ActionRecord {
            function: a.tool.clone(),
            arguments: a.arguments.clone(),
            status: String::new(),
            target: None,
            result: CommandResult {
                status: ResultStatus::None,
                error: UNKNOWN.into(),
                result: json!({"unknown": true}),
                ..CommandResult::none()
            },
        })
        .collect();
    let mut round = previous
        .and_then(|s| StepControl::of(s).ok())
        .and_then(|c| c.round);
    if let Some(r) = round.as_deref_mut() {
        r.held = None;
    }
    let step = Step {
        agent_name: agent.clone(),
        agent_kind: if agent.starts_with("HostAgent") {
            AgentKind::Host
        } else {
            AgentKind::App
        } as i32,
        state_before: previous.map(|s| s.state_after.clone()).unwrap_or_default(),
        state_after: AgentState::Continue.to_string(),
        comment: UNKNOWN.into(),
        actions: actions.iter().map(ActionRecord::to_proto).collect(),
        ..Default::default()
    };
    let representation: Vec<String> = actions.iter().map(ActionRecord::representation).collect();
    // Under the subtask it ran for: an agent lists its previous actions of the current subtask only
    // (a third-party agent, which has no screen to observe again, would otherwise not see it and call
    // the tool a second time).
    let subtask = round
        .as_deref()
        .map(|r| r.subtask.clone())
        .unwrap_or_default();
    let memory = json!({"agent_name": agent, "comment": UNKNOWN, "status": AgentState::Continue,
                        "subtask": subtask,
                        "action": actions.iter().map(ActionRecord::to_json).collect::<Vec<_>>(),
                        "action_representation": representation.join("; ")});
    StepOutput {
        step,
        memory_item: memory.as_object().cloned(),
        // The first step of a round carries the round's request onto the board.
        blackboard: request
            .map(|r| {
                vec![crate::memory::blackboard::entry(
                    ufo_proto::v1::BlackboardKind::Request,
                    0,
                    json!({"request": r}),
                    String::new(),
                )]
            })
            .unwrap_or_default(),
        artifacts: Vec::new(),
        events: Vec::new(),
        control: StepControl {
            next: Next::Continue { agent },
            round,
        },
        uploads: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_are_read_back_and_become_an_unknown_step() {
        let payload = json!({"intent": true, "step": 5, "agent": "AppAgent/notes",
                             "actions": [{"tool": "click_input", "arguments": {"id": "3"}}]});
        let event = Event {
            kind: EventKind::StepStarted as i32,
            step: 5,
            payload: ufo_proto::json::to_struct(payload).ok(),
            ..Default::default()
        };
        assert_eq!(intent_of(&event, 4), None);
        let intent = intent_of(&event, 5).unwrap();
        assert_eq!(intent.actions[0].tool, "click_input");
        let out = unknown_step(&[intent], None, None);
        assert_eq!(out.step.actions.len(), 1);
        let result = out.step.actions[0].result.as_ref().unwrap();
        assert_eq!(result.error, UNKNOWN);
        // The next prompt says the outcome is unknown (not "not run").
        let memory = out.memory_item.unwrap();
        let shown = memory["action_representation"].as_str().unwrap();
        assert!(
            shown.starts_with("click_input {\"id\":\"3\"} [outcome unknown:"),
            "{shown}"
        );
        assert!(matches!(out.control.next, Next::Continue { agent } if agent == "AppAgent/notes"));
    }
}
