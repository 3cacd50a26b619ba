//! Typed parameters of every tool, named as in the reference implementation so prompts written for it
//! still fit. Unknown fields are rejected; the JSON schemas ListTools serves are derived from these types.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};

use crate::backend::MouseButton;

/// A control or window id as labelled on the screenshot; accepted as a string (`"12"`) or an integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id(pub String);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an id as a string like \"12\" or an integer")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id(v.to_owned()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Id {
    fn schema_name() -> Cow<'static, str> {
        "Id".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": ["string", "integer"],
            "description": "The id labelled on the screenshot, e.g. \"12\"."
        })
    }
}

fn yes() -> bool {
    true
}

fn left() -> MouseButton {
    MouseButton::Left
}

/// `capture_desktop_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureDesktop {
    /// Capture every monitor into one image (true) or only the primary one.
    #[serde(default = "yes")]
    pub all_screens: bool,
}

/// Tools without parameters (`capture_window_screenshot`, `get_app_window_info`, `close_application`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `get_desktop_app_target_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopApps {
    /// Leave out windows without a title.
    #[serde(default = "yes")]
    pub remove_empty: bool,
    /// Re-read the window list (it is always read fresh; accepted for compatibility).
    #[serde(default)]
    pub refresh_app_windows: bool,
}

/// `get_app_window_controls_target_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowControls {
    /// Fields each control carries (id, name, type, rect, enabled, visible, automation_id, kind, value,
    /// ancestors, sibling_index); empty means all.
    #[serde(default)]
    pub field_list: Vec<String>,
}

/// `get_ui_tree`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UiTree {
    /// Most nodes to return (capped by the executor's configured maximum).
    #[serde(default)]
    pub max_nodes: Option<u32>,
    /// Deepest level to return, the window being level 0 (capped by the configured maximum).
    #[serde(default)]
    pub max_depth: Option<u32>,
    /// Stop walking after this many milliseconds and return what was read, marked truncated.
    #[serde(default)]
    pub deadline_ms: Option<u32>,
}

/// `select_application_window`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectWindow {
    /// The window's id from get_desktop_app_target_info.
    pub id: Id,
    /// The window's name, checked against the id (a mismatch acts on the id and warns).
    #[serde(default)]
    pub name: Option<String>,
}

/// `launch_application`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// A program name from the executor's allow-list.
    pub name: String,
    /// Arguments, each an absolute path inside one of the executor's launch directories (passed
    /// resolved, without a shell); none when it declares no launch directory.
    #[serde(default)]
    pub args: Vec<String>,
}

/// `click_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickInput {
    /// The control's id.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Which button.
    #[serde(default = "left")]
    pub button: MouseButton,
    /// Double-click.
    #[serde(default)]
    pub double: bool,
}

/// `click_on_coordinates`: a point given as fractions of the selected window.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickCoordinates {
    /// Horizontal position, 0.0 (left edge) to 1.0 (right edge) of the window.
    pub x: f64,
    /// Vertical position, 0.0 (top edge) to 1.0 (bottom edge) of the window.
    pub y: f64,
    /// Which button.
    #[serde(default = "left")]
    pub button: MouseButton,
    /// Double-click.
    #[serde(default)]
    pub double: bool,
}

/// `drag_on_coordinates`: from one point to another, as fractions of the selected window.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DragCoordinates {
    /// Start, horizontal fraction 0.0..=1.0.
    pub start_x: f64,
    /// Start, vertical fraction 0.0..=1.0.
    pub start_y: f64,
    /// End, horizontal fraction 0.0..=1.0.
    pub end_x: f64,
    /// End, vertical fraction 0.0..=1.0.
    pub end_y: f64,
    /// Which button is held.
    #[serde(default = "left")]
    pub button: MouseButton,
}

/// `set_edit_text`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetEditText {
    /// The control's id.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
    /// The text to set.
    pub text: String,
    /// Replace the current text (true) or append to it.
    #[serde(default = "yes")]
    pub clear_current_text: bool,
}

/// `keyboard_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyboardInput {
    /// The control to type into (optional: without it keys go to the focused control).
    #[serde(default)]
    pub id: Option<Id>,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Keys in pywinauto send_keys syntax, e.g. "Hello{ENTER}", "^a", "{VK_CONTROL}c".
    pub keys: String,
    /// Focus the control before typing.
    #[serde(default = "yes")]
    pub control_focus: bool,
}

/// `wheel_mouse_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WheelMouse {
    /// The control to scroll over.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Wheel notches: positive scrolls up, negative scrolls down.
    pub wheel_dist: i32,
}

/// `texts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Texts {
    /// The control's id.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
}

/// `wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wait {
    /// Seconds to wait (bounded by the executor's configured maximum and the command deadline).
    pub seconds: f64,
}

/// `summary`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The text to echo back as the result.
    pub text: String,
}
