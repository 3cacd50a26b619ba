//! The agent's MCP client (Model Context Protocol, the official `rmcp` SDK), UFO²'s hybrid action layer:
//! servers the operator lists in `--mcp-servers FILE` ([`config`]) are either bound to applications —
//! their tools are offered to those applications' AppAgents as API actions beside the GUI ones — or
//! registered as third-party agents the HostAgent may assign a subtask to (the round runs a tool-calling
//! loop over that server's tools, `round::third_step`).
//!
//! Every MCP tool call is an ordinary action: it is named `mcp__SERVER__TOOL`, judged by the same consent
//! policy as a click, recorded as an intent before it runs and in its step after, and it reaches the
//! server through [`McpDispatcher`], which sits in front of the executor's dispatcher and routes those
//! names to [`McpHub`]. One server's connection, restarts and limits: [`server`]. The MCP *server* the
//! agent itself exposes (issue 38) is not here.

pub mod config;
pub mod desktop;
pub mod dispatch;
pub mod server;

use std::path::Path;
use std::sync::Arc;

pub use config::{Binding, McpConfigError, McpServersFile, ServerConfig, Transport};
pub use dispatch::McpDispatcher;
pub use server::{McpError, McpLimits, McpOutput, McpServer, McpTool, truncate};

/// What prefixes an MCP tool's action name: `mcp__SERVER__TOOL`.
pub const PREFIX: &str = "mcp__";

/// The action name of `tool` on `server`.
pub fn action_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// The server and tool an action name stands for, when it is an MCP action.
pub fn split_action(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(PREFIX)?.split_once("__")
}

/// Every configured server, by name.
#[derive(Debug, Default)]
pub struct McpHub {
    servers: Vec<Arc<McpServer>>,
}

impl McpHub {
    /// This hub for one task whose desktop `executor` drives: the servers beside the agent are shared,
    /// each server on the desktop is a fresh one started through `executor` on first use (and stopped
    /// when the task's hub is dropped).
    pub fn for_executor(
        self: &Arc<Self>,
        executor: &Arc<dyn crate::dispatch::CommandDispatcher>,
    ) -> Arc<Self> {
        if !self
            .servers
            .iter()
            .any(|s| s.config().transport.on_desktop())
        {
            return self.clone();
        }
        Arc::new(Self {
            servers: self
                .servers
                .iter()
                .map(|s| {
                    if s.config().transport.on_desktop() {
                        Arc::new(McpServer::on_executor(
                            s.config().clone(),
                            s.limits(),
                            executor.clone(),
                        ))
                    } else {
                        s.clone()
                    }
                })
                .collect(),
        })
    }
}

impl McpHub {
    /// The servers of a file's configuration.
    pub fn new(file: McpServersFile, limits: McpLimits) -> Self {
        Self {
            servers: file
                .servers
                .into_iter()
                .map(|c| Arc::new(McpServer::new(c, limits)))
                .collect(),
        }
    }

    /// Reads `path` (see [`config`]).
    pub fn load(path: &Path, limits: McpLimits) -> Result<Self, McpConfigError> {
        Ok(Self::new(McpServersFile::load(path)?, limits))
    }

    /// The server called `name`.
    pub fn server(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// The third-party agents: `(name, description)`, in the file's order.
    pub fn agents(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .filter_map(|s| match &s.config().bind {
                Binding::Agent { description } => Some((s.name().to_owned(), description.clone())),
                Binding::Applications { .. } => None,
            })
            .collect()
    }

    /// The servers bound to the application whose process name or window title is given (a configured
    /// name matches case-insensitively as a substring of either).
    pub fn for_application(&self, process: &str, title: &str) -> Vec<Arc<McpServer>> {
        let process = process.to_lowercase();
        let title = title.to_lowercase();
        self.servers
            .iter()
            .filter(|s| match &s.config().bind {
                Binding::Applications { applications } => applications.iter().any(|a| {
                    let a = a.to_lowercase();
                    (!process.is_empty() && process.contains(&a)) || title.contains(&a)
                }),
                Binding::Agent { .. } => false,
            })
            .cloned()
            .collect()
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_round_trip() {
        let name = action_name("files", "write_file");
        assert_eq!(name, "mcp__files__write_file");
        assert_eq!(split_action(&name), Some(("files", "write_file")));
        assert_eq!(split_action("click_input"), None);
        assert_eq!(
            split_action("mcp__calc__set__cells"),
            Some(("calc", "set__cells"))
        );
    }

    #[test]
    fn applications_match_by_process_or_title() {
        let file = McpServersFile::parse(
            r#"{"servers":[
              {"name":"calc","transport":{"type":"stdio","command":"x"},
               "bind":{"type":"applications","applications":["soffice","Calc"]}},
              {"name":"files","transport":{"type":"stdio","command":"x"},
               "bind":{"type":"agent","description":"Files"}}]}"#,
            false,
        )
        .expect("valid");
        let hub = McpHub::new(file, McpLimits::default());
        assert_eq!(hub.for_application("soffice.bin", "").len(), 1);
        assert_eq!(
            hub.for_application("", "Untitled 1 - LibreOffice Calc")
                .len(),
            1
        );
        assert!(hub.for_application("gedit", "notes.txt").is_empty());
        assert_eq!(hub.agents(), vec![("files".to_owned(), "Files".to_owned())]);
    }
}
