//! The AppAgent's memory update (seed 001 "MEMORY_UPDATE"): the memory item carries the response, the
//! seed's additional fields (request, subtask, app_root, function_call, action, action_success,
//! action_type, action_representation, results, cost, step numbers) and what no-progress detection
//! compares (the screen seen and the actions run); its history keys become the blackboard trajectory.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::AppAgent;
use super::progress::{ACTION_KEY, SCREEN_KEY};
use crate::agents::action::ActionRecord;
use crate::agents::keys::*;
use crate::dispatch::{ResultStatus, ToolType};
use crate::memory::{BlackboardImage, MemoryItem};
use crate::processor::{
    Dependency, Outputs, ProcessingContext, Provided, Strategy, StrategyError, keys as pkeys,
};

/// Records the step: memory item, trajectory, and the screenshot to save when the model asked.
#[derive(Debug, Clone, Copy)]
pub struct AppMemoryUpdate;

#[async_trait]
impl Strategy<AppAgent> for AppMemoryUpdate {
    fn name(&self) -> &str {
        "app_memory_update"
    }
    fn fail_fast(&self) -> bool {
        false
    }
    fn dependencies(&self) -> Vec<Dependency> {
        vec![
            pkeys::SESSION_STEP.required("numbers the memory item"),
            pkeys::ROUND.optional("the round the item belongs to"),
            pkeys::ROUND_STEP.optional("the step's number within its round"),
            APP_RESPONSE.required("the step's decision"),
            ACTIONS.optional("what was executed"),
            SUBTASK.optional("the subtask"),
            LLM_TOTALS.optional("the step's cost"),
            CLEAN_SCREENSHOT.optional("saved when asked"),
            pkeys::REQUEST.optional("the user's request"),
            TOOL_CATALOG.optional("each action's tool type"),
            SCREEN_HASH.optional("the screen the step saw"),
            SETTLE.optional("the wait for a settled screen"),
        ]
    }
    fn provides(&self) -> Vec<Provided> {
        vec![
            MEMORY_ITEM.provided(),
            TRAJECTORY.provided(),
            SAVED_IMAGE.provided(),
        ]
    }
    async fn execute(
        &self,
        agent: &AppAgent,
        ctx: &mut ProcessingContext,
    ) -> Result<Outputs, StrategyError> {
        let response = ctx.require(APP_RESPONSE)?;
        let step = *ctx.require(pkeys::SESSION_STEP)?;
        let mut item = MemoryItem::new();
        if let Ok(Value::Object(m)) = serde_json::to_value(response) {
            item.extend(&m);
        }
        item.set("session_step", step)
            .set("step", step)
            .set("round_num", ctx.get(pkeys::ROUND)?.copied().unwrap_or(0))
            .set(
                "round_step",
                ctx.get(pkeys::ROUND_STEP)?.copied().unwrap_or(0),
            )
            .set("agent_step", agent.memory.len() as u64 + 1)
            .set("agent_name", agent.name.clone())
            .set("application", agent.app_root.clone())
            .set("app_root", agent.app_root.clone())
            .set(
                "request",
                ctx.get(pkeys::REQUEST)?.cloned().unwrap_or_default(),
            )
            .set("subtask", ctx.get(SUBTASK)?.cloned().unwrap_or_default());
        if let Some(settle) = ctx.get(SETTLE)? {
            item.set("settle", crate::agents::action::settle_json(*settle));
        }
        if let Some(screen) = ctx.get(SCREEN_HASH)? {
            item.set(SCREEN_KEY, screen.clone());
        }
        if let Some(actions) = ctx.get(ACTIONS)? {
            item.set(
                "action",
                actions
                    .iter()
                    .map(ActionRecord::to_json)
                    .collect::<Vec<_>>(),
            );
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
            let chars = agent.services.settings.action_error_chars;
            item.set(
                "action_representation",
                actions
                    .iter()
                    .map(|a| a.representation_with(chars))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
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
        if let Some(t) = ctx.get(LLM_TOTALS)? {
            item.set("cost", t.cost);
        }
        let trajectory = item.select(&agent.services.settings.history_keys);
        let mut out = Outputs::new()
            .with(MEMORY_ITEM, item)
            .with(TRAJECTORY, trajectory);
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
