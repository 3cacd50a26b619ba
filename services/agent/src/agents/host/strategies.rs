//! HostAgent strategies (seed 000): desktop data collection, LLM interaction, action execution, memory
//! update. Each declares what it reads and writes; none mutates the agent.

use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::HostAgent;
use super::launch::launch_and_wait;
use crate::agents::action::ActionRecord;
use crate::agents::common::{
    Progress, answered, ask_reply, blackboard_prompt, failed, memory_item, offered_names,
    remembered, tool_catalog, with_knowledge,
};
use crate::agents::host::prompt::{HostPromptInput, messages};
use crate::agents::keys::*;
use crate::agents::response::{HostResponse, ReplyProblem};
use crate::agents::settings::AgentSettings;
use crate::agents::strategy::{AgentStrategy, Declaration};
use crate::agents::target::{TargetInfo, TargetKind, TargetRegistry};
use crate::agents::tools::{Audience, check_launch, function_list, launchable};
use crate::dispatch::{Command, CommandResult, execute_one};
use crate::processor::{Outputs, ProcessingContext, StrategyError, StrategyResult, keys as pkeys};
use crate::replay::phase::{self as replay, Phase, awaited};
use crate::replay::plan::StepAgent;
use crate::replay::wait::{CHANGE_TOOL, REPLAY_WAITED, watch};
use crate::vision::downscale_png;

/// Captures all screens, lists the application windows and registers them with the configured
/// third-party agents (fail_fast: the LLM cannot decide without them); a replayed step whose recorded
/// window is not listed yet waits for it and looks again.
#[derive(Debug, Clone, Copy)]
pub struct DesktopDataCollection;

#[async_trait]
impl AgentStrategy for DesktopDataCollection {
    type Agent = HostAgent;
    fn declaration(&self) -> Declaration {
        Declaration::data("desktop_data_collection")
            .reads([
                DISPATCHER.required("runs the screenshot and window-list commands"),
                pkeys::SESSION_STEP.optional("the replayed step, whose window is waited for"),
            ])
            .writes([
                DESKTOP_SCREENSHOT.provided(),
                TARGET_REGISTRY.provided(),
                TOOL_CATALOG.provided(),
                SETTLE.provided(),
                REPLAY_WAITED.provided(),
            ])
    }
    async fn run(&self, agent: &HostAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let dispatcher = ctx.require(DISPATCHER)?.clone();
        let mut out = collect(agent, dispatcher.as_ref()).await?;
        // A replayed step whose window is not listed yet waits for it (crate::replay::wait).
        let step = ctx.get(pkeys::SESSION_STEP)?.copied();
        let wanted = match step {
            Some(n) if agent.services.replay.is_some() || agent.services.reuse.is_some() => {
                awaited(&agent.services, n, StepAgent::Host).await
            }
            _ => None,
        };
        let Some(wanted) = wanted.filter(|w| !w.targets.is_empty()) else {
            return Ok(out);
        };
        let (listed, can_watch) = match (out.get(TARGET_REGISTRY)?, out.get(TOOL_CATALOG)?) {
            (Some(r), Some(c)) => (r.all().to_vec(), c.tool(CHANGE_TOOL).is_some()),
            _ => return Ok(out),
        };
        // Each look is a whole collection; the last one becomes the step's.
        let last: Mutex<Option<Outputs>> = Mutex::new(None);
        let (last_ref, exec) = (&last, dispatcher.as_ref());
        let waited = watch(
            exec,
            &wanted,
            &listed,
            agent.services.settings.replay_wait,
            can_watch,
            || async move {
                let again = collect(agent, exec).await.map_err(|e| e.to_string())?;
                let windows = match again.get(TARGET_REGISTRY) {
                    Ok(Some(r)) => r.all().to_vec(),
                    _ => Vec::new(),
                };
                *last_ref.lock().unwrap_or_else(PoisonError::into_inner) = Some(again);
                Ok(windows)
            },
        )
        .await;
        if let Some(again) = last.into_inner().unwrap_or_else(PoisonError::into_inner) {
            // Observed again; the settle after the previous action stays the step's.
            let settle = out.get(SETTLE)?.copied();
            out = again;
            if let Some(settle) = settle {
                out.insert(SETTLE, settle);
            }
        }
        out.insert(REPLAY_WAITED, waited);
        Ok(out)
    }
}

/// [`DesktopDataCollection`]'s look: the desktop's screenshot, its windows (with the third-party agents)
/// and the tool catalog.
async fn collect(
    agent: &HostAgent,
    dispatcher: &dyn crate::dispatch::CommandDispatcher,
) -> Result<Outputs, StrategyError> {
    // The catalog (cached after a task's first step) and the observation at once: they are independent
    // reads, and a task's first step would otherwise wait for one more round trip to its desktop before
    // its first command (issue 36's scheduling overhead). A failed catalog is reported first, as when
    // it was asked for first.
    let observation = dispatcher.execute(vec![
        Command::observe("capture_desktop_screenshot", json!({"all_screens": true})),
        Command::observe(
            "get_desktop_app_target_info",
            json!({"remove_empty": true, "refresh_app_windows": true}),
        ),
    ]);
    let (catalog, results) = tokio::join!(tool_catalog(dispatcher), observation);
    let catalog = catalog?;
    let results = results.map_err(|e| failed("desktop data collection failed", e))?;
    let [shot, windows] = results.as_slice() else {
        return Err(StrategyError::msg(
            "executor returned the wrong number of results",
        ));
    };
    for r in [shot, windows] {
        if !r.is_success() {
            return Err(StrategyError::msg(format!(
                "desktop data collection failed: {}",
                r.error
            )));
        }
    }
    let screenshot = shot
        .images
        .first()
        .cloned()
        .ok_or_else(|| StrategyError::msg("capture_desktop_screenshot returned no image"))?;
    let mut registry = TargetRegistry::new();
    registry.register(
        windows
            .result
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| TargetInfo::from_json(v, TargetKind::Application)),
    );
    registry.register(
        agent
            .services
            .settings
            .third_party_agents
            .iter()
            .map(|n| TargetInfo::third_party(n)),
    );
    // Third-party agents that can run (MCP servers bound as agents, the shell), with when to use
    // them.
    registry.register(
        crate::agents::third_party::agents(&agent.services)
            .into_iter()
            .map(|a| {
                let mut t = TargetInfo::third_party(a.name());
                t.extra
                    .insert("description".into(), Value::String(a.description()));
                t
            }),
    );
    if let Some(uploads) = &agent.services.uploads {
        uploads.start(&screenshot.bytes);
    }
    let mut out = Outputs::new()
        .with(DESKTOP_SCREENSHOT, screenshot)
        .with(TARGET_REGISTRY, registry)
        .with(TOOL_CATALOG, catalog);
    // How long the executor waited for the screen to settle after the previous action.
    if let Some(settle) = shot.settle.or(windows.settle) {
        out.insert(SETTLE, settle);
    }
    Ok(out)
}

/// The launchable applications, and where their arguments may point when the operator's policy declares
/// launch directories (so the model need not learn it from a denial).
fn with_launch_dirs(apps: String, policy: &crate::agents::policy::Policy) -> String {
    if policy.launch_directories.is_empty() {
        return apps;
    }
    format!(
        "{apps}\n(arguments must be absolute paths inside: {})",
        policy.launch_directories.join(", ")
    )
}

/// Builds the HostAgent prompt, asks the model (re-asking on invalid replies) and validates the answer.
#[derive(Debug, Clone, Copy)]
pub struct HostLlmInteraction;

#[async_trait]
impl AgentStrategy for HostLlmInteraction {
    type Agent = HostAgent;
    fn declaration(&self) -> Declaration {
        Declaration::model("host_llm_interaction", HOST_RESPONSE).reads([
            TARGET_REGISTRY.required("the selectable targets"),
            DESKTOP_SCREENSHOT.required("the desktop image"),
            TOOL_CATALOG.required("the functions and launchable applications"),
        ])
    }
    async fn run(&self, agent: &HostAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let fallback = match replay::host(&agent.services, ctx).await? {
            Phase::Decided(out) => return Ok(out),
            Phase::Model(fallback) => fallback,
        };
        let settings = &agent.services.settings;
        let registry = ctx.require(TARGET_REGISTRY)?;
        let (w, h) = settings.prompt_image_max;
        let desktop = downscale_png(ctx.require(DESKTOP_SCREENSHOT)?, w, h)
            .map_err(|e| failed("cannot prepare the desktop screenshot", e))?
            .to_image_data();
        let (blackboard, board_images) = blackboard_prompt(ctx, settings)?;
        let previous: &[Value] = ctx.get(PREVIOUS_SUBTASKS)?.map_or(&[], Vec::as_slice);
        let plan = agent.previous_plan();
        let catalog = ctx.require(TOOL_CATALOG)?;
        let offered = offered_names(catalog, Audience::Host);
        let previous_actions = agent.previous_actions(settings.host_previous_actions);
        let no_progress = match super::progress::judge(&agent.memory, settings) {
            Progress::Fine => String::new(),
            Progress::Warn(w) => w,
            Progress::Fail(reason) => {
                // Asking again would repeat the same failure: the round fails with the reason.
                tracing::warn!(%reason, "HostAgent makes no progress");
                let response = HostResponse {
                    observation: "the same function failed the same way again and again".into(),
                    thought: reason.clone(),
                    comment: reason,
                    status: crate::round::state::HostStatus::Fail,
                    ..HostResponse::default()
                };
                return Ok(Outputs::new()
                    .with(HOST_RESPONSE, response)
                    .with(RESPONSE_TEXT, String::new())
                    .with(LLM_TOTALS, fallback.totals));
            }
        };
        let user_request = ctx.require(pkeys::REQUEST)?;
        // Documents for any application and the owner's earlier tasks, by the request.
        let knowledge = crate::agents::services::retrieve_or_nothing(
            agent.services.knowledge.as_ref(),
            user_request,
            "",
        )
        .await;
        let messages = messages(HostPromptInput {
            request: user_request,
            targets: registry.all(),
            desktop: Some(&desktop),
            previous_subtasks: previous,
            previous_plan: &plan,
            blackboard: &blackboard,
            functions: &function_list(catalog, Audience::Host),
            launchable: &with_launch_dirs(launchable(catalog), &settings.policy),
            previous_actions: &previous_actions,
            blackboard_images: &board_images,
            no_progress: &no_progress,
            knowledge: &knowledge.text,
            reused_plan: &fallback.plan,
        });
        let mut asked = ask_reply(
            agent.services.host_model.as_ref(),
            messages,
            crate::agents::response::host_response_format(),
            settings,
            |m| {
                let r = HostResponse::parse(&m)?;
                if !r.function.is_empty() && !offered.contains(&r.function) {
                    return Err(ReplyProblem::UnknownFunction {
                        function: r.function.clone(),
                        offered: offered.join(", "),
                    });
                }
                if r.function == "select_application_window" {
                    let label = r
                        .arguments
                        .get("id")
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
                    match label {
                        Some(l) if registry.get(&l).is_some() => {}
                        Some(l) => return Err(ReplyProblem::UnknownTarget(l)),
                        None => return Err(ReplyProblem::SelectionWithoutLabel),
                    }
                }
                Ok(r)
            },
        )
        .await
        .map_err(|e| failed("host llm interaction failed", e))?;
        asked.totals.add(fallback.totals);
        Ok(with_knowledge(
            answered(HOST_RESPONSE, asked, fallback.mark),
            knowledge,
        ))
    }
}

/// Runs the decided function: selecting an application window, assigning a third-party agent, or any
/// other allowed function dispatched generically. Held (CONFIRM) and non-acting statuses run nothing.
#[derive(Debug, Clone, Copy)]
pub struct HostActionExecution;

/// Statuses for which the HostAgent runs its function now.
pub fn host_acts(status: &crate::round::state::HostStatus) -> bool {
    status.acts()
}

/// Executes a HostAgent function (also used when a held function is approved).
pub async fn run_host_function(
    dispatcher: &dyn crate::dispatch::CommandDispatcher,
    response: &HostResponse,
    registry: &TargetRegistry,
    settings: &AgentSettings,
) -> Result<(ActionRecord, Option<TargetInfo>), crate::dispatch::DispatchError> {
    let mut target = None;
    let denial = (!response.function.is_empty())
        .then(|| {
            settings
                .policy
                .denial(&response.function, &response.arguments)
        })
        .flatten();
    let result = match response.function.as_str() {
        "" => CommandResult::none(),
        _ if denial.is_some() => denial.unwrap_or_else(CommandResult::none),
        "select_application_window" => {
            let label = response
                .arguments
                .get("id")
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .unwrap_or_default();
            match registry.get(&label) {
                None => CommandResult::failure(format!("there is no target with label {label}")),
                Some(t) if t.kind == TargetKind::ThirdPartyAgent => {
                    target = Some(t.clone());
                    CommandResult::success(
                        json!({"id": t.label, "name": t.name, "type": "third_party_agent"}),
                    )
                }
                Some(t) => {
                    target = Some(t.clone());
                    execute_one(
                        dispatcher,
                        Command::act(
                            "select_application_window",
                            json!({"id": t.id, "name": t.name}),
                        ),
                    )
                    .await?
                }
            }
        }
        "launch_application" => {
            let catalog = dispatcher.catalog().await?;
            match check_launch(&catalog, &response.arguments) {
                Some(denial) => denial,
                None => {
                    let (result, window) = launch_and_wait(dispatcher, response, settings).await?;
                    target = window;
                    result
                }
            }
        }
        other => {
            execute_one(
                dispatcher,
                Command::act(other, Value::Object(response.arguments.clone())),
            )
            .await?
        }
    };
    Ok((
        ActionRecord {
            function: response.function.clone(),
            arguments: response.arguments.clone(),
            status: response.status.to_string(),
            target: target.clone(),
            result,
        },
        target,
    ))
}

#[async_trait]
impl AgentStrategy for HostActionExecution {
    type Agent = HostAgent;
    fn declaration(&self) -> Declaration {
        Declaration::action("host_action_execution")
            .reads([
                HOST_RESPONSE.required("the decided function"),
                TARGET_REGISTRY.required("resolves target labels"),
                DISPATCHER.required("runs the function"),
            ])
            .writes([ACTIONS.provided(), SELECTED_TARGET.provided()])
    }
    async fn run(&self, agent: &HostAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let response = ctx.require(HOST_RESPONSE)?;
        let confirm = response.status == crate::round::state::HostStatus::Confirm;
        let hold = agent.services.settings.hold(
            confirm,
            host_acts(&response.status),
            &[(&response.function, &response.arguments)],
        );
        if !(host_acts(&response.status) || confirm) || hold.is_some() {
            return Ok(Outputs::new().with(ACTIONS, vec![]));
        }
        let dispatcher = ctx.require(DISPATCHER)?.clone();
        let (record, target) = run_host_function(
            dispatcher.as_ref(),
            response,
            ctx.require(TARGET_REGISTRY)?,
            &agent.services.settings,
        )
        .await
        .map_err(|e| failed("host action failed", e))?;
        let mut out = Outputs::new();
        if let Some(t) = target {
            out.insert(SELECTED_TARGET, t);
        }
        if record.result.status == crate::dispatch::ResultStatus::Failure {
            tracing::warn!(function = %record.function, error = %record.result.error, "host action failed");
        }
        out.insert(ACTIONS, vec![record]);
        Ok(out)
    }
}

/// Records the step: a memory item (response + step data) and the blackboard trajectory of the
/// configured history keys. The agent applies both after the run.
#[derive(Debug, Clone, Copy)]
pub struct HostMemoryUpdate;

#[async_trait]
impl AgentStrategy for HostMemoryUpdate {
    type Agent = HostAgent;
    fn declaration(&self) -> Declaration {
        Declaration::memory("host_memory_update", HOST_RESPONSE)
            .reads([SELECTED_TARGET.optional("the selected application")])
    }
    async fn run(&self, agent: &HostAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let response = ctx.require(HOST_RESPONSE)?;
        let settings = &agent.services.settings;
        let (mut item, actions) = memory_item(ctx, response, &agent.memory, &agent.name, settings)?;
        item.set("subtask", response.current_subtask.clone());
        if let Some(a) = actions.and_then(|a| a.first()) {
            item.set("function_call", a.function.clone());
            item.set("results", a.result.result.to_string());
            if let Some(key) = super::progress::failure_key(a) {
                item.set(super::progress::FAILURE_KEY, key);
            }
        }
        if let Some(t) = ctx.get(SELECTED_TARGET)? {
            item.set("application", t.app_root());
        }
        Ok(remembered(item, settings))
    }
}
