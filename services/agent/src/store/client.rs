//! The client of the session service that the API and the runner share: one lazily connected channel that
//! adds the bearer token and the caller's `traceparent` to every call.

use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::session_store_client::SessionStoreClient;

use crate::config::SessionConfig;

/// A `SessionStore` client; cheap to clone (clones share the channel).
pub type SessionClient = SessionStoreClient<InterceptedService<Channel, ClientContext>>;

/// Why the session client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SessionClientError {
    /// The session URL does not parse.
    #[error("invalid session url")]
    Url(#[from] tonic::transport::Error),
    /// The token cannot travel in a header.
    #[error(transparent)]
    Token(#[from] ufo_common::grpc::InvalidToken),
}

/// Builds a client that connects on first use (so the agent starts before the session service is up and
/// `/readyz` reports it).
pub fn connect(config: &SessionConfig) -> Result<SessionClient, SessionClientError> {
    let channel = Endpoint::from_shared(config.session_url.clone())?
        .connect_timeout(Duration::from_millis(config.session_timeout_ms))
        .timeout(Duration::from_millis(config.session_timeout_ms))
        .connect_lazy();
    Ok(stream_client(config, channel)?)
}

/// Builds a client on `channel` without a per-call timeout (for long-lived watch streams).
pub fn stream_client(
    config: &SessionConfig,
    channel: Channel,
) -> Result<SessionClient, ufo_common::grpc::InvalidToken> {
    let context = ClientContext::new(config.session_token.as_deref())?;
    Ok(SessionStoreClient::with_interceptor(channel, context)
        .max_decoding_message_size(64 * 1024 * 1024))
}

/// A client for watch streams: same service, no per-call timeout (a watch lasts as long as its task).
pub fn connect_streaming(config: &SessionConfig) -> Result<SessionClient, SessionClientError> {
    let channel = Endpoint::from_shared(config.session_url.clone())?
        .connect_timeout(Duration::from_millis(config.session_timeout_ms))
        .connect_lazy();
    Ok(stream_client(config, channel)?)
}
