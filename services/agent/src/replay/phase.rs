//! The LLM-interaction phase of a replay or a reuse: the strategies ask [`app`] / [`host`] first, and call
//! the model only when the answer is [`Phase::Model`].

use serde_json::Value;

use super::decide::{self, Decision};
use super::plan::{ReplaySpec, StepAgent};
use super::reuse::{Filled, Reuse};
use super::wait::{self, Awaited, REPLAY_WAITED};
use super::{REPLAY_MARK, REPLAY_STAYS};
use crate::agents::keys::{
    APP_RESPONSE, CONTROLS, HOST_RESPONSE, LLM_TOTALS, RESPONSE_TEXT, TARGET_REGISTRY,
};
use crate::agents::response::AppResponse;
use crate::agents::services::AgentServices;
use crate::llm::Totals;
use crate::memory::MemoryItem;
use crate::processor::{Outputs, ProcessingContext, StrategyError, keys as pkeys};

/// What the model is given when it decides a step of a replay or a reuse.
#[derive(Debug, Default)]
pub struct Fallback {
    /// The step's mark when it is a replayed or reused step that fell back.
    pub mark: Option<Value>,
    /// A reused plan's steps from this one on, for the prompt ("" when none).
    pub plan: String,
    /// Calls already spent for this step (the reuse's fill call, counted with the first step).
    pub totals: Totals,
}

/// What decides this step's reply.
#[derive(Debug)]
pub enum Phase {
    /// The recording did: the phase's outputs (no model call besides a reuse's fill) with the step's mark.
    Decided(Outputs),
    /// The model does.
    Model(Fallback),
}

fn step(ctx: &ProcessingContext) -> Result<u64, StrategyError> {
    Ok(*ctx.require(pkeys::SESSION_STEP)?)
}

fn mismatch(e: decide::Mismatch) -> StrategyError {
    StrategyError::msg(e.to_string())
}

/// The outputs of a step its recording decided: the reply, no model text, the calls spent (a reuse's
/// fill) and the step's mark.
fn outputs<T: Send + Sync + 'static>(
    key: crate::processor::Key<T>,
    reply: T,
    mark: Value,
    totals: Totals,
) -> Outputs {
    Outputs::new()
        .with(key, reply)
        .with(RESPONSE_TEXT, String::new())
        .with(LLM_TOTALS, totals)
        .with(REPLAY_MARK, mark)
}

/// The plan this step follows: a replay's, or a reuse's once filled (none: the model decides). A reuse
/// whose fill failed, and the steps after its plan, are the model's without a plan.
fn plan<'a>(
    services: &'a AgentServices,
    reuse: &'a Option<std::sync::Arc<super::reuse::FillOutcome>>,
    n: u64,
) -> Option<&'a ReplaySpec> {
    if let Some(spec) = services.replay.as_deref() {
        return Some(spec);
    }
    match reuse.as_deref().map(|o| &o.filled) {
        Some(Filled::Ready(spec)) if usize::try_from(n).is_ok_and(|n| n <= spec.steps.len()) => {
            Some(spec)
        }
        _ => None,
    }
}

/// What replayed (or reused) step `n` of `agent` waits for before it is decided ([`super::wait`]);
/// `None` when the step follows no plan. Looks at a reuse's plan without counting its fill.
pub async fn awaited(services: &AgentServices, n: u64, agent: StepAgent) -> Option<Awaited> {
    if let Some(spec) = services.replay.as_deref() {
        return Some(wait::awaited(spec, n, agent));
    }
    let outcome = services.reuse.as_deref()?.filled().await;
    match &outcome.filled {
        Filled::Ready(spec) if usize::try_from(n).is_ok_and(|n| n <= spec.steps.len()) => {
            Some(wait::awaited(spec, n, agent))
        }
        _ => None,
    }
}

async fn fill(
    reuse: Option<&Reuse>,
) -> (Option<std::sync::Arc<super::reuse::FillOutcome>>, Totals) {
    match reuse {
        Some(r) => {
            let (outcome, totals) = r.plan().await;
            (Some(outcome), totals)
        }
        None => (None, Totals::default()),
    }
}

fn model(spec: &ReplaySpec, n: u64, mark: Value, totals: Totals) -> Fallback {
    let plan = if spec.reuse.is_some() {
        super::reuse::remaining(spec, n)
    } else {
        String::new()
    };
    Fallback {
        mark: Some(mark),
        plan,
        totals,
    }
}

/// How a step that may follow a plan is decided.
#[derive(Debug)]
pub enum Planned<R> {
    /// The recording did: the reply, the step's mark, and the calls spent (a reuse's fill).
    Decided(R, Value, Totals),
    /// The model does.
    Model(Fallback),
}

/// How step `n` is decided: by `decide` on the plan it follows (a replay's, or a reuse's once filled),
/// by the model when it follows none (no replay or reuse, a failed fill, a step after the plan). `n` is
/// asked only of a task that replays or reuses.
async fn planned<R, E>(
    services: &AgentServices,
    n: impl FnOnce() -> Result<u64, E>,
    decide: impl FnOnce(&ReplaySpec, u64) -> Result<Decision<R>, E>,
) -> Result<Planned<R>, E> {
    if services.replay.is_none() && services.reuse.is_none() {
        return Ok(Planned::Model(Fallback::default()));
    }
    let n = n()?;
    let (filled, totals) = fill(services.reuse.as_deref()).await;
    let Some(spec) = plan(services, &filled, n) else {
        return Ok(Planned::Model(Fallback {
            totals,
            ..Fallback::default()
        }));
    };
    Ok(match decide(spec, n)? {
        Decision::Replayed(reply, mark) => Planned::Decided(reply, mark, totals),
        Decision::Model(mark) => Planned::Model(model(spec, n, mark, totals)),
    })
}

/// The AppAgent's phase for this step; `previous` is the agent's memory of its step before.
pub async fn app(
    services: &AgentServices,
    ctx: &ProcessingContext,
    previous: Option<&MemoryItem>,
) -> Result<Phase, StrategyError> {
    let planned = planned(
        services,
        || step(ctx),
        |spec, n| {
            let (controls, waited) = (ctx.require(CONTROLS)?, ctx.get(REPLAY_WAITED)?);
            let decision =
                decide::app_reply(spec, n, controls, previous, waited).map_err(mismatch)?;
            Ok(decision.map(|reply| (reply, spec.stays(n))))
        },
    )
    .await?;
    Ok(match planned {
        Planned::Decided((reply, stays), mark, totals) => {
            Phase::Decided(outputs(APP_RESPONSE, reply, mark, totals).with(REPLAY_STAYS, stays))
        }
        Planned::Model(fallback) => Phase::Model(fallback),
    })
}

/// The HostAgent's phase for this step.
pub async fn host(
    services: &AgentServices,
    ctx: &ProcessingContext,
) -> Result<Phase, StrategyError> {
    let planned = planned(
        services,
        || step(ctx),
        |spec, n| {
            let targets = ctx.require(TARGET_REGISTRY)?.all();
            decide::host_reply(spec, n, targets, ctx.get(REPLAY_WAITED)?).map_err(mismatch)
        },
    )
    .await?;
    Ok(match planned {
        Planned::Decided(reply, mark, totals) => {
            Phase::Decided(outputs(HOST_RESPONSE, reply, mark, totals))
        }
        Planned::Model(fallback) => Phase::Model(fallback),
    })
}

/// The third-party agent `server`'s phase for step `n` (it has no processor pipeline: its step asks
/// this first and the model only for [`Planned::Model`]); `previous` is its memory of its step before.
pub async fn third(
    services: &AgentServices,
    n: u64,
    server: &str,
    previous: Option<&MemoryItem>,
) -> Result<Planned<AppResponse>, decide::Mismatch> {
    planned(
        services,
        || Ok(n),
        |spec, n| decide::third_reply(spec, n, server, previous),
    )
    .await
}
