//! The HostAgent's tools: the application windows on the desktop, selecting one (the app actions then
//! work on it), starting an allow-listed program and closing the selected window.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ufo_common::names::names_match;

use super::{Cx, Id, Kind, Output, ToolDef, ToolError, yes};
use crate::backend::WindowInfo;
use crate::launch::check_args;

/// An application window as the tools report it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WindowEntry {
    /// The window's position in the last window listing (empty outside a listing).
    pub id: String,
    /// The window's title.
    pub name: String,
    /// Always `APPLICATION`.
    pub kind: WindowKind,
    /// Always `Window`.
    #[serde(rename = "type")]
    pub control_type: &'static str,
    /// `[left, top, right, bottom]` in screen pixels.
    pub rect: [i32; 4],
    /// The owning program's name, empty when unknown.
    pub process_name: String,
    /// The owning process, when known.
    pub pid: Option<u32>,
    /// The native handle (X11 window id, HWND).
    pub handle: u64,
    /// The window class, empty when unknown.
    pub class_name: String,
}

/// What a window entry is (the reference's `kind` field).
#[derive(Debug, Serialize, JsonSchema)]
pub enum WindowKind {
    /// A top-level application window.
    #[serde(rename = "APPLICATION")]
    Application,
}

impl WindowEntry {
    /// The entry of `w`, numbered `id` when it comes from a listing.
    fn new(id: Option<usize>, w: &WindowInfo) -> Self {
        Self {
            id: id.map(|i| i.to_string()).unwrap_or_default(),
            name: w.title.clone(),
            kind: WindowKind::Application,
            control_type: "Window",
            rect: w.rect.to_ltrb(),
            process_name: w.process_name.clone(),
            pid: w.pid,
            handle: w.handle,
            class_name: w.class_name.clone(),
        }
    }
}

/// `get_desktop_app_target_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetDesktopAppTargetInfo {
    /// Leave out windows without a title.
    #[serde(default = "yes")]
    pub remove_empty: bool,
    /// Re-read the window list (it is always read fresh; accepted for compatibility).
    #[serde(default)]
    pub refresh_app_windows: bool,
}

impl ToolDef for GetDesktopAppTargetInfo {
    const NAME: &'static str = "get_desktop_app_target_info";
    const DESCRIPTION: &'static str =
        "The application windows on the desktop with positional ids for select_application_window.";
    const KIND: Kind = Kind::Query;
    type Output = Vec<WindowEntry>;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let mut windows = cx.exec.backend.windows().await?;
        if self.remove_empty {
            windows.retain(|w| !w.title.trim().is_empty());
        }
        let list: Vec<_> = windows
            .iter()
            .enumerate()
            .map(|(i, w)| WindowEntry::new(Some(i), w))
            .collect();
        cx.st.windows = windows;
        Ok(Output::from(list))
    }
}

/// `get_app_window_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetAppWindowInfo {}

impl ToolDef for GetAppWindowInfo {
    const NAME: &'static str = "get_app_window_info";
    const DESCRIPTION: &'static str = "Information about the selected application window.";
    const KIND: Kind = Kind::Observation;
    type Output = WindowEntry;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected_fresh().await?;
        Ok(Output::from(WindowEntry::new(None, &w)))
    }
}

/// `select_application_window`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectApplicationWindow {
    /// The window's id from get_desktop_app_target_info.
    pub id: Id,
    /// The window's name, checked against the id (a mismatch acts on the id and warns).
    #[serde(default)]
    pub name: Option<String>,
}

/// The window `select_application_window` selected.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Selected {
    /// The application's process name.
    pub root_name: String,
    /// The window.
    pub window: WindowEntry,
}

impl ToolDef for SelectApplicationWindow {
    const NAME: &'static str = "select_application_window";
    const DESCRIPTION: &'static str =
        "Focus an application window by id; the app actions then work on it.";
    const KIND: Kind = Kind::Action;
    type Output = Selected;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let st = &mut *cx.st;
        if st.windows.is_empty() {
            st.windows = cx.exec.backend.windows().await?;
            st.windows.retain(|w| !w.title.trim().is_empty());
        }
        let id = self.id.0;
        let Some(idx) = id
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&i| i < st.windows.len())
        else {
            let valid = match st.windows.len() {
                0 => "none (no application windows)".to_owned(),
                1 => "0".to_owned(),
                n => format!("0-{}", n - 1),
            };
            return Err(ToolError::UnknownWindow(id, valid));
        };
        let target = st.windows[idx].clone();
        let warnings = self
            .name
            .filter(|n| !n.is_empty() && !names_match(n, &target.title))
            .map(|name| {
                format!(
                    "window {id} is named '{}', not '{name}'; selected window {id}",
                    target.title
                )
            })
            .into_iter()
            .collect();
        let w = cx.exec.backend.activate(&target).await?;
        cx.st.selected = Some(w.clone());
        cx.st.listing = None;
        let selected = Selected {
            root_name: w.process_name.clone(),
            window: WindowEntry::new(Some(idx), &w),
        };
        Ok(Output::warned(selected, warnings))
    }
}

/// `launch_application`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchApplication {
    /// A program name from the executor's allow-list.
    pub name: String,
    /// Arguments, each an absolute path inside one of the executor's launch directories (passed
    /// resolved, without a shell); none when it declares no launch directory.
    #[serde(default)]
    pub args: Vec<String>,
}

/// The program `launch_application` started.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Launched {
    /// The allow-list name.
    pub name: String,
    /// Its process id, when the system gave one.
    pub pid: Option<u32>,
    /// The arguments it was given, resolved.
    pub args: Vec<PathBuf>,
}

impl ToolDef for LaunchApplication {
    const NAME: &'static str = "launch_application";
    const DESCRIPTION: &'static str = "Start a program from the executor's allow-list (no shell).";
    const KIND: Kind = Kind::Action;
    type Output = Launched;

    /// Starts the program with the checked arguments (see [`crate::launch`]), without a shell.
    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let exec = cx.exec;
        let Some((_, program)) = exec.apps.iter().find(|(n, _)| *n == self.name) else {
            let allowed = exec.app_names();
            let allowed = if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed.join(", ")
            };
            return Err(ToolError::NotAllowed(self.name, allowed));
        };
        let args = check_args(&exec.limits, &self.args)?;
        let child = tokio::process::Command::new(program)
            .args(&args)
            .envs(exec.launch_env.iter().map(|(k, v)| (k, v)))
            .env_remove("NO_AT_BRIDGE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| ToolError::Spawn(self.name.clone(), e))?;
        let pid = child.id();
        // Kept until the next reset ends it; the ones that exited meanwhile are reaped here, so none
        // lingers as a zombie.
        let mut launched = match exec.launched.lock() {
            Ok(children) => children,
            Err(poisoned) => poisoned.into_inner(),
        };
        launched.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        launched.push(child);
        drop(launched);
        Ok(Output::from(Launched {
            name: self.name,
            pid,
            args,
        }))
    }
}

/// `close_application`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseApplication {}

/// The window `close_application` asked to close.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Closed {
    /// The window.
    pub closed: WindowEntry,
}

impl ToolDef for CloseApplication {
    const NAME: &'static str = "close_application";
    const DESCRIPTION: &'static str = "Ask the selected application window to close.";
    const KIND: Kind = Kind::Action;
    type Output = Closed;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let w = cx.selected()?;
        cx.exec.backend.close(&w).await?;
        cx.st.closed = Some(w.clone());
        cx.st.selected = None;
        cx.st.listing = None;
        cx.st.windows.clear();
        Ok(Output::from(Closed {
            closed: WindowEntry::new(None, &w),
        }))
    }
}

impl Cx<'_> {
    /// The selected window as it was when selected or last read.
    pub(crate) fn selected(&self) -> Result<WindowInfo, ToolError> {
        self.st.selected.clone().ok_or(ToolError::NoSelection)
    }

    /// The selected window with its current bounds (it may have moved since selection).
    pub(crate) async fn selected_fresh(&mut self) -> Result<WindowInfo, ToolError> {
        let w = self.selected()?;
        let now = self.exec.backend.windows().await?;
        match now.into_iter().find(|x| x.handle == w.handle) {
            Some(fresh) => {
                self.st.selected = Some(fresh.clone());
                Ok(fresh)
            }
            None => {
                self.st.selected = None;
                self.st.listing = None;
                Err(ToolError::WindowGone(w.title))
            }
        }
    }
}
