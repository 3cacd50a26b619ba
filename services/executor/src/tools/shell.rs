//! The shell agent's tool (the seed's `Bash`): running one allow-listed program on the desktop machine,
//! without a shell, under the executor's own rules ([`crate::shell`]). Off unless the executor is started
//! with `--shell-allow` and `--shell-workdir`.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Cx, Kind, Output, ToolDef, ToolError};

/// What is kept of the command's deadline for reporting its end (so a command cut at the deadline is
/// reported as timed out rather than the whole tool as late).
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommand {
    /// A program from the executor's shell allow-list (a bare name, or an absolute path on the list).
    pub program: String,
    /// Its arguments, each passed as one argument (no shell: no pipes, operators or redirections);
    /// paths must stay inside the working directory.
    #[serde(default)]
    pub args: Vec<String>,
    /// Kill it after this many milliseconds (at most the executor's `--shell-timeout-ms`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// What `run_command` ran and what it printed.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CommandRun {
    /// The program started (resolved).
    pub program: String,
    /// Its process id, when the system gave one.
    pub pid: Option<u32>,
    /// Its exit code; null when it was killed.
    pub exit_code: Option<i32>,
    /// Its standard output (lossy UTF-8), at most `--shell-max-output-bytes`.
    pub stdout: String,
    /// Its standard error (lossy UTF-8), at most `--shell-max-output-bytes`.
    pub stderr: String,
    /// Bytes it wrote to standard output in all.
    pub stdout_bytes: u64,
    /// Bytes it wrote to standard error in all.
    pub stderr_bytes: u64,
    /// Output was cut at the cap (the rest was read and discarded).
    pub truncated: bool,
    /// It was killed at its timeout.
    pub timed_out: bool,
    /// How long it ran, in milliseconds.
    pub elapsed_ms: u64,
}

impl ToolDef for RunCommand {
    const NAME: &'static str = "run_command";
    const DESCRIPTION: &'static str = "Run one allow-listed program with arguments in the executor's working directory (no shell); returns exit code, stdout and stderr.";
    const KIND: Kind = Kind::Inert;
    type Output = CommandRun;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let shell = &cx.exec.shell;
        let checked = shell
            .check(&self.program, &self.args)
            .map_err(|e| ToolError::invalid(Self::NAME, e.to_string()))?;
        let mut warnings = Vec::new();
        let mut timeout = shell.timeout;
        match self.timeout_ms.map(Duration::from_millis) {
            Some(asked) if asked.is_zero() => {
                return Err(ToolError::invalid(
                    Self::NAME,
                    crate::shell::ShellError::ZeroTimeout.to_string(),
                ));
            }
            Some(asked) if asked > timeout => warnings.push(format!(
                "timeout_ms {} is above the executor's limit; {} ms used",
                asked.as_millis(),
                timeout.as_millis()
            )),
            Some(asked) => timeout = asked,
            None => {}
        }
        let left = cx
            .deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(DEADLINE_MARGIN);
        timeout = timeout.min(left.max(Duration::from_millis(1)));
        let span = tracing::info_span!(
            "executor.shell",
            program = %self.program,
            args = self.args.len(),
            timeout_ms = timeout.as_millis() as u64,
            exit_code = tracing::field::Empty,
            timed_out = tracing::field::Empty,
        );
        let ran = tracing::Instrument::instrument(shell.run(&checked, timeout), span.clone())
            .await
            .map_err(|e| ToolError::Spawn(self.program.clone(), e))?;
        span.record("timed_out", ran.timed_out);
        if let Some(code) = ran.exit_code {
            span.record("exit_code", code);
        }
        let truncated = ran.stdout.truncated() || ran.stderr.truncated();
        Ok(Output::warned(
            CommandRun {
                program: checked.program.display().to_string(),
                pid: ran.pid,
                exit_code: ran.exit_code,
                stdout: String::from_utf8_lossy(&ran.stdout.kept).into_owned(),
                stderr: String::from_utf8_lossy(&ran.stderr.kept).into_owned(),
                stdout_bytes: ran.stdout.total,
                stderr_bytes: ran.stderr.total,
                truncated,
                timed_out: ran.timed_out,
                elapsed_ms: u64::try_from(ran.elapsed.as_millis()).unwrap_or(u64::MAX),
            },
            warnings,
        ))
    }
}
