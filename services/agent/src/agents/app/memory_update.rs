//! The AppAgent's memory update (seed 001 "MEMORY_UPDATE"): the memory item carries the response, the
//! seed's additional fields (request, subtask, app_root, function_call, action, action_success,
//! action_type, action_representation, results, cost, step numbers) and what no-progress detection
//! compares (the screen seen and the actions run); its history keys become the blackboard trajectory.

use async_trait::async_trait;
use serde_json::json;

use super::AppAgent;
use super::progress::{ACTION_KEY, SCREEN_KEY};
use crate::agents::action::ActionRecord;
use crate::agents::common::{memory_item, remembered};
use crate::agents::keys::*;
use crate::agents::strategy::{AgentStrategy, Declaration};
use crate::dispatch::{ResultStatus, ToolType};
use crate::memory::BlackboardImage;
use crate::processor::{ProcessingContext, StrategyResult, keys as pkeys};

/// Records the step: memory item, trajectory, and the screenshot to save when the model asked.
#[derive(Debug, Clone, Copy)]
pub struct AppMemoryUpdate;

#[async_trait]
impl AgentStrategy for AppMemoryUpdate {
    type Agent = AppAgent;
    fn declaration(&self) -> Declaration {
        Declaration::memory("app_memory_update", APP_RESPONSE)
            .reads([
                SUBTASK.optional("the subtask"),
                CLEAN_SCREENSHOT.optional("saved when asked"),
                pkeys::REQUEST.optional("the user's request"),
                TOOL_CATALOG.optional("each action's tool type"),
                SCREEN_HASH.optional("the screen the step saw"),
            ])
            .writes([SAVED_IMAGE.provided()])
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let response = ctx.require(APP_RESPONSE)?;
        let step = *ctx.require(pkeys::SESSION_STEP)?;
        let settings = &agent.services.settings;
        let (mut item, actions) = memory_item(ctx, response, &agent.memory, &agent.name, settings)?;
        item.set("application", agent.app_root.clone())
            .set("app_root", agent.app_root.clone())
            .set(
                "request",
                ctx.get(pkeys::REQUEST)?.cloned().unwrap_or_default(),
            )
            .set("subtask", ctx.get(SUBTASK)?.cloned().unwrap_or_default());
        if let Some(screen) = ctx.get(SCREEN_HASH)? {
            item.set(SCREEN_KEY, screen.clone());
        }
        if let Some(actions) = actions {
            item.set(
                "action_success",
                actions
                    .iter()
                    .filter(|a| a.result.status == ResultStatus::Success)
                    .map(ActionRecord::to_json)
                    .collect::<Vec<_>>(),
            );
            item.set(
                "function_call",
                actions
                    .iter()
                    .map(|a| a.function.clone())
                    .collect::<Vec<_>>(),
            );
            let catalog = ctx.get(TOOL_CATALOG)?;
            item.set(
                "action_type",
                actions
                    .iter()
                    .map(
                        |a| match catalog.and_then(|c| c.tool(&a.function)).map(|t| t.kind) {
                            Some(ToolType::DataCollection) => "data_collection",
                            Some(ToolType::Action) => "action",
                            None => "unknown",
                        },
                    )
                    .collect::<Vec<_>>(),
            );
            let chars = settings.action_error_chars;
            // The seed's `results`: each action's outcome, bounded error and result.
            item.set(
                "results",
                actions
                    .iter()
                    .map(|a| {
                        json!({
                            "function": a.function,
                            "outcome": a.outcome().as_str(),
                            "error": crate::agents::text::truncate(&a.result.error, chars),
                            "result": a.result.result,
                        })
                    })
                    .collect::<Vec<_>>(),
            );
            if !actions.is_empty() {
                item.set(
                    ACTION_KEY,
                    actions
                        .iter()
                        .map(ActionRecord::action_text)
                        .collect::<Vec<_>>()
                        .join("; "),
                );
            }
        }
        let mut out = remembered(item, settings);
        if response.save_screenshot.save
            && let Some(shot) = ctx.get(CLEAN_SCREENSHOT)?
        {
            let metadata = json!({
                "screenshot application": agent.app_root,
                "saving reason": response.save_screenshot.reason,
                "step": step,
            });
            out.insert(
                SAVED_IMAGE,
                BlackboardImage {
                    metadata: metadata.as_object().cloned().unwrap_or_default(),
                    artifact_id: String::new(),
                    screenshot: Some(shot.clone()),
                },
            );
        }
        Ok(out)
    }
}
