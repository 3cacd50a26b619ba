//! Errors of the LLM client.

use std::time::Duration;

/// Why a chat call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with a non-success status.
    #[error("the model endpoint answered {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Response body (truncated), as the provider sent it.
        body: String,
        /// The provider's `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// The request could not be sent or the response not read.
    #[error("cannot reach the model endpoint: {host}: {cause}")]
    Transport {
        /// The endpoint's host (not the whole URL: it may carry query parameters an operator
        /// considers private).
        host: String,
        /// What failed, from the error's types.
        failure: NetworkFailure,
        /// The innermost cause, as the network stack said it.
        cause: String,
    },
    /// The call took longer than the configured timeout.
    #[error("the model call timed out after {0:?}")]
    Timeout(Duration),
    /// The provider's response did not have the expected shape.
    #[error("unexpected response from the model endpoint: {0}")]
    Decode(String),
    /// The reply body was larger than the configured cap; reading stopped there (never retried: the
    /// same request would get the same reply).
    #[error("the model reply exceeded the size cap of {limit} bytes (--llm-max-reply-bytes)")]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The configuration is unusable (bad URL, bad header value).
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The model never produced usable output within the re-ask budget.
    #[error("the model gave no usable answer after {attempts} attempts: {last_problem}")]
    Unusable {
        /// Attempts made (first ask + re-asks).
        attempts: u32,
        /// What was wrong with the last reply.
        last_problem: String,
    },
    /// Both the primary and the backup model failed.
    #[error("primary model failed ({primary}); backup model failed ({backup})")]
    BothFailed {
        /// The primary's error.
        primary: Box<LlmError>,
        /// The backup's error.
        backup: Box<LlmError>,
    },
}

impl LlmError {
    /// Whether retrying the same call may succeed (429, 5xx, transport errors, timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::Transport { .. } | Self::Timeout(_) => true,
            _ => false,
        }
    }

    /// The provider's requested wait, when it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What kind of network failure stopped a model call, read from the error's types (never its text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFailure {
    /// Nothing listens at the address.
    Refused,
    /// The host name does not resolve.
    Dns,
    /// The TLS handshake failed.
    Tls,
    /// The connection or the read timed out.
    TimedOut,
    /// The connection was reset or closed mid-call.
    Dropped,
    /// No route to the network or the host.
    Unreachable,
    /// Anything else.
    Other,
}

impl NetworkFailure {
    /// The failure `e` is, from reqwest's own tests and the I/O and TLS errors in its chain of causes.
    pub fn of(e: &reqwest::Error) -> Self {
        use std::io::ErrorKind;
        if e.is_timeout() {
            return Self::TimedOut;
        }
        if e.is_dns() {
            return Self::Dns;
        }
        // The chain of causes, including the errors an I/O error wraps (which it does not name as its
        // source): rustls's error sits inside one or two of them.
        let mut causes: Vec<&(dyn std::error::Error + 'static)> = vec![e];
        while let Some(c) = causes.pop() {
            if c.is::<rustls::Error>() {
                return Self::Tls;
            }
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    ErrorKind::ConnectionRefused => return Self::Refused,
                    ErrorKind::TimedOut => return Self::TimedOut,
                    ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof => return Self::Dropped,
                    ErrorKind::NetworkUnreachable | ErrorKind::HostUnreachable => {
                        return Self::Unreachable;
                    }
                    _ => {}
                }
                if let Some(inner) = io.get_ref() {
                    causes.push(inner);
                }
            }
            if let Some(next) = c.source() {
                causes.push(next);
            }
        }
        if !e.is_connect() && (e.is_request() || e.is_body()) {
            // Connected, then the call failed in flight (e.g. closed before the reply completed).
            Self::Dropped
        } else {
            Self::Other
        }
    }

    /// A short phrase for people.
    pub fn phrase(self) -> &'static str {
        match self {
            Self::Refused => "connection refused",
            Self::Dns => "the host name does not resolve",
            Self::Tls => "the TLS handshake failed",
            Self::TimedOut => "timed out",
            Self::Dropped => "the connection was dropped",
            Self::Unreachable => "the network is unreachable",
            Self::Other => "network error",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        ufo_common::tls::install_crypto_provider();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let e = reqwest::Client::new()
            .get(format!("http://{addr}/v1/models"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(NetworkFailure::of(&e), NetworkFailure::Refused, "{e:?}");
    }

    #[tokio::test]
    async fn a_server_that_does_not_speak_tls_fails_the_handshake() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
            // Held open until the client gives up, so the failure is the handshake, not a closed socket.
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 4096]);
        });
        ufo_common::tls::install_crypto_provider();
        let e = reqwest::Client::new()
            .get(format!("https://{addr}/v1/models"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(NetworkFailure::of(&e), NetworkFailure::Tls, "{e:?}");
        server.join().unwrap();
    }
}
