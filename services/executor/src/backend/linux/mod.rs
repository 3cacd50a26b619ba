//! The Linux backend: AT-SPI2 for the accessibility tree and semantic actions ([`atspi`]), X11 for
//! screens, screenshots, windows and synthesized input ([`x11`]).

pub mod activity;
pub mod atspi;
pub mod calls;
pub mod damage;
pub mod events;
mod front;
mod order;
pub mod record;
pub mod roles;
pub mod walk;
pub mod x11;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::Instrument as _;

use crate::backend::{
    ActionKind, AppEvent, Backend, BackendError, BackendResult, Capture, Changes, ControlFacts,
    ControlState, InputFeed, MouseButton, RawNode, RawTree, ScreenInfo, SettleOptions,
    SettleReport, TreeLimits, WindowInfo,
};
use crate::geometry::{Point, Rect};
use crate::keys::KeyStroke;

/// How long activation may take before the window manager is considered to have refused it.
const ACTIVATE_TIMEOUT: Duration = Duration::from_secs(2);

/// AT-SPI2 + X11.
pub struct LinuxBackend {
    x: x11::X11,
    a11y: atspi::Atspi,
    /// Drawing and accessibility events (the settle protocol's log).
    activity: Arc<activity::Activity>,
    /// The drawing watcher, when the X server reports drawing (without it nothing settles).
    damage: Option<damage::Damage>,
    /// The display connected to (`None`: `DISPLAY`), for the input recorder's own connections.
    display: Option<String>,
}

impl LinuxBackend {
    /// Connects to the process's `DISPLAY` and session bus.
    pub async fn connect() -> BackendResult<Self> {
        Self::connect_to(None, None).await
    }

    /// Connects to a given display and session bus address (tests run private desktops).
    pub async fn connect_to(
        display: Option<&str>,
        session_bus: Option<&str>,
    ) -> BackendResult<Self> {
        let x = x11::X11::connect(display)?;
        let a11y = atspi::Atspi::connect(session_bus).await?;
        let activity = Arc::new(activity::Activity::default());
        let damage = damage::Damage::start(display, activity.clone());
        if damage.is_none() {
            tracing::warn!(
                "the X server reports no screen changes (no DAMAGE extension); observations will not wait for a settled screen"
            );
        }
        if let Err(e) = events::listen(a11y.connection(), activity.clone()).await {
            tracing::warn!(error = %e,
                "cannot listen to accessibility events; the settle wait relies on drawing alone");
        }
        Ok(Self {
            x,
            a11y,
            activity,
            damage,
            display: display.map(str::to_owned),
        })
    }

    /// What a settle wait for `window` watches: the frames of its application's windows where they
    /// are now (where it was when selected if it is no longer listed) and its application's
    /// accessibility events.
    async fn scope_of(&self, window: &WindowInfo) -> activity::Scope {
        let listed = self.x.windows().unwrap_or_default();
        let mut rects: Vec<Rect> = listed
            .iter()
            .filter(|o| o.handle == window.handle || (window.pid.is_some() && o.pid == window.pid))
            .map(|o| self.x.frame_rect(o))
            .collect();
        if !listed.iter().any(|o| o.handle == window.handle) {
            rects.push(window.rect);
        }
        let area = |r: Rect| -> activity::Area {
            let clamp16 =
                |v: i32| i16::try_from(v.clamp(i16::MIN.into(), i16::MAX.into())).unwrap_or(0);
            (
                clamp16(r.left),
                clamp16(r.top),
                u16::try_from(r.width()).unwrap_or(u16::MAX),
                u16::try_from(r.height()).unwrap_or(u16::MAX),
            )
        };
        // Known once the window's controls were listed; asked of the registry otherwise. An
        // application without accessibility: every application's events count.
        let app = match window.pid {
            Some(pid) => match self.a11y.app_of_pid(pid) {
                Some(app) => Some(app),
                None => self.a11y.app_for_pid(pid).await.ok(),
            },
            None => None,
        };
        activity::Scope {
            areas: rects
                .into_iter()
                .filter(|r| !r.is_empty())
                .map(area)
                .collect(),
            app,
        }
    }

    /// The AT-SPI side (tests observe state changes through it).
    pub fn a11y(&self) -> &atspi::Atspi {
        &self.a11y
    }
}

/// Menu items and list or tree rows are clicked with the pointer, as a person does. GTK runs a menu
/// item's activation (often a modal `gtk_dialog_run`, e.g. Save As) inside the `DoAction` call's D-Bus
/// dispatch, and until that dialog closes the application answers nothing more on that connection and
/// freezes at its next key event; a row's click-like action is "activate" (a double click: zenity's list
/// returns at once, with nothing selected). Pointer events are dispatched from the main loop and select
/// a row as a click does. A text field's only action is "activate", which is Enter: a click through it
/// confirmed zenity's entry dialog with the field empty, where a person's click puts the caret there.
fn pointer_first(control: &RawNode) -> bool {
    matches!(
        control.control_type.as_str(),
        "MenuItem" | "ListItem" | "TreeItem" | "Edit"
    ) && !control.rect.is_empty()
}

fn xbutton(b: MouseButton) -> u8 {
    match b {
        MouseButton::Left => 1,
        MouseButton::Middle => 2,
        MouseButton::Right => 3,
    }
}

#[async_trait]
impl Backend for LinuxBackend {
    fn name(&self) -> &'static str {
        "atspi"
    }

    fn platform(&self) -> &'static str {
        "linux"
    }

    async fn screens(&self) -> BackendResult<Vec<ScreenInfo>> {
        self.x.screens()
    }

    async fn capture(&self, region: Rect) -> BackendResult<Capture> {
        self.x.capture(region)
    }

    async fn windows(&self) -> BackendResult<Vec<WindowInfo>> {
        self.x.windows()
    }

    async fn activate(&self, window: &WindowInfo) -> BackendResult<WindowInfo> {
        let id = u32::try_from(window.handle).map_err(|_| BackendError::Gone("window"))?;
        self.x.request_activate(id)?;
        let until = Instant::now() + ACTIVATE_TIMEOUT;
        // The window manager acts asynchronously: poll the EWMH property until it reports the window.
        while self.x.active_window() != Some(id) {
            if Instant::now() > until {
                return Err(BackendError::Failed(format!(
                    "the window manager did not activate '{}'",
                    window.title
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.x
            .windows()?
            .into_iter()
            .find(|w| w.handle == window.handle)
            .ok_or(BackendError::Gone("window"))
    }

    async fn close(&self, window: &WindowInfo) -> BackendResult<()> {
        let id = u32::try_from(window.handle).map_err(|_| BackendError::Gone("window"))?;
        self.x.request_close(id)
    }

    async fn control_tree(
        &self,
        window: &WindowInfo,
        limits: &TreeLimits,
    ) -> BackendResult<RawTree> {
        if window.pid.is_none() {
            // No _NET_WM_PID: no way to find its accessible application; its pixels are all there is.
            return Ok(RawTree::default());
        }
        match self.a11y.tree(window, limits).await {
            // A program without an accessibility bridge (Tk): a window with no controls to list, which
            // the agent grounds visually; acting on its controls still fails with the cause.
            Err(BackendError::Inaccessible(why)) => {
                tracing::debug!(window = %window.title, %why, "window without accessibility: no controls");
                Ok(RawTree::default())
            }
            other => other,
        }
    }

    async fn control_state(&self, control: &RawNode) -> BackendResult<ControlState> {
        self.a11y.state(&control.handle).await
    }

    async fn action_state(
        &self,
        control: &RawNode,
        kind: ActionKind,
    ) -> BackendResult<ControlState> {
        let keep = !control.rect.is_empty();
        match kind {
            ActionKind::Click if keep && !pointer_first(control) => {
                self.a11y
                    .state_keeping_rect(&control.handle, control.rect, true)
                    .await
            }
            ActionKind::Text if keep => {
                self.a11y
                    .state_keeping_rect(&control.handle, control.rect, false)
                    .await
            }
            _ => self.a11y.state(&control.handle).await,
        }
    }

    async fn click_control(
        &self,
        control: &RawNode,
        button: MouseButton,
        double: bool,
    ) -> BackendResult<String> {
        let semantic = button == MouseButton::Left && !double && !pointer_first(control);
        let mut rect = control.rect;
        if semantic {
            if let Some(method) = self.a11y.do_click_action(&control.handle).await? {
                return Ok(method);
            }
            // No click action: the pointer, at the bounds read now (the check before kept the listing's).
            rect = self.a11y.bounds(&control.handle).await?.unwrap_or(rect);
        }
        let at = self
            .pointer_target(&RawNode {
                rect,
                ..control.clone()
            })
            .await?;
        self.click_at(at, button, double).await?;
        Ok("mouse".to_owned())
    }

    async fn enter_text(
        &self,
        control: &RawNode,
        text: &str,
        clear: bool,
    ) -> BackendResult<String> {
        self.a11y.set_text(&control.handle, text, clear).await?;
        Ok("set_text".to_owned())
    }

    async fn read_text(&self, control: &RawNode) -> BackendResult<String> {
        self.a11y.read_text(&control.handle, &control.name).await
    }

    async fn focus_control(&self, control: &RawNode) -> BackendResult<()> {
        if !self.a11y.grab_focus(&control.handle).await? {
            let at = self.pointer_target(control).await?;
            self.click_at(at, MouseButton::Left, false).await?;
        }
        Ok(())
    }

    async fn scroll_into_view(&self, control: &RawNode) -> BackendResult<Option<Rect>> {
        let span = tracing::info_span!("scroll_into_view", control = %control.name);
        self.a11y
            .scroll_into_view(&control.handle)
            .instrument(span)
            .await
    }

    async fn click_at(&self, point: Point, button: MouseButton, double: bool) -> BackendResult<()> {
        self.x.move_to(point)?;
        for _ in 0..if double { 2 } else { 1 } {
            self.x.button(xbutton(button), true)?;
            self.x.button(xbutton(button), false)?;
        }
        self.x.sync()
    }

    async fn drag(&self, from: Point, to: Point, button: MouseButton) -> BackendResult<()> {
        self.x.move_to(from)?;
        self.x.button(xbutton(button), true)?;
        // Intermediate motion so toolkits recognise a drag rather than a jump.
        for i in 1..=8 {
            let p = Point {
                x: from.x + (to.x - from.x) * i / 8,
                y: from.y + (to.y - from.y) * i / 8,
            };
            self.x.move_to(p)?;
        }
        self.x.button(xbutton(button), false)?;
        self.x.sync()
    }

    async fn wheel(&self, at: Point, notches: i32) -> BackendResult<()> {
        self.x.move_to(at)?;
        let b = if notches > 0 { 4 } else { 5 };
        for _ in 0..notches.unsigned_abs() {
            self.x.button(b, true)?;
            self.x.button(b, false)?;
        }
        self.x.sync()
    }

    async fn send_keys(&self, keys: &[KeyStroke]) -> BackendResult<()> {
        self.x.keys(keys)
    }

    fn active_window(&self) -> Option<u64> {
        self.x.active_window().map(u64::from)
    }

    fn change_mark(&self) -> Option<u64> {
        self.damage.as_ref().map(|_| self.activity.mark())
    }

    async fn default_buttons(&self, window: &WindowInfo) -> BackendResult<Vec<(String, bool)>> {
        self.a11y.default_buttons(window).await
    }

    async fn activity_after(&self, mark: u64, until: Instant) -> bool {
        self.damage.is_some() && self.activity.after(mark, until).await
    }

    async fn control_facts(&self, control: &RawNode) -> BackendResult<ControlFacts> {
        self.a11y.facts(&control.handle).await
    }

    async fn window_set(&self) -> BackendResult<Vec<(u64, String)>> {
        self.x.window_titles()
    }

    fn changes_since(
        &self,
        mark: u64,
        animation_hz: f64,
        window: Option<&WindowInfo>,
    ) -> Option<Changes> {
        self.damage.as_ref()?;
        let app = window
            .and_then(|w| w.pid)
            .and_then(|pid| self.a11y.app_of_pid(pid));
        let (events, drawn) = self.activity.changes(mark, animation_hz, app.as_deref());
        Some(Changes {
            events: events
                .into_iter()
                .map(|(app, kind)| AppEvent {
                    app,
                    kind: kind.to_owned(),
                })
                .collect(),
            drawn: drawn
                .into_iter()
                .map(|(x, y, w, h)| Rect::from_xywh(x.into(), y.into(), w.into(), h.into()))
                .collect(),
        })
    }

    async fn settle(
        &self,
        mark: u64,
        since: Instant,
        opts: &SettleOptions,
        window: Option<&WindowInfo>,
    ) -> SettleReport {
        if self.damage.is_none() {
            return SettleReport::unsupported();
        }
        let scope = match window {
            Some(w) if !opts.whole_screen => Some(self.scope_of(w).await),
            _ => None,
        };
        self.activity
            .settle(mark, since, opts, scope.as_ref())
            .await
    }

    async fn capture_input(&self) -> BackendResult<InputFeed> {
        let display = self.display.clone();
        tokio::task::spawn_blocking(move || record::capture(display.as_deref()))
            .await
            .map_err(|e| BackendError::Failed(format!("the input recorder did not start: {e}")))?
    }
}
