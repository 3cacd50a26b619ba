//! The LLM-interaction phase of a replay: the strategies ask [`app`] / [`host`] first, and call the model
//! only when the answer is [`Phase::Model`].

use serde_json::Value;

use super::REPLAY_MARK;
use super::decide::{self, Decision};
use super::plan::ReplaySpec;
use crate::agents::keys::{
    APP_RESPONSE, CONTROLS, HOST_RESPONSE, LLM_TOTALS, RESPONSE_TEXT, TARGET_REGISTRY,
};
use crate::memory::MemoryItem;
use crate::processor::{Outputs, ProcessingContext, StrategyError, keys as pkeys};

/// What decides this step's reply.
#[derive(Debug)]
pub enum Phase {
    /// The recording did: the phase's outputs (0 model calls, 0 cost) with the step's mark.
    Decided(Outputs),
    /// The model does; the step's mark when it is a replayed step that fell back.
    Model(Option<Value>),
}

fn step(ctx: &ProcessingContext) -> Result<u64, StrategyError> {
    Ok(*ctx.require(pkeys::SESSION_STEP)?)
}

fn mismatch(e: decide::Mismatch) -> StrategyError {
    StrategyError::msg(e.to_string())
}

/// The AppAgent's phase for this step; `previous` is the agent's memory of its step before.
pub fn app(
    spec: Option<&ReplaySpec>,
    ctx: &ProcessingContext,
    previous: Option<&MemoryItem>,
) -> Result<Phase, StrategyError> {
    let Some(spec) = spec else {
        return Ok(Phase::Model(None));
    };
    Ok(
        match decide::app_reply(spec, step(ctx)?, ctx.require(CONTROLS)?, previous)
            .map_err(mismatch)?
        {
            Decision::Replayed(reply, mark) => Phase::Decided(
                Outputs::new()
                    .with(APP_RESPONSE, reply)
                    .with(RESPONSE_TEXT, String::new())
                    .with(LLM_TOTALS, Default::default())
                    .with(REPLAY_MARK, mark),
            ),
            Decision::Model(mark) => Phase::Model(Some(mark)),
        },
    )
}

/// The HostAgent's phase for this step.
pub fn host(spec: Option<&ReplaySpec>, ctx: &ProcessingContext) -> Result<Phase, StrategyError> {
    let Some(spec) = spec else {
        return Ok(Phase::Model(None));
    };
    let targets = ctx.require(TARGET_REGISTRY)?.all();
    Ok(
        match decide::host_reply(spec, step(ctx)?, targets).map_err(mismatch)? {
            Decision::Replayed(reply, mark) => Phase::Decided(
                Outputs::new()
                    .with(HOST_RESPONSE, reply)
                    .with(RESPONSE_TEXT, String::new())
                    .with(LLM_TOTALS, Default::default())
                    .with(REPLAY_MARK, mark),
            ),
            Decision::Model(mark) => Phase::Model(Some(mark)),
        },
    )
}
