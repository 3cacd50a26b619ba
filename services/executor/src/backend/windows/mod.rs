//! The Windows backend: UI Automation through COM (`CUIAutomation`), on one dedicated MTA thread that
//! owns every COM object (they are not `Send`); async callers send it jobs.
//!
//! - [`uia`]: the automation object, tree walks with a cache request (one round trip per element),
//!   stable control handles, and the fallbacks that keep the executor running where UI Automation is
//!   incomplete (Wine 10, some providers);
//! - [`actions`]: Invoke, Toggle, SelectionItem, ExpandCollapse, Value, Text and Scroll patterns, each
//!   with its fallback;
//! - [`props`]: property reads through `Get*PropertyValueEx`;
//! - [`window`]: top-level windows (cloaked ones filtered), activation, native child controls;
//! - [`win32`]: monitors, BitBlt capture, SendInput;
//! - [`hooks`]: the person's input for `record_input` (low-level mouse and keyboard hooks).

mod actions;
mod hooks;
mod props;
mod uia;
pub mod win32;
pub mod window;

use std::sync::mpsc;

use async_trait::async_trait;

use self::actions::Written;
use self::uia::Uia;
use crate::backend::{
    Backend, BackendError, BackendResult, Capture, ControlFacts, ControlState, InputFeed,
    MouseButton, RawNode, RawTree, ScreenInfo, TreeLimits, WindowInfo, WindowsOptions,
};
use crate::geometry::{Point, Rect};
use crate::keys::KeyStroke;

type Job = Box<dyn FnOnce(&mut Uia) + Send>;

/// UI Automation + Win32.
pub struct UiaBackend {
    jobs: mpsc::Sender<Job>,
    opts: WindowsOptions,
}

impl UiaBackend {
    /// Starts the UIA thread and creates the automation object.
    pub fn start(opts: WindowsOptions) -> BackendResult<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<BackendResult<()>>();
        std::thread::Builder::new()
            .name("uia".into())
            .spawn(move || match Uia::new(opts) {
                Ok(mut uia) => {
                    let _ = ready_tx.send(Ok(()));
                    while let Ok(job) = rx.recv() {
                        job(&mut uia);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| {
                BackendError::Unavailable(format!("cannot start the UI Automation thread: {e}"))
            })?;
        ready_rx
            .recv()
            .map_err(|_| BackendError::Unavailable("the UI Automation thread stopped".into()))??;
        Ok(Self { jobs, opts })
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Uia) -> BackendResult<T> + Send + 'static,
    ) -> BackendResult<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move |u| {
                let _ = tx.send(f(u));
            }))
            .map_err(|_| BackendError::Unavailable("the UI Automation thread stopped".into()))?;
        rx.await
            .map_err(|_| BackendError::Unavailable("the UI Automation thread stopped".into()))?
    }
}

#[async_trait]
impl Backend for UiaBackend {
    fn name(&self) -> &'static str {
        "uia"
    }

    fn platform(&self) -> &'static str {
        "windows"
    }

    async fn screens(&self) -> BackendResult<Vec<ScreenInfo>> {
        win32::screens()
    }

    async fn capture(&self, region: Rect) -> BackendResult<Capture> {
        tokio::task::spawn_blocking(move || win32::capture(region))
            .await
            .map_err(|_| BackendError::Failed("capture was interrupted".into()))?
    }

    async fn windows(&self) -> BackendResult<Vec<WindowInfo>> {
        window::windows()
    }

    fn active_window(&self) -> Option<u64> {
        window::foreground()
    }

    async fn activate(&self, w: &WindowInfo) -> BackendResult<WindowInfo> {
        let (handle, wait) = (w.handle, self.opts.foreground_wait);
        let shown = tokio::task::spawn_blocking(move || window::activate(handle, wait))
            .await
            .map_err(|_| BackendError::Failed("activation was interrupted".into()))?;
        if !shown {
            return Err(BackendError::Failed(format!(
                "windows refused to bring '{}' to the foreground",
                w.title
            )));
        }
        window::window_info(win32::hwnd(w.handle)).ok_or(BackendError::Gone("window"))
    }

    async fn close(&self, w: &WindowInfo) -> BackendResult<()> {
        window::close(w.handle)
    }

    async fn control_tree(
        &self,
        window: &WindowInfo,
        limits: &TreeLimits,
    ) -> BackendResult<RawTree> {
        let (handle, limits) = (window.handle, limits.clone());
        self.call(move |u| u.tree(handle, &limits)).await
    }

    async fn control_state(&self, control: &RawNode) -> BackendResult<ControlState> {
        let h = control.handle.clone();
        self.call(move |u| u.state(&h)).await
    }

    /// Read through UI Automation (value, toggle, selection, expansion, focus, enabled); the window
    /// set and the active window come from Win32. Windows reports no drawing or events to this
    /// backend yet, so an action that changes none of these is `unverifiable`, not `none_observed`.
    async fn control_facts(&self, control: &RawNode) -> BackendResult<ControlFacts> {
        let h = control.handle.clone();
        self.call(move |u| u.facts(&h)).await
    }

    async fn click_control(
        &self,
        control: &RawNode,
        button: MouseButton,
        double: bool,
    ) -> BackendResult<String> {
        if button == MouseButton::Left && !double {
            let h = control.handle.clone();
            if let Some(m) = self.call(move |u| u.pattern_click(&h)).await? {
                return Ok(m);
            }
        }
        let at = self.pointer_target(control).await?;
        win32::click(at, button, double)?;
        Ok("mouse".into())
    }

    /// The Value pattern, else the keyboard into the focused control (after placing the caret with
    /// the Text pattern for documents, or with Ctrl+A / Ctrl+End when there is no pattern at all).
    async fn enter_text(
        &self,
        control: &RawNode,
        text: &str,
        clear: bool,
    ) -> BackendResult<String> {
        let (h, text) = (control.handle.clone(), text.to_owned());
        let (written, how) = self.call(move |u| u.enter_text(&h, &text, clear)).await?;
        if let Written::Keyboard {
            click_first,
            strokes,
        } = written
        {
            if let Some(p) = click_first {
                win32::click(p, MouseButton::Left, false)?;
            }
            win32::keys(&strokes)?;
        }
        Ok(how.to_owned())
    }

    async fn read_text(&self, control: &RawNode) -> BackendResult<String> {
        let h = control.handle.clone();
        self.call(move |u| u.read_text(&h)).await
    }

    async fn focus_control(&self, control: &RawNode) -> BackendResult<()> {
        let h = control.handle.clone();
        self.call(move |u| u.focus(&h)).await
    }

    async fn click_at(&self, point: Point, button: MouseButton, double: bool) -> BackendResult<()> {
        win32::click(point, button, double)
    }

    async fn drag(&self, from: Point, to: Point, button: MouseButton) -> BackendResult<()> {
        win32::drag(from, to, button)
    }

    async fn wheel(&self, at: Point, notches: i32) -> BackendResult<()> {
        win32::wheel(at, notches)
    }

    async fn send_keys(&self, keys: &[KeyStroke]) -> BackendResult<()> {
        win32::keys(keys)
    }

    /// Scrolls a control through its Scroll pattern, falling back to the wheel at its centre.
    async fn capture_input(&self) -> BackendResult<InputFeed> {
        tokio::task::spawn_blocking(hooks::capture)
            .await
            .map_err(|e| BackendError::Failed(format!("the input hooks did not start: {e}")))?
    }

    async fn scroll_control(&self, control: &RawNode, notches: i32) -> BackendResult<String> {
        let h = control.handle.clone();
        if self.call(move |u| u.scroll(&h, notches)).await? {
            return Ok("pattern:Scroll".into());
        }
        win32::wheel(control.rect.center(), notches)?;
        Ok("wheel".into())
    }
}
