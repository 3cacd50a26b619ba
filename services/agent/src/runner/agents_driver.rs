//! The real [`TaskDriver`]: the HostAgent and AppAgents, run step by step by [`crate::round::Round`].
//!
//! A `Round` keeps the agents' working state between steps, so the driver caches one per task while its
//! steps follow each other on this runner. When the cache has no matching round (first step, another
//! runner's task after a crash, a dropped step) it rebuilds one entirely from the store: the HostAgent's
//! memory and every AppAgent's (by agent name), the finished subtasks, the blackboard, and the round's
//! state from its last step's control value ([`crate::round::Round::restore`]: an action held when the
//! runner died stays held, and runs or is rejected without asking the model again). Not rebuilt: the last
//! acted-on control's screenshot (the AppAgent's first image of its next prompt) and the round's LLM totals
//! (the runner sums the recorded steps). The runner waits for people; the round is given what arrived.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ufo_proto::v1;

use super::driver::{DesktopPictureError, DriverError, PersonInputError, StepInput, TaskDriver};
use super::hitl;
use super::intent::IntentGate;
use crate::agents::setup::TaskOverrides;
use crate::agents::{AgentServices, HostAgent};
use crate::dispatch::CommandDispatcher;
use crate::memory::board_images::{self, StoredImages};
use crate::memory::{Blackboard, Memory};
use crate::round::control::StepControl;
use crate::round::output::StepOutput;
use crate::round::{Arrived, Round, RoundEnd, previous_subtasks_from_store};
use crate::runner::task_config::{ConfirmPolicy, TaskConfig};
use crate::store::knowledge::SessionKnowledge;

/// Builds a task's agent services (models, marker, settings) from its configuration.
pub type ServicesFactory =
    Arc<dyn Fn(&TaskConfig) -> Result<AgentServices, DriverError> + Send + Sync>;
/// Builds the command dispatcher (the executor client) of a task.
pub type DispatcherFactory =
    Arc<dyn Fn(&TaskConfig) -> Result<Arc<dyn CommandDispatcher>, DriverError> + Send + Sync>;

/// Drives tasks with the real agents.
pub struct AgentsDriver {
    services: ServicesFactory,
    dispatcher: DispatcherFactory,
    rounds: Mutex<HashMap<String, (Round, Arc<IntentGate>)>>,
    /// With `--knowledge`: the knowledge store, bound to each task's owner when its agents are built.
    knowledge: Option<SessionKnowledge>,
    /// With `--web-search-url`: the provider whose results follow the store's items in AppAgent prompts.
    web_search: Option<crate::store::web_search::WebSearch>,
    /// How a person's input reaches a task's executor (takeover, docs/live.md): the registry and the
    /// largest message.
    executors: Option<(Arc<crate::dispatch::registry::ExecutorRegistry>, usize)>,
    /// With `--mcp-servers`: the MCP servers each task's `mcp__` actions go to, bound to its executor.
    mcp: Option<Arc<crate::mcp::McpHub>>,
}

impl std::fmt::Debug for AgentsDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentsDriver").finish_non_exhaustive()
    }
}

/// The task's choices as the agents take them.
pub fn overrides(config: &TaskConfig) -> TaskOverrides {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    TaskOverrides {
        host_model: some(&config.model.host_model),
        app_model: some(&config.model.app_model),
        temperature: config.model.temperature,
        confirm_always: config.confirm_policy == ConfirmPolicy::Always,
        confirm_never: config.confirm_policy == ConfirmPolicy::Never,
        max_steps: Some(config.limits.max_steps),
    }
}

/// Why the production driver cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum DriverSetupError {
    /// The screenshot annotation (label font) cannot be set up.
    #[error(transparent)]
    Vision(#[from] crate::vision::VisionError),
    /// The operator's consent policy file cannot be used.
    #[error(transparent)]
    Policy(#[from] crate::agents::policy::PolicyError),
    /// The executor registry (flags, executors file, CA) is invalid.
    #[error(transparent)]
    Executors(#[from] crate::dispatch::registry::ExecutorConfigError),
    /// The MCP servers file cannot be used.
    #[error(transparent)]
    Mcp(#[from] crate::mcp::McpConfigError),
    /// The grounding service's URL or token file is invalid.
    #[error(transparent)]
    Grounding(#[from] crate::vision::grounding::GroundingError),
    /// The web-search provider's URL or token file is invalid.
    #[error(transparent)]
    WebSearch(#[from] crate::store::web_search::WebSearchError),
    /// The session service's address or token (screenshot uploads) is invalid.
    #[error(transparent)]
    Session(#[from] crate::store::client::SessionClientError),
}

impl AgentsDriver {
    /// A driver building each task's services and dispatcher with these factories.
    pub fn new(services: ServicesFactory, dispatcher: DispatcherFactory) -> Self {
        Self {
            services,
            dispatcher,
            rounds: Mutex::new(HashMap::new()),
            knowledge: None,
            web_search: None,
            executors: None,
            mcp: None,
        }
    }

    /// The same driver sending each task's `mcp__` actions to `hub`'s servers (those on the desktop
    /// started through the task's executor), the rest to the task's dispatcher; the task's agents see
    /// the hub bound to their executor.
    pub fn with_mcp(mut self, hub: Arc<crate::mcp::McpHub>) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// The same driver quoting `web`'s results for each AppAgent subtask (after the knowledge store's
    /// items when there is a store).
    pub fn with_web_search(mut self, web: crate::store::web_search::WebSearch) -> Self {
        self.web_search = Some(web);
        self
    }

    /// The same driver retrieving from `knowledge` into every task's prompts (the task owner's
    /// experiences, nobody else's).
    pub fn with_knowledge(mut self, knowledge: SessionKnowledge) -> Self {
        self.knowledge = Some(knowledge);
        self
    }

    /// The production driver: models and settings from `--llm-*` and agent flags, executors over gRPC.
    pub fn from_config(config: &crate::Config) -> Result<Self, DriverSetupError> {
        let marker = config.agents.marker()?;
        let policy = config.agents.load_policy()?;
        let mcp = config.agents.load_mcp()?;
        let services_mcp = mcp.clone();
        let grounding = config.agents.grounding()?;
        let llm = config.llm.clone();
        let agents = config.agents.clone();
        let uploads = Arc::new(crate::store::blobs::BlobUploads::new(
            crate::store::client::connect(&config.session)?,
        ));
        // Bound to each task's owner in `rebuild`.
        let knowledge = if config.agents.knowledge {
            Some(SessionKnowledge::from_config(config)?)
        } else {
            None
        };
        let services: ServicesFactory = Arc::new(move |task: &TaskConfig| {
            AgentServices::for_task(
                &llm,
                &agents,
                policy.clone(),
                marker.clone(),
                &overrides(task),
            )
            .map(|s| AgentServices {
                uploads: Some(uploads.clone()),
                mcp: services_mcp.clone(),
                grounding: grounding.clone(),
                ..s
            })
            .map_err(|e| DriverError::new(format!("cannot set up the agents: {e}")))
        });
        let runner = config.runner.clone();
        let shell_output_chars = config
            .agents
            .shell_agent
            .then_some(config.agents.shell_output_chars);
        // Credentials come from the operator's registry, never from the task (issue 16).
        let executors = crate::dispatch::registry::ExecutorRegistry::from_config(config)?;
        let dispatcher: DispatcherFactory = Arc::new(move |task: &TaskConfig| {
            let conn = executors
                .connection(&task.executor_name, &task.executor)
                .map_err(|e| DriverError::new(format!("cannot use the executor: {e}")))?;
            executors
                .dispatcher(
                    &conn,
                    runner.executor_deadline_ms,
                    runner.executor_max_message_bytes,
                )
                .map(|d| {
                    let budget = std::time::Duration::from_millis(runner.executor_retry_budget_ms);
                    let mut executor =
                        Arc::new(d.with_retry_budget(budget)) as Arc<dyn CommandDispatcher>;
                    // The shell agent's shell__run goes to the executor's run_command.
                    if let Some(chars) = shell_output_chars {
                        executor = Arc::new(crate::shell::ShellDispatcher::new(executor, chars));
                    }
                    executor
                })
                .map_err(|e| DriverError::new(format!("cannot reach the executor: {e}")))
        });
        let mut driver = Self::new(services, dispatcher);
        driver.mcp = mcp;
        driver.web_search = crate::store::web_search::WebSearch::from_args(&config.agents)?;
        driver.executors = Some((
            Arc::new(crate::dispatch::registry::ExecutorRegistry::from_config(
                config,
            )?),
            config.runner.executor_max_message_bytes,
        ));
        Ok(match knowledge {
            Some(k) => driver.with_knowledge(k),
            None => driver,
        })
    }

    fn take(&self, input: &StepInput<'_>) -> Option<(Round, Arc<IntentGate>)> {
        let mut rounds = self.rounds.lock().ok()?;
        let (round, gate) = rounds.remove(&input.session.id)?;
        (round.round == input.round.number && round.session_step() + 1 == input.step)
            .then_some((round, gate))
    }

    fn put_back(&self, session_id: &str, round: Round, gate: Arc<IntentGate>) {
        if let Ok(mut rounds) = self.rounds.lock() {
            rounds.insert(session_id.to_owned(), (round, gate));
        }
    }

    async fn rebuild(
        &self,
        input: &StepInput<'_>,
    ) -> Result<(Round, Arc<IntentGate>), DriverError> {
        // Where a task's first step goes before it asks its desktop anything (issue 36's scheduling
        // overhead): each stage timed, logged once the agents are built.
        let mut stage = std::time::Instant::now();
        let mut lap = || {
            let now = std::time::Instant::now();
            let ms = now.duration_since(stage).as_secs_f64() * 1e3;
            stage = now;
            ms
        };
        let mut services = (self.services)(input.config)?;
        if let Some(knowledge) = &self.knowledge {
            services.knowledge = Some(Arc::new(knowledge.for_owner(&input.session.owner)));
        }
        if let Some(web) = &self.web_search {
            services.knowledge = Some(Arc::new(crate::store::web_search::WithWebSearch {
                store: services.knowledge.take(),
                web: web.clone(),
            }));
        }
        let mut board = Blackboard::from_proto(input.blackboard);
        let stored = StoredImages {
            session_id: &input.session.id,
            board: input.blackboard,
            steps: input.steps,
        };
        let count = services.settings.blackboard_images;
        let services_ms = lap();
        board_images::restore(&mut board, stored, &input.intents.client, count).await;
        let board_ms = lap();
        match input.config.replay.clone() {
            // A reuse (issue 33): its texts are rewritten for this task's request by one model call,
            // started now so it overlaps the first observation; only while the plan has steps left.
            Some(spec) if spec.reuse.is_some() => {
                if input.round.number != 1
                    || usize::try_from(input.step).map_or(true, |n| n > spec.steps.len())
                {
                    // Past the plan: the model decides, nothing to fill.
                } else {
                    services.reuse = Some(Arc::new(crate::replay::reuse::Reuse::start(
                        spec,
                        input.session.request.clone(),
                        services.app_model.clone(),
                        services.settings.temperature,
                        services.settings.max_reasks,
                    )));
                }
            }
            spec => services.replay = spec.map(Arc::new),
        }
        let replay_ms = lap();
        let mut dispatcher = (self.dispatcher)(input.config)?;
        // MCP actions go to the task's MCP servers (those on the desktop start through this task's
        // executor); everything else to the executor.
        if let Some(hub) = &self.mcp {
            let routed = crate::mcp::McpDispatcher::new(dispatcher, hub.clone());
            services.mcp = Some(routed.hub().clone());
            dispatcher = Arc::new(routed);
        }
        let dispatcher_ms = lap();
        let gate = Arc::new(IntentGate::new(dispatcher));
        let dispatcher: Arc<dyn CommandDispatcher> = gate.clone();
        let mut host = HostAgent::new(services);
        host.memory = Memory::from_proto(input.memory, &host.name);
        let mut round = Round::new(
            &input.session.id,
            input.round.number,
            &input.round.request,
            input.step - 1,
            host,
            board,
            previous_subtasks_from_store(input.memory),
            dispatcher,
        )
        .map_err(|e| DriverError::new(format!("cannot build the agents: {e}")))?
        // AppAgents get their memory back when created (the active one below, the others on ASSIGN).
        .with_stored_memory(input.memory.to_vec());
        if input.round_step > 1 {
            // Resuming mid-round: the request is already on the blackboard.
            round.new_request = false;
            round.round_step = input.round_step - 1;
            let last = input
                .steps
                .iter()
                .rev()
                .find(|s| s.round == input.round.number);
            let restored = last
                .ok_or(crate::round::resume::RestoreError::NoStep)
                .and_then(|s| {
                    StepControl::of(s)
                        .map_err(|e| crate::round::resume::RestoreError::BadControl(e.to_string()))
                })
                .and_then(|control| round.restore(&control));
            if let Err(e) = restored {
                // A step recorded before snapshots existed: the HostAgent takes over from its memory.
                tracing::warn!(error = %e, "cannot restore the round's state; the HostAgent continues");
            }
        }
        tracing::debug!(
            services_ms,
            board_ms,
            replay_ms,
            dispatcher_ms,
            round_ms = lap(),
            "the task's agents built"
        );
        Ok((round, gate))
    }
}

/// The answers the store holds to `questions` (each to the newest entry asking it), once all arrived.
fn answers(board: &v1::Blackboard, questions: &[String]) -> Option<Vec<String>> {
    let asking = |q: &str| {
        board.questions.iter().rev().find(|e| {
            let v = ufo_proto::json::from_optional_struct(e.value.clone());
            v["question"] == q && v["answer"].is_null()
        })
    };
    questions
        .iter()
        .map(|q| hitl::answer_of(board, asking(q)?.index))
        .collect()
}

#[async_trait]
impl TaskDriver for AgentsDriver {
    fn task_ended(&self, session_id: &str) {
        let ended = self
            .rounds
            .lock()
            .ok()
            .and_then(|mut rounds| rounds.remove(session_id));
        drop(ended);
    }

    async fn next_step(&self, input: StepInput<'_>) -> Result<StepOutput, DriverError> {
        let (mut round, gate) = match self.take(&input) {
            Some(cached) => cached,
            None => {
                tracing::Instrument::instrument(
                    self.rebuild(&input),
                    tracing::info_span!("agents.build"),
                )
                .await?
            }
        };
        // The agent active now is the one that acts in this step (a held action's proposer included).
        gate.begin(input.intents.clone(), round.active_name());
        let arrived = Arrived {
            answers: answers(input.blackboard, round.pending_questions()),
            decision: input.decision.clone(),
        };
        let Some(out) = round.next_step(&arrived).await else {
            return Err(DriverError::new(match round.end() {
                Some(RoundEnd::Failed(reason)) => reason.clone(),
                _ => "the agents stopped without a step".to_owned(),
            }));
        };
        if round.end().is_none() {
            self.put_back(&input.session.id, round, gate);
        }
        Ok(out)
    }

    fn summary_model(&self, config: &TaskConfig) -> Option<Arc<dyn crate::llm::ChatModel>> {
        match (self.services)(config) {
            Ok(services) => Some(services.host_model),
            Err(e) => {
                tracing::warn!(error = %e, "no model for the experience summary");
                None
            }
        }
    }

    async fn person_input(
        &self,
        config: &TaskConfig,
        input: &super::person::PersonInput,
    ) -> Result<(), PersonInputError> {
        let Some((executors, max_bytes)) = &self.executors else {
            return Err(PersonInputError::NoExecutors);
        };
        let conn = executors.connection(&config.executor_name, &config.executor)?;
        let mut client = executors.dispatcher(&conn, 0, *max_bytes)?.client();
        client
            .takeover_input(input.to_proto())
            .await
            .map(|_| ())
            .map_err(PersonInputError::Executor)
    }

    async fn desktop_picture(
        &self,
        config: &TaskConfig,
    ) -> Result<Option<crate::vision::screenshot::Screenshot>, DesktopPictureError> {
        let dispatcher = (self.dispatcher)(config)?;
        let command = crate::dispatch::Command::observe(
            "capture_desktop_screenshot",
            serde_json::json!({"all_screens": true}),
        );
        let shot = crate::dispatch::execute_one(dispatcher.as_ref(), command).await?;
        if !shot.is_success() {
            return Err(DesktopPictureError::Failed(shot.error));
        }
        Ok(shot.images.into_iter().next())
    }
}
