//! The tool registry: every tool's name, kind, description and JSON schemas for its parameters and its
//! result (ListTools serves these; the agent builds its prompt's API description from them), plus typed
//! parameter parsing with clear errors. The tools themselves run in [`crate::dispatch`].

pub mod params;

use schemars::{JsonSchema, schema_for};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Whether a tool observes or acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Observes the desktop.
    DataCollection,
    /// Changes the desktop.
    Action,
}

/// A tool's public description.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    /// The name commands use.
    pub name: &'static str,
    /// What it does, for prompts.
    pub description: &'static str,
    /// Observes or acts.
    pub kind: Kind,
    /// JSON schema of the parameters object.
    pub parameters: Value,
    /// JSON schema of the result.
    pub result: Value,
}

fn schema<T: JsonSchema>() -> Value {
    serde_json::to_value(schema_for!(T)).unwrap_or(Value::Null)
}

fn image_result() -> Value {
    json!({
        "type": "object",
        "description": "Metadata of the screenshot; the encoded image itself is in Result.images[0].",
        "properties": {
            "width": {"type": "integer"}, "height": {"type": "integer"},
            "format": {"type": "string", "enum": ["png", "jpeg"]},
            "origin": {"type": "array", "items": {"type": "integer"}, "description": "screen [x, y] of pixel (0, 0)"},
            "scale": {"type": "number"}
        },
        "required": ["width", "height", "format"]
    })
}

fn rect_schema() -> Value {
    json!({"type": "array", "items": {"type": "integer"}, "minItems": 4, "maxItems": 4,
           "description": "[left, top, right, bottom] in screen pixels"})
}

fn window_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["APPLICATION"]},
            "type": {"type": "string"}, "rect": rect_schema(),
            "process_name": {"type": "string"}, "pid": {"type": ["integer", "null"]},
            "handle": {"type": "integer"}
        },
        "required": ["id", "name", "kind", "rect"]
    })
}

fn control_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "type": {"type": "string"},
            "rect": rect_schema(), "enabled": {"type": "boolean"}, "visible": {"type": "boolean"},
            "automation_id": {"type": "string"}, "kind": {"type": "string"},
            "value": {"type": "string", "description": "an editable control's current text (bounded)"},
            "ancestors": {"type": "array", "description": "name and type of each ancestor, parent first",
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string"}}}},
            "sibling_index": {"type": "integer", "minimum": 0,
                "description": "position among the parent's children of the same name and type"}
        }
    })
}

fn action_result() -> Value {
    json!({
        "type": "object",
        "properties": {
            "control": control_schema(),
            "method": {"type": "string", "description": "how the action was delivered"}
        }
    })
}

/// Every tool, in the order ListTools reports them.
pub fn registry() -> Vec<ToolInfo> {
    use Kind::*;
    use params::*;
    let t = |name, kind, description, parameters, result| ToolInfo {
        name,
        description,
        kind,
        parameters,
        result,
    };
    vec![
        t(
            "capture_desktop_screenshot",
            DataCollection,
            "Screenshot of the whole desktop (all monitors or the primary one).",
            schema::<CaptureDesktop>(),
            image_result(),
        ),
        t(
            "capture_window_screenshot",
            DataCollection,
            "Screenshot of the selected application window.",
            schema::<NoParams>(),
            image_result(),
        ),
        t(
            "get_desktop_app_target_info",
            DataCollection,
            "The application windows on the desktop with positional ids for select_application_window.",
            schema::<DesktopApps>(),
            json!({"type": "array", "items": window_schema()}),
        ),
        t(
            "get_app_window_info",
            DataCollection,
            "Information about the selected application window.",
            schema::<NoParams>(),
            window_schema(),
        ),
        t(
            "get_app_window_controls_target_info",
            DataCollection,
            "The controls of the selected window with positional ids (valid until the next listing) for the \
           app actions.",
            schema::<WindowControls>(),
            json!({"type": "array", "items": control_schema()}),
        ),
        t(
            "get_ui_tree",
            DataCollection,
            "The accessibility tree of the selected window, nested, within node, depth and time limits.",
            schema::<UiTree>(),
            json!({"type": "object", "properties": {
              "root": {"type": "object"}, "node_count": {"type": "integer"},
              "truncated": {"type": "boolean"}}}),
        ),
        t(
            "select_application_window",
            Action,
            "Focus an application window by id; the app actions then work on it.",
            schema::<SelectWindow>(),
            json!({"type": "object", "properties": {
              "root_name": {"type": "string", "description": "the application's process name"},
              "window": window_schema()}}),
        ),
        t(
            "launch_application",
            Action,
            "Start a program from the executor's allow-list (no shell).",
            schema::<Launch>(),
            json!({"type": "object", "properties": {"name": {"type": "string"}, "pid": {"type": "integer"}}}),
        ),
        t(
            "close_application",
            Action,
            "Ask the selected application window to close.",
            schema::<NoParams>(),
            json!({"type": "object", "properties": {"closed": window_schema()}}),
        ),
        t(
            "click_input",
            Action,
            "Click a control by id.",
            schema::<ClickInput>(),
            action_result(),
        ),
        t(
            "click_on_coordinates",
            Action,
            "Click at a point given as fractions (0..1) of the selected window.",
            schema::<ClickCoordinates>(),
            json!({"type": "object", "properties": {"point": {"type": "array", "items": {"type": "integer"}}}}),
        ),
        t(
            "drag_on_coordinates",
            Action,
            "Drag between two points given as fractions (0..1) of the selected window.",
            schema::<DragCoordinates>(),
            json!({"type": "object", "properties": {
              "from": {"type": "array", "items": {"type": "integer"}},
              "to": {"type": "array", "items": {"type": "integer"}}}}),
        ),
        t(
            "set_edit_text",
            Action,
            "Set the text of an editable control.",
            schema::<SetEditText>(),
            action_result(),
        ),
        t(
            "keyboard_input",
            Action,
            "Type keys (pywinauto send_keys syntax) into a control or the focused window.",
            schema::<KeyboardInput>(),
            action_result(),
        ),
        t(
            "wheel_mouse_input",
            Action,
            "Scroll the mouse wheel over a control.",
            schema::<WheelMouse>(),
            action_result(),
        ),
        t(
            "texts",
            DataCollection,
            "The text a control shows.",
            schema::<Texts>(),
            json!({"type": "string"}),
        ),
        t(
            "wait",
            Action,
            "Wait a number of seconds.",
            schema::<Wait>(),
            json!({"type": "object", "properties": {"waited_ms": {"type": "integer"}}}),
        ),
        t(
            "summary",
            Action,
            "Echo a summary text back as the result.",
            schema::<Summary>(),
            json!({"type": "string"}),
        ),
    ]
}

/// Parses a tool's parameters; the error names the tool and the offending field.
pub fn parse<T: DeserializeOwned>(tool: &str, params: Value) -> Result<T, String> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    serde_json::from_value(params).map_err(|e| format!("invalid parameters for {tool}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_object_schemas() {
        let tools = registry();
        assert_eq!(tools.len(), 18);
        for t in &tools {
            assert_eq!(t.parameters["type"], "object", "{}", t.name);
            assert!(t.result.is_object(), "{}", t.name);
        }
        let click = tools.iter().find(|t| t.name == "click_input").unwrap();
        assert_eq!(click.parameters["required"], json!(["id"]));
        assert_eq!(click.parameters["additionalProperties"], json!(false));
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = parse::<params::ClickInput>("click_input", json!({})).unwrap_err();
        assert!(e.contains("missing field `id`"), "{e}");
        let e = parse::<params::ClickInput>("click_input", json!({"id": "1", "botton": "left"}))
            .unwrap_err();
        assert!(e.contains("unknown field `botton`"), "{e}");
        let e = parse::<params::ClickInput>("click_input", json!({"id": "1", "button": "top"}))
            .unwrap_err();
        assert!(e.contains("unknown variant `top`"), "{e}");
        let ok = parse::<params::ClickInput>("click_input", json!({"id": 12})).unwrap();
        assert_eq!(ok.id.0, "12");
        assert!(parse::<params::NoParams>("get_app_window_info", Value::Null).is_ok());
    }
}
