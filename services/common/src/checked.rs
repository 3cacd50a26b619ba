//! A tower layer in front of every gRPC server's routes: each unary request message is walked against
//! its descriptor ([`crate::wire`]) before tonic decodes it, so a caller's malformed request — NUL in any
//! string or JSON field, JSON nested past the configured depth, bytes that are not the message, a missing
//! or truncated frame — is answered INVALID_ARGUMENT naming the field, never INTERNAL from prost or from
//! the database further in.
//!
//! Requests are buffered whole (tonic does that anyway for unary calls), up to the server's message
//! limit; a message announced (or sent) larger than that is refused RESOURCE_EXHAUSTED — gRPC's code for
//! "message larger than the configured limit" (grpc/doc/statuscodes.md) — without reading the rest.
//! Client-streaming requests (reflection, the dial-out tunnel) and unknown paths are passed through to
//! tonic, whose limit the handlers map by status code.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes, BytesMut};
use http_body_util::BodyExt as _;
use tonic::Status;
use tonic::body::Body;

use crate::wire::{DescriptorError, Descriptors, Rules};

/// gRPC's length-prefixed message header: a compressed flag and a big-endian length.
const HEADER: usize = 5;

/// The request checks' one setting, shared by the three servers.
#[derive(Debug, Clone, clap::Args)]
pub struct RequestCheckArgs {
    /// Deepest nesting of JSON objects/arrays (protobuf `Struct`/`ListValue`) accepted in any field of a
    /// gRPC request; deeper is INVALID_ARGUMENT naming the field. (prost cannot decode more than about
    /// 32 levels inside a request anyway: its recursion limit is 100 messages, three per JSON level.)
    #[arg(long = "max-json-depth", env = "UFO_MAX_JSON_DEPTH", default_value_t = 32,
        value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_json_depth: u32,
}

impl Default for RequestCheckArgs {
    fn default() -> Self {
        Self { max_json_depth: 32 }
    }
}

impl RequestCheckArgs {
    /// The checks for a server whose decoding limit is `max_message_bytes`; `reject_nul` for servers
    /// that store what they receive in Postgres (which refuses NUL in text and JSON).
    pub fn checks(
        &self,
        reject_nul: bool,
        max_message_bytes: usize,
    ) -> Result<RequestChecks, DescriptorError> {
        RequestChecks::new(
            Rules {
                reject_nul,
                max_json_depth: self.max_json_depth,
            },
            max_message_bytes,
        )
    }
}

/// What the layer checks, shared by every connection.
#[derive(Debug)]
pub struct RequestChecks {
    descriptors: Descriptors,
    rules: Rules,
    max_message_bytes: usize,
}

impl RequestChecks {
    /// Checks every unary `ufo.v1` method, with requests up to `max_message_bytes` (the server's
    /// decoding limit) buffered and walked.
    pub fn new(rules: Rules, max_message_bytes: usize) -> Result<Self, DescriptorError> {
        Ok(Self {
            descriptors: Descriptors::from_sets(&[ufo_proto::FILE_DESCRIPTOR_SET])?,
            rules,
            max_message_bytes,
        })
    }

    /// The layer to put in front of a server's routes.
    pub fn layer(self) -> CheckLayer {
        CheckLayer(Arc::new(self))
    }
}

/// A [`tower::Layer`] producing [`Checked`] services.
#[derive(Debug, Clone)]
pub struct CheckLayer(Arc<RequestChecks>);

impl<S> tower::Layer<S> for CheckLayer {
    type Service = Checked<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Checked {
            inner,
            checks: self.0.clone(),
        }
    }
}

/// The routes, behind the request checks.
#[derive(Debug, Clone)]
pub struct Checked<S> {
    inner: S,
    checks: Arc<RequestChecks>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, ResBody> tower::Service<http::Request<Body>> for Checked<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The service that was polled ready serves this call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let checks = self.checks.clone();
        Box::pin(async move {
            let Some(message) = checks.descriptors.input_of(request.uri().path()) else {
                return inner.call(request).await;
            };
            let message = message.to_owned();
            let (parts, body) = request.into_parts();
            let body = match read(body, checks.max_message_bytes).await {
                Read::Whole(bytes) => match check(&checks, &message, &bytes) {
                    Ok(()) => Body::new(http_body_util::Full::new(bytes)),
                    Err(status) => {
                        tracing::debug!(%status, "malformed request refused");
                        return Ok(status.into_http());
                    }
                },
                Read::Oversized(len) => {
                    let status = Status::resource_exhausted(format!(
                        "request message too large: {len} bytes, over the server's limit of {} bytes",
                        checks.max_message_bytes
                    ));
                    tracing::debug!(%status, "oversized request refused");
                    return Ok(status.into_http());
                }
                Read::Failed(status) => return Ok(status.into_http()),
            };
            inner.call(http::Request::from_parts(parts, body)).await
        })
    }
}

enum Read {
    /// The whole request body.
    Whole(Bytes),
    /// A message over the limit: its announced length (or, for a body of many frames, what arrived).
    Oversized(usize),
    /// The body could not be read (the client went away).
    Failed(Status),
}

async fn read(mut body: Body, limit: usize) -> Read {
    let mut buf = BytesMut::new();
    loop {
        let frame = match body.frame().await {
            None => return Read::Whole(buf.freeze()),
            Some(Err(status)) => return Read::Failed(status),
            Some(Ok(frame)) => frame,
        };
        let Ok(data) = frame.into_data() else {
            // Request trailers carry nothing a unary call uses.
            continue;
        };
        buf.extend_from_slice(&data);
        if let Some(len) = (buf.len() >= HEADER)
            .then(|| announced_len(&buf))
            .filter(|&len| len > limit)
        {
            return Read::Oversized(len);
        }
        if buf.len() > 2 * (limit.saturating_add(HEADER)) {
            return Read::Oversized(buf.len());
        }
    }
}

fn announced_len(buf: &[u8]) -> usize {
    let mut header = &buf[1..HEADER];
    header.get_u32() as usize
}

/// Walks every uncompressed message frame of a unary request body.
fn check(checks: &RequestChecks, message: &str, body: &[u8]) -> Result<(), Status> {
    if body.is_empty() {
        return Err(Status::invalid_argument("missing request message"));
    }
    let mut rest = body;
    while !rest.is_empty() {
        if rest.len() < HEADER {
            return Err(Status::invalid_argument("truncated gRPC message frame"));
        }
        let compressed = rest[0] != 0;
        let len = announced_len(rest);
        let Some(frame) = rest.get(HEADER..HEADER + len) else {
            return Err(Status::invalid_argument("truncated gRPC message frame"));
        };
        // No server here accepts compression; tonic answers a compressed frame as the gRPC spec says.
        if !compressed {
            checks
                .descriptors
                .check(message, frame, checks.rules)
                .map_err(|problem| Status::invalid_argument(problem.to_string()))?;
        }
        rest = &rest[HEADER + len..];
    }
    Ok(())
}
