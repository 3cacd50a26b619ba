//! Why a call to the agent service failed, in the terms a caller acts on: a bad address, nothing answering,
//! the API's own `{code, message}` refusal, or an answer that is not the API's.

/// A failed call to the agent service.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address given for the service is not usable.
    #[error("{url:?} {reason}")]
    InvalidUrl {
        /// The address as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
    /// Nothing answered at the address, or the call timed out.
    #[error("cannot reach the agent service at {url} ({cause})")]
    Unreachable {
        /// The address tried.
        url: String,
        /// The transport's innermost reason ("Connection refused", "timed out").
        cause: String,
    },
    /// The service refused the call with its `{code, message}` error body.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The body's `code` (e.g. `not_found`, `invalid_argument`).
        code: String,
        /// The body's `message`.
        message: String,
    },
    /// Something answered with an error status but not with the API's error body (a proxy, another
    /// service on the port).
    #[error("the server at {url} answered HTTP {status} without an API error body")]
    NotTheApi {
        /// The address called.
        url: String,
        /// HTTP status.
        status: u16,
    },
    /// A successful answer that is not the JSON the API promises.
    #[error("{what}: the answer is not the API's JSON")]
    Decode {
        /// The call (`GET /v1/tasks/…`).
        what: String,
        /// Why it could not be read.
        #[source]
        source: serde_json::Error,
    },
    /// No gRPC address was given for a gRPC call.
    #[error("no gRPC address of the agent service was given")]
    NoGrpcAddress,
    /// Nothing answered at the gRPC address.
    #[error("cannot reach the agent's gRPC API at {url} ({cause})")]
    GrpcUnreachable {
        /// The address tried.
        url: String,
        /// The transport's innermost reason.
        cause: String,
    },
    /// The token cannot be sent as a gRPC header.
    #[error(transparent)]
    Token(#[from] ufo_common::grpc::InvalidToken),
    /// A gRPC call failed with this status.
    #[error("{what} failed: {}", .status.message())]
    Grpc {
        /// The call (`StreamSteps`).
        what: &'static str,
        /// The status the server (or the transport) gave.
        #[source]
        status: tonic::Status,
    },
}

impl ClientError {
    /// The HTTP status of a refused call, if it was one.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } | Self::NotTheApi { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The innermost cause of a transport error (e.g. "Connection refused"), which says the most.
pub(crate) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
