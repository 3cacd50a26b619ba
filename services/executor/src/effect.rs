//! Effects confirmed or flagged (issue 31): an action reported done must have happened. Around each
//! action the executor reads what it can compare — the target control's text and states, the window
//! set, the active window — and, once the screen has settled after the action (the settle protocol,
//! `executor.proto`), reads them again together with what the desktop reported in between (the
//! window's application's accessibility events, the drawing outside animations). [`judge`] turns the
//! two readings into an [`Effect`]: `confirmed` with what changed, `none_observed` ("Enter in
//! 'Location': nothing changed"), or `unverifiable` when the backend cannot see enough to say.
//!
//! What counts for which action:
//! - a change of the target's text or states, of the window set or of the active window always counts;
//! - the application's accessibility events count for actions in a window (clicks, text, keys,
//!   scrolling), not for window-level ones (select, launch, close), which the window set answers;
//! - drawing counts where it can be tied to the action: outside the target control for actions on a
//!   control (its own redraw — a caret, a pressed look, a focus ring — proves nothing), anywhere in the
//!   window for pointer actions at a point and for scrolling. Drawing that cannot be tied to the action
//!   (keys sent to whatever has the focus, window-level actions) makes the effect `unverifiable`, not
//!   `confirmed`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::backend::{Changes, ControlFacts, RawNode, SettleOutcome, WindowInfo};
use crate::geometry::Rect;
use crate::tools::Tool;

pub use ufo_common::effect::EffectKind;

/// What an action was observed to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// Confirmed, none observed, or unverifiable.
    pub kind: EffectKind,
    /// The action and what changed, in a few words.
    pub description: String,
}

/// The control an action was aimed at, with its facts read just before the action (`None` when they
/// could not be read).
#[derive(Debug, Clone)]
pub struct Watched {
    /// The control, with the bounds read before the action.
    pub node: RawNode,
    /// Its text and states before the action.
    pub before: Option<ControlFacts>,
}

/// What the desktop looked like before an action (window-level facts).
#[derive(Debug, Clone, Default)]
pub struct Before {
    /// The window set as (handle, title); `None` when it could not be read.
    pub windows: Option<Vec<(u64, String)>>,
    /// The active window.
    pub active: Option<u64>,
}

/// Everything [`judge`] compares, read around one action.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The tool that ran.
    pub tool: Tool,
    /// The action in a few words ("Enter in 'Location'").
    pub what: String,
    /// Before the action.
    pub before: Before,
    /// After the screen settled.
    pub after: Before,
    /// The target control, when the action had one.
    pub target: Option<Watched>,
    /// The target's facts after the action: `Some(None)` when it is gone, `None` when there was no
    /// target or it could not be read.
    pub target_after: Option<Option<ControlFacts>>,
    /// The window the action worked in (its bounds limit where drawing counts).
    pub window: Option<WindowInfo>,
    /// The window a `select_application_window` selected.
    pub selected: Option<WindowInfo>,
    /// What the desktop reported after the action; `None` when the backend cannot see changes.
    pub changes: Option<Changes>,
    /// How the settle wait after the action ended; `None` when there was none (settling off, or a
    /// backend without change marks).
    pub settle: Option<SettleOutcome>,
}

/// Longest piece of a text quoted in a description, in characters.
const QUOTE_CHARS: usize = 40;

/// `text` quoted and cut at [`QUOTE_CHARS`].
fn quote(text: &str) -> String {
    let mut q: String = text.chars().take(QUOTE_CHARS).collect();
    if text.chars().count() > QUOTE_CHARS {
        q.push('…');
    }
    format!("'{q}'")
}

/// The action in a few words, from its tool, parameters and target: "click on 'Save' (Button)",
/// "keys '{ENTER}' in 'Location'", "text set in 'Name'", "launch of 'mousepad'".
pub fn what(
    tool: Tool,
    params: &Value,
    target: Option<&RawNode>,
    window: Option<&WindowInfo>,
) -> String {
    let on = |verb: &str| match target {
        Some(n) => format!("{verb} on '{}' ({})", n.name, n.control_type),
        None => verb.to_owned(),
    };
    let param = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default();
    match tool {
        Tool::ClickInput => on("click"),
        Tool::SetEditText => match target {
            Some(n) => format!("text set in '{}'", n.name),
            None => "text set".to_owned(),
        },
        Tool::KeyboardInput => match target {
            Some(n) => format!("keys {} in '{}'", quote(param("keys")), n.name),
            None => format!("keys {}", quote(param("keys"))),
        },
        Tool::WheelMouseInput => on("scroll"),
        Tool::ClickOnCoordinates => "click at a point".to_owned(),
        Tool::DragOnCoordinates => "drag".to_owned(),
        Tool::LaunchApplication => format!("launch of {}", quote(param("name"))),
        Tool::CloseApplication => match window {
            Some(w) => format!("close of {}", quote(&w.title)),
            None => "close".to_owned(),
        },
        Tool::SelectApplicationWindow => match window {
            Some(w) => format!("selection of {}", quote(&w.title)),
            None => "window selection".to_owned(),
        },
        other => other.name().to_owned(),
    }
}

/// Where drawing counts as the action's doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drawing {
    /// Outside the target control, inside the window.
    OutsideTarget,
    /// Anywhere in the window.
    InWindow,
    /// Nowhere: drawing makes the effect unverifiable, not confirmed.
    Unattributable,
}

fn drawing_rule(tool: Tool, has_target: bool) -> Drawing {
    match tool {
        Tool::ClickOnCoordinates | Tool::DragOnCoordinates | Tool::WheelMouseInput => {
            Drawing::InWindow
        }
        Tool::ClickInput | Tool::SetEditText | Tool::KeyboardInput if has_target => {
            Drawing::OutsideTarget
        }
        _ => Drawing::Unattributable,
    }
}

/// Whether the application's accessibility events count for `tool`.
fn events_count(tool: Tool) -> bool {
    !matches!(
        tool,
        Tool::SelectApplicationWindow | Tool::LaunchApplication | Tool::CloseApplication
    )
}

/// How a fact changed, in words: "'Bold' unchecked → checked".
fn fact_changes(name: &str, was: &ControlFacts, now: &ControlFacts) -> Vec<String> {
    let mut out = Vec::new();
    let flag = |what: &str, a: Option<bool>, b: Option<bool>, on: &str, off: &str| match (a, b) {
        (Some(a), Some(b)) if a != b => {
            let w = |v: bool| if v { on } else { off };
            Some(format!("'{name}' {what}{} → {}", w(a), w(b)))
        }
        _ => None,
    };
    if let (Some(a), Some(b)) = (&was.value, &now.value)
        && a != b
    {
        out.push(format!("'{name}' text {} → {}", quote(a), quote(b)));
    }
    out.extend(flag("", was.checked, now.checked, "checked", "unchecked"));
    out.extend(flag(
        "",
        was.selected,
        now.selected,
        "selected",
        "not selected",
    ));
    out.extend(flag(
        "",
        was.expanded,
        now.expanded,
        "expanded",
        "collapsed",
    ));
    out.extend(flag("", was.focused, now.focused, "focused", "not focused"));
    if was.enabled != now.enabled {
        out.extend(flag(
            "",
            Some(was.enabled),
            Some(now.enabled),
            "enabled",
            "disabled",
        ));
    }
    out
}

/// How the window set and the active window changed.
fn window_changes(before: &Before, after: &Before) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(a), Some(b)) = (&before.windows, &after.windows) {
        for (h, title) in b {
            match a.iter().find(|(x, _)| x == h) {
                None => out.push(format!("window {} opened", quote(title))),
                Some((_, old)) if old != title => {
                    out.push(format!("window title {} → {}", quote(old), quote(title)))
                }
                Some(_) => {}
            }
        }
        for (h, title) in a {
            if !b.iter().any(|(x, _)| x == h) {
                out.push(format!("window {} closed", quote(title)));
            }
        }
    }
    if before.active != after.active
        && let Some(now) = after.active
    {
        let title = after
            .windows
            .iter()
            .flatten()
            .find(|(h, _)| *h == now)
            .map(|(_, t)| quote(t));
        out.push(match title {
            Some(t) => format!("{t} is now the active window"),
            None => "the active window changed".to_owned(),
        });
    }
    out
}

/// "text-changed ×3, state-changed".
fn event_summary(changes: &Changes) -> String {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &changes.events {
        *kinds.entry(e.kind.as_str()).or_default() += 1;
    }
    kinds
        .into_iter()
        .map(|(k, n)| {
            if n > 1 {
                format!("{k} ×{n}")
            } else {
                k.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The union of `rects`.
fn bounds(rects: &[Rect]) -> Option<Rect> {
    rects.iter().copied().reduce(|a, b| Rect {
        left: a.left.min(b.left),
        top: a.top.min(b.top),
        right: a.right.max(b.right),
        bottom: a.bottom.max(b.bottom),
    })
}

fn overlaps(a: &Rect, b: &Rect) -> bool {
    a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom
}

fn inside(a: &Rect, b: &Rect) -> bool {
    a.left >= b.left && a.top >= b.top && a.right <= b.right && a.bottom <= b.bottom
}

/// Turns the readings around an action into its effect (see the module doc for what counts).
pub fn judge(o: &Observed) -> Effect {
    let said = |kind: EffectKind, text: String| Effect {
        kind,
        description: format!("{}: {text}", o.what),
    };
    if o.tool == Tool::SelectApplicationWindow
        && let Some(w) = &o.selected
        && o.after.active == Some(w.handle)
    {
        let already = if o.before.active == Some(w.handle) {
            " (it already was)"
        } else {
            ""
        };
        return said(
            EffectKind::Confirmed,
            format!("{} is the active window{already}", quote(&w.title)),
        );
    }
    let mut seen = Vec::new();
    if let Some(t) = &o.target {
        match (&t.before, &o.target_after) {
            (_, Some(None)) => seen.push(format!(
                "'{}' ({}) is gone",
                t.node.name, t.node.control_type
            )),
            (Some(was), Some(Some(now))) => seen.extend(fact_changes(&t.node.name, was, now)),
            _ => {}
        }
    }
    seen.extend(window_changes(&o.before, &o.after));
    let Some(changes) = &o.changes else {
        return if seen.is_empty() {
            said(
                EffectKind::Unverifiable,
                "nothing compared changed and this desktop does not report drawing or \
                 accessibility events"
                    .to_owned(),
            )
        } else {
            said(EffectKind::Confirmed, seen.join("; "))
        };
    };
    let rule = drawing_rule(o.tool, o.target.is_some());
    let area = o.window.as_ref().map(|w| w.rect);
    let in_window = |r: &Rect| area.is_none_or(|w| w.is_empty() || overlaps(r, &w));
    let target_rect = o.target.as_ref().map(|t| t.node.rect);
    let counted: Vec<Rect> = o
        .changes
        .iter()
        .flat_map(|c| c.drawn.iter())
        .filter(|r| match rule {
            Drawing::InWindow => in_window(r),
            Drawing::OutsideTarget => {
                in_window(r) && target_rect.is_none_or(|t| t.is_empty() || !inside(r, &t))
            }
            Drawing::Unattributable => false,
        })
        .copied()
        .collect();
    let events = if events_count(o.tool) {
        event_summary(changes)
    } else {
        String::new()
    };
    if seen.is_empty() && !events.is_empty() {
        seen.push(format!("the application reported {events}"));
    }
    if seen.is_empty()
        && let Some(r) = bounds(&counted)
    {
        seen.push(format!(
            "the screen changed at [{}, {}, {}, {}]",
            r.left, r.top, r.right, r.bottom
        ));
    }
    if !seen.is_empty() {
        return said(EffectKind::Confirmed, seen.join("; "));
    }
    match o.settle {
        None | Some(SettleOutcome::Unsupported) => said(
            EffectKind::Unverifiable,
            "nothing compared changed and the screen was not watched".to_owned(),
        ),
        _ if rule == Drawing::Unattributable && !changes.drawn.is_empty() => {
            let r = bounds(&changes.drawn).unwrap_or_default();
            said(
                EffectKind::Unverifiable,
                format!(
                    "the screen changed at [{}, {}, {}, {}] but nothing that can be tied to it",
                    r.left, r.top, r.right, r.bottom
                ),
            )
        }
        _ => said(EffectKind::NoneObserved, "nothing changed".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{AppEvent, ControlHandle};
    use serde_json::json;

    fn node(name: &str, ty: &str, rect: Rect) -> RawNode {
        RawNode {
            handle: ControlHandle(name.into()),
            parent: None,
            depth: 1,
            name: name.into(),
            control_type: ty.into(),
            rect,
            enabled: true,
            visible: true,
            automation_id: String::new(),
            value: String::new(),
        }
    }

    fn window(handle: u64, title: &str) -> WindowInfo {
        WindowInfo {
            handle,
            title: title.into(),
            process_name: "app".into(),
            pid: Some(1),
            rect: Rect::from_xywh(0, 0, 800, 600),
            class_name: String::new(),
        }
    }

    fn entry_facts(text: &str) -> ControlFacts {
        ControlFacts {
            value: Some(text.into()),
            focused: Some(true),
            enabled: true,
            ..ControlFacts::default()
        }
    }

    fn observed(tool: Tool, params: Value, target: Option<Watched>) -> Observed {
        let w = window(7, "Open");
        let windows = Some(vec![(7, "Open".to_owned())]);
        Observed {
            tool,
            what: what(tool, &params, target.as_ref().map(|t| &t.node), Some(&w)),
            before: Before {
                windows: windows.clone(),
                active: Some(7),
            },
            after: Before {
                windows,
                active: Some(7),
            },
            target_after: target
                .as_ref()
                .map(|t| Some(t.before.clone().unwrap_or_default())),
            target,
            window: Some(w),
            selected: None,
            changes: Some(Changes::default()),
            settle: Some(SettleOutcome::NoChange),
        }
    }

    fn location() -> Watched {
        Watched {
            node: node("Location", "Edit", Rect::from_xywh(100, 50, 300, 30)),
            before: Some(entry_facts("/tmp/a.txt")),
        }
    }

    #[test]
    fn enter_in_a_field_that_ignores_it_is_none_observed_even_with_its_caret_drawn() {
        let mut o = observed(
            Tool::KeyboardInput,
            json!({"keys": "{ENTER}"}),
            Some(location()),
        );
        // The caret blinking inside the field is drawing, but the field's own.
        o.changes = Some(Changes {
            events: vec![],
            drawn: vec![Rect::from_xywh(110, 55, 2, 18)],
        });
        o.settle = Some(SettleOutcome::Settled);
        let e = judge(&o);
        assert_eq!(e.kind, EffectKind::NoneObserved, "{e:?}");
        assert_eq!(
            e.description,
            "keys '{ENTER}' in 'Location': nothing changed"
        );
    }

    #[test]
    fn a_changed_text_a_toggled_box_and_a_new_window_are_confirmed() {
        let mut o = observed(Tool::SetEditText, json!({"text": "x"}), Some(location()));
        o.target_after = Some(Some(entry_facts("/tmp/b.txt")));
        let e = judge(&o);
        assert_eq!(e.kind, EffectKind::Confirmed);
        assert_eq!(
            e.description,
            "text set in 'Location': 'Location' text '/tmp/a.txt' → '/tmp/b.txt'"
        );

        let bold = Watched {
            node: node("Bold", "CheckBox", Rect::from_xywh(10, 10, 20, 20)),
            before: Some(ControlFacts {
                checked: Some(false),
                enabled: true,
                ..ControlFacts::default()
            }),
        };
        let mut o = observed(Tool::ClickInput, json!({}), Some(bold));
        o.target_after = Some(Some(ControlFacts {
            checked: Some(true),
            enabled: true,
            ..ControlFacts::default()
        }));
        assert_eq!(
            judge(&o).description,
            "click on 'Bold' (CheckBox): 'Bold' unchecked → checked"
        );

        let mut o = observed(Tool::LaunchApplication, json!({"name": "mousepad"}), None);
        o.after.windows = Some(vec![
            (7, "Open".into()),
            (9, "Untitled 1 - Mousepad".into()),
        ]);
        o.after.active = Some(9);
        let e = judge(&o);
        assert_eq!(e.kind, EffectKind::Confirmed);
        assert_eq!(
            e.description,
            "launch of 'mousepad': window 'Untitled 1 - Mousepad' opened; 'Untitled 1 - Mousepad' \
             is now the active window"
        );
    }

    #[test]
    fn a_gone_target_and_events_elsewhere_confirm_a_click() {
        let save = Watched {
            node: node("Save", "Button", Rect::from_xywh(500, 500, 60, 30)),
            before: Some(ControlFacts {
                enabled: true,
                ..ControlFacts::default()
            }),
        };
        let mut o = observed(Tool::ClickInput, json!({}), Some(save.clone()));
        o.target_after = Some(None);
        assert_eq!(
            judge(&o).description,
            "click on 'Save' (Button): 'Save' (Button) is gone"
        );
        let mut o = observed(Tool::ClickInput, json!({}), Some(save));
        o.changes = Some(Changes {
            events: vec![
                AppEvent {
                    app: ":1.5".into(),
                    kind: "property-change".into(),
                };
                2
            ],
            drawn: vec![],
        });
        assert_eq!(
            judge(&o).description,
            "click on 'Save' (Button): the application reported property-change ×2"
        );
    }

    #[test]
    fn drawing_counts_only_where_it_can_be_tied_to_the_action() {
        // Keys to whatever has the focus: drawing is not enough to confirm them.
        let mut o = observed(Tool::KeyboardInput, json!({"keys": "x"}), None);
        o.changes = Some(Changes {
            events: vec![],
            drawn: vec![Rect::from_xywh(10, 10, 100, 20)],
        });
        let e = judge(&o);
        assert_eq!(e.kind, EffectKind::Unverifiable, "{e:?}");
        // A click at a point: drawing in the window confirms it.
        let mut o = observed(Tool::ClickOnCoordinates, json!({}), None);
        o.changes = Some(Changes {
            events: vec![],
            drawn: vec![Rect::from_xywh(10, 10, 100, 20)],
        });
        assert_eq!(
            judge(&o).description,
            "click at a point: the screen changed at [10, 10, 110, 30]"
        );
        // A backend that sees no changes: unverifiable unless something compared changed.
        let mut o = observed(Tool::ClickOnCoordinates, json!({}), None);
        o.changes = None;
        o.settle = None;
        assert_eq!(judge(&o).kind, EffectKind::Unverifiable);
    }

    #[test]
    fn selecting_the_window_that_is_active_afterwards_is_confirmed() {
        let mut o = observed(Tool::SelectApplicationWindow, json!({}), None);
        o.selected = Some(window(7, "Open"));
        assert_eq!(
            judge(&o).description,
            "selection of 'Open': 'Open' is the active window (it already was)"
        );
        o.after.active = Some(3);
        assert_eq!(judge(&o).kind, EffectKind::Confirmed);
    }
}
