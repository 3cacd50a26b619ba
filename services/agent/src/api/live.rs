//! A task's desktop, live (`GET /v1/tasks/{id}/live`, docs/live.md): the executor's `WatchDesktop`
//! frames relayed as server-sent events.
//!
//! One executor stream serves every watcher of that executor (the desktop is the same whichever task
//! looks at it): the first watcher opens it, the last one leaving drops it (the executor then stops
//! capturing). Each frame is encoded to its event once, whoever watches; a watcher slower than the
//! frames skips to the newest one instead of queueing old pictures.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use base64::Engine as _;
use futures::Stream;
use serde::Serialize;
use tokio::sync::watch;
use ufo_common::ErrorCode;
use ufo_proto::v1;
use uuid::Uuid;

use super::auth::Caller;
use super::extract::Path;
use super::{ApiError, AppState};
use crate::dispatch::registry::{Connection, ExecutorRegistry};

/// One frame of the live desktop, as the `frame` event's data.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LiveFrame {
    /// 1 for the first frame of the executor's stream, then one more per frame.
    pub seq: u64,
    /// `jpeg` or `png`.
    pub format: &'static str,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Screen x of the picture's left edge (a click at picture pixel px is at screen x `origin_x + px`).
    pub origin_x: i32,
    /// Screen y of the picture's top edge.
    pub origin_y: i32,
    /// Size of the encoded picture in bytes (before base64).
    pub bytes: usize,
    /// When the executor captured it, milliseconds since the Unix epoch.
    pub captured_at_ms: u64,
    /// Changes the executor saw since the previous frame.
    pub changes: u64,
    /// The encoded picture, base64.
    pub data: String,
}

/// What a watcher sees of a feed.
#[derive(Debug, Clone)]
enum Shown {
    /// No frame yet.
    Waiting,
    /// The newest frame's event data (JSON), shared by every watcher.
    Frame(Arc<str>),
    /// The feed ended; why.
    Failed(Arc<str>),
}

/// One executor's stream and its watchers' receiver; dropping the last handle stops it.
#[derive(Debug)]
struct Feed {
    rx: watch::Receiver<Shown>,
    upstream: tokio::task::JoinHandle<()>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.upstream.abort();
    }
}

/// The live feeds, one per executor being watched.
pub struct LiveHub {
    executors: Arc<ExecutorRegistry>,
    fps: u32,
    jpeg_quality: u32,
    max_message_bytes: usize,
    feeds: Mutex<HashMap<String, Weak<Feed>>>,
}

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHub")
            .field("fps", &self.fps)
            .finish_non_exhaustive()
    }
}

/// A watcher's handle: keeps the feed alive while held.
pub struct Watcher {
    _feed: Arc<Feed>,
    rx: watch::Receiver<Shown>,
}

fn frame_json(f: v1::DesktopFrame) -> Arc<str> {
    let image = f.image.unwrap_or_default();
    let view = LiveFrame {
        seq: f.seq,
        format: if image.format == v1::ImageFormat::Png as i32 {
            "png"
        } else {
            "jpeg"
        },
        width: image.width,
        height: image.height,
        origin_x: image.transform.as_ref().map_or(0, |t| t.origin_x),
        origin_y: image.transform.as_ref().map_or(0, |t| t.origin_y),
        bytes: image.data.len(),
        captured_at_ms: f.captured_at_ms,
        changes: f.changes,
        data: base64::engine::general_purpose::STANDARD.encode(&image.data),
    };
    serde_json::to_string(&view)
        .unwrap_or_else(|_| "{}".to_owned())
        .into()
}

impl LiveHub {
    /// Feeds from `executors` at `fps` frames a second at most, JPEG at `jpeg_quality`.
    pub fn new(
        executors: Arc<ExecutorRegistry>,
        fps: u32,
        jpeg_quality: u32,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            executors,
            fps,
            jpeg_quality,
            max_message_bytes,
            feeds: Mutex::new(HashMap::new()),
        }
    }

    /// How many executors are being watched now (for tests and the benchmark).
    pub fn feeds(&self) -> usize {
        self.feeds
            .lock()
            .map(|m| m.values().filter(|w| w.strong_count() > 0).count())
            .unwrap_or(0)
    }

    /// Watches the executor of `conn`, joining its feed or opening it.
    pub fn watch(&self, conn: &Connection) -> Result<Watcher, ApiError> {
        let mut feeds = self
            .feeds
            .lock()
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the live feeds are poisoned"))?;
        feeds.retain(|_, w| w.strong_count() > 0);
        if let Some(feed) = feeds.get(&conn.address).and_then(Weak::upgrade) {
            let rx = feed.rx.clone();
            return Ok(Watcher { _feed: feed, rx });
        }
        let dispatcher = self
            .executors
            .dispatcher(conn, 0, self.max_message_bytes)
            .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("executor: {e}")))?;
        let client = dispatcher.client();
        let (tx, rx) = watch::channel(Shown::Waiting);
        let request = v1::WatchDesktopRequest {
            max_fps: self.fps,
            image_format: v1::ImageFormat::Jpeg as i32,
            jpeg_quality: self.jpeg_quality,
        };
        let span = tracing::info_span!("live.feed", executor = %conn.address, fps = self.fps);
        let upstream = tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut client = client;
                let mut stream = match client.watch_desktop(request).await {
                    Ok(r) => r.into_inner(),
                    Err(s) => {
                        tx.send_replace(Shown::Failed(
                            format!("the executor has no live view: {}", s.message()).into(),
                        ));
                        return;
                    }
                };
                loop {
                    match stream.message().await {
                        Ok(Some(frame)) => {
                            let json = tokio::task::spawn_blocking(move || frame_json(frame))
                                .await
                                .unwrap_or_else(|_| "{}".into());
                            tx.send_replace(Shown::Frame(json));
                        }
                        Ok(None) => {
                            tx.send_replace(Shown::Failed(
                                "the executor ended the live view".into(),
                            ));
                            return;
                        }
                        Err(s) => {
                            tx.send_replace(Shown::Failed(
                                format!("the live view failed: {}", s.message()).into(),
                            ));
                            return;
                        }
                    }
                }
            },
            span,
        ));
        let feed = Arc::new(Feed {
            rx: rx.clone(),
            upstream,
        });
        feeds.insert(conn.address.clone(), Arc::downgrade(&feed));
        Ok(Watcher { _feed: feed, rx })
    }
}

impl Watcher {
    /// The events: the newest frame each time there is a new one (`frame`), then `error` if the feed
    /// ends.
    fn into_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send {
        futures::stream::unfold(Some((self, false)), |state| async move {
            let (mut w, wait) = state?;
            if wait && w.rx.changed().await.is_err() {
                return None;
            }
            loop {
                let shown = w.rx.borrow_and_update().clone();
                match shown {
                    Shown::Frame(json) => {
                        let event = SseEvent::default().event("frame").data(&*json);
                        return Some((Ok(event), Some((w, true))));
                    }
                    Shown::Failed(message) => {
                        let body =
                            ufo_common::ErrorBody::new(ErrorCode::Unavailable, message.to_string());
                        let data = serde_json::to_string(&body).unwrap_or_default();
                        return Some((Ok(SseEvent::default().event("error").data(data)), None));
                    }
                    Shown::Waiting => {
                        if w.rx.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
        })
    }
}

/// The task's desktop live (`text/event-stream`).
#[utoipa::path(get, path = "/v1/tasks/{id}/live", tag = "tasks",
    params(("id" = Uuid, Path, description = "task id")),
    responses((status = 200, content_type = "text/event-stream", body = String,
        description = "Server-sent events: `event: frame` with `data: <LiveFrame JSON>` \
(`#/components/schemas/LiveFrame`: the desktop's picture, base64, with its size and place on the screen) each \
time the screen changed, at most `--live-fps` a second; nothing while the screen does not change. If the \
executor's live view fails or it has none (a dial-out executor), `event: error` with `data: {code, message}` \
ends the stream. docs/live.md.")))]
pub async fn live(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id = id.to_string();
    // Another caller's task is 404, like every task route.
    let conn = state.tasks.executor_of(&id, &caller).await?;
    let watcher = state.tasks.live().watch(&conn)?;
    let keep_alive = Duration::from_secs(state.tasks.limits().viewer.sse_keepalive_seconds);
    tracing::info!(task_id = %id, executor = %conn.address, "live view opened");
    Ok(Sse::new(watcher.into_stream()).keep_alive(KeepAlive::new().interval(keep_alive)))
}
