//! What every UFO service shares.
//!
//! - [`error`]: one error-code table mapped to both HTTP status and gRPC code.
//! - [`shutdown`]: SIGINT/SIGTERM turned into one `CancellationToken`.
//! - [`telemetry`]: `tracing` with optional OTLP/gRPC export and W3C trace-context propagation.
//! - [`grpc`]: health + reflection services, bearer-token auth, client channels that carry trace context.

pub mod error;
pub mod grpc;
pub mod shutdown;
pub mod telemetry;

pub use error::{ErrorBody, ErrorCode};
