//! An in-process executor double for unit-level tests: windows with controls, the reference tool
//! vocabulary, the batch early-exit rule, and a log of every command received. Not a desktop: the real
//! Linux executor (AT-SPI under Xvfb) is what end-to-end tests use.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use image::{Rgb, RgbImage};
use serde_json::{Value, json};

use crate::agents::target::Rect;
use crate::dispatch::tools::{ExecutorCatalog, ToolSpec};
use crate::dispatch::{
    Command, CommandDispatcher, CommandResult, DispatchError, Effect, EffectKind, ResultStatus,
};
use crate::vision::Screenshot;

/// A control of a fake window.
#[derive(Debug, Clone)]
pub struct FakeControl {
    /// Executor id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Control type.
    pub control_type: String,
    /// Screen rectangle.
    pub rect: Rect,
    /// Accepts input.
    pub enabled: bool,
    /// Text content (edits).
    pub text: String,
    /// Every action on this control fails.
    pub fails: bool,
    /// Names of controls that become disabled when this one is clicked.
    pub disables_on_click: Vec<String>,
    /// Actions on it succeed and the executor sees nothing change (`effect: none_observed`), as a
    /// button whose effect is elsewhere or an entry that ignores a key.
    pub inert: bool,
}

impl FakeControl {
    /// An enabled control.
    pub fn new(id: &str, name: &str, control_type: &str, rect: Rect) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            control_type: control_type.into(),
            rect,
            enabled: true,
            text: String::new(),
            fails: false,
            disables_on_click: vec![],
            inert: false,
        }
    }
}

/// A fake top-level window.
#[derive(Debug, Clone)]
pub struct FakeWindow {
    /// Executor id.
    pub id: String,
    /// Title.
    pub name: String,
    /// Process name (the AppAgent key).
    pub process: String,
    /// Screen rectangle.
    pub rect: Rect,
    /// Controls.
    pub controls: Vec<FakeControl>,
}

#[derive(Debug, Default)]
struct State {
    windows: Vec<FakeWindow>,
    launchable: Vec<FakeWindow>,
    // Process names ever registered as launchable (the executor's allow-list).
    allowed: Vec<String>,
    active: Option<usize>,
    // Processes whose windows cannot be selected, with the error (a modal dialog in front).
    blocked: Vec<(String, String)>,
    log: Vec<Command>,
    // Encoded screenshots by (width, height, origin): the double should cost next to nothing.
    shots: std::collections::HashMap<(u32, u32, i32, i32), Screenshot>,
}

/// The executor double.
#[derive(Debug, Default)]
pub struct FakeDesktop {
    state: Mutex<State>,
}

fn cached_png(s: &mut State, w: u32, h: u32, origin: (i32, i32)) -> Screenshot {
    s.shots
        .entry((w, h, origin.0, origin.1))
        .or_insert_with(|| png(w, h, origin))
        .clone()
}

/// A plain `w`×`h` screenshot encoded as the executor encodes one by default (`ufo_executor::encode`:
/// 8-bit RGB, `Up` rows, zlib level 2), so what the agent decodes here costs what a real capture does.
fn png(w: u32, h: u32, origin: (i32, i32)) -> Screenshot {
    use image::ImageEncoder as _;
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let (w, h) = (w.max(1), h.max(1));
    let img = RgbImage::from_pixel(w, h, Rgb([235, 235, 235]));
    let mut bytes = Vec::new();
    let (width, height) =
        match PngEncoder::new_with_quality(&mut bytes, CompressionType::Level(2), FilterType::Up)
            .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
        {
            Ok(()) => (w, h),
            Err(_) => {
                bytes.clear();
                (0, 0)
            }
        };
    Screenshot {
        mime: "image/png".into(),
        bytes: bytes.into(),
        width,
        height,
        origin_x: origin.0,
        origin_y: origin.1,
        scale: 1.0,
    }
}

fn window_json(w: &FakeWindow) -> Value {
    json!({"id": w.id, "name": w.name, "type": "Window", "process_name": w.process,
           "rect": [w.rect.left, w.rect.top, w.rect.right, w.rect.bottom]})
}

impl FakeDesktop {
    /// A desktop with these windows open.
    pub fn new(windows: Vec<FakeWindow>) -> Self {
        Self {
            state: Mutex::new(State {
                windows,
                ..State::default()
            }),
        }
    }

    /// The tools this double answers, described as an executor's `ListTools` would (the parameter
    /// schemas list only the properties the double reads).
    pub fn tool_specs() -> Vec<ToolSpec> {
        use crate::dispatch::ToolType::{Action, DataCollection};
        let spec = |name: &str, kind, props: &[&str], required: &[&str]| ToolSpec {
            name: name.to_owned(),
            description: format!("{name} (executor double)"),
            kind,
            parameters: json!({
                "type": "object",
                "properties": props.iter().map(|p| ((*p).to_owned(), json!({"type": "string"}))).collect::<serde_json::Map<_, _>>(),
                "required": required,
            }),
        };
        vec![
            spec("capture_desktop_screenshot", DataCollection, &[], &[]),
            spec("capture_window_screenshot", DataCollection, &[], &[]),
            spec("get_desktop_app_target_info", DataCollection, &[], &[]),
            spec("get_app_window_info", DataCollection, &[], &[]),
            spec(
                "get_app_window_controls_target_info",
                DataCollection,
                &[],
                &[],
            ),
            spec("get_ui_tree", DataCollection, &[], &[]),
            spec("select_application_window", Action, &["id"], &["id"]),
            spec("launch_application", Action, &["name"], &["name"]),
            spec("click_input", Action, &["id", "button"], &["id"]),
            spec("click_on_coordinates", Action, &["x", "y"], &["x", "y"]),
            spec("set_edit_text", Action, &["id", "text"], &["id", "text"]),
            spec("keyboard_input", Action, &["id", "keys"], &["keys"]),
            spec("texts", DataCollection, &["id"], &["id"]),
            spec("wait", Action, &["seconds"], &["seconds"]),
            spec("summary", Action, &["text"], &["text"]),
        ]
    }

    /// [`Self::tool_specs`] as `ListTools` serves them (for gRPC adapters over this double).
    pub fn proto_tools() -> Vec<ufo_proto::v1::ToolSpec> {
        use ufo_proto::v1;
        Self::tool_specs()
            .into_iter()
            .map(|t| v1::ToolSpec {
                name: t.name,
                description: t.description,
                tool_type: v1::ToolType::from(t.kind) as i32,
                parameters_schema: ufo_proto::json::to_struct(t.parameters).ok(),
                result_schema: None,
            })
            .collect()
    }

    /// The programs `launch_application` may start (every window registered as launchable).
    pub fn allowed_applications(&self) -> Vec<String> {
        self.lock().allowed.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Windows `launch_application` can open (matched by process name).
    pub fn add_launchable(&self, window: FakeWindow) {
        let mut s = self.lock();
        if !s.allowed.contains(&window.process) {
            s.allowed.push(window.process.clone());
        }
        s.launchable.push(window);
    }

    /// Every command received, in order.
    pub fn log(&self) -> Vec<Command> {
        self.lock().log.clone()
    }

    /// Names of the action tools received, in order.
    pub fn actions(&self) -> Vec<String> {
        self.lock()
            .log
            .iter()
            .filter(|c| c.tool_type == crate::dispatch::ToolType::Action)
            .map(|c| c.tool_name.clone())
            .collect()
    }

    /// Makes selecting the window of `process` fail with `error`, as when a modal dialog keeps the
    /// window manager from activating it.
    pub fn block_selection(&self, process: &str, error: &str) {
        self.lock()
            .blocked
            .push((process.to_owned(), error.to_owned()));
    }

    /// Makes clicking `control` in the window of `process` disable `target`.
    pub fn set_disables_on_click(&self, process: &str, control: &str, target: &str) {
        let mut s = self.lock();
        if let Some(c) = s
            .windows
            .iter_mut()
            .filter(|w| w.process == process)
            .flat_map(|w| w.controls.iter_mut())
            .find(|c| c.name == control)
        {
            c.disables_on_click.push(target.to_owned());
        }
    }

    /// Applies `f` to every control named `control` in the windows of `process`.
    fn each_control(&self, process: &str, control: &str, mut f: impl FnMut(&mut FakeControl)) {
        let mut s = self.lock();
        s.windows
            .iter_mut()
            .filter(|w| w.process == process)
            .flat_map(|w| w.controls.iter_mut())
            .filter(|c| c.name == control)
            .for_each(&mut f);
    }

    /// Makes actions on `control` of the window of `process` report that nothing changed, or not.
    pub fn set_inert(&self, process: &str, control: &str, inert: bool) {
        self.each_control(process, control, |c| c.inert = inert);
    }

    /// Enables or disables a control of the window of `process`.
    pub fn set_enabled(&self, process: &str, control: &str, enabled: bool) {
        self.each_control(process, control, |c| c.enabled = enabled);
    }

    /// A control's text.
    pub fn text_of(&self, process: &str, control: &str) -> Option<String> {
        let s = self.lock();
        let w = s.windows.iter().find(|w| w.process == process)?;
        w.controls
            .iter()
            .find(|c| c.name == control)
            .map(|c| c.text.clone())
    }

    fn run(s: &mut State, c: &Command) -> CommandResult {
        let p = &c.parameters;
        let arg = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match c.tool_name.as_str() {
            "capture_desktop_screenshot" => {
                let mut r = CommandResult::success(json!({"width": 320, "height": 180}));
                r.images.push(cached_png(s, 320, 180, (0, 0)));
                r
            }
            "get_desktop_app_target_info" => {
                CommandResult::success(Value::Array(s.windows.iter().map(window_json).collect()))
            }
            "select_application_window" => {
                let id = arg("id");
                let blocked = s.windows.iter().find(|w| w.id == id).and_then(|w| {
                    s.blocked
                        .iter()
                        .find(|(p, _)| *p == w.process)
                        .map(|(_, e)| e.clone())
                });
                if let Some(error) = blocked {
                    return CommandResult::failure(error);
                }
                match s.windows.iter().position(|w| w.id == id) {
                    Some(i) => {
                        s.active = Some(i);
                        CommandResult::success(json!({"root_name": s.windows[i].process}))
                    }
                    None => CommandResult::failure(format!("no window with id {id}")),
                }
            }
            "launch_application" => {
                let name = arg("name");
                match s.launchable.iter().position(|w| w.process == name) {
                    Some(i) => {
                        let w = s.launchable.remove(i);
                        s.windows.push(w);
                        CommandResult::success(json!({"launched": name}))
                    }
                    None => CommandResult::failure(format!("application {name} is not allowed")),
                }
            }
            "capture_window_screenshot" => {
                let Some(rect) = s.active.and_then(|i| s.windows.get(i)).map(|w| w.rect) else {
                    return CommandResult::failure("no application window selected");
                };
                let mut r = CommandResult::success(json!({}));
                let (w, h) = (rect.width() as u32, rect.height() as u32);
                r.images.push(cached_png(s, w, h, (rect.left, rect.top)));
                r
            }
            tool => {
                let Some(w) = s.active.and_then(|i| s.windows.get_mut(i)) else {
                    return CommandResult::failure("no application window selected");
                };
                Self::window_tool(w, tool, c)
            }
        }
    }

    fn window_tool(w: &mut FakeWindow, tool: &str, c: &Command) -> CommandResult {
        let p = &c.parameters;
        match tool {
            "get_app_window_info" => CommandResult::success(window_json(w)),
            "get_app_window_controls_target_info" => CommandResult::success(Value::Array(
                w.controls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "name": c.name, "type": c.control_type, "enabled": c.enabled,
                               "rect": [c.rect.left, c.rect.top, c.rect.right, c.rect.bottom]})
                    })
                    .collect(),
            )),
            "get_ui_tree" => CommandResult::success(json!({
                "name": w.name,
                "children": w.controls.iter().map(|c| json!({"name": c.name, "type": c.control_type})).collect::<Vec<_>>()
            })),
            "click_on_coordinates" | "wait" | "summary" => CommandResult::success(json!({})),
            // Without an id the keys go to the focused control (as the executor does).
            "keyboard_input" if p.get("id").is_none() => CommandResult::success(json!({})),
            _ => {
                let id = p.get("id").and_then(Value::as_str).unwrap_or("");
                let Some(i) = w.controls.iter().position(|c| c.id == id) else {
                    return CommandResult::failure(format!("control {id} not found"));
                };
                let inert = w.controls[i].inert;
                let control = &mut w.controls[i];
                if !control.enabled {
                    return CommandResult::failure(format!("control {id} is disabled"));
                }
                if control.fails {
                    return CommandResult::failure(format!("{tool} on {} failed", control.name));
                }
                let result = match tool {
                    "set_edit_text" => {
                        control.text = p.get("text").and_then(Value::as_str).unwrap_or("").into();
                        json!({})
                    }
                    "keyboard_input" => {
                        control.text.push_str(p.get("keys").and_then(Value::as_str).unwrap_or(""));
                        json!({})
                    }
                    "texts" => json!(control.text),
                    "click_input" => {
                        let off = control.disables_on_click.clone();
                        for c in w.controls.iter_mut().filter(|c| off.contains(&c.name)) {
                            c.enabled = false;
                        }
                        json!({})
                    }
                    _ => json!({}),
                };
                let mut r = CommandResult::success(result);
                if inert && tool != "texts" {
                    r.effect = Some(Effect {
                        kind: EffectKind::NoneObserved,
                        description: format!("{tool} on '{id}': nothing changed"),
                    });
                }
                r
            }
        }
    }
}

#[async_trait]
impl CommandDispatcher for FakeDesktop {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        let mut s = self.lock();
        let mut failed = false;
        let mut out = Vec::with_capacity(commands.len());
        for c in commands {
            s.log.push(c.clone());
            let mut r = if failed {
                CommandResult::skipped("an earlier command of the batch failed")
            } else {
                Self::run(&mut s, &c)
            };
            failed |= r.status == ResultStatus::Failure;
            r.call_id = c.call_id;
            out.push(r);
        }
        Ok(out)
    }

    async fn catalog(&self) -> Result<std::sync::Arc<ExecutorCatalog>, DispatchError> {
        // The allow-list is what `launch_application` can open: the windows registered as launchable.
        Ok(std::sync::Arc::new(ExecutorCatalog {
            tools: Self::tool_specs(),
            allowed_applications: self.allowed_applications(),
        }))
    }
}
