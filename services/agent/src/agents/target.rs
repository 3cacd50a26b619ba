//! Targets the agents can select: application windows, configured third-party agents and UI controls, and
//! the registry giving them the sequential labels the LLM chooses from (seed 000, "Target Registry").

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The largest screen coordinate taken as a position (far beyond any real desktop).
pub const MAX_COORDINATE: i32 = 1 << 20;

/// A rectangle in screen coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rect {
    /// Left edge.
    pub left: i32,
    /// Top edge.
    pub top: i32,
    /// Right edge (exclusive).
    pub right: i32,
    /// Bottom edge (exclusive).
    pub bottom: i32,
}

impl Rect {
    /// A rectangle from its edges.
    pub const fn new(left: i32, top: i32, right: i32, bottom: i32) -> Self {
        Self {
            left,
            top,
            right,
            bottom,
        }
    }

    /// Width (0 when inverted).
    pub fn width(&self) -> i32 {
        (self.right - self.left).max(0)
    }

    /// Height (0 when inverted).
    pub fn height(&self) -> i32 {
        (self.bottom - self.top).max(0)
    }

    /// Area in square pixels.
    pub fn area(&self) -> i64 {
        i64::from(self.width()) * i64::from(self.height())
    }

    /// Centre point.
    pub fn center(&self) -> (i32, i32) {
        ((self.left + self.right) / 2, (self.top + self.bottom) / 2)
    }

    /// Parses `[l, t, r, b]`, `{left, top, right, bottom}` or `{x, y, width, height}`. A coordinate
    /// beyond ±[`MAX_COORDINATE`] is no position (AT-SPI reports `-2147483648` for controls it is not
    /// drawing; arithmetic on it overflows), so such a rectangle is none.
    pub fn from_json(v: &Value) -> Option<Self> {
        let n = |v: &Value| {
            v.as_f64()
                .filter(|f| f.abs() <= f64::from(MAX_COORDINATE))
                .map(|f| f.round() as i32)
        };
        match v {
            Value::Array(a) if a.len() == 4 => {
                Some(Self::new(n(&a[0])?, n(&a[1])?, n(&a[2])?, n(&a[3])?))
            }
            Value::Object(o) if o.contains_key("left") => Some(Self::new(
                n(o.get("left")?)?,
                n(o.get("top")?)?,
                n(o.get("right")?)?,
                n(o.get("bottom")?)?,
            )),
            Value::Object(o) if o.contains_key("width") => {
                let (x, y) = (n(o.get("x")?)?, n(o.get("y")?)?);
                Some(Self::new(
                    x,
                    y,
                    x + n(o.get("width")?)?,
                    y + n(o.get("height")?)?,
                ))
            }
            _ => None,
        }
    }
}

/// What a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TargetKind {
    /// A top-level application window.
    #[default]
    Application,
    /// A configured third-party agent (no window).
    ThirdPartyAgent,
    /// A UI control inside a window.
    Control,
}

/// Where a control came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ControlSource {
    /// The accessibility API (UIA / AT-SPI) through the executor.
    #[default]
    Accessibility,
    /// A visual-grounding model; such controls have no executor id and are acted on by coordinates.
    Grounding,
}

/// One selectable target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// The label the LLM sees and answers with (assigned by a registry or the annotation).
    pub label: String,
    /// The executor's id for it (empty for grounding-only controls and third-party agents).
    pub id: String,
    /// Window title, control name or agent name.
    pub name: String,
    /// Kind of target.
    pub kind: TargetKind,
    /// Control type or window class, e.g. `Button`, `Edit`, `ThirdPartyAgent`.
    #[serde(rename = "type")]
    pub control_type: String,
    /// Screen rectangle.
    pub rect: Option<Rect>,
    /// Whether it accepts input.
    pub enabled: bool,
    /// Where it came from.
    pub source: ControlSource,
    /// Anything else the executor reported (process name, automation id, ...).
    pub extra: Map<String, Value>,
}

impl TargetInfo {
    /// Parses an executor entry, lenient about spellings (`type`/`control_type`, numeric ids).
    pub fn from_json(v: &Value, kind: TargetKind) -> Option<Self> {
        let o = v.as_object()?;
        let text = |k: &str| -> Option<String> {
            match o.get(k)? {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let known = [
            "id",
            "name",
            "type",
            "control_type",
            "rect",
            "enabled",
            "kind",
        ];
        Some(Self {
            label: String::new(),
            id: text("id")?,
            name: text("name").or_else(|| text("title")).unwrap_or_default(),
            kind,
            control_type: text("type")
                .or_else(|| text("control_type"))
                .unwrap_or_default(),
            rect: o.get("rect").and_then(Rect::from_json),
            enabled: o.get("enabled").and_then(Value::as_bool).unwrap_or(true),
            source: ControlSource::Accessibility,
            extra: o
                .iter()
                .filter(|(k, _)| !known.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }

    /// A configured third-party agent.
    pub fn third_party(name: &str) -> Self {
        Self {
            label: String::new(),
            id: String::new(),
            name: name.to_owned(),
            kind: TargetKind::ThirdPartyAgent,
            control_type: "ThirdPartyAgent".into(),
            rect: None,
            enabled: true,
            source: ControlSource::Accessibility,
            extra: Map::new(),
        }
    }

    /// The process or application name an AppAgent is keyed by: the executor's `process_name` /
    /// `app_root` when reported, else the window title (a window whose process is unknown — no
    /// `_NET_WM_PID`, as Tk's — reports an empty one).
    pub fn app_root(&self) -> String {
        ["app_root", "process_name", "application"]
            .iter()
            .find_map(|k| {
                self.extra
                    .get(*k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            })
            .map_or_else(|| self.name.clone(), str::to_owned)
    }
}

/// The targets of one step, labelled `0, 1, 2, …` in registration order: windows first, then the
/// configured third-party agents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetRegistry {
    targets: Vec<TargetInfo>,
}

impl TargetRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers targets, giving each the next sequential label.
    pub fn register(&mut self, targets: impl IntoIterator<Item = TargetInfo>) {
        for mut t in targets {
            t.label = self.targets.len().to_string();
            self.targets.push(t);
        }
    }

    /// The target with this label.
    pub fn get(&self, label: &str) -> Option<&TargetInfo> {
        self.targets.iter().find(|t| t.label == label)
    }

    /// All targets in label order.
    pub fn all(&self) -> &[TargetInfo] {
        &self.targets
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registry_labels_windows_then_agents_sequentially() {
        let mut r = TargetRegistry::new();
        let w = |id: &str, n: &str| {
            TargetInfo::from_json(
                &json!({"id": id, "name": n, "type": "Window"}),
                TargetKind::Application,
            )
            .unwrap()
        };
        r.register([w("0x41", "Editor"), w("0x42", "Browser")]);
        r.register([TargetInfo::third_party("HardwareAgent")]);
        let labels: Vec<_> = r
            .all()
            .iter()
            .map(|t| (t.label.as_str(), t.name.as_str()))
            .collect();
        assert_eq!(
            labels,
            [("0", "Editor"), ("1", "Browser"), ("2", "HardwareAgent")]
        );
        assert_eq!(r.get("2").unwrap().kind, TargetKind::ThirdPartyAgent);
        assert_eq!(r.get("0").unwrap().id, "0x41");
    }

    #[test]
    fn parses_rect_spellings_and_numeric_ids() {
        let t = TargetInfo::from_json(
            &json!({"id": 7, "name": "OK", "control_type": "Button", "rect": {"x": 1, "y": 2, "width": 3, "height": 4}, "enabled": false}),
            TargetKind::Control,
        )
        .unwrap();
        assert_eq!(t.id, "7");
        assert_eq!(t.rect, Some(Rect::new(1, 2, 4, 6)));
        assert!(!t.enabled);
        assert_eq!(
            Rect::from_json(&json!([1, 2, 3, 4])),
            Some(Rect::new(1, 2, 3, 4))
        );
    }

    #[test]
    fn a_control_at_the_hidden_sentinel_has_no_rectangle() {
        // What AT-SPI reports for a control it is not drawing (seen in a gtk3-widget-factory page
        // switch); the mark and pixel arithmetic on it overflowed and panicked the agent.
        let hidden = json!([
            -2147483648i64,
            -2147483648i64,
            -2147483600i64,
            -2147483620i64
        ]);
        assert_eq!(Rect::from_json(&hidden), None);
        let t = TargetInfo::from_json(
            &json!({"id": "3", "name": "row", "type": "ListItem", "rect": hidden}),
            TargetKind::Control,
        )
        .unwrap();
        assert_eq!(t.rect, None);
        assert_eq!(
            Rect::from_json(&json!([-5, 0, 1_048_576, 10])),
            Some(Rect::new(-5, 0, 1_048_576, 10))
        );
    }
}
