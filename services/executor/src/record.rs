//! Recording what a person does (`record_input`, issue 33's human demonstrations): the backend's input
//! capture ([`Backend::capture_input`]: X RECORD on Linux, low-level hooks on Windows) reports each
//! button press, wheel notch and key press; this module turns them into the steps a demonstration is
//! made of, each resolved to the control it was aimed at with the selector fields the control listing
//! reports (type, name, automation id, ancestors, sibling index) — the same fields a replay finds
//! controls by.
//!
//! - **Clicks** are resolved against a control listing taken *before* the press: the recorder keeps
//!   the windows and the controls of the active window, of the window under the pointer and of every
//!   new window, listed again whenever the desktop changes (animations aside; backends that see no
//!   changes are listed every [`POLL`]). A press uses the newest listing begun before it, so a dialog
//!   that closes on the click is still resolved (its controls are gone by the time the press is read).
//!   The control is the smallest listed one whose bounds hold the point, in the window under it (the
//!   active one first), else in any listed window (a menu's popup). Only when nothing listed before
//!   showed that point is the window listed after the press (`resolved: "after"`).
//! - **Typed text** is grouped per focused field: characters typed without Control, Alt or the Windows
//!   key are one `text` step until another kind of input comes (a click, Enter, Tab, a shortcut);
//!   Backspace takes back the group's last character. The field is the control that has the keyboard
//!   focus when the group starts (asked live among the active window's editable controls), else the
//!   control clicked last in that window.
//! - **Other keys** (Enter, Tab, Escape, arrows, Ctrl+S, ...) are `keys` steps in `keyboard_input`'s key
//!   syntax (`{ENTER}`, `^s`, `+{TAB}`), resolved to the focused control the same way.
//! - **Wheel notches** on one control are one `scroll` step; a second press of a button at the same
//!   place within [`DOUBLE_CLICK`] makes the click a double click; a window that appears is a
//!   `window_opened` step.
//!
//! - **Screenshots.** Each click, text, keys and scroll step keeps a screenshot of the whole desktop
//!   (every screen) as the person saw it when the step was resolved: the newest desktop capture begun
//!   before the input (a click, a key, a notch; for typed text, the input that ended the group), so a
//!   dialog's OK shows the dialog with the text typed in it although the click closed it. The desktop
//!   is captured with each listing (at the start and whenever the desktop changes; on a blocking
//!   thread the recorder does not wait for), the last [`KEPT`] captures kept raw; a step's capture is
//!   encoded once (the start's encoding: PNG or JPEG) when the person pauses ([`IDLE`]) or the
//!   recording ends, and kept with the step until collected (`screenshot` reads it). The desktop rather than the
//!   window: a menu's popup, a dialog over its window, the window that is gone after the click are all
//!   on it. Bounded by `--record-max-screenshots` and `--record-max-screenshot-mb`: later steps keep
//!   none (their `screenshot` is absent).
//!
//! A recording is bounded (most steps, longest time; the executor's `--record-max-events` and
//! `--record-max-seconds`, which a start may lower) and ends by itself at its bound; its steps wait
//! for `stop`. One recording runs at a time per executor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use tracing::Instrument as _;

use crate::backend::{
    Backend, BackendError, Capture, InputEvent, InputFeed, MouseButton, RawInput, RawNode,
    TreeLimits, WindowInfo,
};
use crate::encode::Format;
use crate::executor::{Limits, Shot};
use crate::geometry::{Point, Rect};
use crate::keys::{Key, NamedKey};
use crate::tools::controls::ControlEntry;
use crate::tree::{ControlPath, filter_with_paths};

/// How often a backend that sees no changes is listed again while recording.
pub const POLL: Duration = Duration::from_millis(250);

/// A second press of the same button this soon, at the same place, makes a double click.
pub const DOUBLE_CLICK: Duration = Duration::from_millis(500);

/// Steps' screenshots are encoded once no input came for this long (or at the end).
const IDLE: Duration = Duration::from_millis(500);

/// Steps whose screenshots wait to be encoded before they are encoded anyway.
const MAX_WAITING: usize = 16;

/// A desktop capture under way or done (`None`: it failed).
type Captured = futures::future::Shared<BoxFuture<'static, Option<Arc<Capture>>>>;

/// Wheel notches this close together on one control are one scroll step.
const SCROLL_JOIN: Duration = Duration::from_secs(1);

/// Listings kept per window (the newest begun before an input is the one used).
const KEPT: usize = 4;

/// Most windows listed when a recording starts.
const MAX_START_WINDOWS: usize = 16;

/// Most editable controls asked whether they have the focus.
const MAX_FOCUS_ASKS: usize = 32;

/// How long one listing may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(3);

/// The control types text is typed into.
const EDITABLE: &[&str] = &["Edit", "Document", "ComboBox", "Spinner"];

/// The fields a recorded control carries: what a replay's selector keeps, and where it was.
const SELECTOR_FIELDS: &[&str] = &[
    "name",
    "type",
    "rect",
    "automation_id",
    "ancestors",
    "sibling_index",
];

/// How a recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop` was asked.
    Asked,
    /// It reached its most steps.
    MaxEvents,
    /// It reached its longest time.
    MaxDuration,
    /// The desktop stopped reporting input (its display went away).
    InputEnded,
}

impl Ended {
    /// As results spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Asked => "asked",
            Self::MaxEvents => "max_events",
            Self::MaxDuration => "max_duration",
            Self::InputEnded => "input_ended",
        }
    }
}

/// A window a recorded step happened in.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RecordedWindow {
    /// Its title.
    pub title: String,
    /// Its program's name.
    pub process: String,
    /// Its native handle.
    pub handle: u64,
}

impl RecordedWindow {
    fn of(w: &WindowInfo) -> Self {
        Self {
            title: w.title.clone(),
            process: w.process_name.clone(),
            handle: w.handle,
        }
    }
}

/// A step's screenshot (its bytes are read with `record_input`'s `screenshot`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ShotInfo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Screen `[x, y]` of pixel (0, 0).
    pub origin: [i32; 2],
    /// The encoding.
    #[schemars(extend("enum" = ["png", "jpeg"]))]
    pub format: &'static str,
    /// Encoded size in bytes.
    pub bytes: u64,
    /// Milliseconds after the recording started at which the desktop was captured.
    pub at_ms: u64,
}

/// One step of a recording.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RecordedEvent {
    /// Milliseconds after the recording started.
    pub at_ms: u64,
    /// `click`, `text` (characters typed into one field), `keys` (other keys, in `keyboard_input`'s
    /// syntax), `scroll` or `window_opened`.
    #[schemars(extend("enum" = ["click", "text", "keys", "scroll", "window_opened"]))]
    pub kind: &'static str,
    /// A click's button.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub button: Option<MouseButton>,
    /// A click that was a double click.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub double: bool,
    /// Where a click or scroll happened, in screen pixels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub point: Option<[i32; 2]>,
    /// The text typed (`text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The keys pressed (`keys`), e.g. `{ENTER}`, `^s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<String>,
    /// Wheel notches (`scroll`; positive: up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notches: Option<i32>,
    /// The window it happened in (the window opened, for `window_opened`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<RecordedWindow>,
    /// The control it was aimed at, with the listing's selector fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlEntry>,
    /// How the control was found: `before` (a listing taken before the input), `after` (nothing listed
    /// before showed that point; listed after it), `focus` (the control with the keyboard focus),
    /// `clicked` (no control had the focus; the one clicked last), `none`.
    #[schemars(extend("enum" = ["before", "after", "focus", "clicked", "none"]))]
    pub resolved: &'static str,
    /// The desktop as the person saw it when the step was resolved; absent for windows that opened,
    /// past the recording's screenshot bounds, or when the desktop could not be captured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<ShotInfo>,
}

impl RecordedEvent {
    fn new(at_ms: u64, kind: &'static str) -> Self {
        Self {
            at_ms,
            kind,
            button: None,
            double: false,
            point: None,
            text: None,
            keys: None,
            notches: None,
            window: None,
            control: None,
            resolved: "none",
            screenshot: None,
        }
    }
}

/// What a recording has produced so far.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The steps, oldest first.
    pub events: Vec<RecordedEvent>,
    /// How it ended, once it has.
    pub ended: Option<Ended>,
    /// The steps' screenshots, by step index.
    pub shots: HashMap<usize, Shot>,
    /// Their encoded bytes.
    pub shot_bytes: u64,
    /// Steps that keep no screenshot because of the bounds.
    pub shots_left_out: u32,
}

/// A running (or ended, not yet collected) recording.
pub(crate) struct Recording {
    /// When it started.
    pub started: Instant,
    /// Its most steps.
    pub max_events: u32,
    /// Its longest time.
    pub max_duration: Duration,
    /// Its steps and end.
    pub shared: Arc<Mutex<Shared>>,
    /// Asks it to stop.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The recorder.
    task: tokio::task::JoinHandle<()>,
}

impl Recording {
    /// Starts recording on `backend`: the input capture first (nothing the person does from now is
    /// missed), then the first listing of every window (bounded), then the recorder in the background.
    /// Returns the recording and the windows listed at its start.
    pub(crate) async fn start(
        backend: Arc<dyn Backend>,
        limits: Limits,
        max_events: u32,
        max_duration: Duration,
        format: Format,
    ) -> Result<(Self, Vec<RecordedWindow>), BackendError> {
        let started = Instant::now();
        let feed = backend.capture_input().await?;
        let screen = backend
            .screens()
            .await?
            .iter()
            .fold(Rect::default(), |acc, s| acc.union(&s.rect));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut rec = Recorder {
            backend,
            limits,
            started,
            shared: shared.clone(),
            max_events: max_events as usize,
            windows: Vec::new(),
            listed: HashMap::new(),
            known: Vec::new(),
            typing: None,
            last_click: None,
            format,
            screen,
            captures: Vec::new(),
            to_shoot: Vec::new(),
            waiting: Vec::new(),
            encoding: Vec::new(),
            last_input: started,
        };
        rec.refresh(feed.pointer(), true).await?;
        let windows = rec
            .windows
            .last()
            .map(|(_, _, ws)| ws.iter().map(RecordedWindow::of).collect())
            .unwrap_or_default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let until = started + max_duration;
        let span = tracing::info_span!(
            "executor.record_input",
            max_events,
            max_ms = max_duration.as_millis() as u64,
            events = tracing::field::Empty,
            ended = tracing::field::Empty,
        );
        let task = tokio::spawn(
            async move {
                let ended = rec.run(feed, stopped, until).await;
                let span = tracing::Span::current();
                if let Ok(mut s) = rec.shared.lock() {
                    span.record("events", s.events.len());
                    s.ended = Some(ended);
                }
                span.record("ended", ended.as_str());
            }
            .instrument(span),
        );
        Ok((
            Self {
                started,
                max_events,
                max_duration,
                shared,
                stop: Some(stop),
                task,
            },
            windows,
        ))
    }

    /// Whether it is still recording.
    pub(crate) fn running(&self) -> bool {
        self.shared
            .lock()
            .map(|s| s.ended.is_none())
            .unwrap_or(false)
    }

    /// Stops it (if it still runs) and waits up to `wait` for the recorder to finish its last step.
    pub(crate) async fn stop(mut self, wait: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(wait, &mut self.task).await.is_err() {
            self.task.abort();
            if let Ok(mut s) = self.shared.lock() {
                s.ended.get_or_insert(Ended::Asked);
            }
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One window's controls as listed at one moment.
struct Listed {
    /// When the listing began.
    taken: Instant,
    /// When it ended (a listing under way at a press may have seen its window close mid-walk).
    done: Instant,
    /// The window.
    window: WindowInfo,
    /// Its listed controls.
    controls: Vec<RawNode>,
    /// Where each sits.
    paths: Vec<ControlPath>,
}

/// The control at `p` in the newest of `kept` begun before `t`. A listing still under way at `t` that
/// shows nothing there (its window closed during the walk: the click that closes a dialog, made while
/// the typing before it was being listed) gives way to the one before it; a listing finished before `t`
/// is the answer, found or not.
fn before(kept: &[Listed], t: Instant, p: Point) -> Option<(&Listed, usize)> {
    for l in kept.iter().rev().filter(|l| l.taken <= t) {
        if let Some(i) = l.at(p) {
            return Some((l, i));
        }
        if l.done <= t {
            return None;
        }
    }
    None
}

impl Listed {
    /// The smallest control whose bounds hold `p`.
    fn at(&self, p: Point) -> Option<usize> {
        self.controls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.rect.contains(p))
            .min_by_key(|(_, c)| u64::from(c.rect.width()) * u64::from(c.rect.height()))
            .map(|(i, _)| i)
    }

    fn entry(&self, i: usize) -> Option<ControlEntry> {
        let fields: Vec<String> = SELECTOR_FIELDS.iter().map(|f| (*f).to_owned()).collect();
        let node = self.controls.get(i)?;
        Some(ControlEntry::new(i, node, self.paths.get(i), &fields))
    }
}

/// Text being typed into one field.
struct Typing {
    at_ms: u64,
    window: Option<RecordedWindow>,
    control: Option<ControlEntry>,
    resolved: &'static str,
    text: String,
}

/// The last click: when, where, which button, and the control it resolved to.
struct LastClick {
    at: Instant,
    point: Point,
    button: MouseButton,
    /// The index of its step.
    index: usize,
    /// Its window and control (for typing that follows it when no control reports the focus).
    window: u64,
    control: Option<RawNode>,
    entry: Option<ControlEntry>,
}

/// The background recorder.
struct Recorder {
    backend: Arc<dyn Backend>,
    limits: Limits,
    started: Instant,
    shared: Arc<Mutex<Shared>>,
    max_events: usize,
    /// Window listings: (begun, active window, windows), oldest first, at most [`KEPT`].
    windows: Vec<(Instant, Option<u64>, Vec<WindowInfo>)>,
    /// Control listings per window, oldest first, at most [`KEPT`] each.
    listed: HashMap<u64, Vec<Listed>>,
    /// Windows seen so far.
    known: Vec<u64>,
    typing: Option<Typing>,
    last_click: Option<LastClick>,
    /// How screenshots are encoded.
    format: Format,
    /// The desktop's bounds (every screen).
    screen: Rect,
    /// Desktop captures: (begun, capture), oldest first, at most [`KEPT`].
    captures: Vec<(Instant, Captured)>,
    /// Steps whose screenshot is still to be taken: (index, the moment it shows).
    to_shoot: Vec<(usize, Instant)>,
    /// Steps' captures waiting to be encoded: (index, when captured, capture).
    waiting: Vec<(usize, u64, Captured)>,
    /// Screenshots being encoded.
    encoding: Vec<tokio::task::JoinHandle<()>>,
    /// When the last input came.
    last_input: Instant,
}

impl Recorder {
    /// Records until asked to stop, `until` passes, the most steps are reached or the input ends.
    async fn run(
        &mut self,
        mut feed: InputFeed,
        mut stopped: tokio::sync::oneshot::Receiver<()>,
        until: Instant,
    ) -> Ended {
        let backend = self.backend.clone();
        let pointer = feed.pointer.clone();
        let hz = self.limits.settle.animation_hz;
        let mut mark = backend.change_mark();
        let ended = loop {
            if self.full() {
                break Ended::MaxEvents;
            }
            let watch = {
                let backend = backend.clone();
                async move {
                    match mark {
                        Some(m) => {
                            if backend.activity_after(m, until).await {
                                return;
                            }
                            std::future::pending::<()>().await;
                        }
                        None => tokio::time::sleep(POLL).await,
                    }
                }
            };
            tokio::select! {
                biased;
                _ = &mut stopped => break Ended::Asked,
                () = tokio::time::sleep_until(until.into()) => break Ended::MaxDuration,
                ev = feed.events.recv() => match ev {
                    Some(ev) => {
                        self.input(ev).await;
                        self.shoot();
                        self.last_input = Instant::now();
                    }
                    None => break Ended::InputEnded,
                },
                // The person paused: encode the screenshots waiting.
                () = tokio::time::sleep_until((self.last_input + IDLE).into()),
                    if !self.waiting.is_empty() => self.encode_waiting(),
                () = watch => {
                    let now = backend.change_mark();
                    // Only animations (a spinner, a blinking caret at a high rate): nothing to list.
                    let relevant = mark.is_none_or(|m| {
                        backend
                            .changes_since(m, hz, None)
                            .is_some_and(|c| !c.events.is_empty() || !c.drawn.is_empty())
                    });
                    mark = now;
                    if relevant {
                        let at = unpack(pointer.load(std::sync::atomic::Ordering::Relaxed));
                        if let Err(e) = self.refresh(at, false).await {
                            tracing::debug!(error = %e, "recording: cannot list the desktop");
                        }
                    }
                }
            }
        };
        // Inputs already read are still steps (a stop asked right after the last key).
        while let Ok(ev) = feed.events.try_recv() {
            if self.full() {
                break;
            }
            self.input(ev).await;
        }
        self.flush_typing(Instant::now());
        self.shot_all().await;
        drop(feed);
        if ended == Ended::Asked && self.full() {
            return Ended::MaxEvents;
        }
        ended
    }

    fn full(&self) -> bool {
        self.shared
            .lock()
            .map(|s| s.events.len() >= self.max_events)
            .unwrap_or(true)
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_millis()).unwrap_or(u64::MAX)
    }

    /// Adds a step that keeps a screenshot of the desktop as it was at `t`; returns its index.
    fn push_shown(&mut self, ev: RecordedEvent, t: Instant) -> Option<usize> {
        let index = self.push(ev)?;
        self.to_shoot.push((index, t));
        Some(index)
    }

    /// Starts capturing the desktop now on a blocking thread (a backend may capture synchronously),
    /// unless the last capture is still under way; the recorder does not wait for it (the step that
    /// needs it does, when its screenshot is encoded).
    fn start_capture(&mut self) {
        if self.limits.record_max_screenshots == 0 || self.screen.is_empty() {
            return;
        }
        if let Some((_, last)) = self.captures.last()
            && last.clone().now_or_never().is_none()
        {
            return;
        }
        let (backend, screen) = (self.backend.clone(), self.screen);
        let handle = tokio::runtime::Handle::current();
        let taken = Instant::now();
        let capturing =
            tokio::task::spawn_blocking(move || handle.block_on(backend.capture(screen)));
        let captured = async move {
            match capturing.await {
                Ok(Ok(cap)) => Some(Arc::new(cap)),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "recording: cannot capture the desktop");
                    None
                }
                Err(_) => None,
            }
        }
        .boxed()
        .shared();
        self.captures.push((taken, captured));
        if self.captures.len() > KEPT {
            // Dropped unless a step waits for it.
            drop(self.captures.remove(0));
        }
    }

    /// Gives the steps added since the last call their capture: the newest begun at or before the
    /// moment each shows (else the oldest kept). It is encoded later, when the person pauses
    /// ([`IDLE`]) or the recording ends — encoding competes for the processor with the applications
    /// the person is using — or at once when [`MAX_WAITING`] steps wait.
    fn shoot(&mut self) {
        for (index, t) in std::mem::take(&mut self.to_shoot) {
            let Some((taken, cap)) = self
                .captures
                .iter()
                .rev()
                .find(|(taken, _)| *taken <= t)
                .or_else(|| self.captures.first())
                .cloned()
            else {
                continue;
            };
            self.waiting.push((index, self.ms(taken), cap));
        }
        if self.waiting.len() >= MAX_WAITING {
            self.encode_waiting();
        }
    }

    /// Encodes the captures waiting, each on a blocking thread, and keeps them within the bounds.
    fn encode_waiting(&mut self) {
        self.encoding.retain(|h| !h.is_finished());
        let max = self.limits.record_max_screenshots as usize;
        let max_bytes = self.limits.record_max_screenshot_bytes;
        for (index, at_ms, cap) in std::mem::take(&mut self.waiting) {
            let Ok(mut s) = self.shared.lock() else {
                return;
            };
            if s.shots.len() + self.encoding.len() >= max || s.shot_bytes >= max_bytes {
                s.shots_left_out += 1;
                continue;
            }
            drop(s);
            let (shared, format) = (self.shared.clone(), self.format);
            self.encoding.push(tokio::spawn(async move {
                let Some(cap) = cap.await else {
                    if let Ok(mut s) = shared.lock() {
                        s.shots_left_out += 1;
                    }
                    return;
                };
                let encoded = tokio::task::spawn_blocking(move || {
                    crate::encode::encode(&cap, format).map(|data| Shot {
                        format,
                        data,
                        width: cap.width,
                        height: cap.height,
                        origin: cap.origin,
                        scale: 1.0,
                    })
                })
                .await;
                let Ok(mut s) = shared.lock() else { return };
                let shot = match encoded {
                    Ok(Ok(shot)) => shot,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "recording: cannot encode a screenshot");
                        s.shots_left_out += 1;
                        return;
                    }
                    Err(_) => return,
                };
                let size = shot.data.len() as u64;
                if s.shots.len() >= max || s.shot_bytes.saturating_add(size) > max_bytes {
                    s.shots_left_out += 1;
                    return;
                }
                let info = ShotInfo {
                    width: shot.width,
                    height: shot.height,
                    origin: [shot.origin.x, shot.origin.y],
                    format: shot.format.name(),
                    bytes: size,
                    at_ms,
                };
                let Some(ev) = s.events.get_mut(index) else {
                    return;
                };
                ev.screenshot = Some(info);
                s.shot_bytes += size;
                s.shots.insert(index, shot);
            }));
        }
    }

    /// Waits for the screenshots still being encoded.
    async fn shot_all(&mut self) {
        self.shoot();
        self.encode_waiting();
        for h in std::mem::take(&mut self.encoding) {
            let _ = h.await;
        }
    }

    /// Adds a step (dropped when the recording is full); returns its index.
    fn push(&self, ev: RecordedEvent) -> Option<usize> {
        let mut s = self.shared.lock().ok()?;
        if s.events.len() >= self.max_events {
            return None;
        }
        s.events.push(ev);
        Some(s.events.len() - 1)
    }

    fn tree_limits(&self) -> TreeLimits {
        TreeLimits {
            max_nodes: self.limits.max_tree_nodes as usize,
            max_depth: self.limits.max_tree_depth,
            deadline: Instant::now() + LIST_TIMEOUT,
            max_value_chars: 0,
            bounds_of: Some(self.limits.control_types.clone()),
        }
    }

    /// Lists `w`'s controls now.
    async fn list(&self, w: &WindowInfo) -> Option<Listed> {
        let taken = Instant::now();
        let tree = match self.backend.control_tree(w, &self.tree_limits()).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(window = %w.title, error = %e, "recording: cannot list the window");
                return None;
            }
        };
        let (controls, paths) = filter_with_paths(&tree, &self.limits.control_types);
        Some(Listed {
            taken,
            done: Instant::now(),
            window: w.clone(),
            controls,
            paths,
        })
    }

    fn keep(&mut self, l: Listed) {
        let kept = self.listed.entry(l.window.handle).or_default();
        kept.push(l);
        if kept.len() > KEPT {
            kept.remove(0);
        }
    }

    /// Lists the windows, and the controls of the active window, of the window under `pointer` and of
    /// every new window (`all`: of every window, bounded); new windows after the start are steps.
    async fn refresh(&mut self, pointer: Point, all: bool) -> Result<(), BackendError> {
        self.start_capture();
        let taken = Instant::now();
        let windows = self.backend.windows().await?;
        let active = self.backend.active_window();
        let under = window_at(&windows, active, pointer).map(|w| w.handle);
        let wanted: Vec<WindowInfo> = windows
            .iter()
            .filter(|w| {
                all || Some(w.handle) == active
                    || Some(w.handle) == under
                    || !self.known.contains(&w.handle)
            })
            .take(MAX_START_WINDOWS)
            .cloned()
            .collect();
        for w in &windows {
            if !self.known.contains(&w.handle) {
                self.known.push(w.handle);
                if !all {
                    let mut ev = RecordedEvent::new(self.ms(taken), "window_opened");
                    ev.window = Some(RecordedWindow::of(w));
                    self.push(ev);
                }
            }
        }
        for w in &wanted {
            if let Some(l) = self.list(w).await {
                self.keep(l);
            }
        }
        self.windows.push((taken, active, windows));
        if self.windows.len() > KEPT {
            self.windows.remove(0);
        }
        Ok(())
    }

    /// The newest window listing begun at or before `t` (the oldest kept when none was).
    fn windows_at(&self, t: Instant) -> Option<&(Instant, Option<u64>, Vec<WindowInfo>)> {
        self.windows
            .iter()
            .rev()
            .find(|(taken, _, _)| *taken <= t)
            .or_else(|| self.windows.first())
    }

    /// The newest listing of window `handle` begun at or before `t` (the oldest kept when none was).
    /// The control at `p` in the window `handle` as listed before `t` (else in its first listing).
    fn listed_at(&self, handle: u64, t: Instant, p: Point) -> Option<(&Listed, usize)> {
        let kept = self.listed.get(&handle)?;
        match before(kept, t, p) {
            Some(found) => Some(found),
            None if kept.iter().all(|l| l.taken > t) => {
                let l = kept.first()?;
                l.at(p).map(|i| (l, i))
            }
            None => None,
        }
    }

    async fn input(&mut self, ev: InputEvent) {
        match ev.input {
            RawInput::Press { at, button } => self.press(ev.at, at, button).await,
            RawInput::Wheel { at, notches } => self.wheel(ev.at, at, notches).await,
            RawInput::Key {
                key,
                ctrl,
                alt,
                shift,
                win,
            } => self.key(ev.at, key, ctrl, alt, shift, win).await,
        }
    }

    /// The window and control at `p` as listed before `t` (`before`), else as listed now (`after`).
    async fn resolve_point(
        &mut self,
        t: Instant,
        p: Point,
    ) -> (
        Option<WindowInfo>,
        Option<(RawNode, ControlEntry)>,
        &'static str,
    ) {
        let window = self
            .windows_at(t)
            .and_then(|(_, active, ws)| window_at(ws, *active, p).cloned());
        if let Some(w) = &window
            && let Some((l, i)) = self.listed_at(w.handle, t, p)
        {
            let found = l.controls.get(i).cloned().zip(l.entry(i));
            return (Some(l.window.clone()), found, "before");
        }
        // A popup (a menu) is listed under its window but lies outside it: any window listed before.
        let mut best: Option<(u64, &Listed, usize)> = None;
        for kept in self.listed.values() {
            if let Some((l, i)) = before(kept, t, p) {
                let r = l.controls[i].rect;
                let area = u64::from(r.width()) * u64::from(r.height());
                if best.is_none_or(|(a, _, _)| area < a) {
                    best = Some((area, l, i));
                }
            }
        }
        if let Some((_, l, i)) = best {
            let found = l.controls.get(i).cloned().zip(l.entry(i));
            return (Some(l.window.clone()), found, "before");
        }
        // Nothing listed before showed that point (a window that came and was clicked at once):
        // list the window under it now.
        let now = match self.backend.windows().await {
            Ok(ws) => window_at(&ws, self.backend.active_window(), p).cloned(),
            Err(_) => None,
        };
        let Some(w) = now.or(window) else {
            return (None, None, "none");
        };
        if let Some(l) = self.list(&w).await {
            let found = l
                .at(p)
                .and_then(|i| l.controls.get(i).cloned().zip(l.entry(i)));
            self.keep(l);
            if found.is_some() {
                return (Some(w), found, "after");
            }
        }
        (Some(w), None, "none")
    }

    async fn press(&mut self, t: Instant, p: Point, button: MouseButton) {
        self.flush_typing(t);
        if let Some(last) = &self.last_click
            && last.button == button
            && t.saturating_duration_since(last.at) <= DOUBLE_CLICK
            && (last.point.x - p.x).abs() <= 4
            && (last.point.y - p.y).abs() <= 4
        {
            let index = last.index;
            if let Ok(mut s) = self.shared.lock()
                && index + 1 == s.events.len()
                && let Some(ev) = s.events.get_mut(index)
                && ev.kind == "click"
                && !ev.double
            {
                ev.double = true;
                drop(s);
                self.last_click = None;
                return;
            }
        }
        let (window, found, resolved) = self.resolve_point(t, p).await;
        let mut ev = RecordedEvent::new(self.ms(t), "click");
        ev.button = Some(button);
        ev.point = Some([p.x, p.y]);
        ev.window = window.as_ref().map(RecordedWindow::of);
        ev.resolved = resolved;
        let (node, entry) = match found {
            Some((n, e)) => (Some(n), Some(e)),
            None => (None, None),
        };
        ev.control = entry.clone();
        if let Some(index) = self.push_shown(ev, t) {
            self.last_click = Some(LastClick {
                at: t,
                point: p,
                button,
                index,
                window: window.map_or(0, |w| w.handle),
                control: node,
                entry,
            });
        }
    }

    async fn wheel(&mut self, t: Instant, p: Point, notches: i32) {
        self.flush_typing(t);
        let (window, found, resolved) = self.resolve_point(t, p).await;
        let entry = found.map(|(_, e)| e);
        let at_ms = self.ms(t);
        if let Ok(mut s) = self.shared.lock()
            && let Some(last) = s.events.last_mut()
            && last.kind == "scroll"
            && last.control == entry
            && at_ms.saturating_sub(last.at_ms) <= SCROLL_JOIN.as_millis() as u64
        {
            last.notches = Some(last.notches.unwrap_or(0) + notches);
            return;
        }
        let mut ev = RecordedEvent::new(at_ms, "scroll");
        ev.point = Some([p.x, p.y]);
        ev.notches = Some(notches);
        ev.window = window.as_ref().map(RecordedWindow::of);
        ev.control = entry;
        ev.resolved = resolved;
        self.push_shown(ev, t);
    }

    async fn key(&mut self, t: Instant, key: Key, ctrl: bool, alt: bool, shift: bool, win: bool) {
        let plain = !ctrl && !alt && !win;
        match key {
            Key::Char(c) if plain => {
                if self.typing.is_none() {
                    let (window, control, resolved) = self.focused().await;
                    self.typing = Some(Typing {
                        at_ms: self.ms(t),
                        window,
                        control,
                        resolved,
                        text: String::new(),
                    });
                }
                if let Some(typing) = &mut self.typing {
                    typing.text.push(c);
                }
                return;
            }
            Key::Named(NamedKey::Backspace) if plain => {
                if let Some(typing) = &mut self.typing
                    && typing.text.pop().is_some()
                {
                    return;
                }
            }
            _ => {}
        }
        self.flush_typing(t);
        let (window, control, resolved) = self.focused().await;
        let mut ev = RecordedEvent::new(self.ms(t), "keys");
        ev.keys = Some(key_text(key, ctrl, alt, shift, win));
        ev.window = window;
        ev.control = control;
        ev.resolved = resolved;
        self.push_shown(ev, t);
    }

    /// Ends the text being typed as a step; `t` is the moment of the input that ended it (its
    /// screenshot shows the field with the text, before that input).
    fn flush_typing(&mut self, t: Instant) {
        let at = t;
        let Some(t) = self.typing.take() else { return };
        if t.text.is_empty() {
            return;
        }
        let mut ev = RecordedEvent::new(t.at_ms, "text");
        ev.text = Some(t.text);
        ev.window = t.window;
        ev.control = t.control;
        ev.resolved = t.resolved;
        self.push_shown(ev, at);
    }

    /// The active window and its control with the keyboard focus (asked live among its listed
    /// editable controls, the one clicked last first), else the control clicked last in it.
    async fn focused(&mut self) -> (Option<RecordedWindow>, Option<ControlEntry>, &'static str) {
        let Some(active) = self.backend.active_window() else {
            return self.clicked_fallback(None);
        };
        if self.listed.get(&active).is_none_or(Vec::is_empty) {
            let w = match self.backend.windows().await {
                Ok(ws) => ws.into_iter().find(|w| w.handle == active),
                Err(_) => None,
            };
            if let Some(w) = w
                && let Some(l) = self.list(&w).await
            {
                self.keep(l);
            }
        }
        let Some(l) = self.listed.get(&active).and_then(|k| k.last()) else {
            return self.clicked_fallback(Some(active));
        };
        let clicked = self
            .last_click
            .as_ref()
            .filter(|c| c.window == active)
            .and_then(|c| c.control.as_ref());
        let mut order: Vec<usize> = l
            .controls
            .iter()
            .enumerate()
            .filter(|(_, c)| EDITABLE.contains(&c.control_type.as_str()) && c.enabled)
            .map(|(i, _)| i)
            .collect();
        if let Some(c) = clicked {
            order.sort_by_key(|&i| l.controls[i].handle != c.handle);
        }
        for &i in order.iter().take(MAX_FOCUS_ASKS) {
            let focused = self
                .backend
                .control_facts(&l.controls[i])
                .await
                .ok()
                .and_then(|f| f.focused);
            if focused == Some(true) {
                return (Some(RecordedWindow::of(&l.window)), l.entry(i), "focus");
            }
        }
        let window = Some(RecordedWindow::of(&l.window));
        match self.last_click.as_ref().filter(|c| c.window == active) {
            Some(c) if c.entry.is_some() => (window, c.entry.clone(), "clicked"),
            _ => (window, None, "none"),
        }
    }

    fn clicked_fallback(
        &self,
        active: Option<u64>,
    ) -> (Option<RecordedWindow>, Option<ControlEntry>, &'static str) {
        let window = active.and_then(|a| {
            self.windows
                .last()
                .and_then(|(_, _, ws)| ws.iter().find(|w| w.handle == a))
                .map(RecordedWindow::of)
        });
        match &self.last_click {
            Some(c) if c.entry.is_some() && active.is_none_or(|a| a == c.window) => {
                (window, c.entry.clone(), "clicked")
            }
            _ => (window, None, "none"),
        }
    }
}

/// The window under `p`: the active one when it holds `p`, else the newest listed that does.
fn window_at(windows: &[WindowInfo], active: Option<u64>, p: Point) -> Option<&WindowInfo> {
    windows
        .iter()
        .find(|w| Some(w.handle) == active && w.rect.contains(p))
        .or_else(|| windows.iter().rev().find(|w| w.rect.contains(p)))
}

fn unpack(v: u64) -> Point {
    Point {
        x: (v >> 32) as u32 as i32,
        y: v as u32 as i32,
    }
}

/// A key with its modifiers in `keyboard_input`'s key syntax: `{ENTER}`, `^s`, `+{TAB}`, `%{F4}`,
/// `{LWIN}r`. Shift is part of a character (`S`), and written only before a named key.
pub fn key_text(key: Key, ctrl: bool, alt: bool, shift: bool, win: bool) -> String {
    let mut s = String::new();
    if win {
        s.push_str("{LWIN}");
    }
    if ctrl {
        s.push('^');
    }
    if alt {
        s.push('%');
    }
    match key {
        Key::Char(c) => match c {
            '+' | '^' | '%' | '~' | '(' | ')' | '{' | '}' => {
                s.push('{');
                s.push(c);
                s.push('}');
            }
            '\n' => s.push_str("{ENTER}"),
            '\t' => s.push_str("{TAB}"),
            c => s.push(c),
        },
        Key::Named(n) => {
            if shift {
                s.push('+');
            }
            s.push('{');
            s.push_str(&named(n));
            s.push('}');
        }
    }
    s
}

/// A named key as the key syntax spells it.
fn named(n: NamedKey) -> String {
    use NamedKey::*;
    match n {
        Enter => "ENTER",
        Tab => "TAB",
        Escape => "ESC",
        Backspace => "BACKSPACE",
        Delete => "DELETE",
        Insert => "INSERT",
        Home => "HOME",
        End => "END",
        PageUp => "PGUP",
        PageDown => "PGDN",
        Left => "LEFT",
        Right => "RIGHT",
        Up => "UP",
        Down => "DOWN",
        Space => "SPACE",
        CapsLock => "CAPSLOCK",
        NumLock => "NUMLOCK",
        ScrollLock => "SCROLLLOCK",
        PrintScreen => "PRTSC",
        Pause => "BREAK",
        Apps => "APPS",
        Shift => "SHIFT",
        Control => "CONTROL",
        Alt => "ALT",
        Win => "LWIN",
        F(k) => return format!("F{k}"),
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ControlHandle;
    use crate::geometry::Rect;
    use crate::keys::parse_keys;

    #[test]
    fn recorded_keys_parse_back_to_the_same_keys() {
        let cases = [
            (Key::Named(NamedKey::Enter), false, false, false, "{ENTER}"),
            (Key::Char('s'), true, false, false, "^s"),
            (Key::Named(NamedKey::Tab), false, false, true, "+{TAB}"),
            (Key::Named(NamedKey::F(4)), false, true, false, "%{F4}"),
            (Key::Char('+'), true, false, false, "^{+}"),
        ];
        for (key, ctrl, alt, shift, want) in cases {
            let text = key_text(key, ctrl, alt, shift, false);
            assert_eq!(text, want);
            assert!(parse_keys(&text, 100).is_ok(), "{text}");
        }
        assert_eq!(
            key_text(Key::Char('r'), false, false, false, true),
            "{LWIN}r"
        );
        assert!(parse_keys("{LWIN}r", 100).is_ok());
    }

    fn window(handle: u64, rect: Rect) -> WindowInfo {
        WindowInfo {
            handle,
            title: format!("w{handle}"),
            process_name: String::new(),
            pid: None,
            rect,
            class_name: String::new(),
        }
    }

    #[test]
    fn the_window_under_a_point_is_the_active_one_else_the_newest() {
        let big = window(1, Rect::from_xywh(0, 0, 500, 500));
        let dialog = window(2, Rect::from_xywh(100, 100, 100, 100));
        let ws = [big, dialog];
        let p = Point { x: 150, y: 150 };
        assert_eq!(window_at(&ws, None, p).map(|w| w.handle), Some(2));
        assert_eq!(window_at(&ws, Some(1), p).map(|w| w.handle), Some(1));
        assert_eq!(
            window_at(&ws, Some(2), Point { x: 10, y: 10 }).map(|w| w.handle),
            Some(1)
        );
        assert!(window_at(&ws, None, Point { x: 900, y: 10 }).is_none());
        assert_eq!(
            unpack(InputFeed::pack(Point { x: -5, y: 7 })),
            Point { x: -5, y: 7 }
        );
    }

    fn listing(taken: Instant, done: Instant, ok: Option<Rect>) -> Listed {
        let controls = ok
            .into_iter()
            .map(|rect| RawNode {
                handle: ControlHandle("ok".into()),
                parent: None,
                depth: 1,
                name: "OK".into(),
                control_type: "Button".into(),
                rect,
                enabled: true,
                visible: true,
                automation_id: String::new(),
                value: String::new(),
            })
            .collect();
        Listed {
            taken,
            done,
            window: window(1, Rect::from_xywh(0, 0, 500, 500)),
            controls,
            paths: Vec::new(),
        }
    }

    /// The click that closes a dialog while the typing before it is being listed: that listing, begun
    /// before the press and ended after it with the window gone, gives way to the one before it; a
    /// listing finished before the press is believed, found or not.
    #[test]
    fn a_press_during_a_listing_that_lost_its_window_uses_the_listing_before() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ok = Some(Rect::from_xywh(100, 100, 80, 30));
        let p = Point { x: 120, y: 110 };
        let press = at(50);
        let in_flight = [listing(at(0), at(10), ok), listing(at(40), at(60), None)];
        let (l, i) = before(&in_flight, press, p).expect("the listing before");
        assert_eq!((l.taken, l.controls[i].name.as_str()), (at(0), "OK"));
        let finished = [listing(at(0), at(10), ok), listing(at(20), at(30), None)];
        assert!(
            before(&finished, press, p).is_none(),
            "a finished listing showed nothing there"
        );
        assert!(before(&in_flight, at(5), Point { x: 400, y: 400 }).is_none());
    }
}
