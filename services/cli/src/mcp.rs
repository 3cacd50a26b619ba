//! `ufo mcp`: ufo's task tools ([`ufo_mcp_server`]) served to an MCP client over stdio, so a desktop MCP
//! client starts it as a command. Every tool calls the agent service through [`AgentClient`] with the
//! CLI's own settings (`--server`/`UFO_SERVER`, `--grpc`/`UFO_GRPC` for a task's events,
//! `--token`/`UFO_TOKEN`): the token's caller is the MCP client's caller. Stdout carries only MCP
//! messages; diagnostics go to stderr.

use futures::StreamExt as _;
use futures::stream::BoxStream;
use rmcp::ServiceExt as _;
use serde_json::Value;
use ufo_client::{AgentClient, ClientError, NewTask, Work};
use ufo_common::ErrorCode;
use ufo_mcp_server::{Image, ServerLimits, TaskApi, TaskOrder, TaskServer, ToolError};
use ufo_proto::v1::Event;

use crate::config::{Connection, McpArgs};
use crate::error::CliError;

/// The agent's API as the stdio server's tools see it.
#[derive(Debug, Clone)]
pub struct ClientTasks {
    api: AgentClient,
}

impl ClientTasks {
    /// Tools on `api` (which must know the gRPC address for run_task).
    pub fn new(api: AgentClient) -> Self {
        Self { api }
    }
}

fn tool_error(e: ClientError) -> ToolError {
    match e {
        ClientError::Api { code, message, .. } => ToolError::new(code, message),
        ClientError::Grpc { status, .. } => ToolError::new(
            ErrorCode::from_grpc(status.code()).as_str(),
            status.message(),
        ),
        e @ (ClientError::Unreachable { .. }
        | ClientError::GrpcUnreachable { .. }
        | ClientError::NotTheApi { .. }) => ToolError::new("unavailable", e.to_string()),
        e => ToolError::new("internal", e.to_string()),
    }
}

#[async_trait::async_trait]
impl TaskApi for ClientTasks {
    type Caller = ();

    fn caller(&self, _extensions: &rmcp::model::Extensions) -> Result<(), ToolError> {
        Ok(())
    }

    async fn submit(&self, _: &(), order: &TaskOrder) -> Result<Value, ToolError> {
        let work = match &order.replay_of {
            Some(of) => Work::Replay {
                of: of.clone(),
                on_mismatch: order.on_mismatch.clone(),
            },
            None => Work::Request(order.request.clone()),
        };
        let task = NewTask {
            work,
            executor: order.executor.clone(),
            max_steps: order.max_steps,
            max_cost: order.max_cost,
            timeout_seconds: order.timeout_seconds.map(u64::from),
            ..NewTask::default()
        };
        self.api.submit(&task).await.map_err(tool_error)
    }

    async fn get(&self, _: &(), id: &str) -> Result<Value, ToolError> {
        self.api.get(id).await.map_err(tool_error)
    }

    async fn list(
        &self,
        _: &(),
        status: Option<&str>,
        page_size: Option<u32>,
        page_token: Option<&str>,
    ) -> Result<Value, ToolError> {
        self.api
            .list(status, page_size, page_token)
            .await
            .map_err(tool_error)
    }

    async fn steps(&self, _: &(), id: &str, from: u64, limit: u32) -> Result<Value, ToolError> {
        self.api
            .steps(id, Some(from.max(1)), Some(limit.max(1)))
            .await
            .map_err(tool_error)
    }

    async fn answer(
        &self,
        _: &(),
        id: &str,
        question_ids: &[String],
        answers: &[String],
    ) -> Result<Value, ToolError> {
        self.api
            .answer(id, question_ids, answers)
            .await
            .map_err(tool_error)
    }

    async fn confirm(
        &self,
        _: &(),
        id: &str,
        action_id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<Value, ToolError> {
        let reason = (!reason.is_empty()).then_some(reason);
        self.api
            .confirm(id, action_id, approve, reason)
            .await
            .map_err(tool_error)
    }

    async fn cancel(&self, _: &(), id: &str, reason: &str) -> Result<Value, ToolError> {
        let reason = (!reason.is_empty()).then_some(reason);
        self.api.cancel(id, reason).await.map_err(tool_error)
    }

    async fn screenshot(
        &self,
        _: &(),
        id: &str,
        step: u64,
        kind: &str,
    ) -> Result<Image, ToolError> {
        let shot = self
            .api
            .screenshot(id, step, kind)
            .await
            .map_err(tool_error)?;
        let mime_type = if shot.content_type == "image/jpeg" {
            "image/jpeg"
        } else {
            "image/png"
        };
        Ok(Image {
            mime_type: mime_type.to_owned(),
            bytes: shot.bytes,
        })
    }

    fn desktop_tools(&self) -> bool {
        true
    }

    async fn desktop(
        &self,
        _: &(),
        call: &ufo_mcp_server::DesktopCall,
    ) -> Result<ufo_mcp_server::DesktopOutcome, ToolError> {
        use base64::Engine as _;
        let view = self
            .api
            .desktop_call(call.tool, &call.arguments)
            .await
            .map_err(tool_error)?;
        let answered = || {
            ToolError::new(
                "internal",
                "the agent answered a desktop call without its result",
            )
        };
        let recorded = match (
            view.get("session_id").and_then(Value::as_str),
            view.get("step").and_then(Value::as_u64),
        ) {
            (Some(session), Some(step)) => Some((session.to_owned(), step)),
            _ => None,
        };
        let mut images = Vec::new();
        for image in view
            .get("images")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(mime), Some(data)) = (
                image.get("mime_type").and_then(Value::as_str),
                image.get("data").and_then(Value::as_str),
            ) else {
                return Err(answered());
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|_| answered())?;
            images.push(Image {
                mime_type: mime.to_owned(),
                bytes,
            });
        }
        Ok(ufo_mcp_server::DesktopOutcome {
            result: view.get("result").cloned().ok_or_else(answered)?,
            images,
            recorded,
            executor_us: view.get("executor_us").and_then(Value::as_u64),
        })
    }

    async fn end_direct(&self, _: &(), executor: &str) -> Result<Value, ToolError> {
        let mut arguments = serde_json::Map::new();
        arguments.insert("executor".into(), Value::String(executor.to_owned()));
        let view = self
            .api
            .desktop_call(ufo_mcp_server::desktop::END_DIRECT_SESSION, &arguments)
            .await
            .map_err(tool_error)?;
        Ok(view.get("result").cloned().unwrap_or(Value::Null))
    }

    async fn events(
        &self,
        _: &(),
        id: &str,
        from_seq: u64,
    ) -> Result<BoxStream<'static, Result<Event, ToolError>>, ToolError> {
        let stream = self
            .api
            .stream_steps(id, from_seq)
            .await
            .map_err(tool_error)?;
        Ok(stream
            .map(|event| {
                event.map_err(|status| {
                    ToolError::new(
                        ErrorCode::from_grpc(status.code()).as_str(),
                        status.message(),
                    )
                })
            })
            .boxed())
    }
}

/// Serves the task tools on stdin/stdout until the client closes stdin.
pub async fn serve(api: AgentClient, conn: &Connection, args: McpArgs) -> Result<(), CliError> {
    let api = api.with_grpc(conn.grpc.clone());
    let limits = ServerLimits {
        max_argument_bytes: args.max_argument_bytes,
    };
    let server = TaskServer::new(ClientTasks::new(api), limits);
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| CliError::Protocol(format!("MCP stdio transport: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| CliError::Protocol(format!("MCP server stopped: {e}")))?;
    Ok(())
}
