//! The task viewer's flags (Jaeger link, SSE keep-alive, the live desktop's rate and quality).

/// The viewer's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ViewerConfig {
    /// Base address of a Jaeger UI (e.g. `http://jaeger:16686`); when set, the task page links to the
    /// task's traces there. Unset shows no link.
    #[arg(long = "jaeger-url", env = "UFO_AGENT_JAEGER_URL", value_parser = http_url)]
    pub jaeger_url: Option<String>,

    /// Seconds between keep-alive comments on an idle `GET /v1/tasks/{id}/events` stream (default 15).
    #[arg(
        long = "sse-keepalive-seconds",
        env = "UFO_AGENT_SSE_KEEPALIVE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub sse_keepalive_seconds: u64,

    /// Most frames a second of a task's live desktop (`GET /v1/tasks/{id}/live`, docs/live.md; default
    /// 5). The executor sends a frame only when the screen changed, and at most its own maximum
    /// (`ufo-executor --watch-max-fps`).
    #[arg(
        long = "live-fps",
        env = "UFO_AGENT_LIVE_FPS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=60)
    )]
    pub live_fps: u32,

    /// JPEG quality of the live desktop's frames, 1..=100 (default 60).
    #[arg(
        long = "live-jpeg-quality",
        env = "UFO_AGENT_LIVE_JPEG_QUALITY",
        default_value_t = 60,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub live_jpeg_quality: u32,

    /// Longest text or key string of one person's input during a takeover
    /// (`POST /v1/tasks/{id}/input`), in bytes (default 4096).
    #[arg(
        long = "max-person-input-bytes",
        env = "UFO_AGENT_MAX_PERSON_INPUT_BYTES",
        default_value_t = 4096,
        value_parser = clap::value_parser!(u32).range(1..=1_048_576)
    )]
    pub max_person_input_bytes: u32,
}

fn http_url(value: &str) -> Result<String, super::llm::BadUrl> {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .ok_or_else(|| super::llm::BadUrl("must start with http:// or https://".into()))?;
    if rest.is_empty() || rest.starts_with('/') || value.chars().any(char::is_whitespace) {
        return Err(super::llm::BadUrl("must name a host".into()));
    }
    Ok(value.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaeger_url_must_be_http() {
        assert_eq!(
            http_url("http://jaeger:16686/").unwrap(),
            "http://jaeger:16686"
        );
        assert!(http_url("https://j.example").is_ok());
        assert!(http_url("javascript:alert(1)").is_err());
        assert!(http_url("http://").is_err());
        assert!(http_url("http:///x").is_err());
    }
}
