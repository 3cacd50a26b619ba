//! Store errors → gRPC statuses. Internal causes are logged here and never sent to the client.

use tonic::Status;
use ufo_common::ErrorCode;

use crate::store::StoreError;

/// The client-facing status of a store error.
pub fn status(error: StoreError) -> Status {
    match error {
        StoreError::NotFound(what) => ErrorCode::NotFound.status(format!("{what} not found")),
        StoreError::AlreadyExists(what) => ErrorCode::AlreadyExists.status(what),
        StoreError::FailedPrecondition(what) => ErrorCode::FailedPrecondition.status(what),
        error @ StoreError::LeaseLost(_) => ErrorCode::FailedPrecondition.status(error.to_string()),
        StoreError::Database(
            error @ (sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_)),
        ) => {
            tracing::error!(error = ?error, "database unavailable");
            ErrorCode::Unavailable.status("the database is unavailable; retry later")
        }
        error => {
            tracing::error!(error = ?error, "store operation failed");
            ErrorCode::Internal.status("internal error; see the service logs")
        }
    }
}
