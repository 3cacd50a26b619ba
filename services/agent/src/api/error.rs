//! REST errors: every failure is `ErrorBody {code, message}` with the status of its `ErrorCode`, including
//! axum's own extractor rejections (see [`super::extract`]) and failures of the session service, whose
//! internal causes are logged and never returned.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ufo_common::{ErrorBody, ErrorCode};

/// A client-visible failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// The error class.
    pub code: ErrorCode,
    /// What is wrong, naming the field where there is one.
    pub message: String,
}

impl ApiError {
    /// An error of class `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A malformed request or an invalid field (400, whether the JSON is broken or a value in it is
    /// wrong: one status for every caller mistake in a request).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// The HTTP status of this error.
    pub fn http_status(&self) -> StatusCode {
        self.code.http_status()
    }

    /// The gRPC status of this error.
    pub fn to_status(&self) -> tonic::Status {
        self.code.status(self.message.clone())
    }
}

impl From<tonic::Status> for ApiError {
    /// Maps a session-service failure: client-class messages pass through (the session service names the
    /// field and never leaks internals); server-class causes are logged and replaced.
    fn from(status: tonic::Status) -> Self {
        // A transport failure (the session service went away mid-call or mid-stream) arrives as
        // INTERNAL, UNKNOWN or CANCELLED (the connection's streams reset by HTTP/2) with the transport
        // error as its source, not as a status the session service sent: for the caller it is
        // UNAVAILABLE, and worth retrying.
        let transport = std::error::Error::source(&status).is_some()
            && matches!(
                status.code(),
                tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::Cancelled
            );
        let code = if transport {
            ErrorCode::Unavailable
        } else {
            ErrorCode::from_grpc(status.code())
        };
        // The caller gets the trace id; the log line with the cause carries the same one.
        let trace = ufo_common::telemetry::current_trace_id();
        let see = trace
            .as_deref()
            .map(|id| format!(" (trace {id})"))
            .unwrap_or_default();
        let trace_id = trace.as_deref().unwrap_or("none");
        match code {
            ErrorCode::Internal => {
                tracing::error!(trace_id, grpc.code = ?status.code(), error = %status.message(), "session service failed");
                Self::new(
                    code,
                    format!("internal error; see the agent service logs{see}"),
                )
            }
            ErrorCode::Unavailable | ErrorCode::DeadlineExceeded => {
                tracing::warn!(trace_id, grpc.code = ?status.code(), error = %status.message(), "session service unreachable");
                Self::new(
                    ErrorCode::Unavailable,
                    format!("the session service is unavailable{see}"),
                )
            }
            _ => Self::new(code, status.message()),
        }
    }
}

impl From<ApiError> for tonic::Status {
    fn from(error: ApiError) -> Self {
        error.to_status()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.http_status();
        (status, axum::Json(ErrorBody::new(self.code, self.message))).into_response()
    }
}

/// The documented shape of [`ErrorBody`] (the shared type has no OpenAPI schema of its own).
#[derive(Debug, utoipa::ToSchema)]
#[schema(as = Error)]
#[allow(dead_code)]
pub struct ErrorSchema {
    /// The error class, e.g. `not_found`, `invalid_argument`, `unauthenticated`.
    #[schema(example = "not_found")]
    code: String,
    /// What is wrong, naming the offending field where there is one.
    #[schema(example = "task 0195f8a0-0000-7000-8000-000000000000 not found")]
    message: String,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn with_transport_source(mut status: tonic::Status) -> tonic::Status {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        status.set_source(Arc::new(reset));
        status
    }

    #[test]
    fn a_session_service_that_went_away_is_unavailable_whatever_code_the_transport_chose() {
        for status in [
            tonic::Status::cancelled("h2 protocol error: stream cancelled"),
            tonic::Status::unknown("connection closed before message completed"),
            tonic::Status::internal("h2 protocol error"),
        ] {
            let code = status.code();
            let error = ApiError::from(with_transport_source(status));
            assert_eq!(error.code, ErrorCode::Unavailable, "{code:?}");
            assert_eq!(
                error.to_status().code(),
                tonic::Code::Unavailable,
                "{code:?}"
            );
        }
    }

    #[test]
    fn statuses_the_session_service_sent_keep_their_code() {
        let error = ApiError::from(tonic::Status::not_found("session 1 not found"));
        assert_eq!(error.code, ErrorCode::NotFound);
        assert_eq!(error.message, "session 1 not found");
        let error = ApiError::from(tonic::Status::internal("disk full"));
        assert_eq!(error.code, ErrorCode::Internal);
        assert!(!error.message.contains("disk full"), "{}", error.message);
    }
}
