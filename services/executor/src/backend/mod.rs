//! The desktop behind one object-safe async trait, chosen at start-up: AT-SPI2 + X11 on Linux
//! ([`linux`]), UI Automation on Windows ([`windows`]). Everything above this trait (tool parameters,
//! control ids, filtering, encoding, batching) is shared and platform-independent.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(windows)]
pub mod windows;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::geometry::{Point, Rect};
use crate::keys::{Key, KeyStroke};

/// What went wrong inside a backend. Messages are safe to show to the agent.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The action was tried and did not work; the text says why.
    #[error("{0}")]
    Failed(String),
    /// The control or window no longer exists.
    #[error("the {0} no longer exists")]
    Gone(&'static str),
    /// This backend cannot do that.
    #[error("not supported by this backend: {0}")]
    Unsupported(&'static str),
    /// The desktop itself (display, accessibility bus, COM) is not reachable.
    #[error("desktop unavailable: {0}")]
    Unavailable(String),
    /// The window's program exposes no accessibility tree (Tk on Linux, a program whose bridge is off):
    /// it has no controls to list, only pixels (the agent grounds it visually).
    #[error("{0}")]
    Inaccessible(String),
}

/// Result of a backend call.
pub type BackendResult<T> = Result<T, BackendError>;

/// A top-level window, as the host agent sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowInfo {
    /// The native handle (X11 window id, HWND).
    pub handle: u64,
    /// The window title.
    pub title: String,
    /// The owning program's name (e.g. "mousepad", "notepad.exe"), empty when unknown.
    pub process_name: String,
    /// The owning process, when known.
    pub pid: Option<u32>,
    /// The frame in screen pixels.
    pub rect: Rect,
    /// The window class, empty when unknown.
    pub class_name: String,
}

/// One monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct ScreenInfo {
    /// Area in screen pixels.
    pub rect: Rect,
    /// Device pixels per logical pixel.
    pub scale: f64,
    /// The primary monitor.
    pub primary: bool,
}

/// Captured pixels: tightly packed RGB8 rows.
#[derive(Debug, Clone)]
pub struct Capture {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: Vec<u8>,
    /// Screen position of the top-left pixel.
    pub origin: Point,
}

/// A backend-specific reference to a control: it stays valid across later tree walks until the
/// control is gone (an AT-SPI object path; a stable UI Automation handle, see [`crate::handles`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ControlHandle(pub String);

/// One control of a window's accessibility tree, in pre-order.
#[derive(Debug, Clone, PartialEq)]
pub struct RawNode {
    /// How the backend finds the control again.
    pub handle: ControlHandle,
    /// Index of the parent in the same list (`None` for the window itself).
    pub parent: Option<usize>,
    /// Depth below the window (the window is 0).
    pub depth: u32,
    /// The accessible name.
    pub name: String,
    /// The UI Automation control type name ("Button", "Edit", ...), which Linux roles are mapped onto.
    pub control_type: String,
    /// Bounds in screen pixels.
    pub rect: Rect,
    /// Accepts input.
    pub enabled: bool,
    /// On screen (not hidden, not scrolled out, not offscreen).
    pub visible: bool,
    /// Automation id / accessible id, empty when none.
    pub automation_id: String,
    /// The current text of an editable control (at most [`TreeLimits::max_value_chars`] characters),
    /// empty for other controls and for password fields.
    pub value: String,
}

/// How far a tree walk may go.
#[derive(Debug, Clone)]
pub struct TreeLimits {
    /// Stop after this many nodes (and report truncation).
    pub max_nodes: usize,
    /// Do not descend deeper than this (the window is depth 0).
    pub max_depth: u32,
    /// Stop when this instant passes (and report truncation).
    pub deadline: Instant,
    /// Longest current text read for an editable control, in characters (0: none).
    pub max_value_chars: usize,
    /// Read the bounds only of visible nodes of these control types (`None`: of every node). A listing
    /// that keeps some types only skips the others' bounds, one accessibility call each on Linux;
    /// nodes whose bounds are not read have an empty `rect`. Backends that get bounds at no extra cost
    /// may fill them in anyway.
    pub bounds_of: Option<Vec<String>>,
}

/// A flattened tree walk.
#[derive(Debug, Clone, Default)]
pub struct RawTree {
    /// Nodes in pre-order; index 0 is the window when present.
    pub nodes: Vec<RawNode>,
    /// True when a limit cut the walk short.
    pub truncated: bool,
}

/// Live state of one control, read just before acting on it.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlState {
    /// Accepts input.
    pub enabled: bool,
    /// On screen.
    pub visible: bool,
    /// Current bounds in screen pixels.
    pub rect: Rect,
}

/// What a control shows and its states, read before and after an action to see what the action
/// changed (see [`crate::effect`]). `None` where the control has no such thing or the backend cannot
/// read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControlFacts {
    /// Its text or value (a bounded prefix; `None` for controls without one and for password fields).
    pub value: Option<String>,
    /// Checked, pressed or toggled on.
    pub checked: Option<bool>,
    /// Selected.
    pub selected: Option<bool>,
    /// Expanded (a combo box's list, a tree node, a menu).
    pub expanded: Option<bool>,
    /// Has the keyboard focus.
    pub focused: Option<bool>,
    /// Accepts input.
    pub enabled: bool,
}

/// An accessibility event an application sent after a change mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppEvent {
    /// Which application sent it (a bus name on Linux).
    pub app: String,
    /// What kind of change it announces, e.g. "text-changed", "state-changed", "window-create".
    pub kind: String,
}

/// What the desktop reported after a change mark: the applications' accessibility events and where
/// the screen was drawn (animations left out).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    /// Accessibility events (of the window's application when one was named), oldest first.
    pub events: Vec<AppEvent>,
    /// Rectangles drawn, in screen pixels, animated places left out (at most a few dozen).
    pub drawn: Vec<Rect>,
}

/// What an action does with a control (for the live check before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// A plain left click, through the control's click-like action where it has one.
    Click,
    /// Setting or appending text through the accessibility API.
    Text,
    /// Pointer or keyboard input at the control.
    Pointer,
}

/// Bounds of the wait for a settled screen (the settle protocol of `executor.proto`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettleOptions {
    /// Longest wait in all.
    pub timeout: Duration,
    /// How long the screen must stay unchanged to count as settled.
    pub quiet: Duration,
    /// How long after the action a first change may take before "nothing changed" is concluded.
    pub first_change: Duration,
    /// Drawing repeated in one place at least this often (per second), steadily, is an animation and
    /// not waited for (0: every drawing is waited for).
    pub animation_hz: f64,
    /// Wait for the whole screen even when a window is selected (by default only the selected
    /// window, its application's windows and the windows and popups the action opened count).
    pub whole_screen: bool,
}

/// How a wait for a settled screen ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Changed, then quiet.
    Settled,
    /// Nothing changed within the first-change time.
    NoChange,
    /// Still changing at the timeout.
    Timeout,
    /// The backend cannot see changes.
    Unsupported,
}

/// A finished wait for a settled screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleReport {
    /// How it ended.
    pub outcome: SettleOutcome,
    /// Time spent waiting.
    pub waited: Duration,
    /// Drawings seen after the action (animations included).
    pub draws: u32,
    /// Accessibility events seen after the action.
    pub events: u32,
    /// Places recognised as animations and not waited for.
    pub animations: u32,
    /// Drawings and accessibility events after the action outside the observed window (other
    /// windows, other applications), not waited for.
    pub ignored: u32,
}

impl SettleReport {
    /// The report of a backend that cannot see changes.
    pub fn unsupported() -> Self {
        Self {
            outcome: SettleOutcome::Unsupported,
            waited: Duration::ZERO,
            draws: 0,
            events: 0,
            animations: 0,
            ignored: 0,
        }
    }
}

/// One input a person made on the desktop, as an input capture reports it
/// ([`Backend::capture_input`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawInput {
    /// A mouse button went down at a screen point (wheel notches are [`RawInput::Wheel`]).
    Press {
        /// Where, in screen pixels.
        at: Point,
        /// Which button.
        button: MouseButton,
    },
    /// The wheel turned one notch at a screen point (positive: up, away from the user).
    Wheel {
        /// Where, in screen pixels.
        at: Point,
        /// +1 or -1.
        notches: i32,
    },
    /// A key went down (modifier keys themselves are not reported, only held).
    Key {
        /// The key: the character it typed (shift applied), or its name.
        key: Key,
        /// Control held.
        ctrl: bool,
        /// Alt held.
        alt: bool,
        /// Shift held (already applied to a character).
        shift: bool,
        /// The Windows / Super key held.
        win: bool,
    },
}

/// An input with the moment the capture saw it (as soon as the desktop reported it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputEvent {
    /// When it was seen.
    pub at: Instant,
    /// What it was.
    pub input: RawInput,
}

/// A running capture of the person's input ([`Backend::capture_input`]): its events in order, and where
/// the pointer is now (what the recorder lists the window under). Dropping it stops the capture.
pub struct InputFeed {
    /// The events, oldest first; ends when the capture stops (the desktop went away).
    pub events: tokio::sync::mpsc::Receiver<InputEvent>,
    /// The pointer's last known position, `x << 32 | y` as `i32`s (see [`InputFeed::pointer`]).
    pub pointer: Arc<std::sync::atomic::AtomicU64>,
    /// Stops the capture when dropped.
    pub guard: Box<dyn Send + Sync>,
}

impl InputFeed {
    /// Packs a point for [`InputFeed::pointer`].
    pub fn pack(p: Point) -> u64 {
        (u64::from(p.x as u32) << 32) | u64::from(p.y as u32)
    }

    /// The pointer's last known position.
    pub fn pointer(&self) -> Point {
        let v = self.pointer.load(std::sync::atomic::Ordering::Relaxed);
        Point {
            x: (v >> 32) as u32 as i32,
            y: v as u32 as i32,
        }
    }
}

impl std::fmt::Debug for InputFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputFeed").finish_non_exhaustive()
    }
}

/// A mouse button.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MouseButton {
    /// The primary button.
    Left,
    /// The secondary button.
    Right,
    /// The wheel button.
    Middle,
}

/// The desktop. Implementations are shared as `Arc<dyn Backend>`; the executor serialises batches, so
/// methods are never called concurrently for one desktop, but they must be `Send + Sync`.
///
/// Contracts:
/// - observation methods (`screens`, `capture`, `windows`, `control_tree`, `control_state`, `read_text`)
///   change nothing on the desktop and may be retried;
/// - action methods return once the input was delivered (not necessarily processed by the application);
/// - every method returns within a bounded time or is cancelled by the caller's deadline (dropping the
///   future must leave the backend usable);
/// - handles from `control_tree` stay usable across later `control_tree` calls until the control is
///   gone; a destroyed control yields [`BackendError::Gone`].
#[async_trait]
pub trait Backend: Send + Sync {
    /// "atspi" or "uia".
    fn name(&self) -> &'static str;
    /// "linux" or "windows".
    fn platform(&self) -> &'static str;
    /// Monitors, primary first.
    async fn screens(&self) -> BackendResult<Vec<ScreenInfo>>;
    /// Pixels of `region` (screen pixels; clipped to the desktop).
    async fn capture(&self, region: Rect) -> BackendResult<Capture>;
    /// Visible top-level application windows, in the window manager's stacking or list order.
    async fn windows(&self) -> BackendResult<Vec<WindowInfo>>;
    /// Raises and focuses `window`; returns its refreshed info.
    async fn activate(&self, window: &WindowInfo) -> BackendResult<WindowInfo>;
    /// Asks `window` to close (as its close button would); does not kill the process.
    async fn close(&self, window: &WindowInfo) -> BackendResult<()>;
    /// The controls of `window`, pre-order, within `limits`.
    async fn control_tree(
        &self,
        window: &WindowInfo,
        limits: &TreeLimits,
    ) -> BackendResult<RawTree>;
    /// Current enabled/visible/bounds of a control.
    async fn control_state(&self, control: &RawNode) -> BackendResult<ControlState>;
    /// The live check before an action of `kind` on `control`. For a click or a text set through the
    /// accessibility API a backend may skip reading the bounds live and keep the listing's (it reads
    /// them itself if it falls back to the pointer). The default reads everything
    /// ([`control_state`](Self::control_state)).
    async fn action_state(
        &self,
        control: &RawNode,
        kind: ActionKind,
    ) -> BackendResult<ControlState> {
        let _ = kind;
        self.control_state(control).await
    }
    /// Clicks a control: through its accessibility action for a plain left click where it has one,
    /// else with synthesized mouse input at its centre. Returns how it clicked ("action:<name>" or
    /// "mouse").
    async fn click_control(
        &self,
        control: &RawNode,
        button: MouseButton,
        double: bool,
    ) -> BackendResult<String>;
    /// Replaces (`clear` true) or appends to the text of an editable control, and says how the text
    /// got in ("set_text" on Linux; "pattern:Value", "pattern:Text+keyboard" or "keyboard (...)" on
    /// Windows), so a result can say when the keyboard had to stand in for an accessibility interface.
    async fn enter_text(&self, control: &RawNode, text: &str, clear: bool)
    -> BackendResult<String>;
    /// The text a control shows (its value/text content, else its name).
    async fn read_text(&self, control: &RawNode) -> BackendResult<String>;
    /// Gives a control the keyboard focus.
    async fn focus_control(&self, control: &RawNode) -> BackendResult<()>;
    /// Clicks at a screen point.
    async fn click_at(&self, point: Point, button: MouseButton, double: bool) -> BackendResult<()>;
    /// Presses at `from`, moves to `to`, releases.
    async fn drag(&self, from: Point, to: Point, button: MouseButton) -> BackendResult<()>;
    /// Turns the wheel at a point: positive `notches` scroll up (away from the user), negative down.
    async fn wheel(&self, at: Point, notches: i32) -> BackendResult<()>;
    /// Replays key strokes to the focused window.
    async fn send_keys(&self, keys: &[KeyStroke]) -> BackendResult<()>;
    /// Scrolls `control` into view inside its scrollable ancestors and returns its bounds afterwards;
    /// `None` when this backend cannot (AT-SPI `Component.ScrollTo` on Linux).
    async fn scroll_into_view(&self, _control: &RawNode) -> BackendResult<Option<Rect>> {
        Ok(None)
    }
    /// Where the pointer acts on `control`: its centre, when a screen shows it. A centre off every
    /// screen (its window partly off the desktop) is first scrolled into view where the backend can; a
    /// centre still off every screen is an error naming the control — the pointer would land elsewhere
    /// (X clamps it to the screen's edge) and the click would report a success it did not have.
    async fn pointer_target(&self, control: &RawNode) -> BackendResult<Point> {
        let screens = self.screens().await?;
        let shown = |r: &Rect| screens.iter().any(|s| s.rect.contains(r.center()));
        if shown(&control.rect) {
            return Ok(control.rect.center());
        }
        if let Some(r) = self.scroll_into_view(control).await?
            && shown(&r)
        {
            return Ok(r.center());
        }
        let c = control.rect.center();
        Err(BackendError::Failed(format!(
            "{} '{}' is off the screen: its centre ({}, {}) is outside every screen ({}) and scrolling \
             did not bring it into view; move its window onto the screen",
            control.control_type,
            control.name,
            c.x,
            c.y,
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
        )))
    }
    /// Scrolls a control by `notches` wheel notches (positive up): through its accessibility scroll
    /// interface where the backend has one, else the wheel at its centre. Returns how it scrolled
    /// ("pattern:Scroll" or "wheel").
    async fn scroll_control(&self, control: &RawNode, notches: i32) -> BackendResult<String> {
        self.wheel(control.rect.center(), notches).await?;
        Ok("wheel".into())
    }
    /// The window the window manager reports as active, when it reports one.
    fn active_window(&self) -> Option<u64> {
        None
    }
    /// The desktop's screen-change counter, read just before an action; `None` when this backend
    /// cannot see changes (then observations report [`SettleOutcome::Unsupported`]).
    fn change_mark(&self) -> Option<u64> {
        None
    }
    /// The default buttons (those Enter presses in a dialog) the application of `window` shows, each
    /// with its name and whether it accepts input now; empty when there are none or the backend
    /// cannot tell.
    async fn default_buttons(&self, window: &WindowInfo) -> BackendResult<Vec<(String, bool)>> {
        let _ = window;
        Ok(Vec::new())
    }
    /// Waits until the desktop shows activity after `mark` (a drawing, an accessibility event) or
    /// `until` passes; true when it did. A backend that cannot see changes returns false at once (the
    /// caller then reads what it watches at its own pace).
    async fn activity_after(&self, mark: u64, until: Instant) -> bool {
        let _ = (mark, until);
        false
    }
    /// The control's text and states now, to compare before and after an action. The default reads
    /// what every backend has: enabled (from [`control_state`](Self::control_state)) and, for editable
    /// controls, the text ([`read_text`](Self::read_text)).
    async fn control_facts(&self, control: &RawNode) -> BackendResult<ControlFacts> {
        let state = self.control_state(control).await?;
        let value = if matches!(
            control.control_type.as_str(),
            "Edit" | "Document" | "ComboBox" | "Spinner"
        ) {
            Some(self.read_text(control).await?)
        } else {
            None
        };
        Ok(ControlFacts {
            value,
            enabled: state.enabled,
            ..ControlFacts::default()
        })
    }
    /// The top-level windows as (handle, title), cheaper than [`windows`](Self::windows) where the
    /// backend can skip the rest; what the effect check compares before and after an action.
    async fn window_set(&self) -> BackendResult<Vec<(u64, String)>> {
        Ok(self
            .windows()
            .await?
            .into_iter()
            .map(|w| (w.handle, w.title))
            .collect())
    }
    /// What the desktop reported after `mark`: accessibility events (of `window`'s application when
    /// given and known) and drawn rectangles outside animations (recognised at `animation_hz`);
    /// `None` when this backend cannot see changes.
    fn changes_since(
        &self,
        mark: u64,
        animation_hz: f64,
        window: Option<&WindowInfo>,
    ) -> Option<Changes> {
        let _ = (mark, animation_hz, window);
        None
    }
    /// Waits until the screen changed after `mark` (read at `since`) and then stayed unchanged, within
    /// `opts`; never a fixed sleep. With `window` (the selected one) and without
    /// [`SettleOptions::whole_screen`], only what concerns that window counts: drawing on it, on its
    /// application's other windows and on windows the action opened, and its application's
    /// accessibility events.
    async fn settle(
        &self,
        mark: u64,
        since: Instant,
        opts: &SettleOptions,
        window: Option<&WindowInfo>,
    ) -> SettleReport {
        let _ = (mark, since, opts, window);
        SettleReport::unsupported()
    }
    /// Starts capturing what a person does with the mouse and keyboard (`record_input`): button
    /// presses, wheel notches and key presses from every program, as the desktop delivers them (X
    /// RECORD on Linux, low-level hooks on Windows), until the feed is dropped. Only observes: nothing
    /// is held back from the applications.
    async fn capture_input(&self) -> BackendResult<InputFeed> {
        Err(BackendError::Unsupported("recording input"))
    }
}

/// Limits of the Windows backend (the Linux one has no use for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowsOptions {
    /// Most control handles kept (see [`crate::handles`]).
    pub max_control_handles: usize,
    /// How long activation waits to see a window become the foreground one.
    pub foreground_wait: Duration,
    /// How long a native control may take to answer WM_GETTEXT.
    pub native_text_timeout: Duration,
    /// Longest native control text read, in characters.
    pub max_native_text_chars: usize,
}

/// Builds the backend for this platform.
pub async fn platform_backend(windows_opts: WindowsOptions) -> BackendResult<Arc<dyn Backend>> {
    #[cfg(target_os = "linux")]
    {
        let _ = windows_opts;
        Ok(Arc::new(linux::LinuxBackend::connect().await?))
    }
    #[cfg(windows)]
    {
        Ok(Arc::new(windows::UiaBackend::start(windows_opts)?))
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = windows_opts;
        Err(BackendError::Unsupported(
            "this operating system has no backend",
        ))
    }
}

/// A control's text as listed: at most `max` characters, and a trailing `…` when there was more (so a
/// reader knows the control says more than the listing shows).
pub(crate) fn listed_value(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listed_value_says_when_it_was_cut() {
        assert_eq!(super::listed_value("abc", 3), "abc");
        assert_eq!(super::listed_value("abcd", 3), "abc…");
        assert_eq!(super::listed_value("éèêë", 2), "éè…");
        assert_eq!(super::listed_value("", 0), "");
    }
}
