//! The live desktop (`WatchDesktop`) and a person's input during a takeover (`TakeoverInput`);
//! docs/live.md.
//!
//! A watch sends the desktop's picture at once, then waits for the screen to change: on Linux for the
//! X DAMAGE drawings (and the applications' accessibility events) the settle protocol already records
//! ([`Backend::change_mark`], [`Backend::activity_after`]); on a backend that sees no changes (Windows)
//! it captures at the frame rate and compares. A frame whose pixels equal the previous frame's is not
//! sent, so an unchanging desktop sends nothing after the first frame. Frames are at least
//! `1 / max_fps` apart, and a frame is captured only when the caller can take it (a slow viewer gets
//! fewer, fresher frames, never a queue of old ones).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use crate::backend::{Backend, BackendError, Capture, MouseButton};
use crate::encode::{Format, encode};
use crate::executor::Executor;
use crate::geometry::{Point, Rect};
use crate::keys::{Key, KeyStroke, parse_keys};

/// How one watch runs.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Shortest time between two frames.
    pub min_interval: Duration,
    /// How frames are encoded.
    pub format: Format,
}

/// One picture of the desktop.
#[derive(Debug, Clone)]
pub struct Frame {
    /// 1 for the first frame, then one more per frame sent.
    pub seq: u64,
    /// The encoded picture.
    pub data: Vec<u8>,
    /// Its encoding.
    pub format: Format,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Screen position of its top-left pixel.
    pub origin: Point,
    /// Changes seen since the previous frame (0 where the backend compares captures instead).
    pub changes: u64,
    /// When it was captured, milliseconds since the Unix epoch.
    pub captured_at_ms: u64,
}

/// Why a watch ended other than by its caller leaving.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The desktop could not be read.
    #[error("cannot capture the desktop: {0}")]
    Capture(#[from] BackendError),
    /// The picture could not be encoded.
    #[error(transparent)]
    Encode(#[from] crate::encode::EncodeError),
}

/// The whole desktop: every screen.
async fn desktop_rect(backend: &dyn Backend) -> Result<Rect, BackendError> {
    let screens = backend.screens().await?;
    Ok(screens
        .iter()
        .fold(Rect::default(), |acc, s| acc.union(&s.rect)))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

/// Sends frames of `backend`'s desktop into `tx`, each wrapped by `wrap`, until the receiver is dropped
/// or the desktop cannot be read (the error is sent last).
pub async fn watch<T: Send + 'static>(
    backend: Arc<dyn Backend>,
    options: WatchOptions,
    tx: mpsc::Sender<T>,
    wrap: impl Fn(Result<Frame, WatchError>) -> T + Send,
) {
    let mut seq = 0u64;
    let mut last: Option<Capture> = None;
    let mut last_sent: Option<Instant> = None;
    let mut changes = 0u64;
    loop {
        // The rate bound: at most one frame per interval.
        if let Some(at) = last_sent {
            tokio::select! {
                () = tokio::time::sleep_until((at + options.min_interval).into()) => {}
                () = tx.closed() => return,
            }
        }
        // Capture only when the viewer can take the frame: a slow one gets fresher frames, not a queue.
        let Ok(permit) = tx.reserve().await else {
            return;
        };
        let mark = backend.change_mark();
        let captured = async {
            let rect = desktop_rect(backend.as_ref()).await?;
            backend.capture(rect).await
        }
        .await;
        let capture = match captured {
            Ok(c) => c,
            Err(e) => {
                permit.send(wrap(Err(e.into())));
                return;
            }
        };
        let same = last.as_ref().is_some_and(|l| {
            l.width == capture.width
                && l.height == capture.height
                && l.origin == capture.origin
                && l.rgb == capture.rgb
        });
        if same {
            drop(permit);
        } else {
            let format = options.format;
            let encoded = tokio::task::spawn_blocking(move || {
                let data = encode(&capture, format);
                (capture, data)
            })
            .await;
            let Ok((capture, data)) = encoded else {
                return;
            };
            let data = match data {
                Ok(d) => d,
                Err(e) => {
                    permit.send(wrap(Err(e.into())));
                    return;
                }
            };
            seq += 1;
            permit.send(wrap(Ok(Frame {
                seq,
                data,
                format,
                width: capture.width,
                height: capture.height,
                origin: capture.origin,
                changes: if seq == 1 { 0 } else { changes },
                captured_at_ms: now_ms(),
            })));
            last = Some(capture);
            last_sent = Some(Instant::now());
            changes = 0;
        }
        // Wait for the screen to change.
        match mark {
            Some(mark) => {
                let changed = async {
                    loop {
                        let until = Instant::now() + Duration::from_secs(3600);
                        if backend.activity_after(mark, until).await {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = changed => {}
                    () = tx.closed() => return,
                }
                changes += backend.change_mark().unwrap_or(mark).saturating_sub(mark);
            }
            None => {
                // No change events: compare the next capture, one interval later.
                tokio::select! {
                    () = tokio::time::sleep(options.min_interval) => {}
                    () = tx.closed() => return,
                }
            }
        }
    }
}

/// A person's input during a takeover.
#[derive(Debug, Clone, PartialEq)]
pub enum PersonInput {
    /// A click at a screen point.
    Click {
        /// Where, in screen pixels.
        at: Point,
        /// Which button.
        button: MouseButton,
        /// Double click.
        double: bool,
    },
    /// Key strokes in the keyboard_input tool's syntax.
    Keys(String),
    /// Literal text.
    Text(String),
}

/// Why a person's input was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The input itself is wrong (off every screen, too long, a control character, bad key syntax).
    #[error("{0}")]
    Invalid(String),
    /// The desktop did not take it.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl Executor {
    /// Delivers a person's input, serialised with the batches like an action (the next observation
    /// waits for the screen to settle after it). Returns how long it took.
    pub async fn person_input(&self, input: PersonInput) -> Result<Duration, InputError> {
        let strokes = match &input {
            PersonInput::Click { .. } => Vec::new(),
            PersonInput::Keys(keys) => {
                self.text_fits("keys", keys)?;
                parse_keys(keys, self.limits.max_key_strokes)
                    .map_err(|e| InputError::Invalid(format!("keys: {e}")))?
            }
            PersonInput::Text(text) => {
                self.text_fits("text", text)?;
                if let Some(c) = text
                    .chars()
                    .find(|c| c.is_control() && !matches!(c, '\n' | '\t'))
                {
                    return Err(InputError::Invalid(format!(
                        "text: control character U+{:04X} is not typed (only newline and tab are)",
                        u32::from(c)
                    )));
                }
                let strokes: Vec<KeyStroke> = text
                    .chars()
                    .flat_map(|c| {
                        let key = match c {
                            '\n' => Key::Named(crate::keys::NamedKey::Enter),
                            '\t' => Key::Named(crate::keys::NamedKey::Tab),
                            c => Key::Char(c),
                        };
                        [
                            KeyStroke { key, down: true },
                            KeyStroke { key, down: false },
                        ]
                    })
                    .collect();
                if strokes.len() > self.limits.max_key_strokes {
                    return Err(InputError::Invalid(format!(
                        "text: {} characters is more than the limit of {} key strokes",
                        text.chars().count(),
                        self.limits.max_key_strokes / 2
                    )));
                }
                strokes
            }
        };
        if let PersonInput::Click { at, .. } = &input {
            let screens = self.backend.screens().await?;
            if !screens.iter().any(|s| s.rect.contains(*at)) {
                return Err(InputError::Invalid(format!(
                    "click at ({}, {}) is not on a screen ({})",
                    at.x,
                    at.y,
                    screens
                        .iter()
                        .map(|s| format!(
                            "{}x{} at {},{}",
                            s.rect.width(),
                            s.rect.height(),
                            s.rect.left,
                            s.rect.top
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let mut state = self.state.lock().await;
        let started = Instant::now();
        // Like an action: settle the previous one first, then mark the screen for the next observation.
        if self.limits.settle_between_actions {
            self.settle_pending(&mut state).await;
        }
        if let Some(mark) = self.backend.change_mark() {
            state.unsettled = Some((mark, Instant::now()));
        }
        match input {
            PersonInput::Click { at, button, double } => {
                self.backend.click_at(at, button, double).await?;
            }
            PersonInput::Keys(_) | PersonInput::Text(_) => {
                self.backend.send_keys(&strokes).await?;
            }
        }
        Ok(started.elapsed())
    }

    fn text_fits(&self, field: &str, text: &str) -> Result<(), InputError> {
        if text.is_empty() {
            return Err(InputError::Invalid(format!("{field} is empty")));
        }
        if text.len() > self.limits.max_text_bytes {
            return Err(InputError::Invalid(format!(
                "{field} is {} bytes, more than the limit of {}",
                text.len(),
                self.limits.max_text_bytes
            )));
        }
        Ok(())
    }
}
