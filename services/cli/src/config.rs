//! The `ufo` command line: global connection flags (with environment fallbacks) and one subcommand per
//! job. Nothing else reads the environment (here also [`client_data_dir`], where the stored key is).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Drive a desktop the way a person does: run the UFO services locally, submit tasks in plain words and
/// follow their steps live.
#[derive(Debug, Clone, Parser)]
#[command(name = "ufo", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,

    #[command(subcommand)]
    pub command: Command,
}

/// Where a client command looks for the key `ufo up` keeps when no token is given: `UFO_DATA_DIR` (as
/// `ufo up --data-dir` reads it), else `ufo-data` in the current directory.
pub fn client_data_dir() -> PathBuf {
    std::env::var_os("UFO_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("ufo-data"), PathBuf::from)
}

/// The connection flags that mean nothing to the commands that run the services (`up`, `doctor`): hidden
/// from their help.
const CLIENT_ONLY: [&str; 3] = ["server", "grpc", "call_timeout_seconds"];

/// The command line definition: [`Cli`], with the client-only connection flags hidden from the help of
/// `ufo up` and `ufo doctor`.
pub fn command() -> clap::Command {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    // A subcommand's own argument of the same id keeps a global one from being propagated to it: those
    // two get hidden, local copies (accepted, unused).
    let local: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| CLIENT_ONLY.contains(&a.get_id().as_str()))
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    let mut cmd = cmd;
    for sub in ["up", "doctor"] {
        cmd = cmd.mut_subcommand(sub, |s| s.args(local.clone()));
    }
    cmd
}

/// Parses a command line with [`command`].
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches as _;
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Where the agent service is and how to authenticate.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// Base URL of the agent service's REST API.
    #[arg(
        long,
        global = true,
        env = "UFO_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,

    /// URL of the agent service's gRPC API (used to stream a task's steps).
    #[arg(
        long,
        global = true,
        env = "UFO_GRPC",
        default_value = "http://127.0.0.1:50052"
    )]
    pub grpc: String,

    /// API key sent as `Authorization: Bearer <token>` (default: the key `ufo up` keeps in
    /// $UFO_DATA_DIR/tokens.json, `ufo-data/tokens.json` here; its admin key for prune and knowledge add).
    #[arg(long, global = true, env = "UFO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Timeout of one API call (not of a followed stream), in seconds (default 30).
    #[arg(
        long,
        global = true,
        env = "UFO_CALL_TIMEOUT_SECONDS",
        default_value_t = 30
    )]
    pub call_timeout_seconds: u64,
}

/// What to do.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Start the session and agent services (and a local executor when a desktop is available) with the
    /// embedded SQLite store; stop them on Ctrl-C.
    Up(UpArgs),
    /// Submit a task and follow its steps live, answering questions and confirmations interactively.
    Run(RunArgs),
    /// List tasks, newest first.
    Tasks(TasksArgs),
    /// Show a task: status, state, totals, pending question or held action.
    Show(ShowArgs),
    /// Follow a task's steps live (replaying from a sequence number).
    Watch(WatchArgs),
    /// Answer a task's pending questions, in order.
    Answer(AnswerArgs),
    /// Approve or reject a task's held action.
    Confirm(ConfirmArgs),
    /// Add a follow-up request to a task (a new round in the same session).
    Request(RequestArgs),
    /// Run a finished task's recorded actions again without the model, and follow it.
    Replay(ReplayArgs),
    /// Cancel a task.
    Cancel(CancelArgs),
    /// Take a task's desktop over: the agents pause at the next step until `ufo handback` (docs/live.md).
    Takeover(TakeoverArgs),
    /// Click, press keys or type on the desktop of a task you took over (recorded as your steps).
    Input(InputArgs),
    /// Hand a task's desktop back to its agents: they observe first and are told what you did.
    Handback(TakeoverArgs),
    /// Exit 0 when the gRPC server reports SERVING (for container health checks).
    Health(HealthArgs),
    /// Check this machine and the services (display and accessibility bus, executor, launch allow-list,
    /// model endpoint and key, ports, tokens): one line each, with the fix.
    Doctor(DoctorArgs),
    /// Save a step's screenshot to a file.
    Screenshot(ScreenshotArgs),
    /// Remove the screenshots of ended tasks older than N days or beyond the newest N tasks (admin key);
    /// every step's record is kept.
    Prune(PruneArgs),
    /// Serve ufo's task tools to an MCP client over stdio (run_task with progress and questions,
    /// answer_task, decide_action, get_task, list_tasks, cancel_task, task_screenshot, ...), calling the
    /// agent service with --server, --grpc and --token.
    Mcp(McpArgs),
    /// Help documents the agents retrieve into their prompts: add them (admin key), and search them as
    /// the agents do.
    #[command(subcommand)]
    Knowledge(KnowledgeCommand),
    /// Executors (admin key): list them with their dial-out connections, enroll a dial-out executor (a
    /// new enrollment token), revoke a token.
    #[command(subcommand)]
    Executors(ExecutorsCommand),
    /// The desktop pool (admin key): list the desktops (name, labels, state, current task, last
    /// heartbeat, version), drain, undrain, mark a broken one ready, remove one.
    #[command(subcommand)]
    Desktops(DesktopsCommand),
    /// Rate a finished task's experience good or bad (a bad one is never offered to the agents again).
    Rate(RateArgs),
    /// Record a demonstration: do the task on the desktop yourself while the executor records your
    /// clicks and typing (each on its control); stop with Enter or Ctrl-C (or --seconds). It is stored
    /// as your demonstration, retrieved by the agents like their own finished tasks.
    Record(RecordArgs),
}

/// `ufo record`.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// What you show, as you would ask for it (e.g. "Name the new project Gemini 4").
    pub description: String,

    /// The application you show it in (e.g. `zenity`).
    #[arg(long)]
    pub app: String,

    /// The executor (desktop) to record on; omitted: the server's default.
    #[arg(long)]
    pub executor: Option<String>,

    /// Stop after this many seconds (for scripts); otherwise Enter or Ctrl-C stops the recording.
    #[arg(long)]
    pub seconds: Option<f64>,

    /// Print the stored demonstration as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ufo executors …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ExecutorsCommand {
    /// Every executor tasks may name; dial-out ones with connection, labels and last heartbeat.
    List(ExecutorsListArgs),
    /// Create an enrollment token for the dial-out executor NAME (`ufo-executor --connect ... --name
    /// NAME --enroll-token-file FILE`); printed, or written to --out (mode 0600).
    Enroll(EnrollArgs),
    /// Revoke an enrollment token (a connection made with it is closed).
    Revoke(RevokeArgs),
}

/// `ufo desktops …`.
#[derive(Debug, Clone, Subcommand)]
pub enum DesktopsCommand {
    /// Every desktop of the pool and how many tasks wait for one.
    List(ExecutorsListArgs),
    /// No new task for NAME; its current task finishes.
    Drain(DesktopName),
    /// Tasks for NAME again.
    Undrain(DesktopName),
    /// NAME, broken by a failed reset, is repaired: give it tasks again.
    Ready(DesktopName),
    /// Remove NAME from the pool (refused while a task holds it: drain it first).
    Remove(DesktopName),
}

/// A desktop's name.
#[derive(Debug, Clone, Args)]
pub struct DesktopName {
    /// The desktop's (its executor's) name.
    pub name: String,
}

/// `ufo executors list`.
#[derive(Debug, Clone, Args)]
pub struct ExecutorsListArgs {
    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ufo executors enroll`.
#[derive(Debug, Clone, Args)]
pub struct EnrollArgs {
    /// The executor's name.
    pub name: String,

    /// Write the token to this file (created with mode 0600) instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `ufo executors revoke`.
#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// The executor's name.
    pub name: String,

    /// The token's id (`ufo executors list`).
    pub id: String,
}

/// `ufo knowledge …`.
#[derive(Debug, Clone, Subcommand)]
pub enum KnowledgeCommand {
    /// Store help files (Markdown, HTML without scripts, plain text, GNOME Mallard `.page`) for an
    /// application, all or none; a file added again replaces its earlier version.
    Add(KnowledgeAddArgs),
    /// Print the ranked hits the agents would retrieve for a text, with their sources.
    Search(KnowledgeSearchArgs),
    /// Share one caller's experience or demonstration with other callers or everyone (an admin key):
    /// their searches and prompts then get it too.
    Share(KnowledgeShareArgs),
    /// Take callers or everyone off an experience's or demonstration's sharing (an admin key).
    Unshare(KnowledgeShareArgs),
}

/// `ufo knowledge share` / `ufo knowledge unshare`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("whom").required(true).multiple(true).args(["with", "everyone"])))]
pub struct KnowledgeShareArgs {
    /// The experience or demonstration: its id (as `ufo knowledge search --json` and `ufo record` show
    /// it) or `task:<task id>` (the experience of that task).
    pub id: String,

    /// Callers (API key names), comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    pub with: Vec<String>,

    /// Every caller.
    #[arg(long)]
    pub everyone: bool,

    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ufo knowledge add`.
#[derive(Debug, Clone, Args)]
pub struct KnowledgeAddArgs {
    /// The application the files are for (e.g. `zenity`); omitted: any application.
    #[arg(long)]
    pub app: Option<String>,

    /// The files (each cited by its file name).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,

    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ufo knowledge search`.
#[derive(Debug, Clone, Args)]
pub struct KnowledgeSearchArgs {
    /// The text: a request (the HostAgent's search) or a subtask (with --app, the AppAgent's).
    pub query: String,

    /// The application; omitted: any application.
    #[arg(long)]
    pub app: Option<String>,

    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ufo rate`.
#[derive(Debug, Clone, Args)]
pub struct RateArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// `good` or `bad`.
    #[arg(value_parser = ["good", "bad"])]
    pub rating: String,
}

/// `ufo mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Largest accepted tool arguments (as JSON), in bytes; larger ones are an `invalid_argument` tool
    /// error.
    #[arg(
        long,
        env = "UFO_MCP_MAX_ARGUMENT_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub max_argument_bytes: usize,
}

/// `ufo doctor`.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The settings `ufo up` would use (data directory, ports, desktop, allow-list, bin dir).
    #[command(flatten)]
    pub up: UpArgs,
}

/// `ufo screenshot`.
#[derive(Debug, Clone, Args)]
pub struct ScreenshotArgs {
    /// Task id (a unique prefix, or `last`).
    pub id: String,

    /// Step number.
    pub step: u64,

    /// Which image: `clean`, `annotated`, `desktop`, or `after` (the desktop after a task's last step; on
    /// its last step only) (default: the first of clean, annotated, desktop the step has).
    #[arg(long, value_parser = ["clean", "annotated", "desktop", "after"])]
    pub kind: Option<String>,

    /// File to write (default: `<task prefix>-step<N>-<kind>.png` in the current directory).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// `ufo up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Directory holding the `ufo-session`, `ufo-agent` and `ufo-executor` binaries (default: the directory
    /// of this `ufo` binary).
    #[arg(long, env = "UFO_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,

    /// Directory for the embedded SQLite store and service logs (created if missing).
    #[arg(long, env = "UFO_DATA_DIR", default_value = "ufo-data")]
    pub data_dir: PathBuf,

    /// Host the services bind to (loopback by default: nothing is reachable from other machines).
    #[arg(long, env = "UFO_UP_HOST", default_value = "127.0.0.1")]
    pub host: String,

    /// Port of the agent's REST API.
    #[arg(long, env = "UFO_UP_HTTP_PORT", default_value_t = 8080)]
    pub http_port: u16,

    /// Port of the agent's gRPC API.
    #[arg(long, env = "UFO_UP_GRPC_PORT", default_value_t = 50052)]
    pub grpc_port: u16,

    /// Port of the session service.
    #[arg(long, env = "UFO_UP_SESSION_PORT", default_value_t = 50053)]
    pub session_port: u16,

    /// Port of the local executor.
    #[arg(long, env = "UFO_UP_EXECUTOR_PORT", default_value_t = 50051)]
    pub executor_port: u16,

    /// Whether to start a local executor: `auto` starts one when a desktop is available (see --desktop).
    #[arg(long, env = "UFO_UP_EXECUTOR", value_enum, default_value_t = ExecutorMode::Auto)]
    pub executor: ExecutorMode,

    /// Which desktop the local executor drives: `current` (this session's DISPLAY), `headless` (a private
    /// accessible Xvfb desktop started and stopped with `ufo up`; needs the Debian packages xvfb dbus
    /// at-spi2-core xfwm4), `none`, or `auto` (current when DISPLAY is set, else headless when those
    /// packages are installed, else none).
    #[arg(long, env = "UFO_UP_DESKTOP", value_enum, default_value_t = DesktopArg::Auto)]
    pub desktop: DesktopArg,

    /// Applications the local executor may launch (`name` looked up in PATH, or `name=/path/to/program`);
    /// comma-separated in the environment. The default covers the README's examples.
    #[arg(
        long = "allow-app",
        env = "UFO_UP_ALLOW_APPS",
        value_delimiter = ',',
        default_values_t = DEFAULT_APPS.iter().map(|s| (*s).to_owned())
    )]
    pub allow_apps: Vec<String>,

    /// Bearer token the session service requires and the agent presents (default: the one kept in the
    /// data directory's tokens.json, created on first start).
    #[arg(long, env = "UFO_UP_SESSION_TOKEN", hide_env_values = true)]
    pub session_token: Option<String>,

    /// Executor address tasks use by default when no local executor runs (e.g. a Windows machine's
    /// `http://192.168.1.20:50051`).
    #[arg(long, env = "UFO_UP_REMOTE_EXECUTOR")]
    pub remote_executor: Option<String>,

    /// Bearer token the executor requires and the agent sends to it: for the local executor the one kept in
    /// the data directory's tokens.json when unset; for a --remote-executor, the token that executor was
    /// started with.
    #[arg(long, env = "UFO_UP_EXECUTOR_TOKEN", hide_env_values = true)]
    pub executor_token: Option<String>,

    /// How long to wait for each service to become ready, in seconds (default 60).
    #[arg(long, env = "UFO_UP_READY_TIMEOUT_SECONDS", default_value_t = 60)]
    pub ready_timeout_seconds: u64,

    /// How long each service may take to stop after Ctrl-C before it is killed, in seconds (default 20).
    #[arg(long, env = "UFO_UP_STOP_TIMEOUT_SECONDS", default_value_t = 20)]
    pub stop_timeout_seconds: u64,

    /// Size at which a service's log in DATA_DIR/logs is rotated, in bytes (default 10 MiB). Logs are
    /// appended across starts, so the lines before a crash are still there after the restart.
    #[arg(long, env = "UFO_UP_LOG_MAX_BYTES", default_value_t = 10 << 20,
          value_parser = clap::value_parser!(u64).range(4096..))]
    pub log_max_bytes: u64,

    /// How many rotated logs to keep per service (`ufo-agent.log.1` is the newest; default 5, 0 keeps
    /// none).
    #[arg(long, env = "UFO_UP_LOG_FILES", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub log_files: u32,

    /// OTLP/gRPC endpoint the services export spans to (e.g. http://127.0.0.1:4317 for Jaeger).
    #[arg(long, env = "UFO_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Also make an admin API key (kept in tokens.json beside the API key, printed at start): the key
    /// `ufo prune` and `ufo knowledge add` need. The CLI uses it for those when no token is given.
    #[arg(long, env = "UFO_UP_ADMIN_KEY")]
    pub admin_key: bool,

    #[command(flatten)]
    pub model: ModelArgs,

    /// The X display of this session; its presence means a Linux desktop is available for an executor.
    #[arg(long, env = "DISPLAY", hide = true)]
    pub display: Option<String>,
}

/// The model settings `ufo up` gives the agent (each unset one: the agent's default). A model served from
/// this machine or a private network (Ollama, vLLM, LM Studio) needs no key, and without a price it is
/// priced 0; an unpriced remote model is warned about at start (its tasks would be refused).
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Base URL of the OpenAI-compatible model endpoint (default https://api.openai.com/v1; Ollama:
    /// http://127.0.0.1:11434/v1, vLLM: http://127.0.0.1:8000/v1).
    #[arg(long, env = "UFO_LLM_BASE_URL")]
    pub llm_base_url: Option<String>,

    /// API key of the model endpoint (none needed for a local server).
    #[arg(long, env = "UFO_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,

    /// Model of the HostAgent (default gpt-4o), as the endpoint lists it (e.g. `llava:13b`).
    #[arg(long, env = "UFO_HOST_MODEL")]
    pub host_model: Option<String>,

    /// Model of the AppAgents (default gpt-4o).
    #[arg(long, env = "UFO_APP_MODEL")]
    pub app_model: Option<String>,

    /// Model prices, `model=IN/OUT,...` in US dollars per million input/output tokens.
    #[arg(long, env = "UFO_LLM_PRICES")]
    pub llm_prices: Option<String>,

    /// Price `IN/OUT` of models missing from --llm-prices.
    #[arg(long, env = "UFO_LLM_DEFAULT_PRICE")]
    pub llm_default_price: Option<String>,
}

impl ModelArgs {
    /// The agent's environment variables for the settings given.
    pub fn env(&self) -> Vec<(&'static str, &str)> {
        [
            ("UFO_AGENT_LLM_BASE_URL", &self.llm_base_url),
            ("UFO_AGENT_LLM_API_KEY", &self.llm_api_key),
            ("UFO_AGENT_HOST_MODEL", &self.host_model),
            ("UFO_AGENT_APP_MODEL", &self.app_model),
            ("UFO_AGENT_LLM_PRICES", &self.llm_prices),
            ("UFO_AGENT_LLM_DEFAULT_PRICE", &self.llm_default_price),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.as_deref().map(|v| (name, v)))
        .collect()
    }
}

/// The applications `ufo up` lets the local executor launch unless told otherwise: those the README's
/// examples use.
pub const DEFAULT_APPS: [&str; 2] = ["mousepad", "gtk3-widget-factory"];

impl UpArgs {
    /// Whether this session has a desktop: always on Windows, DISPLAY on Linux.
    pub fn display_available(&self) -> bool {
        cfg!(windows) || self.display.as_deref().is_some_and(|d| !d.is_empty())
    }
}

/// `--desktop` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DesktopArg {
    /// This session's desktop when there is one, else a headless one when its packages are installed.
    Auto,
    /// This session's desktop (DISPLAY).
    Current,
    /// A private Xvfb desktop started and stopped with `ufo up`.
    Headless,
    /// No local desktop (no local executor).
    None,
}

/// When `ufo up` starts a local executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorMode {
    /// When a desktop session is available.
    Auto,
    /// Always (fails if the executor cannot start).
    Always,
    /// Never.
    Never,
}

/// `ufo run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The task in plain words.
    pub request: String,

    /// Executor address (http://host:port) or a name registered in the agent service; default: the
    /// service's default executor.
    #[arg(long)]
    pub executor: Option<String>,

    /// Most steps the task may take (default: the service's).
    #[arg(long)]
    pub max_steps: Option<u32>,

    /// Most the task may spend on the LLM, in US dollars (default: the service's).
    #[arg(long)]
    pub max_cost: Option<f64>,

    /// Wall-time limit in seconds (default: the service's).
    #[arg(long)]
    pub timeout_seconds: Option<u32>,

    /// When actions are held for confirmation (default: the service's, `sensitive`).
    #[arg(long, value_enum)]
    pub confirm_policy: Option<ConfirmPolicyArg>,

    /// Model for the HostAgent (default: the service's).
    #[arg(long)]
    pub host_model: Option<String>,

    /// Model for the AppAgents (default: the service's).
    #[arg(long)]
    pub app_model: Option<String>,

    /// Follow your closest earlier finished task when the request matches it (`--reuse` or
    /// `--reuse true`; `--reuse false` turns the service's default off for this task). See
    /// docs/knowledge.md "Reuse".
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub reuse: Option<bool>,

    /// Print the task id and return instead of following the steps.
    #[arg(long)]
    pub detach: bool,

    #[command(flatten)]
    pub follow: FollowArgs,
}

/// How a followed task's questions and confirmations are handled.
#[derive(Debug, Clone, Args)]
pub struct FollowArgs {
    /// Never prompt: print questions and held actions and keep following (answer with `ufo answer` /
    /// `ufo confirm`). The default prompts when stdin is a terminal.
    #[arg(long)]
    pub no_prompt: bool,

    /// How long to keep reconnecting after the stream drops (the agent restarting, the network) before
    /// giving up, in seconds. Every successful reconnection starts the count again, so any number of
    /// drops is survived while the task runs.
    #[arg(long, env = "UFO_RECONNECT_SECONDS", default_value_t = 120)]
    pub reconnect_seconds: u64,
}

/// `ufo replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The finished task to replay (a unique prefix of its id, or `last`).
    pub id: String,

    /// What a step whose recorded target is missing does: `fail` the task (the default) or let the
    /// `model` decide that step.
    #[arg(long, value_parser = ["fail", "model"])]
    pub on_mismatch: Option<String>,

    /// Print the new task's id and return instead of following its steps.
    #[arg(long)]
    pub detach: bool,

    #[command(flatten)]
    pub follow: FollowArgs,
}

/// `--confirm-policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfirmPolicyArg {
    /// Hold an action when the model marks it for confirmation.
    Sensitive,
    /// Hold every action.
    Always,
    /// Never hold an action.
    Never,
}

impl ConfirmPolicyArg {
    /// The API's spelling.
    pub fn as_api(self) -> &'static str {
        match self {
            ConfirmPolicyArg::Sensitive => "sensitive",
            ConfirmPolicyArg::Always => "always",
            ConfirmPolicyArg::Never => "never",
        }
    }
}

/// `ufo tasks`.
#[derive(Debug, Clone, Args)]
pub struct TasksArgs {
    /// Only tasks in this status (queued, running, waiting, finished, failed, cancelled).
    #[arg(long)]
    pub status: Option<String>,

    /// Page size (the service caps it).
    #[arg(long)]
    pub limit: Option<u32>,

    /// Page token printed by a previous `ufo tasks`.
    #[arg(long)]
    pub page_token: Option<String>,

    /// Print the raw JSON response.
    #[arg(long)]
    pub json: bool,
}

/// `ufo show`.
#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// Also list the task's steps.
    #[arg(long)]
    pub steps: bool,

    /// Print the raw JSON response(s).
    #[arg(long)]
    pub json: bool,
}

/// `ufo watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// First event sequence number to show (1 replays everything).
    #[arg(long, default_value_t = 1)]
    pub from: u64,

    #[command(flatten)]
    pub follow: FollowArgs,
}

/// `ufo answer`.
#[derive(Debug, Clone, Args)]
pub struct AnswerArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// One answer per pending question, in order (or per `--question`).
    #[arg(required = true)]
    pub answers: Vec<String>,

    /// Id of the pending question each answer answers (`pending_questions[].id`), repeated in the order
    /// of the answers. Without it the answers go to the questions pending now, in order.
    #[arg(long = "question")]
    pub question: Vec<String>,
}

/// `ufo confirm`.
#[derive(Debug, Clone, Args)]
pub struct ConfirmArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// Id of the held action decided (`held_action.id`, shown by `ufo show`). Without it, the action held
    /// now is shown and decided; a different action held by then is refused by the service.
    #[arg(long = "action")]
    pub action: Option<String>,

    /// Approve the held action (run it).
    #[arg(long, conflicts_with = "reject", required_unless_present = "reject")]
    pub approve: bool,

    /// Reject the held action (the subtask ends without it).
    #[arg(long)]
    pub reject: bool,

    /// Why (recorded with the decision).
    #[arg(long)]
    pub reason: Option<String>,
}

/// `ufo request`.
#[derive(Debug, Clone, Args)]
pub struct RequestArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// The follow-up request in plain words.
    pub request: String,

    /// Print and return instead of following the new round.
    #[arg(long)]
    pub detach: bool,

    #[command(flatten)]
    pub follow: FollowArgs,
}

/// `ufo prune`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Prune ended tasks created more than this many days ago.
    #[arg(long)]
    pub older_than_days: Option<u32>,

    /// Keep the screenshots of this many newest tasks.
    #[arg(long)]
    pub keep_tasks: Option<u32>,
}

/// `ufo cancel`.
#[derive(Debug, Clone, Args)]
pub struct CancelArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// Why (recorded with the task).
    #[arg(long)]
    pub reason: Option<String>,
}

/// `ufo takeover` and `ufo handback`.
#[derive(Debug, Clone, Args)]
pub struct TakeoverArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,
}

/// `ufo input`: exactly one of `--click`, `--keys`, `--text`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["click", "keys", "text"])))]
pub struct InputArgs {
    /// Task id (a unique prefix of it, or `last` for the newest task).
    pub id: String,

    /// Click at screen point `X,Y` (pixels).
    #[arg(long, value_name = "X,Y", value_parser = parse_point)]
    pub click: Option<(i32, i32)>,

    /// Press keys in the executor's syntax, e.g. `{ENTER}`, `^s`.
    #[arg(long)]
    pub keys: Option<String>,

    /// Type this text as it is.
    #[arg(long)]
    pub text: Option<String>,
}

/// Why `--click` is not a point.
#[derive(Debug, thiserror::Error)]
pub enum PointError {
    /// No comma.
    #[error("{0:?} is not X,Y")]
    NotXY(String),
    /// A coordinate is not an integer.
    #[error("{0:?} is not a whole number of pixels")]
    NotPixels(String),
}

fn parse_point(s: &str) -> Result<(i32, i32), PointError> {
    let (x, y) = s
        .split_once(',')
        .ok_or_else(|| PointError::NotXY(s.to_owned()))?;
    let n = |v: &str| {
        v.trim()
            .parse::<i32>()
            .map_err(|_| PointError::NotPixels(v.to_owned()))
    };
    Ok((n(x)?, n(y)?))
}

/// `ufo health`.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// gRPC URL to check (default: --grpc).
    #[arg(long)]
    pub url: Option<String>,

    /// Service name to check; empty checks the whole server.
    #[arg(long, default_value = "")]
    pub service: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_definition_is_consistent() {
        // Catches clashing flag names (global vs subcommand) and bad defaults at test time, not at run time.
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn up_and_doctor_help_hides_the_client_flags_but_run_shows_them() {
        let mut cmd = command();
        cmd.build();
        for (sub, hidden) in [("up", true), ("doctor", true), ("run", false)] {
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            for flag in CLIENT_ONLY {
                assert_eq!(
                    !help.contains(&format!("--{} <", flag.replace('_', "-"))),
                    hidden,
                    "{sub}: {help}"
                );
            }
        }
        let cli = parse_from(["ufo", "--server", "http://x:1", "tasks"]).unwrap();
        assert_eq!(cli.connection.server, "http://x:1");
    }
}
