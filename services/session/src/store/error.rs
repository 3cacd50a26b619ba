//! Why a store operation failed. Internal causes (SQL errors) are kept for logs; the gRPC layer shows
//! clients only the class and a message without them.

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The addressed session, round, step or artifact does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The thing exists already with different content.
    #[error("{0}")]
    AlreadyExists(String),
    /// The request is wrong whatever the state (it names the field).
    #[error("{0}")]
    InvalidArgument(String),
    /// The request conflicts with the current state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The worker does not hold the session's lease.
    #[error("lease of session {0} is not held by this worker")]
    LeaseLost(String),
    /// The database failed.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// Migrations could not run.
    #[error("migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The blob store holding artifact bytes failed.
    #[error("blob store error")]
    Blob(#[from] crate::blob::BlobError),
    /// A stored value could not be read back (a bug or a hand-edited row).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}
