//! The functions each agent offers its model, taken from the executor's catalog (`ListTools`): the
//! HostAgent gets the desktop-level tools, the AppAgent every other tool the executor serves, and neither
//! gets the observation tools the agents run themselves each step, nor `run_command` (the shell
//! agent's). A tool the executor adds reaches the AppAgent's prompt without an agent change; a tool it
//! lacks is never offered.
//!
//! Also the launch allow-list check: a launch of a program the executor does not allow is denied before
//! it is sent, and its error names the programs that are allowed.

use serde_json::{Map, Value, json};

use crate::dispatch::CommandResult;
use crate::dispatch::tools::{ExecutorCatalog, ToolSpec};

/// Tools the agents call themselves to observe (never offered to a model); `record_input` records a
/// person's demonstration for `ufo record` and is no model's either.
pub const OBSERVATION_TOOLS: [&str; 8] = [
    "capture_desktop_screenshot",
    "capture_window_screenshot",
    "get_desktop_app_target_info",
    "get_app_window_info",
    "get_app_window_controls_target_info",
    "get_ui_tree",
    crate::replay::wait::CHANGE_TOOL,
    "record_input",
];

/// Tools that act on the desktop rather than inside the selected window: the HostAgent's.
pub const HOST_TOOLS: [&str; 3] = [
    "select_application_window",
    "launch_application",
    "close_application",
];

/// Executor tools no agent is offered as functions: `run_command` is reached only as the shell agent's
/// `shell__run` (so the policy judges it by that name), and the process tools only by the MCP client,
/// for servers on the desktop (their calls are `mcp__SERVER__TOOL` actions).
pub const THIRD_PARTY_TOOLS: [&str; 5] = [
    crate::shell::EXECUTOR_TOOL,
    "process_start",
    "process_write",
    "process_read",
    "process_stop",
];

/// Which agent a function list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The HostAgent.
    Host,
    /// An AppAgent.
    App,
}

/// The catalog's tools offered to `audience`, in the executor's order.
pub fn offered(catalog: &ExecutorCatalog, audience: Audience) -> Vec<&ToolSpec> {
    catalog
        .tools
        .iter()
        .filter(|t| !OBSERVATION_TOOLS.contains(&t.name.as_str()))
        .filter(|t| !THIRD_PARTY_TOOLS.contains(&t.name.as_str()))
        .filter(|t| HOST_TOOLS.contains(&t.name.as_str()) == (audience == Audience::Host))
        .collect()
}

/// Follows a local `$ref` (`#/$defs/X` or `#/definitions/X`) within `root`.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    let mut path = r.trim_start_matches("#/").split('/');
    let found = match (path.next(), path.next()) {
        (Some(section), Some(name)) => root.get(section).and_then(|d| d.get(name)),
        _ => None,
    };
    found.unwrap_or(schema)
}

/// A property's type as the model reads it: `"left"|"right"`, `string`, `number`, `string|integer`.
fn type_of(root: &Value, schema: &Value) -> String {
    let s = resolve(root, schema);
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = s.get(key).and_then(Value::as_array) {
            let types: Vec<String> = options
                .iter()
                .map(|o| type_of(root, o))
                .filter(|t| t != "null")
                .collect();
            return types.join("|");
        }
    }
    match s.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join("|"),
        _ => "any".to_owned(),
    }
}

/// One function as a prompt line: `- click_input(id: string|integer, button?: "left"|"right"): Click a
/// control by id.` (`?` marks an optional parameter). `name` is left out of tools that also take an `id`:
/// the agent fills it in from the control list.
pub fn describe(tool: &ToolSpec) -> String {
    let root = &tool.parameters;
    let required: Vec<&str> = root
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let props = root
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // Required parameters first, in the schema's `required` order; the optional ones after them.
    let mut ordered: Vec<(&String, &Value)> = props.iter().collect();
    ordered.sort_by_key(|(k, _)| {
        required
            .iter()
            .position(|r| r == k)
            .unwrap_or(required.len())
    });
    let params: Vec<String> = ordered
        .into_iter()
        .filter(|(k, _)| !(k.as_str() == "name" && props.contains_key("id")))
        .map(|(k, v)| {
            let optional = if required.contains(&k.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{k}{optional}: {}", type_of(root, v))
        })
        .collect();
    format!(
        "- {}({}): {}",
        tool.name,
        params.join(", "),
        tool.description
    )
}

/// The prompt's function list for `audience`, one line per tool.
pub fn function_list(catalog: &ExecutorCatalog, audience: Audience) -> String {
    offered(catalog, audience)
        .into_iter()
        .map(describe)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `catalog` with the API actions of the MCP servers bound to `window`'s application (process name or
/// title) appended: one tool `mcp__SERVER__TOOL` per server tool, its JSON schema as parameters and its
/// description marked `[API SERVER]`. A server that cannot be reached adds nothing this step (it is
/// started again later); the GUI tools stay.
pub async fn with_api_tools(
    catalog: std::sync::Arc<ExecutorCatalog>,
    hub: &crate::mcp::McpHub,
    window: &crate::agents::target::TargetInfo,
) -> std::sync::Arc<ExecutorCatalog> {
    let servers = hub.for_application(&window.app_root(), &window.name);
    if servers.is_empty() {
        return catalog;
    }
    let mut extended = (*catalog).clone();
    for server in servers {
        match server.tools().await {
            Ok(tools) => extended.tools.extend(tools.into_iter().map(|t| ToolSpec {
                name: crate::mcp::action_name(server.name(), &t.name),
                description: format!("[API {}] {}", server.name(), t.description),
                kind: crate::dispatch::ToolType::Action,
                parameters: t.input_schema,
            })),
            Err(e) => tracing::warn!(error = %e, "API actions unavailable this step"),
        }
    }
    std::sync::Arc::new(extended)
}

/// The programs the HostAgent may launch, for its prompt.
pub fn launchable(catalog: &ExecutorCatalog) -> String {
    if catalog.allowed_applications.is_empty() {
        "none (the executor allows no launches)".to_owned()
    } else {
        catalog.allowed_applications.join(", ")
    }
}

/// A denied action's result: a failure whose result says it was refused by policy (see
/// [`crate::agents::action::ActionOutcome::Denied`]).
pub fn denied(error: String, details: Value) -> CommandResult {
    let mut r = CommandResult::failure(error);
    r.result = json!({"denied": true, "details": details});
    r
}

/// `Some(denial)` when `arguments` launch a program that is not on the executor's allow-list.
pub fn check_launch(
    catalog: &ExecutorCatalog,
    arguments: &Map<String, Value>,
) -> Option<CommandResult> {
    let name = arguments.get("name").and_then(Value::as_str).unwrap_or("");
    if catalog.allowed_applications.iter().any(|a| a == name) {
        return None;
    }
    Some(denied(
        format!(
            "application '{name}' is not on the executor's allow-list; allowed: {}",
            launchable(catalog)
        ),
        json!({"allowed_applications": catalog.allowed_applications}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::ToolType;

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("does {name}"),
            kind: ToolType::Action,
            parameters,
        }
    }

    #[test]
    fn describes_parameters_from_the_schema() {
        let click = tool(
            "click_input",
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": ["string", "integer"]},
                    "name": {"type": ["string", "null"]},
                    "button": {"$ref": "#/$defs/MouseButton"},
                    "double": {"type": "boolean"}
                },
                "required": ["id"],
                "$defs": {"MouseButton": {"type": "string", "enum": ["left", "right"]}}
            }),
        );
        assert_eq!(
            describe(&click),
            r#"- click_input(id: string|integer, button?: "left"|"right", double?: boolean): does click_input"#
        );
        let summary = tool(
            "summary",
            json!({"properties": {"text": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}),
        );
        assert_eq!(describe(&summary), "- summary(text?: string): does summary");
        assert_eq!(describe(&tool("wait", Value::Null)), "- wait(): does wait");
    }

    #[test]
    fn partitions_the_catalog_and_checks_launches() {
        let catalog = ExecutorCatalog {
            tools: [
                "get_ui_tree",
                "launch_application",
                "click_input",
                "drag_on_coordinates",
                "run_command",
            ]
            .map(|n| tool(n, Value::Null))
            .to_vec(),
            allowed_applications: vec!["mousepad".into()],
        };
        let names = |a| {
            offered(&catalog, a)
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Audience::Host), ["launch_application"]);
        assert_eq!(names(Audience::App), ["click_input", "drag_on_coordinates"]);
        let args = |n: &str| json!({"name": n}).as_object().cloned().unwrap();
        assert!(check_launch(&catalog, &args("mousepad")).is_none());
        let d = check_launch(&catalog, &args("xterm")).unwrap();
        assert!(
            d.error.contains("'xterm'") && d.error.contains("allowed: mousepad"),
            "{}",
            d.error
        );
        assert_eq!(d.result["denied"], true);
    }
}
