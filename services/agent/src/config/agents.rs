//! Agent flags (env `UFO_AGENT_*`): limits and switches of the HostAgent and AppAgents. The per-task
//! settings and services are built from them in [`crate::agents::setup`].

use std::path::PathBuf;

/// How much of an error text a representation carries by default (the full text stays in the result; the
/// agents use their configured bound, see [`ActionRecord::representation_with`]).
pub const ERROR_CHARS: usize = 300;

/// Limits and switches of the HostAgent and AppAgents.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Steps per round before it fails with "step limit reached" (a task may ask for fewer).
    #[arg(long, env = "UFO_AGENT_MAX_STEPS", default_value_t = 30)]
    pub max_steps: u32,
    /// Times an AppAgent FAIL may return control to the HostAgent to re-plan, per round.
    #[arg(long, env = "UFO_AGENT_MAX_REPLANS", default_value_t = 2)]
    pub max_replans: u32,
    /// Re-asks after an unparseable or invalid model reply.
    #[arg(long, env = "UFO_AGENT_MAX_REASKS", default_value_t = 2)]
    pub max_reasks: u32,
    /// Memory item keys copied into blackboard trajectories.
    #[arg(
        long,
        env = "UFO_AGENT_HISTORY_KEYS",
        value_delimiter = ',',
        default_value = "step,agent_name,subtask,observation,thought,status,action_representation,result"
    )]
    pub history_keys: Vec<String>,
    /// Third-party agents offered to the HostAgent as targets.
    #[arg(long, env = "UFO_AGENT_THIRD_PARTY_AGENTS", value_delimiter = ',')]
    pub third_party_agents: Vec<String>,
    /// Retrieve knowledge from the session service's knowledge store into the prompts (issue 33): help
    /// documents, and the task owner's own earlier experiences — by request for the HostAgent, by subtask
    /// and application for the AppAgent — and store each finished task as an experience. Off by default.
    #[arg(long, env = "UFO_AGENT_KNOWLEDGE", default_value_t = false)]
    pub knowledge: bool,
    /// With --knowledge: also store finished tasks as experiences and retrieve the owner's experiences
    /// (false: help documents only).
    #[arg(long, env = "UFO_AGENT_KNOWLEDGE_EXPERIENCES", default_value_t = true,
        action = clap::ArgAction::Set)]
    pub knowledge_experiences: bool,
    /// Longest experience summary stored for a finished task, in characters (steps beyond are left out;
    /// keep it below the session service's --knowledge-max-experience-bytes).
    #[arg(long, env = "UFO_AGENT_KNOWLEDGE_EXPERIENCE_CHARS", default_value_t = 8_000,
        value_parser = clap::value_parser!(u32).range(200..=1_000_000))]
    pub knowledge_experience_chars: u32,
    /// With --knowledge and experiences: one call to the task's model after it ends writes a short summary
    /// of its trajectory, stored beside the deterministic one (never instead), retrieved and quoted with
    /// it; its tokens and cost count with the task's. Off by default (docs/knowledge.md "Experiences").
    #[arg(
        long,
        env = "UFO_AGENT_EXPERIENCE_MODEL_SUMMARY",
        default_value_t = false
    )]
    pub experience_model_summary: bool,
    /// Longest model-written experience summary kept, in characters (a longer one is cut).
    #[arg(long, env = "UFO_AGENT_EXPERIENCE_SUMMARY_CHARS", default_value_t = 600,
        value_parser = clap::value_parser!(u32).range(20..=20_000))]
    pub experience_summary_chars: u32,
    /// How long the summary call may take, in milliseconds; past it the deterministic summary is stored
    /// alone (the task's outcome is reported before, whatever happens here).
    #[arg(long, env = "UFO_AGENT_EXPERIENCE_SUMMARY_TIMEOUT_MS", default_value_t = 20_000,
        value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub experience_summary_timeout_ms: u64,
    /// Most knowledge items put in one prompt.
    #[arg(long, env = "UFO_AGENT_KNOWLEDGE_TOP_K", default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..=50))]
    pub knowledge_top_k: u32,
    /// Characters of retrieved knowledge in one prompt (items are cut to fit, each keeps its citation).
    #[arg(long, env = "UFO_AGENT_KNOWLEDGE_BUDGET_CHARS", default_value_t = 3_000,
        value_parser = clap::value_parser!(u32).range(100..=200_000))]
    pub knowledge_budget_chars: u32,
    /// A web-search provider asked for each AppAgent subtask (issue 33, docs/knowledge.md "Online
    /// search"): `POST URL {"query","application","count"}` → `{"results":[{"title","url","snippet"}]}`;
    /// its results are quoted into the prompt after the knowledge store's items. Off when unset.
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_URL")]
    pub web_search_url: Option<String>,
    /// A file holding a bearer token for `--web-search-url`.
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_TOKEN_FILE")]
    pub web_search_token_file: Option<PathBuf>,
    /// Milliseconds one web search may take, the whole answer included; past it the step goes on
    /// without web results.
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_TIMEOUT_MS", default_value_t = 3_000,
        value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub web_search_timeout_ms: u64,
    /// Largest web-search answer read, in bytes.
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_MAX_RESPONSE_BYTES", default_value_t = 1 << 20,
        value_parser = clap::value_parser!(u64).range(1_024..=67_108_864))]
    pub web_search_max_response_bytes: u64,
    /// Web results asked for and put in one prompt.
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_RESULTS", default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..=20))]
    pub web_search_results: u32,
    /// Characters of web results in one prompt (each is cut to fit and keeps its URL).
    #[arg(long, env = "UFO_AGENT_WEB_SEARCH_CHARS", default_value_t = 1_500,
        value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub web_search_chars: u32,
    /// IoU above which a grounding control duplicates an accessibility control and is dropped.
    #[arg(long, env = "UFO_AGENT_IOU_THRESHOLD", default_value_t = 0.1)]
    pub iou_threshold: f64,
    /// Width prompt images are downscaled to fit.
    #[arg(long, env = "UFO_AGENT_PROMPT_IMAGE_WIDTH", default_value_t = 1280)]
    pub prompt_image_width: u32,
    /// Height prompt images are downscaled to fit.
    #[arg(long, env = "UFO_AGENT_PROMPT_IMAGE_HEIGHT", default_value_t = 1280)]
    pub prompt_image_height: u32,
    /// Send the last selected control's screenshot to the AppAgent's model.
    #[arg(long, env = "UFO_AGENT_INCLUDE_LAST_CONTROL", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_last_control: bool,
    /// Send the clean window screenshot.
    #[arg(long, env = "UFO_AGENT_INCLUDE_CLEAN", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_clean: bool,
    /// Send the annotated (set-of-marks) screenshot.
    #[arg(long, env = "UFO_AGENT_INCLUDE_ANNOTATED", default_value_t = true, action = clap::ArgAction::Set)]
    pub include_annotated: bool,
    /// Check before each action of a batch that its control still exists and is enabled.
    #[arg(long, env = "UFO_AGENT_PRECHECK_CONTROLS", default_value_t = true, action = clap::ArgAction::Set)]
    pub precheck_controls: bool,
    /// TrueType font for set-of-marks labels (default: DejaVu Sans Bold, built into the binary).
    #[arg(long, env = "UFO_AGENT_LABEL_FONT")]
    pub label_font: Option<PathBuf>,
    /// Label height in pixels.
    #[arg(long, env = "UFO_AGENT_LABEL_PX", default_value_t = 14.0)]
    pub label_px: f32,
    /// Characters of an action's error text shown to the models (the full text is stored with the step).
    #[arg(long, env = "UFO_AGENT_ACTION_ERROR_CHARS", default_value_t = ERROR_CHARS)]
    pub action_error_chars: usize,
    /// Newest blackboard images sent to the models as images (0 = their metadata only).
    #[arg(long, env = "UFO_AGENT_BLACKBOARD_IMAGES", default_value_t = 2)]
    pub blackboard_images: usize,
    /// Largest width and height of a blackboard image sent to a model (downscaled to fit).
    #[arg(long, env = "UFO_AGENT_BLACKBOARD_IMAGE_PX", default_value_t = 640)]
    pub blackboard_image_px: u32,
    /// Times the same action may run on an unchanged screen before the AppAgent is told it makes no
    /// progress.
    #[arg(long, env = "UFO_AGENT_NO_PROGRESS_WARN", default_value_t = 3)]
    pub no_progress_warn: u32,
    /// Further repeats after that warning before the AppAgent fails the subtask back to the HostAgent.
    #[arg(long, env = "UFO_AGENT_NO_PROGRESS_FAIL", default_value_t = 2)]
    pub no_progress_fail: u32,
    /// Milliseconds a replayed (or reused) step waits for its recorded target to be listed and enabled
    /// before it is a mismatch, watching the window for changes (`wait_for_change`) and listing it again
    /// on each; a recorded step that only waited waits this long for the next step's target (0: no
    /// waiting; docs/replay.md "Waiting for targets").
    #[arg(long, env = "UFO_AGENT_REPLAY_WAIT_MS", default_value_t = 5_000,
        value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub replay_wait_ms: u64,
    /// Milliseconds a launch waits for the program's window to appear.
    #[arg(
        long,
        env = "UFO_AGENT_LAUNCH_WINDOW_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub launch_window_timeout_ms: u64,
    /// Milliseconds between looks at the window list while waiting for a launched program's window.
    #[arg(long, env = "UFO_AGENT_LAUNCH_POLL_MS", default_value_t = 100)]
    pub launch_poll_ms: u64,
    /// Newest HostAgent actions (with their results) shown in its prompt.
    #[arg(long, env = "UFO_AGENT_HOST_PREVIOUS_ACTIONS", default_value_t = 10)]
    pub host_previous_actions: usize,
    /// Times the same HostAgent function may fail the same way in a row (e.g. selecting a window a
    /// modal dialog keeps from activating) before its prompt says it makes no progress.
    #[arg(long, env = "UFO_AGENT_HOST_REPEAT_WARN", default_value_t = 3)]
    pub host_repeat_warn: u32,
    /// Further such failures after that warning before the round fails with a no-progress reason.
    #[arg(long, env = "UFO_AGENT_HOST_REPEAT_FAIL", default_value_t = 3)]
    pub host_repeat_fail: u32,
    /// The operator's consent policy (JSON, see docs/security.md): per tool, and per argument pattern,
    /// `allow`, `confirm` (held for a person whatever the task's confirm policy) or `deny` (refused
    /// before the executor; the model is told why). Without it every tool is allowed and launch
    /// arguments are denied. Read and checked at start.
    #[arg(long, env = "UFO_AGENT_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// MCP servers (JSON, or YAML by a `.yaml`/`.yml` extension; docs/mcp.md): their tools become API
    /// actions of the applications they are bound to, or they run as third-party agents the HostAgent
    /// may assign a subtask to. Read and checked at start; servers start on first use.
    #[arg(long, env = "UFO_AGENT_MCP_SERVERS")]
    pub mcp_servers: Option<PathBuf>,
    /// Offer the HostAgent the built-in shell agent (`shell`, docs/mcp.md "Shell"): it runs allow-listed
    /// programs on the desktop machine through the executor's run_command (which must be started with
    /// --shell-allow and --shell-workdir), one `shell__run` action per step. Off by default.
    #[arg(long, env = "UFO_AGENT_SHELL_AGENT", default_value_t = false)]
    pub shell_agent: bool,
    /// What the HostAgent is told the shell agent is for (name the allowed programs and the directory).
    #[arg(
        long,
        env = "UFO_AGENT_SHELL_AGENT_DESCRIPTION",
        default_value = "Runs allow-listed command-line programs (no shell) in a working directory on the desktop machine and returns their output; for subtasks about files and command output rather than windows"
    )]
    pub shell_agent_description: String,
    /// Characters of a shell command's stdout and of its stderr the shell agent's model reads (each).
    #[arg(long, env = "UFO_AGENT_SHELL_OUTPUT_CHARS", default_value_t = 8_000)]
    pub shell_output_chars: usize,
    /// Milliseconds an MCP tool call may take before it fails (a server may set its own).
    #[arg(long, env = "UFO_AGENT_MCP_CALL_TIMEOUT_MS", default_value_t = 30_000)]
    pub mcp_call_timeout_ms: u64,
    /// Milliseconds starting an MCP server and listing its tools may take.
    #[arg(
        long,
        env = "UFO_AGENT_MCP_CONNECT_TIMEOUT_MS",
        default_value_t = 20_000
    )]
    pub mcp_connect_timeout_ms: u64,
    /// Milliseconds before a failed MCP server is started again (doubled per failure in a row).
    #[arg(long, env = "UFO_AGENT_MCP_RESTART_BACKOFF_MS", default_value_t = 500)]
    pub mcp_restart_backoff_ms: u64,
    /// The longest wait before starting a failed MCP server again, in milliseconds.
    #[arg(
        long,
        env = "UFO_AGENT_MCP_RESTART_BACKOFF_MAX_MS",
        default_value_t = 30_000
    )]
    pub mcp_restart_backoff_max_ms: u64,
    /// Characters of an MCP tool's result kept (and shown to the model).
    #[arg(long, env = "UFO_AGENT_MCP_RESULT_CHARS", default_value_t = 20_000)]
    pub mcp_result_chars: usize,
    /// When windows are grounded visually (OCR) besides the accessibility API: `off`, `auto` (a window
    /// with fewer named accessible controls than `--grounding-min-named`) or `always`.
    #[arg(long, env = "UFO_AGENT_GROUNDING", value_enum, default_value_t = GroundingMode::Auto)]
    pub grounding: GroundingMode,
    /// `auto` grounds a window with fewer named, enabled accessible controls than this.
    #[arg(long, env = "UFO_AGENT_GROUNDING_MIN_NAMED", default_value_t = 3)]
    pub grounding_min_named: usize,
    /// Milliseconds one grounding call may take; past it the step goes on with accessibility controls.
    #[arg(long, env = "UFO_AGENT_GROUNDING_TIMEOUT_MS", default_value_t = 5_000)]
    pub grounding_timeout_ms: u64,
    /// Characters of screen text kept per grounded element (control characters are removed).
    #[arg(long, env = "UFO_AGENT_GROUNDING_TEXT_CHARS", default_value_t = 80)]
    pub grounding_text_chars: usize,
    /// Grounded elements kept per window (the rest are dropped, largest text first kept).
    #[arg(long, env = "UFO_AGENT_GROUNDING_MAX_ELEMENTS", default_value_t = 200)]
    pub grounding_max_elements: usize,
    /// Integer factor screenshots are upscaled by before OCR (small anti-aliased screen text).
    #[arg(long, env = "UFO_AGENT_GROUNDING_UPSCALE", default_value_t = 2)]
    pub grounding_upscale: u32,
    /// Lowest Tesseract word confidence (0-100) kept.
    #[arg(
        long,
        env = "UFO_AGENT_GROUNDING_MIN_CONFIDENCE",
        default_value_t = 40.0
    )]
    pub grounding_min_confidence: f32,
    /// Windows whose grounding is cached (an unchanged screenshot is not grounded again).
    #[arg(long, env = "UFO_AGENT_GROUNDING_CACHE", default_value_t = 16)]
    pub grounding_cache: usize,
    /// Tesseract's language data directory (default: the system's, e.g. /usr/share/tesseract-ocr/5/tessdata).
    #[arg(long, env = "UFO_AGENT_GROUNDING_TESSDATA")]
    pub grounding_tessdata: Option<PathBuf>,
    /// OpenMP threads Tesseract may use (the agent restarts itself once at start with
    /// `OMP_THREAD_LIMIT` set to this; 0, or `OMP_THREAD_LIMIT` already set: OpenMP's own choice). One
    /// is fastest on small machines, where OpenMP's spinning threads fight each other (docs/grounding.md).
    #[arg(long, env = "UFO_AGENT_GROUNDING_OCR_THREADS", default_value_t = 1)]
    pub grounding_ocr_threads: usize,
    /// Tesseract language(s), e.g. `eng` or `eng+deu`.
    #[arg(long, env = "UFO_AGENT_GROUNDING_LANG", default_value = "eng")]
    pub grounding_lang: String,
    /// An OmniParser-compatible grounding service (`http://host:port`; `POST /parse/`) used instead of
    /// the built-in OCR (docs/grounding.md).
    #[arg(long, env = "UFO_AGENT_GROUNDING_URL")]
    pub grounding_url: Option<String>,
    /// A file holding a bearer token for `--grounding-url`.
    #[arg(long, env = "UFO_AGENT_GROUNDING_TOKEN_FILE")]
    pub grounding_token_file: Option<PathBuf>,
    /// Largest answer read from `--grounding-url`, in bytes.
    #[arg(long, env = "UFO_AGENT_GROUNDING_MAX_RESPONSE_BYTES", default_value_t = 4 << 20)]
    pub grounding_max_response_bytes: usize,
}

/// When the AppAgent grounds a window visually besides its accessible controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GroundingMode {
    /// Never: accessibility controls only.
    Off,
    /// When the window's accessible controls are few or unnamed.
    #[default]
    Auto,
    /// Every window.
    Always,
}
