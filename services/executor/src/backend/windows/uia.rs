//! The UI Automation state owned by the backend's COM thread: the automation object, the tree walker,
//! the cache request, and the control handles ([`HandleTable`]), plus the tree walk.
//!
//! Optional capabilities degrade instead of stopping the executor (each fallback is legitimate on
//! Windows too, where some providers are incomplete, and each is what Wine 10 needs):
//! - no control-view walker → a walker over the raw view built from the true condition;
//! - no `ElementFromHandleBuildCache` → `ElementFromHandle`, then `BuildUpdatedCache` (else live reads);
//! - typed property getters → `Get{Cached,Current}PropertyValueEx` ([`props`]) everywhere;
//! - a window whose walker finds no children → its child HWNDs, enumerated with Win32 and opened with
//!   `ElementFromHandle` one by one.
//!
//! Only COM and the root element are required to start.

use std::time::Instant;

use windows::Win32::Foundation::HWND;
use windows::Win32::System::Com::{
    CLSCTX_INPROC_SERVER, COINIT_MULTITHREADED, CoCreateInstance, CoInitializeEx,
};
use windows::Win32::UI::Accessibility::{
    CUIAutomation, IUIAutomation, IUIAutomationCacheRequest, IUIAutomationElement,
    IUIAutomationTreeWalker, UIA_AutomationIdPropertyId, UIA_BoundingRectanglePropertyId,
    UIA_ControlTypePropertyId, UIA_ExpandCollapseExpandCollapseStatePropertyId,
    UIA_HasKeyboardFocusPropertyId, UIA_IsEnabledPropertyId, UIA_IsOffscreenPropertyId,
    UIA_IsPasswordPropertyId, UIA_IsValuePatternAvailablePropertyId, UIA_NamePropertyId,
    UIA_NativeWindowHandlePropertyId, UIA_RuntimeIdPropertyId,
    UIA_SelectionItemIsSelectedPropertyId, UIA_ToggleToggleStatePropertyId,
    UIA_ValueValuePropertyId,
};
use windows::Win32::UI::HiDpi::{
    DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2, SetProcessDpiAwarenessContext,
};

use super::props::{self, From};
use super::{win32, window};
use crate::backend::{
    BackendError, BackendResult, ControlFacts, ControlHandle, ControlState, RawNode, RawTree,
    TreeLimits, WindowsOptions,
};
use crate::handles::{ElementKey, HandleTable};
use crate::uia_types::control_type_name;

pub(super) fn uerr(what: &str, e: windows::core::Error) -> BackendError {
    BackendError::Failed(format!("{what}: {}", e.message()))
}

/// An element and the native window it is, when it is one (known from the Win32 fallback or read).
pub(super) struct Element {
    pub(super) e: IUIAutomationElement,
    pub(super) hwnd: Option<u64>,
}

/// State owned by the UIA thread.
pub(super) struct Uia {
    pub(super) automation: IUIAutomation,
    walker: IUIAutomationTreeWalker,
    cache: Option<IUIAutomationCacheRequest>,
    pub(super) handles: HandleTable<Element>,
    pub(super) opts: WindowsOptions,
}

impl Uia {
    pub(super) fn new(opts: WindowsOptions) -> BackendResult<Self> {
        // SAFETY: COM initialisation and object creation on this thread, which owns the objects.
        unsafe {
            let _ = SetProcessDpiAwarenessContext(DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2);
            CoInitializeEx(None, COINIT_MULTITHREADED)
                .ok()
                .map_err(|e| uerr("CoInitializeEx", e))?;
            let automation: IUIAutomation =
                CoCreateInstance(&CUIAutomation, None, CLSCTX_INPROC_SERVER)
                    .map_err(|e| uerr("CUIAutomation", e))?;
            automation
                .GetRootElement()
                .map_err(|e| uerr("GetRootElement", e))?;
            let walker = match automation.ControlViewWalker() {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e.message(), "no control-view walker; walking the raw view");
                    let all = automation
                        .CreateTrueCondition()
                        .map_err(|e| uerr("CreateTrueCondition", e))?;
                    automation
                        .CreateTreeWalker(&all)
                        .map_err(|e| uerr("CreateTreeWalker", e))?
                }
            };
            let cache = automation.CreateCacheRequest().ok();
            if let Some(c) = &cache {
                for p in [
                    UIA_NamePropertyId,
                    UIA_ControlTypePropertyId,
                    UIA_BoundingRectanglePropertyId,
                    UIA_IsEnabledPropertyId,
                    UIA_IsOffscreenPropertyId,
                    UIA_AutomationIdPropertyId,
                    UIA_RuntimeIdPropertyId,
                    UIA_NativeWindowHandlePropertyId,
                ] {
                    // A property the cache refuses is read live instead.
                    let _ = c.AddProperty(p);
                }
            }
            Ok(Self {
                automation,
                walker,
                cache,
                handles: HandleTable::new(opts.max_control_handles),
                opts,
            })
        }
    }

    pub(super) fn element(&self, h: &ControlHandle) -> BackendResult<&Element> {
        self.handles.get(&h.0).ok_or(BackendError::Gone("control"))
    }

    /// The element of a window handle, with the cache filled when possible.
    fn open_window(&self, hwnd: HWND) -> windows::core::Result<IUIAutomationElement> {
        // SAFETY: UIA calls on this thread's objects.
        unsafe {
            if let Some(c) = &self.cache
                && let Ok(e) = self.automation.ElementFromHandleBuildCache(hwnd, c)
            {
                return Ok(e);
            }
            let e = self.automation.ElementFromHandle(hwnd)?;
            tracing::debug!("fallback: ElementFromHandle + BuildUpdatedCache");
            Ok(self.cached(e))
        }
    }

    /// `e` with its cache filled, or `e` itself (then reads are live).
    fn cached(&self, e: IUIAutomationElement) -> IUIAutomationElement {
        match &self.cache {
            // SAFETY: a cache refresh on a live element.
            Some(c) => unsafe { e.BuildUpdatedCache(c) }.unwrap_or(e),
            None => e,
        }
    }

    /// The children of an element: the walker's, else (for a native window) its child windows.
    fn children(&self, parent: &Element) -> Vec<Element> {
        let mut kids = Vec::new();
        // SAFETY: walker calls on this thread's objects.
        unsafe {
            let first = match &self.cache {
                Some(c) => self.walker.GetFirstChildElementBuildCache(&parent.e, c),
                None => self.walker.GetFirstChildElement(&parent.e),
            };
            let mut child = first.ok();
            while let Some(c) = child {
                child = match &self.cache {
                    Some(cr) => self.walker.GetNextSiblingElementBuildCache(&c, cr),
                    None => self.walker.GetNextSiblingElement(&c),
                }
                .ok();
                let hwnd = native_handle(&c);
                kids.push(Element { e: c, hwnd });
            }
        }
        if kids.is_empty()
            && let Some(h) = parent.hwnd
        {
            kids = window::child_windows(h)
                .into_iter()
                .filter_map(|c| {
                    let e = self.open_window(win32::hwnd(c)).ok()?;
                    Some(Element { e, hwnd: Some(c) })
                })
                .collect();
            if !kids.is_empty() {
                tracing::debug!(
                    found = kids.len(),
                    "fallback: child windows (the walker found none)"
                );
            }
        }
        kids
    }

    fn node(
        &self,
        el: &Element,
        parent: Option<usize>,
        depth: u32,
        max_value_chars: usize,
    ) -> RawNode {
        let e = &el.e;
        let control_type =
            control_type_name(props::int(e, UIA_ControlTypePropertyId, From::Cache).unwrap_or(0));
        RawNode {
            // Set by the caller once the element is in the handle table.
            handle: ControlHandle(String::new()),
            parent,
            depth,
            name: props::string(e, UIA_NamePropertyId, From::Cache),
            control_type: control_type.to_owned(),
            rect: props::rect(e, UIA_BoundingRectanglePropertyId, From::Cache)
                .or_else(|| el.hwnd.and_then(window::window_rect))
                .unwrap_or_default(),
            enabled: props::boolean(e, UIA_IsEnabledPropertyId, From::Cache).unwrap_or(true),
            visible: !props::boolean(e, UIA_IsOffscreenPropertyId, From::Cache).unwrap_or(false),
            automation_id: props::string(e, UIA_AutomationIdPropertyId, From::Cache),
            value: if matches!(control_type, "Edit" | "Document") {
                value(el, max_value_chars, &self.opts)
            } else {
                String::new()
            },
        }
    }

    /// Pre-order walk; handles are stable across walks (see [`crate::handles`]).
    pub(super) fn tree(&mut self, window: u64, limits: &TreeLimits) -> BackendResult<RawTree> {
        let root = self
            .open_window(win32::hwnd(window))
            .map_err(|e| uerr("ElementFromHandle", e))?;
        let walk = self.handles.begin();
        let mut nodes = Vec::new();
        let mut truncated = false;
        let mut stack = vec![(
            Element {
                e: root,
                hwnd: Some(window),
            },
            None,
            0u32,
        )];
        while let Some((el, parent, depth)) = stack.pop() {
            if nodes.len() >= limits.max_nodes || Instant::now() >= limits.deadline {
                truncated = true;
                break;
            }
            let me = nodes.len();
            let mut kids = self.children(&el);
            if depth >= limits.max_depth {
                truncated |= !kids.is_empty();
                kids.clear();
            }
            let key = props::runtime_id(&el.e, UIA_RuntimeIdPropertyId)
                .map(ElementKey::Runtime)
                .or(el.hwnd.map(ElementKey::Native));
            let mut node = self.node(&el, parent, depth, limits.max_value_chars);
            node.handle = ControlHandle(self.handles.insert(walk, window, key, el).to_string());
            nodes.push(node);
            stack.extend(kids.into_iter().rev().map(|c| (c, Some(me), depth + 1)));
        }
        self.handles.finish(walk, window, !truncated);
        Ok(RawTree { nodes, truncated })
    }

    pub(super) fn state(&self, h: &ControlHandle) -> BackendResult<ControlState> {
        let el = self.element(h)?;
        if el.hwnd.is_some_and(|w| !window::is_window(w)) {
            return Err(BackendError::Gone("control"));
        }
        let rect = props::rect(&el.e, UIA_BoundingRectanglePropertyId, From::Live)
            .or_else(|| el.hwnd.and_then(window::window_rect))
            .ok_or(BackendError::Gone("control"))?;
        Ok(ControlState {
            enabled: props::boolean(&el.e, UIA_IsEnabledPropertyId, From::Live).unwrap_or(true),
            visible: !props::boolean(&el.e, UIA_IsOffscreenPropertyId, From::Live).unwrap_or(false),
            rect,
        })
    }
}

/// Longest value [`Uia::facts`] reads, in characters.
const FACT_CHARS: usize = 4096;

impl Uia {
    /// The control's value and states for the effect check, read live: the Value pattern's value
    /// (else a native edit's window text), the Toggle state (on = checked), SelectionItem's
    /// IsSelected, the ExpandCollapse state (a leaf has none), keyboard focus and IsEnabled. A
    /// property the element does not support reads as unknown.
    pub(super) fn facts(&self, h: &ControlHandle) -> BackendResult<ControlFacts> {
        let el = self.element(h)?;
        if el.hwnd.is_some_and(|w| !window::is_window(w)) {
            return Err(BackendError::Gone("control"));
        }
        let e = &el.e;
        let has_value = props::boolean(e, UIA_IsValuePatternAvailablePropertyId, From::Live)
            .unwrap_or(false)
            || el.hwnd.is_some();
        // ToggleState: 0 off, 1 on, 2 indeterminate; ExpandCollapseState: 0 collapsed, 1 expanded,
        // 2 partially expanded, 3 leaf.
        let toggle = props::int(e, UIA_ToggleToggleStatePropertyId, From::Live);
        let expand = props::int(
            e,
            UIA_ExpandCollapseExpandCollapseStatePropertyId,
            From::Live,
        );
        Ok(ControlFacts {
            value: has_value.then(|| value(el, FACT_CHARS, &self.opts)),
            checked: toggle.map(|t| t == 1),
            selected: props::boolean(e, UIA_SelectionItemIsSelectedPropertyId, From::Live),
            expanded: expand.filter(|&x| x != 3).map(|x| x != 0),
            focused: props::boolean(e, UIA_HasKeyboardFocusPropertyId, From::Live),
            enabled: props::boolean(e, UIA_IsEnabledPropertyId, From::Live).unwrap_or(true),
        })
    }
}

/// The current text of an editable control, at most `max` characters; empty for password fields.
/// The Value property, else the window text of a native edit (where UIA gives no Value).
fn value(el: &Element, max: usize, opts: &WindowsOptions) -> String {
    if max == 0 || props::boolean(&el.e, UIA_IsPasswordPropertyId, From::Live).unwrap_or(false) {
        return String::new();
    }
    let mut v = props::string(&el.e, UIA_ValueValuePropertyId, From::Live);
    if v.is_empty()
        && let Some(t) = el.hwnd.and_then(|h| window::window_text(h, opts))
    {
        v = t;
    }
    crate::backend::listed_value(&v, max)
}

/// The native window handle an element reports (0 means none).
fn native_handle(e: &IUIAutomationElement) -> Option<u64> {
    props::int(e, UIA_NativeWindowHandlePropertyId, From::Cache)
        .filter(|&h| h != 0)
        .map(|h| h as u32 as u64)
}
