//! Platform-independent handling of a window's control tree: filtering by control type, positional ids
//! (`"1"`, `"2"`, ... per listing, as the reference's annotation labels), resolving an id the agent sends
//! back (unknown id, name mismatch, disabled or invisible control), and the nested JSON of `get_ui_tree`.

use serde_json::{Map, Value, json};

use crate::backend::{RawNode, RawTree};

/// The control types the reference keeps in a window's control list (UI Automation names).
pub const DEFAULT_CONTROL_TYPES: &[&str] = &[
    "Button",
    "Edit",
    "Menu",
    "HeaderItem",
    "TabItem",
    "Document",
    "ListItem",
    "MenuItem",
    "ScrollBar",
    "TreeItem",
    "Hyperlink",
    "ComboBox",
    "RadioButton",
    "Spinner",
    "CheckBox",
    "Group",
    "Text",
    "Slider",
];

/// Fields a control entry can carry in `get_app_window_controls_target_info`.
pub const CONTROL_FIELDS: &[&str] = &[
    "id",
    "name",
    "type",
    "rect",
    "enabled",
    "visible",
    "automation_id",
    "kind",
    "value",
];

/// The numbered controls of one window from one listing.
#[derive(Debug, Clone, Default)]
pub struct ControlListing {
    /// The window they belong to.
    pub window: u64,
    /// Control `i` has id `i + 1`.
    pub controls: Vec<RawNode>,
    /// The name of the window the controls belong to (a dialog in front of the selected window).
    pub front: String,
}

/// Keeps the controls worth showing an agent: of a wanted type, visible, with an on-screen area.
pub fn filter_controls(tree: &RawTree, types: &[String]) -> Vec<RawNode> {
    tree.nodes
        .iter()
        .filter(|n| n.parent.is_some())
        .filter(|n| types.iter().any(|t| t == &n.control_type))
        .filter(|n| n.visible && !n.rect.is_empty())
        .cloned()
        .collect()
}

/// Why an id could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    /// No listing yet.
    #[error(
        "no controls listed for the selected window; call get_app_window_controls_target_info first"
    )]
    NoListing,
    /// Not a listed id.
    #[error("unknown control id '{id}'; valid ids are {valid}")]
    UnknownId {
        /// The id sent.
        id: String,
        /// The valid ids, e.g. "1-57" or "none".
        valid: String,
    },
}

impl ControlListing {
    /// The control numbered `id`; a warning when `name` is given and differs from the control's name
    /// (the id wins: the agent labelled the screenshot by id).
    pub fn resolve(
        &self,
        id: &str,
        name: Option<&str>,
    ) -> Result<(&RawNode, Option<String>), ResolveError> {
        let node = id
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| self.controls.get(i))
            .ok_or_else(|| ResolveError::UnknownId {
                id: id.to_owned(),
                valid: self.valid_ids(),
            })?;
        let warning = name
            .filter(|n| !n.is_empty() && !names_match(n, &node.name))
            .map(|n| {
                format!(
                    "control {id} is named '{}', not '{n}'; acted on control {id}",
                    node.name
                )
            });
        Ok((node, warning))
    }

    fn valid_ids(&self) -> String {
        match self.controls.len() {
            0 => "none (the window has no listed controls)".to_owned(),
            1 => "1".to_owned(),
            n => format!("1-{n}"),
        }
    }
}

/// Loose name comparison: case and surrounding whitespace do not count, and mnemonic underscores or
/// ampersands ("_Open", "&Open") are ignored.
pub fn names_match(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .chars()
            .filter(|c| *c != '_' && *c != '&')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    norm(a) == norm(b)
}

/// The JSON entry of a listed control, restricted to `fields` (all of [`CONTROL_FIELDS`] when empty).
pub fn control_json(index: usize, node: &RawNode, fields: &[String]) -> Value {
    let want = |f: &str| fields.is_empty() || fields.iter().any(|x| x == f);
    let mut m = Map::new();
    if want("id") {
        m.insert("id".into(), json!((index + 1).to_string()));
    }
    if want("name") {
        m.insert("name".into(), json!(node.name));
    }
    if want("type") {
        m.insert("type".into(), json!(node.control_type));
    }
    if want("rect") {
        m.insert("rect".into(), json!(node.rect.to_ltrb()));
    }
    if want("enabled") {
        m.insert("enabled".into(), json!(node.enabled));
    }
    if want("visible") {
        m.insert("visible".into(), json!(node.visible));
    }
    if want("automation_id") {
        m.insert("automation_id".into(), json!(node.automation_id));
    }
    if want("kind") {
        m.insert("kind".into(), json!("CONTROL"));
    }
    // An editable control's current text; without a field list only when there is one.
    if fields.iter().any(|x| x == "value") || (fields.is_empty() && !node.value.is_empty()) {
        m.insert("value".into(), json!(node.value));
    }
    Value::Object(m)
}

/// Nests a pre-order list into `{name, type, rect, enabled, visible, children}` objects.
pub fn nested_json(nodes: &[RawNode]) -> Value {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut roots = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        match n.parent.filter(|&p| p < i) {
            Some(p) => children[p].push(i),
            None => roots.push(i),
        }
    }
    // Build bottom-up so no recursion depth depends on client-chosen limits.
    let mut built: Vec<Option<Value>> = vec![None; nodes.len()];
    for i in (0..nodes.len()).rev() {
        let n = &nodes[i];
        let kids: Vec<Value> = children[i]
            .iter()
            .filter_map(|&c| built[c].take())
            .collect();
        let mut v = json!({
            "name": n.name,
            "type": n.control_type,
            "rect": n.rect.to_ltrb(),
            "enabled": n.enabled,
            "visible": n.visible,
            "children": kids,
        });
        if !n.value.is_empty() {
            v["value"] = json!(n.value);
        }
        built[i] = Some(v);
    }
    let mut out: Vec<Value> = roots.iter().filter_map(|&r| built[r].take()).collect();
    if out.len() == 1 {
        out.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ControlHandle;
    use crate::geometry::Rect;

    fn node(name: &str, ty: &str, parent: Option<usize>, visible: bool) -> RawNode {
        RawNode {
            handle: ControlHandle(name.into()),
            parent,
            depth: parent.map_or(0, |_| 1),
            name: name.into(),
            control_type: ty.into(),
            rect: Rect::from_xywh(0, 0, 10, 10),
            enabled: true,
            visible,
            automation_id: String::new(),
            value: String::new(),
        }
    }

    fn tree() -> RawTree {
        RawTree {
            nodes: vec![
                node("win", "Window", None, true),
                node("Ok", "Button", Some(0), true),
                node("pane", "Pane", Some(0), true),
                node("Name", "Edit", Some(2), true),
                node("hidden", "Button", Some(2), false),
            ],
            truncated: false,
        }
    }

    #[test]
    fn filters_by_type_and_visibility() {
        let types: Vec<String> = DEFAULT_CONTROL_TYPES
            .iter()
            .map(|s| s.to_string())
            .collect();
        let kept = filter_controls(&tree(), &types);
        let names: Vec<_> = kept.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["Ok", "Name"]);
    }

    #[test]
    fn resolves_ids_with_warnings_and_errors() {
        let listing = ControlListing {
            window: 1,
            controls: filter_controls(&tree(), &["Button".into(), "Edit".into()]),
            front: String::new(),
        };
        let (n, w) = listing.resolve("2", Some("name")).unwrap();
        assert_eq!((n.name.as_str(), w), ("Name", None));
        let (n, w) = listing.resolve("1", Some("Cancel")).unwrap();
        assert_eq!(n.name, "Ok");
        assert!(w.unwrap().contains("named 'Ok', not 'Cancel'"));
        let err = listing.resolve("9", None).unwrap_err();
        assert_eq!(err.to_string(), "unknown control id '9'; valid ids are 1-2");
        assert!(listing.resolve("0", None).is_err());
        assert!(listing.resolve("x", None).is_err());
        assert!(names_match("_Open", "open "));
    }

    #[test]
    fn field_lists_and_nesting() {
        let t = tree();
        let v = control_json(0, &t.nodes[1], &["id".into(), "rect".into()]);
        assert_eq!(v, json!({"id": "1", "rect": [0, 0, 10, 10]}));
        let nested = nested_json(&t.nodes);
        assert_eq!(nested["name"], "win");
        assert_eq!(nested["children"][1]["children"][0]["name"], "Name");
        assert_eq!(nested["children"].as_array().unwrap().len(), 2);
    }
}
