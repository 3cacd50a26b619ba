//! `ComposedStrategy` (seed 003, "ComposedStrategy"): several strategies run in order inside one phase.
//!
//! Each member sees the outputs of the members before it. The composition's dependencies are the union of
//! its members' dependencies minus what an *earlier* member provides (a member depending on a later
//! member's output stays an external dependency, so validation catches the wrong order); its outputs are
//! the union of its members' outputs. With `fail_fast` the first failing member fails the composition;
//! otherwise the failure is logged and recorded and the next member runs.

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument as _;

use super::context::ProcessingContext;
use super::error::{BuildError, RecordedFailure};
use super::strategy::{Dependency, Outputs, Provided, Strategy, StrategyError};
use super::validation::{check_outputs, missing_required};

/// Strategies run in order within one phase.
pub struct ComposedStrategy<A: ?Sized> {
    name: String,
    fail_fast: bool,
    members: Vec<Arc<dyn Strategy<A>>>,
    // Each member's declarations, read once at construction (they are constant by contract).
    member_io: Vec<(Vec<Dependency>, Vec<Provided>)>,
    dependencies: Vec<Dependency>,
    provides: Vec<Provided>,
}

impl<A: ?Sized> std::fmt::Debug for ComposedStrategy<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComposedStrategy")
            .field("name", &self.name)
            .field("fail_fast", &self.fail_fast)
            .field(
                "members",
                &self
                    .members
                    .iter()
                    .map(|m| m.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<A: ?Sized + Sync> ComposedStrategy<A> {
    /// Composes `members`; an empty composition is an error.
    pub fn new(
        name: impl Into<String>,
        fail_fast: bool,
        members: Vec<Arc<dyn Strategy<A>>>,
    ) -> Result<Self, BuildError> {
        let name = name.into();
        if members.is_empty() {
            return Err(BuildError::EmptyComposition { strategy: name });
        }
        let mut dependencies: Vec<Dependency> = Vec::new();
        let mut provides: Vec<Provided> = Vec::new();
        let member_io: Vec<_> = members
            .iter()
            .map(|m| (m.dependencies(), m.provides()))
            .collect();
        for (member, (member_deps, member_provides)) in members.iter().zip(&member_io) {
            for mut dep in member_deps.iter().cloned() {
                let internal = provides.iter().any(|p| p.field == dep.field);
                let known = dependencies
                    .iter()
                    .any(|d| d.field == dep.field && d.required >= dep.required);
                if !internal && !known {
                    dependencies.retain(|d| d.field != dep.field);
                    dep.declared_by
                        .get_or_insert_with(|| member.name().to_owned().into());
                    dependencies.push(dep);
                }
            }
            for out in member_provides {
                if !provides.iter().any(|p| p.field == out.field) {
                    provides.push(out.clone());
                }
            }
        }
        Ok(Self {
            name,
            fail_fast,
            members,
            member_io,
            dependencies,
            provides,
        })
    }
}

#[async_trait]
impl<A: ?Sized + Sync> Strategy<A> for ComposedStrategy<A> {
    fn name(&self) -> &str {
        &self.name
    }

    fn fail_fast(&self) -> bool {
        self.fail_fast
    }

    fn dependencies(&self) -> Vec<Dependency> {
        self.dependencies.clone()
    }

    fn provides(&self) -> Vec<Provided> {
        self.provides.clone()
    }

    fn members(&self) -> &[Arc<dyn Strategy<A>>] {
        &self.members
    }

    async fn execute(
        &self,
        agent: &A,
        ctx: &mut ProcessingContext,
    ) -> Result<Outputs, StrategyError> {
        for (index, (member, (deps, provides))) in
            self.members.iter().zip(&self.member_io).enumerate()
        {
            let span = tracing::info_span!(
                "strategy",
                otel.name = %format!("strategy {}", member.name()),
                strategy = %member.name(),
                composition = %self.name,
                member = index + 1,
            );
            let outcome = async {
                if let Some(field) = missing_required(deps, ctx) {
                    return Err(StrategyError::msg(format!(
                        "member '{}' is missing required input '{field}'",
                        member.name()
                    )));
                }
                let previous = ctx.limit_reads(deps);
                let outputs = member.execute(agent, ctx).await;
                ctx.restore_reads(previous);
                let outputs = outputs?;
                check_outputs(provides, &outputs)
                    .map_err(|e| StrategyError::msg(format!("'{}' {e}", member.name())))?;
                Ok(outputs)
            }
            .instrument(span)
            .await;
            match outcome {
                Ok(outputs) => ctx.update_local(outputs.into_values()),
                Err(error) if self.fail_fast => {
                    return Err(StrategyError::with_source(
                        format!("member '{}' of '{}' failed", member.name(), self.name),
                        error,
                    ));
                }
                Err(error) => {
                    tracing::warn!(
                        composition = %self.name,
                        strategy = %member.name(),
                        error = %error,
                        "member failed; continuing (fail_fast = false)"
                    );
                    ctx.record_failure(RecordedFailure {
                        strategy: member.name().to_owned(),
                        message: error.to_string(),
                    });
                }
            }
        }
        // Members' outputs are already merged into the context one by one, so later members saw them.
        Ok(Outputs::new())
    }
}
