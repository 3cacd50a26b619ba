//! The UFO protocols, compiled from `proto/ufo/v1/*.proto`.
//!
//! - [`v1`]: generated messages, clients (`*_client`) and servers (`*_server`) for the three services:
//!   `Executor` (the desktop's hand and eye), `SessionStore` (durable sessions and the event log) and
//!   `AgentService` (what users call).
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for `tonic-reflection`.
//! - [`json`]: lossless-enough conversion between `serde_json::Value` and protobuf `Struct`/`Value`,
//!   used wherever the protocols carry free-form JSON (tool parameters and results, memory items).

pub mod json;

/// Generated code for package `ufo.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("ufo.v1");
}

/// Encoded `FileDescriptorSet` of every `ufo.v1` proto, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("ufo_descriptor");

/// Fully-qualified gRPC service names, as health checks and reflection report them.
pub mod service_names {
    /// `ufo.v1.Executor`.
    pub const EXECUTOR: &str = "ufo.v1.Executor";
    /// `ufo.v1.SessionStore`.
    pub const SESSION_STORE: &str = "ufo.v1.SessionStore";
    /// `ufo.v1.KnowledgeStore` (served by the session service).
    pub const KNOWLEDGE_STORE: &str = "ufo.v1.KnowledgeStore";
    /// `ufo.v1.AgentService`.
    pub const AGENT_SERVICE: &str = "ufo.v1.AgentService";
    /// `ufo.v1.ExecutorHub` (served by the agent when dial-out executors are enabled).
    pub const EXECUTOR_HUB: &str = "ufo.v1.ExecutorHub";
}

pub use prost_types;
