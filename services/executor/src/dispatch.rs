//! The tools themselves: each parses its typed parameters, applies the shared rules (ids, limits,
//! allow-list) and calls the backend. Implements the command layer the seeds' AppAgent and HostAgent
//! call (seed 000 "select_application_window", seed 001 "get_app_window_controls_target_info" and the
//! app actions).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::backend::{ActionKind, BackendError, MouseButton, RawNode, TreeLimits, WindowInfo};
use crate::encode::{Format, encode};
use crate::executor::{BatchOptions, DesktopState, Executor, Shot, ToolOutput};
use crate::geometry::{Point, Rect};
use crate::keys::parse_keys;
use crate::tools::{params as p, parse};
use crate::tree::{CONTROL_FIELDS, ControlListing, control_json, filter_with_paths, nested_json};
use ufo_common::names::names_match;

type ToolResult = Result<ToolOutput, String>;

fn be(e: BackendError) -> String {
    e.to_string()
}

fn ok(result: Value) -> ToolResult {
    Ok(ToolOutput {
        result,
        ..ToolOutput::default()
    })
}

fn window_json(id: Option<usize>, w: &WindowInfo) -> Value {
    json!({
        "id": id.map(|i| i.to_string()).unwrap_or_default(),
        "name": w.title,
        "kind": "APPLICATION",
        "type": "Window",
        "rect": w.rect.to_ltrb(),
        "process_name": w.process_name,
        "pid": w.pid,
        "handle": w.handle,
        "class_name": w.class_name,
    })
}

impl Executor {
    pub(crate) async fn run_tool(
        &self,
        st: &mut DesktopState,
        tool: &str,
        params: Value,
        opts: BatchOptions,
    ) -> ToolResult {
        let deadline = Instant::now() + opts.deadline;
        match tool {
            "capture_desktop_screenshot" => {
                let a: p::CaptureDesktop = parse(tool, params)?;
                let screens = self.backend.screens().await.map_err(be)?;
                let region = if a.all_screens {
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
                self.screenshot(region, opts.format).await
            }
            "capture_window_screenshot" => {
                let _: p::NoParams = parse(tool, params)?;
                let w = self.selected_fresh(st).await?;
                // A dialog of the same application in front of the selected window is what the user
                // sees (and what the control listing describes): capture that.
                let front = self.front_window(&w).await;
                let mut out = self.screenshot(front.rect, opts.format).await?;
                out.warnings = front_window_warning(&w, &front.title);
                Ok(out)
            }
            "get_desktop_app_target_info" => {
                let a: p::DesktopApps = parse(tool, params)?;
                let mut windows = self.backend.windows().await.map_err(be)?;
                if a.remove_empty {
                    windows.retain(|w| !w.title.trim().is_empty());
                }
                let list = windows
                    .iter()
                    .enumerate()
                    .map(|(i, w)| window_json(Some(i), w))
                    .collect();
                st.windows = windows;
                ok(Value::Array(list))
            }
            "get_app_window_info" => {
                let _: p::NoParams = parse(tool, params)?;
                let w = self.selected_fresh(st).await?;
                ok(window_json(None, &w))
            }
            "get_app_window_controls_target_info" => {
                let a: p::WindowControls = parse(tool, params)?;
                if let Some(bad) = a
                    .field_list
                    .iter()
                    .find(|f| !CONTROL_FIELDS.contains(&f.as_str()))
                {
                    return Err(format!(
                        "invalid parameters for {tool}: unknown field '{bad}' in field_list; known fields: {}",
                        CONTROL_FIELDS.join(", ")
                    ));
                }
                // Fresh: the title may have changed (a saved document), and the warning compares it.
                let w = self.selected_fresh(st).await?;
                let listing = self.list_controls(st, deadline).await?;
                let out = listing
                    .controls
                    .iter()
                    .enumerate()
                    .map(|(i, n)| control_json(i, n, listing.paths.get(i), &a.field_list))
                    .collect();
                Ok(ToolOutput {
                    result: Value::Array(out),
                    images: Vec::new(),
                    warnings: front_window_warning(&w, &listing.front),
                })
            }
            "get_ui_tree" => {
                let a: p::UiTree = parse(tool, params)?;
                let w = self.selected(st)?;
                let limits = TreeLimits {
                    max_nodes: a
                        .max_nodes
                        .unwrap_or(self.limits.max_tree_nodes)
                        .min(self.limits.max_tree_nodes)
                        .max(1) as usize,
                    max_depth: a
                        .max_depth
                        .unwrap_or(self.limits.max_tree_depth)
                        .min(self.limits.max_tree_depth),
                    deadline: a
                        .deadline_ms
                        .map(|ms| (Instant::now() + Duration::from_millis(ms.into())).min(deadline))
                        .unwrap_or(deadline),
                    max_value_chars: self.limits.max_value_chars,
                    bounds_of: None,
                };
                let tree = self.backend.control_tree(&w, &limits).await.map_err(be)?;
                let front = tree
                    .nodes
                    .first()
                    .map(|n| n.name.clone())
                    .unwrap_or_default();
                Ok(ToolOutput {
                    images: Vec::new(),
                    warnings: front_window_warning(&w, &front),
                    result: json!({
                    "root": nested_json(&tree.nodes),
                    "node_count": tree.nodes.len(),
                    "truncated": tree.truncated,
                    }),
                })
            }
            "select_application_window" => {
                let a: p::SelectWindow = parse(tool, params)?;
                if st.windows.is_empty() {
                    st.windows = self.backend.windows().await.map_err(be)?;
                    st.windows.retain(|w| !w.title.trim().is_empty());
                }
                let idx =
                    a.id.0
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|&i| i < st.windows.len());
                let Some(idx) = idx else {
                    return Err(format!(
                        "unknown window id '{}'; valid ids are {}",
                        a.id.0,
                        match st.windows.len() {
                            0 => "none (no application windows)".to_owned(),
                            1 => "0".to_owned(),
                            n => format!("0-{}", n - 1),
                        }
                    ));
                };
                let target = st.windows[idx].clone();
                let mut warnings = Vec::new();
                if let Some(name) = a
                    .name
                    .as_deref()
                    .filter(|n| !n.is_empty() && !names_match(n, &target.title))
                {
                    warnings.push(format!(
                        "window {} is named '{}', not '{name}'; selected window {}",
                        a.id.0, target.title, a.id.0
                    ));
                }
                let w = self.backend.activate(&target).await.map_err(be)?;
                st.selected = Some(w.clone());
                st.listing = None;
                Ok(ToolOutput {
                    result: json!({"root_name": w.process_name, "window": window_json(Some(idx), &w)}),
                    images: Vec::new(),
                    warnings,
                })
            }
            "launch_application" => {
                let a: p::Launch = parse(tool, params)?;
                self.launch(&a.name, &a.args)
            }
            "close_application" => {
                let _: p::NoParams = parse(tool, params)?;
                let w = self.selected(st)?;
                self.backend.close(&w).await.map_err(be)?;
                st.selected = None;
                st.listing = None;
                st.windows.clear();
                ok(json!({"closed": window_json(None, &w)}))
            }
            "click_input" => {
                let a: p::ClickInput = parse(tool, params)?;
                let kind = if a.button == MouseButton::Left && !a.double {
                    ActionKind::Click
                } else {
                    ActionKind::Pointer
                };
                let (node, warnings) = self
                    .actionable(st, &a.id.0, a.name.as_deref(), deadline, kind)
                    .await?;
                let method = self
                    .backend
                    .click_control(&node, a.button, a.double)
                    .await
                    .map_err(be)?;
                Ok(action_output(&a.id.0, &node, &method, warnings))
            }
            "click_on_coordinates" => {
                let a: p::ClickCoordinates = parse(tool, params)?;
                let w = self.selected_fresh(st).await?;
                let point = fraction_point(&w.rect, a.x, a.y, tool)?;
                self.backend
                    .click_at(point, a.button, a.double)
                    .await
                    .map_err(be)?;
                ok(json!({"point": [point.x, point.y]}))
            }
            "drag_on_coordinates" => {
                let a: p::DragCoordinates = parse(tool, params)?;
                let w = self.selected_fresh(st).await?;
                let from = fraction_point(&w.rect, a.start_x, a.start_y, tool)?;
                let to = fraction_point(&w.rect, a.end_x, a.end_y, tool)?;
                self.backend.drag(from, to, a.button).await.map_err(be)?;
                ok(json!({"from": [from.x, from.y], "to": [to.x, to.y]}))
            }
            "set_edit_text" => {
                let a: p::SetEditText = parse(tool, params)?;
                too_long(tool, "text", &a.text, self.limits.max_text_bytes)?;
                let (node, warnings) = self
                    .actionable(st, &a.id.0, a.name.as_deref(), deadline, ActionKind::Text)
                    .await?;
                let method = self
                    .backend
                    .enter_text(&node, &a.text, a.clear_current_text)
                    .await
                    .map_err(be)?;
                Ok(action_output(&a.id.0, &node, &method, warnings))
            }
            "keyboard_input" => {
                let a: p::KeyboardInput = parse(tool, params)?;
                too_long(tool, "keys", &a.keys, self.limits.max_text_bytes)?;
                let keys = parse_keys(&a.keys, self.limits.max_key_strokes)
                    .map_err(|e| format!("invalid parameters for {tool}: keys: {e}"))?;
                let mut out = ToolOutput::default();
                if let Some(id) = &a.id {
                    let (node, warnings) = self
                        .actionable(st, &id.0, a.name.as_deref(), deadline, ActionKind::Pointer)
                        .await?;
                    if a.control_focus {
                        self.backend.focus_control(&node).await.map_err(be)?;
                    }
                    out = action_output(&id.0, &node, "keys", warnings);
                }
                self.backend.send_keys(&keys).await.map_err(be)?;
                Ok(out)
            }
            "wheel_mouse_input" => {
                let a: p::WheelMouse = parse(tool, params)?;
                if a.wheel_dist.unsigned_abs() > 100 {
                    return Err(format!(
                        "invalid parameters for {tool}: wheel_dist must be within -100..=100"
                    ));
                }
                let (node, warnings) = self
                    .actionable(
                        st,
                        &a.id.0,
                        a.name.as_deref(),
                        deadline,
                        ActionKind::Pointer,
                    )
                    .await?;
                let method = self
                    .backend
                    .scroll_control(&node, a.wheel_dist)
                    .await
                    .map_err(be)?;
                Ok(action_output(&a.id.0, &node, &method, warnings))
            }
            "texts" => {
                let a: p::Texts = parse(tool, params)?;
                let (node, warnings) = self
                    .control(st, &a.id.0, a.name.as_deref(), deadline)
                    .await?;
                let text = self.backend.read_text(&node).await.map_err(be)?;
                Ok(ToolOutput {
                    result: json!(text),
                    images: Vec::new(),
                    warnings,
                })
            }
            "wait" => {
                let a: p::Wait = parse(tool, params)?;
                if !a.seconds.is_finite()
                    || a.seconds < 0.0
                    || a.seconds > self.limits.max_wait.as_secs_f64()
                {
                    return Err(format!(
                        "invalid parameters for {tool}: seconds must be between 0 and {}",
                        self.limits.max_wait.as_secs_f64()
                    ));
                }
                let d = Duration::from_secs_f64(a.seconds);
                tokio::time::sleep(d).await;
                ok(json!({"waited_ms": d.as_millis() as u64}))
            }
            "summary" => {
                let a: p::Summary = parse(tool, params)?;
                too_long(tool, "text", &a.text, self.limits.max_summary_bytes)?;
                ok(json!(a.text))
            }
            other => Err(format!(
                "unknown tool '{other}'; known tools: {}",
                crate::tools::registry()
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    fn selected(&self, st: &DesktopState) -> Result<WindowInfo, String> {
        st.selected.clone().ok_or_else(|| {
            "no application window is selected; call select_application_window first".to_owned()
        })
    }

    /// The selected window with its current bounds (it may have moved since selection).
    async fn selected_fresh(&self, st: &mut DesktopState) -> Result<WindowInfo, String> {
        let w = self.selected(st)?;
        let now = self.backend.windows().await.map_err(be)?;
        match now.into_iter().find(|x| x.handle == w.handle) {
            Some(fresh) => {
                st.selected = Some(fresh.clone());
                Ok(fresh)
            }
            None => {
                st.selected = None;
                st.listing = None;
                Err(format!(
                    "the selected window '{}' no longer exists",
                    w.title
                ))
            }
        }
    }

    /// The window of the selected window's application the user sees in front: the active window when
    /// it belongs to the same process (a dialog, a file chooser), else the selected window.
    async fn front_window(&self, selected: &WindowInfo) -> WindowInfo {
        let Some(active) = self.backend.active_window() else {
            return selected.clone();
        };
        if active == selected.handle || selected.pid.is_none() {
            return selected.clone();
        }
        match self.backend.windows().await {
            Ok(ws) => ws
                .into_iter()
                .find(|x| x.handle == active && x.pid == selected.pid)
                .unwrap_or_else(|| selected.clone()),
            Err(_) => selected.clone(),
        }
    }

    async fn list_controls<'s>(
        &self,
        st: &'s mut DesktopState,
        deadline: Instant,
    ) -> Result<&'s ControlListing, String> {
        let w = self.selected(st)?;
        let limits = TreeLimits {
            max_nodes: self.limits.max_tree_nodes as usize,
            max_depth: self.limits.max_tree_depth,
            deadline,
            max_value_chars: self.limits.max_value_chars,
            // The filter keeps visible controls of these types with an area; unnamed fields are named
            // after the labels beside them: no other node's bounds are needed.
            bounds_of: Some(
                self.limits
                    .control_types
                    .iter()
                    .map(String::as_str)
                    .chain(crate::labels::BOUNDS_USED.iter().copied())
                    .map(str::to_owned)
                    .collect(),
            ),
        };
        let tree = self.backend.control_tree(&w, &limits).await.map_err(be)?;
        let (controls, paths) = filter_with_paths(&tree, &self.limits.control_types);
        let listing = st.listing.insert(ControlListing {
            window: w.handle,
            controls,
            paths,
            front: tree
                .nodes
                .first()
                .map(|n| n.name.clone())
                .unwrap_or_default(),
        });
        Ok(listing)
    }

    /// The control an id names in the current listing (listing first when there is none).
    async fn control(
        &self,
        st: &mut DesktopState,
        id: &str,
        name: Option<&str>,
        deadline: Instant,
    ) -> Result<(RawNode, Vec<String>), String> {
        let w = self.selected(st)?;
        let listing = match &st.listing {
            Some(l) if l.window == w.handle => l,
            _ => self.list_controls(st, deadline).await?,
        };
        let (node, warning) = listing.resolve(id, name).map_err(|e| e.to_string())?;
        Ok((node.clone(), warning.into_iter().collect()))
    }

    /// A control that can be acted on now: it exists, is enabled and visible (read live before an
    /// action of `kind`, see [`crate::backend::Backend::action_state`]).
    async fn actionable(
        &self,
        st: &mut DesktopState,
        id: &str,
        name: Option<&str>,
        deadline: Instant,
        kind: ActionKind,
    ) -> Result<(RawNode, Vec<String>), String> {
        let (mut node, warnings) = self.control(st, id, name, deadline).await?;
        let live = self
            .backend
            .action_state(&node, kind)
            .await
            .map_err(|e| match e {
                BackendError::Gone(_) => format!(
                    "control {id} '{}' no longer exists; list the controls again",
                    node.name
                ),
                other => other.to_string(),
            })?;
        if !live.enabled {
            return Err(format!(
                "control {id} '{}' ({}) is disabled",
                node.name, node.control_type
            ));
        }
        if !live.visible || live.rect.is_empty() {
            return Err(format!(
                "control {id} '{}' ({}) is not visible",
                node.name, node.control_type
            ));
        }
        node.rect = live.rect;
        Ok((node, warnings))
    }

    async fn screenshot(&self, region: Rect, format: Format) -> ToolResult {
        if region.is_empty() {
            return Err("nothing to capture: the region is empty".to_owned());
        }
        let cap = self.backend.capture(region).await.map_err(be)?;
        let (w, h, origin) = (cap.width, cap.height, cap.origin);
        let data = tokio::task::spawn_blocking(move || encode(&cap, format))
            .await
            .map_err(|_| "screenshot encoding was interrupted".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(ToolOutput {
            result: json!({
                "width": w, "height": h, "format": format.name(),
                "origin": [origin.x, origin.y], "scale": 1.0,
            }),
            images: vec![Shot {
                format,
                data,
                width: w,
                height: h,
                origin,
                scale: 1.0,
            }],
            warnings: Vec::new(),
        })
    }
}

/// Says so when what was observed is another window of the application (a dialog) than the selected
/// one, so the agent knows whose controls and pixels it got.
fn front_window_warning(selected: &WindowInfo, front: &str) -> Vec<String> {
    if front == selected.title {
        return Vec::new();
    }
    vec![format!(
        "the application's window '{front}' is in front of the selected window '{}'; observed '{front}'",
        selected.title
    )]
}

/// Refuses a text parameter longer than `max` bytes, naming it.
fn too_long(tool: &str, field: &str, text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        return Err(format!(
            "invalid parameters for {tool}: {field} is {} bytes, more than the limit of {max}",
            text.len()
        ));
    }
    Ok(())
}

fn fraction_point(rect: &Rect, x: f64, y: f64, tool: &str) -> Result<Point, String> {
    let ok = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
    if !ok(x) || !ok(y) {
        return Err(format!(
            "invalid parameters for {tool}: coordinates are fractions of the window and must be within 0.0..=1.0"
        ));
    }
    if rect.is_empty() {
        return Err("the selected window has no area".to_owned());
    }
    Ok(rect.point_at_fraction(x, y))
}

fn action_output(id: &str, node: &RawNode, method: &str, warnings: Vec<String>) -> ToolOutput {
    ToolOutput {
        result: json!({
            "control": {"id": id, "name": node.name, "type": node.control_type, "rect": node.rect.to_ltrb()},
            "method": method,
        }),
        images: Vec::new(),
        warnings,
    }
}
