//! The operator's MCP servers file (`--mcp-servers FILE`, JSON or YAML by its extension): each server
//! is reached over stdio (a child process started beside the agent) or streamable HTTP, and is bound
//! either to applications (its tools join their AppAgents' catalogs) or as a third-party agent the
//! HostAgent may assign a subtask to. See docs/mcp.md for a full example.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why the servers file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    /// The file cannot be read.
    #[error("cannot read the MCP servers file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON or YAML of the expected shape.
    #[error("the MCP servers file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A server's settings contradict each other or are missing.
    #[error("MCP server {name:?}: {message}")]
    Invalid {
        /// The server.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpServersFile {
    /// The servers, in the order they are offered.
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
}

/// One server.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Its name: letters, digits, `_` and `-` (used in tool names `mcp__NAME__TOOL` and policy rules).
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// What it serves.
    pub bind: Binding,
    /// Milliseconds one tool call may take (default `--mcp-call-timeout-ms`).
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
}

/// How a server is reached.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Transport {
    /// A child process speaking MCP on its stdin/stdout: started beside the agent (it ends with the
    /// agent, also after a `kill -9`, on Linux), or with `on: desktop` on the machine of the task's
    /// desktop, through its executor (`process_start`; one per task and server).
    Stdio {
        /// Where it runs: `agent` (the default) or `desktop`.
        #[serde(default)]
        on: Option<String>,
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment variables.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Its working directory (default: the agent's, or the executor's on the desktop).
        #[serde(default)]
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, e.g. `https://host:8931/mcp`.
        url: String,
        /// A file holding the bearer token (read at connection; never inline in this file).
        #[serde(default)]
        token_file: Option<PathBuf>,
        /// A PEM file of CA certificates trusted for this server's TLS besides the system's roots (a
        /// private CA or a self-signed server; read at connection).
        #[serde(default)]
        ca_file: Option<PathBuf>,
    },
}

/// What a server serves.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Binding {
    /// Its tools are API actions of these applications' AppAgents (matched, case-insensitively, as a
    /// substring of the window's process name or title).
    Applications {
        /// Process or window names.
        applications: Vec<String>,
    },
    /// A third-party agent the HostAgent may assign a subtask to.
    Agent {
        /// When to use it, shown to the HostAgent.
        description: String,
    },
}

impl Transport {
    /// Whether it is a stdio server started on the task's desktop through its executor.
    pub fn on_desktop(&self) -> bool {
        matches!(self, Self::Stdio { on: Some(on), .. } if on == "desktop")
    }
}

impl McpServersFile {
    /// Reads and checks `path` (`.yaml`/`.yml`: YAML, otherwise JSON).
    pub fn load(path: &Path) -> Result<Self, McpConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| McpConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        Self::parse(&text, yaml).map_err(|e| match e {
            McpConfigError::Parse { message, .. } => McpConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses and checks a file's text.
    pub fn parse(text: &str, yaml: bool) -> Result<Self, McpConfigError> {
        let parsed: Self = if yaml {
            serde_yaml::from_str(text).map_err(|e| e.to_string())
        } else {
            serde_json::from_str(text).map_err(|e| e.to_string())
        }
        .map_err(|message| McpConfigError::Parse {
            path: PathBuf::new(),
            message,
        })?;
        parsed.check()?;
        Ok(parsed)
    }

    fn check(&self) -> Result<(), McpConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.servers {
            let invalid = |message: &str| McpConfigError::Invalid {
                name: s.name.clone(),
                message: message.to_owned(),
            };
            let good = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
            if s.name.is_empty() || !s.name.chars().all(good) || s.name.contains("__") {
                return Err(invalid(
                    "the name must be letters, digits, '-' and single '_'",
                ));
            }
            if !seen.insert(s.name.as_str()) {
                return Err(invalid("the name is used twice"));
            }
            match &s.transport {
                Transport::Stdio { command, .. } if command.is_empty() => {
                    return Err(invalid("stdio needs a command"));
                }
                Transport::Stdio { on: Some(on), .. } if on != "agent" && on != "desktop" => {
                    return Err(invalid(&format!(
                        "transport.on is {on:?}; it must be \"agent\" (a child beside the agent) or \"desktop\" (started through the task's executor)"
                    )));
                }
                Transport::Stdio {
                    on: Some(on),
                    command,
                    cwd,
                    ..
                } if on == "desktop"
                    && (command.contains('\0')
                        || cwd.as_ref().is_some_and(|c| c.to_str().is_none())) =>
                {
                    return Err(invalid(
                        "a desktop server's command and cwd must be text without NUL",
                    ));
                }
                Transport::Http { url, .. }
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    return Err(invalid("http needs an http:// or https:// url"));
                }
                _ => {}
            }
            match &s.bind {
                Binding::Applications { applications } if applications.is_empty() => {
                    return Err(invalid("an applications binding needs at least one name"));
                }
                Binding::Agent { description } if description.trim().is_empty() => {
                    return Err(invalid("an agent binding needs a description"));
                }
                _ => {}
            }
            if s.call_timeout_ms == Some(0) {
                return Err(invalid("call_timeout_ms must be positive"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_read_the_same_servers() {
        let yaml = r#"
servers:
  - name: files
    transport: {type: stdio, command: npx, args: [-y, "@modelcontextprotocol/server-filesystem", /tmp/out]}
    bind: {type: agent, description: Reads and writes files under /tmp/out}
  - name: calc
    transport: {type: http, url: "http://127.0.0.1:9000/mcp", token_file: /etc/ufo/calc.token}
    bind: {type: applications, applications: [soffice, Calc]}
    call_timeout_ms: 5000
"#;
        let from_yaml = McpServersFile::parse(yaml, true).expect("yaml");
        let json = serde_json::json!({"servers": [
            {"name": "files",
             "transport": {"type": "stdio", "command": "npx",
                           "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/out"]},
             "bind": {"type": "agent", "description": "Reads and writes files under /tmp/out"}},
            {"name": "calc",
             "transport": {"type": "http", "url": "http://127.0.0.1:9000/mcp",
                           "token_file": "/etc/ufo/calc.token"},
             "bind": {"type": "applications", "applications": ["soffice", "Calc"]},
             "call_timeout_ms": 5000}
        ]});
        let from_json = McpServersFile::parse(&json.to_string(), false).expect("json");
        assert_eq!(from_yaml, from_json);
        assert_eq!(from_yaml.servers.len(), 2);
        assert_eq!(from_yaml.servers[1].call_timeout_ms, Some(5000));
        assert!(!from_yaml.servers[0].transport.on_desktop());
        let desk = McpServersFile::parse(
            "servers:\n  - name: d\n    transport: {type: stdio, on: desktop, command: python3, args: [s.py]}\n    bind: {type: agent, description: D}\n",
            true,
        )
        .expect("desktop");
        assert!(desk.servers[0].transport.on_desktop());
    }

    #[test]
    fn bad_servers_are_refused_with_their_name() {
        let cases = [
            (
                r#"{"servers":[{"name":"a b","transport":{"type":"stdio","command":"x"},"bind":{"type":"agent","description":"d"}}]}"#,
                "name",
            ),
            (
                r#"{"servers":[{"name":"a","transport":{"type":"stdio","command":""},"bind":{"type":"agent","description":"d"}}]}"#,
                "command",
            ),
            (
                r#"{"servers":[{"name":"a","transport":{"type":"http","url":"ftp://x"},"bind":{"type":"agent","description":"d"}}]}"#,
                "url",
            ),
            (
                r#"{"servers":[{"name":"a","transport":{"type":"stdio","command":"x"},"bind":{"type":"applications","applications":[]}}]}"#,
                "applications",
            ),
            (
                r#"{"servers":[{"name":"a","transport":{"type":"stdio","command":"x"},"bind":{"type":"agent","description":" "}}]}"#,
                "description",
            ),
            (
                r#"{"servers":[{"name":"a","transport":{"type":"stdio","command":"x"},"bind":{"type":"agent","description":"d"}},{"name":"a","transport":{"type":"stdio","command":"x"},"bind":{"type":"agent","description":"d"}}]}"#,
                "twice",
            ),
        ];
        let cases = cases.into_iter().chain([(
            r#"{"servers":[{"name":"a","transport":{"type":"stdio","on":"laptop","command":"x"},"bind":{"type":"agent","description":"d"}}]}"#,
            "transport.on",
        )]);
        for (text, word) in cases {
            let e = McpServersFile::parse(text, false)
                .expect_err(text)
                .to_string();
            assert!(e.contains(word), "{e} should mention {word}");
        }
        let e = McpServersFile::parse(r#"{"servers":[{"name":"a"}]}"#, false)
            .expect_err("missing fields")
            .to_string();
        assert!(e.contains("missing field"), "{e}");
    }
}
