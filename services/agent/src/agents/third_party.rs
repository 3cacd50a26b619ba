//! Third-party agents (seed 000: "do the subtask without a window"): what the HostAgent may ASSIGN a
//! subtask to besides windows, and what their tool-calling loop (`round::third_step`) offers the model.
//! Each is a [`ToolSource`]: an MCP server bound as an agent (`--mcp-servers`, its tools named
//! `mcp__SERVER__TOOL`) or the built-in shell (`--shell-agent`, its one tool `shell__run`). The loop, the
//! policy, the intents and the step record are the same for every source.

use std::sync::Arc;

use async_trait::async_trait;

use super::services::AgentServices;
use crate::dispatch::tools::ToolSpec;
use crate::dispatch::{CommandDispatcher, ToolType};
use crate::mcp::{Binding, McpServer};
use crate::shell::ShellAgent;

/// A third-party agent: its name, when to use it, and the tools its loop offers the model.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// The agent's name (the HostAgent's target name; its steps are `ThirdPartyAgent/NAME`).
    fn name(&self) -> &str;
    /// When to use it, for the HostAgent.
    fn description(&self) -> String;
    /// Its tools, named as the actions the model calls (the calls go through `dispatcher`); an error
    /// says why none can be offered this step.
    async fn tools(&self, dispatcher: &dyn CommandDispatcher) -> Result<Vec<ToolSpec>, String>;
}

#[async_trait]
impl ToolSource for McpServer {
    fn name(&self) -> &str {
        McpServer::name(self)
    }

    fn description(&self) -> String {
        match &self.config().bind {
            Binding::Agent { description } => description.clone(),
            Binding::Applications { .. } => String::new(),
        }
    }

    async fn tools(&self, _dispatcher: &dyn CommandDispatcher) -> Result<Vec<ToolSpec>, String> {
        let tools = McpServer::tools(self).await.map_err(|e| e.to_string())?;
        Ok(tools
            .into_iter()
            .map(|t| ToolSpec {
                name: crate::mcp::action_name(McpServer::name(self), &t.name),
                description: t.description,
                kind: ToolType::Action,
                parameters: t.input_schema,
            })
            .collect())
    }
}

#[async_trait]
impl ToolSource for ShellAgent {
    fn name(&self) -> &str {
        crate::shell::AGENT
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    /// `shell__run` with the parameters of the executor's `run_command`.
    async fn tools(&self, dispatcher: &dyn CommandDispatcher) -> Result<Vec<ToolSpec>, String> {
        let catalog = dispatcher
            .catalog()
            .await
            .map_err(|e| format!("cannot read the executor's tools: {e}"))?;
        let run = catalog
            .tools
            .iter()
            .find(|t| t.name == crate::shell::EXECUTOR_TOOL)
            .ok_or_else(|| {
                format!(
                    "the executor has no {} tool (it is older than the shell agent)",
                    crate::shell::EXECUTOR_TOOL
                )
            })?;
        Ok(vec![ToolSpec {
            name: crate::shell::RUN.to_owned(),
            description: crate::shell::RUN_DESCRIPTION.to_owned(),
            kind: ToolType::Action,
            parameters: run.parameters.clone(),
        }])
    }
}

/// The task's third-party agents that can run: the MCP servers bound as agents (in the file's order),
/// then the shell when it is on.
pub fn agents(services: &AgentServices) -> Vec<Arc<dyn ToolSource>> {
    let mut all: Vec<Arc<dyn ToolSource>> = Vec::new();
    if let Some(hub) = &services.mcp {
        for (name, _) in hub.agents() {
            if let Some(server) = hub.server(&name) {
                all.push(server.clone());
            }
        }
    }
    if let Some(description) = &services.settings.shell_agent {
        all.push(Arc::new(ShellAgent {
            description: description.clone(),
        }));
    }
    all
}

/// The third-party agent called `name`, when one can run.
pub fn find(services: &AgentServices, name: &str) -> Option<Arc<dyn ToolSource>> {
    agents(services).into_iter().find(|a| a.name() == name)
}
