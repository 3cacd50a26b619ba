//! [`McpDispatcher`]: the command dispatcher in front of the executor's that sends `mcp__SERVER__TOOL`
//! actions to their MCP server and everything else to the executor, in the batch's order. An MCP call's
//! failure (server down, timeout, unknown tool, `isError`) is the action's failure, told to the model;
//! it never fails the step.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{McpHub, split_action};
use crate::dispatch::tools::ExecutorCatalog;
use crate::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError};

/// See the module doc.
pub struct McpDispatcher {
    inner: Arc<dyn CommandDispatcher>,
    hub: Arc<McpHub>,
}

impl std::fmt::Debug for McpDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpDispatcher").finish_non_exhaustive()
    }
}

impl McpDispatcher {
    /// Routes MCP actions to `hub`, the rest to `inner`; `hub`'s servers on the desktop start through
    /// `inner` (this task's executor).
    pub fn new(inner: Arc<dyn CommandDispatcher>, hub: Arc<McpHub>) -> Self {
        let hub = hub.for_executor(&inner);
        Self { inner, hub }
    }

    /// The hub.
    pub fn hub(&self) -> &Arc<McpHub> {
        &self.hub
    }

    async fn call(&self, command: &Command) -> CommandResult {
        let Some((server, tool)) = split_action(&command.tool_name) else {
            return CommandResult::failure(format!("{} is not an MCP action", command.tool_name));
        };
        let Some(s) = self.hub.server(server) else {
            return CommandResult::failure(format!("no MCP server is called {server}"));
        };
        let mut r = match s.call(tool, command.parameters.clone()).await {
            Ok(out) if out.is_error => {
                CommandResult::failure(format!("the tool reported an error: {}", out.text))
            }
            Ok(out) => {
                let mut v = json!({"text": out.text});
                if let (Some(st), Value::Object(m)) = (out.structured, &mut v) {
                    m.insert("structured".into(), st);
                }
                CommandResult::success(v)
            }
            Err(e) => CommandResult::failure(e.to_string()),
        };
        r.call_id.clone_from(&command.call_id);
        r
    }
}

#[async_trait]
impl CommandDispatcher for McpDispatcher {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        if !commands
            .iter()
            .any(|c| split_action(&c.tool_name).is_some())
        {
            return self.inner.execute(commands).await;
        }
        let mut results = Vec::with_capacity(commands.len());
        let mut pending: Vec<Command> = Vec::new();
        for c in commands {
            if split_action(&c.tool_name).is_some() {
                if !pending.is_empty() {
                    results.extend(self.inner.execute(std::mem::take(&mut pending)).await?);
                }
                results.push(self.call(&c).await);
            } else {
                pending.push(c);
            }
        }
        if !pending.is_empty() {
            results.extend(self.inner.execute(pending).await?);
        }
        Ok(results)
    }

    async fn catalog(&self) -> Result<Arc<ExecutorCatalog>, DispatchError> {
        self.inner.catalog().await
    }
}
