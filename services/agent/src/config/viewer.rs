//! The task viewer's flags (Jaeger link, SSE keep-alive).

/// The viewer's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ViewerConfig {
    /// Base address of a Jaeger UI (e.g. `http://jaeger:16686`); when set, the task page links to the
    /// task's traces there. Unset shows no link.
    #[arg(long = "jaeger-url", env = "UFO_JAEGER_URL", value_parser = http_url)]
    pub jaeger_url: Option<String>,

    /// Seconds between keep-alive comments on an idle `GET /v1/tasks/{id}/events` stream (default 15).
    #[arg(
        long = "sse-keepalive-seconds",
        env = "UFO_SSE_KEEPALIVE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub sse_keepalive_seconds: u64,
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
