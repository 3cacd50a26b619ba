//! The suite's settings: one clap struct, every limit a flag with an environment fallback
//! (`UFO_SUITE_*`, distinct from the services' own variables, which the started services inherit).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ufo_common::telemetry::TelemetryArgs;

/// `ufo-suite`: runs task files against the whole system on a private desktop and prints a table.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "ufo-suite",
    about = "Run real-application tasks (task files: setup, request, demonstration, checks) against session + executor + agent on a private Xvfb desktop, with a demonstration-following model stand-in or a real model, and print a table per task"
)]
pub struct Config {
    /// Task files, or folders searched recursively for `*.toml` task files (comma-separated in the
    /// environment).
    #[arg(
        long = "tasks",
        env = "UFO_SUITE_TASKS",
        value_delimiter = ',',
        default_value = "tasks"
    )]
    pub tasks: Vec<PathBuf>,
    /// Run only the tasks whose name contains one of these words (comma-separated in the environment).
    #[arg(long = "only", env = "UFO_SUITE_ONLY", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Check the task files and list them, then exit without starting anything.
    #[arg(long = "validate")]
    pub validate: bool,
    /// Exit 1 when fewer than this fraction of the tasks pass (0.0 to 1.0).
    #[arg(
        long = "min-success",
        env = "UFO_SUITE_MIN_SUCCESS",
        default_value_t = 1.0
    )]
    pub min_success: f64,
    /// A real OpenAI-compatible model endpoint (base URL, e.g. `https://api.openai.com/v1`) instead of the
    /// demonstration-following stand-in; the suite forwards the agent's calls to it and measures them.
    #[arg(long = "model-url", env = "UFO_SUITE_MODEL_URL")]
    pub model_url: Option<String>,
    /// The key for `--model-url`.
    #[arg(
        long = "model-key",
        env = "UFO_SUITE_MODEL_KEY",
        hide_env_values = true
    )]
    pub model_key: Option<String>,
    /// The model the agents use with `--model-url` (HostAgent and AppAgent).
    #[arg(long = "model", env = "UFO_SUITE_MODEL", default_value = "gpt-4o")]
    pub model: String,
    /// Postgres URL for the session store (a database the suite may create tables in); default: an
    /// embedded SQLite file in the output folder.
    #[arg(
        long = "database-url",
        env = "UFO_SUITE_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Where `ufo-session`, `ufo-executor` and `ufo-agent` are; default: next to `ufo-suite`.
    #[arg(long = "bin-dir", env = "UFO_SUITE_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Screen size of the suite's desktop, WIDTHxHEIGHT.
    #[arg(long = "screen", env = "UFO_SUITE_SCREEN", default_value = "1280x800", value_parser = parse_size)]
    pub screen: (u32, u32),
    /// Folder for the report (`report.json`), each task's files and a failed task's last screenshot;
    /// default: a new folder under the system's temporary directory.
    #[arg(long = "out", env = "UFO_SUITE_OUT")]
    pub out: Option<PathBuf>,
    /// Step limit of a task that does not set `max_steps`.
    #[arg(long = "max-steps", env = "UFO_SUITE_MAX_STEPS", default_value_t = 40)]
    pub max_steps: u32,
    /// Time limit of a task that does not set `timeout_seconds`, in seconds.
    #[arg(
        long = "task-timeout-seconds",
        env = "UFO_SUITE_TASK_TIMEOUT_SECONDS",
        default_value_t = 120
    )]
    pub task_timeout_seconds: u32,
    /// Longest wait for a setup application's window to show controls, in milliseconds.
    #[arg(
        long = "app-ready-timeout-ms",
        env = "UFO_SUITE_APP_READY_TIMEOUT_MS",
        default_value_t = 20_000
    )]
    pub app_ready_timeout_ms: u64,
    /// Longest wait for a check to hold (files are written and dialogs exit asynchronously), in
    /// milliseconds.
    #[arg(
        long = "check-timeout-ms",
        env = "UFO_SUITE_CHECK_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub check_timeout_ms: u64,
    /// Longest wait, after a task, for its windows to close, in milliseconds.
    #[arg(
        long = "cleanup-timeout-ms",
        env = "UFO_SUITE_CLEANUP_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub cleanup_timeout_ms: u64,
    /// Times the stand-in looks again for a control or window that is not listed yet before it fails.
    #[arg(
        long = "standin-max-waits",
        env = "UFO_SUITE_STANDIN_MAX_WAITS",
        default_value_t = 5
    )]
    pub standin_max_waits: u32,
    /// Times the stand-in retries a failed action (or re-assigns a failed subtask) before it fails.
    #[arg(
        long = "standin-max-retries",
        env = "UFO_SUITE_STANDIN_MAX_RETRIES",
        default_value_t = 1
    )]
    pub standin_max_retries: u32,
    /// How long the stand-in takes to answer each call, in milliseconds (default 0: at once). A real
    /// model takes seconds; with e.g. 2000 the wall times show what a saved model call saves (the reuse
    /// benchmark, docs/knowledge.md "Reuse").
    #[arg(
        long = "standin-latency-ms",
        env = "UFO_SUITE_STANDIN_LATENCY_MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=60_000)
    )]
    pub standin_latency_ms: u64,
    /// After all tasks ran, shut the model endpoint and replay each passed task from a fresh setup, its
    /// windows moved and resized on the screen (a fixed-size dialog only moved) and its documents
    /// changed as its `[replay]` says; the checks must pass again, and the replays meet the same
    /// threshold (the table gives replay time per step beside the model-driven time).
    #[arg(long = "replay", env = "UFO_SUITE_REPLAY")]
    pub replay: bool,
    /// With `--replay`: replay each passed task this many times in a row, each from a fresh setup with
    /// its windows placed anew; its replay passes only if every one does (the table says which failed).
    #[arg(
        long = "replay-times",
        env = "UFO_SUITE_REPLAY_TIMES",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=20)
    )]
    pub replay_times: u32,
    /// Run the agents with `--knowledge`: each finished task becomes an experience of the suite's user,
    /// retrieved into later tasks' prompts. Learning tasks (`learn_from`) pass only with it; `false`
    /// shows them failing.
    #[arg(long = "knowledge", env = "UFO_SUITE_KNOWLEDGE", default_value_t = true,
        action = clap::ArgAction::Set)]
    pub knowledge: bool,
    /// Give the agent the tasks' MCP servers (`[[mcp]]`: an application's own API, a third-party agent).
    /// `false` removes them: an API task then runs through the GUI (its demonstration's `steps`).
    #[arg(long = "mcp", env = "UFO_SUITE_MCP", default_value_t = true,
        action = clap::ArgAction::Set)]
    pub mcp: bool,
    /// The agents' `--knowledge-budget-chars`: characters of retrieved knowledge per prompt (whole
    /// experiences of the suite's short tasks fit three at a time).
    #[arg(
        long = "knowledge-budget-chars",
        env = "UFO_SUITE_KNOWLEDGE_BUDGET_CHARS",
        default_value_t = 9_000
    )]
    pub knowledge_budget_chars: u32,
    /// Longest wait, before a learning task, for its teacher's experience to be retrievable (it is
    /// stored after the teacher's end is reported), in milliseconds.
    #[arg(
        long = "experience-timeout-ms",
        env = "UFO_SUITE_EXPERIENCE_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub experience_timeout_ms: u64,

    /// A task a person shows (`[person]`): how long `ufo record` may take to start recording, to print
    /// each of the person's clicks as recorded, and to store the demonstration after Enter, in
    /// milliseconds.
    #[arg(
        long = "person-timeout-ms",
        env = "UFO_SUITE_PERSON_TIMEOUT_MS",
        default_value_t = 20_000
    )]
    pub person_timeout_ms: u64,
    /// Largest model request the suite's model endpoint accepts, in bytes.
    #[arg(long = "max-body-bytes", env = "UFO_SUITE_MAX_BODY_BYTES", default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// The Python with pyatspi that reads controls for checks (Debian's python3-pyatspi).
    #[arg(
        long = "python",
        env = "UFO_SUITE_PYTHON",
        default_value = "/usr/bin/python3"
    )]
    pub python: PathBuf,
    /// Logs and span export.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Why a `--screen` value is not a screen size.
#[derive(Debug, thiserror::Error)]
enum SizeError {
    /// Not `WIDTHxHEIGHT`.
    #[error("expected WIDTHxHEIGHT, got {0:?}")]
    Shape(String),
    /// A side that is not a number in range.
    #[error("{0:?} is not a size between 320 and 8192")]
    Side(String),
}

fn parse_size(s: &str) -> Result<(u32, u32), SizeError> {
    let (w, h) = s
        .split_once('x')
        .ok_or_else(|| SizeError::Shape(s.to_owned()))?;
    let n = |v: &str| {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (320..=8192).contains(n))
            .ok_or_else(|| SizeError::Side(v.to_owned()))
    };
    Ok((n(w)?, n(h)?))
}

impl Config {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.min_success) {
            return Err(ConfigError(format!(
                "--min-success must be between 0 and 1, got {}",
                self.min_success
            )));
        }
        if self.tasks.is_empty() {
            return Err(ConfigError("--tasks names no file or folder".into()));
        }
        for (flag, v) in [
            ("--max-steps", u64::from(self.max_steps)),
            (
                "--task-timeout-seconds",
                u64::from(self.task_timeout_seconds),
            ),
            ("--app-ready-timeout-ms", self.app_ready_timeout_ms),
            ("--check-timeout-ms", self.check_timeout_ms),
            ("--cleanup-timeout-ms", self.cleanup_timeout_ms),
            ("--experience-timeout-ms", self.experience_timeout_ms),
            ("--person-timeout-ms", self.person_timeout_ms),
            (
                "--knowledge-budget-chars",
                u64::from(self.knowledge_budget_chars),
            ),
            ("--max-body-bytes", self.max_body_bytes as u64),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{flag} must be more than 0")));
            }
        }
        if let Some(url) = &self.model_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ConfigError(format!(
                "--model-url must start with http:// or https://, got {url:?}"
            )));
        }
        Ok(())
    }

    /// [`Self::app_ready_timeout_ms`] as a duration.
    pub fn app_ready_timeout(&self) -> Duration {
        Duration::from_millis(self.app_ready_timeout_ms)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused() {
        let parse = |args: &[&str]| {
            Config::try_parse_from(std::iter::once("ufo-suite").chain(args.iter().copied()))
        };
        assert!(parse(&["--screen", "10x10"]).is_err());
        assert!(parse(&["--screen", "1280"]).is_err());
        assert_eq!(
            parse(&["--screen", "1024x768"]).unwrap().screen,
            (1024, 768)
        );
        for bad in [
            &["--min-success", "1.5"][..],
            &["--max-steps", "0"],
            &["--model-url", "api.openai.com"],
        ] {
            assert!(parse(bad).unwrap().validate().is_err(), "{bad:?}");
        }
        assert!(parse(&[]).unwrap().validate().is_ok());
    }
}
