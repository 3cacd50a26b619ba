//! Programs the caller talks to over their standard input and output (the agent's MCP servers that run
//! on the desktop's side, docs/mcp.md): `process_start`, `process_write`, `process_read` (a long poll)
//! and `process_stop`. Off unless the executor is started with `--mcp-stdio-allow`; the rules are in
//! [`crate::process`]. A batch of only these tools does not wait for the desktop's other batches.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Cx, Kind, Output, ToolDef, ToolError};

/// What is kept of a read's deadline for answering.
const DEADLINE_MARGIN: Duration = Duration::from_millis(250);

fn refused(tool: &'static str, e: crate::process::ProcessError) -> ToolError {
    ToolError::invalid(tool, e.to_string())
}

/// `process_start`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessStart {
    /// A program on the executor's `--mcp-stdio-allow` list (a bare name, or an absolute path on the
    /// list), started directly (no shell).
    pub program: String,
    /// Its arguments, each passed as one argument.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the executor's environment for it (which it gets without the executor's
    /// own `UFO_EXECUTOR_*` settings).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory: an absolute path inside one of the executor's `--mcp-stdio-workdirs`
    /// (default: the executor's own).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A started process.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProcessStarted {
    /// Its id for `process_write`, `process_read` and `process_stop` (only this caller may use it).
    pub process_id: String,
    /// Its system process id.
    pub pid: Option<u32>,
    /// The program started (resolved).
    pub program: String,
}

impl ToolDef for ProcessStart {
    const NAME: &'static str = "process_start";
    const DESCRIPTION: &'static str = "Start an allow-listed program (an MCP server) on the desktop's machine, its standard input and output piped to the caller.";
    const KIND: Kind = Kind::Inert;
    type Output = ProcessStarted;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let started = cx
            .exec
            .processes
            .start(
                cx.caller,
                &self.program,
                &self.args,
                &self.env,
                self.cwd.as_deref(),
            )
            .map_err(|e| refused(Self::NAME, e))?;
        Ok(ProcessStarted {
            process_id: started.id,
            pid: started.pid,
            program: started.program,
        }
        .into())
    }
}

/// `process_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessWrite {
    /// The process.
    pub process_id: String,
    /// Where `data` starts in everything written to it (what was already written is skipped).
    pub offset: u64,
    /// Text for its standard input.
    pub data: String,
}

/// After a write.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProcessWritten {
    /// Bytes written to its input in all.
    pub offset: u64,
}

impl ToolDef for ProcessWrite {
    const NAME: &'static str = "process_write";
    const DESCRIPTION: &'static str =
        "Write text to the standard input of a process this caller started.";
    const KIND: Kind = Kind::Inert;
    type Output = ProcessWritten;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let offset = cx
            .exec
            .processes
            .write(cx.caller, &self.process_id, self.offset, &self.data)
            .await
            .map_err(|e| refused(Self::NAME, e))?;
        Ok(ProcessWritten { offset }.into())
    }
}

/// `process_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessRead {
    /// The process.
    pub process_id: String,
    /// Where to read from in everything it wrote (what is before it is acknowledged and dropped).
    pub offset: u64,
    /// Wait up to this long for a whole line or its end (bounded by the command's deadline and the
    /// executor's idle time).
    #[serde(default)]
    pub max_wait_ms: u64,
}

/// What a process wrote.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProcessOutput {
    /// Whole lines of its standard output (at most `--mcp-stdio-max-read-bytes`, one longer line alone).
    pub data: String,
    /// The offset after `data` (the next read's).
    pub offset: u64,
    /// It ended: nothing more will come (the id is no longer valid).
    pub eof: bool,
    /// Its exit code at the end (null: killed).
    pub exit_code: Option<i32>,
    /// At the end: how it ended and the last of its standard error.
    pub reason: String,
}

impl ToolDef for ProcessRead {
    const NAME: &'static str = "process_read";
    const DESCRIPTION: &'static str = "Read whole lines a process this caller started wrote to its standard output, waiting up to max_wait_ms.";
    const KIND: Kind = Kind::Inert;
    type Output = ProcessOutput;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let processes = &cx.exec.processes;
        let left = cx
            .deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(DEADLINE_MARGIN);
        let wait = Duration::from_millis(self.max_wait_ms)
            .min(left)
            .min(processes.config().idle / 2);
        let read = processes
            .read(cx.caller, &self.process_id, self.offset, wait)
            .await
            .map_err(|e| refused(Self::NAME, e))?;
        Ok(ProcessOutput {
            data: read.data,
            offset: read.offset,
            eof: read.eof,
            exit_code: read.exit_code,
            reason: read.reason,
        }
        .into())
    }
}

/// `process_stop`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessStop {
    /// The process.
    pub process_id: String,
}

/// A stopped process.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProcessStopped {
    /// The last of its standard error.
    pub stderr: String,
}

impl ToolDef for ProcessStop {
    const NAME: &'static str = "process_stop";
    const DESCRIPTION: &'static str = "Kill a process this caller started, with its process group.";
    const KIND: Kind = Kind::Inert;
    type Output = ProcessStopped;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let stderr = cx
            .exec
            .processes
            .stop(cx.caller, &self.process_id)
            .map_err(|e| refused(Self::NAME, e))?;
        Ok(ProcessStopped { stderr }.into())
    }
}
