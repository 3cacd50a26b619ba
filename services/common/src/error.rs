//! The one error-code table of the system.
//!
//! Every failure a client can see has an [`ErrorCode`], mapped once to an HTTP status (REST) and a gRPC code
//! (tonic). REST bodies are [`ErrorBody`] `{code, message}`. Internal causes are logged, never returned.

use serde::{Deserialize, Serialize};

/// A client-visible error class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or a field is invalid.
    InvalidArgument,
    /// No or wrong credentials.
    Unauthenticated,
    /// Credentials are valid but do not allow this.
    PermissionDenied,
    /// The addressed thing does not exist.
    NotFound,
    /// The thing exists already with different content.
    AlreadyExists,
    /// The request conflicts with the current state (e.g. no question is pending).
    FailedPrecondition,
    /// A limit was hit (rate, quota, steps, cost).
    ResourceExhausted,
    /// The request body is larger than allowed.
    PayloadTooLarge,
    /// The content type is not accepted.
    UnsupportedMediaType,
    /// The operation was cancelled.
    Cancelled,
    /// The operation ran out of time.
    DeadlineExceeded,
    /// A dependency is down or the service is shutting down; retry later.
    Unavailable,
    /// The operation is not supported here (e.g. a backend missing on this platform).
    Unimplemented,
    /// A bug or an unexpected failure; details are in the logs.
    Internal,
}

impl ErrorCode {
    /// Every code, for tables and tests.
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::InvalidArgument,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::FailedPrecondition,
        ErrorCode::ResourceExhausted,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Cancelled,
        ErrorCode::DeadlineExceeded,
        ErrorCode::Unavailable,
        ErrorCode::Unimplemented,
        ErrorCode::Internal,
    ];

    /// The HTTP status this code maps to.
    pub fn http_status(self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ErrorCode::InvalidArgument => S::BAD_REQUEST,
            ErrorCode::Unauthenticated => S::UNAUTHORIZED,
            ErrorCode::PermissionDenied => S::FORBIDDEN,
            ErrorCode::NotFound => S::NOT_FOUND,
            ErrorCode::AlreadyExists | ErrorCode::FailedPrecondition => S::CONFLICT,
            ErrorCode::ResourceExhausted => S::TOO_MANY_REQUESTS,
            ErrorCode::PayloadTooLarge => S::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => S::UNSUPPORTED_MEDIA_TYPE,
            // 499 "client closed request" is non-standard; a cancelled operation is a conflict with state.
            ErrorCode::Cancelled => S::CONFLICT,
            ErrorCode::DeadlineExceeded => S::GATEWAY_TIMEOUT,
            ErrorCode::Unavailable => S::SERVICE_UNAVAILABLE,
            ErrorCode::Unimplemented => S::NOT_IMPLEMENTED,
            ErrorCode::Internal => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC code this code maps to.
    pub fn grpc_code(self) -> tonic::Code {
        use tonic::Code as C;
        match self {
            ErrorCode::InvalidArgument => C::InvalidArgument,
            ErrorCode::Unauthenticated => C::Unauthenticated,
            ErrorCode::PermissionDenied => C::PermissionDenied,
            ErrorCode::NotFound => C::NotFound,
            ErrorCode::AlreadyExists => C::AlreadyExists,
            ErrorCode::FailedPrecondition => C::FailedPrecondition,
            ErrorCode::ResourceExhausted | ErrorCode::PayloadTooLarge => C::ResourceExhausted,
            ErrorCode::UnsupportedMediaType => C::InvalidArgument,
            ErrorCode::Cancelled => C::Cancelled,
            ErrorCode::DeadlineExceeded => C::DeadlineExceeded,
            ErrorCode::Unavailable => C::Unavailable,
            ErrorCode::Unimplemented => C::Unimplemented,
            ErrorCode::Internal => C::Internal,
        }
    }

    /// The code a gRPC status from another service maps back to (for REST answers built on gRPC calls).
    pub fn from_grpc(code: tonic::Code) -> ErrorCode {
        use tonic::Code as C;
        match code {
            C::InvalidArgument | C::OutOfRange => ErrorCode::InvalidArgument,
            C::Unauthenticated => ErrorCode::Unauthenticated,
            C::PermissionDenied => ErrorCode::PermissionDenied,
            C::NotFound => ErrorCode::NotFound,
            C::AlreadyExists => ErrorCode::AlreadyExists,
            C::FailedPrecondition | C::Aborted => ErrorCode::FailedPrecondition,
            C::ResourceExhausted => ErrorCode::ResourceExhausted,
            C::Cancelled => ErrorCode::Cancelled,
            C::DeadlineExceeded => ErrorCode::DeadlineExceeded,
            C::Unavailable => ErrorCode::Unavailable,
            C::Unimplemented => ErrorCode::Unimplemented,
            C::Ok | C::Unknown | C::Internal | C::DataLoss => ErrorCode::Internal,
        }
    }

    /// The snake_case name used in JSON bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::FailedPrecondition => "failed_precondition",
            ErrorCode::ResourceExhausted => "resource_exhausted",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unimplemented => "unimplemented",
            ErrorCode::Internal => "internal",
        }
    }

    /// A `tonic::Status` with this code and message.
    pub fn status(self, message: impl Into<String>) -> tonic::Status {
        tonic::Status::new(self.grpc_code(), message)
    }
}

/// A refusal that a client must tell apart from others of the same code, carried as the `ufo-reason`
/// metadata of a `tonic::Status` (never recognised by its message text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The worker does not hold the session's lease: another worker took the task over.
    LeaseLost,
}

impl Reason {
    /// The metadata key.
    pub const KEY: &'static str = "ufo-reason";

    fn as_str(self) -> &'static str {
        match self {
            Reason::LeaseLost => "lease-lost",
        }
    }

    /// `status` carrying this reason.
    pub fn attach(self, mut status: tonic::Status) -> tonic::Status {
        status.metadata_mut().insert(
            Self::KEY,
            tonic::metadata::MetadataValue::from_static(self.as_str()),
        );
        status
    }

    /// The reason a status carries, if any.
    pub fn of(status: &tonic::Status) -> Option<Reason> {
        match status.metadata().get(Self::KEY)?.to_str().ok()? {
            "lease-lost" => Some(Reason::LeaseLost),
            _ => None,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON body of every REST error: `{"code": "not_found", "message": "task 42 not found"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error class.
    pub code: ErrorCode,
    /// What is wrong, for a person; names the offending field where there is one.
    pub message: String,
}

impl ErrorBody {
    /// A body with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_travels_as_metadata_not_as_text() {
        let status = Reason::LeaseLost.attach(ErrorCode::FailedPrecondition.status("taken over"));
        assert_eq!(Reason::of(&status), Some(Reason::LeaseLost));
        let look_alike = ErrorCode::FailedPrecondition.status("lease of session s is not held");
        assert_eq!(Reason::of(&look_alike), None);
    }

    #[test]
    fn every_code_maps_to_an_error_status_on_both_protocols() {
        for code in ErrorCode::ALL {
            let http = code.http_status();
            assert!(
                http.is_client_error() || http.is_server_error(),
                "{code}: {http}"
            );
            assert_ne!(code.grpc_code(), tonic::Code::Ok, "{code}");
        }
    }

    #[test]
    fn grpc_codes_map_back_to_the_same_class() {
        for code in ErrorCode::ALL {
            let back = ErrorCode::from_grpc(code.grpc_code());
            assert_eq!(
                back.http_status().as_u16() / 100,
                code.http_status().as_u16() / 100,
                "{code}"
            );
        }
        assert_eq!(
            ErrorCode::from_grpc(tonic::Code::NotFound),
            ErrorCode::NotFound
        );
    }

    #[test]
    fn json_body_uses_snake_case_codes() {
        let body = ErrorBody::new(ErrorCode::NotFound, "task 1 not found");
        let text = serde_json::to_string(&body).unwrap();
        assert_eq!(text, r#"{"code":"not_found","message":"task 1 not found"}"#);
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
    }
}

/// An error and its causes on one line, `outer: inner: …`, each message once (an outer message that
/// already quotes its cause does not repeat it). For logs and for reasons an operator reads, where the
/// innermost cause ("invalid peer certificate: UnknownIssuer") is the useful part.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod chain_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);
    #[derive(Debug, thiserror::Error)]
    #[error("inner: {0}")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn every_cause_is_named_once() {
        let e = Outer(Inner(std::io::Error::other("the root")));
        assert_eq!(super::chain(&e), "outer: inner: the root");
    }
}
