//! The tools, as one [`Tool`] enum. Each variant names a definition ([`ToolDef`]) in its family's file:
//! [`observe`] (screenshots, the UI tree, waiting for a change), [`controls`] (the control listing, a control's text),
//! [`record`] (recording what a person does),
//! [`act`] (clicks, text, keys, scrolling, pacing), [`apps`] (windows and programs), [`shell`] (one
//! allow-listed command, off by default) and [`process`] (long-lived programs such as MCP servers, off
//! by default). A definition is the
//! tool's typed parameters together with its wire name, kind, description, result type and the code that
//! runs it; ListTools serves JSON schemas derived from the parameter and result types (the agent builds
//! its prompt's API description from the parameter schemas).
//!
//! Adding a tool is one definition in its family's file and one line in the `tools!` list below.
//! Implements the command layer the seeds' AppAgent and HostAgent call (seed 000
//! "select_application_window", seed 001 "get_app_window_controls_target_info" and the app actions).

pub mod act;
pub mod apps;
pub mod controls;
mod error;
pub mod observe;
pub mod process;
pub mod record;
pub mod shell;

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Instant;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema, schema_for};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::backend::MouseButton;
use crate::encode::Format;
use crate::executor::{DesktopState, Executor, Shot, ToolOutput};

pub use error::ToolError;

/// What a tool does to the desktop; decides its wire type (`ToolType`) and its part in the settle protocol
/// (`executor.proto`, `Settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Observes what is on screen (pixels, controls, texts); waits for the screen to settle after an
    /// action first.
    Observation,
    /// Reads the desktop's window list, which no settling changes.
    Query,
    /// Changes the desktop; the next observation waits for the screen to settle.
    Action,
    /// Leaves the desktop alone (`wait`, `summary`) but is a step of the plan, reported as an action.
    Inert,
}

impl Kind {
    /// Whether the wire reports it as an action (`ToolType::Action`) rather than data collection.
    pub fn is_action(self) -> bool {
        matches!(self, Self::Action | Self::Inert)
    }

    /// Whether it changes the screen (the next observation waits for it to settle).
    pub fn changes_screen(self) -> bool {
        self == Self::Action
    }

    /// Whether it waits for the screen to settle after an earlier action.
    pub fn waits_for_settle(self) -> bool {
        self == Self::Observation
    }
}

/// One tool: its typed parameters (the type itself, deserialised with unknown fields rejected) and what
/// the executor needs to serve and run it.
pub(crate) trait ToolDef: DeserializeOwned + JsonSchema + Send {
    /// The name commands use.
    const NAME: &'static str;
    /// What it does, for prompts.
    const DESCRIPTION: &'static str;
    /// What it does to the desktop.
    const KIND: Kind;
    /// What it answers (serialised as the command's result; its schema is the result schema).
    type Output: Serialize + JsonSchema + Send;

    /// Runs the tool on the desktop `cx` gives.
    fn run(
        self,
        cx: &mut Cx<'_>,
    ) -> impl Future<Output = Result<Output<Self::Output>, ToolError>> + Send;
}

/// What a tool produced: its typed result, screenshots and non-fatal remarks.
#[derive(Debug)]
pub(crate) struct Output<T> {
    /// The result.
    pub result: T,
    /// Screenshots.
    pub images: Vec<Shot>,
    /// Non-fatal remarks.
    pub warnings: Vec<String>,
}

impl<T> Output<T> {
    /// `result` with these remarks.
    pub fn warned(result: T, warnings: Vec<String>) -> Self {
        Self {
            result,
            images: Vec::new(),
            warnings,
        }
    }
}

impl<T> From<T> for Output<T> {
    fn from(result: T) -> Self {
        Self::warned(result, Vec::new())
    }
}

/// What a running tool works with: the executor (backend, limits, allow-list), the desktop state kept
/// between commands, the command's deadline and the batch's screenshot encoding.
pub(crate) struct Cx<'a> {
    /// The executor.
    pub exec: &'a Executor,
    /// The desktop state.
    pub st: &'a mut DesktopState,
    /// When the command must be done.
    pub deadline: Instant,
    /// How screenshots are encoded.
    pub format: Format,
    /// The control the action is aimed at, with its facts before it (set by
    /// [`Cx::actionable`] when effect checks are on).
    pub watched: Option<crate::effect::Watched>,
    /// Who called (processes answer only their starter).
    pub caller: &'a crate::process::Caller,
}

/// Declares [`Tool`] from `family::Definition` paths, in the order ListTools reports them.
macro_rules! tools {
    ($($family:ident :: $def:ident,)+) => {
        /// Every tool the executor serves; each variant is the definition of the same name in its
        /// family's module.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Tool {
            $(
                #[doc = concat!("[`", stringify!($family), "::", stringify!($def), "`].")]
                $def,
            )+
        }

        impl Tool {
            /// Every tool, in the order ListTools reports them.
            pub const ALL: &'static [Tool] = &[$(Tool::$def,)+];

            /// The name commands use (e.g. `click_input`).
            pub fn name(self) -> &'static str {
                match self { $(Tool::$def => $family::$def::NAME,)+ }
            }

            /// What it does, for prompts.
            pub fn description(self) -> &'static str {
                match self { $(Tool::$def => $family::$def::DESCRIPTION,)+ }
            }

            /// What it does to the desktop.
            pub fn kind(self) -> Kind {
                match self { $(Tool::$def => $family::$def::KIND,)+ }
            }

            /// JSON schema of its parameters object.
            pub fn parameters_schema(self) -> Value {
                match self { $(Tool::$def => schema::<$family::$def>(),)+ }
            }

            /// JSON schema of its result.
            pub fn result_schema(self) -> Value {
                match self { $(Tool::$def => schema::<<$family::$def as ToolDef>::Output>(),)+ }
            }

            /// Parses `params` and runs the tool.
            pub(crate) async fn run(
                self,
                cx: &mut Cx<'_>,
                params: Value,
            ) -> Result<ToolOutput, ToolError> {
                match self { $(Tool::$def => run::<$family::$def>(cx, params).await,)+ }
            }
        }
    };
}

tools! {
    observe::CaptureDesktopScreenshot,
    observe::CaptureWindowScreenshot,
    apps::GetDesktopAppTargetInfo,
    apps::GetAppWindowInfo,
    controls::GetAppWindowControlsTargetInfo,
    observe::GetUiTree,
    observe::WaitForChange,
    record::RecordInput,
    apps::SelectApplicationWindow,
    apps::LaunchApplication,
    apps::CloseApplication,
    act::ClickInput,
    act::ClickOnCoordinates,
    act::DragOnCoordinates,
    act::SetEditText,
    act::KeyboardInput,
    act::WheelMouseInput,
    controls::Texts,
    act::Wait,
    act::Summary,
    shell::RunCommand,
    process::ProcessStart,
    process::ProcessWrite,
    process::ProcessRead,
    process::ProcessStop,
}

impl Tool {
    /// Whether it only talks to a caller's processes (a batch of only these does not wait for the
    /// desktop).
    pub fn is_process(self) -> bool {
        matches!(
            self,
            Tool::ProcessStart | Tool::ProcessWrite | Tool::ProcessRead | Tool::ProcessStop
        )
    }
}

impl FromStr for Tool {
    type Err = ToolError;

    /// The tool named `name`; an unknown name's error lists the known ones.
    fn from_str(name: &str) -> Result<Self, ToolError> {
        Tool::ALL
            .iter()
            .copied()
            .find(|t| t.name() == name)
            .ok_or_else(|| ToolError::UnknownTool(name.to_owned()))
    }
}

/// The JSON schema of `T`.
fn schema<T: JsonSchema>() -> Value {
    schema_for!(T).into()
}

/// Parses a tool's parameters (null is an empty object); the error names the tool and the offending field.
pub(crate) fn parse<T: ToolDef>(params: Value) -> Result<T, ToolError> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    serde_json::from_value(params).map_err(|e| ToolError::Parameters(T::NAME, e))
}

async fn run<T: ToolDef>(cx: &mut Cx<'_>, params: Value) -> Result<ToolOutput, ToolError> {
    let out = parse::<T>(params)?.run(cx).await?;
    Ok(ToolOutput {
        result: serde_json::to_value(out.result).map_err(ToolError::Result)?,
        images: out.images,
        warnings: out.warnings,
    })
}

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

/// The default of parameters that are on unless turned off.
fn yes() -> bool {
    true
}

/// The default mouse button.
fn left() -> MouseButton {
    MouseButton::Left
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tool_has_a_unique_name_and_object_schemas() {
        assert_eq!(Tool::ALL.len(), 25);
        let mut names: Vec<_> = Tool::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 25);
        for t in Tool::ALL {
            assert_eq!(t.name().parse::<Tool>().unwrap(), *t);
            assert_eq!(t.parameters_schema()["type"], "object", "{}", t.name());
            assert!(t.result_schema().is_object(), "{}", t.name());
        }
        let click = Tool::ClickInput.parameters_schema();
        assert_eq!(click["required"], json!(["id"]));
        assert_eq!(click["additionalProperties"], json!(false));
    }

    #[test]
    fn unknown_names_list_the_known_tools() {
        let e = "no_such_tool".parse::<Tool>().unwrap_err().to_string();
        assert!(
            e.starts_with(
                "unknown tool 'no_such_tool'; known tools: capture_desktop_screenshot, \
                 capture_window_screenshot, get_desktop_app_target_info"
            ),
            "{e}"
        );
        assert!(
            e.ends_with(
                "texts, wait, summary, run_command, process_start, process_write, process_read, process_stop"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = parse::<act::ClickInput>(json!({})).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid parameters for click_input: missing field `id`"),
            "{e}"
        );
        let e = parse::<act::ClickInput>(json!({"id": "1", "botton": "left"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `botton`"), "{e}");
        let e = parse::<act::ClickInput>(json!({"id": "1", "button": "top"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `top`"), "{e}");
        let ok = parse::<act::ClickInput>(json!({"id": 12})).unwrap();
        assert_eq!(ok.id.0, "12");
        assert!(parse::<apps::GetAppWindowInfo>(Value::Null).is_ok());
    }

    #[test]
    fn result_schemas_describe_what_the_tools_answer() {
        let shot = Tool::CaptureWindowScreenshot.result_schema();
        assert_eq!(
            shot["required"],
            json!(["width", "height", "format", "origin", "scale"])
        );
        assert_eq!(shot["properties"]["format"]["enum"], json!(["png", "jpeg"]));
        let windows = Tool::GetDesktopAppTargetInfo.result_schema();
        assert_eq!(windows["type"], "array");
        let summary = Tool::Summary.result_schema();
        assert_eq!(summary["type"], "string");
    }
}
