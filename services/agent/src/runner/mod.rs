//! The task runner and the protocol it shares with the API.
//!
//! - [`worker`]: the claim loop ([`Runner`]): claims queued (or abandoned) tasks with a lease.
//! - [`task`]: runs one claimed task round by round, recording each step before the next acts.
//! - [`ahead`]: a step's record committing while the next step observes and thinks (`--record-ahead`).
//! - [`watch`]: lease renewal and the event follower (cancel requests, answers, decisions).
//! - [`agents_driver`]: the real [`TaskDriver`]: HostAgent + AppAgents through [`crate::round::Round`].
//! - [`driver`]: the seam to the agents ([`TaskDriver`]): produce the next step from recorded state.
//! - [`experience`]: an ended task's trajectory summarised into the knowledge store (`--knowledge`).
//! - [`hitl`]: questions, answers, held actions and decisions in the session store.
//! - [`intent`]: intent before action, and the step a runner records for a dead runner's intents.
//! - [`desktop`]: the desktop pool: declared executors registered, a task's desktop checked back in.
//! - [`person`]: takeover — a person's input delivered and recorded as steps (docs/live.md).
//!
//! Store-write concerns (retries, sanitising) live in [`crate::store`]; a task's configuration in
//! [`crate::runner::task_config`].

pub mod agents_driver;
mod ahead;
pub mod demonstration;
pub mod desktop;
pub mod driver;
pub mod experience;
pub mod hitl;
pub mod intent;
pub mod person;
mod record;
pub mod task;
pub mod task_config;
pub mod watch;
pub mod worker;

pub use agents_driver::AgentsDriver;
pub use driver::{DriverError, StepInput, TaskDriver};
pub use task::Outcome;
pub use worker::Runner;
