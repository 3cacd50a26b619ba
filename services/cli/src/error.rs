//! What can go wrong for a `ufo` user, each with a message that says what to do next.

use ufo_common::error::chain as error_chain;

/// A failed command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Nothing answers at the address.
    #[error(
        "cannot reach the agent service at {url} ({cause}); is it running? start it with `ufo up`, or \
         point {flag} / {env} at it"
    )]
    Unreachable {
        /// The address tried.
        url: String,
        /// The transport's reason.
        cause: String,
        /// The flag naming the address.
        flag: &'static str,
        /// The environment variable naming the address.
        env: &'static str,
    },
    /// The service refused the credentials.
    #[error(
        "the agent service rejected the token ({message}); pass --token or set UFO_TOKEN to one of its API \
         keys (`ufo up` prints one)"
    )]
    Unauthenticated {
        /// The service's explanation.
        message: String,
    },
    /// The service answered with an error.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The error code of the `{code, message}` body.
        code: String,
        /// Its message.
        message: String,
    },
    /// The named task (or step, or screenshot) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A gRPC call failed.
    #[error("{message} (gRPC {code:?})")]
    Grpc {
        /// The status code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
    /// The answer was not what the API promises.
    #[error("unexpected answer from the agent service: {0}")]
    Protocol(String),
    /// A flag value is not usable.
    #[error("invalid {flag}: {reason}")]
    InvalidArgument {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
    /// `ufo up` could not start or keep a service running.
    #[error("{0}")]
    Up(String),
    /// A local I/O failure (terminal, files).
    #[error("i/o failed")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// Maps a gRPC status, naming the gRPC address on connection failures.
    pub fn from_status(status: tonic::Status, grpc_url: &str) -> Self {
        match status.code() {
            tonic::Code::Unauthenticated => CliError::Unauthenticated {
                message: status.message().to_owned(),
            },
            // The session store calls a task a session; users know it as a task.
            tonic::Code::NotFound => CliError::NotFound(task_words(status.message())),
            tonic::Code::Unavailable => CliError::Unreachable {
                url: grpc_url.to_owned(),
                cause: status.message().to_owned(),
                flag: "--grpc",
                env: "UFO_GRPC",
            },
            code => CliError::Grpc {
                code,
                message: status.message().to_owned(),
            },
        }
    }
}

impl From<ufo_client::ClientError> for CliError {
    /// A failed REST call in the CLI's words: which flag names the address, what a 401 or 404 means here.
    fn from(e: ufo_client::ClientError) -> Self {
        use ufo_client::ClientError as E;
        let refused = |status: u16, code: String, message: String| match status {
            401 => CliError::Unauthenticated { message },
            404 => CliError::NotFound(task_words(&message)),
            _ => CliError::Api {
                status,
                code,
                message,
            },
        };
        match e {
            E::InvalidUrl { .. } => CliError::InvalidArgument {
                flag: "--server",
                reason: e.to_string(),
            },
            E::Unreachable { url, cause } => CliError::Unreachable {
                url,
                cause,
                flag: "--server",
                env: "UFO_SERVER",
            },
            E::GrpcUnreachable { url, cause } => CliError::Unreachable {
                url,
                cause,
                flag: "--grpc",
                env: "UFO_GRPC",
            },
            E::Api {
                status,
                code,
                message,
            } => refused(status, code, message),
            E::NotTheApi { status, .. } => refused(
                status,
                http_reason(status),
                format!(
                    "the server answered HTTP {status} without an API error body; is --server the agent \
                     service?"
                ),
            ),
            E::Grpc { status, .. } => CliError::Grpc {
                code: status.code(),
                message: status.message().to_owned(),
            },
            E::Build(_) | E::Decode { .. } | E::NoGrpcAddress | E::Token(_) => {
                CliError::Protocol(error_chain(&e))
            }
        }
    }
}

/// An HTTP status's reason as an error code (`bad_gateway`).
fn http_reason(status: u16) -> String {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("error")
        .to_lowercase()
        .replace(' ', "_")
}

/// A store message in the CLI's words: "session <id> not found" → "task <id> not found".
pub(crate) fn task_words(message: &str) -> String {
    message
        .replace("session ", "task ")
        .replace("Session ", "Task ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufo_client::ClientError;

    #[test]
    fn refusals_read_as_the_cli_words_them() {
        let not_found = CliError::from(ClientError::Api {
            status: 404,
            code: "not_found".into(),
            message: "session 7 not found".into(),
        });
        assert!(
            matches!(&not_found, CliError::NotFound(m) if m == "task 7 not found"),
            "{not_found:?}"
        );
        let proxy = CliError::from(ClientError::NotTheApi {
            url: "http://x".into(),
            status: 502,
        });
        assert!(
            matches!(&proxy, CliError::Api { code, message, .. }
                if code == "bad_gateway" && message.contains("--server")),
            "{proxy:?}"
        );
        let refused = CliError::from(ClientError::Api {
            status: 401,
            code: "unauthenticated".into(),
            message: "no key".into(),
        });
        assert!(
            matches!(refused, CliError::Unauthenticated { .. }),
            "{refused:?}"
        );
    }
}
