//! The Windows backend: UI Automation through COM (`CUIAutomation`), on one dedicated MTA thread that
//! owns every COM object (they are not `Send`); async callers send it jobs. Trees are walked with the
//! control-view walker and a cache request (name, control type, bounds, enabled, offscreen, automation
//! id) so one round trip per element fetches everything. Actions use the Invoke, Toggle, SelectionItem,
//! ExpandCollapse, Value and Scroll patterns, falling back to SendInput ([`win32`]).

pub mod win32;

use std::sync::mpsc;
use std::time::Instant;

use async_trait::async_trait;
use windows::Win32::System::Com::{
    CLSCTX_INPROC_SERVER, COINIT_MULTITHREADED, CoCreateInstance, CoInitializeEx,
};
use windows::Win32::UI::Accessibility::{
    CUIAutomation, ExpandCollapseState_Collapsed, IUIAutomation, IUIAutomationCacheRequest,
    IUIAutomationElement, IUIAutomationExpandCollapsePattern, IUIAutomationInvokePattern,
    IUIAutomationScrollPattern, IUIAutomationSelectionItemPattern, IUIAutomationTogglePattern,
    IUIAutomationTreeWalker, IUIAutomationValuePattern, ScrollAmount_NoAmount,
    ScrollAmount_SmallDecrement, ScrollAmount_SmallIncrement, UIA_AutomationIdPropertyId,
    UIA_BoundingRectanglePropertyId, UIA_ControlTypePropertyId, UIA_ExpandCollapsePatternId,
    UIA_InvokePatternId, UIA_IsEnabledPropertyId, UIA_IsOffscreenPropertyId, UIA_NamePropertyId,
    UIA_ScrollPatternId, UIA_SelectionItemPatternId, UIA_TogglePatternId, UIA_ValuePatternId,
};
use windows::Win32::UI::HiDpi::{
    DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2, SetProcessDpiAwarenessContext,
};
use windows::core::BSTR;

use crate::backend::{
    Backend, BackendError, BackendResult, Capture, ControlHandle, ControlState, MouseButton,
    RawNode, RawTree, ScreenInfo, TreeLimits, WindowInfo,
};
use crate::geometry::{Point, Rect};
use crate::keys::KeyStroke;
use crate::uia_types::control_type_name;

/// Scroll-pattern line steps per wheel notch (Windows' default wheel setting scrolls 3 lines).
const LINES_PER_NOTCH: u32 = 3;

fn uerr(what: &str, e: windows::core::Error) -> BackendError {
    BackendError::Failed(format!("{what}: {}", e.message()))
}

/// State owned by the UIA thread.
struct Uia {
    automation: IUIAutomation,
    walker: IUIAutomationTreeWalker,
    cache: IUIAutomationCacheRequest,
    /// Elements of the last walk; a handle is "<generation>:<index>".
    elements: Vec<IUIAutomationElement>,
    generation: u64,
}

type Job = Box<dyn FnOnce(&mut Uia) + Send>;

/// UI Automation + Win32.
pub struct UiaBackend {
    jobs: mpsc::Sender<Job>,
}

impl Uia {
    fn new() -> BackendResult<Self> {
        // SAFETY: COM initialisation and object creation on this thread, which owns the objects.
        unsafe {
            let _ = SetProcessDpiAwarenessContext(DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2);
            CoInitializeEx(None, COINIT_MULTITHREADED)
                .ok()
                .map_err(|e| uerr("CoInitializeEx", e))?;
            let automation: IUIAutomation =
                CoCreateInstance(&CUIAutomation, None, CLSCTX_INPROC_SERVER)
                    .map_err(|e| uerr("CUIAutomation", e))?;
            let walker = automation
                .ControlViewWalker()
                .map_err(|e| uerr("ControlViewWalker", e))?;
            let cache = automation
                .CreateCacheRequest()
                .map_err(|e| uerr("CreateCacheRequest", e))?;
            for p in [
                UIA_NamePropertyId,
                UIA_ControlTypePropertyId,
                UIA_BoundingRectanglePropertyId,
                UIA_IsEnabledPropertyId,
                UIA_IsOffscreenPropertyId,
                UIA_AutomationIdPropertyId,
            ] {
                cache.AddProperty(p).map_err(|e| uerr("AddProperty", e))?;
            }
            Ok(Self {
                automation,
                walker,
                cache,
                elements: Vec::new(),
                generation: 0,
            })
        }
    }

    fn element(&self, h: &ControlHandle) -> BackendResult<&IUIAutomationElement> {
        let (g, i) = h.0.split_once(':').ok_or(BackendError::Gone("control"))?;
        if g.parse::<u64>().ok() != Some(self.generation) {
            return Err(BackendError::Gone("control"));
        }
        i.parse::<usize>()
            .ok()
            .and_then(|i| self.elements.get(i))
            .ok_or(BackendError::Gone("control"))
    }

    fn node(
        &self,
        e: &IUIAutomationElement,
        parent: Option<usize>,
        depth: u32,
        index: usize,
    ) -> RawNode {
        // SAFETY: cached property reads on a live element.
        unsafe {
            let r = e.CachedBoundingRectangle().unwrap_or_default();
            RawNode {
                handle: ControlHandle(format!("{}:{index}", self.generation)),
                parent,
                depth,
                name: e.CachedName().map(|b| b.to_string()).unwrap_or_default(),
                control_type: control_type_name(e.CachedControlType().map(|t| t.0).unwrap_or(0))
                    .to_owned(),
                rect: Rect {
                    left: r.left,
                    top: r.top,
                    right: r.right,
                    bottom: r.bottom,
                },
                enabled: e.CachedIsEnabled().map(|b| b.as_bool()).unwrap_or(false),
                visible: !e.CachedIsOffscreen().map(|b| b.as_bool()).unwrap_or(true),
                automation_id: e
                    .CachedAutomationId()
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                value: String::new(),
            }
        }
    }

    /// Pre-order walk with the control-view walker, building the cache per element.
    fn tree(&mut self, window: u64, limits: &TreeLimits) -> BackendResult<RawTree> {
        self.generation += 1;
        self.elements.clear();
        let mut nodes = Vec::new();
        let mut truncated = false;
        // SAFETY: UIA calls on this thread's objects.
        unsafe {
            let root = self
                .automation
                .ElementFromHandleBuildCache(win32::hwnd(window), &self.cache)
                .map_err(|e| uerr("ElementFromHandle", e))?;
            let mut stack: Vec<(IUIAutomationElement, Option<usize>, u32)> = vec![(root, None, 0)];
            while let Some((e, parent, depth)) = stack.pop() {
                if nodes.len() >= limits.max_nodes || Instant::now() >= limits.deadline {
                    truncated = true;
                    break;
                }
                let me = nodes.len();
                nodes.push(self.node(&e, parent, depth, me));
                let mut kids = Vec::new();
                let mut child = self
                    .walker
                    .GetFirstChildElementBuildCache(&e, &self.cache)
                    .ok();
                while let Some(c) = child {
                    child = self
                        .walker
                        .GetNextSiblingElementBuildCache(&c, &self.cache)
                        .ok();
                    kids.push(c);
                }
                if depth >= limits.max_depth {
                    truncated |= !kids.is_empty();
                } else {
                    stack.extend(kids.into_iter().rev().map(|c| (c, Some(me), depth + 1)));
                }
                self.elements.push(e);
            }
        }
        Ok(RawTree { nodes, truncated })
    }

    fn state(&self, h: &ControlHandle) -> BackendResult<ControlState> {
        let e = self.element(h)?;
        // SAFETY: current property reads on a live element.
        unsafe {
            let r = e
                .CurrentBoundingRectangle()
                .map_err(|_| BackendError::Gone("control"))?;
            Ok(ControlState {
                enabled: e.CurrentIsEnabled().map(|b| b.as_bool()).unwrap_or(false),
                visible: !e.CurrentIsOffscreen().map(|b| b.as_bool()).unwrap_or(true),
                rect: Rect {
                    left: r.left,
                    top: r.top,
                    right: r.right,
                    bottom: r.bottom,
                },
            })
        }
    }

    /// Clicks through the first pattern the control supports; `None` when it supports none.
    fn pattern_click(&self, h: &ControlHandle) -> BackendResult<Option<String>> {
        let e = self.element(h)?;
        // SAFETY: pattern calls on a live element.
        unsafe {
            if let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationInvokePattern>(UIA_InvokePatternId)
            {
                p.Invoke().map_err(|e| uerr("Invoke", e))?;
                return Ok(Some("pattern:invoke".into()));
            }
            if let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationTogglePattern>(UIA_TogglePatternId)
            {
                p.Toggle().map_err(|e| uerr("Toggle", e))?;
                return Ok(Some("pattern:toggle".into()));
            }
            if let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationSelectionItemPattern>(
                UIA_SelectionItemPatternId,
            ) {
                p.Select().map_err(|e| uerr("Select", e))?;
                return Ok(Some("pattern:select".into()));
            }
            if let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationExpandCollapsePattern>(
                UIA_ExpandCollapsePatternId,
            ) {
                if p.CurrentExpandCollapseState().ok() == Some(ExpandCollapseState_Collapsed) {
                    p.Expand().map_err(|e| uerr("Expand", e))?;
                } else {
                    p.Collapse().map_err(|e| uerr("Collapse", e))?;
                }
                return Ok(Some("pattern:expand_collapse".into()));
            }
        }
        Ok(None)
    }

    fn set_text(&self, h: &ControlHandle, text: &str, clear: bool) -> BackendResult<()> {
        let e = self.element(h)?;
        // SAFETY: pattern calls on a live element.
        unsafe {
            let p = e
                .GetCurrentPatternAs::<IUIAutomationValuePattern>(UIA_ValuePatternId)
                .map_err(|_| {
                    BackendError::Failed("the control is not editable (no Value pattern)".into())
                })?;
            if p.CurrentIsReadOnly().map(|b| b.as_bool()).unwrap_or(false) {
                return Err(BackendError::Failed("the control is read-only".into()));
            }
            let value = if clear {
                text.to_owned()
            } else {
                format!(
                    "{}{text}",
                    p.CurrentValue().map(|b| b.to_string()).unwrap_or_default()
                )
            };
            p.SetValue(&BSTR::from(value))
                .map_err(|e| uerr("SetValue", e))
        }
    }

    fn read_text(&self, h: &ControlHandle) -> BackendResult<String> {
        let e = self.element(h)?;
        // SAFETY: pattern and property calls on a live element.
        unsafe {
            if let Ok(v) = e
                .GetCurrentPatternAs::<IUIAutomationValuePattern>(UIA_ValuePatternId)
                .and_then(|p| p.CurrentValue())
            {
                return Ok(v.to_string());
            }
            Ok(e.CurrentName().map(|b| b.to_string()).unwrap_or_default())
        }
    }

    fn focus(&self, h: &ControlHandle) -> BackendResult<()> {
        let e = self.element(h)?;
        // SAFETY: a focus call on a live element.
        unsafe { e.SetFocus() }.map_err(|e| uerr("SetFocus", e))
    }

    /// Scrolls vertically with the Scroll pattern, [`LINES_PER_NOTCH`] small steps per notch; false
    /// when the control has no Scroll pattern or cannot scroll vertically (the caller then turns the
    /// wheel over it, which the control's scrollable ancestor receives).
    fn scroll(&self, h: &ControlHandle, notches: i32) -> BackendResult<bool> {
        let e = self.element(h)?;
        // SAFETY: pattern calls on a live element.
        unsafe {
            let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationScrollPattern>(UIA_ScrollPatternId)
            else {
                return Ok(false);
            };
            if !p
                .CurrentVerticallyScrollable()
                .map(|b| b.as_bool())
                .unwrap_or(false)
            {
                return Ok(false);
            }
            // A positive wheel distance scrolls up, i.e. towards the start of the content.
            let amount = if notches > 0 {
                ScrollAmount_SmallDecrement
            } else {
                ScrollAmount_SmallIncrement
            };
            for _ in 0..notches.unsigned_abs().saturating_mul(LINES_PER_NOTCH) {
                p.Scroll(ScrollAmount_NoAmount, amount)
                    .map_err(|e| uerr("Scroll", e))?;
            }
            Ok(true)
        }
    }
}

impl UiaBackend {
    /// Starts the UIA thread and creates the automation object.
    pub fn start() -> BackendResult<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<BackendResult<()>>();
        std::thread::Builder::new()
            .name("uia".into())
            .spawn(move || match Uia::new() {
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
        Ok(Self { jobs })
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
        win32::windows()
    }

    async fn activate(&self, window: &WindowInfo) -> BackendResult<WindowInfo> {
        if !win32::activate(window.handle) {
            return Err(BackendError::Failed(format!(
                "windows refused to bring '{}' to the foreground",
                window.title
            )));
        }
        win32::window_info(win32::hwnd(window.handle)).ok_or(BackendError::Gone("window"))
    }

    async fn close(&self, window: &WindowInfo) -> BackendResult<()> {
        win32::close(window.handle)
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
        win32::click(control.rect.center(), button, double)?;
        Ok("mouse".into())
    }

    async fn set_text(&self, control: &RawNode, text: &str, clear: bool) -> BackendResult<()> {
        let (h, text) = (control.handle.clone(), text.to_owned());
        self.call(move |u| u.set_text(&h, &text, clear)).await
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
    async fn scroll_control(&self, control: &RawNode, notches: i32) -> BackendResult<String> {
        let h = control.handle.clone();
        if self.call(move |u| u.scroll(&h, notches)).await? {
            return Ok("pattern:Scroll".into());
        }
        win32::wheel(control.rect.center(), notches)?;
        Ok("wheel".into())
    }
}
