//! Observing the screen: screenshots of the desktop or of the selected window, and the selected window's
//! accessibility tree. Each tells when what it saw is a dialog of the application in front of the
//! selected window rather than the window itself.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Cx, Kind, Output, ToolDef, ToolError, yes};
use crate::backend::{TreeLimits, WindowInfo};
use crate::encode::encode;
use crate::executor::Shot;
use crate::geometry::Rect;
use crate::tree::nested_json;

/// Metadata of the screenshot; the encoded image itself is in Result.images[0].
#[derive(Debug, Serialize, JsonSchema)]
pub struct ImageMeta {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The encoding.
    #[schemars(extend("enum" = ["png", "jpeg"]))]
    pub format: &'static str,
    /// Screen `[x, y]` of pixel (0, 0).
    pub origin: [i32; 2],
    /// Screen pixels per image pixel.
    pub scale: f64,
}

/// `capture_desktop_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureDesktopScreenshot {
    /// Capture every monitor into one image (true) or only the primary one.
    #[serde(default = "yes")]
    pub all_screens: bool,
}

impl ToolDef for CaptureDesktopScreenshot {
    const NAME: &'static str = "capture_desktop_screenshot";
    const DESCRIPTION: &'static str =
        "Screenshot of the whole desktop (all monitors or the primary one).";
    const KIND: Kind = Kind::Observation;
    type Output = ImageMeta;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let screens = cx.exec.backend.screens().await?;
        let region = if self.all_screens {
            screens
                .iter()
                .fold(Rect::default(), |acc, s| acc.union(&s.rect))
        } else {
            screens
                .iter()
                .find(|s| s.primary)
                .or(screens.first())
                .map(|s| s.rect)
                .unwrap_or_default()
        };
        cx.screenshot(region).await
    }
}

/// `capture_window_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureWindowScreenshot {}

impl ToolDef for CaptureWindowScreenshot {
    const NAME: &'static str = "capture_window_screenshot";
    const DESCRIPTION: &'static str = "Screenshot of the selected application window.";
    const KIND: Kind = Kind::Observation;
    type Output = ImageMeta;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected_fresh().await?;
        // A dialog of the same application in front of the selected window is what the user sees (and
        // what the control listing describes): capture that.
        let front = cx.front_window(&w).await;
        let mut out = cx.screenshot(front.rect).await?;
        out.warnings = front_window_warning(&w, &front.title);
        Ok(out)
    }
}

/// `get_ui_tree`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetUiTree {
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

/// The selected window's accessibility tree.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UiTree {
    /// The window's node, nested: `{name, type, rect, enabled, visible, value (when not empty),
    /// children}`.
    pub root: Value,
    /// How many nodes were read.
    pub node_count: usize,
    /// Whether a limit stopped the walk.
    pub truncated: bool,
}

impl ToolDef for GetUiTree {
    const NAME: &'static str = "get_ui_tree";
    const DESCRIPTION: &'static str = "The accessibility tree of the selected window, nested, within node, depth and time limits.";
    const KIND: Kind = Kind::Observation;
    type Output = UiTree;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected()?;
        let limits = &cx.exec.limits;
        let tree_limits = TreeLimits {
            max_nodes: self
                .max_nodes
                .unwrap_or(limits.max_tree_nodes)
                .min(limits.max_tree_nodes)
                .max(1) as usize,
            max_depth: self
                .max_depth
                .unwrap_or(limits.max_tree_depth)
                .min(limits.max_tree_depth),
            deadline: self
                .deadline_ms
                .map(|ms| (Instant::now() + Duration::from_millis(ms.into())).min(cx.deadline))
                .unwrap_or(cx.deadline),
            max_value_chars: limits.max_value_chars,
            bounds_of: None,
        };
        let tree = cx.exec.backend.control_tree(&w, &tree_limits).await?;
        let front = tree
            .nodes
            .first()
            .map(|n| n.name.as_str())
            .unwrap_or_default();
        let warnings = front_window_warning(&w, front);
        let result = UiTree {
            root: nested_json(&tree.nodes),
            node_count: tree.nodes.len(),
            truncated: tree.truncated,
        };
        Ok(Output::warned(result, warnings))
    }
}

impl Cx<'_> {
    /// A screenshot of `region` in the batch's encoding.
    async fn screenshot(&self, region: Rect) -> Result<Output<ImageMeta>, ToolError> {
        if region.is_empty() {
            return Err(ToolError::EmptyRegion);
        }
        let format = self.format;
        let cap = self.exec.backend.capture(region).await?;
        let (width, height, origin) = (cap.width, cap.height, cap.origin);
        let data = tokio::task::spawn_blocking(move || encode(&cap, format))
            .await
            .map_err(|_| ToolError::EncodeInterrupted)??;
        Ok(Output {
            result: ImageMeta {
                width,
                height,
                format: format.name(),
                origin: [origin.x, origin.y],
                scale: 1.0,
            },
            images: vec![Shot {
                format,
                data,
                width,
                height,
                origin,
                scale: 1.0,
            }],
            warnings: Vec::new(),
        })
    }

    /// The window of the selected window's application the user sees in front: the active window when
    /// it belongs to the same process (a dialog, a file chooser), else the selected window.
    async fn front_window(&self, selected: &WindowInfo) -> WindowInfo {
        let Some(active) = self.exec.backend.active_window() else {
            return selected.clone();
        };
        if active == selected.handle || selected.pid.is_none() {
            return selected.clone();
        }
        match self.exec.backend.windows().await {
            Ok(ws) => ws
                .into_iter()
                .find(|x| x.handle == active && x.pid == selected.pid)
                .unwrap_or_else(|| selected.clone()),
            Err(_) => selected.clone(),
        }
    }
}

/// Says so when what was observed is another window of the application (a dialog) than the selected
/// one, so the agent knows whose controls and pixels it got.
pub(crate) fn front_window_warning(selected: &WindowInfo, front: &str) -> Vec<String> {
    if front == selected.title {
        return Vec::new();
    }
    vec![format!(
        "the application's window '{front}' is in front of the selected window '{}'; observed '{front}'",
        selected.title
    )]
}

/// `wait_for_change`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForChange {
    /// Longest wait in milliseconds (bounded by the executor's maximum wait and the command deadline).
    pub timeout_ms: u32,
    /// After a change, also wait for the screen to settle (default true).
    #[serde(default = "yes")]
    pub settle: bool,
}

/// How `wait_for_change` ended.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChangeSeen {
    /// The desktop (the selected window, when one is selected) changed before the timeout.
    pub changed: bool,
    /// Milliseconds waited, settling included.
    pub waited_ms: u64,
    /// How changes were watched for: `events` (drawings and accessibility events) or `tree` (the
    /// window set and the selected window's tree compared at intervals).
    #[schemars(extend("enum" = ["events", "tree"]))]
    pub watched: &'static str,
}

impl ToolDef for WaitForChange {
    const NAME: &'static str = "wait_for_change";
    const DESCRIPTION: &'static str = "Wait until the selected window (else the desktop) changes, \
                                       animations aside, and settles, or the timeout passes.";
    const KIND: Kind = Kind::Observation;
    type Output = ChangeSeen;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let max = cx.exec.limits.max_wait;
        let asked = Duration::from_millis(self.timeout_ms.into());
        if asked > max {
            return Err(ToolError::invalid(
                Self::NAME,
                format!("timeout_ms must be at most {}", max.as_millis()),
            ));
        }
        // Done a moment before the command's deadline, so the wait's own result is what comes back.
        let end = cx
            .deadline
            .checked_sub(DEADLINE_MARGIN)
            .unwrap_or(cx.deadline);
        let until = (Instant::now() + asked).min(end);
        let window = cx.st.selected.clone();
        let seen = cx
            .exec
            .wait_for_change(window.as_ref(), until, self.settle)
            .await?;
        Ok(Output::from(ChangeSeen {
            changed: seen.changed,
            waited_ms: u64::try_from(seen.waited.as_millis()).unwrap_or(u64::MAX),
            watched: seen.watched.as_str(),
        }))
    }
}

/// How long before the command's deadline `wait_for_change` gives up.
const DEADLINE_MARGIN: Duration = Duration::from_millis(50);
