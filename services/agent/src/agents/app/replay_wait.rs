//! The AppAgent's wait for a replayed step's targets (issue 31, [`crate::replay::wait`]): the last member
//! of its data collection. On a replayed or reused step whose recorded targets are not all listed (or
//! one it acts on is disabled), it watches the window and observes it again (screenshot, controls,
//! annotation) after each change until they are there, within `--replay-wait-ms`; the last observation
//! is the step's, so it decides on and records what is on the screen now.

use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::AppAgent;
use super::strategies::{AppControlInfo, AppScreenshotCapture, capture, control_info};
use crate::agents::keys::*;
use crate::agents::strategy::{AgentStrategy, Declaration};
use crate::dispatch::CommandDispatcher;
use crate::processor::{Outputs, ProcessingContext, StrategyError, StrategyResult, keys as pkeys};
use crate::replay::phase::awaited;
use crate::replay::plan::StepAgent;
use crate::replay::wait::{CHANGE_TOOL, REPLAY_WAITED, watch};

/// Waits for a replayed step's targets, observing the window again after each change.
#[derive(Debug, Clone, Copy)]
pub struct AppReplayWait;

#[async_trait]
impl AgentStrategy for AppReplayWait {
    type Agent = AppAgent;
    /// Writes how long it waited and a whole observation ([`observe`]): what the capture and the
    /// control info write.
    fn declaration(&self) -> Declaration {
        let observation = [
            AppScreenshotCapture.declaration(),
            AppControlInfo.declaration(),
        ];
        Declaration::data("app_replay_wait")
            .reads([
                DISPATCHER.required("watches and lists the window"),
                CONTROLS.required("the step's first listing"),
                TOOL_CATALOG.required("whether the executor can watch for changes"),
                pkeys::SESSION_STEP.optional("the replayed step"),
            ])
            .writes([REPLAY_WAITED.provided()])
            .writes(observation.into_iter().flat_map(|d| d.writes))
    }
    async fn run(&self, agent: &AppAgent, ctx: &mut ProcessingContext) -> StrategyResult {
        let services = &agent.services;
        if services.replay.is_none() && services.reuse.is_none() {
            return Ok(Outputs::new());
        }
        let Some(n) = ctx.get(pkeys::SESSION_STEP)?.copied() else {
            return Ok(Outputs::new());
        };
        let Some(wanted) = awaited(services, n, StepAgent::App).await else {
            return Ok(Outputs::new());
        };
        if wanted.targets.is_empty() {
            return Ok(Outputs::new());
        }
        let dispatcher = ctx.require(DISPATCHER)?.clone();
        let can_watch = ctx.require(TOOL_CATALOG)?.tool(CHANGE_TOOL).is_some();
        // Each look is a whole observation; the last one becomes the step's.
        let last: Mutex<Option<Outputs>> = Mutex::new(None);
        let (last_ref, exec) = (&last, dispatcher.as_ref());
        let waited = watch(
            exec,
            &wanted,
            ctx.require(CONTROLS)?,
            services.settings.replay_wait,
            can_watch,
            || async move {
                let out = observe(agent, exec).await.map_err(|e| e.to_string())?;
                let listed = out
                    .get(CONTROLS)
                    .ok()
                    .flatten()
                    .cloned()
                    .unwrap_or_default();
                *last_ref.lock().unwrap_or_else(PoisonError::into_inner) = Some(out);
                Ok(listed)
            },
        )
        .await;
        let mut out = last
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or_default();
        out.insert(REPLAY_WAITED, waited);
        Ok(out)
    }
}

/// A whole observation of the window: [`capture`] then [`control_info`], as the data collection's first
/// two members do.
async fn observe(
    agent: &AppAgent,
    dispatcher: &dyn CommandDispatcher,
) -> Result<Outputs, StrategyError> {
    let mut out = capture(agent, dispatcher).await?;
    let clean = out
        .get(CLEAN_SCREENSHOT)?
        .cloned()
        .ok_or_else(|| StrategyError::msg("capture_window_screenshot returned no image"))?;
    let sha = out.get(CLEAN_SHA256)?.cloned();
    let window = out.get(WINDOW_INFO)?.and_then(|w| w.rect);
    let listed = out.get(LISTED_CONTROLS)?.cloned();
    out.merge(control_info(agent, dispatcher, (&clean, sha), listed, window).await?);
    Ok(out)
}
