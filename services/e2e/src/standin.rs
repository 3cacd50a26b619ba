//! An executor stand-in that answers instantly, for the throughput figure only: the `ufo.v1.Executor`
//! gRPC service over the agent crate's in-process desktop double (`ufo_agent::testing::FakeDesktop`), so
//! 100 concurrent tasks measure the agent, the session service and Postgres, not a desktop.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use ufo_agent::agents::target::Rect;
use ufo_agent::dispatch::{Command, CommandDispatcher, ResultStatus, ToolType};
use ufo_agent::testing::{FakeControl, FakeDesktop, FakeWindow};
use ufo_proto::v1 as pb;

/// One window, "Notes", with a titled body the tasks read.
pub fn notes_desktop() -> FakeDesktop {
    let mut body = FakeControl::new("n2", "Body", "Edit", Rect::new(20, 60, 380, 250));
    body.text = "total=42".into();
    FakeDesktop::new(vec![FakeWindow {
        id: "w1".into(),
        name: "Notes - today".into(),
        process: "notes".into(),
        rect: Rect::new(0, 0, 400, 300),
        controls: vec![
            FakeControl::new("n1", "Title", "Edit", Rect::new(20, 20, 380, 50)),
            body,
        ],
    }])
}

/// What a stand-in received, in order, with when: for the pool's hand-over figure (a reset, then the
/// next task's first command).
#[derive(Debug, Default)]
pub struct CallLog(std::sync::Mutex<Vec<(std::time::Instant, Call)>>);

/// One call a stand-in received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `Reset` (the desktop's check-in follows).
    Reset,
    /// `Execute` (a batch of a task's commands).
    Execute,
}

impl CallLog {
    fn push(&self, call: Call) {
        if let Ok(mut log) = self.0.lock() {
            log.push((std::time::Instant::now(), call));
        }
    }

    /// Everything received so far.
    pub fn calls(&self) -> Vec<(std::time::Instant, Call)> {
        self.0.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// For every reset followed by a command: the time from the reset's arrival to the next command's
    /// (the desktop freed → the next task's first command on it).
    pub fn handovers(&self) -> Vec<std::time::Duration> {
        let calls = self.calls();
        calls
            .windows(2)
            .filter(|w| w[0].1 == Call::Reset && w[1].1 == Call::Execute)
            .map(|w| w[1].0.duration_since(w[0].0))
            .collect()
    }
}

/// The stand-in executor (serve it with `ufo_testkit::executor::server`, on a port or over a
/// dial-out stream).
pub struct StandIn(Arc<FakeDesktop>, Option<Arc<CallLog>>);

impl StandIn {
    /// The service over `desktop`, logging nothing.
    pub fn new(desktop: Arc<FakeDesktop>) -> Self {
        Self(desktop, None)
    }
}

#[tonic::async_trait]
impl ufo_testkit::executor::TestExecutor for StandIn {
    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        if let Some(log) = &self.1 {
            log.push(Call::Execute);
        }
        let commands = request
            .into_inner()
            .commands
            .into_iter()
            .map(|c| Command {
                tool_type: ToolType::from_wire(c.tool_type),
                tool_name: c.tool_name,
                parameters: c
                    .parameters
                    .map(ufo_proto::json::struct_to_map)
                    .unwrap_or_default(),
                call_id: c.call_id,
            })
            .collect();
        let results = self
            .0
            .execute(commands)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let results = results
            .into_iter()
            .map(|r| pb::Result {
                status: match r.status {
                    ResultStatus::Success => pb::ResultStatus::Success,
                    ResultStatus::Failure => pb::ResultStatus::Failure,
                    ResultStatus::Skipped => pb::ResultStatus::Skipped,
                    ResultStatus::None => pb::ResultStatus::None,
                } as i32,
                error: r.error,
                result: Some(ufo_proto::json::to_value(r.result)),
                call_id: r.call_id,
                duration_us: 0,
                settle: None,
                effect: None,
                images: r
                    .images
                    .into_iter()
                    .map(|s| pb::Image {
                        format: if s.mime == "image/jpeg" {
                            pb::ImageFormat::Jpeg
                        } else {
                            pb::ImageFormat::Png
                        } as i32,
                        data: s.bytes.clone(),
                        width: s.width,
                        height: s.height,
                        transform: Some(pb::ScreenTransform {
                            origin_x: s.origin_x,
                            origin_y: s.origin_y,
                            scale: s.scale,
                        }),
                    })
                    .collect(),
                warnings: r.warnings,
            })
            .collect();
        Ok(Response::new(pb::ExecuteResponse { results }))
    }

    async fn list_tools(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        Ok(Response::new(pb::ListToolsResponse {
            tools: FakeDesktop::proto_tools(),
        }))
    }

    /// A stand-in desktop has nothing of a task's to reset.
    async fn reset(
        &self,
        _r: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        if let Some(log) = &self.1 {
            log.push(Call::Reset);
        }
        Ok(Response::new(pb::ResetResponse::default()))
    }

    async fn get_capabilities(
        &self,
        _: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        Ok(Response::new(pb::Capabilities {
            allowed_applications: self.0.allowed_applications(),
            ..pb::Capabilities::default()
        }))
    }
}

/// A running stand-in; stops when dropped.
#[derive(Debug)]
pub struct StandInExecutor {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl StandInExecutor {
    /// Serves the stand-in on `127.0.0.1:0`.
    pub async fn start(desktop: Arc<FakeDesktop>) -> std::io::Result<Self> {
        Self::serve(desktop, None).await
    }

    /// Serves the stand-in on `127.0.0.1:0`, logging every call it receives into `log`.
    pub async fn start_logged(
        desktop: Arc<FakeDesktop>,
        log: Arc<CallLog>,
    ) -> std::io::Result<Self> {
        Self::serve(desktop, Some(log)).await
    }

    async fn serve(desktop: Arc<FakeDesktop>, log: Option<Arc<CallLog>>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(ufo_testkit::executor::server(StandIn(desktop, log)))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                    token.cancelled_owned(),
                )
                .await;
            if let Err(e) = served {
                eprintln!("executor stand-in failed: {e}");
            }
        });
        Ok(Self { addr, stop })
    }

    /// Its URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for StandInExecutor {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
