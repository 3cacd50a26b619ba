//! An in-test OTLP/gRPC collector: the same `TraceService` (and `MetricsService`) an OpenTelemetry
//! collector or Jaeger serves on port 4317, bound to port 0, storing every received span so a test can
//! wait for the spans it expects and check how they nest, and every received gauge data point so it can
//! wait for the values it expects.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use tokio::sync::{Notify, oneshot};

use crate::spans::{CollectedSpan, SpanSet};
use crate::wait::WaitError;

/// A running collector. Stops serving when dropped.
pub struct OtlpCollector {
    addr: SocketAddr,
    store: Arc<Store>,
    stop: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for OtlpCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpCollector")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Store {
    spans: Mutex<Vec<CollectedSpan>>,
    arrived: Notify,
    points: Mutex<Vec<GaugePoint>>,
    points_arrived: Notify,
}

/// One received gauge data point.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugePoint {
    /// The exporting service's `service.name`.
    pub service: String,
    /// The gauge's name.
    pub name: String,
    /// The point's attributes, rendered as text.
    pub attributes: std::collections::BTreeMap<String, String>,
    /// Its value (integers as well).
    pub value: f64,
}

/// Every gauge data point received, in arrival order.
#[derive(Debug, Clone, Default)]
pub struct GaugePoints(Vec<GaugePoint>);

impl GaugePoints {
    /// The last value received for gauge `name` whose attributes include `attributes`.
    pub fn latest(&self, name: &str, attributes: &[(&str, &str)]) -> Option<f64> {
        self.0
            .iter()
            .rev()
            .find(|p| {
                p.name == name
                    && attributes
                        .iter()
                        .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|p| p.value)
    }

    /// Every point.
    pub fn all(&self) -> &[GaugePoint] {
        &self.0
    }

    fn describe(&self) -> String {
        self.0
            .iter()
            .rev()
            .take(40)
            .map(|p| {
                format!(
                    "{} {} {:?} = {}\n",
                    p.service, p.name, p.attributes, p.value
                )
            })
            .collect()
    }
}

impl Store {
    fn snapshot(&self) -> SpanSet {
        SpanSet::new(
            self.spans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

struct Sink(Arc<Store>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| attribute(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(CollectedSpan {
                        service: service.clone(),
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: (!span.parent_span_id.is_empty())
                            .then(|| hex(&span.parent_span_id)),
                        name: span.name,
                        kind: span.kind,
                        start_unix_nano: span.start_time_unix_nano,
                        end_unix_nano: span.end_time_unix_nano,
                        attributes: span
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), value_text(kv.value.as_ref())))
                            .collect(),
                    });
                }
            }
        }
        self.0
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(received);
        self.0.arrived.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_metrics in request.into_inner().resource_metrics {
            let service = resource_metrics
                .resource
                .as_ref()
                .and_then(|r| attribute(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_metrics.scope_metrics {
                for m in scope.metrics {
                    let Some(metric::Data::Gauge(gauge)) = m.data else {
                        continue;
                    };
                    for point in gauge.data_points {
                        let value = match point.value {
                            Some(number_data_point::Value::AsDouble(d)) => d,
                            #[allow(clippy::cast_precision_loss)]
                            Some(number_data_point::Value::AsInt(i)) => i as f64,
                            None => continue,
                        };
                        received.push(GaugePoint {
                            service: service.clone(),
                            name: m.name.clone(),
                            attributes: point
                                .attributes
                                .iter()
                                .map(|kv| (kv.key.clone(), value_text(kv.value.as_ref())))
                                .collect(),
                            value,
                        });
                    }
                }
            }
        }
        self.0
            .points
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(received);
        self.0.points_arrived.notify_waiters();
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

/// Why the collector could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind the OTLP collector")]
pub struct CollectorError(#[from] std::io::Error);

impl OtlpCollector {
    /// Starts a collector on `127.0.0.1:0`. Must run inside a Tokio runtime.
    pub async fn start() -> Result<Self, CollectorError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let service = TraceServiceServer::new(Sink(store.clone()));
        let metrics = MetricsServiceServer::new(Sink(store.clone()));
        tokio::spawn(async move {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let result = tonic::transport::Server::builder()
                .add_service(service)
                .add_service(metrics)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "test OTLP collector stopped");
            }
        });
        Ok(Self {
            addr,
            store,
            stop: Some(stop),
        })
    }

    /// The endpoint to give services as `--otlp-endpoint` (`http://127.0.0.1:<port>`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> SpanSet {
        self.store.snapshot()
    }

    /// Waits until `done` holds for the received spans, or fails after `timeout` with what arrived.
    /// Wakes on each export, so it returns as soon as the condition holds.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&SpanSet) -> bool,
    ) -> Result<SpanSet, WaitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Register interest before checking so an export between the check and the wait is not missed.
            let arrived = self.store.arrived.notified();
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let spans = self.spans();
                if done(&spans) {
                    return Ok(spans);
                }
                return Err(WaitError::new(
                    "expected spans",
                    timeout,
                    format!("received {} span(s):\n{}", spans.len(), spans.describe()),
                ));
            }
        }
    }

    /// Every gauge data point received so far.
    pub fn gauges(&self) -> GaugePoints {
        GaugePoints(
            self.store
                .points
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// Waits until `done` holds for the received gauge points, or fails after `timeout` with the last
    /// ones. Wakes on each metrics export.
    pub async fn wait_for_gauges(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&GaugePoints) -> bool,
    ) -> Result<GaugePoints, WaitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.store.points_arrived.notified();
            let points = self.gauges();
            if done(&points) {
                return Ok(points);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let points = self.gauges();
                if done(&points) {
                    return Ok(points);
                }
                return Err(WaitError::new(
                    "expected gauge values",
                    timeout,
                    format!(
                        "received {} point(s), latest first:\n{}",
                        points.0.len(),
                        points.describe()
                    ),
                ));
            }
        }
    }

    /// Waits for a span matching `matches` and returns it.
    pub async fn wait_for_span(
        &self,
        timeout: Duration,
        matches: impl Fn(&CollectedSpan) -> bool,
    ) -> Result<CollectedSpan, WaitError> {
        let spans = self
            .wait_until(timeout, |set| set.iter().any(&matches))
            .await?;
        spans
            .iter()
            .find(|s| matches(s))
            .cloned()
            .ok_or_else(|| WaitError::new("a matching span", timeout, String::new()))
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| value_text(kv.value.as_ref()))
}

/// Renders an attribute value as text (numbers and booleans in their usual form).
fn value_text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
