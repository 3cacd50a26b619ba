//! The AppAgent's actions in the selected window: clicking a listed control or a point, dragging, setting
//! text, typing keys, scrolling; and the plan's pacing steps (`wait`, `summary`). An action on a control
//! reads its state live first (it must exist, be enabled and visible) and reports how it was delivered.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::controls::Target;
use super::{Cx, Id, Kind, Output, ToolDef, ToolError, left, yes};
use crate::backend::{ActionKind, MouseButton};
use crate::geometry::{Point, Rect};
use crate::keys::parse_keys;

/// The control an action was delivered to, and how.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Acted {
    /// The control.
    pub control: ActedControl,
    /// How the action was delivered (an accessibility action, synthesised input, ...).
    pub method: String,
}

/// The control an action was delivered to.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ActedControl {
    /// The id it was addressed by.
    pub id: String,
    /// Its accessible name.
    pub name: String,
    /// Its control type.
    #[serde(rename = "type")]
    pub control_type: String,
    /// `[left, top, right, bottom]` in screen pixels, read just before the action.
    pub rect: [i32; 4],
}

impl Target {
    /// What acting on this control by `method` produced.
    fn acted(self, method: String) -> Output<Acted> {
        let control = ActedControl {
            id: self.id,
            name: self.node.name,
            control_type: self.node.control_type,
            rect: self.node.rect.to_ltrb(),
        };
        Output::warned(Acted { control, method }, self.warnings)
    }
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

impl ToolDef for ClickInput {
    const NAME: &'static str = "click_input";
    const DESCRIPTION: &'static str = "Click a control by id.";
    const KIND: Kind = Kind::Action;
    type Output = Acted;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let kind = if self.button == MouseButton::Left && !self.double {
            ActionKind::Click
        } else {
            ActionKind::Pointer
        };
        let target = cx.actionable(&self.id, self.name.as_deref(), kind).await?;
        let method = cx
            .exec
            .backend
            .click_control(&target.node, self.button, self.double)
            .await?;
        Ok(target.acted(method))
    }
}

/// A point of the selected window, in screen pixels.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Clicked {
    /// Screen `[x, y]` clicked.
    pub point: [i32; 2],
}

/// `click_on_coordinates`: a point given as fractions of the selected window.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickOnCoordinates {
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

impl ToolDef for ClickOnCoordinates {
    const NAME: &'static str = "click_on_coordinates";
    const DESCRIPTION: &'static str =
        "Click at a point given as fractions (0..1) of the selected window.";
    const KIND: Kind = Kind::Action;
    type Output = Clicked;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected_fresh().await?;
        let point = fraction_point::<Self>(&w.rect, self.x, self.y)?;
        cx.exec
            .backend
            .click_at(point, self.button, self.double)
            .await?;
        Ok(Output::from(Clicked {
            point: [point.x, point.y],
        }))
    }
}

/// `drag_on_coordinates`: from one point to another, as fractions of the selected window.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DragOnCoordinates {
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

/// Where a drag went, in screen pixels.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Dragged {
    /// Screen `[x, y]` where the button went down.
    pub from: [i32; 2],
    /// Screen `[x, y]` where it was released.
    pub to: [i32; 2],
}

impl ToolDef for DragOnCoordinates {
    const NAME: &'static str = "drag_on_coordinates";
    const DESCRIPTION: &'static str =
        "Drag between two points given as fractions (0..1) of the selected window.";
    const KIND: Kind = Kind::Action;
    type Output = Dragged;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected_fresh().await?;
        let from = fraction_point::<Self>(&w.rect, self.start_x, self.start_y)?;
        let to = fraction_point::<Self>(&w.rect, self.end_x, self.end_y)?;
        cx.exec.backend.drag(from, to, self.button).await?;
        Ok(Output::from(Dragged {
            from: [from.x, from.y],
            to: [to.x, to.y],
        }))
    }
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

impl ToolDef for SetEditText {
    const NAME: &'static str = "set_edit_text";
    const DESCRIPTION: &'static str = "Set the text of an editable control.";
    const KIND: Kind = Kind::Action;
    type Output = Acted;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        too_long::<Self>("text", &self.text, cx.exec.limits.max_text_bytes)?;
        let target = cx
            .actionable(&self.id, self.name.as_deref(), ActionKind::Text)
            .await?;
        let method = cx
            .exec
            .backend
            .enter_text(&target.node, &self.text, self.clear_current_text)
            .await?;
        Ok(target.acted(method))
    }
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

impl ToolDef for KeyboardInput {
    const NAME: &'static str = "keyboard_input";
    const DESCRIPTION: &'static str =
        "Type keys (pywinauto send_keys syntax) into a control or the focused window.";
    const KIND: Kind = Kind::Action;
    /// The control typed into; null when the keys went to the focused control.
    type Output = Option<Acted>;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        too_long::<Self>("keys", &self.keys, cx.exec.limits.max_text_bytes)?;
        let keys = parse_keys(&self.keys, cx.exec.limits.max_key_strokes)
            .map_err(|e| ToolError::invalid(Self::NAME, format!("keys: {e}")))?;
        let mut out = Output::from(None);
        if let Some(id) = &self.id {
            let target = cx
                .actionable(id, self.name.as_deref(), ActionKind::Pointer)
                .await?;
            if self.control_focus {
                cx.exec.backend.focus_control(&target.node).await?;
                cx.focused_before_keys(&target.node).await;
            }
            let acted = target.acted("keys".to_owned());
            out = Output::warned(Some(acted.result), acted.warnings);
        }
        let (remarks, restart) = cx
            .exec
            .send_keys_patiently(cx.st.selected.as_ref(), &keys, cx.deadline)
            .await?;
        if restart.is_some() && cx.exec.limits.effect_check {
            cx.st.unsettled = restart;
        }
        out.warnings.extend(remarks);
        Ok(out)
    }
}

/// `wheel_mouse_input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WheelMouseInput {
    /// The control to scroll over.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Wheel notches: positive scrolls up, negative scrolls down.
    pub wheel_dist: i32,
}

impl ToolDef for WheelMouseInput {
    const NAME: &'static str = "wheel_mouse_input";
    const DESCRIPTION: &'static str = "Scroll the mouse wheel over a control.";
    const KIND: Kind = Kind::Action;
    type Output = Acted;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        if self.wheel_dist.unsigned_abs() > 100 {
            return Err(ToolError::invalid(
                Self::NAME,
                "wheel_dist must be within -100..=100",
            ));
        }
        let target = cx
            .actionable(&self.id, self.name.as_deref(), ActionKind::Pointer)
            .await?;
        let method = cx
            .exec
            .backend
            .scroll_control(&target.node, self.wheel_dist)
            .await?;
        Ok(target.acted(method))
    }
}

/// `wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wait {
    /// Seconds to wait (bounded by the executor's configured maximum and the command deadline).
    pub seconds: f64,
}

/// How long `wait` waited.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Waited {
    /// Milliseconds.
    pub waited_ms: u64,
}

impl ToolDef for Wait {
    const NAME: &'static str = "wait";
    const DESCRIPTION: &'static str = "Wait a number of seconds.";
    const KIND: Kind = Kind::Inert;
    type Output = Waited;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let max = cx.exec.limits.max_wait.as_secs_f64();
        if !self.seconds.is_finite() || self.seconds < 0.0 || self.seconds > max {
            return Err(ToolError::invalid(
                Self::NAME,
                format!("seconds must be between 0 and {max}"),
            ));
        }
        let d = Duration::from_secs_f64(self.seconds);
        tokio::time::sleep(d).await;
        Ok(Output::from(Waited {
            waited_ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        }))
    }
}

/// `summary`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The text to echo back as the result.
    pub text: String,
}

impl ToolDef for Summary {
    const NAME: &'static str = "summary";
    const DESCRIPTION: &'static str = "Echo a summary text back as the result.";
    const KIND: Kind = Kind::Inert;
    type Output = String;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        too_long::<Self>("text", &self.text, cx.exec.limits.max_summary_bytes)?;
        Ok(Output::from(self.text))
    }
}

/// Refuses a text parameter of tool `T` longer than `max` bytes, naming it.
fn too_long<T: ToolDef>(field: &str, text: &str, max: usize) -> Result<(), ToolError> {
    if text.len() > max {
        return Err(ToolError::invalid(
            T::NAME,
            format!(
                "{field} is {} bytes, more than the limit of {max}",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// The screen point at fractions `x`, `y` of `rect`, for tool `T`.
fn fraction_point<T: ToolDef>(rect: &Rect, x: f64, y: f64) -> Result<Point, ToolError> {
    let ok = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
    if !ok(x) || !ok(y) {
        return Err(ToolError::invalid(
            T::NAME,
            "coordinates are fractions of the window and must be within 0.0..=1.0",
        ));
    }
    if rect.is_empty() {
        return Err(ToolError::NoArea);
    }
    Ok(rect.point_at_fraction(x, y))
}
