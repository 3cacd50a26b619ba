//! The MCP desktop tools' backend ([`ufo_mcp_server::desktop`]): a checked call runs as one command batch
//! on an executor of the operator's registry, named by the caller (never an address, never a token of the
//! caller's), through the same gRPC dispatcher the runner uses, after the operator's consent policy
//! (`--policy-file`) judged every command: `deny` is refused (`permission_denied`), `confirm` too
//! (`failed_precondition`, "needs confirmation": a direct call has no person to hold it for; run it as a
//! task to be asked). The executor applies its own launch allow-list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tracing::instrument;
use ufo_mcp_server::{DesktopCall, DesktopOutcome, Image, ToolError};

use crate::agents::policy::{Policy, Verdict};
use crate::dispatch::registry::ExecutorRegistry;
use crate::dispatch::{Command, CommandDispatcher, ResultStatus};

/// What desktop calls need: the policy and how to reach executors.
pub struct Desktop {
    policy: Arc<Policy>,
    executors: Arc<ExecutorRegistry>,
    deadline_ms: u32,
    max_message_bytes: usize,
    retry_budget: Duration,
    dispatchers: Mutex<HashMap<String, Arc<dyn CommandDispatcher>>>,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop").finish_non_exhaustive()
    }
}

impl Desktop {
    /// Desktop calls with `policy` on the executors of `executors`, with the runner's executor settings.
    pub fn new(
        policy: Arc<Policy>,
        executors: Arc<ExecutorRegistry>,
        runner: &crate::config::RunnerConfig,
    ) -> Self {
        Self {
            policy,
            executors,
            deadline_ms: runner.executor_deadline_ms,
            max_message_bytes: runner.executor_max_message_bytes,
            retry_budget: Duration::from_millis(runner.executor_retry_budget_ms),
            dispatchers: Mutex::new(HashMap::new()),
        }
    }

    /// The dispatcher of the registered executor `name` (an address is refused).
    fn dispatcher(&self, name: &str) -> Result<Arc<dyn CommandDispatcher>, ToolError> {
        let (resolved, _) = self
            .executors
            .resolve(name)
            .map_err(|e| ToolError::invalid(format!("executor: {e}")))?;
        if resolved.is_empty() || resolved != name {
            return Err(ToolError::invalid(format!(
                "executor must be the name of an executor the operator registered, not an address ({name:?})"
            )));
        }
        let mut cache = self
            .dispatchers
            .lock()
            .map_err(|_| ToolError::new("internal", "the executor cache is poisoned"))?;
        if let Some(d) = cache.get(name) {
            return Ok(d.clone());
        }
        let conn = self
            .executors
            .connection(name, "")
            .map_err(|e| ToolError::invalid(format!("executor: {e}")))?;
        let d = self
            .executors
            .dispatcher(&conn, self.deadline_ms, self.max_message_bytes)
            .map_err(|e| ToolError::new("unavailable", format!("executor {name}: {e}")))?;
        let d: Arc<dyn CommandDispatcher> = Arc::new(d.with_retry_budget(self.retry_budget));
        cache.insert(name.to_owned(), d.clone());
        Ok(d)
    }

    /// Judges and runs `call`: the last command's result and every screenshot.
    #[instrument(skip_all, fields(tool = call.tool, executor = %call.executor))]
    pub async fn run(&self, call: &DesktopCall) -> Result<DesktopOutcome, ToolError> {
        let judgement = self
            .policy
            .judge_batch(call.commands.iter().map(|c| (c.tool, &c.parameters)));
        match judgement.verdict {
            Verdict::Allow => {}
            Verdict::Deny => {
                return Err(ToolError::new(
                    "permission_denied",
                    format!("{}: {}", call.tool, judgement.reason()),
                ));
            }
            Verdict::Confirm => {
                return Err(ToolError::new(
                    "failed_precondition",
                    format!(
                        "{} needs confirmation: {}; a direct call cannot be held for a person, run it as a task (run_task)",
                        call.tool,
                        judgement.reason()
                    ),
                ));
            }
        }
        let dispatcher = self.dispatcher(&call.executor)?;
        let commands = call
            .commands
            .iter()
            .map(|c| {
                let p = Value::Object(c.parameters.clone());
                if c.action {
                    Command::act(c.tool, p)
                } else {
                    Command::observe(c.tool, p)
                }
            })
            .collect();
        let results = dispatcher
            .execute(commands)
            .await
            .map_err(|e| ToolError::new("unavailable", format!("{}: {e}", call.tool)))?;
        if let Some(failed) = results.iter().find(|r| r.status != ResultStatus::Success) {
            return Err(ToolError::new(
                "failed_precondition",
                format!("{}: the executor refused: {}", call.tool, failed.error),
            ));
        }
        let images = results
            .iter()
            .flat_map(|r| r.images.iter())
            .map(|s| Image {
                mime_type: s.mime.clone(),
                bytes: s.bytes.to_vec(),
            })
            .collect();
        let last = results.last().map(|r| r.to_json()).unwrap_or(Value::Null);
        Ok(DesktopOutcome {
            result: last.get("result").cloned().unwrap_or(json!(null)),
            images,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn desktop(policy: &str) -> Desktop {
        let config = crate::Config::parse_from([
            "ufo-agent",
            "--insecure-no-auth",
            "--executors",
            "desk=http://127.0.0.1:9",
        ]);
        Desktop::new(
            Arc::new(Policy::parse(policy).unwrap()),
            Arc::new(ExecutorRegistry::from_config(&config).unwrap()),
            &config.runner,
        )
    }

    fn call(tool: &str, arguments: Value) -> DesktopCall {
        let Value::Object(arguments) = arguments else {
            panic!("an object")
        };
        ufo_mcp_server::desktop::call(tool, Some(&arguments))
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn the_policy_refuses_confirm_and_deny_before_the_executor_is_reached() {
        let d = desktop(r#"{"tools": {"click_input": "confirm", "launch_application": "deny"}}"#);
        // Nothing listens on port 9: a call that got past the policy would be `unavailable`.
        let e = d
            .run(&call("click", json!({"executor": "desk", "control": "3"})))
            .await
            .unwrap_err();
        assert_eq!(e.code, "failed_precondition", "{e}");
        assert!(e.message.contains("click needs confirmation"), "{e}");
        let e = d
            .run(&call(
                "launch_app",
                json!({"executor": "desk", "name": "mousepad"}),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code, "permission_denied", "{e}");
        assert!(e.message.contains("denies launch_application"), "{e}");
        let e = d
            .run(&call("list_windows", json!({"executor": "elsewhere"})))
            .await
            .unwrap_err();
        assert!(e.message.contains("not a registered executor name"), "{e}");
    }
}
