//! The built-in shell agent (the seed's `Bash`), off unless `--shell-agent`: a third-party agent the
//! HostAgent may assign a subtask to, whose loop (`round::third_step`, shared with MCP agents) offers the
//! model one tool, [`RUN`] (`shell__run`), running one allow-listed program on the desktop machine through
//! the executor's `run_command`. The executor enforces the allow-list, the argument rules, the working
//! directory, the timeout and the output cap itself (docs/mcp.md, "Shell"); the agent adds the consent
//! policy (by the name `shell__run` and argument patterns), intent before action and the step record.
//!
//! [`ShellDispatcher`] sits in front of the executor's dispatcher and sends `shell__run` as
//! `run_command`, so everything above it (policy, intents, records) sees `shell__run`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::dispatch::tools::ExecutorCatalog;
use crate::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError, ResultStatus};

/// The agent's name (its HostAgent target, its steps' `ThirdPartyAgent/shell`).
pub const AGENT: &str = "shell";
/// What prefixes the shell agent's action names.
pub const PREFIX: &str = "shell__";
/// Its one action.
pub const RUN: &str = "shell__run";
/// The executor's tool behind [`RUN`].
pub const EXECUTOR_TOOL: &str = "run_command";

/// The shell agent as the HostAgent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellAgent {
    /// When to use it (`--shell-agent-description`).
    pub description: String,
}

/// What `shell__run` does, for the model.
pub const RUN_DESCRIPTION: &str = "[shell] Run one program from the desktop machine's allow-list in its working directory, without a shell: `program` is the program's name, `args` each one argument (no pipes, `;`, `&&`, redirections or `$(...)`; paths must stay inside the working directory). Returns exit_code, stdout, stderr, truncated and timed_out.";

/// Routes [`RUN`] to the executor's `run_command` and passes everything else on unchanged; a command's
/// result is cut to its exit code, output (each stream at most `output_chars` characters) and flags.
pub struct ShellDispatcher {
    inner: Arc<dyn CommandDispatcher>,
    output_chars: usize,
}

impl std::fmt::Debug for ShellDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellDispatcher")
            .field("output_chars", &self.output_chars)
            .finish_non_exhaustive()
    }
}

impl ShellDispatcher {
    /// Sends `shell__run` through `inner` as `run_command`, keeping `output_chars` of each stream.
    pub fn new(inner: Arc<dyn CommandDispatcher>, output_chars: usize) -> Self {
        Self {
            inner,
            output_chars: output_chars.max(1),
        }
    }

    /// What the model reads of a run: exit code, the two streams (cut) and the flags.
    fn shown(&self, result: &Value) -> Value {
        let stream = |key: &str| {
            let text = result.get(key).and_then(Value::as_str).unwrap_or("");
            crate::mcp::truncate(text, self.output_chars)
        };
        let mut shown = Map::new();
        shown.insert("exit_code".into(), result["exit_code"].clone());
        shown.insert("stdout".into(), json!(stream("stdout")));
        shown.insert("stderr".into(), json!(stream("stderr")));
        for flag in ["truncated", "timed_out"] {
            if result.get(flag) == Some(&Value::Bool(true)) {
                shown.insert(flag.into(), json!(true));
            }
        }
        Value::Object(shown)
    }
}

#[async_trait]
impl CommandDispatcher for ShellDispatcher {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        let runs: Vec<bool> = commands.iter().map(|c| c.tool_name == RUN).collect();
        if !runs.contains(&true) {
            return self.inner.execute(commands).await;
        }
        let commands = commands
            .into_iter()
            .map(|mut c| {
                if c.tool_name == RUN {
                    EXECUTOR_TOOL.clone_into(&mut c.tool_name);
                }
                c
            })
            .collect();
        let mut results = self.inner.execute(commands).await?;
        for (r, run) in results.iter_mut().zip(runs) {
            if run && r.status == ResultStatus::Success {
                r.result = self.shown(&r.result);
            }
        }
        Ok(results)
    }

    async fn catalog(&self) -> Result<Arc<ExecutorCatalog>, DispatchError> {
        self.inner.catalog().await
    }
}
