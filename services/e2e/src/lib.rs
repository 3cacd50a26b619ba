//! `ufo-e2e`: what the real end-to-end test and the end-to-end benchmark share — the agent's API client for
//! a running cluster (REST and gRPC with its API key, as a user would call them), the scripted LLM's reply
//! builders (the seeds' HostAgent and AppAgent response shapes), and prompt readers that find targets and
//! controls by name in the prompt the agent actually sent.
//!
//! Layout: [`agent`] (the cluster's [`AgentClient`]), [`script`] (replies and prompt readers), [`standin`]
//! (an instantly answering executor for the throughput benchmark only).

pub mod script;
pub mod standin;

use ufo_client::{AgentClient, ClientError, Timeouts};
use ufo_testkit::Cluster;

/// The client of `cluster`'s agent service: its REST API with the cluster's API key, and `StreamSteps` on
/// its gRPC address.
pub fn agent(cluster: &Cluster) -> Result<AgentClient, ClientError> {
    Ok(AgentClient::new(
        &cluster.rest_url,
        Some(cluster.api_key.clone()),
        Timeouts::default(),
    )?
    .with_grpc(cluster.grpc_url.clone()))
}
