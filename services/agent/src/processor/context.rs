//! Typed context data (seed 004, "ProcessingContext"; seed 003, "Strategy Dependency System").
//!
//! A [`Key<T>`] names a context field and carries its value type, so a strategy reads a screenshot as a
//! screenshot: `ctx.require(CLEAN_SCREENSHOT)?` returns `&Screenshot`. Values are stored type-erased in
//! [`Values`]; reading a field through a key of another type (two keys declared with one name) fails with
//! [`ContextError::WrongType`] naming both types, never with a silent `None`.
//!
//! [`ProcessingContext`] keeps the seeds' separation: `local` data lives for one processor run (screenshots,
//! parsed response, results), `global` data is session-wide and read-only during a run (request, session
//! id, round and step numbers, blackboard, command dispatcher, configuration).

use std::any::{Any, type_name};
use std::collections::HashMap;
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::error::RecordedFailure;

/// A context field name together with its value type.
pub struct Key<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// Declares a key; keys are meant to be `const`s in a `keys` module.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }

    /// The field name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Key<T> {}

impl<T> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key<{}>({:?})", type_name::<T>(), self.name)
    }
}

/// Why a context read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// A required field is absent.
    #[error("required field '{field}' is missing from the context")]
    Missing {
        /// The field name.
        field: &'static str,
    },
    /// The field holds a value of another type than the key declares.
    #[error("field '{field}' holds a {found}, but was read as a {expected}")]
    WrongType {
        /// The field name.
        field: &'static str,
        /// The type the key declares.
        expected: &'static str,
        /// The type stored.
        found: &'static str,
    },
    /// A strategy read a field it does not declare in its dependencies (seed 003's "hidden
    /// dependencies" pitfall): the read fails instead of quietly coupling the strategy to another's data.
    #[error("field '{field}' was read but is not among the strategy's declared dependencies")]
    Undeclared {
        /// The field name.
        field: &'static str,
    },
}

struct Slot {
    value: Box<dyn Any + Send + Sync>,
    type_name: &'static str,
}

/// A type-erased map from field names to values, written and read through [`Key`]s.
#[derive(Default)]
pub struct Values {
    slots: HashMap<&'static str, Slot>,
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        let mut names: Vec<_> = self.slots.iter().collect();
        names.sort_by_key(|(name, _)| **name);
        for (name, slot) in names {
            map.entry(name, &slot.type_name);
        }
        map.finish()
    }
}

impl Values {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, replacing any previous value.
    pub fn insert<T: Send + Sync + 'static>(&mut self, key: Key<T>, value: T) -> &mut Self {
        self.slots.insert(
            key.name,
            Slot {
                value: Box::new(value),
                type_name: type_name::<T>(),
            },
        );
        self
    }

    /// Builder form of [`Values::insert`].
    pub fn with<T: Send + Sync + 'static>(mut self, key: Key<T>, value: T) -> Self {
        self.insert(key, value);
        self
    }

    /// The value of `key`: `Ok(None)` when absent, an error when stored with another type.
    pub fn get<T: 'static>(&self, key: Key<T>) -> Result<Option<&T>, ContextError> {
        let Some(slot) = self.slots.get(key.name) else {
            return Ok(None);
        };
        slot.value
            .downcast_ref::<T>()
            .map(Some)
            .ok_or(ContextError::WrongType {
                field: key.name,
                expected: type_name::<T>(),
                found: slot.type_name,
            })
    }

    /// Removes and returns the value of `key`.
    pub fn take<T: 'static>(&mut self, key: Key<T>) -> Result<Option<T>, ContextError> {
        let Some(slot) = self.slots.remove(key.name) else {
            return Ok(None);
        };
        match slot.value.downcast::<T>() {
            Ok(value) => Ok(Some(*value)),
            Err(value) => {
                let found = slot.type_name;
                self.slots.insert(
                    key.name,
                    Slot {
                        value,
                        type_name: found,
                    },
                );
                Err(ContextError::WrongType {
                    field: key.name,
                    expected: type_name::<T>(),
                    found,
                })
            }
        }
    }

    /// Whether a field of this name is present (whatever its type).
    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// The stored type of a field, if present.
    pub fn type_of(&self, name: &str) -> Option<&'static str> {
        self.slots.get(name).map(|s| s.type_name)
    }

    /// Field names, unordered.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.slots.keys().copied()
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Moves every field of `other` into `self`, replacing fields of the same name.
    pub fn merge(&mut self, other: Values) {
        self.slots.extend(other.slots);
    }
}

/// The data one processor run sees: its own local data and the session-wide global data.
#[derive(Debug)]
pub struct ProcessingContext {
    local: Values,
    global: Arc<Values>,
    failures: Vec<RecordedFailure>,
    /// While a strategy runs: the fields it declared it reads; any other read fails.
    reads: Option<HashSet<&'static str>>,
}

impl ProcessingContext {
    /// A context with empty local data over `global`.
    pub fn new(global: Arc<Values>) -> Self {
        Self {
            local: Values::new(),
            global,
            failures: Vec::new(),
            reads: None,
        }
    }

    fn check_read(&self, field: &'static str) -> Result<(), ContextError> {
        match &self.reads {
            Some(declared) if !declared.contains(field) => Err(ContextError::Undeclared { field }),
            _ => Ok(()),
        }
    }

    /// A local field.
    pub fn get_local<T: 'static>(&self, key: Key<T>) -> Result<Option<&T>, ContextError> {
        self.check_read(key.name())?;
        self.local.get(key)
    }

    /// A global field.
    pub fn get_global<T: 'static>(&self, key: Key<T>) -> Result<Option<&T>, ContextError> {
        self.check_read(key.name())?;
        self.global.get(key)
    }

    /// A field from local data, else from global data.
    pub fn get<T: 'static>(&self, key: Key<T>) -> Result<Option<&T>, ContextError> {
        self.check_read(key.name())?;
        match self.local.get(key)? {
            Some(value) => Ok(Some(value)),
            None => self.global.get(key),
        }
    }

    /// A field that must be present (local, else global); [`ContextError::Missing`] otherwise.
    pub fn require<T: 'static>(&self, key: Key<T>) -> Result<&T, ContextError> {
        self.get(key)?
            .ok_or(ContextError::Missing { field: key.name() })
    }

    /// Whether a field is present locally or globally.
    pub fn contains(&self, name: &str) -> bool {
        self.local.contains(name) || self.global.contains(name)
    }

    /// The stored type of a field (local first), if present.
    pub fn type_of(&self, name: &str) -> Option<&'static str> {
        self.local
            .type_of(name)
            .or_else(|| self.global.type_of(name))
    }

    /// The run's local data.
    pub fn local(&self) -> &Values {
        &self.local
    }

    /// The session-wide data.
    pub fn global(&self) -> &Arc<Values> {
        &self.global
    }

    /// Takes the local data out, leaving it empty (used when the run is finalised).
    pub fn into_local(self) -> Values {
        self.local
    }

    /// Limits reads to `declared` while one strategy runs; returns the limit it replaces (a composition's),
    /// to be given back to [`Self::restore_reads`] when the strategy is done.
    pub(in crate::processor) fn limit_reads(
        &mut self,
        declared: &[super::Dependency],
    ) -> Option<HashSet<&'static str>> {
        let set = declared.iter().map(|d| d.field).collect();
        self.reads.replace(set)
    }

    /// Puts back the read limit [`Self::limit_reads`] replaced.
    pub(in crate::processor) fn restore_reads(&mut self, previous: Option<HashSet<&'static str>>) {
        self.reads = previous;
    }

    /// Merges a successful strategy's outputs into the local data (seed 004: `update_local`). Only the
    /// framework calls this, so strategies cannot write around their declared outputs.
    pub(in crate::processor) fn update_local(&mut self, outputs: Values) {
        self.local.merge(outputs);
    }

    /// Records a tolerated (non-fail-fast) failure inside a composition.
    pub(in crate::processor) fn record_failure(&mut self, failure: RecordedFailure) {
        self.failures.push(failure);
    }

    /// Takes the failures recorded since the last call.
    pub(in crate::processor) fn take_failures(&mut self) -> Vec<RecordedFailure> {
        std::mem::take(&mut self.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COUNT: Key<u32> = Key::new("count");
    const COUNT_AS_TEXT: Key<String> = Key::new("count");
    const NAME: Key<String> = Key::new("name");

    #[test]
    fn typed_keys_read_back_their_values() {
        let mut values = Values::new();
        values.insert(COUNT, 3).insert(NAME, "x".to_owned());
        assert_eq!(values.get(COUNT).unwrap(), Some(&3));
        assert_eq!(values.get(NAME).unwrap().map(String::as_str), Some("x"));
        assert_eq!(values.len(), 2);
    }

    #[test]
    fn a_wrong_type_read_fails_clearly_and_names_both_types() {
        let values = Values::new().with(COUNT, 3);
        let err = values.get(COUNT_AS_TEXT).unwrap_err();
        assert_eq!(
            err,
            ContextError::WrongType {
                field: "count",
                expected: type_name::<String>(),
                found: type_name::<u32>(),
            }
        );
        assert!(err.to_string().contains("count"));
    }

    #[test]
    fn take_keeps_the_value_when_the_type_is_wrong() {
        let mut values = Values::new().with(COUNT, 3);
        assert!(values.take(COUNT_AS_TEXT).is_err());
        assert_eq!(values.take(COUNT).unwrap(), Some(3));
        assert!(values.is_empty());
    }

    #[test]
    fn local_shadows_global_and_require_reports_the_missing_field() {
        let global = Arc::new(Values::new().with(COUNT, 1).with(NAME, "global".to_owned()));
        let mut ctx = ProcessingContext::new(global);
        ctx.update_local(Values::new().with(COUNT, 2));
        assert_eq!(ctx.require(COUNT).unwrap(), &2);
        assert_eq!(ctx.get_global(COUNT).unwrap(), Some(&1));
        assert_eq!(ctx.require(NAME).unwrap(), "global");
        const ABSENT: Key<u8> = Key::new("absent");
        assert_eq!(
            ctx.require(ABSENT).unwrap_err(),
            ContextError::Missing { field: "absent" }
        );
        assert_eq!(ctx.get(ABSENT).unwrap(), None);
    }
}
