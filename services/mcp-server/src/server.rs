//! The MCP server: the task tools of [`crate::tools`] on a [`TaskApi`], as an [`rmcp::ServerHandler`]
//! that any rmcp transport serves (stdio in `ufo mcp`, streamable HTTP at the agent's `/mcp`).

use std::sync::Arc;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, InitializeResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::api::{TaskApi, ToolError};
use crate::follow::Follower;
use crate::tools::{self, parse};

/// Limits of the server's own (every transport's) checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest accepted tool arguments, serialized as JSON, in bytes.
    pub max_argument_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_argument_bytes: 1024 * 1024,
        }
    }
}

/// ufo's task tools on `A`.
pub struct TaskServer<A: TaskApi> {
    api: Arc<A>,
    limits: ServerLimits,
    tools: Arc<Vec<Tool>>,
}

impl<A: TaskApi> Clone for TaskServer<A> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            limits: self.limits,
            tools: self.tools.clone(),
        }
    }
}

impl<A: TaskApi> std::fmt::Debug for TaskServer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServer")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A tool error: `isError` with the REST body `{code, message}` as text and as structured content.
pub fn error_result(error: &ToolError) -> CallToolResult {
    let body = error.body();
    let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    result.structured_content = Some(body);
    result
}

fn json_result(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}

fn id_of(task: &Value) -> Result<String, ToolError> {
    task.get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::new("internal", "the service answered a task without an id"))
}

fn desktop_result(
    call: &crate::desktop::DesktopCall,
    outcome: crate::desktop::DesktopOutcome,
) -> CallToolResult {
    let recorded = match &outcome.recorded {
        Some((session, step)) => format!(" (recorded as step {step} of direct session {session})"),
        None => String::new(),
    };
    let mut content = vec![ContentBlock::text(format!(
        "{} on {}{recorded}: {}",
        call.tool, call.executor, outcome.result
    ))];
    for image in &outcome.images {
        content.push(ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(&image.bytes),
            image.mime_type.clone(),
        ));
    }
    let mut result = CallToolResult::success(content);
    let mut structured = json!({
        "tool": call.tool, "executor": call.executor, "result": outcome.result,
    });
    if let Some((session, step)) = outcome.recorded {
        structured["session_id"] = json!(session);
        structured["step"] = json!(step);
    }
    if let Some(us) = outcome.executor_us {
        structured["executor_us"] = json!(us);
    }
    result.structured_content = Some(structured);
    result
}

impl<A: TaskApi> TaskServer<A> {
    /// The tools on `api`.
    pub fn new(api: A, limits: ServerLimits) -> Self {
        Self {
            limits,
            tools: Arc::new({
                let mut all = tools::catalogue();
                if api.desktop_tools() {
                    all.extend(crate::desktop::catalogue());
                }
                all
            }),
            api: Arc::new(api),
        }
    }

    fn check_size(&self, arguments: Option<&JsonObject>) -> Result<(), ToolError> {
        let Some(arguments) = arguments else {
            return Ok(());
        };
        let size = serde_json::to_vec(arguments).map_or(0, |b| b.len());
        if size > self.limits.max_argument_bytes {
            return Err(ToolError::invalid(format!(
                "the arguments are {size} bytes; at most {} are accepted",
                self.limits.max_argument_bytes
            )));
        }
        Ok(())
    }

    async fn dispatch(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        let caller = self.api.caller(&context.extensions)?;
        let arguments = request.arguments.as_ref();
        self.check_size(arguments)?;
        let api = self.api.as_ref();
        let name = request.name.as_ref();
        if let Some(call) = crate::desktop::call(name, arguments) {
            let call = call?;
            let outcome = api.desktop(&caller, &call).await?;
            return Ok(desktop_result(&call, outcome));
        }
        if name == crate::desktop::END_DIRECT_SESSION && api.desktop_tools() {
            let executor = crate::desktop::end_call(arguments)?;
            return api.end_direct(&caller, &executor).await.map(json_result);
        }
        match name {
            tools::RUN_TASK => {
                let order = parse::<tools::RunArgs>(name, arguments)?.order()?;
                let task = api.submit(&caller, &order).await?;
                Follower::new(api, &caller, context, id_of(&task)?, true)
                    .run()
                    .await
            }
            tools::REPLAY_TASK => {
                let order = parse::<tools::ReplayArgs>(name, arguments)?.order()?;
                let task = api.submit(&caller, &order).await?;
                Follower::new(api, &caller, context, id_of(&task)?, true)
                    .run()
                    .await
            }
            tools::FOLLOW_TASK => {
                let args: tools::TaskArgs = parse(name, arguments)?;
                // Another caller's task is "not found" before anything is streamed.
                let task = api.get(&caller, &args.task_id).await?;
                Follower::new(api, &caller, context, id_of(&task)?, false)
                    .run()
                    .await
            }
            tools::ANSWER_TASK => {
                let args: tools::AnswerArgs = parse(name, arguments)?;
                api.answer(&caller, &args.task_id, &args.question_ids, &args.answers)
                    .await
                    .map(json_result)
            }
            tools::DECIDE_ACTION => {
                let args: tools::DecideArgs = parse(name, arguments)?;
                api.confirm(
                    &caller,
                    &args.task_id,
                    &args.action_id,
                    args.approve,
                    args.reason.as_deref().unwrap_or_default(),
                )
                .await
                .map(json_result)
            }
            tools::GET_TASK => {
                let args: tools::TaskArgs = parse(name, arguments)?;
                api.get(&caller, &args.task_id).await.map(json_result)
            }
            tools::LIST_TASKS => {
                let args: tools::ListArgs = parse(name, arguments)?;
                if args.page_size == Some(0) {
                    return Err(ToolError::invalid("page_size must be at least 1"));
                }
                api.list(
                    &caller,
                    args.status.as_deref(),
                    args.page_size,
                    args.page_token.as_deref(),
                )
                .await
                .map(json_result)
            }
            tools::CANCEL_TASK => {
                let args: tools::CancelArgs = parse(name, arguments)?;
                api.cancel(
                    &caller,
                    &args.task_id,
                    args.reason.as_deref().unwrap_or_default(),
                )
                .await
                .map(json_result)
            }
            tools::TASK_SCREENSHOT => {
                let args: tools::ScreenshotArgs = parse(name, arguments)?;
                self.screenshot(&caller, args).await
            }
            other => Err(ToolError::new(
                "not_found",
                format!("no tool named {other:?}; tools/list names them"),
            )),
        }
    }

    /// `run_task` or `replay_task` for a client that asked for a task: submits the task and returns its
    /// handle at once ([`crate::tasks`]).
    async fn start_task(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CreateTaskResult, ToolError> {
        let caller = self.api.caller(&context.extensions)?;
        let arguments = request.arguments.as_ref();
        self.check_size(arguments)?;
        let name = request.name.as_ref();
        let order = if name == tools::RUN_TASK {
            parse::<tools::RunArgs>(name, arguments)?.order()?
        } else {
            parse::<tools::ReplayArgs>(name, arguments)?.order()?
        };
        let task = self.api.submit(&caller, &order).await?;
        tracing::info!(task_id = %id_of(&task)?, "task handle returned (tasks extension)");
        crate::tasks::created(&task)
    }

    async fn screenshot(
        &self,
        caller: &A::Caller,
        args: tools::ScreenshotArgs,
    ) -> Result<CallToolResult, ToolError> {
        if args.step == 0 {
            return Err(ToolError::invalid("step must be at least 1"));
        }
        let kind = match args.kind {
            Some(kind) => kind,
            None => {
                let page = self.api.steps(caller, &args.task_id, args.step, 1).await?;
                let kinds: Vec<String> = page
                    .get("steps")
                    .and_then(Value::as_array)
                    .and_then(|s| s.first())
                    .and_then(|s| s.get("screenshots"))
                    .and_then(Value::as_array)
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                ["desktop", "clean", "annotated"]
                    .into_iter()
                    .find(|k| kinds.iter().any(|have| have == k))
                    .unwrap_or("clean")
                    .to_owned()
            }
        };
        let image = self
            .api
            .screenshot(caller, &args.task_id, args.step, &kind)
            .await?;
        let size = image.bytes.len();
        let mut result = CallToolResult::success(vec![
            ContentBlock::text(format!(
                "step {} of task {}: {kind} screenshot ({size} bytes, {})",
                args.step, args.task_id, image.mime_type
            )),
            ContentBlock::image(
                base64::engine::general_purpose::STANDARD.encode(&image.bytes),
                image.mime_type.clone(),
            ),
        ]);
        result.structured_content = Some(json!({
            "task_id": args.task_id, "step": args.step, "kind": kind,
            "mime_type": image.mime_type, "bytes": size,
        }));
        Ok(result)
    }
}

impl<A: TaskApi> ServerHandler for TaskServer<A> {
    fn get_info(&self) -> ServerConfig {
        let mut info = InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                // SEP-2663: run_task and replay_task return a task handle to clients that ask for one.
                .enable_tasks()
                .build(),
        )
            .with_instructions(
                "ufo runs whole desktop tasks: run_task takes a request in plain words and reports each \
                 step; answer its questions and approve its risky actions when asked.",
            );
        info.server_info = Implementation::new("ufo", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let span = tracing::info_span!("mcp.tool_call", tool = %request.name, is_error = tracing::field::Empty);
        let name = request.name.as_ref();
        if (name == tools::RUN_TASK || name == tools::REPLAY_TASK)
            && crate::tasks::requested(&context)
        {
            let started = self
                .start_task(&request, &context)
                .instrument(span.clone())
                .await;
            return Ok(match started {
                Ok(task) => CallToolResponse::Task(task),
                Err(error) => {
                    tracing::info!(parent: &span, code = %error.code, message = %error.message, "tool error");
                    span.record("is_error", true);
                    CallToolResponse::Complete(error_result(&error))
                }
            });
        }
        let result = self
            .dispatch(&request, &context)
            .instrument(span.clone())
            .await;
        let result = match result {
            Ok(result) => result,
            Err(error) => {
                tracing::info!(parent: &span, code = %error.code, message = %error.message, "tool error");
                error_result(&error)
            }
        };
        span.record("is_error", result.is_error.unwrap_or(false));
        Ok(CallToolResponse::Complete(result))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let span = tracing::info_span!("mcp.tasks_get", task_id = %request.task_id);
        async {
            let caller = self.api.caller(&context.extensions)?;
            crate::tasks::get(self.api.as_ref(), &caller, &request.task_id).await
        }
        .instrument(span)
        .await
        .map_err(|e| crate::tasks::rpc_error(&e))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = tracing::info_span!("mcp.tasks_update", task_id = %request.task_id);
        async {
            let caller = self.api.caller(&context.extensions)?;
            crate::tasks::update(
                self.api.as_ref(),
                &caller,
                &request.task_id,
                &request.input_responses,
            )
            .await
        }
        .instrument(span)
        .await
        .map_err(|e| crate::tasks::rpc_error(&e))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = tracing::info_span!("mcp.tasks_cancel", task_id = %request.task_id);
        async {
            let caller = self.api.caller(&context.extensions)?;
            crate::tasks::cancel(self.api.as_ref(), &caller, &request.task_id).await
        }
        .instrument(span)
        .await
        .map_err(|e| crate::tasks::rpc_error(&e))
    }
}
