//! ufo as an MCP server (Model Context Protocol, the official Rust SDK `rmcp`): the task tools any MCP
//! client can call, over any backend of the agent's task API.
//!
//! - [`api`]: what the tools need from the agent ([`TaskApi`]): the agent service implements it on its own
//!   task operations (streamable HTTP at `/mcp`), `ufo mcp` on the REST/gRPC client (stdio).
//! - [`tools`]: the tool catalogue (names, descriptions, JSON schemas) and their arguments, checked.
//! - [`desktop`]: the desktop tools (list_windows, click, ...), each call checked into executor commands
//!   that the backend runs on a registered executor ([`TaskApi::desktop`]).
//! - [`follow`]: `run_task`'s long call: a progress notification per step, questions and held actions as
//!   elicitations (or "waiting for you"), the outcome with the final screenshot.
//! - [`tasks`]: the MCP Tasks extension (SEP-2663) for `run_task` / `replay_task`: a task handle at once,
//!   `tasks/get`, `tasks/update`, `tasks/cancel` on the ufo task.
//! - [`server`]: the [`rmcp::ServerHandler`] tying them together.
//!
//! Errors are tool results with `isError` and the REST API's `{code, message}` body, so a model reads
//! the same words a REST caller does.

pub mod api;
pub mod desktop;
pub mod follow;
pub mod server;
pub mod tasks;
pub mod tools;

pub use api::{Image, TaskApi, TaskOrder, ToolError};
pub use desktop::{DesktopCall, DesktopCommand, DesktopOutcome};
pub use server::{ServerLimits, TaskServer};
