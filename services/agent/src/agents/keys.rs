//! Typed context keys of the agents (the seeds' `depends_on`/`provides` names).

use std::sync::Arc;

use image::RgbaImage;
use serde_json::{Map, Value};

use super::action::ActionRecord;
use crate::agents::response::{AppResponse, HostResponse};
use crate::agents::target::{TargetInfo, TargetRegistry};
use crate::dispatch::tools::ExecutorCatalog;
use crate::dispatch::{CommandDispatcher, CommandResult, Settle};
use crate::llm::Totals;
use crate::memory::{Blackboard, BlackboardImage, MemoryItem};
use crate::processor::Key;
use crate::vision::{Derived, Screenshot};

// Global (session-wide, read-only during a run).
/// The desktop's command dispatcher.
pub const DISPATCHER: Key<Arc<dyn CommandDispatcher>> = Key::new("command_dispatcher");
/// A snapshot of the shared blackboard.
pub const BLACKBOARD: Key<Arc<Blackboard>> = Key::new("blackboard");
/// Finished subtasks `{subtask, status, result}`.
pub const PREVIOUS_SUBTASKS: Key<Vec<Value>> = Key::new("previous_subtasks");
/// The AppAgent's current subtask.
pub const SUBTASK: Key<String> = Key::new("subtask");
/// The HostAgent's message for the AppAgent.
pub const HOST_MESSAGE: Key<String> = Key::new("host_message");

// Local (one run).
/// Desktop screenshot (all screens).
pub const DESKTOP_SCREENSHOT: Key<Screenshot> = Key::new("desktop_screenshot");
/// Windows and third-party agents with their labels.
pub const TARGET_REGISTRY: Key<TargetRegistry> = Key::new("target_registry");
/// The HostAgent's parsed answer.
pub const HOST_RESPONSE: Key<HostResponse> = Key::new("host_response");
/// The AppAgent's parsed answer.
pub const APP_RESPONSE: Key<AppResponse> = Key::new("app_response");
/// The raw accepted reply.
pub const RESPONSE_TEXT: Key<String> = Key::new("response_text");
/// Calls, tokens and cost of this step's LLM interaction.
pub const LLM_TOTALS: Key<Totals> = Key::new("llm_cost");
/// Executed (or skipped) actions.
pub const ACTIONS: Key<Vec<ActionRecord>> = Key::new("action_info");
/// The target the HostAgent selected.
pub const SELECTED_TARGET: Key<TargetInfo> = Key::new("target");
/// The step's memory item.
pub const MEMORY_ITEM: Key<MemoryItem> = Key::new("memory_item");
/// The blackboard trajectory entry (history keys of the memory item).
pub const TRAJECTORY: Key<Map<String, Value>> = Key::new("trajectory");
/// The application window screenshot.
pub const CLEAN_SCREENSHOT: Key<Screenshot> = Key::new("clean_screenshot");
/// Hex SHA-256 of the clean screenshot's bytes (its blob's name and artifact id).
pub const CLEAN_SHA256: Key<String> = Key::new("clean_sha256");
/// How to draw the annotated image the model is sent again from the clean screenshot (recorded instead
/// of the image).
pub const ANNOTATION: Key<Derived> = Key::new("annotation");
/// How to crop the selected control out of the clean screenshot again (recorded instead of the crop).
pub const SELECTED_CONTROL_RECIPE: Key<Derived> = Key::new("selected_control_recipe");
/// Decoded pixels of the clean screenshot (decoded once per step, reused for prompts and crops).
pub const CLEAN_PIXELS: Key<Arc<RgbaImage>> = Key::new("clean_pixels");
/// The application window's info.
pub const WINDOW_INFO: Key<TargetInfo> = Key::new("application_window_info");
/// The window's controls as the executor listed them in the capture's own batch (the observation is
/// one executor call); [`CONTROLS`] labels and merges them.
pub const LISTED_CONTROLS: Key<CommandResult> = Key::new("listed_controls");
/// Labelled controls (the seeds' `annotation_dict`).
pub const CONTROLS: Key<Vec<TargetInfo>> = Key::new("control_info");
/// What went wrong this step that the step survived, one sentence each (e.g. visual grounding failed and
/// the step went on with accessibility controls only); each becomes a WARNING event of the step.
pub const WARNINGS: Key<Vec<String>> = Key::new("warnings");
/// Screenshot of the control acted on.
pub const SELECTED_CONTROL_SCREENSHOT: Key<Screenshot> = Key::new("selected_control_screenshot");
/// The executor's tools and launch allow-list (from the dispatcher's cache).
pub const TOOL_CATALOG: Key<Arc<ExecutorCatalog>> = Key::new("tool_catalog");
/// Hash of the screen the AppAgent saw this step (no-progress detection).
pub const SCREEN_HASH: Key<String> = Key::new("screen_hash");
/// How long the step's first observation waited for the screen to settle after the previous action.
pub const SETTLE: Key<Settle> = Key::new("settle");
/// A screenshot saved to the blackboard.
pub const SAVED_IMAGE: Key<BlackboardImage> = Key::new("saved_image");
/// The knowledge that reached this step's prompt (its items and how long retrieving took; the text is
/// left out): stored as `Step.extra.knowledge` and announced by a KNOWLEDGE_RETRIEVED event.
pub const KNOWLEDGE_USED: Key<crate::agents::knowledge::Retrieved> = Key::new("knowledge_used");
