//! The selected window's controls: listing them with positional ids (what the AppAgent's screenshot is
//! labelled with), reading a control's text, and resolving an id the agent sends back to a control that
//! can be acted on now (the app actions in [`super::act`] use [`Cx::actionable`]).

use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::observe::front_window_warning;
use super::{Cx, Id, Kind, Output, ToolDef, ToolError};
use crate::backend::{ActionKind, BackendError, RawNode, TreeLimits};
use crate::tree::{ControlListing, ControlPath, filter_with_paths};
use crate::wait::Usable;

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
    "ancestors",
    "sibling_index",
];

/// A listed control, with the fields the listing asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct ControlEntry {
    /// Its id in this listing (`"1"` for the first control).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its accessible name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its UI Automation control type ("Button", "Edit", ...).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub control_type: Option<String>,
    /// `[left, top, right, bottom]` in screen pixels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rect: Option<[i32; 4]>,
    /// Accepts input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// On screen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visible: Option<bool>,
    /// Its automation id, empty when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automation_id: Option<String>,
    /// Always `CONTROL`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["CONTROL"]))]
    pub kind: Option<&'static str>,
    /// An editable control's current text (bounded); without a field list only when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Name and type of each ancestor, parent first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ancestors: Option<Vec<Ancestor>>,
    /// Position among the parent's children of the same name and type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sibling_index: Option<u32>,
}

/// One ancestor of a listed control.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Ancestor {
    /// Its accessible name.
    pub name: String,
    /// Its control type.
    #[serde(rename = "type")]
    pub control_type: String,
}

impl ControlEntry {
    /// The entry of the control at `index` in a listing, restricted to `fields` (all of
    /// [`CONTROL_FIELDS`] when empty); the path fields only when `path` is given.
    pub fn new(
        index: usize,
        node: &RawNode,
        path: Option<&ControlPath>,
        fields: &[String],
    ) -> Self {
        let want = |f: &str| fields.is_empty() || fields.iter().any(|x| x == f);
        let asked_value = fields.iter().any(|x| x == "value");
        Self {
            id: want("id").then(|| (index + 1).to_string()),
            name: want("name").then(|| node.name.clone()),
            control_type: want("type").then(|| node.control_type.clone()),
            rect: want("rect").then(|| node.rect.to_ltrb()),
            enabled: want("enabled").then_some(node.enabled),
            visible: want("visible").then_some(node.visible),
            automation_id: want("automation_id").then(|| node.automation_id.clone()),
            kind: want("kind").then_some("CONTROL"),
            value: (asked_value || (fields.is_empty() && !node.value.is_empty()))
                .then(|| node.value.clone()),
            ancestors: path.filter(|_| want("ancestors")).map(|p| {
                p.ancestors
                    .iter()
                    .map(|(name, ty)| Ancestor {
                        name: name.clone(),
                        control_type: ty.clone(),
                    })
                    .collect()
            }),
            sibling_index: path
                .filter(|_| want("sibling_index"))
                .map(|p| p.sibling_index),
        }
    }
}

/// `get_app_window_controls_target_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetAppWindowControlsTargetInfo {
    /// Fields each control carries (id, name, type, rect, enabled, visible, automation_id, kind, value,
    /// ancestors, sibling_index); empty means all.
    #[serde(default)]
    pub field_list: Vec<String>,
}

impl ToolDef for GetAppWindowControlsTargetInfo {
    const NAME: &'static str = "get_app_window_controls_target_info";
    const DESCRIPTION: &'static str = "The controls of the selected window with positional ids (valid \
                                       until the next listing) for the app actions.";
    const KIND: Kind = Kind::Observation;
    type Output = Vec<ControlEntry>;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        if let Some(bad) = self
            .field_list
            .iter()
            .find(|f| !CONTROL_FIELDS.contains(&f.as_str()))
        {
            return Err(ToolError::invalid(
                Self::NAME,
                format!(
                    "unknown field '{bad}' in field_list; known fields: {}",
                    CONTROL_FIELDS.join(", ")
                ),
            ));
        }
        // Fresh: the title may have changed (a saved document), and the warning compares it.
        let w = cx.selected_fresh().await?;
        let deadline = cx.deadline;
        let listing = cx.list_controls(deadline).await?;
        let entries: Vec<_> = listing
            .controls
            .iter()
            .enumerate()
            .map(|(i, n)| ControlEntry::new(i, n, listing.paths.get(i), &self.field_list))
            .collect();
        let warnings = front_window_warning(&w, &listing.front);
        Ok(Output::warned(entries, warnings))
    }
}

/// `texts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Texts {
    /// The control's id.
    pub id: Id,
    /// The control's name, checked against the id.
    #[serde(default)]
    pub name: Option<String>,
}

impl ToolDef for Texts {
    const NAME: &'static str = "texts";
    const DESCRIPTION: &'static str = "The text a control shows.";
    const KIND: Kind = Kind::Observation;
    type Output = String;

    async fn run(self, cx: &mut Cx<'_>) -> Result<Output<Self::Output>, ToolError> {
        let (node, warnings) = cx.control(&self.id.0, self.name.as_deref()).await?;
        let text = cx.exec.backend.read_text(&node).await?;
        Ok(Output::warned(text, warnings))
    }
}

/// A listed control about to be acted on.
pub(crate) struct Target {
    /// The id it was addressed by.
    pub id: String,
    /// The control, with its live bounds.
    pub node: RawNode,
    /// Remarks on the id (a name that does not match it).
    pub warnings: Vec<String>,
}

impl Cx<'_> {
    /// Lists the selected window's controls (walking its tree until `deadline`) and keeps the listing
    /// for the ids of later commands.
    async fn list_controls(&mut self, deadline: Instant) -> Result<&ControlListing, ToolError> {
        let w = self.selected()?;
        let limits = &self.exec.limits;
        let tree_limits = TreeLimits {
            max_nodes: limits.max_tree_nodes as usize,
            max_depth: limits.max_tree_depth,
            deadline,
            max_value_chars: limits.max_value_chars,
            // The filter keeps visible controls of these types with an area; unnamed fields are named
            // after the labels beside them: no other node's bounds are needed.
            bounds_of: Some(
                limits
                    .control_types
                    .iter()
                    .map(String::as_str)
                    .chain(crate::labels::BOUNDS_USED.iter().copied())
                    .map(str::to_owned)
                    .collect(),
            ),
        };
        let tree = self.exec.backend.control_tree(&w, &tree_limits).await?;
        let (controls, paths) = filter_with_paths(&tree, &limits.control_types);
        let listing = self.st.listing.insert(ControlListing {
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

    /// The control an id names in the current listing (listing first when there is none), with a
    /// warning when `name` is not its name.
    async fn control(
        &mut self,
        id: &str,
        name: Option<&str>,
    ) -> Result<(RawNode, Vec<String>), ToolError> {
        let w = self.selected()?;
        let deadline = self.deadline;
        let listing = match &self.st.listing {
            Some(l) if l.window == w.handle => l,
            _ => self.list_controls(deadline).await?,
        };
        let (node, warning) = listing.resolve(id, name)?;
        Ok((node.clone(), warning.into_iter().collect()))
    }

    /// Reads `node`'s facts before the action on it, for its effect check (when effect checks are
    /// on; facts that cannot be read leave the comparison to the rest of the desktop). The change
    /// mark is taken again first: what happened while the control was looked up or waited for (it
    /// turning enabled) is not the action's doing.
    pub(crate) async fn watch(&mut self, node: &RawNode) {
        if !self.exec.limits.effect_check {
            return;
        }
        if let Some(mark) = self.exec.backend.change_mark() {
            self.st.unsettled = Some((mark, std::time::Instant::now()));
        }
        let before = self.exec.backend.control_facts(node).await.ok();
        self.watched = Some(crate::effect::Watched {
            node: node.clone(),
            before,
        });
    }

    /// Focusing a control before typing is not part of what the keys do: when the focus moved, the
    /// screen is let settle, the control is watched until it reports the focus (at every desktop
    /// change, at least every [`crate::wait::RECHECK`], within the action wait), and the effect check
    /// starts again from there (a new change mark, the control's facts read again).
    pub(crate) async fn focused_before_keys(&mut self, node: &RawNode) {
        let moved = self
            .watched
            .as_ref()
            .and_then(|w| w.before.as_ref())
            .is_some_and(|f| f.focused == Some(false));
        if !moved {
            return;
        }
        let report = self.exec.settle_pending(self.st).await;
        self.st.settled = report;
        let until = (std::time::Instant::now() + self.exec.limits.action_wait).min(self.deadline);
        loop {
            let mark = self.exec.backend.change_mark();
            let focused = self.exec.backend.control_facts(node).await.ok();
            let now = std::time::Instant::now();
            if focused.is_none_or(|f| f.focused != Some(false)) || now >= until {
                break;
            }
            let wake = (now + crate::wait::RECHECK).min(until);
            let seen = match mark {
                Some(m) => self.exec.backend.activity_after(m, wake).await,
                None => false,
            };
            if !seen {
                tokio::time::sleep_until(wake.into()).await;
            }
        }
        self.watch(node).await;
    }

    /// The control `id` names, which can be acted on now: it exists, is enabled and visible (read live
    /// before an action of `kind`, see [`crate::backend::Backend::action_state`]).
    pub(crate) async fn actionable(
        &mut self,
        id: &Id,
        name: Option<&str>,
        kind: ActionKind,
    ) -> Result<Target, ToolError> {
        let id = &id.0;
        let (mut node, mut warnings) = self.control(id, name).await?;
        let usable = self
            .exec
            .wait_usable(&node, kind, self.deadline)
            .await
            .map_err(|e| match e {
                BackendError::Gone(_) => ToolError::ControlGone(id.to_owned(), node.name.clone()),
                other => other.into(),
            })?;
        let live = match usable {
            Usable::Ready(live, waited) => {
                if !waited.is_zero() {
                    warnings.push(format!(
                        "waited {} ms for control {id} '{}' ({}) to become usable",
                        waited.as_millis(),
                        node.name,
                        node.control_type
                    ));
                }
                live
            }
            Usable::Not(why, waited) => {
                return Err(ToolError::Unusable {
                    id: id.to_owned(),
                    name: node.name,
                    control_type: node.control_type,
                    why: why.as_str(),
                    waited,
                });
            }
        };
        node.rect = live.rect;
        self.watch(&node).await;
        Ok(Target {
            id: id.clone(),
            node,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ControlHandle, RawTree};
    use crate::geometry::Rect;
    use serde_json::json;

    fn node(name: &str, ty: &str, parent: Option<usize>) -> RawNode {
        RawNode {
            handle: ControlHandle(name.into()),
            parent,
            depth: parent.map_or(0, |_| 1),
            name: name.into(),
            control_type: ty.into(),
            rect: Rect::from_xywh(0, 0, 10, 10),
            enabled: true,
            visible: true,
            automation_id: String::new(),
            value: String::new(),
        }
    }

    fn entry_json(e: ControlEntry) -> serde_json::Value {
        serde_json::to_value(e).unwrap()
    }

    #[test]
    fn entries_carry_the_fields_asked_for() {
        let ok = node("Ok", "Button", Some(0));
        let v = entry_json(ControlEntry::new(
            0,
            &ok,
            None,
            &["id".into(), "rect".into()],
        ));
        assert_eq!(v, json!({"id": "1", "rect": [0, 0, 10, 10]}));
        let all = entry_json(ControlEntry::new(4, &ok, None, &[]));
        assert_eq!(
            all,
            json!({"id": "5", "name": "Ok", "type": "Button", "rect": [0, 0, 10, 10],
                   "enabled": true, "visible": true, "automation_id": "", "kind": "CONTROL"})
        );
        // An empty value is listed only when asked for.
        let asked = entry_json(ControlEntry::new(0, &ok, None, &["value".into()]));
        assert_eq!(asked, json!({"value": ""}));
        let mut edit = node("Name", "Edit", Some(0));
        edit.value = "abc".into();
        assert_eq!(
            entry_json(ControlEntry::new(0, &edit, None, &[]))["value"],
            "abc"
        );
    }

    #[test]
    fn entries_carry_their_path() {
        let tree = RawTree {
            nodes: vec![
                node("win", "Window", None),
                node("pane", "Pane", Some(0)),
                node("Name", "Edit", Some(1)),
                node("Name", "Edit", Some(1)),
            ],
            truncated: false,
        };
        let (kept, paths) = filter_with_paths(&tree, &["Edit".into()]);
        let v = entry_json(ControlEntry::new(1, &kept[1], Some(&paths[1]), &[]));
        assert_eq!(
            v["ancestors"],
            json!([{"name": "pane", "type": "Pane"}, {"name": "win", "type": "Window"}])
        );
        assert_eq!(v["sibling_index"], 1);
        let fields = ["id".to_owned(), "sibling_index".to_owned()];
        assert_eq!(
            entry_json(ControlEntry::new(1, &kept[1], Some(&paths[1]), &fields)),
            json!({"id": "2", "sibling_index": 1})
        );
    }
}
