//! Test support shared by this crate's tests and other suites (the end-to-end tests of the task runner).
//!
//! - [`scripted_llm`]: a real HTTP server speaking the OpenAI chat-completions protocol that replays
//!   scripted replies (fixed or computed from the request) and records every request it received.
//! - [`desktop`]: an in-process double of the executor behind the
//!   [`CommandDispatcher`](crate::dispatch::CommandDispatcher) trait, for unit-level tests only.

pub mod desktop;
pub mod grounding_service;
pub mod scripted_llm;

pub use desktop::{FakeControl, FakeDesktop, FakeWindow};
pub use scripted_llm::{RecordedRequest, ScriptedLlm, ScriptedReply};
