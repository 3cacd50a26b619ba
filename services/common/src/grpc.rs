//! gRPC plumbing shared by the services: health and reflection, bearer-token auth on the `ufo.v1`
//! services, a server span per call that continues the caller's trace, and client-side injection of the
//! token and trace context.

use std::sync::Arc;

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Health and reflection for a server: the reporter (to flip services to NOT_SERVING on shutdown) and a
/// routes builder holding both services, to which the server adds its own.
pub struct Introspection {
    /// Reports per-service health.
    pub health_reporter: tonic_health::server::HealthReporter,
    /// `grpc.health.v1.Health` and `grpc.reflection.v1{,alpha}.ServerReflection`.
    pub routes: tonic::service::RoutesBuilder,
}

/// Why introspection could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build gRPC reflection")]
pub struct ReflectionError(#[from] tonic_reflection::server::Error);

/// Whether a gRPC server offers reflection; one setting shared by the three servers.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ReflectionArgs {
    /// Serve gRPC server reflection (`grpc.reflection.v1` and `v1alpha`). It answers without a token and
    /// lists every service, method and message, so it is off unless the operator wants it; clients such
    /// as `buf curl` can read the proto files instead (`--schema proto/`).
    #[arg(long = "grpc-reflection", env = "UFO_GRPC_REFLECTION")]
    pub grpc_reflection: bool,
}

/// Builds health (every service in `services` reported SERVING, plus the overall "" entry) and, when
/// `reflection` is on, reflection limited to `services` and the health service.
pub async fn introspection(
    services: &[&'static str],
    reflection: &ReflectionArgs,
) -> Result<Introspection, ReflectionError> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    for name in services {
        health_reporter
            .set_service_status(*name, tonic_health::ServingStatus::Serving)
            .await;
    }
    health_reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(health);
    if !reflection.grpc_reflection {
        return Ok(Introspection {
            health_reporter,
            routes,
        });
    }
    let mut v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ufo_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health");
    let mut v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ufo_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health");
    for name in services {
        v1 = v1.with_service_name(*name);
        v1alpha = v1alpha.with_service_name(*name);
    }
    routes
        .add_service(v1.build_v1()?)
        .add_service(v1alpha.build_v1alpha()?);
    Ok(Introspection {
        health_reporter,
        routes,
    })
}

/// Marks every service (and the overall entry) NOT_SERVING: the first thing shutdown does.
pub async fn set_not_serving(
    reporter: &tonic_health::server::HealthReporter,
    services: &[&'static str],
) {
    for name in services.iter().copied().chain([""]) {
        reporter
            .set_service_status(name, tonic_health::ServingStatus::NotServing)
            .await;
    }
}

/// Server-side interceptor: requires `authorization: Bearer <token>` when a token is configured.
#[derive(Clone, Default)]
pub struct RequireBearer {
    token: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for RequireBearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequireBearer")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl RequireBearer {
    /// Requires `token` on every call; `None` lets every call through (insecure mode).
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token: token.map(|t| Arc::from(t.as_bytes())),
        }
    }

    /// Checks a raw `authorization` header value.
    pub fn check(&self, header: Option<&[u8]>) -> Result<(), Status> {
        let Some(expected) = &self.token else {
            return Ok(());
        };
        let presented = header
            .and_then(bearer)
            .ok_or_else(|| Status::unauthenticated("missing bearer token"))?;
        if constant_time_eq(presented, expected) {
            Ok(())
        } else {
            Err(Status::unauthenticated("invalid bearer token"))
        }
    }
}

impl Interceptor for RequireBearer {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(
            request
                .metadata()
                .get("authorization")
                .map(|v| v.as_bytes()),
        )?;
        Ok(request)
    }
}

/// The credentials of an `authorization` value using the `Bearer` scheme, which is matched
/// case-insensitively (RFC 7235) and may be followed by several spaces.
pub fn bearer(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first().is_none_or(|c| *c != b' ') {
        return None;
    }
    let start = rest.iter().position(|c| *c != b' ')?;
    Some(&rest[start..])
}

/// Compares secrets in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Client-side interceptor: adds the bearer token (when configured) and the current span's
/// `traceparent` to every call.
#[derive(Clone, Default)]
pub struct ClientContext {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl std::fmt::Debug for ClientContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientContext")
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The token contains characters that cannot travel in a header.
#[derive(Debug, thiserror::Error)]
#[error("the token is not a valid header value")]
pub struct InvalidToken;

impl ClientContext {
    /// Sends `token` as a bearer token when given.
    pub fn new(token: Option<&str>) -> Result<Self, InvalidToken> {
        let authorization = token
            .map(|t| format!("Bearer {t}").parse().map_err(|_| InvalidToken))
            .transpose()?;
        Ok(Self { authorization })
    }
}

impl Interceptor for ClientContext {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(auth) = &self.authorization {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        let mut headers = http::HeaderMap::new();
        crate::telemetry::inject_http(&mut headers);
        for (name, value) in &headers {
            if let (Ok(value), Ok(key)) = (
                MetadataValue::try_from(value.as_bytes()),
                tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes()),
            ) {
                request.metadata_mut().insert(key, value);
            }
        }
        Ok(request)
    }
}

/// The tracing layer every gRPC server runs behind.
pub type GrpcTraceLayer = tower_http::trace::TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::GrpcErrorsAsFailures>,
    fn(&http::Request<tonic::body::Body>) -> tracing::Span,
    tower_http::trace::DefaultOnRequest,
    tower_http::trace::DefaultOnResponse,
    tower_http::trace::DefaultOnBodyChunk,
    tower_http::trace::DefaultOnEos,
    LogFailure,
>;

/// A tower layer for tonic servers: one `grpc.server` span per call, continuing the caller's trace; a
/// failed call is logged at the level of its cause ([`failure_level`]).
pub fn trace_layer() -> GrpcTraceLayer {
    tower_http::trace::TraceLayer::new_for_grpc()
        .make_span_with(server_span as fn(&_) -> _)
        .on_failure(LogFailure)
}

/// The level a call that ended with `code` is logged at: a caller's mistake or an expected answer (not
/// found, invalid, unauthenticated, a method this server does not offer, a cancelled call…) is DEBUG, since
/// the caller was told and the server is fine; a dependency that is away or slow is WARN; only the server's
/// own failures (INTERNAL, UNKNOWN, DATA_LOSS) are ERROR.
pub fn failure_level(code: tonic::Code) -> tracing::Level {
    use tonic::Code::*;
    match code {
        Ok | Cancelled | InvalidArgument | NotFound | AlreadyExists | PermissionDenied
        | FailedPrecondition | Aborted | OutOfRange | Unimplemented | Unauthenticated
        | ResourceExhausted => tracing::Level::DEBUG,
        Unavailable | DeadlineExceeded => tracing::Level::WARN,
        Internal | Unknown | DataLoss => tracing::Level::ERROR,
    }
}

/// Logs a failed gRPC call at [`failure_level`] (tower-http's default logs every non-OK status as ERROR,
/// so a client asking for a task that does not exist filled the operators' logs with errors).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogFailure;

impl tower_http::trace::OnFailure<tower_http::classify::GrpcFailureClass> for LogFailure {
    fn on_failure(
        &mut self,
        class: tower_http::classify::GrpcFailureClass,
        latency: std::time::Duration,
        _span: &tracing::Span,
    ) {
        let latency_ms = latency.as_secs_f64() * 1e3;
        match class {
            tower_http::classify::GrpcFailureClass::Code(code) => {
                let code = tonic::Code::from_i32(code.get());
                let description = code.description();
                match failure_level(code) {
                    tracing::Level::ERROR => {
                        tracing::error!(grpc.code = ?code, latency_ms, "call failed: {description}")
                    }
                    tracing::Level::WARN => {
                        tracing::warn!(grpc.code = ?code, latency_ms, "call failed: {description}")
                    }
                    _ => {
                        tracing::debug!(grpc.code = ?code, latency_ms, "call answered: {description}")
                    }
                }
            }
            tower_http::classify::GrpcFailureClass::Error(error) => {
                tracing::error!(latency_ms, error = %error, "call failed")
            }
        }
    }
}

fn server_span(request: &http::Request<tonic::body::Body>) -> tracing::Span {
    let path = request.uri().path();
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = %path,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    crate::telemetry::set_parent_from_headers(&span, request.headers());
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `LogFailure` prints for a call that ended with `code`, as the fmt subscriber writes it.
    fn logged(code: tonic::Code) -> String {
        use tower_http::trace::OnFailure;
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let class = tower_http::classify::GrpcFailureClass::Code(
                std::num::NonZeroI32::new(code as i32).unwrap(),
            );
            LogFailure.on_failure(
                class,
                std::time::Duration::from_millis(3),
                &tracing::Span::none(),
            );
        });
        String::from_utf8(out.lock().unwrap().clone()).unwrap()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_callers_mistake_is_not_an_error_in_the_log_and_a_server_failure_is() {
        for code in [
            tonic::Code::NotFound,
            tonic::Code::InvalidArgument,
            tonic::Code::Unimplemented,
            tonic::Code::Unauthenticated,
            tonic::Code::PermissionDenied,
            tonic::Code::FailedPrecondition,
        ] {
            let line = logged(code);
            assert!(
                line.contains("DEBUG") && !line.contains("ERROR"),
                "{code:?}: {line}"
            );
        }
        assert!(logged(tonic::Code::Unavailable).contains(" WARN "));
        for code in [
            tonic::Code::Internal,
            tonic::Code::Unknown,
            tonic::Code::DataLoss,
        ] {
            let line = logged(code);
            assert!(
                line.contains("ERROR") && line.contains(code.description()),
                "{line}"
            );
        }
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"BEARER  abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Bearerabc"), None);
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        let auth = RequireBearer::new(Some("t"));
        assert!(auth.check(Some(b"bEaReR t")).is_ok());
        assert!(auth.check(Some(b"Bearer u")).is_err());
    }

    #[test]
    fn bearer_is_required_only_when_configured() {
        let open = RequireBearer::new(None);
        assert!(open.check(None).is_ok());
        let closed = RequireBearer::new(Some("s3cret"));
        assert_eq!(
            closed.check(None).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            closed.check(Some(b"Bearer nope")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            closed.check(Some(b"s3cret")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(closed.check(Some(b"Bearer s3cret")).is_ok());
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let text = format!(
            "{:?} {:?}",
            RequireBearer::new(Some("s3cret")),
            ClientContext::new(Some("s3cret")).unwrap()
        );
        assert!(!text.contains("s3cret"), "{text}");
    }
}

/// Why a gRPC server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The transport failed (accept loop, HTTP/2).
    #[error("gRPC transport failed")]
    Transport(#[from] tonic::transport::Error),
    /// Reflection could not be built.
    #[error(transparent)]
    Reflection(#[from] ReflectionError),
    /// The request checks' descriptors could not be read.
    #[error("cannot index the protobuf descriptors")]
    Descriptors(#[from] crate::wire::DescriptorError),
}

/// Serves `routes` (behind the tracing layer and `checks`) on `listener` until `shutdown` fires, then
/// marks `services` NOT_SERVING and lets in-flight calls finish (tonic's graceful shutdown).
pub async fn serve_until(
    server: tonic::transport::Server,
    routes: tonic::service::Routes,
    checks: crate::checked::RequestChecks,
    listener: tokio::net::TcpListener,
    health_reporter: tonic_health::server::HealthReporter,
    services: &'static [&'static str],
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    // TCP_NODELAY on every accepted connection: without it Nagle's algorithm holds a response's last
    // small frame (trailers) until the peer's delayed ACK, adding ~40 ms to calls. (tonic only sets it on
    // listeners it binds itself.)
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let signal = async move {
        shutdown.cancelled().await;
        set_not_serving(&health_reporter, services).await;
        tracing::info!("draining gRPC calls");
    };
    server
        .layer(trace_layer())
        .layer(checks.layer())
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, signal)
        .await?;
    Ok(())
}
