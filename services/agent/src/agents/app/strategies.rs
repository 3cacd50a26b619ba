//! AppAgent strategies (seed 001).

use crate::config::GroundingMode;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use super::AppAgent;
pub use super::memory_update::AppMemoryUpdate;
use super::progress::{Progress, judge, screen_hash};
use crate::agents::action::{Precheck, run_actions};
use crate::agents::app::prompt::{AppPromptInput, messages, with_repeat_counts};
use crate::agents::common::{
    answered, ask_reply, blackboard_prompt, failed, offered_names, tool_catalog, with_knowledge,
};
use crate::agents::keys::*;
use crate::agents::response::{AppResponse, ReplyProblem};
use crate::agents::strategy::{AgentStrategy, Declaration};
use crate::agents::target::{ControlSource, TargetInfo, TargetKind};
use crate::agents::tools::{Audience, function_list};
use crate::dispatch::{Command, CommandResult};
use crate::llm::ImageData;
use crate::processor::{Outputs, ProcessingContext, StrategyError, StrategyResult, keys as pkeys};
use crate::replay::phase::{self as replay, Phase};
use crate::vision::image_ops::{crop_rect, fitted_size};
use crate::vision::{
    PromptImageSpec, crop_control, crop_pixels, derived, downscale_png, merge_controls,
    prompt_images,
};

use crate::vision::annotate::control_marks as marks;

/// Whether this window is grounded visually: `always`, or `auto` when its accessible controls are few or
/// unnamed (fewer named, enabled ones than `grounding_min_named`).
fn wants_grounding(settings: &crate::agents::settings::AgentSettings, api: &[TargetInfo]) -> bool {
    match settings.grounding_mode {
        GroundingMode::Off => false,
        GroundingMode::Always => true,
        GroundingMode::Auto => {
            api.iter()
                .filter(|c| c.enabled && !c.name.trim().is_empty())
                .count()
                < settings.grounding_min_named
        }
    }
}

/// Captures the application window (and optionally the desktop and UI tree) and reads its info.
#[derive(Debug, Clone, Copy)]
pub struct AppScreenshotCapture;

#[async_trait]
impl AgentStrategy for AppScreenshotCapture {
    type Agent = AppAgent;
    fn declaration(&self) -> Declaration {
        Declaration::data("app_screenshot_capture")
            .reads([DISPATCHER.required("runs the capture commands")])
            .writes([
                CLEAN_SCREENSHOT.provided(),
                CLEAN_SHA256.provided(),
                WINDOW_INFO.provided(),
                TOOL_CATALOG.provided(),
                SETTLE.provided(),
                LISTED_CONTROLS.provided(),
            ])
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        capture(agent, ctx.require(DISPATCHER)?.as_ref()).await
    }
}

/// [`AppScreenshotCapture`]'s work: the window's screenshot, info and controls in one batch (one executor
/// call for the whole observation), and the tool catalog.
pub(crate) async fn capture(
    agent: &AppAgent,
    dispatcher: &dyn crate::dispatch::CommandDispatcher,
) -> Result<Outputs, StrategyError> {
    let commands = vec![
        Command::observe("capture_window_screenshot", json!({})),
        Command::observe("get_app_window_info", json!({})),
        // Listed last: a failed capture skips it, and its own failure is the control listing's to report.
        Command::observe("get_app_window_controls_target_info", json!({})),
    ];
    let catalog = tool_catalog(dispatcher).await?;
    // The application's own API (MCP servers bound to it) beside the GUI tools.
    let catalog = match &agent.services.mcp {
        Some(hub) => crate::agents::tools::with_api_tools(catalog, hub, &agent.window).await,
        None => catalog,
    };
    let mut results = dispatcher
        .execute(commands)
        .await
        .map_err(|e| failed("screenshot capture failed", e))?;
    let listed = (results.len() > 2).then(|| results.remove(2));
    if let Some(bad) = results.iter().find(|r| !r.is_success()) {
        return Err(StrategyError::msg(format!(
            "screenshot capture failed: {}",
            bad.error
        )));
    }
    let mut out = Outputs::new().with(TOOL_CATALOG, catalog);
    // The executor waits for the screen to settle before the first observation after an action and
    // says how long: recorded with the step.
    if let Some(settle) = results.iter().find_map(|r| r.settle) {
        out.insert(SETTLE, settle);
    }
    let clean = results
        .first()
        .and_then(|r| r.images.first())
        .cloned()
        .ok_or_else(|| StrategyError::msg("capture_window_screenshot returned no image"))?;
    let sha = crate::store::blobs::start(agent.services.uploads.as_deref(), &clean.bytes);
    out.insert(CLEAN_SHA256, sha);
    out.insert(CLEAN_SCREENSHOT, clean);
    let window = results
        .get(1)
        .and_then(|r| TargetInfo::from_json(&r.result, TargetKind::Application))
        .unwrap_or_else(|| agent.window.clone());
    out.insert(WINDOW_INFO, window);
    if let Some(listed) = listed {
        out.insert(LISTED_CONTROLS, listed);
    }
    Ok(out)
}

/// Lists the window's controls, merges the grounding source by IoU, labels them 1..N and draws the
/// annotated screenshot.
#[derive(Debug, Clone, Copy)]
pub struct AppControlInfo;

#[async_trait]
impl AgentStrategy for AppControlInfo {
    type Agent = AppAgent;
    fn declaration(&self) -> Declaration {
        Declaration::data("app_control_info")
            .reads([
                CLEAN_SCREENSHOT.required("the image to annotate"),
                CLEAN_SHA256.optional("names the annotation's source"),
                WINDOW_INFO.required("the window the controls belong to"),
                LISTED_CONTROLS.optional("the controls listed in the capture's batch"),
                DISPATCHER.required("lists the controls when the capture did not"),
            ])
            .writes([
                CONTROLS.provided(),
                ANNOTATION.provided(),
                CLEAN_PIXELS.provided(),
                WARNINGS.provided(),
            ])
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let sha = ctx.get(CLEAN_SHA256)?.cloned();
        let listed = ctx.get(LISTED_CONTROLS)?.cloned();
        control_info(
            agent,
            ctx.require(DISPATCHER)?.as_ref(),
            (ctx.require(CLEAN_SCREENSHOT)?, sha),
            listed,
            ctx.require(WINDOW_INFO)?.rect,
        )
        .await
    }
}

/// [`AppControlInfo`]'s work on the screenshot `clean` (whose blob is `sha`) of the window at `window`,
/// with the controls the capture listed (`listed`) or, without them, asking the executor here.
pub(crate) async fn control_info(
    agent: &AppAgent,
    dispatcher: &dyn crate::dispatch::CommandDispatcher,
    (clean, sha): (&crate::vision::Screenshot, Option<String>),
    listed: Option<CommandResult>,
    window: Option<crate::agents::target::Rect>,
) -> Result<Outputs, StrategyError> {
    // The screenshot is decoded on a blocking thread while the executor lists the controls or
    // grounding runs.
    let to_decode = clean.clone();
    let decoding = tokio::task::spawn_blocking(move || to_decode.decode());
    let result = match listed {
        Some(listed) => listed,
        None => crate::dispatch::execute_one(
            dispatcher,
            Command::observe("get_app_window_controls_target_info", json!({})),
        )
        .await
        .map_err(|e| failed("control listing failed", e))?,
    };
    if !result.is_success() {
        return Err(StrategyError::msg(format!(
            "control listing failed: {}",
            result.error
        )));
    }
    let api: Vec<TargetInfo> = result
        .result
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| TargetInfo::from_json(v, TargetKind::Control))
        .collect();
    let settings = &agent.services.settings;
    let mut warnings = Vec::new();
    let grounded = match &agent.services.grounding {
        Some(g) if wants_grounding(settings, &api) => match g.detect(clean).await {
            Ok(mut list) => {
                for c in &mut list {
                    c.source = ControlSource::Grounding;
                    c.kind = TargetKind::Control;
                }
                list
            }
            Err(e) => {
                // Degrade, don't die: the step goes on with what the accessibility API lists, and
                // the task's events say why the window was not grounded.
                tracing::warn!(error = %e, "grounding source failed; using accessibility controls only");
                warnings.push(format!(
                    "visual grounding failed, so this step used accessibility controls only: {e}"
                ));
                vec![]
            }
        },
        _ => vec![],
    };
    let mut controls = merge_controls(api, grounded, agent.services.settings.iou_threshold);
    for (i, c) in controls.iter_mut().enumerate() {
        c.label = (i + 1).to_string();
        if let (ControlSource::Grounding, Some(r), Some(w)) = (c.source, c.rect, window)
            && w.width() > 0
            && w.height() > 0
        {
            let (x, y) = r.center();
            let fx = (f64::from(x - w.left) / f64::from(w.width())).clamp(0.0, 1.0);
            let fy = (f64::from(y - w.top) / f64::from(w.height())).clamp(0.0, 1.0);
            c.extra.insert("click_fraction".into(), json!([fx, fy]));
        }
    }
    let pixels = decoding
        .await
        .map_err(|e| failed("the screenshot decoder stopped", e))?
        .map_err(|e| failed("cannot decode the screenshot", e))?;
    let marks = marks(&controls, clean);
    // The annotated image is drawn only for the prompt (`vision::prompt`). Not stored: the step records how to draw the image the model is sent (at the prompt's size)
    // and the API draws it again on read (`vision::derived`).
    let s = &agent.services.settings;
    let size = if s.include_annotated {
        let (w, h) = s.prompt_image_max;
        fitted_size(clean.width, clean.height, w, h).unwrap_or(pixels.dimensions())
    } else {
        pixels.dimensions()
    };
    let sha = sha.unwrap_or_else(|| crate::store::blobs::sha256_hex(&clean.bytes));
    let marker = &agent.services.marker;
    let annotation = derived::annotation(&sha, clean, &pixels, size, &marks, marker);
    drop(marks);
    crate::store::blobs::start(agent.services.uploads.as_deref(), &annotation.recipe);
    Ok(Outputs::new()
        .with(CONTROLS, controls)
        .with(ANNOTATION, annotation)
        .with(CLEAN_PIXELS, Arc::new(pixels))
        .with(WARNINGS, warnings))
}

/// Builds the AppAgent prompt (images, control list, subtask, history, blackboard) and asks the model.
#[derive(Debug, Clone, Copy)]
pub struct AppLlmInteraction;

#[async_trait]
impl AgentStrategy for AppLlmInteraction {
    type Agent = AppAgent;
    fn declaration(&self) -> Declaration {
        Declaration::model("app_llm_interaction", APP_RESPONSE)
            .reads([
                CONTROLS.required("the control list"),
                CLEAN_SCREENSHOT.required("the clean screenshot"),
                SUBTASK.required("what to do"),
                HOST_MESSAGE.optional("advice from the HostAgent"),
                CLEAN_PIXELS.optional("saves decoding the clean screenshot again"),
                TOOL_CATALOG.required("the functions"),
            ])
            .writes([
                SCREEN_HASH.provided(),
                crate::replay::REPLAY_STAYS.provided(),
            ])
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let s = &agent.services.settings;
        let screen = screen_hash(ctx.require(CLEAN_SCREENSHOT)?);
        let fallback = match replay::app(&agent.services, ctx, agent.memory.last()).await? {
            Phase::Decided(out) => return Ok(out.with(SCREEN_HASH, screen)),
            Phase::Model(fallback) => fallback,
        };
        let no_progress = match judge(&agent.memory, &screen, s) {
            Progress::Fine => String::new(),
            Progress::Warn(w) => w,
            Progress::Fail(reason) => {
                // Asking again would repeat the same action: fail back to the HostAgent to re-plan.
                tracing::warn!(%reason, "AppAgent makes no progress");
                let response = AppResponse {
                    observation: "the screen did not change".into(),
                    thought: reason.clone(),
                    comment: reason.clone(),
                    status: "FAIL".into(),
                    result: reason,
                    ..AppResponse::default()
                };
                return Ok(Outputs::new()
                    .with(APP_RESPONSE, response)
                    .with(RESPONSE_TEXT, String::new())
                    .with(LLM_TOTALS, fallback.totals)
                    .with(SCREEN_HASH, screen));
            }
        };
        let (w, h) = s.prompt_image_max;
        let controls = ctx.require(CONTROLS)?;
        let mut images: Vec<(&'static str, ImageData)> = Vec::new();
        if s.include_last_control
            && let Some(last) = &agent.last_control
        {
            let small = downscale_png(last, w, h)
                .map_err(|e| failed("cannot prepare the selected control image", e))?;
            images.push((
                "Control selected in the previous step",
                small.to_image_data(),
            ));
        }
        // One resize for both screenshots; the marks are drawn on the small copy (see `vision::prompt`).
        let clean = ctx.require(CLEAN_SCREENSHOT)?;
        let prompt = prompt_images(
            clean,
            ctx.get(CLEAN_PIXELS)?.map(|p| p.as_ref()),
            &marks(controls, clean),
            &agent.services.marker,
            PromptImageSpec {
                max: (w, h),
                clean: s.include_clean,
                annotated: s.include_annotated,
            },
        )
        .map_err(|e| failed("cannot prepare the prompt screenshots", e))?;
        if let Some(c) = prompt.clean {
            images.push(("Clean screenshot", c.to_image_data()));
        }
        if let Some(a) = prompt.annotated {
            images.push(("Annotated screenshot", a.to_image_data()));
        }
        let (blackboard, board_images) = blackboard_prompt(ctx, s)?;
        let catalog = ctx.require(TOOL_CATALOG)?;
        let offered = offered_names(catalog, Audience::App);
        let subtask = ctx.require(SUBTASK)?;
        let knowledge = crate::agents::services::retrieve_or_nothing(
            agent.services.knowledge.as_ref(),
            subtask,
            &agent.app_root,
        )
        .await;
        let previous_actions = with_repeat_counts(&agent.previous_actions());
        let plan = agent.previous_plan();
        let messages = messages(AppPromptInput {
            request: ctx.require(pkeys::REQUEST)?,
            subtask,
            host_message: ctx.get(HOST_MESSAGE)?.map_or("", String::as_str),
            application: &agent.app_root,
            controls,
            images: &images,
            previous_actions: &previous_actions,
            plan: &plan,
            previous_subtasks: ctx.get(PREVIOUS_SUBTASKS)?.map_or(&[], Vec::as_slice),
            blackboard: &blackboard,
            knowledge: &knowledge.text,
            functions: &function_list(catalog, Audience::App),
            blackboard_images: &board_images,
            no_progress: &no_progress,
            reused_plan: &fallback.plan,
        });
        let mut asked = ask_reply(
            agent.services.app_model.as_ref(),
            messages,
            crate::agents::response::app_response_format(),
            s,
            |m| {
                let r = AppResponse::parse(&m)?;
                for a in &r.actions {
                    if !offered.contains(&a.function) {
                        return Err(ReplyProblem::UnknownFunction {
                            function: a.function.clone(),
                            offered: offered.join(", "),
                        });
                    }
                    if let Some(id) = a.arguments.get("id") {
                        let label = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
                        if !controls.iter().any(|c| c.label == label) {
                            return Err(ReplyProblem::UnknownControl {
                                function: a.function.clone(),
                                label,
                            });
                        }
                    }
                }
                Ok(r)
            },
        )
        .await
        .map_err(|e| failed("app llm interaction failed", e))?;
        asked.totals.add(fallback.totals);
        Ok(with_knowledge(
            answered(APP_RESPONSE, asked, fallback.mark).with(SCREEN_HASH, screen),
            knowledge,
        ))
    }
}

/// Whether the AppAgent runs its actions now for this status (CONFIRM holds them; SCREENSHOT, PENDING,
/// FAIL and ERROR do not act).
pub fn app_acts(status: &crate::round::state::AppStatus) -> bool {
    status.acts()
}

/// The response's actions as (function, arguments) pairs, as the consent policy judges them.
pub fn batch(response: &AppResponse) -> Vec<(&str, &serde_json::Map<String, serde_json::Value>)> {
    response
        .actions
        .iter()
        .map(|a| (a.function.as_str(), &a.arguments))
        .collect()
}

/// Runs the decided action(s) as one batch (see [`run_actions`]).
#[derive(Debug, Clone, Copy)]
pub struct AppActionExecution;

#[async_trait]
impl AgentStrategy for AppActionExecution {
    type Agent = AppAgent;
    fn declaration(&self) -> Declaration {
        Declaration::action("app_action_execution")
            .reads([
                APP_RESPONSE.required("the decided actions"),
                CONTROLS.required("resolves control labels"),
                CLEAN_SCREENSHOT.required("crops the selected control"),
                CLEAN_SHA256.optional("names the crop's source"),
                CLEAN_PIXELS.optional("saves decoding the clean screenshot again"),
                DISPATCHER.required("runs the actions"),
            ])
            .writes([
                ACTIONS.provided(),
                SELECTED_CONTROL_SCREENSHOT.provided(),
                SELECTED_CONTROL_RECIPE.provided(),
            ])
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let response = ctx.require(APP_RESPONSE)?;
        let s = &agent.services.settings;
        let confirm = response.status == crate::round::state::AppStatus::Confirm;
        let held = s.hold(confirm, app_acts(&response.status), &batch(response));
        let acts = app_acts(&response.status) || (confirm && s.confirm_never);
        if held.is_some() || !acts || response.actions.is_empty() {
            return Ok(Outputs::new().with(ACTIONS, vec![]));
        }
        let controls = ctx.require(CONTROLS)?;
        let records = run_actions(
            ctx.require(DISPATCHER)?.as_ref(),
            &response.actions,
            controls,
            if s.precheck_controls {
                Precheck::AfterFirst
            } else {
                Precheck::Off
            },
            &s.policy,
        )
        .await
        .map_err(|e| failed("action execution failed", e))?;
        let mut out = Outputs::new();
        let selected = records
            .iter()
            .find_map(|r| r.target.as_ref().and_then(|t| t.rect));
        // The crop only feeds the next prompt; a control outside the screenshot just has none. It is
        // recorded as a recipe (the rectangle of the clean screenshot) and cropped again on read.
        let clean = ctx.require(CLEAN_SCREENSHOT)?;
        let pixels = ctx.get(CLEAN_PIXELS)?;
        if let Some(rect) = selected
            && let Ok(crop) = match pixels {
                Some(p) => crop_pixels(p, clean, rect),
                None => crop_control(clean, rect),
            }
        {
            let size = pixels.map_or((clean.width, clean.height), |p| p.dimensions());
            if let Ok(clip) = crop_rect(size, clean, rect) {
                let sha = match ctx.get(CLEAN_SHA256)? {
                    Some(sha) => sha.clone(),
                    None => crate::store::blobs::sha256_hex(&clean.bytes),
                };
                let recipe = derived::crop(&sha, size, clip, &crop);
                crate::store::blobs::start(agent.services.uploads.as_deref(), &recipe.recipe);
                out.insert(SELECTED_CONTROL_RECIPE, recipe);
            }
            out.insert(SELECTED_CONTROL_SCREENSHOT, crop);
        }
        out.insert(ACTIONS, records);
        Ok(out)
    }
}
