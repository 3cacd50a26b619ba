//! Configuration of `ufo-executor`: CLI flags with environment fallbacks. Nothing else reads the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use ufo_common::telemetry::TelemetryArgs;

/// The executor service.
#[derive(Clone, Parser)]
#[command(name = "ufo-executor", version, about)]
pub struct Config {
    /// Address the gRPC server binds to (loopback by default; expose it deliberately).
    #[arg(long, env = "UFO_EXECUTOR_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Bearer token every call must present. Required unless --insecure.
    #[arg(long, env = "UFO_EXECUTOR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Run without a token. Only allowed when listening on a loopback address.
    #[arg(long, env = "UFO_EXECUTOR_INSECURE", default_value_t = false)]
    pub insecure: bool,

    /// PEM certificate chain to serve TLS with (needs --tls-key); without both the server speaks plaintext.
    #[arg(long, env = "UFO_EXECUTOR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "UFO_EXECUTOR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// Programs launch_application may start, as `name=path` or a bare program name looked up in PATH
    /// at launch; comma-separated in the environment.
    #[arg(
        long = "allow-app",
        env = "UFO_EXECUTOR_ALLOW_APPS",
        value_delimiter = ','
    )]
    pub allow_apps: Vec<String>,

    /// Which desktop to drive: `current` (the session's DISPLAY / Windows desktop) or `headless` (start a
    /// private accessible Xvfb desktop with its own session bus, AT-SPI bus and window manager, and stop it
    /// on exit; Linux only, needs the Debian packages xvfb dbus at-spi2-core xfwm4).
    #[arg(long, env = "UFO_EXECUTOR_DESKTOP", value_enum, default_value_t = DesktopMode::Current)]
    pub desktop: DesktopMode,

    /// Screen size of a `--desktop headless` desktop, as WIDTHxHEIGHT.
    #[arg(long, env = "UFO_EXECUTOR_DESKTOP_SIZE", default_value = "1920x1080", value_parser = parse_size)]
    pub desktop_size: (u32, u32),

    /// File to write a `--desktop headless` desktop's DISPLAY and session bus address to (as
    /// `DISPLAY=...` and `DBUS_SESSION_BUS_ADDRESS=...` lines) once it is ready, so that people and
    /// tools can look at it (`ufo up` prints it).
    #[arg(long, env = "UFO_EXECUTOR_DESKTOP_INFO")]
    pub desktop_info: Option<PathBuf>,

    /// The X display number a `--desktop headless` desktop takes when it is free (`ufo up` passes the one
    /// its data directory used last, so the display stays the same between starts); when it is taken, a
    /// free one is chosen and the log says so.
    #[arg(long, env = "UFO_EXECUTOR_DESKTOP_DISPLAY", value_parser = clap::value_parser!(u32).range(0..=65000))]
    pub desktop_display: Option<u32>,

    /// Largest gRPC message accepted or sent, in bytes.
    #[arg(long, env = "UFO_EXECUTOR_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Most commands in one Execute batch.
    #[arg(long, env = "UFO_EXECUTOR_MAX_BATCH", default_value_t = 64)]
    pub max_batch: usize,

    /// Deadline of a command when the request does not set one, in milliseconds.
    #[arg(
        long,
        env = "UFO_EXECUTOR_DEFAULT_DEADLINE_MS",
        default_value_t = 10_000
    )]
    pub default_deadline_ms: u32,

    /// Largest per-command deadline a request may ask for, in milliseconds.
    #[arg(long, env = "UFO_EXECUTOR_MAX_DEADLINE_MS", default_value_t = 120_000)]
    pub max_deadline_ms: u32,

    /// Longest `wait` (and `wait_for_change`) a command may ask for, in seconds.
    #[arg(long, env = "UFO_EXECUTOR_MAX_WAIT_SECONDS", default_value_t = 60.0)]
    pub max_wait_seconds: f64,

    /// Most nodes one UI tree walk returns.
    #[arg(long, env = "UFO_EXECUTOR_MAX_TREE_NODES", default_value_t = 5_000)]
    pub max_tree_nodes: u32,

    /// Deepest level one UI tree walk descends to.
    #[arg(long, env = "UFO_EXECUTOR_MAX_TREE_DEPTH", default_value_t = 64)]
    pub max_tree_depth: u32,

    /// Most control handles the Windows backend keeps (a handle stays valid across tree walks until
    /// its control is gone; past this many, those met longest ago are forgotten first).
    #[arg(
        long,
        env = "UFO_EXECUTOR_MAX_CONTROL_HANDLES",
        default_value_t = 100_000
    )]
    pub max_control_handles: usize,

    /// Windows: how long select_application_window waits to see the window in the foreground, in
    /// milliseconds (the switch completes asynchronously on the window's thread).
    #[arg(long, env = "UFO_EXECUTOR_FOREGROUND_WAIT_MS", default_value_t = 1_000)]
    pub foreground_wait_ms: u32,

    /// Windows: how long a native control may take to answer WM_GETTEXT (the text fallback where UI
    /// Automation has no Value or Text pattern) before it counts as hung, in milliseconds.
    #[arg(
        long,
        env = "UFO_EXECUTOR_NATIVE_TEXT_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub native_text_timeout_ms: u32,

    /// Windows: longest native control text read through WM_GETTEXT, in characters.
    #[arg(long, env = "UFO_EXECUTOR_MAX_NATIVE_TEXT_CHARS", default_value_t = 16 * 1024 * 1024)]
    pub max_native_text_chars: usize,

    /// Most key strokes one keyboard_input may send.
    #[arg(long, env = "UFO_EXECUTOR_MAX_KEY_STROKES", default_value_t = 20_000)]
    pub max_key_strokes: usize,

    /// Longest text set_edit_text, and key text keyboard_input, accepts, in bytes.
    #[arg(long, env = "UFO_EXECUTOR_MAX_TEXT_BYTES", default_value_t = 1024 * 1024)]
    pub max_text_bytes: usize,

    /// Longest text summary echoes back, in bytes.
    #[arg(long, env = "UFO_EXECUTOR_MAX_SUMMARY_BYTES", default_value_t = 64 * 1024)]
    pub max_summary_bytes: usize,

    /// Directories launch_application arguments must lie in: each argument must be an absolute path that
    /// resolves (through symlinks, without `..`) inside one of them. Without any, programs start
    /// without arguments. Comma-separated in the environment.
    #[arg(
        long = "launch-dir",
        env = "UFO_EXECUTOR_LAUNCH_DIRS",
        value_delimiter = ','
    )]
    pub launch_dirs: Vec<PathBuf>,

    /// Most arguments one launch_application may pass.
    #[arg(long, env = "UFO_EXECUTOR_MAX_LAUNCH_ARGS", default_value_t = 16)]
    pub max_launch_args: usize,

    /// Longest launch_application argument, in bytes.
    #[arg(
        long,
        env = "UFO_EXECUTOR_MAX_LAUNCH_ARG_BYTES",
        default_value_t = 4096
    )]
    pub max_launch_arg_bytes: usize,

    /// Programs run_command may run (off without any): bare names looked up on --shell-path, or
    /// absolute paths; comma-separated in the environment. Shells (sh, bash, cmd, powershell, ...)
    /// are refused. Needs --shell-workdir. docs/mcp.md, "Shell".
    #[arg(
        long = "shell-allow",
        env = "UFO_EXECUTOR_SHELL_ALLOW",
        value_delimiter = ','
    )]
    pub shell_allow: Vec<String>,

    /// The directory run_command runs in (also its HOME); arguments that are paths must resolve inside
    /// it. Required with --shell-allow.
    #[arg(long, env = "UFO_EXECUTOR_SHELL_WORKDIR")]
    pub shell_workdir: Option<PathBuf>,

    /// The PATH run_command's programs get, and bare program names are looked up on.
    #[arg(long, env = "UFO_EXECUTOR_SHELL_PATH", default_value = crate::shell::DEFAULT_PATH)]
    pub shell_path: String,

    /// Longest a command may run before it is killed (with its process group on Linux), in
    /// milliseconds; a caller may ask for less, never more.
    #[arg(long, env = "UFO_EXECUTOR_SHELL_TIMEOUT_MS", default_value_t = 10_000)]
    pub shell_timeout_ms: u64,

    /// Bytes of each of a command's output streams kept (the rest is read and discarded, and the
    /// result marked truncated).
    #[arg(long, env = "UFO_EXECUTOR_SHELL_MAX_OUTPUT_BYTES", default_value_t = 64 * 1024)]
    pub shell_max_output_bytes: usize,

    /// Most arguments of one command.
    #[arg(long, env = "UFO_EXECUTOR_SHELL_MAX_ARGS", default_value_t = 64)]
    pub shell_max_args: usize,

    /// Longest program name or argument of a command, in bytes.
    #[arg(long, env = "UFO_EXECUTOR_SHELL_MAX_ARG_BYTES", default_value_t = 4096)]
    pub shell_max_arg_bytes: usize,

    /// Programs the agent may start on this machine as MCP servers (`transport: {type: stdio, on:
    /// desktop}`, through process_start): bare names looked up on the executor's PATH, or absolute
    /// paths; comma-separated in the environment; none by default (the tools are off). Shells are
    /// refused. docs/mcp.md, "Servers on the desktop".
    #[arg(
        long = "mcp-stdio-allow",
        env = "UFO_EXECUTOR_MCP_STDIO_ALLOW",
        value_delimiter = ','
    )]
    pub mcp_stdio_allow: Vec<String>,

    /// Directories such a program may be started in: a caller's `cwd` must resolve (through symlinks
    /// and `..`) inside one; comma-separated in the environment. None by default: a caller's `cwd` is
    /// refused and the program starts in the executor's working directory.
    #[arg(
        long = "mcp-stdio-workdirs",
        env = "UFO_EXECUTOR_MCP_STDIO_WORKDIRS",
        value_delimiter = ','
    )]
    pub mcp_stdio_workdirs: Vec<PathBuf>,

    /// Most such programs running at once (all callers).
    #[arg(
        long,
        env = "UFO_EXECUTOR_MCP_STDIO_MAX_PROCESSES",
        default_value_t = 16
    )]
    pub mcp_stdio_max_processes: usize,

    /// A program none of its caller's calls touched for this long (its agent died or lost the
    /// connection) is killed with its process group, in milliseconds.
    #[arg(long, env = "UFO_EXECUTOR_MCP_STDIO_IDLE_MS", default_value_t = 60_000)]
    pub mcp_stdio_idle_ms: u64,

    /// Most bytes of output one process_read returns (whole lines; one longer line alone).
    #[arg(long, env = "UFO_EXECUTOR_MCP_STDIO_MAX_READ_BYTES", default_value_t = 1024 * 1024)]
    pub mcp_stdio_max_read_bytes: usize,

    /// Longest line (one MCP message) such a program may write; a longer one ends it.
    #[arg(
        long,
        env = "UFO_EXECUTOR_MCP_STDIO_MAX_MESSAGE_BYTES",
        default_value_t = 4 * 1024 * 1024
    )]
    pub mcp_stdio_max_message_bytes: usize,

    /// Bytes of such a program's standard error kept (the last ones), told when it ends.
    #[arg(long, env = "UFO_EXECUTOR_MCP_STDIO_STDERR_BYTES", default_value_t = 8 * 1024)]
    pub mcp_stdio_stderr_bytes: usize,

    /// The operator's reset hook, run at every reset between tasks of the pool (e.g. a snapshot
    /// revert): a program and its arguments separated by whitespace, run without a shell (put anything
    /// more complex in a script), with UFO_TASK_ID set; it must exit 0 (else the desktop is marked
    /// broken). docs/executors.md, "The pool".
    #[arg(long, env = "UFO_EXECUTOR_RESET_HOOK")]
    pub reset_hook: Option<String>,

    /// Longest the reset hook may run, in milliseconds (it is killed then and the reset fails).
    #[arg(
        long,
        env = "UFO_EXECUTOR_RESET_HOOK_TIMEOUT_MS",
        default_value_t = 120_000
    )]
    pub reset_hook_timeout_ms: u64,

    /// A directory emptied at every reset between tasks (the directory tasks save their files in);
    /// the directory itself is kept.
    #[arg(long, env = "UFO_EXECUTOR_SCRATCH_DIR")]
    pub scratch_dir: Option<PathBuf>,

    /// How long a program launch_application started is waited for after the reset killed it, in
    /// milliseconds.
    #[arg(
        long,
        env = "UFO_EXECUTOR_RESET_CLOSE_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub reset_close_timeout_ms: u64,

    /// Control types listed by get_app_window_controls_target_info (UI Automation names).
    #[arg(
        long = "control-type",
        env = "UFO_EXECUTOR_CONTROL_TYPES",
        value_delimiter = ',',
        default_values_t = crate::tree::DEFAULT_CONTROL_TYPES.iter().map(|s| s.to_string())
    )]
    pub control_types: Vec<String>,

    /// Longest current text get_app_window_controls_target_info lists for an editable control, in
    /// characters (0: none).
    #[arg(long, env = "UFO_EXECUTOR_MAX_VALUE_CHARS", default_value_t = 256)]
    pub max_value_chars: usize,

    /// Longest time the first observation after an action waits for the screen to settle, in
    /// milliseconds (0: observe at once).
    #[arg(long, env = "UFO_EXECUTOR_SETTLE_TIMEOUT_MS", default_value_t = 2_000)]
    pub settle_timeout_ms: u32,

    /// How long the screen must stay unchanged to count as settled, in milliseconds.
    #[arg(long, env = "UFO_EXECUTOR_SETTLE_QUIET_MS", default_value_t = 40)]
    pub settle_quiet_ms: u32,

    /// How long after an action the screen may take to start changing before the observation
    /// concludes that nothing changed, in milliseconds.
    #[arg(
        long,
        env = "UFO_EXECUTOR_SETTLE_FIRST_CHANGE_MS",
        default_value_t = 300
    )]
    pub settle_first_change_ms: u32,

    /// Drawing repeated in one place at least this many times a second, steadily, for four periods
    /// (a spinner, a pulsing progress bar) is an animation the settle wait does not wait for (0: wait
    /// for every drawing).
    #[arg(long, env = "UFO_EXECUTOR_SETTLE_ANIMATION_HZ", default_value_t = 10.0, value_parser = animation_hz)]
    pub settle_animation_hz: f64,

    /// Let drawing and accessibility events anywhere on the screen hold the settle wait, as before
    /// issue 37. By default, when a window is selected, only its own drawing (and its application's
    /// windows, dialogs and menus the action opened) and its application's events count: a caret
    /// blinking, a clock or another program typing elsewhere never hold an observation.
    #[arg(long, env = "UFO_EXECUTOR_SETTLE_WHOLE_SCREEN")]
    pub settle_whole_screen: bool,

    /// Do not wait, between two actions (the actions of one batch), for the screen to settle after
    /// the first before sending the second (by default each action waits, within the settle limits
    /// above, as a person would before pressing the next key).
    #[arg(long, env = "UFO_EXECUTOR_NO_SETTLE_BETWEEN_ACTIONS")]
    pub no_settle_between_actions: bool,

    /// How long an action waits for its target control to be enabled and visible (a button GTK makes
    /// sensitive a moment after a field is filled) before failing, in milliseconds (0: fail at once).
    /// The wait watches the control's accessibility state; the result says how long it waited.
    #[arg(long, env = "UFO_EXECUTOR_ACTION_WAIT_MS", default_value_t = 1_000)]
    pub action_wait_ms: u32,

    /// Do not check what each action changed. By default an action settles at its end and its result
    /// says what was observed to change (the target's text and states, the window set, the active
    /// window, the application's accessibility events, the drawing): `confirmed`, `none_observed` or
    /// `unverifiable` (docs/executor-effects.md).
    #[arg(long, env = "UFO_EXECUTOR_NO_EFFECT_CHECK")]
    pub no_effect_check: bool,

    /// How long the effect check of a launch or a close waits for the window set to change, in
    /// milliseconds (within the command's deadline).
    #[arg(
        long,
        env = "UFO_EXECUTOR_EFFECT_WINDOW_WAIT_MS",
        default_value_t = 5_000
    )]
    pub effect_window_wait_ms: u32,

    /// Most steps one `record_input` recording keeps (clicks, typed texts, keys, scrolls, windows
    /// opened); it ends by itself when it has this many (a start may ask fewer).
    #[arg(long, env = "UFO_EXECUTOR_RECORD_MAX_EVENTS", default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub record_max_events: u32,

    /// Longest `record_input` recording, in seconds; it ends by itself then (a start may ask less).
    #[arg(long, env = "UFO_EXECUTOR_RECORD_MAX_SECONDS", default_value_t = 600.0, value_parser = record_seconds)]
    pub record_max_seconds: f64,

    /// Most steps of one `record_input` recording that keep a screenshot (the desktop as the person
    /// saw it when the step was resolved); later steps keep none. 0: no screenshots.
    #[arg(
        long,
        env = "UFO_EXECUTOR_RECORD_MAX_SCREENSHOTS",
        default_value_t = 200
    )]
    pub record_max_screenshots: u32,

    /// Most megabytes of encoded screenshots one `record_input` recording keeps in memory until they
    /// are collected; a step whose screenshot would pass it keeps none.
    #[arg(long, env = "UFO_EXECUTOR_RECORD_MAX_SCREENSHOT_MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=65_536))]
    pub record_max_screenshot_mb: u64,

    /// JPEG quality used when a batch asks for JPEG without a quality.
    #[arg(long, env = "UFO_EXECUTOR_JPEG_QUALITY", default_value_t = 75, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub jpeg_quality: u8,

    /// PNG screenshots' compression: a zlib level 1..=9 (2: about 40 % smaller than `fast` on a GTK
    /// window, for under twice the encoding time) or `fast` (fdeflate).
    #[arg(long, env = "UFO_EXECUTOR_PNG_COMPRESSION", default_value_t = crate::encode::PngCompression::DEFAULT)]
    pub png_compression: crate::encode::PngCompression,

    /// Frames a second a live view (`WatchDesktop`, docs/live.md) gets when it asks for no rate; frames
    /// are sent only when the screen changed.
    #[arg(long, env = "UFO_EXECUTOR_WATCH_FPS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub watch_fps: u32,

    /// Most frames a second a live view may ask for (more is INVALID_ARGUMENT).
    #[arg(long, env = "UFO_EXECUTOR_WATCH_MAX_FPS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub watch_max_fps: u32,

    /// Dial out instead of listening: the agent's URL (`https://agent.example:50052`, or `http://` on a
    /// trusted network). The executor opens one long-lived stream to it and serves the Executor API over
    /// that stream, reconnecting with exponential backoff; `--listen` and `--token` are then not used
    /// (docs/executors.md, "Dial-out").
    #[arg(long, env = "UFO_EXECUTOR_CONNECT", requires_all = ["name", "enroll_token_file"])]
    pub connect: Option<String>,

    /// With --connect: the name tasks use for this desktop (letters, digits, `.`, `_`, `-`).
    #[arg(long, env = "UFO_EXECUTOR_NAME")]
    pub name: Option<String>,

    /// With --connect: the file holding this executor's enrollment token (created with
    /// `POST /v1/admin/executors/NAME/tokens`); read again at every connection attempt.
    #[arg(long, env = "UFO_EXECUTOR_ENROLL_TOKEN_FILE")]
    pub enroll_token_file: Option<PathBuf>,

    /// With --connect: labels the agent shows and may select by, `key=value`, comma-separated
    /// (e.g. `os=linux,app=mousepad`).
    #[arg(long, env = "UFO_EXECUTOR_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,

    /// With an `https` --connect URL: PEM file of the CA that signed the agent's certificate (default: the
    /// public web PKI roots).
    #[arg(long, env = "UFO_EXECUTOR_CONNECT_CA")]
    pub connect_ca: Option<PathBuf>,

    /// With --connect: the longest wait between reconnection attempts, in milliseconds (the wait starts
    /// at 100 ms and doubles after each failed attempt).
    #[arg(long, env = "UFO_EXECUTOR_CONNECT_MAX_BACKOFF_MS", default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(100..))]
    pub connect_max_backoff_ms: u64,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Malformed-request checks in front of the gRPC server.
    #[command(flatten)]
    pub request_checks: ufo_common::checked::RequestCheckArgs,

    /// Whether the gRPC server offers reflection.
    #[command(flatten)]
    pub reflection: ufo_common::grpc::ReflectionArgs,
}

/// Which desktop the executor drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DesktopMode {
    /// The desktop of this session (DISPLAY and the session bus on Linux).
    Current,
    /// A private Xvfb desktop the executor starts and stops itself (Linux).
    Headless,
}

/// Why a flag's value cannot be parsed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// Not `WIDTHxHEIGHT`.
    #[error("{0:?} is not WIDTHxHEIGHT (e.g. 1920x1080)")]
    NotASize(String),
    /// A width or height outside 1..=16384.
    #[error("{0:?}: width and height must be 1..=16384")]
    SizeOutOfRange(String),
    /// Not a number.
    #[error("not a number: {0}")]
    NotANumber(#[from] std::num::ParseFloatError),
    /// A frequency outside 0..=1000.
    #[error("must be between 0 (off) and 1000")]
    RateOutOfRange,
    /// A recording length outside 1..=86400 seconds.
    #[error("must be between 1 and 86400 seconds")]
    RecordSecondsOutOfRange,
}

/// Parses `WIDTHxHEIGHT` (each 1..=16384).
fn parse_size(text: &str) -> Result<(u32, u32), ValueError> {
    let bad = || ValueError::NotASize(text.to_owned());
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let w: u32 = w.trim().parse().map_err(|_| bad())?;
    let h: u32 = h.trim().parse().map_err(|_| bad())?;
    if !(1..=16_384).contains(&w) || !(1..=16_384).contains(&h) {
        return Err(ValueError::SizeOutOfRange(text.to_owned()));
    }
    Ok((w, h))
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("insecure", &self.insecure)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("allow_apps", &self.allow_apps)
            .field("launch_dirs", &self.launch_dirs)
            .field("shell_allow", &self.shell_allow)
            .field("shell_workdir", &self.shell_workdir)
            .field("mcp_stdio_allow", &self.mcp_stdio_allow)
            .field("mcp_stdio_workdirs", &self.mcp_stdio_workdirs)
            .field("reset_hook", &self.reset_hook)
            .field("scratch_dir", &self.scratch_dir)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("desktop", &self.desktop)
            .field("connect", &self.connect)
            .field("name", &self.name)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No token and no --insecure.
    #[error(
        "a token is required (--token or UFO_EXECUTOR_TOKEN); pass --insecure to run without one on loopback"
    )]
    MissingToken,
    /// --insecure on a non-loopback address.
    #[error("--insecure is only allowed on a loopback address, not {0}")]
    InsecureNonLoopback(SocketAddr),
    /// An empty token.
    #[error("the token must not be empty")]
    EmptyToken,
    /// A malformed allow-list entry.
    #[error("bad --allow-app entry '{0}': expected name=path or a program name")]
    BadAllowApp(String),
    /// Only one of the TLS certificate and key was given.
    #[error("--tls-cert and --tls-key must be given together")]
    TlsPair,
    /// A TLS file cannot be read.
    #[error("cannot read {what} {path}")]
    TlsRead {
        /// "--tls-cert" or "--tls-key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A launch directory cannot be resolved (it does not exist).
    #[error("bad --launch-dir {path}: {source}")]
    LaunchDir {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A launch directory is not a directory.
    #[error("bad --launch-dir {0}: is not a directory")]
    LaunchDirNotADirectory(PathBuf),
    /// --shell-allow without --shell-workdir.
    #[error("--shell-allow needs --shell-workdir (the directory commands run in)")]
    ShellNoWorkdir,
    /// The shell working directory cannot be resolved or is not a directory.
    #[error("bad --shell-workdir {path}: {why}")]
    ShellWorkdir {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A shell allow-list entry that is neither a bare name nor an absolute path, or is a shell.
    #[error("bad --shell-allow entry '{0}': {1}")]
    BadShellAllow(String, &'static str),
    /// A shell limit of zero.
    #[error("{0} must be at least 1")]
    ShellZero(&'static str),
    /// A --mcp-stdio-allow entry that is neither a bare name nor an absolute path, or is a shell.
    #[error("bad --mcp-stdio-allow entry '{0}': {1}")]
    BadMcpStdioAllow(String, &'static str),
    /// A --mcp-stdio-workdirs entry that is not a directory.
    #[error("bad --mcp-stdio-workdirs entry '{}': {why}", path.display())]
    McpStdioWorkdir {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A dial-out setting is malformed.
    #[error("{0}")]
    DialOut(String),
    /// A reset setting is malformed.
    #[error("{0}")]
    ResetHook(String),
    /// Deadline settings contradict each other.
    #[error("--default-deadline-ms must be between 1 and --max-deadline-ms")]
    BadDeadlines,
}

/// The server's TLS identity as read from the configured files.
#[derive(Clone)]
pub struct TlsPem {
    /// PEM certificate chain.
    pub cert: Vec<u8>,
    /// PEM private key.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("cert_bytes", &self.cert.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Config {
    /// A configuration with every default, listening on `listen` (for tests and embedding).
    pub fn for_tests(listen: SocketAddr, token: Option<&str>) -> Self {
        let mut c = Self::parse_from(["ufo-executor"]);
        c.listen = listen;
        c.token = token.map(str::to_owned);
        c.insecure = token.is_none();
        c
    }

    /// Checks the security rules and limits; called before serving.
    pub fn validate(&self, bound: SocketAddr) -> Result<(), ConfigError> {
        if self.connect.is_some() {
            // Dialling out binds nothing: the enrollment token authenticates the stream instead.
            crate::dialout::Settings::from_config(self)?;
            return self.validate_common();
        }
        match &self.token {
            Some(t) if t.is_empty() => return Err(ConfigError::EmptyToken),
            Some(_) => {}
            None if !self.insecure => return Err(ConfigError::MissingToken),
            None if !bound.ip().is_loopback() => {
                return Err(ConfigError::InsecureNonLoopback(bound));
            }
            None => {}
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError::TlsPair);
        }
        self.validate_common()
    }

    /// The rules both transports share: deadlines, launch directories, shell, allow-list.
    fn validate_common(&self) -> Result<(), ConfigError> {
        if self.default_deadline_ms == 0 || self.default_deadline_ms > self.max_deadline_ms {
            return Err(ConfigError::BadDeadlines);
        }
        self.launch_dirs()?;
        self.shell()?;
        self.processes()?;
        self.allowed_apps().map(|_| ())
    }

    /// run_command's rules (off without --shell-allow), the working directory resolved.
    pub fn reset(&self) -> Result<crate::reset::ResetConfig, ConfigError> {
        let hook: Vec<String> = self
            .reset_hook
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if self.reset_hook.is_some() && hook.is_empty() {
            return Err(ConfigError::ResetHook("--reset-hook is empty".into()));
        }
        if self.reset_hook_timeout_ms == 0 || self.reset_close_timeout_ms == 0 {
            return Err(ConfigError::ResetHook(
                "--reset-hook-timeout-ms and --reset-close-timeout-ms must be at least 1".into(),
            ));
        }
        if let Some(dir) = &self.scratch_dir
            && !dir.is_dir()
        {
            return Err(ConfigError::ResetHook(format!(
                "--scratch-dir {} is not a directory",
                dir.display()
            )));
        }
        Ok(crate::reset::ResetConfig {
            scratch_dir: self.scratch_dir.clone(),
            hook,
            hook_timeout: std::time::Duration::from_millis(self.reset_hook_timeout_ms),
            close_timeout: std::time::Duration::from_millis(self.reset_close_timeout_ms),
        })
    }

    /// `run_command`'s rules, checked.
    pub fn shell(&self) -> Result<crate::shell::ShellConfig, ConfigError> {
        let allow: Vec<String> = self
            .shell_allow
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if allow.is_empty() {
            return Ok(crate::shell::ShellConfig::default());
        }
        for entry in &allow {
            allowed_program(entry).map_err(|why| ConfigError::BadShellAllow(entry.clone(), why))?;
        }
        let Some(dir) = &self.shell_workdir else {
            return Err(ConfigError::ShellNoWorkdir);
        };
        let workdir = match std::fs::canonicalize(dir) {
            Ok(real) if real.is_dir() => real,
            Ok(_) => {
                return Err(ConfigError::ShellWorkdir {
                    path: dir.clone(),
                    why: "is not a directory".into(),
                });
            }
            Err(e) => {
                return Err(ConfigError::ShellWorkdir {
                    path: dir.clone(),
                    why: e.to_string(),
                });
            }
        };
        for (flag, value) in [
            ("--shell-timeout-ms", self.shell_timeout_ms),
            (
                "--shell-max-output-bytes",
                self.shell_max_output_bytes as u64,
            ),
            ("--shell-max-arg-bytes", self.shell_max_arg_bytes as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::ShellZero(flag));
            }
        }
        Ok(crate::shell::ShellConfig {
            allow,
            workdir,
            path: self.shell_path.clone(),
            timeout: std::time::Duration::from_millis(self.shell_timeout_ms),
            max_output_bytes: self.shell_max_output_bytes,
            max_args: self.shell_max_args,
            max_arg_bytes: self.shell_max_arg_bytes,
        })
    }

    /// process_start's rules (off without --mcp-stdio-allow), checked.
    pub fn processes(&self) -> Result<crate::process::ProcessConfig, ConfigError> {
        let allow: Vec<String> = self
            .mcp_stdio_allow
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        for entry in &allow {
            allowed_program(entry)
                .map_err(|why| ConfigError::BadMcpStdioAllow(entry.clone(), why))?;
        }
        for (flag, value) in [
            (
                "--mcp-stdio-max-processes",
                self.mcp_stdio_max_processes as u64,
            ),
            ("--mcp-stdio-idle-ms", self.mcp_stdio_idle_ms),
            (
                "--mcp-stdio-max-read-bytes",
                self.mcp_stdio_max_read_bytes as u64,
            ),
            (
                "--mcp-stdio-max-message-bytes",
                self.mcp_stdio_max_message_bytes as u64,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::ShellZero(flag));
            }
        }
        let workdirs = self
            .mcp_stdio_workdirs
            .iter()
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| match std::fs::canonicalize(d) {
                Ok(real) if real.is_dir() => Ok(real),
                Ok(_) => Err(ConfigError::McpStdioWorkdir {
                    path: d.clone(),
                    why: "not a directory".into(),
                }),
                Err(e) => Err(ConfigError::McpStdioWorkdir {
                    path: d.clone(),
                    why: e.to_string(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::process::ProcessConfig {
            allow,
            workdirs,
            max_processes: self.mcp_stdio_max_processes,
            max_read_bytes: self.mcp_stdio_max_read_bytes,
            max_message_bytes: self.mcp_stdio_max_message_bytes,
            stderr_bytes: self.mcp_stdio_stderr_bytes,
            idle: std::time::Duration::from_millis(self.mcp_stdio_idle_ms),
        })
    }

    /// The launch directories, resolved (each must exist and be a directory).
    pub fn launch_dirs(&self) -> Result<Vec<PathBuf>, ConfigError> {
        self.launch_dirs
            .iter()
            .map(|d| match std::fs::canonicalize(d) {
                Ok(real) if real.is_dir() => Ok(real),
                Ok(_) => Err(ConfigError::LaunchDirNotADirectory(d.clone())),
                Err(source) => Err(ConfigError::LaunchDir {
                    path: d.clone(),
                    source,
                }),
            })
            .collect()
    }

    /// The TLS certificate chain and key (PEM bytes) when TLS is configured.
    pub fn tls_pem(&self) -> Result<Option<TlsPem>, ConfigError> {
        let read = |what, path: &PathBuf| {
            std::fs::read(path).map_err(|source| ConfigError::TlsRead {
                what,
                path: path.clone(),
                source,
            })
        };
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(TlsPem {
                cert: read("--tls-cert", cert)?,
                key: read("--tls-key", key)?,
            })),
            (None, None) => Ok(None),
            _ => Err(ConfigError::TlsPair),
        }
    }

    /// The launch allow-list as (name, program) pairs.
    pub fn allowed_apps(&self) -> Result<Vec<(String, PathBuf)>, ConfigError> {
        self.allow_apps
            .iter()
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let (name, path) = match e.split_once('=') {
                    Some((n, p)) => (n.trim(), p.trim()),
                    None => (e.trim(), e.trim()),
                };
                if name.is_empty() || path.is_empty() {
                    return Err(ConfigError::BadAllowApp(e.clone()));
                }
                Ok((name.to_owned(), PathBuf::from(path)))
            })
            .collect()
    }
}

/// A frequency: finite, 0 (off) up to 1000 per second.
fn animation_hz(s: &str) -> Result<f64, ValueError> {
    let hz: f64 = s.parse()?;
    if hz.is_finite() && (0.0..=1000.0).contains(&hz) {
        Ok(hz)
    } else {
        Err(ValueError::RateOutOfRange)
    }
}

/// A recording's longest time: finite, 1 second to a day.
fn record_seconds(s: &str) -> Result<f64, ValueError> {
    let secs: f64 = s.parse()?;
    if secs.is_finite() && (1.0..=86_400.0).contains(&secs) {
        Ok(secs)
    } else {
        Err(ValueError::RecordSecondsOutOfRange)
    }
}

/// An allow-list entry for programs run without a shell (`--shell-allow`, `--mcp-stdio-allow`): a bare
/// program name or an absolute path, and never a shell (which would run any command line).
fn allowed_program(entry: &str) -> Result<(), &'static str> {
    let path = std::path::Path::new(entry);
    let bare = path.components().count() == 1 && !path.has_root();
    if !bare && !path.is_absolute() {
        return Err("expected a program name or an absolute path");
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if crate::shell::SHELLS.contains(&stem.as_str()) {
        return Err("a shell would run any command line");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_lengths_are_checked() {
        assert_eq!(record_seconds("600").unwrap(), 600.0);
        for bad in ["0", "-1", "inf", "NaN", "86401"] {
            assert!(record_seconds(bad).is_err(), "{bad}");
        }
        assert!(record_seconds("x").is_err());
    }

    #[test]
    fn animation_rates_are_checked() {
        assert_eq!(animation_hz("10"), Ok(10.0));
        assert_eq!(animation_hz("0"), Ok(0.0));
        for bad in ["-1", "NaN", "inf", "1001", "fast"] {
            assert!(animation_hz(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn desktop_sizes_are_checked() {
        assert_eq!(parse_size("1280x800"), Ok((1280, 800)));
        assert!(parse_size("1280").is_err());
        assert!(parse_size("0x10").is_err());
        let c = Config::parse_from(["x", "--desktop", "headless", "--desktop-size", "800x600"]);
        assert_eq!(
            (c.desktop, c.desktop_size),
            (DesktopMode::Headless, (800, 600))
        );
    }

    #[test]
    fn security_rules() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let mut c = Config::parse_from(["x"]);
        assert!(matches!(c.validate(lo), Err(ConfigError::MissingToken)));
        c.insecure = true;
        assert!(c.validate(lo).is_ok());
        assert!(matches!(
            c.validate(any),
            Err(ConfigError::InsecureNonLoopback(_))
        ));
        c.token = Some("s3cret".into());
        assert!(c.validate(any).is_ok());
        c.token = Some(String::new());
        assert!(matches!(c.validate(lo), Err(ConfigError::EmptyToken)));
        assert!(!format!("{:?}", Config::for_tests(lo, Some("s3cret"))).contains("s3cret"));
        c.token = Some("s3cret".into());
        c.tls_cert = Some("/nonexistent/cert.pem".into());
        assert!(matches!(c.validate(lo), Err(ConfigError::TlsPair)));
        c.tls_key = Some("/nonexistent/key.pem".into());
        assert!(c.validate(lo).is_ok());
        let err = c.tls_pem().unwrap_err();
        assert!(
            err.to_string().contains("--tls-cert /nonexistent/cert.pem"),
            "{err}"
        );
    }

    #[test]
    #[cfg(unix)]
    fn shell_settings_are_checked() {
        let off = Config::parse_from(["x"]).shell().unwrap();
        assert!(!off.enabled());
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let on = Config::parse_from(["x", "--shell-allow", "ls,/bin/cat", "--shell-workdir", dir])
            .shell()
            .unwrap();
        assert_eq!(on.allow, ["ls", "/bin/cat"]);
        assert_eq!(on.workdir, std::fs::canonicalize(dir).unwrap());
        for (args, why) in [
            (vec!["--shell-allow", "ls"], "needs --shell-workdir"),
            (
                vec!["--shell-allow", "bash", "--shell-workdir", dir],
                "a shell",
            ),
            (
                vec!["--shell-allow", "/usr/bin/sh", "--shell-workdir", dir],
                "a shell",
            ),
            (
                vec!["--shell-allow", "bin/ls", "--shell-workdir", dir],
                "absolute path",
            ),
            (
                vec!["--shell-allow", "ls", "--shell-workdir", "/nonexistent/x"],
                "bad --shell-workdir",
            ),
            (
                vec![
                    "--shell-allow",
                    "ls",
                    "--shell-workdir",
                    dir,
                    "--shell-timeout-ms",
                    "0",
                ],
                "--shell-timeout-ms must be at least 1",
            ),
        ] {
            let e = Config::parse_from(std::iter::once("x").chain(args.iter().copied()))
                .shell()
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }

    #[test]
    fn allow_list_entries() {
        let c = Config::parse_from(["x", "--allow-app", "editor=/usr/bin/mousepad,gtk3-demo"]);
        let apps = c.allowed_apps().unwrap();
        assert_eq!(
            apps[0],
            ("editor".into(), PathBuf::from("/usr/bin/mousepad"))
        );
        assert_eq!(apps[1], ("gtk3-demo".into(), PathBuf::from("gtk3-demo")));
        let bad = Config::parse_from(["x", "--allow-app", "=oops"]);
        assert!(bad.allowed_apps().is_err());
    }
}
