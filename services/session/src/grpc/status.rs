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
        StoreError::InvalidArgument(what) => ErrorCode::InvalidArgument.status(what),
        error @ StoreError::LeaseLost(_) => ufo_common::error::Reason::LeaseLost
            .attach(ErrorCode::FailedPrecondition.status(error.to_string())),
        StoreError::Database(error) => match class(&error) {
            Class::Unavailable => {
                tracing::error!(error = ?error, "database unavailable");
                ErrorCode::Unavailable.status("the database is unavailable; retry later")
            }
            Class::BadData(message) => {
                tracing::warn!(error = ?error, "the database refused a value");
                ErrorCode::InvalidArgument
                    .status(format!("the database refused a value: {message}"))
            }
            Class::Internal => {
                tracing::error!(error = ?error, "store operation failed");
                ErrorCode::Internal.status("internal error; see the service logs")
            }
        },
        StoreError::Blob(
            error @ (crate::blob::BlobError::HashMismatch { .. }
            | crate::blob::BlobError::InvalidHash(_)),
        ) => ErrorCode::InvalidArgument.status(error.to_string()),
        StoreError::Blob(error) if !matches!(error, crate::blob::BlobError::NotFound(_)) => {
            tracing::error!(error = ?error, "blob store unavailable");
            ErrorCode::Unavailable.status("the blob store is unavailable; retry later")
        }
        error => {
            tracing::error!(error = ?error, "store operation failed");
            ErrorCode::Internal.status("internal error; see the service logs")
        }
    }
}

/// What a database error means for the caller.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    /// The connection is gone or the server is not accepting work: the same call may succeed later.
    Unavailable,
    /// The database refused a value the caller sent (SQLSTATE class 22, "data exception"): request
    /// validation should have caught it first; this keeps a gap there a caller's mistake.
    BadData(String),
    /// Anything else: a bug.
    Internal,
}

fn class(error: &sqlx::Error) -> Class {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => Class::Unavailable,
        // A connection cut mid-message surfaces as a protocol error.
        sqlx::Error::Protocol(_) => Class::Unavailable,
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some(code) => sqlstate_class(code, db.message()),
            None => Class::Internal,
        },
        _ => Class::Internal,
    }
}

/// Postgres SQLSTATEs (and SQLite's busy/locked codes) by what they mean for the caller.
fn sqlstate_class(code: &str, message: &str) -> Class {
    match code {
        // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (a restart), 53300
        // too_many_connections, 08xxx connection exceptions; SQLite 5 BUSY and 6 LOCKED.
        "57P01" | "57P02" | "57P03" | "53300" | "5" | "6" => Class::Unavailable,
        c if c.starts_with("08") => Class::Unavailable,
        c if c.starts_with("22") => Class::BadData(message.to_owned()),
        _ => Class::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_loss_is_unavailable_and_bad_data_invalid() {
        for code in ["57P01", "57P02", "57P03", "08006", "08003", "53300", "5"] {
            assert_eq!(sqlstate_class(code, ""), Class::Unavailable, "{code}");
        }
        assert_eq!(
            sqlstate_class("22P05", "unsupported Unicode escape sequence"),
            Class::BadData("unsupported Unicode escape sequence".into())
        );
        assert_eq!(sqlstate_class("23505", ""), Class::Internal);
        assert_eq!(sqlstate_class("42P01", ""), Class::Internal);
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(
            status(StoreError::Database(io)).code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            status(StoreError::Database(sqlx::Error::PoolTimedOut)).code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            status(StoreError::Database(sqlx::Error::RowNotFound)).code(),
            tonic::Code::Internal
        );
    }
}
