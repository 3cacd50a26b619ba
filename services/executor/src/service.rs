//! The `ufo.v1.Executor` gRPC service: converts protobuf to the executor's types and back, validates
//! request-level limits (batch size, deadlines, JPEG quality) as INVALID_ARGUMENT naming the field.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use ufo_proto::v1::{
    self as pb, Capabilities, ExecuteRequest, ExecuteResponse, GetCapabilitiesRequest,
    ListToolsRequest, ListToolsResponse, executor_server,
};

use crate::backend::SettleOutcome;
use crate::encode::{Format, PngCompression};
use crate::executor::{BatchOptions, CommandSpec, Executor, Status as RunStatus};
use crate::tools::Tool;
use crate::watch::{Frame, InputError, PersonInput, WatchError, WatchOptions};

/// The stream of a live view.
pub type FrameStream = tokio_stream::wrappers::ReceiverStream<Result<pb::DesktopFrame, Status>>;

fn image_of(
    format: Format,
    data: Vec<u8>,
    width: u32,
    height: u32,
    x: i32,
    y: i32,
    scale: f64,
) -> pb::Image {
    pb::Image {
        format: match format {
            Format::Png(_) => pb::ImageFormat::Png,
            Format::Jpeg(_) => pb::ImageFormat::Jpeg,
        } as i32,
        data: data.into(),
        width,
        height,
        transform: Some(pb::ScreenTransform {
            origin_x: x,
            origin_y: y,
            scale,
        }),
    }
}

/// Request-level limits.
#[derive(Debug, Clone)]
pub struct ServiceLimits {
    /// Most commands per batch.
    pub max_batch: usize,
    /// Deadline when the request gives none.
    pub default_deadline: Duration,
    /// Largest deadline a request may ask for.
    pub max_deadline: Duration,
    /// JPEG quality when the request gives none.
    pub jpeg_quality: u8,
    /// How PNG screenshots are compressed.
    pub png_compression: PngCompression,
    /// Reported in capabilities.
    pub max_message_bytes: usize,
    /// Frames a second of a live view that asks for no rate.
    pub watch_fps: u32,
    /// Most frames a second a live view may ask for.
    pub watch_max_fps: u32,
}

impl ServiceLimits {
    /// The image format a request asks for (`unspecified` when it names none), with its JPEG quality
    /// (0: the configured one).
    fn format(
        &self,
        format: i32,
        jpeg_quality: u32,
        unspecified: pb::ImageFormat,
    ) -> Result<Format, Status> {
        let asked = match pb::ImageFormat::try_from(format) {
            Ok(pb::ImageFormat::Unspecified) => unspecified,
            Ok(asked) => asked,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "image_format {format} is not a known format"
                )));
            }
        };
        Ok(match asked {
            pb::ImageFormat::Unspecified | pb::ImageFormat::Png => {
                Format::Png(self.png_compression)
            }
            pb::ImageFormat::Jpeg => match jpeg_quality {
                0 => Format::Jpeg(self.jpeg_quality),
                q @ 1..=100 => Format::Jpeg(q as u8),
                q => {
                    return Err(Status::invalid_argument(format!(
                        "jpeg_quality {q} is outside 1..=100"
                    )));
                }
            },
        })
    }
}

/// The gRPC service over an [`Executor`].
#[derive(Clone)]
pub struct ExecutorService {
    executor: Arc<Executor>,
    limits: ServiceLimits,
}

impl ExecutorService {
    /// Serves `executor` within `limits`.
    pub fn new(executor: Arc<Executor>, limits: ServiceLimits) -> Self {
        Self { executor, limits }
    }

    fn options(&self, req: &ExecuteRequest) -> Result<BatchOptions, Status> {
        let deadline = match req.command_deadline_ms {
            0 => self.limits.default_deadline,
            ms => {
                let d = Duration::from_millis(ms.into());
                if d > self.limits.max_deadline {
                    return Err(Status::invalid_argument(format!(
                        "command_deadline_ms {ms} is above the maximum of {} ms",
                        self.limits.max_deadline.as_millis()
                    )));
                }
                d
            }
        };
        let format =
            self.limits
                .format(req.image_format, req.jpeg_quality, pb::ImageFormat::Png)?;
        Ok(BatchOptions { deadline, format })
    }

    fn watch_options(&self, req: &pb::WatchDesktopRequest) -> Result<WatchOptions, Status> {
        let max = self.limits.watch_max_fps.max(1);
        let fps = match req.max_fps {
            0 => self.limits.watch_fps.clamp(1, max),
            f if f > max => {
                return Err(Status::invalid_argument(format!(
                    "max_fps {f} is above the maximum of {max}"
                )));
            }
            f => f,
        };
        let format =
            self.limits
                .format(req.image_format, req.jpeg_quality, pb::ImageFormat::Jpeg)?;
        Ok(WatchOptions {
            min_interval: Duration::from_secs_f64(1.0 / f64::from(fps)),
            format,
        })
    }
}

/// Who made a call: the dial-out stream it came over, or the dial-in connection's peer address.
fn caller_of<T>(request: &Request<T>) -> crate::process::Caller {
    if let Some(c) = request.extensions().get::<crate::process::Caller>() {
        return c.clone();
    }
    match request.remote_addr() {
        Some(addr) => crate::process::Caller(format!("tcp:{addr}")),
        None => crate::process::Caller::local(),
    }
}

fn person_input(req: pb::TakeoverInputRequest) -> Result<PersonInput, Status> {
    use pb::takeover_input_request::Input;
    match req.input {
        None => Err(Status::invalid_argument(
            "input: one of click, keys or text is required",
        )),
        Some(Input::Click(c)) => {
            let button = match c.button.as_str() {
                "" | "left" => crate::backend::MouseButton::Left,
                "right" => crate::backend::MouseButton::Right,
                "middle" => crate::backend::MouseButton::Middle,
                other => {
                    return Err(Status::invalid_argument(format!(
                        "click.button {other:?} is not left, right or middle"
                    )));
                }
            };
            Ok(PersonInput::Click {
                at: crate::geometry::Point { x: c.x, y: c.y },
                button,
                double: c.double,
            })
        }
        Some(Input::Keys(k)) => Ok(PersonInput::Keys(k)),
        Some(Input::Text(t)) => Ok(PersonInput::Text(t)),
    }
}

#[tonic::async_trait]
impl executor_server::Executor for ExecutorService {
    type WatchDesktopStream = FrameStream;

    async fn watch_desktop(
        &self,
        request: Request<pb::WatchDesktopRequest>,
    ) -> Result<Response<Self::WatchDesktopStream>, Status> {
        let options = self.watch_options(request.get_ref())?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let backend = self.executor.backend().clone();
        let span = tracing::info_span!(
            "executor.watch",
            fps = 1.0 / options.min_interval.as_secs_f64(),
            format = options.format.name()
        );
        let wrap = |frame: Result<Frame, WatchError>| {
            frame
                .map(|f| pb::DesktopFrame {
                    seq: f.seq,
                    changes: f.changes,
                    captured_at_ms: f.captured_at_ms,
                    image: Some(image_of(
                        f.format, f.data, f.width, f.height, f.origin.x, f.origin.y, 1.0,
                    )),
                })
                .map_err(|e| Status::unavailable(e.to_string()))
        };
        tokio::spawn(tracing::Instrument::instrument(
            crate::watch::watch(backend, options, tx, wrap),
            span,
        ));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn takeover_input(
        &self,
        request: Request<pb::TakeoverInputRequest>,
    ) -> Result<Response<pb::TakeoverInputResponse>, Status> {
        let input = person_input(request.into_inner())?;
        let span = tracing::info_span!("executor.takeover_input");
        let took = tracing::Instrument::instrument(self.executor.person_input(input), span)
            .await
            .map_err(|e| match e {
                InputError::Invalid(m) => Status::invalid_argument(m),
                InputError::Backend(b) => Status::unavailable(b.to_string()),
            })?;
        Ok(Response::new(pb::TakeoverInputResponse {
            duration_us: took.as_micros().min(u128::from(u64::MAX)) as u64,
        }))
    }

    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let caller = caller_of(&request);
        let req = request.into_inner();
        if req.commands.len() > self.limits.max_batch {
            return Err(Status::invalid_argument(format!(
                "commands: {} commands is more than the maximum of {}",
                req.commands.len(),
                self.limits.max_batch
            )));
        }
        let options = self.options(&req)?;
        let commands = req
            .commands
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if c.tool_name.trim().is_empty() {
                    return Err(Status::invalid_argument(format!(
                        "commands[{i}].tool_name is empty"
                    )));
                }
                Ok(CommandSpec {
                    tool: c.tool_name,
                    params: ufo_proto::json::from_optional_struct(c.parameters),
                    call_id: c.call_id,
                })
            })
            .collect::<Result<Vec<_>, Status>>()?;
        let outcomes = self.executor.execute_as(&caller, commands, options).await;
        let results = outcomes
            .into_iter()
            .map(|o| pb::Result {
                status: match o.status {
                    RunStatus::Success => pb::ResultStatus::Success,
                    RunStatus::Failure => pb::ResultStatus::Failure,
                    RunStatus::Skipped => pb::ResultStatus::Skipped,
                } as i32,
                error: o.error,
                result: Some(ufo_proto::json::to_value(o.output.result)),
                call_id: o.call_id,
                duration_us: o.duration.as_micros().min(u128::from(u64::MAX)) as u64,
                images: o
                    .output
                    .images
                    .into_iter()
                    .map(|s| {
                        image_of(
                            s.format, s.data, s.width, s.height, s.origin.x, s.origin.y, s.scale,
                        )
                    })
                    .collect(),
                warnings: o.output.warnings,
                settle: o.settle.map(|s| pb::Settle {
                    outcome: match s.outcome {
                        SettleOutcome::Settled => pb::SettleOutcome::Settled,
                        SettleOutcome::NoChange => pb::SettleOutcome::NoChange,
                        SettleOutcome::Timeout => pb::SettleOutcome::Timeout,
                        SettleOutcome::Unsupported => pb::SettleOutcome::Unsupported,
                    } as i32,
                    waited_us: s.waited.as_micros().min(u128::from(u64::MAX)) as u64,
                    draws: s.draws,
                    accessibility_events: s.events,
                    animations: s.animations,
                    ignored: s.ignored,
                }),
                effect: o.effect.map(|e| pb::Effect {
                    kind: e.kind.to_proto() as i32,
                    description: e.description,
                }),
            })
            .collect();
        Ok(Response::new(ExecuteResponse { results }))
    }

    async fn list_tools(
        &self,
        _: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        let schema = |v: serde_json::Value| match ufo_proto::json::to_value(v).kind {
            Some(prost_types::value::Kind::StructValue(s)) => Some(s),
            _ => None,
        };
        let tools = Tool::ALL
            .iter()
            .map(|t| pb::ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                tool_type: if t.kind().is_action() {
                    pb::ToolType::Action
                } else {
                    pb::ToolType::DataCollection
                } as i32,
                parameters_schema: schema(t.parameters_schema()),
                result_schema: schema(t.result_schema()),
            })
            .collect();
        Ok(Response::new(ListToolsResponse { tools }))
    }

    async fn reset(
        &self,
        request: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let task_id = request.into_inner().task_id;
        if task_id.len() > 128 || task_id.chars().any(char::is_control) {
            return Err(Status::invalid_argument(
                "task_id: at most 128 bytes without control characters",
            ));
        }
        let span = tracing::info_span!("executor.reset", task_id = %task_id);
        match tracing::Instrument::instrument(self.executor.reset(&task_id), span).await {
            Ok(report) => {
                tracing::info!(task_id = %task_id, closed = report.closed, removed = report.removed, hook_ran = report.hook_ran, "desktop reset");
                Ok(Response::new(pb::ResetResponse {
                    closed: report.closed,
                    removed: report.removed,
                    hook_ran: report.hook_ran,
                }))
            }
            Err(e) => {
                let mut reason = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    reason.push_str(": ");
                    reason.push_str(&cause.to_string());
                    source = cause.source();
                }
                tracing::warn!(task_id = %task_id, %reason, "desktop reset failed");
                Err(Status::failed_precondition(reason))
            }
        }
    }

    async fn get_capabilities(
        &self,
        _: Request<GetCapabilitiesRequest>,
    ) -> Result<Response<Capabilities>, Status> {
        let backend = self.executor.backend();
        let screens = backend
            .screens()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(Capabilities {
            backend: backend.name().to_owned(),
            platform: backend.platform().to_owned(),
            screens: screens
                .into_iter()
                .enumerate()
                .map(|(i, s)| pb::Screen {
                    index: i as u32,
                    x: s.rect.left,
                    y: s.rect.top,
                    width: s.rect.width(),
                    height: s.rect.height(),
                    scale: s.scale,
                    primary: s.primary,
                })
                .collect(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            max_message_bytes: self.limits.max_message_bytes as u64,
            allowed_applications: self.executor.app_names(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_format_is_the_asked_one_or_the_callers_default_and_a_bad_one_is_refused() {
        let limits = ServiceLimits {
            max_batch: 1,
            default_deadline: Duration::from_secs(1),
            max_deadline: Duration::from_secs(1),
            jpeg_quality: 70,
            png_compression: PngCompression::Fast,
            max_message_bytes: 1,
            watch_fps: 1,
            watch_max_fps: 1,
        };
        let (png, jpeg) = (pb::ImageFormat::Png, pb::ImageFormat::Jpeg);
        let unspecified = pb::ImageFormat::Unspecified as i32;
        let ok = |format: pb::ImageFormat, quality, default| {
            limits.format(format as i32, quality, default).ok()
        };
        assert_eq!(ok(png, 50, jpeg), Some(Format::Png(PngCompression::Fast)));
        assert_eq!(ok(jpeg, 0, png), Some(Format::Jpeg(70)));
        assert_eq!(ok(jpeg, 100, png), Some(Format::Jpeg(100)));
        assert_eq!(
            limits.format(unspecified, 0, png).ok(),
            Some(Format::Png(PngCompression::Fast))
        );
        assert_eq!(
            limits.format(unspecified, 0, jpeg).ok(),
            Some(Format::Jpeg(70))
        );
        let refused = |format, quality| limits.format(format, quality, png).map_err(|e| e.code());
        assert_eq!(refused(jpeg as i32, 101), Err(tonic::Code::InvalidArgument));
        assert_eq!(refused(9, 0), Err(tonic::Code::InvalidArgument));
    }
}
