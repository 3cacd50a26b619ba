//! The MCP endpoint's flags (`/mcp`, streamable HTTP): which `Host` and `Origin` headers it accepts
//! (DNS rebinding) and how large a request may be.

/// The `/mcp` endpoint's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct McpServerConfig {
    /// Serve the MCP endpoint `/mcp` (streamable HTTP, behind the same API keys as REST); `false` answers
    /// it 404.
    #[arg(
        long = "mcp-endpoint",
        env = "UFO_AGENT_MCP_ENDPOINT",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub mcp_enabled: bool,

    /// Host names (or `host:port`) `/mcp` accepts in the `Host` header, comma-separated (default
    /// `localhost,127.0.0.1,::1`); `*` accepts any (only behind a proxy that checks it). Other hosts are
    /// 403: a page that rebinds its own name to this machine cannot reach the endpoint.
    #[arg(
        long = "mcp-endpoint-allowed-hosts",
        env = "UFO_AGENT_MCP_ENDPOINT_ALLOWED_HOSTS",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    pub mcp_allowed_hosts: Vec<String>,

    /// Browser origins (`scheme://host[:port]`) `/mcp` accepts in the `Origin` header, comma-separated;
    /// empty (the default): an origin whose host is an allowed host. A request without `Origin` (not
    /// from a browser) passes; any other origin is 403.
    #[arg(
        long = "mcp-endpoint-allowed-origins",
        env = "UFO_AGENT_MCP_ENDPOINT_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub mcp_allowed_origins: Vec<String>,

    /// Largest `/mcp` request body, in bytes, and largest tool arguments (default 1048576); a larger
    /// body is 413, larger arguments an `invalid_argument` tool error.
    #[arg(
        long = "mcp-endpoint-max-body-bytes",
        env = "UFO_AGENT_MCP_ENDPOINT_MAX_BODY_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub mcp_max_body_bytes: usize,

    /// Seconds between keep-alive comments on an idle `/mcp` event stream (default 15).
    #[arg(
        long = "mcp-endpoint-keepalive-seconds",
        env = "UFO_AGENT_MCP_ENDPOINT_KEEPALIVE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub mcp_keepalive_seconds: u64,

    /// Seconds without a desktop tool call after which a caller's direct session on an executor (the
    /// record of its calls) is ended (default 900); the next call starts a new one. `end_direct_session`
    /// ends it at once.
    #[arg(
        long = "mcp-direct-idle-seconds",
        env = "UFO_AGENT_MCP_DIRECT_IDLE_SECONDS",
        default_value_t = 900,
        value_parser = clap::value_parser!(u64).range(1..=604_800)
    )]
    pub mcp_direct_idle_seconds: u64,

    /// How long a direct session's lease lasts without a renewal, in milliseconds (default 30000). The
    /// agent that opened the session renews it every third of this while it keeps it open; once it
    /// lapses (the agent was killed or restarted), any agent replica ends the session as FAILED saying the
    /// agent holding it went away — every replica looks for such sessions as often as it renews.
    #[arg(
        long = "mcp-direct-lease-ms",
        env = "UFO_AGENT_MCP_DIRECT_LEASE_MS",
        default_value_t = 30_000,
        value_parser = clap::value_parser!(u32).range(300..=3_600_000)
    )]
    pub mcp_direct_lease_ms: u32,
}
