//! `ufo-testkit`: what real-process tests of the platform share.
//!
//! Layout:
//! - [`collector`]: an in-test OTLP/gRPC collector ([`OtlpCollector`]) on port 0 storing received spans.
//! - [`spans`]: received spans ([`CollectedSpan`]) and queries over them ([`SpanSet`]): by service, name,
//!   trace, parent/child and descendant checks, a printable tree for failure messages.
//! - [`process`]: a service binary as a child process ([`ProcessBuilder`] → [`ServiceProcess`]) with
//!   captured output, readiness by gRPC health / HTTP / log line, SIGTERM-then-SIGKILL on drop.
//! - [`binary`]: the path of a workspace binary, built from the current sources ([`workspace_binary`]).
//! - [`postgres`]: a fresh uniquely named database per test ([`TestDatabase`]), dropped afterwards.
//! - [`pg_cluster`]: a private PostgreSQL cluster a test may stop, start and restart ([`PgCluster`]).
//! - [`cluster`]: session + executor + agent as real processes on free ports ([`Cluster`]), with an API
//!   key, optional Postgres database, LLM server and span export.
//! - [`malformed`]: a malformed-input sweep generated from the proto descriptors ([`malformed::Sweep`]),
//!   sent as raw gRPC bodies to a real server.
//! - [`http`]: HTTP clients with the process's TLS provider installed ([`http_client`]).
//! - [`executor`]: stand-in executors ([`executor::TestExecutor`], served by [`executor::server`], which
//!   refuses the live view and a person's input once for all of them).
//! - [`wait`]: polling with a deadline ([`poll_until`]); tests never synchronise on sleeps.
//!
//! An end-to-end test reads: start an [`OtlpCollector`], create a [`TestDatabase`], spawn
//! `ufo-session`, `ufo-executor` and `ufo-agent` with [`workspace_binary`] + [`ProcessBuilder`] on
//! [`free_port`]s with `--otlp-endpoint` = [`OtlpCollector::endpoint`], `wait_grpc_ready` each, drive the
//! API, stop the processes (they flush spans on SIGTERM) and assert on [`OtlpCollector::wait_until`].
//! [`Cluster`] does the starting in one call; for a real Linux desktop give it
//! `ufo_executor::testing::Desktop::env()` through [`ClusterBuilder::local_executor`], and a scripted
//! OpenAI-compatible server's URL through [`ClusterBuilder::llm_base_url`].

pub mod binary;
pub mod cluster;
pub mod collector;
pub mod executor;
pub mod http;
pub mod malformed;
#[cfg(unix)]
pub mod pg_cluster;
pub mod postgres;
pub mod process;
pub mod spans;
pub mod wait;

pub use binary::{BinaryError, workspace_binary};
pub use cluster::{Cluster, ClusterBuilder, ClusterError};
pub use collector::{CollectorError, GaugePoint, GaugePoints, OtlpCollector};
pub use http::{http_client, http_client_builder};
#[cfg(unix)]
pub use pg_cluster::{PgCluster, PgClusterError};
pub use postgres::{DatabaseError, TestDatabase};
pub use process::{ProcessBuilder, ProcessError, ServiceProcess, free_port, grpc_serving};
pub use spans::{CollectedSpan, SpanSet, StructureError};
pub use wait::{WaitError, poll_until};

/// What a runner does before it claims, for a test that plays the runner through the session store
/// itself: registers the desktop of the pool that session `id` wants (a named one), so the claim can check
/// it out.
pub async fn register_wanted_desktop(
    store: &mut ufo_proto::v1::session_store_client::SessionStoreClient<tonic::transport::Channel>,
    id: &str,
) -> Result<(), tonic::Status> {
    let want = store
        .get_session(ufo_proto::v1::GetSessionRequest {
            session_id: id.to_owned(),
        })
        .await?
        .into_inner()
        .desktop_want;
    if let Some(want) = want.filter(|w| !w.name.is_empty()) {
        store
            .register_desktop(ufo_proto::v1::RegisterDesktopRequest {
                name: want.name,
                ..Default::default()
            })
            .await?;
    }
    Ok(())
}
