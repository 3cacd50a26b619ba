//! A stdio MCP server on the task's desktop (`transport: {type: stdio, on: desktop}`): started by the
//! task's executor (`process_start`, under the executor's own `--mcp-stdio-allow` list) and spoken to
//! through the same command path as every other executor call, so it works alike over a dial-in
//! connection and a dial-out stream. rmcp runs over one end of an in-memory pipe; two pumps carry the
//! other end's bytes: whole lines written by rmcp go out as `process_write` (each with its offset, so a
//! retried write is harmless), and `process_read` long-polls bring the server's lines back (each read
//! acknowledging what came before it). The server's end (`eof`, with its exit code and the last of its
//! stderr) or a refused call closes the pipe, so rmcp sees the connection close and the server is started
//! again after its backoff. Dropping the [`DesktopProcess`] stops the pumps and the process
//! (`process_stop`); if the agent dies instead, the executor kills it once it is idle.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, ReadHalf, WriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::dispatch::{Command, CommandDispatcher, execute_one};

/// The longest a `process_read` waits for a line (the executor also bounds it by the command's
/// deadline and half its idle time).
const READ_WAIT_MS: u64 = 5_000;
/// Bytes the in-memory pipe holds each way.
const PIPE_BYTES: usize = 256 * 1024;

/// Why the process could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// The executor could not be reached.
    #[error("the executor could not be reached: {0}")]
    Dispatch(String),
    /// The executor refused or failed the call.
    #[error("{0}")]
    Refused(String),
    /// The executor's answer lacks a field.
    #[error("the executor's {tool} answer has no {field}")]
    Answer {
        /// The tool.
        tool: &'static str,
        /// The field.
        field: &'static str,
    },
}

/// Runs one tool on the executor; its result, or why not.
async fn call(
    exec: &dyn CommandDispatcher,
    tool: &'static str,
    params: Value,
) -> Result<Value, DesktopError> {
    // A read is repeatable (it carries its offset): retried like an observation.
    let command = if tool == "process_read" {
        Command::observe(tool, params)
    } else {
        Command::act(tool, params)
    };
    let r = execute_one(exec, command)
        .await
        .map_err(|e| DesktopError::Dispatch(e.to_string()))?;
    if r.is_success() {
        Ok(r.result)
    } else {
        Err(DesktopError::Refused(r.error))
    }
}

/// A started server process and the pumps that carry its bytes; stopped when dropped.
pub struct DesktopProcess {
    exec: Arc<dyn CommandDispatcher>,
    id: String,
    stop: CancellationToken,
    /// How it ended, once it did (for the reason it is unavailable).
    ended: Arc<std::sync::Mutex<Option<String>>>,
}

impl std::fmt::Debug for DesktopProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesktopProcess")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl DesktopProcess {
    /// Starts `command` on the executor behind `exec` and the pumps; returns the process and rmcp's
    /// end of the pipe.
    pub async fn start(
        exec: Arc<dyn CommandDispatcher>,
        server: &str,
        command: &str,
        args: &[String],
        env: &std::collections::BTreeMap<String, String>,
        cwd: Option<&std::path::Path>,
        read_wait: Duration,
    ) -> Result<(Self, DuplexStream), DesktopError> {
        let mut params = json!({"program": command, "args": args, "env": env});
        if let Some(dir) = cwd {
            params["cwd"] = json!(dir.display().to_string());
        }
        let started = call(exec.as_ref(), "process_start", params).await?;
        let id = started["process_id"]
            .as_str()
            .ok_or(DesktopError::Answer {
                tool: "process_start",
                field: "process_id",
            })?
            .to_owned();
        tracing::info!(server, process = %id, pid = %started["pid"], program = %started["program"], "MCP server started on the desktop");
        let (client, pumped) = tokio::io::duplex(PIPE_BYTES);
        let (from_rmcp, to_rmcp) = tokio::io::split(pumped);
        let stop = CancellationToken::new();
        let ended = Arc::new(std::sync::Mutex::new(None));
        let span = tracing::info_span!("mcp.desktop_process", server, process = %id);
        tokio::spawn(
            write_pump(
                exec.clone(),
                id.clone(),
                from_rmcp,
                stop.clone(),
                ended.clone(),
            )
            .instrument(span.clone()),
        );
        let wait = read_wait.min(Duration::from_millis(READ_WAIT_MS));
        tokio::spawn(
            read_pump(
                exec.clone(),
                id.clone(),
                to_rmcp,
                wait,
                stop.clone(),
                ended.clone(),
            )
            .instrument(span),
        );
        Ok((
            Self {
                exec,
                id,
                stop,
                ended,
            },
            client,
        ))
    }

    /// How it ended, once it did.
    pub fn ended(&self) -> Option<String> {
        self.ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for DesktopProcess {
    fn drop(&mut self) {
        self.stop.cancel();
        let exec = self.exec.clone();
        let id = self.id.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(
                async move {
                    match call(exec.as_ref(), "process_stop", json!({"process_id": id})).await {
                        Ok(_) => tracing::info!(process = %id, "MCP server on the desktop stopped"),
                        // It ended already (or the executor is gone: it kills it when idle).
                        Err(e) => tracing::debug!(process = %id, reason = %e, "process_stop"),
                    }
                }
                .instrument(tracing::info_span!("mcp.desktop_stop")),
            );
        }
    }
}

fn note(ended: &std::sync::Mutex<Option<String>>, why: String) {
    let mut slot = ended
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(why);
    }
}

/// rmcp's whole lines → `process_write`.
async fn write_pump(
    exec: Arc<dyn CommandDispatcher>,
    id: String,
    mut from_rmcp: ReadHalf<DuplexStream>,
    stop: CancellationToken,
    ended: Arc<std::sync::Mutex<Option<String>>>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        let n = tokio::select! {
            () = stop.cancelled() => return,
            r = from_rmcp.read(&mut chunk) => r.unwrap_or(0),
        };
        if n == 0 {
            return;
        }
        pending.extend_from_slice(&chunk[..n]);
        let Some(last) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        let lines: Vec<u8> = pending.drain(..=last).collect();
        let data = String::from_utf8_lossy(&lines).into_owned();
        let len = data.len() as u64;
        let wrote = tokio::select! {
            () = stop.cancelled() => return,
            r = call(exec.as_ref(), "process_write", json!({"process_id": id, "offset": offset, "data": data})) => r,
        };
        match wrote {
            Ok(_) => offset += len,
            Err(e) => {
                note(&ended, format!("writing to it failed: {e}"));
                stop.cancel();
                return;
            }
        }
    }
}

/// `process_read` → rmcp; closes rmcp's input at the end.
async fn read_pump(
    exec: Arc<dyn CommandDispatcher>,
    id: String,
    mut to_rmcp: WriteHalf<DuplexStream>,
    wait: Duration,
    stop: CancellationToken,
    ended: Arc<std::sync::Mutex<Option<String>>>,
) {
    let mut offset = 0u64;
    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(READ_WAIT_MS);
    loop {
        let read = tokio::select! {
            () = stop.cancelled() => break,
            r = call(exec.as_ref(), "process_read", json!({"process_id": id, "offset": offset, "max_wait_ms": wait_ms})) => r,
        };
        let out = match read {
            Ok(out) => out,
            Err(e) => {
                note(&ended, format!("reading from it failed: {e}"));
                break;
            }
        };
        if let Some(data) = out["data"].as_str().filter(|d| !d.is_empty())
            && to_rmcp.write_all(data.as_bytes()).await.is_err()
        {
            break;
        }
        if let Some(next) = out["offset"].as_u64() {
            offset = next;
        }
        if out["eof"].as_bool() == Some(true) {
            let reason = out["reason"].as_str().unwrap_or("it ended").to_owned();
            tracing::info!(process = %id, %reason, "MCP server on the desktop ended");
            note(&ended, format!("it ended on the desktop: {reason}"));
            break;
        }
    }
    stop.cancel();
    let _ = to_rmcp.shutdown().await;
}
