//! Platform-independent handling of a window's control tree: filtering by control type, positional ids
//! (`"1"`, `"2"`, ... per listing, as the reference's annotation labels), resolving an id the agent sends
//! back (unknown id, name mismatch), and the nested JSON of `get_ui_tree`.
//! Each listed control also carries where it sits ([`ControlPath`]: its ancestors and its index among
//! identical siblings), which the agent keeps as the action's selector to find the control again in a
//! replay. Computed here from the flattened tree, so every backend (AT-SPI, UI Automation) reports it.

use serde_json::{Value, json};
use ufo_common::names::names_match;

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

/// Where a listed control sits in its window's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlPath {
    /// `(name, control type)` of each ancestor, the parent first, the window last.
    pub ancestors: Vec<(String, String)>,
    /// Position among the parent's children of the same name and type (0 for the first).
    pub sibling_index: u32,
}

impl ControlPath {
    /// The path of `tree.nodes[index]`.
    pub fn of(tree: &RawTree, index: usize) -> Self {
        let nodes = &tree.nodes;
        let Some(node) = nodes.get(index) else {
            return Self::default();
        };
        let mut ancestors = Vec::new();
        let mut at = node.parent.filter(|&p| p < index);
        while let Some(p) = at {
            let n = &nodes[p];
            ancestors.push((n.name.clone(), n.control_type.clone()));
            at = n.parent.filter(|&q| q < p);
        }
        let identical = nodes[..index]
            .iter()
            .filter(|n| {
                n.parent == node.parent
                    && n.name == node.name
                    && n.control_type == node.control_type
            })
            .count();
        Self {
            ancestors,
            sibling_index: u32::try_from(identical).unwrap_or(u32::MAX),
        }
    }
}

/// The numbered controls of one window from one listing.
#[derive(Debug, Clone, Default)]
pub struct ControlListing {
    /// The window they belong to.
    pub window: u64,
    /// Control `i` has id `i + 1`.
    pub controls: Vec<RawNode>,
    /// The name of the window the controls belong to (a dialog in front of the selected window).
    pub front: String,
    /// Where each control sits (same order as `controls`).
    pub paths: Vec<ControlPath>,
}

/// Keeps the controls worth showing an agent: of a wanted type, visible, with an on-screen area.
pub fn filter_controls(tree: &RawTree, types: &[String]) -> Vec<RawNode> {
    kept(tree, types).map(|(_, n)| n.clone()).collect()
}

/// [`filter_controls`] with each kept control's [`ControlPath`].
pub fn filter_with_paths(tree: &RawTree, types: &[String]) -> (Vec<RawNode>, Vec<ControlPath>) {
    kept(tree, types)
        .map(|(i, n)| (n.clone(), ControlPath::of(tree, i)))
        .unzip()
}

fn kept<'a>(tree: &'a RawTree, types: &'a [String]) -> impl Iterator<Item = (usize, &'a RawNode)> {
    tree.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.parent.is_some())
        .filter(|(_, n)| types.iter().any(|t| t == &n.control_type))
        .filter(|(_, n)| n.visible && !n.rect.is_empty())
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
            paths: Vec::new(),
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
    fn nesting() {
        let t = tree();
        let nested = nested_json(&t.nodes);
        assert_eq!(nested["name"], "win");
        assert_eq!(nested["children"][1]["children"][0]["name"], "Name");
        assert_eq!(nested["children"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn paths_name_ancestors_and_identical_siblings() {
        let mut t = tree();
        t.nodes.push(node("Name", "Edit", Some(2), true));
        t.nodes.push(node("Name", "Button", Some(2), true));
        let types: Vec<String> = vec!["Edit".into(), "Button".into()];
        let (kept, paths) = filter_with_paths(&t, &types);
        assert_eq!(kept.len(), 4);
        let win = ("win".to_owned(), "Window".to_owned());
        let pane = ("pane".to_owned(), "Pane".to_owned());
        assert_eq!(paths[0].ancestors, vec![win.clone()]);
        assert_eq!(paths[1].ancestors, vec![pane, win]);
        // The two "Name" edits under the pane are 0 and 1; the "Name" button is another kind.
        let idx: Vec<_> = paths.iter().map(|p| p.sibling_index).collect();
        assert_eq!(idx, [0, 0, 1, 0]);
    }
}
