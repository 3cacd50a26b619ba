//! Replay of a finished task without the model (issue 20).
//!
//! Layout:
//! - [`selector`]: each recorded action keeps a selector for its target (type, name, ancestors, automation
//!   id, index among identical siblings); a replay finds the control again by it in a later listing.
pub mod selector;
