//! The desktop pool's OpenTelemetry gauges (issue 36), pushed over OTLP with the service's other
//! metrics when `--otlp-endpoint` is set:
//!
//! - `ufo.pool.desktops` — desktops by state (attribute `state`: `free`, `busy`, `draining`, `broken`);
//! - `ufo.pool.waiting_tasks` — queued tasks waiting for a free desktop that fits them;
//! - `ufo.pool.connected_executors` — dial-out executors connected to this replica.
//!
//! The first two are the counts `GET /v1/admin/desktops` answers, read from the session store once per
//! `--otlp-metrics-interval-ms` (one `ListDesktops` call per interval, whatever the number of gauges);
//! the gauges' callbacks, run by the exporter at each collection, only read the last answer. Every
//! replica reports the same pool (it lives in the store): aggregate them with `max`, not `sum`. When
//! the store does not answer, the pool gauges report nothing rather than stale numbers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use ufo_proto::v1::ListDesktopsRequest;

use super::pool::StateCounts;
use crate::dispatch::dialout::Hub;
use crate::store::client::SessionClient;

/// The last counts read from the store.
#[derive(Debug, Default)]
struct Observed {
    /// The store answered the last read.
    fresh: AtomicBool,
    free: AtomicU64,
    busy: AtomicU64,
    draining: AtomicU64,
    broken: AtomicU64,
    waiting: AtomicU64,
}

impl Observed {
    fn set(&self, counts: StateCounts, waiting: u64) {
        self.free.store(counts.free, Ordering::Relaxed);
        self.busy.store(counts.busy, Ordering::Relaxed);
        self.draining.store(counts.draining, Ordering::Relaxed);
        self.broken.store(counts.broken, Ordering::Relaxed);
        self.waiting.store(waiting, Ordering::Relaxed);
        self.fresh.store(true, Ordering::Release);
    }

    fn by_state(&self) -> Option<[(&'static str, u64); 4]> {
        self.fresh.load(Ordering::Acquire).then(|| {
            [
                ("free", self.free.load(Ordering::Relaxed)),
                ("busy", self.busy.load(Ordering::Relaxed)),
                ("draining", self.draining.load(Ordering::Relaxed)),
                ("broken", self.broken.load(Ordering::Relaxed)),
            ]
        })
    }
}

/// Registers the pool's gauges on the global meter and reads the store every `interval` until
/// `shutdown`. Returns when `shutdown` is cancelled.
pub async fn observe(
    client: SessionClient,
    hub: Arc<Hub>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let observed = Arc::new(Observed::default());
    let meter = opentelemetry::global::meter("ufo-agent");
    let by_state = observed.clone();
    let _desktops = meter
        .u64_observable_gauge("ufo.pool.desktops")
        .with_description("Desktops of the pool by state (attribute `state`)")
        .with_unit("{desktop}")
        .with_callback(move |gauge| {
            for (state, n) in by_state.by_state().into_iter().flatten() {
                gauge.observe(n, &[KeyValue::new("state", state)]);
            }
        })
        .build();
    let waiting = observed.clone();
    let _waiting = meter
        .u64_observable_gauge("ufo.pool.waiting_tasks")
        .with_description("Queued tasks waiting for a free desktop that fits them")
        .with_unit("{task}")
        .with_callback(move |gauge| {
            if waiting.fresh.load(Ordering::Acquire) {
                gauge.observe(waiting.waiting.load(Ordering::Relaxed), &[]);
            }
        })
        .build();
    let _connected = meter
        .u64_observable_gauge("ufo.pool.connected_executors")
        .with_description("Dial-out executors connected to this agent replica")
        .with_unit("{executor}")
        .with_callback(move |gauge| {
            gauge.observe(hub.sessions().len() as u64, &[]);
        })
        .build();

    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut client = client.clone();
        let read = async {
            match client.list_desktops(ListDesktopsRequest {}).await {
                Ok(pool) => {
                    let pool = pool.into_inner();
                    observed.set(StateCounts::of(&pool.desktops), pool.waiting_sessions);
                }
                Err(status) => {
                    if observed.fresh.swap(false, Ordering::AcqRel) {
                        tracing::warn!(error = %status, "cannot read the desktop pool for its gauges");
                    }
                }
            }
        };
        read.instrument(tracing::debug_span!("pool.metrics.read"))
            .await;
    }
}
