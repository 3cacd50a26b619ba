//! What every UFO service shares.
//!
//! - [`error`]: one error-code table mapped to both HTTP status and gRPC code.
//! - [`shutdown`]: SIGINT/SIGTERM turned into one `CancellationToken`.
//! - [`telemetry`]: `tracing` with optional OTLP/gRPC export and W3C trace-context propagation.
//! - [`grpc`]: health + reflection services, bearer-token auth, client channels that carry trace context.
//! - [`effect`]: how sure the executor is that an action did something (executor and agent).
//! - [`names`]: the loose comparison of control names (executor and replay).
//! - [`tls`]: the one rustls crypto provider (ring) every process installs before it builds a TLS client.
//! - [`checked`] and [`wire`]: malformed gRPC requests refused as INVALID_ARGUMENT before they are decoded.
//! - [`memory`]: the process's memory settings (transparent huge pages).

pub mod agent_env;
pub mod checked;
pub mod effect;
pub mod error;
pub mod grpc;
pub mod memory;
pub mod names;
pub mod process;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
pub mod wire;

pub use error::{ErrorBody, ErrorCode};
