//! Tracing for every service: human or JSON logs on stderr, and optional OTLP/gRPC span export
//! (Jaeger accepts it on port 4317), with W3C `traceparent` propagation across gRPC and HTTP hops so that
//! one task is one trace across the agent, session and executor services. The same endpoint receives
//! OpenTelemetry metrics (OTLP/gRPC, pushed every `--otlp-metrics-interval-ms`): [`init`] installs the
//! global meter provider, and a service's gauges registered on [`opentelemetry::global::meter`] are
//! exported with it (they cost nothing when no endpoint is set).

use clap::Args;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Telemetry flags shared by every service binary.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// OTLP/gRPC endpoint to export spans to (e.g. http://127.0.0.1:4317 for Jaeger); unset disables export.
    #[arg(long = "otlp-endpoint", env = "UFO_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Longest wait for one span export, in milliseconds (default 5000); bounds how long a shutdown
    /// flush can hang on an unreachable collector.
    #[arg(
        long = "otlp-timeout-ms",
        env = "UFO_OTLP_TIMEOUT_MS",
        default_value_t = 5000
    )]
    pub otlp_timeout_ms: u64,
    /// How often metrics are collected and pushed to the OTLP endpoint, in milliseconds (default
    /// 60000); a service's observed gauges (e.g. the agent's desktop pool) are read this often.
    #[arg(
        long = "otlp-metrics-interval-ms",
        env = "UFO_OTLP_METRICS_INTERVAL_MS",
        default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub otlp_metrics_interval_ms: u64,
    /// Log filter in `tracing` EnvFilter syntax (e.g. `info,ufo_agent=debug`).
    #[arg(long = "log-filter", env = "UFO_LOG", default_value = "info")]
    pub log_filter: String,
    /// Log format on stderr.
    #[arg(long = "log-format", env = "UFO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("invalid log filter")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    /// The OTLP exporter could not be built (bad endpoint).
    #[error("cannot build the OTLP exporter")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
}

impl TelemetryArgs {
    /// How often metrics are pushed, when an OTLP endpoint is set; `None` when metrics are not exported.
    pub fn metrics_interval(&self) -> Option<std::time::Duration> {
        self.otlp_endpoint
            .as_ref()
            .map(|_| std::time::Duration::from_millis(self.otlp_metrics_interval_ms.max(1)))
    }
}

/// Keeps the span and metric exporters alive; flushes and shuts them down when dropped or on
/// [`Telemetry::shutdown`].
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
    exporting: bool,
}

impl Telemetry {
    /// Flushes pending spans and metrics and stops the exporters. Safe to call more than once.
    pub fn shutdown(&mut self) {
        if let Some(meters) = self.meters.take() {
            // Shutting down collects and pushes once more, so the last values reach the collector.
            if let Err(e) = meters.shutdown() {
                tracing::warn!(error = %e, "stopping the metric exporter failed");
            }
        }
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.force_flush() {
                tracing::warn!(error = %e, "flushing spans failed");
            }
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "stopping the span exporter failed");
            }
        }
    }

    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.exporting
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs the global subscriber for `service_name` (e.g. `ufo-agent`). Must run inside a Tokio runtime
/// when an OTLP endpoint is set.
pub fn init(service_name: &'static str, args: &TelemetryArgs) -> Result<Telemetry, TelemetryError> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::builder().parse(&args.log_filter)?;
    let fmt_layer = match args.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // Without an endpoint spans still get trace ids (nothing is exported): the ids tie what a person
    // is told ("trace …") to the log lines with the internal cause.
    let exporting = args.otlp_endpoint.is_some();
    let provider = match &args.otlp_endpoint {
        Some(endpoint) => tracer_provider(
            service_name,
            endpoint,
            std::time::Duration::from_millis(args.otlp_timeout_ms),
        )?,
        None => SdkTracerProvider::builder().build(),
    };
    let meters = init_metrics(service_name, args)?;
    // Without an endpoint nothing reads a span's busy and idle times, and nothing here reads the active
    // OpenTelemetry context (trace ids come from the span itself, `current_trace_id`): entering and
    // leaving a span then costs no clock reads and no context switch-over (issue 37: 1–2 % of a step's
    // CPU). Exporting, both stay as the layer's defaults.
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(service_name))
        .with_tracked_inactivity(exporting)
        .with_context_activation(exporting)
        .with_filter(EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(fmt_layer.with_filter(filter))
        .with(otel_layer)
        .try_init()?;
    Ok(Telemetry {
        provider: Some(provider),
        meters,
        exporting,
    })
}

/// The trace id of the current span (32 hex digits), when it has one: what a log line and the text a
/// person is shown share, so an operator can find the internal cause of what the person saw.
pub fn current_trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    let context = tracing::Span::current().context();
    let span = context.span();
    let ids = span.span_context();
    ids.is_valid().then(|| ids.trace_id().to_string())
}

fn tracer_provider(
    service_name: &'static str,
    endpoint: &str,
    timeout: std::time::Duration,
) -> Result<SdkTracerProvider, TelemetryError> {
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(timeout)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Installs the global meter provider pushing to the OTLP endpoint every
/// `--otlp-metrics-interval-ms`, when an endpoint is set ([`init`] does it; a process that runs a service
/// in-process without [`init`], as tests do, may call it alone). Shutting the returned provider down
/// pushes the last values.
pub fn init_metrics(
    service_name: &'static str,
    args: &TelemetryArgs,
) -> Result<Option<SdkMeterProvider>, TelemetryError> {
    let (Some(endpoint), Some(interval)) = (&args.otlp_endpoint, args.metrics_interval()) else {
        return Ok(None);
    };
    let meters = meter_provider(
        service_name,
        endpoint,
        std::time::Duration::from_millis(args.otlp_timeout_ms),
        interval,
    )?;
    opentelemetry::global::set_meter_provider(meters.clone());
    Ok(Some(meters))
}

fn meter_provider(
    service_name: &'static str,
    endpoint: &str,
    timeout: std::time::Duration,
    interval: std::time::Duration,
) -> Result<SdkMeterProvider, TelemetryError> {
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(timeout)
        .build()?;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
        .with_interval(interval)
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name)
        .build();
    Ok(SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build())
}

/// Writes the current span's trace context (`traceparent`, `tracestate`) into HTTP headers.
pub fn inject_http(headers: &mut http::HeaderMap) {
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// Reads a trace context from HTTP headers (gRPC metadata travels as HTTP/2 headers too).
pub fn extract_http(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Makes `span` a child of the trace context carried by `headers`, if any.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    let parent = extract_http(headers);
    use opentelemetry::trace::TraceContextExt;
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::header::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
