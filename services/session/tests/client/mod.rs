//! The session service as its clients see it: the generated tonic client behind the interceptor every
//! service uses (bearer token, trace context). Shared by the tests that talk to a running service.

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::session_store_client::SessionStoreClient;

/// The client [`connect`] returns: every call carries the bearer token and the trace context.
pub type Client = SessionStoreClient<InterceptedService<Channel, ClientContext>>;

/// Messages both ways are bounded like the agent's default (artifacts included).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Connects to the session service at `url` (e.g. `http://127.0.0.1:50053`), sending `token` as a bearer
/// token when given; panics (failing the test) when the service is unreachable.
pub async fn connect(url: &str, token: Option<&str>) -> Client {
    let channel = Endpoint::from_shared(url.to_owned())
        .expect("a valid session service url")
        .connect()
        .await
        .expect("the session service accepts connections");
    let context = ClientContext::new(token).expect("a token that fits in a header");
    SessionStoreClient::with_interceptor(channel, context)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}
