//! A typed client of the session service for the other services (agent, API).

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::session_store_client::SessionStoreClient;

/// The client type [`connect`] returns: every call carries the bearer token and the trace context.
pub type Client = SessionStoreClient<InterceptedService<Channel, ClientContext>>;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not a valid endpoint.
    #[error("invalid session service url")]
    Url(#[source] tonic::transport::Error),
    /// The token cannot be sent as a header.
    #[error(transparent)]
    Token(#[from] ufo_common::grpc::InvalidToken),
    /// The service is unreachable.
    #[error("cannot connect to the session service")]
    Connect(#[source] tonic::transport::Error),
}

/// Connects to the session service at `url` (e.g. `http://127.0.0.1:50053`), sending `token` as a bearer
/// token when given. `max_message_bytes` bounds messages both ways (artifacts).
pub async fn connect(
    url: &str,
    token: Option<&str>,
    max_message_bytes: usize,
) -> Result<Client, ConnectError> {
    let channel = Endpoint::from_shared(url.to_owned())
        .map_err(ConnectError::Url)?
        .connect()
        .await
        .map_err(ConnectError::Connect)?;
    Ok(
        SessionStoreClient::with_interceptor(channel, ClientContext::new(token)?)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes),
    )
}
