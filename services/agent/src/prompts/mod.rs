//! Prompt templates for the HostAgent and the AppAgent (seed 000 `_build_comprehensive_prompt`, seed 001
//! `_build_app_prompt`). System prompts describe the job and the JSON response fields; user messages
//! carry the step's images and context.

pub mod app;
pub mod host;
