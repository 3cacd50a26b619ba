//! The agents: the HostAgent (seeds 000, 002) and AppAgents (seed 001) as processors made of strategies
//! on the [`crate::processor`] framework, and what they share.
//!
//! - [`common`]: what the HostAgent and the AppAgents do alike (processor frame, catalog, blackboard
//!   prompt part, model-call outputs, memory-update core), written once.
//! - [`strategy`]: how an agent's strategy is written: its [`strategy::Declaration`] (name, phase, reads,
//!   writes; fail-fast follows the phase) and its work.
//! - [`keys`]: typed context keys (global inputs and the strategies' outputs).
//! - [`settings`]: limits and switches (from the service configuration).
//! - [`services`]: models, label font and settings shared by every agent of a task.
//! - [`action`]: executed actions ([`action::ActionRecord`]) and the multi-action runner.
//! - [`host`]: HostAgent strategies, processor and state.
//! - [`app`]: AppAgent strategies, processor and state.
//! - [`tools`]: the functions each agent offers its model, from the executor's catalog.
//! - [`third_party`]: the third-party agents (MCP servers bound as agents, the built-in shell) and the
//!   tools their loop offers.

pub mod action;
pub mod app;
pub mod common;
pub mod host;
pub mod keys;
pub mod knowledge;
pub mod policy;
pub mod response;
pub mod services;
pub mod settings;
pub mod setup;
pub mod strategy;
pub mod target;
pub mod text;
pub mod third_party;
pub mod tools;

pub use app::AppAgent;
pub use host::HostAgent;
pub use services::AgentServices;
pub use settings::AgentSettings;
