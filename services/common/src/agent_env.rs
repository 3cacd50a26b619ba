//! Environment variables: every `ufo-agent` flag has the fallback `UFO_AGENT_` + its name in capitals with
//! `-` as `_` (`--llm-base-url` ↔ `UFO_AGENT_LLM_BASE_URL`), except the flags every service shares
//! (`UFO_LOG`, `UFO_LOG_FORMAT`, `UFO_OTLP_ENDPOINT`, `UFO_OTLP_TIMEOUT_MS`, `UFO_GRPC_REFLECTION`,
//! `UFO_MAX_JSON_DEPTH`). The names used before that scheme are refused at start with the new one named:
//! nothing was released under them, and a setting silently ignored would be worse.

/// The names `ufo-agent` read before the scheme, each with the name it reads now. (`UFO_EXECUTOR_TOKEN`
/// and `UFO_EXECUTOR_MAX_MESSAGE_BYTES` are not here: they are the executor's own settings, and a shell
/// that starts both services may well set them.)
pub const RENAMED: &[(&str, &str)] = &[
    ("UFO_AGENT_SHELL", "UFO_AGENT_SHELL_AGENT"),
    (
        "UFO_AGENT_SHELL_DESCRIPTION",
        "UFO_AGENT_SHELL_AGENT_DESCRIPTION",
    ),
    ("UFO_API_ADMINS", "UFO_AGENT_API_ADMINS"),
    ("UFO_API_KEYS", "UFO_AGENT_API_KEYS"),
    ("UFO_API_KEYS_FILE", "UFO_AGENT_API_KEYS_FILE"),
    ("UFO_APP_MODEL", "UFO_AGENT_APP_MODEL"),
    ("UFO_CLAIM_INTERVAL_MS", "UFO_AGENT_CLAIM_INTERVAL_MS"),
    (
        "UFO_CONFIRM_TIMEOUT_SECONDS",
        "UFO_AGENT_CONFIRM_TIMEOUT_SECONDS",
    ),
    ("UFO_DEFAULT_EXECUTOR", "UFO_AGENT_DEFAULT_EXECUTOR"),
    ("UFO_DEFAULT_MAX_COST", "UFO_AGENT_DEFAULT_MAX_COST"),
    ("UFO_DEFAULT_MAX_STEPS", "UFO_AGENT_DEFAULT_MAX_STEPS"),
    ("UFO_DEFAULT_PAGE_SIZE", "UFO_AGENT_DEFAULT_PAGE_SIZE"),
    (
        "UFO_DEFAULT_TIMEOUT_SECONDS",
        "UFO_AGENT_DEFAULT_TIMEOUT_SECONDS",
    ),
    (
        "UFO_DIAL_OUT_HEARTBEAT_MS",
        "UFO_AGENT_DIAL_OUT_HEARTBEAT_MS",
    ),
    ("UFO_DRAIN_MS", "UFO_AGENT_DRAIN_MS"),
    ("UFO_EXECUTORS", "UFO_AGENT_EXECUTORS"),
    ("UFO_EXECUTORS_FILE", "UFO_AGENT_EXECUTORS_FILE"),
    (
        "UFO_EXECUTOR_ADDRESS_HOSTS",
        "UFO_AGENT_EXECUTOR_ADDRESS_HOSTS",
    ),
    ("UFO_EXECUTOR_CA", "UFO_AGENT_EXECUTOR_CA"),
    ("UFO_EXECUTOR_DEADLINE_MS", "UFO_AGENT_EXECUTOR_DEADLINE_MS"),
    (
        "UFO_EXECUTOR_ENROLLMENTS_FILE",
        "UFO_AGENT_EXECUTOR_ENROLLMENTS_FILE",
    ),
    (
        "UFO_EXECUTOR_RETRY_BUDGET_MS",
        "UFO_AGENT_EXECUTOR_RETRY_BUDGET_MS",
    ),
    ("UFO_HOST_MODEL", "UFO_AGENT_HOST_MODEL"),
    ("UFO_INSECURE_NO_AUTH", "UFO_AGENT_INSECURE_NO_AUTH"),
    ("UFO_JAEGER_URL", "UFO_AGENT_JAEGER_URL"),
    (
        "UFO_KNOWLEDGE_MAX_QUERY_CHARS",
        "UFO_AGENT_KNOWLEDGE_MAX_QUERY_CHARS",
    ),
    (
        "UFO_KNOWLEDGE_MAX_UPLOAD_BYTES",
        "UFO_AGENT_KNOWLEDGE_MAX_UPLOAD_BYTES",
    ),
    (
        "UFO_KNOWLEDGE_MAX_UPLOAD_FILES",
        "UFO_AGENT_KNOWLEDGE_MAX_UPLOAD_FILES",
    ),
    ("UFO_LEASE_MS", "UFO_AGENT_LEASE_MS"),
    ("UFO_LLM_API_KEY", "UFO_AGENT_LLM_API_KEY"),
    (
        "UFO_LLM_AZURE_API_VERSION",
        "UFO_AGENT_LLM_AZURE_API_VERSION",
    ),
    ("UFO_LLM_AZURE_DEPLOYMENT", "UFO_AGENT_LLM_AZURE_DEPLOYMENT"),
    ("UFO_LLM_BACKUP_API_KEY", "UFO_AGENT_LLM_BACKUP_API_KEY"),
    ("UFO_LLM_BACKUP_BASE_URL", "UFO_AGENT_LLM_BACKUP_BASE_URL"),
    ("UFO_LLM_BACKUP_MODEL", "UFO_AGENT_LLM_BACKUP_MODEL"),
    ("UFO_LLM_BASE_URL", "UFO_AGENT_LLM_BASE_URL"),
    (
        "UFO_LLM_CHECK_TIMEOUT_SECS",
        "UFO_AGENT_LLM_CHECK_TIMEOUT_SECS",
    ),
    ("UFO_LLM_DEFAULT_PRICE", "UFO_AGENT_LLM_DEFAULT_PRICE"),
    ("UFO_LLM_FLAVOR", "UFO_AGENT_LLM_FLAVOR"),
    ("UFO_LLM_JSON_OBJECT", "UFO_AGENT_LLM_JSON_OBJECT"),
    ("UFO_LLM_JSON_SCHEMA", "UFO_AGENT_LLM_JSON_SCHEMA"),
    ("UFO_LLM_MAX_REPLY_BYTES", "UFO_AGENT_LLM_MAX_REPLY_BYTES"),
    ("UFO_LLM_MAX_RETRIES", "UFO_AGENT_LLM_MAX_RETRIES"),
    ("UFO_LLM_PRICES", "UFO_AGENT_LLM_PRICES"),
    ("UFO_LLM_RETRY_BASE_MS", "UFO_AGENT_LLM_RETRY_BASE_MS"),
    ("UFO_LLM_RETRY_MAX_MS", "UFO_AGENT_LLM_RETRY_MAX_MS"),
    ("UFO_LLM_TEMPERATURE", "UFO_AGENT_LLM_TEMPERATURE"),
    ("UFO_LLM_TIMEOUT_SECS", "UFO_AGENT_LLM_TIMEOUT_SECS"),
    ("UFO_MAX_ANSWERS", "UFO_AGENT_MAX_ANSWERS"),
    ("UFO_MAX_ANSWER_CHARS", "UFO_AGENT_MAX_ANSWER_CHARS"),
    ("UFO_MAX_BODY_BYTES", "UFO_AGENT_MAX_BODY_BYTES"),
    ("UFO_MAX_COST_CAP", "UFO_AGENT_MAX_COST_CAP"),
    ("UFO_MAX_PAGE_SIZE", "UFO_AGENT_MAX_PAGE_SIZE"),
    ("UFO_MAX_RELEASES", "UFO_AGENT_MAX_RELEASES"),
    ("UFO_MAX_REQUEST_CHARS", "UFO_AGENT_MAX_REQUEST_CHARS"),
    ("UFO_MAX_STEPS_CAP", "UFO_AGENT_MAX_STEPS_CAP"),
    ("UFO_MCP_CALL_TIMEOUT_MS", "UFO_AGENT_MCP_CALL_TIMEOUT_MS"),
    (
        "UFO_MCP_CONNECT_TIMEOUT_MS",
        "UFO_AGENT_MCP_CONNECT_TIMEOUT_MS",
    ),
    ("UFO_MCP_ENDPOINT", "UFO_AGENT_MCP_ENDPOINT"),
    (
        "UFO_MCP_ENDPOINT_ALLOWED_HOSTS",
        "UFO_AGENT_MCP_ENDPOINT_ALLOWED_HOSTS",
    ),
    (
        "UFO_MCP_ENDPOINT_ALLOWED_ORIGINS",
        "UFO_AGENT_MCP_ENDPOINT_ALLOWED_ORIGINS",
    ),
    (
        "UFO_MCP_ENDPOINT_KEEPALIVE_SECONDS",
        "UFO_AGENT_MCP_ENDPOINT_KEEPALIVE_SECONDS",
    ),
    (
        "UFO_MCP_ENDPOINT_MAX_BODY_BYTES",
        "UFO_AGENT_MCP_ENDPOINT_MAX_BODY_BYTES",
    ),
    (
        "UFO_MCP_RESTART_BACKOFF_MAX_MS",
        "UFO_AGENT_MCP_RESTART_BACKOFF_MAX_MS",
    ),
    (
        "UFO_MCP_RESTART_BACKOFF_MS",
        "UFO_AGENT_MCP_RESTART_BACKOFF_MS",
    ),
    ("UFO_MCP_RESULT_CHARS", "UFO_AGENT_MCP_RESULT_CHARS"),
    ("UFO_MCP_SERVERS", "UFO_AGENT_MCP_SERVERS"),
    ("UFO_QUESTION_FALLBACK", "UFO_AGENT_QUESTION_FALLBACK"),
    (
        "UFO_QUESTION_TIMEOUT_SECONDS",
        "UFO_AGENT_QUESTION_TIMEOUT_SECONDS",
    ),
    ("UFO_RECORD_AHEAD", "UFO_AGENT_RECORD_AHEAD"),
    ("UFO_RUNNER_SLOTS", "UFO_AGENT_RUNNER_SLOTS"),
    ("UFO_SESSION_TIMEOUT_MS", "UFO_AGENT_SESSION_TIMEOUT_MS"),
    ("UFO_SESSION_TOKEN", "UFO_AGENT_SESSION_TOKEN"),
    ("UFO_SESSION_URL", "UFO_AGENT_SESSION_URL"),
    (
        "UFO_SSE_KEEPALIVE_SECONDS",
        "UFO_AGENT_SSE_KEEPALIVE_SECONDS",
    ),
    ("UFO_STORE_RETRY_ATTEMPTS", "UFO_AGENT_STORE_RETRY_ATTEMPTS"),
    ("UFO_TIMEOUT_CAP_SECONDS", "UFO_AGENT_TIMEOUT_CAP_SECONDS"),
    ("UFO_WORKER_ID", "UFO_AGENT_WORKER_ID"),
];

/// The renamed variables set in `vars`, as one message naming each one's new name; `None` when none is.
pub fn renamed_in<I, K>(vars: I) -> Option<String>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
{
    let set: Vec<String> = vars.into_iter().map(|k| k.as_ref().to_owned()).collect();
    let found: Vec<String> = RENAMED
        .iter()
        .filter(|(old, _)| set.iter().any(|k| k == old))
        .map(|(old, new)| format!("{old} is now {new}"))
        .collect();
    (!found.is_empty()).then(|| {
        format!(
            "ufo-agent no longer reads these environment variables: {} (every ufo-agent variable is \
             UFO_AGENT_ + the flag's name; see docs/configuration.md)",
            found.join("; ")
        )
    })
}
