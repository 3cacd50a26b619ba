//! The strategy interface (seed 003, "ProcessingStrategy Interface", "BaseProcessingStrategy",
//! "Strategy Dependency System").
//!
//! A strategy is one unit of work in one phase. It declares once what it reads ([`Dependency`], the
//! seeds' `@depends_on`) and what it writes ([`Provided`], the seeds' `@provides`), both built from typed
//! [`Key`]s, and returns its outputs as [`Outputs`]. The framework checks the declarations when a processor
//! is built and again at run time, and refuses outputs a strategy did not declare.
//!
//! Strategies are stateless (`&self`) and do not mutate the agent (`&A`): what they learn goes out through
//! their outputs, which the framework merges into the context and the agent applies after the run.

use std::any::type_name;
use std::borrow::Cow;
use std::fmt;

use async_trait::async_trait;

use super::context::{ContextError, Key, ProcessingContext, Values};

/// A declared input of a strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// The context field read.
    pub field: &'static str,
    /// Whether the strategy cannot run without it.
    pub required: bool,
    /// The expected value type (from the key).
    pub type_name: &'static str,
    /// What the field is for.
    pub description: &'static str,
    /// For a dependency aggregated by a composition: the member strategy that declared it.
    pub declared_by: Option<Cow<'static, str>>,
}

/// A declared output of a strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provided {
    /// The context field written.
    pub field: &'static str,
    /// The value type (from the key).
    pub type_name: &'static str,
}

impl<T: 'static> Key<T> {
    /// Declares this key as a required input.
    pub fn required(self, description: &'static str) -> Dependency {
        Dependency {
            field: self.name(),
            required: true,
            type_name: type_name::<T>(),
            description,
            declared_by: None,
        }
    }

    /// Declares this key as an optional input.
    pub fn optional(self, description: &'static str) -> Dependency {
        Dependency {
            required: false,
            ..self.required(description)
        }
    }

    /// Declares this key as an output.
    pub fn provided(self) -> Provided {
        Provided {
            field: self.name(),
            type_name: type_name::<T>(),
        }
    }
}

/// What a strategy hands back on success: values for (a subset of) its declared outputs.
#[derive(Debug, Default)]
pub struct Outputs {
    values: Values,
}

impl Outputs {
    /// No outputs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets an output.
    pub fn insert<T: Send + Sync + 'static>(&mut self, key: Key<T>, value: T) -> &mut Self {
        self.values.insert(key, value);
        self
    }

    /// Builder form of [`Outputs::insert`].
    pub fn with<T: Send + Sync + 'static>(mut self, key: Key<T>, value: T) -> Self {
        self.values.insert(key, value);
        self
    }

    /// Moves every output of `other` into `self`, replacing outputs of the same name.
    pub fn merge(&mut self, other: Outputs) {
        self.values.merge(other.values);
    }

    /// Reads an output back (e.g. in a test).
    pub fn get<T: 'static>(&self, key: Key<T>) -> Result<Option<&T>, ContextError> {
        self.values.get(key)
    }

    /// The output field names.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.values.names()
    }

    pub(in crate::processor) fn type_of(&self, name: &str) -> Option<&'static str> {
        self.values.type_of(name)
    }

    pub(in crate::processor) fn into_values(self) -> Values {
        self.values
    }
}

/// What a strategy's work ends with: its outputs, or why it failed.
pub type StrategyResult = Result<Outputs, StrategyError>;

/// Why a strategy failed.
#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    /// The strategy could not do its work.
    #[error("{message}")]
    Failed {
        /// What went wrong.
        message: String,
        /// The underlying cause, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A context read failed (missing required field or wrong type).
    #[error(transparent)]
    Context(#[from] ContextError),
}

impl StrategyError {
    /// A failure with a message and no underlying cause.
    pub fn msg(message: impl Into<String>) -> Self {
        StrategyError::Failed {
            message: message.into(),
            source: None,
        }
    }

    /// A failure caused by `source`.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StrategyError::Failed {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// One unit of work in one phase, for agents of type `A`.
///
/// Contract: `dependencies` and `provides` are constant for a strategy value (they are read when the
/// processor is built); `execute` only reads the context and returns outputs whose names and types are
/// among `provides`.
#[async_trait]
pub trait Strategy<A: ?Sized>: Send + Sync {
    /// The name used in logs, spans and errors.
    fn name(&self) -> &str;

    /// Whether a failure stops the whole pipeline (true) or is logged and recorded (false).
    fn fail_fast(&self) -> bool {
        true
    }

    /// What the strategy reads.
    fn dependencies(&self) -> Vec<Dependency> {
        Vec::new()
    }

    /// What the strategy writes.
    fn provides(&self) -> Vec<Provided> {
        Vec::new()
    }

    /// Does the work.
    async fn execute(&self, agent: &A, ctx: &mut ProcessingContext) -> StrategyResult;

    /// The members of a composition (empty for a plain strategy); lets validation name the member.
    fn members(&self) -> &[std::sync::Arc<dyn Strategy<A>>] {
        &[]
    }
}

impl<A: ?Sized> fmt::Debug for dyn Strategy<A> + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Strategy")
            .field("name", &self.name())
            .field("fail_fast", &self.fail_fast())
            .finish()
    }
}
