//! Actions on one control through UI Automation patterns, each with its fallback: clicks (Invoke,
//! Toggle, SelectionItem, ExpandCollapse, else the caller's mouse click), text (Value, then Text for
//! documents, then the window text of a native control; writing falls back to the keyboard and says
//! so), focus (UIA, else Win32 focus of a native control) and scrolling (Scroll, else the wheel).

use windows::Win32::UI::Accessibility::{
    ExpandCollapseState_Collapsed, IUIAutomationExpandCollapsePattern, IUIAutomationInvokePattern,
    IUIAutomationScrollPattern, IUIAutomationSelectionItemPattern, IUIAutomationTextPattern,
    IUIAutomationTogglePattern, IUIAutomationValuePattern, ScrollAmount_NoAmount,
    ScrollAmount_SmallDecrement, ScrollAmount_SmallIncrement, TextPatternRangeEndpoint_End,
    TextPatternRangeEndpoint_Start, UIA_ExpandCollapsePatternId, UIA_InvokePatternId,
    UIA_NamePropertyId, UIA_ScrollPatternId, UIA_SelectionItemPatternId, UIA_TextPatternId,
    UIA_TogglePatternId, UIA_ValuePatternId, UIA_ValueValuePropertyId,
};
use windows::core::BSTR;

use super::props::{self, From};
use super::uia::{Uia, uerr};
use super::window;
use crate::backend::{BackendError, BackendResult, ControlHandle};
use crate::geometry::{Point, Rect};
use crate::keys::{Key, KeyStroke, NamedKey};

/// Scroll-pattern line steps per wheel notch (Windows' default wheel setting scrolls 3 lines).
const LINES_PER_NOTCH: u32 = 3;

/// How `enter_text` wrote, so the result can say it.
pub(super) enum Written {
    /// Through the Value pattern.
    Value,
    /// The keyboard is needed: the caller clicks `click_first` when focusing failed, then types.
    Keyboard {
        click_first: Option<Point>,
        strokes: Vec<KeyStroke>,
    },
}

fn tap(k: NamedKey) -> [KeyStroke; 2] {
    [
        KeyStroke {
            key: Key::Named(k),
            down: true,
        },
        KeyStroke {
            key: Key::Named(k),
            down: false,
        },
    ]
}

fn chord(modifier: NamedKey, c: char) -> [KeyStroke; 4] {
    let s = |key, down| KeyStroke { key, down };
    [
        s(Key::Named(modifier), true),
        s(Key::Char(c), true),
        s(Key::Char(c), false),
        s(Key::Named(modifier), false),
    ]
}

/// Key strokes that type `text` (newlines as Enter) after `prefix`.
fn typing(prefix: &[KeyStroke], text: &str) -> Vec<KeyStroke> {
    let mut v = prefix.to_vec();
    for c in text.chars() {
        match c {
            '\r' => {}
            '\n' => v.extend(tap(NamedKey::Enter)),
            '\t' => v.extend(tap(NamedKey::Tab)),
            c => v.extend([
                KeyStroke {
                    key: Key::Char(c),
                    down: true,
                },
                KeyStroke {
                    key: Key::Char(c),
                    down: false,
                },
            ]),
        }
    }
    v
}

impl Uia {
    /// Clicks through the first pattern the control supports; `None` when it supports none.
    pub(super) fn pattern_click(&self, h: &ControlHandle) -> BackendResult<Option<String>> {
        let e = &self.element(h)?.e;
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

    /// Writes through the Value pattern; for documents (Text pattern, no Value) and controls with
    /// neither, focuses the control, places the caret (select all to replace, end to append) and
    /// returns the strokes the caller must type.
    pub(super) fn enter_text(
        &self,
        h: &ControlHandle,
        text: &str,
        clear: bool,
    ) -> BackendResult<(Written, &'static str)> {
        let e = &self.element(h)?.e;
        // SAFETY: pattern calls on a live element.
        unsafe {
            if let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationValuePattern>(UIA_ValuePatternId) {
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
                    .map_err(|e| uerr("SetValue", e))?;
                return Ok((Written::Value, "pattern:Value"));
            }
            let focused = self.focus(h).is_ok();
            if focused
                && let Ok(p) = e.GetCurrentPatternAs::<IUIAutomationTextPattern>(UIA_TextPatternId)
            {
                let all = p.DocumentRange().map_err(|e| uerr("DocumentRange", e))?;
                if !clear {
                    // Collapse the range to the document's end: the caret goes there.
                    all.MoveEndpointByRange(
                        TextPatternRangeEndpoint_Start,
                        &all,
                        TextPatternRangeEndpoint_End,
                    )
                    .map_err(|e| uerr("MoveEndpointByRange", e))?;
                }
                all.Select().map_err(|e| uerr("Select", e))?;
                return Ok((
                    Written::Keyboard {
                        click_first: None,
                        strokes: typing(&[], text),
                    },
                    "pattern:Text+keyboard",
                ));
            }
            // No usable pattern: focus by clicking when focusing failed, then the keyboard alone
            // (Ctrl+A replaces, Ctrl+End appends).
            let click_first = if focused {
                None
            } else {
                tracing::debug!("fallback: focusing by a click before typing");
                Some(self.bounds(h)?.center())
            };
            let prefix: Vec<KeyStroke> = if clear {
                chord(NamedKey::Control, 'a').to_vec()
            } else {
                let ctrl = |down| KeyStroke {
                    key: Key::Named(NamedKey::Control),
                    down,
                };
                let mut v = vec![ctrl(true)];
                v.extend(tap(NamedKey::End));
                v.push(ctrl(false));
                v
            };
            Ok((
                Written::Keyboard {
                    click_first,
                    strokes: typing(&prefix, text),
                },
                "keyboard (no Value or Text pattern)",
            ))
        }
    }

    /// The text a control shows: Value pattern, Text pattern (documents), the window text of a
    /// native control, the Value property, else its name.
    pub(super) fn read_text(&self, h: &ControlHandle) -> BackendResult<String> {
        let el = self.element(h)?;
        let e = &el.e;
        // SAFETY: pattern and property calls on a live element.
        unsafe {
            if let Ok(v) = e
                .GetCurrentPatternAs::<IUIAutomationValuePattern>(UIA_ValuePatternId)
                .and_then(|p| p.CurrentValue())
            {
                return Ok(v.to_string());
            }
            if let Ok(t) = e
                .GetCurrentPatternAs::<IUIAutomationTextPattern>(UIA_TextPatternId)
                .and_then(|p| p.DocumentRange())
                .and_then(|r| r.GetText(-1))
            {
                return Ok(t.to_string());
            }
        }
        if let Some(t) = el.hwnd.and_then(|h| window::window_text(h, &self.opts)) {
            tracing::debug!("fallback: texts through WM_GETTEXT (no Value or Text pattern)");
            return Ok(t);
        }
        let v = props::string(e, UIA_ValueValuePropertyId, From::Live);
        if !v.is_empty() {
            return Ok(v);
        }
        Ok(props::string(e, UIA_NamePropertyId, From::Live))
    }

    /// Keyboard focus: UIA's SetFocus, else Win32 focus for a native control.
    pub(super) fn focus(&self, h: &ControlHandle) -> BackendResult<()> {
        let el = self.element(h)?;
        // SAFETY: a focus call on a live element.
        let uia = unsafe { el.e.SetFocus() };
        match (uia, el.hwnd) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(w)) if window::focus_native(w, self.opts.foreground_wait) => {
                tracing::debug!("fallback: Win32 focus (UIA SetFocus failed)");
                Ok(())
            }
            (Err(e), _) => Err(BackendError::Failed(format!(
                "cannot focus this control here (SetFocus: {}); click it instead",
                e.message()
            ))),
        }
    }

    /// Scrolls vertically with the Scroll pattern, [`LINES_PER_NOTCH`] small steps per notch; false
    /// when the control has no Scroll pattern or cannot scroll vertically (the caller then turns the
    /// wheel over it, which the control's scrollable ancestor receives).
    pub(super) fn scroll(&self, h: &ControlHandle, notches: i32) -> BackendResult<bool> {
        let e = &self.element(h)?.e;
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

    /// The current bounds of a control (for clicking it when focus is unsupported).
    pub(super) fn bounds(&self, h: &ControlHandle) -> BackendResult<Rect> {
        Ok(self.state(h)?.rect)
    }
}
