//! `ufo.v1.AgentService` over gRPC: the REST operations for gRPC users, and `StreamSteps`, which relays the
//! session service's event log (replay from `from_seq`, then live, ending when the task ends). Streams are
//! resumable because the log is: a client that saw seq N reconnects with `from_seq = N + 1`.

use std::pin::Pin;

use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};
use ufo_proto::v1::agent_service_server::AgentService;
use ufo_proto::v1::{
    AddRequestRequest, AnswerRequest, CancelRequest, ConfirmRequest, Event, GetTaskRequest,
    StreamStepsRequest, SubmitTaskRequest, Task,
};

use super::auth::Caller;
use super::service::{Tasks, task_id};

/// The gRPC front end.
#[derive(Debug, Clone)]
pub struct AgentApi {
    tasks: Tasks,
    /// Bound of the relay buffer between the session stream and the client.
    buffer: usize,
}

impl AgentApi {
    /// A service over `tasks`.
    pub fn new(tasks: Tasks) -> Self {
        Self { tasks, buffer: 64 }
    }
}

/// The caller the interceptor authenticated. A request without one (the interceptor always sets it) is
/// treated as unauthenticated rather than trusted.
fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("missing bearer token"))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentService for AgentApi {
    async fn submit_task(
        &self,
        request: Request<SubmitTaskRequest>,
    ) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let task = self.tasks.submit(&caller, request.into_inner()).await?;
        Ok(Response::new(task.to_proto()))
    }

    async fn get_task(&self, request: Request<GetTaskRequest>) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let task = self
            .tasks
            .get(&request.into_inner().task_id, &caller)
            .await?;
        Ok(Response::new(task.to_proto()))
    }

    type StreamStepsStream = EventStream;

    async fn stream_steps(
        &self,
        request: Request<StreamStepsRequest>,
    ) -> Result<Response<Self::StreamStepsStream>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let id = task_id(&request.task_id)?;
        // Fail fast with NOT_FOUND for an unknown task (or another caller's) rather than an empty stream.
        self.tasks.get(&id, &caller).await?;
        let mut upstream = self.tasks.watch(&id, request.from_seq).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(self.buffer);
        let span = tracing::info_span!("stream_steps", task_id = %id, from_seq = request.from_seq);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                while let Some(item) = upstream.next().await {
                    let item = item.map_err(|s| tonic::Status::from(super::ApiError::from(s)));
                    let failed = item.is_err();
                    // The client left: stop reading the session stream (dropping it cancels the watch).
                    if tx.send(item).await.is_err() || failed {
                        break;
                    }
                }
            },
            span,
        ));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn answer(&self, request: Request<AnswerRequest>) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let task = self
            .tasks
            .answer(
                &request.task_id,
                &caller,
                request.question_ids,
                request.answers,
            )
            .await?;
        Ok(Response::new(task.to_proto()))
    }

    async fn confirm(&self, request: Request<ConfirmRequest>) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let task = self
            .tasks
            .confirm(
                &request.task_id,
                &caller,
                &request.action_id,
                request.approve,
                &request.reason,
            )
            .await?;
        Ok(Response::new(task.to_proto()))
    }

    async fn add_request(
        &self,
        request: Request<AddRequestRequest>,
    ) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let task = self
            .tasks
            .add_request(&request.task_id, &caller, request.request)
            .await?;
        Ok(Response::new(task.to_proto()))
    }

    async fn cancel(&self, request: Request<CancelRequest>) -> Result<Response<Task>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let task = self
            .tasks
            .cancel(&request.task_id, &caller, request.reason)
            .await?;
        Ok(Response::new(task.to_proto()))
    }
}
