//! Test executors: a test implements [`TestExecutor`] (what it runs and lists; a reset that succeeds and
//! no capabilities unless it says otherwise) and serves it with [`server`], which refuses the live view
//! and a person's input once for every stand-in. Production executors implement the generated
//! [`Executor`] trait themselves, every method written out.

use tonic::{Request, Response, Status};
use ufo_proto::v1;
use ufo_proto::v1::executor_server::{Executor, ExecutorServer};

/// What a test's stand-in executor does; see the module doc.
#[tonic::async_trait]
pub trait TestExecutor: Send + Sync + 'static {
    /// Runs the commands of one call.
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status>;

    /// The tools offered.
    async fn list_tools(
        &self,
        request: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status>;

    /// A stand-in desktop has nothing of a task's to reset.
    async fn reset(
        &self,
        request: Request<v1::ResetRequest>,
    ) -> Result<Response<v1::ResetResponse>, Status> {
        let _ = request;
        Ok(Response::new(v1::ResetResponse::default()))
    }

    /// No capabilities beyond the defaults.
    async fn get_capabilities(
        &self,
        request: Request<v1::GetCapabilitiesRequest>,
    ) -> Result<Response<v1::Capabilities>, Status> {
        let _ = request;
        Ok(Response::new(v1::Capabilities::default()))
    }
}

/// A [`TestExecutor`] as the executor service: no live view, no person's input.
#[derive(Debug)]
pub struct Refusing<T>(pub T);

#[tonic::async_trait]
impl<T: TestExecutor> Executor for Refusing<T> {
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status> {
        self.0.execute(request).await
    }

    async fn list_tools(
        &self,
        request: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        self.0.list_tools(request).await
    }

    async fn get_capabilities(
        &self,
        request: Request<v1::GetCapabilitiesRequest>,
    ) -> Result<Response<v1::Capabilities>, Status> {
        self.0.get_capabilities(request).await
    }

    async fn reset(
        &self,
        request: Request<v1::ResetRequest>,
    ) -> Result<Response<v1::ResetResponse>, Status> {
        self.0.reset(request).await
    }

    type WatchDesktopStream = tokio_stream::Empty<Result<v1::DesktopFrame, Status>>;

    async fn watch_desktop(
        &self,
        _request: Request<v1::WatchDesktopRequest>,
    ) -> Result<Response<Self::WatchDesktopStream>, Status> {
        Err(Status::unimplemented("this test executor has no live view"))
    }

    async fn takeover_input(
        &self,
        _request: Request<v1::TakeoverInputRequest>,
    ) -> Result<Response<v1::TakeoverInputResponse>, Status> {
        Err(Status::unimplemented(
            "this test executor takes no person's input",
        ))
    }
}

/// The executor service of `executor`.
pub fn server<T: TestExecutor>(executor: T) -> ExecutorServer<Refusing<T>> {
    ExecutorServer::new(Refusing(executor))
}
