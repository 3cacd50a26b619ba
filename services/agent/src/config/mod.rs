//! Configuration of `ufo-agent`: every CLI flag with its environment fallback, in one layer that imports
//! nothing else from this crate. Nothing else reads the environment. The feature modules build their
//! runtime values from these types (`impl` blocks next to what they build).
//!
//! Every limit the API and the task runner enforce is a flag here with its default in the doc comment
//! (which `--help` prints).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use ufo_common::telemetry::TelemetryArgs;

mod agents;
mod llm;
mod mcp_server;
pub mod prices;
pub mod secret;
mod viewer;

pub use agents::{AgentArgs, ERROR_CHARS, GroundingMode};
pub use llm::{DEFAULT_MAX_REPLY_BYTES, LlmArgs, LlmFlavor, parse_base_url};
pub use mcp_server::McpServerConfig;
pub use secret::ApiKey;
pub use viewer::ViewerConfig;

/// The agent service.
#[derive(Debug, Clone, Parser)]
#[command(name = "ufo-agent", version, about)]
pub struct Config {
    /// Address the gRPC server (AgentService, health, reflection) binds to.
    #[arg(long, env = "UFO_AGENT_LISTEN", default_value = "127.0.0.1:50052")]
    pub listen: SocketAddr,

    /// Address the REST API binds to.
    #[arg(long, env = "UFO_AGENT_HTTP_LISTEN", default_value = "127.0.0.1:8080")]
    pub http_listen: SocketAddr,

    /// How long memory freed by the process stays with it for reuse before the allocator (mimalloc)
    /// returns it to the system, in milliseconds (`-1`: never). A step's screenshot buffers are
    /// megabytes, freed and taken again a few hundred milliseconds later; memory returned meanwhile is
    /// faulted in and zeroed by the kernel again, on the step's critical path (docs/benchmark.md,
    /// 2026-11-30). mimalloc's own default is 1000.
    #[arg(
        long = "allocator-purge-delay-ms",
        env = "UFO_AGENT_ALLOCATOR_PURGE_DELAY_MS",
        default_value_t = 10_000,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(-1..)
    )]
    pub allocator_purge_delay_ms: i32,

    /// Let the kernel back the process's memory with transparent huge pages where the allocator asks for
    /// them. Off by default: a step's buffers are freed and taken again within milliseconds, and each
    /// fresh 2 MB page is zeroed whole on its first touch; the throughput run's CPU per step was about 7 %
    /// lower with them off (docs/benchmark.md, 2026-11-30 evening). Linux only.
    #[arg(long, env = "UFO_AGENT_TRANSPARENT_HUGE_PAGES")]
    pub transparent_huge_pages: bool,

    #[command(flatten)]
    pub api: ApiConfig,

    #[command(flatten)]
    pub session: SessionConfig,

    #[command(flatten)]
    pub runner: RunnerConfig,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Malformed-request checks in front of the gRPC server.
    #[command(flatten)]
    pub request_checks: ufo_common::checked::RequestCheckArgs,

    /// Whether the gRPC server offers reflection.
    #[command(flatten)]
    pub reflection: ufo_common::grpc::ReflectionArgs,

    /// LLM endpoint, models, retries and prices.
    #[command(flatten)]
    pub llm: LlmArgs,

    /// Agent limits and switches.
    #[command(flatten)]
    pub agents: AgentArgs,

    /// Dial-out executors (`ufo-executor --connect`).
    #[command(flatten)]
    pub dial_out: DialOutConfig,

    /// Check the model endpoint (API key, reachability, the configured models), print one line per
    /// finding and exit: 0 when nothing would make a task fail, 1 otherwise. `ufo up` and `ufo doctor`
    /// run this.
    #[arg(long)]
    pub check_model: bool,

    /// How long the model endpoint check (at start, and --check-model) waits for an answer, in seconds.
    #[arg(long, env = "UFO_AGENT_LLM_CHECK_TIMEOUT_SECS", default_value_t = 10)]
    pub llm_check_timeout_secs: u64,
}

/// Dial-out executors: executors that open a stream to this agent instead of being dialled
/// (docs/executors.md, "Dial-out").
#[derive(Debug, Clone, clap::Args)]
pub struct DialOutConfig {
    /// The file of dial-out executors' enrollment tokens (JSON, only their SHA-256 stored; created and
    /// revoked with `POST /v1/admin/executors/NAME/tokens` and `DELETE .../tokens/ID`). When set, the gRPC
    /// server also offers `ufo.v1.ExecutorHub`, and every name with a token that is not revoked is an
    /// executor tasks may name.
    #[arg(
        long = "executor-enrollments-file",
        env = "UFO_AGENT_EXECUTOR_ENROLLMENTS_FILE"
    )]
    pub enrollments_file: Option<PathBuf>,

    /// How often the agent and a dial-out executor exchange heartbeats, in milliseconds; a connection
    /// silent for three intervals is closed.
    #[arg(long = "dial-out-heartbeat-ms", env = "UFO_AGENT_DIAL_OUT_HEARTBEAT_MS", default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub heartbeat_ms: u64,

    /// How often the replica holding a dial-out executor's connection refreshes its `last_heartbeat` in
    /// the desktop pool's store, in milliseconds (0: never; it is written when the executor connects).
    /// Heartbeats themselves are kept in memory: `GET /v1/admin/executors` and `GET /v1/admin/desktops`
    /// on that replica show the last one; other replicas show the store's, at most this old.
    #[arg(long = "dial-out-seen-refresh-ms", env = "UFO_AGENT_DIAL_OUT_SEEN_REFRESH_MS", default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub seen_refresh_ms: u64,

    /// Enrollment tokens chosen by the operator, `NAME=FILE` (repeat the flag, or comma-separate in the
    /// variable): at start the token in FILE (e.g. a compose secret; surrounding whitespace ignored) is
    /// enrolled for the dial-out executor NAME in `--executor-enrollments-file` (only its hash stored;
    /// nothing changes when it is enrolled already, and a revoked one stays revoked). A missing file, a
    /// bad name or an empty token stops the start with the reason.
    #[arg(long = "enroll-executor", env = "UFO_AGENT_ENROLL_EXECUTOR", value_delimiter = ',',
        value_name = "NAME=FILE", value_parser = given_enrollment)]
    pub enroll_executors: Vec<GivenEnrollment>,

    /// The connected executors, shared by every clone of this configuration (not a flag).
    #[arg(skip)]
    pub hub: crate::dispatch::dialout::HubHandle,
}

/// One `--enroll-executor NAME=FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenEnrollment {
    /// The dial-out executor's name.
    pub name: String,
    /// The file holding its token.
    pub file: PathBuf,
}

fn given_enrollment(text: &str) -> Result<GivenEnrollment, String> {
    match text.trim().split_once('=') {
        Some((name, file)) if !name.trim().is_empty() && !file.trim().is_empty() => {
            Ok(GivenEnrollment {
                name: name.trim().to_owned(),
                file: PathBuf::from(file.trim()),
            })
        }
        _ => Err(format!(
            "{text:?} is not NAME=FILE (an executor name and the file holding its enrollment token)"
        )),
    }
}

/// How the API authenticates callers and which limits it enforces.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiConfig {
    /// API keys accepted as `Authorization: Bearer <key>`, comma-separated. Each may be `name:key`; the
    /// name labels the tasks it submits.
    #[arg(
        long = "api-keys",
        env = "UFO_AGENT_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,

    /// Names of the API keys that are admins (see every caller's tasks), comma-separated; every other key
    /// is a user, which sees and acts on only the tasks it submitted.
    #[arg(
        long = "api-admins",
        env = "UFO_AGENT_API_ADMINS",
        value_delimiter = ','
    )]
    pub api_admins: Vec<String>,

    /// A file with one API key per line (`name:key` or `key`; `#` starts a comment).
    #[arg(long = "api-keys-file", env = "UFO_AGENT_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Serve without authentication. Only for a trusted local machine: without keys and without this flag
    /// the service refuses to start.
    #[arg(long = "insecure-no-auth", env = "UFO_AGENT_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,

    /// Largest accepted REST request body, in bytes (default 1048576: room for the longest request or 16
    /// of the longest answers even when every character is JSON-escaped).
    #[arg(long = "max-body-bytes", env = "UFO_AGENT_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest `POST /v1/knowledge/documents` body, in bytes (default 16777216; 413 beyond, nothing
    /// stored). Keep it below the session service's --max-message-bytes.
    #[arg(
        long = "knowledge-max-upload-bytes",
        env = "UFO_AGENT_KNOWLEDGE_MAX_UPLOAD_BYTES",
        default_value_t = 16 * 1024 * 1024,
        value_parser = clap::value_parser!(u64).range(1024..=1024 * 1024 * 1024)
    )]
    pub knowledge_max_upload_bytes: u64,

    /// Most files in one `POST /v1/knowledge/documents` (default 100).
    #[arg(
        long = "knowledge-max-upload-files",
        env = "UFO_AGENT_KNOWLEDGE_MAX_UPLOAD_FILES",
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub knowledge_max_upload_files: u32,

    /// Longest `GET /v1/knowledge/search` query, in characters (default 1000; at most the session
    /// service's --knowledge-max-query-chars).
    #[arg(
        long = "knowledge-max-query-chars",
        env = "UFO_AGENT_KNOWLEDGE_MAX_QUERY_CHARS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub knowledge_max_query_chars: u32,

    /// Most callers named in one `POST /v1/knowledge/{id}/share` or `…/unshare` (default 100; at most
    /// the session service's --knowledge-max-share-callers, which also bounds an item's names in all).
    #[arg(
        long = "knowledge-max-share-callers",
        env = "UFO_AGENT_KNOWLEDGE_MAX_SHARE_CALLERS",
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub knowledge_max_share_callers: u32,

    /// Reuse (issue 33, docs/knowledge.md "Reuse"): a new task whose request matches one of its owner's
    /// earlier finished tasks (at --reuse-min-score or above) follows that task's recorded steps, calling
    /// the model once for the request's new texts and again only where a step's screen differs. A task's
    /// own `reuse` option overrides this default.
    #[arg(
        long = "reuse",
        env = "UFO_AGENT_REUSE",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub reuse: bool,

    /// With reuse: the least similarity (0-1: twice the shared words in order over both requests' words)
    /// an earlier task's request needs for a new request to follow it (default 0.6).
    #[arg(
        long = "reuse-min-score",
        env = "UFO_AGENT_REUSE_MIN_SCORE",
        default_value_t = 0.6,
        value_parser = unit_interval
    )]
    pub reuse_min_score: f64,

    /// With reuse: how many of the owner's retrieved experiences are scored against a new request
    /// (default 5).
    #[arg(
        long = "reuse-candidates",
        env = "UFO_AGENT_REUSE_CANDIDATES",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub reuse_candidates: u32,

    /// Longest accepted task or follow-up request, in characters (default 8000).
    #[arg(
        long = "max-request-chars",
        env = "UFO_AGENT_MAX_REQUEST_CHARS",
        default_value_t = 8000
    )]
    pub max_request_chars: usize,

    /// Longest accepted answer, in characters (default 4000).
    #[arg(
        long = "max-answer-chars",
        env = "UFO_AGENT_MAX_ANSWER_CHARS",
        default_value_t = 4000
    )]
    pub max_answer_chars: usize,

    /// Most answers accepted in one call (default 16).
    #[arg(
        long = "max-answers",
        env = "UFO_AGENT_MAX_ANSWERS",
        default_value_t = 16
    )]
    pub max_answers: usize,

    /// Page size of `GET /v1/tasks` when the client gives none (default 20).
    #[arg(
        long = "default-page-size",
        env = "UFO_AGENT_DEFAULT_PAGE_SIZE",
        default_value_t = 20
    )]
    pub default_page_size: u32,

    /// Largest page size of `GET /v1/tasks` and `GET /v1/tasks/{id}/steps` (default 100).
    #[arg(
        long = "max-page-size",
        env = "UFO_AGENT_MAX_PAGE_SIZE",
        default_value_t = 100
    )]
    pub max_page_size: u32,

    /// Steps a task may take when it asks for no limit (default 50).
    #[arg(
        long = "default-max-steps",
        env = "UFO_AGENT_DEFAULT_MAX_STEPS",
        default_value_t = 50
    )]
    pub default_max_steps: u32,

    /// Largest step limit a task may ask for (default 500).
    #[arg(
        long = "max-steps-cap",
        env = "UFO_AGENT_MAX_STEPS_CAP",
        default_value_t = 500
    )]
    pub max_steps_cap: u32,

    /// LLM cost a task may spend when it asks for no limit, in US dollars (default 1.0).
    #[arg(
        long = "default-max-cost",
        env = "UFO_AGENT_DEFAULT_MAX_COST",
        default_value_t = 1.0
    )]
    pub default_max_cost: f64,

    /// Largest cost limit a task may ask for, in US dollars (default 20.0).
    #[arg(
        long = "max-cost-cap",
        env = "UFO_AGENT_MAX_COST_CAP",
        default_value_t = 20.0
    )]
    pub max_cost_cap: f64,

    /// Wall-time limit of a task when it asks for none, in seconds (default 1800).
    #[arg(
        long = "default-timeout-seconds",
        env = "UFO_AGENT_DEFAULT_TIMEOUT_SECONDS",
        default_value_t = 1800
    )]
    pub default_timeout_seconds: u32,

    /// Largest wall-time limit a task may ask for, in seconds (default 86400).
    #[arg(
        long = "timeout-cap-seconds",
        env = "UFO_AGENT_TIMEOUT_CAP_SECONDS",
        default_value_t = 86_400
    )]
    pub timeout_cap_seconds: u32,

    /// Executors tasks may name, as `name=http(s)://host:port`, comma-separated; they receive
    /// `--executor-token` and are verified with `--executor-ca`.
    #[arg(long = "executors", env = "UFO_AGENT_EXECUTORS", value_delimiter = ',')]
    pub executors: Vec<String>,

    /// A JSON file declaring executors with their own token and CA:
    /// `{"executors": {"NAME": {"address": "https://host:port", "token_file": "PATH", "ca": "PATH"}}}`.
    #[arg(long = "executors-file", env = "UFO_AGENT_EXECUTORS_FILE")]
    pub executors_file: Option<PathBuf>,

    /// Hosts a task may name by address (`http(s)://host:port`) instead of by executor name,
    /// comma-separated; such executors never receive a token. Empty (the default): addresses are refused.
    /// Link-local and cloud metadata addresses are refused even when listed.
    #[arg(
        long = "executor-address-hosts",
        env = "UFO_AGENT_EXECUTOR_ADDRESS_HOSTS",
        value_delimiter = ','
    )]
    pub executor_address_hosts: Vec<String>,

    /// Executor used when a task names none: a declared name, or an address (declared as `default`).
    #[arg(
        long = "default-executor",
        env = "UFO_AGENT_DEFAULT_EXECUTOR",
        default_value = "http://127.0.0.1:50051"
    )]
    pub default_executor: String,

    /// The task viewer and the event stream.
    #[command(flatten)]
    pub viewer: ViewerConfig,

    /// The MCP endpoint `/mcp`.
    #[command(flatten)]
    pub mcp_server: McpServerConfig,
}

/// How the agent reaches the session service.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionConfig {
    /// Address of the session service.
    #[arg(
        long = "session-url",
        env = "UFO_AGENT_SESSION_URL",
        default_value = "http://127.0.0.1:50053"
    )]
    pub session_url: String,

    /// Bearer token for the session service; unset sends none.
    #[arg(
        long = "session-token",
        env = "UFO_AGENT_SESSION_TOKEN",
        hide_env_values = true
    )]
    pub session_token: Option<String>,

    /// Timeout of one unary call to the session service, in milliseconds (default 10000).
    #[arg(
        long = "session-timeout-ms",
        env = "UFO_AGENT_SESSION_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub session_timeout_ms: u64,
}

/// What unanswered questions do when their wait times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum QuestionFallback {
    /// The round fails ("no answer from a person within Ns").
    #[default]
    Fail,
    /// Each question is answered "(no answer within the timeout)" and the round goes on.
    Continue,
}

/// The task runner: how many tasks this replica runs and how it holds them.
#[derive(Debug, Clone, clap::Args)]
pub struct RunnerConfig {
    /// Tasks this replica runs at once; 0 serves the API only (default 1). A task waiting for a person
    /// is parked and holds no slot (docs/queue.md).
    #[arg(
        long = "runner-slots",
        env = "UFO_AGENT_RUNNER_SLOTS",
        default_value_t = 1
    )]
    pub slots: usize,

    /// Worker id used for leases; unset means `<hostname-or-agent>-<pid>-<random>`.
    #[arg(long = "worker-id", env = "UFO_AGENT_WORKER_ID")]
    pub worker_id: Option<String>,

    /// Longest a desktop's reset between tasks of the pool may take (the executor's `Reset`: closing
    /// what the task launched, its scratch directory, the operator's reset hook), in milliseconds; a
    /// reset that fails or takes longer marks the desktop broken (docs/executors.md, "The pool").
    #[arg(
        long = "desktop-reset-timeout-ms",
        env = "UFO_AGENT_DESKTOP_RESET_TIMEOUT_MS",
        default_value_t = 180_000
    )]
    pub desktop_reset_timeout_ms: u64,

    /// Check desktops back in without resetting them (for executors that have nothing to reset, or
    /// runs without any executor); by default every task's desktop is reset at its end.
    #[arg(long = "no-desktop-reset", env = "UFO_AGENT_NO_DESKTOP_RESET")]
    pub no_desktop_reset: bool,

    /// Check a desktop in without claiming the next task for it in the same store call. By default the
    /// check-in at a task's end also claims the oldest waiting task that fits the desktop (one
    /// transaction, `CheckInAndClaim`), and that task starts at once; with this flag the desktop waits
    /// for the claim loop (the path before the hand-over, kept to measure it: docs/executors.md).
    #[arg(long = "no-desktop-handover", env = "UFO_AGENT_NO_DESKTOP_HANDOVER")]
    pub no_desktop_handover: bool,

    /// Longest the picture of the desktop after a task's last step may take, in milliseconds. When a task
    /// finishes or fails, the runner captures the whole desktop before the desktop is checked in and
    /// keeps it with the task's last step (screenshot kind `after`; the viewer's last step card shows
    /// it). A capture that fails or takes longer is logged and skipped. 0: no such picture.
    #[arg(
        long = "after-picture-timeout-ms",
        env = "UFO_AGENT_AFTER_PICTURE_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub after_picture_timeout_ms: u64,

    /// Lease length, in milliseconds; renewed every third of it (default 15000).
    #[arg(
        long = "lease-ms",
        env = "UFO_AGENT_LEASE_MS",
        default_value_t = 15_000
    )]
    pub lease_ms: u32,

    /// How long an idle runner waits before asking for work again, in milliseconds (default 500).
    #[arg(
        long = "claim-interval-ms",
        env = "UFO_AGENT_CLAIM_INTERVAL_MS",
        default_value_t = 500
    )]
    pub claim_interval_ms: u64,

    /// How long a task waits for answers to its questions, in seconds from the step that asked
    /// (default 3600); then `--question-fallback` applies.
    #[arg(
        long = "question-timeout-seconds",
        env = "UFO_AGENT_QUESTION_TIMEOUT_SECONDS",
        default_value_t = 3600
    )]
    pub question_timeout_seconds: u64,

    /// What unanswered questions do after `--question-timeout-seconds`: `fail` the round (default), or
    /// `continue` with the answer "(no answer within the timeout)" recorded for each.
    #[arg(
        long = "question-fallback",
        env = "UFO_AGENT_QUESTION_FALLBACK",
        value_enum,
        default_value = "fail"
    )]
    pub question_fallback: QuestionFallback,

    /// How long a held action waits for a decision, in seconds from the step that held it (default 3600);
    /// then it is rejected (the
    /// rejection, with reason "no decision within Ns", is recorded like a person's).
    #[arg(
        long = "confirm-timeout-seconds",
        env = "UFO_AGENT_CONFIRM_TIMEOUT_SECONDS",
        default_value_t = 3600
    )]
    pub confirm_timeout_seconds: u64,

    /// Attempts of a store write (RecordStep, an intent, a status) while the session service is
    /// unreachable or reports a transient failure, with exponential backoff from 100 ms to 5 s (default 8,
    /// about 15 s); then the task is released. A deterministic refusal fails the task at once.
    #[arg(
        long = "store-retry-attempts",
        env = "UFO_AGENT_STORE_RETRY_ATTEMPTS",
        default_value_t = 8
    )]
    pub store_retry_attempts: u32,

    /// Releases without a recorded step after which a claimed task fails instead of running again
    /// (default 5).
    #[arg(
        long = "max-releases",
        env = "UFO_AGENT_MAX_RELEASES",
        default_value_t = 5
    )]
    pub max_releases: u32,

    /// Bearer token sent to executors; unset sends none.
    #[arg(
        long = "executor-token",
        env = "UFO_AGENT_EXECUTOR_TOKEN",
        hide_env_values = true
    )]
    pub executor_token: Option<String>,

    /// PEM file of the CA certificate(s) that signed `https://` executors' TLS certificates; without it,
    /// `https` executors are verified against the public web PKI roots.
    #[arg(long = "executor-ca", env = "UFO_AGENT_EXECUTOR_CA")]
    pub executor_ca: Option<std::path::PathBuf>,

    /// Deadline of one executor command, in milliseconds (default 30000).
    #[arg(
        long = "executor-deadline-ms",
        env = "UFO_AGENT_EXECUTOR_DEADLINE_MS",
        default_value_t = 30_000
    )]
    pub executor_deadline_ms: u32,

    /// How long to keep retrying an executor that is unreachable (restarting), in milliseconds, in total
    /// per batch (default 30000; 0: no retries). Observations are retried while it is UNAVAILABLE; a
    /// batch with an action only when the connection was refused before sending (so it surely did not
    /// run). After the budget the task fails with an error naming the executor.
    #[arg(
        long = "executor-retry-budget-ms",
        env = "UFO_AGENT_EXECUTOR_RETRY_BUDGET_MS",
        default_value_t = 30_000
    )]
    pub executor_retry_budget_ms: u64,

    /// Largest gRPC message exchanged with an executor (screenshots), in bytes (default 33554432).
    #[arg(long = "executor-max-message-bytes", env = "UFO_AGENT_EXECUTOR_MAX_MESSAGE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub executor_max_message_bytes: usize,

    /// On shutdown, how long the current step may run to completion before it is abandoned (not recorded;
    /// the next runner observes again), in milliseconds (default 20000).
    #[arg(
        long = "drain-ms",
        env = "UFO_AGENT_DRAIN_MS",
        default_value_t = 20_000
    )]
    pub drain_ms: u64,

    /// Record a step that continues while the next step observes and asks the model (off the critical
    /// path); the next step's actions still wait until it is durable. `false`: each step is recorded
    /// before the next starts (default true).
    #[arg(long = "record-ahead", env = "UFO_AGENT_RECORD_AHEAD", default_value_t = true, action = clap::ArgAction::Set)]
    pub record_ahead: bool,
}

/// Why a value is not a number from 0 to 1.
#[derive(Debug, thiserror::Error)]
pub enum UnitIntervalError {
    /// Not a number at all.
    #[error("{0}")]
    NotANumber(#[from] std::num::ParseFloatError),
    /// A number outside 0..=1.
    #[error("{0} is not between 0 and 1")]
    OutOfRange(f64),
}

/// A number from 0 to 1.
fn unit_interval(s: &str) -> Result<f64, UnitIntervalError> {
    let v: f64 = s.parse()?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(UnitIntervalError::OutOfRange(v))
    }
}
