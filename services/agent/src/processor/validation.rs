//! Dependency validation (seed 004, "Dependency Validation"; seed 003, `StrategyDependencyValidator`).
//!
//! At build time the whole chain is checked: walking the phases in order, every required input of every
//! strategy must be provided by an earlier phase, an earlier member of the same composition, or a declared
//! initial/global input — with a matching type. At run time each strategy's required inputs are checked
//! again right before it runs, and its outputs are checked against its declaration right after.

use std::collections::HashMap;

use super::context::ProcessingContext;
use super::error::{BuildError, OutputError};
use super::phase::ProcessingPhase;
use super::strategy::{Dependency, Outputs, Provided, Strategy};

/// Checks a chain of `(phase, strategy)` in execution order against the declared `inputs`.
pub(crate) fn validate_chain<A: ?Sized>(
    chain: &[(ProcessingPhase, &dyn Strategy<A>)],
    inputs: &[Provided],
) -> Result<(), BuildError> {
    let mut available: HashMap<&'static str, &'static str> =
        inputs.iter().map(|p| (p.field, p.type_name)).collect();
    for (phase, strategy) in chain {
        validate_strategy(*phase, *strategy, &mut available)?;
    }
    Ok(())
}

fn validate_strategy<A: ?Sized>(
    phase: ProcessingPhase,
    strategy: &dyn Strategy<A>,
    available: &mut HashMap<&'static str, &'static str>,
) -> Result<(), BuildError> {
    let members = strategy.members();
    if members.is_empty() {
        check_dependencies(phase, strategy.name(), &strategy.dependencies(), available)?;
        for out in strategy.provides() {
            available.insert(out.field, out.type_name);
        }
        return Ok(());
    }
    // A composition: members in order, each seeing what earlier members provide.
    for member in members {
        validate_strategy(phase, member.as_ref(), available)?;
    }
    Ok(())
}

fn check_dependencies(
    phase: ProcessingPhase,
    strategy: &str,
    dependencies: &[Dependency],
    available: &HashMap<&'static str, &'static str>,
) -> Result<(), BuildError> {
    for dep in dependencies {
        match available.get(dep.field) {
            None if dep.required => {
                return Err(BuildError::UnsatisfiedDependency {
                    strategy: dep.declared_by.as_deref().unwrap_or(strategy).to_owned(),
                    phase,
                    field: dep.field,
                });
            }
            Some(found) if *found != dep.type_name => {
                return Err(BuildError::TypeMismatch {
                    strategy: strategy.to_owned(),
                    phase,
                    field: dep.field,
                    expected: dep.type_name,
                    found,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first required dependency absent from the context, or present with another type.
pub(crate) fn missing_required(
    dependencies: &[Dependency],
    ctx: &ProcessingContext,
) -> Option<&'static str> {
    dependencies
        .iter()
        .filter(|d| d.required)
        .find(|d| ctx.type_of(d.field) != Some(d.type_name))
        .map(|d| d.field)
}

/// Checks that `outputs` only holds declared fields with their declared types.
pub(crate) fn check_outputs(declared: &[Provided], outputs: &Outputs) -> Result<(), OutputError> {
    for field in outputs.names() {
        let Some(decl) = declared.iter().find(|p| p.field == field) else {
            return Err(OutputError::Undeclared { field });
        };
        if let Some(found) = outputs.type_of(field)
            && found != decl.type_name
        {
            return Err(OutputError::WrongType {
                field,
                declared: decl.type_name,
                found,
            });
        }
    }
    Ok(())
}
