//! `ufo-e2e`: what the real end-to-end test and the end-to-end benchmark share — the agent's REST and
//! gRPC clients as a user would call them, the scripted LLM's reply builders (the seeds' HostAgent and
//! AppAgent response shapes), and prompt readers that find targets and controls by name in the prompt the
//! agent actually sent.
//!
//! Layout: [`api`] (submit a task over REST, follow `StreamSteps` over gRPC), [`script`] (replies and
//! prompt readers), [`standin`] (an instantly answering executor for the throughput benchmark only).

pub mod api;
pub mod script;
pub mod standin;
