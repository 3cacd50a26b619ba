//! The tree walk of the Linux backend: which top-level accessible the user sees, and its live, visible
//! subtree.
//!
//! One `org.a11y.atspi.Cache.GetItems` call returns an application's cached tree (names, roles, states,
//! interfaces, parents). The cache is not the screen: it keeps nodes the application no longer shows
//! (hidden notebook pages, closed menus; their rect is `[-2147483648, ...]`) and leaves out the children
//! of containers that manage their descendants (tables, tree views, list boxes, menus report
//! `children = -1`). So the walk prunes every subtree that is not `showing` before fetching any extents
//! (listing cost does not grow with hidden cached nodes), and walks the left-out children live, level by
//! level with concurrent calls, bounded by the node and time limits.

use std::collections::HashMap;

use atspi::proxy::accessible::AccessibleProxy;
use atspi::proxy::cache::CacheProxy;
use atspi::proxy::text::TextProxy;
use atspi::{Interface, InterfaceSet, RelationType, Role, State, StateSet};
use futures::future::join_all;
use tracing::Instrument as _;

use super::atspi::{Atspi, Key, ROOT_PATH, enabled, proxy, visible};
use super::front::choose_top;
use super::order::preorder;
use super::roles::control_type;
use crate::backend::{
    BackendError, BackendResult, ControlHandle, RawNode, RawTree, TreeLimits, WindowInfo,
};

/// The children the walk knows of each accessible, with their index in the parent.
pub(super) type Children = HashMap<Key, Vec<(i32, Key)>>;

/// What the walk knows about one accessible.
#[derive(Debug, Clone)]
pub(super) struct Info {
    pub name: String,
    pub role: Role,
    pub states: StateSet,
    /// Children the accessible reports; -1 when it manages its descendants (walk them live).
    pub child_count: i32,
    pub ifaces: InterfaceSet,
}

/// The control type a node is listed as.
fn kind_of(i: &Info) -> &'static str {
    match control_type(i.role, i.states.contains(State::Editable)) {
        // An icon with an action (an entry's clear or refresh icon) is a button.
        "Image" if i.ifaces.contains(Interface::Action) => "Button",
        t => t,
    }
}

impl Atspi {
    /// Walks the live, visible controls of `window` within `limits`.
    pub async fn tree(&self, window: &WindowInfo, limits: &TreeLimits) -> BackendResult<RawTree> {
        let pid = window.pid.ok_or_else(|| {
            BackendError::Failed(format!("window '{}' has no process id", window.title))
        })?;
        let bus = self.app_for_pid(pid).await?;
        let (mut info, mut children) = self
            .cached_items(&bus)
            .instrument(tracing::debug_span!("walk.cache"))
            .await?;
        let root: Key = (bus.clone(), ROOT_PATH.to_owned());
        if info.is_empty() {
            // No cache interface: walk the application live from its root.
            let root_info = self
                .live_info(&root)
                .await
                .ok_or(BackendError::Gone("application"))?;
            info.insert(root.clone(), root_info);
        }
        // The application's top-level windows are walked live: the cache's list can be stale.
        let top_keys = async {
            let top_keys = self.live_children(&root, usize::MAX).await;
            let missing: Vec<Key> = top_keys
                .iter()
                .filter(|k| !info.contains_key(*k))
                .cloned()
                .collect();
            for (k, i) in missing
                .iter()
                .zip(join_all(missing.iter().map(|k| self.live_info(k))).await)
            {
                if let Some(i) = i {
                    info.insert(k.clone(), i);
                }
            }
            top_keys
        }
        .instrument(tracing::debug_span!("walk.tops"))
        .await;
        let tops: Vec<(Key, &Info)> = top_keys
            .iter()
            .filter_map(|k| Some((k.clone(), info.get(k)?)))
            .collect();
        let (frame, popups) = choose_top(&tops, &window.title).map_err(BackendError::Failed)?;

        // Containers the cache does not describe fully are asked live, then the pre-order of the
        // showing nodes within the limits; popups hang under the window.
        let roots: Vec<Key> = std::iter::once(frame.clone())
            .chain(popups.iter().cloned())
            .collect();
        self.expand_live(&roots, &mut info, &mut children, limits)
            .instrument(tracing::debug_span!("walk.live"))
            .await;
        let (order, truncated) = preorder(frame, popups, &info, &mut children, limits);
        // Bounds of the nodes that need them, and the editable texts' details, asked together.
        let bounds_of = |i: &Info, kind: &str| {
            i.ifaces.contains(Interface::Component)
                && limits
                    .bounds_of
                    .as_ref()
                    .is_none_or(|types| visible(i.states) && types.iter().any(|t| t == kind))
        };
        let kinds: Vec<Option<&'static str>> = order
            .iter()
            .map(|(k, _, _)| info.get(k).map(kind_of))
            .collect();
        let wanted: Vec<bool> = order
            .iter()
            .zip(&kinds)
            .map(|((k, _, _), kind)| match (info.get(k), kind) {
                (Some(i), Some(kind)) => bounds_of(i, kind),
                _ => false,
            })
            .collect();
        let extents = join_all(
            order
                .iter()
                .zip(&wanted)
                .map(|((k, _, _), &wanted)| async move {
                    if wanted {
                        self.extents(&k.0, &k.1).await
                    } else {
                        None
                    }
                }),
        );
        let texts = join_all(order.iter().map(|(k, _, _)| {
            let i = info.get(k);
            self.editable_details(k, i, &info, limits.max_value_chars)
        }));
        let (extents, texts) = futures::future::join(extents, texts)
            .instrument(tracing::debug_span!("walk.details"))
            .await;
        let build = tracing::debug_span!("walk.build").entered();
        let mut remembered = Vec::with_capacity(order.len());
        let mut nodes: Vec<RawNode> = order
            .into_iter()
            .zip(extents)
            .zip(texts)
            .zip(kinds)
            .filter_map(|((((key, parent, depth), rect), (label, value)), kind)| {
                let (i, kind) = (info.get(&key)?, kind?);
                remembered.push((key.clone(), i.ifaces, rect));
                let name = if i.name.trim().is_empty() {
                    label
                } else {
                    i.name.clone()
                };
                Some(RawNode {
                    handle: ControlHandle(format!("{}\n{}", key.0, key.1)),
                    parent,
                    depth,
                    name,
                    control_type: kind.to_owned(),
                    rect: rect.unwrap_or_default(),
                    enabled: enabled(i.states),
                    visible: visible(i.states),
                    automation_id: String::new(),
                    value,
                })
            })
            .collect();
        self.remember(remembered);
        crate::labels::name_unlabelled_fields(&mut nodes);
        drop(build);
        Ok(RawTree { nodes, truncated })
    }

    /// The default buttons (those Enter presses) the application of `window` shows, each with its
    /// name and whether it accepts input now: one `Cache.GetItems` call.
    pub async fn default_buttons(&self, window: &WindowInfo) -> BackendResult<Vec<(String, bool)>> {
        let pid = window.pid.ok_or_else(|| {
            BackendError::Failed(format!("window '{}' has no process id", window.title))
        })?;
        let bus = self.app_for_pid(pid).await?;
        let (info, _) = self.cached_items(&bus).await?;
        Ok(info
            .values()
            .filter(|i| {
                i.role == Role::Button && i.states.contains(State::IsDefault) && visible(i.states)
            })
            .map(|i| (i.name.clone(), enabled(i.states)))
            .collect())
    }

    /// The application's cache (`Cache.GetItems`): what it knows about each accessible, and the
    /// children it lists under each parent.
    async fn cached_items(&self, bus: &str) -> BackendResult<(HashMap<Key, Info>, Children)> {
        let conn = self.conn_for(bus).await;
        let cache = proxy::<CacheProxy>(&conn, bus, "/org/a11y/atspi/cache").await?;
        let mut info: HashMap<Key, Info> = HashMap::new();
        let mut children: Children = HashMap::new();
        // Applications answer in the current item layout or the legacy one (children listed inline).
        match cache.get_items().await {
            Ok(items) => {
                for i in items {
                    let key: Key = (bus.to_owned(), i.object.path_as_str().to_owned());
                    let parent: Key = (bus.to_owned(), i.parent.path_as_str().to_owned());
                    children
                        .entry(parent)
                        .or_default()
                        .push((i.index, key.clone()));
                    info.insert(
                        key,
                        Info {
                            name: i.short_name,
                            role: i.role,
                            states: i.states,
                            child_count: i.children,
                            ifaces: i.ifaces,
                        },
                    );
                }
            }
            Err(_) => {
                for i in cache.get_legacy_items().await.unwrap_or_default() {
                    let key: Key = (bus.to_owned(), i.object.path_as_str().to_owned());
                    for (n, c) in i.children.iter().enumerate() {
                        children.entry(key.clone()).or_default().push((
                            i32::try_from(n).unwrap_or(i32::MAX),
                            (bus.to_owned(), c.path_as_str().to_owned()),
                        ));
                    }
                    info.insert(
                        key,
                        Info {
                            name: i.short_name,
                            role: i.role,
                            states: i.states,
                            child_count: i32::try_from(i.children.len()).unwrap_or(i32::MAX),
                            ifaces: i.ifaces,
                        },
                    );
                }
            }
        }
        Ok((info, children))
    }

    /// For an editable text with no name: the name of its label (label-for relation) or its
    /// placeholder; and its current text, at most `max_chars` characters (never a password's).
    async fn editable_details(
        &self,
        key: &Key,
        i: Option<&Info>,
        info: &HashMap<Key, Info>,
        max_chars: usize,
    ) -> (String, String) {
        let Some(i) = i else {
            return (String::new(), String::new());
        };
        let editable =
            i.states.contains(State::Editable) || i.ifaces.contains(Interface::EditableText);
        if !editable || !i.ifaces.contains(Interface::Text) {
            return (String::new(), String::new());
        }
        let conn = self.conn_for(key.0.as_str()).await;
        let value = async {
            if i.role == Role::PasswordText || max_chars == 0 {
                return String::new();
            }
            let Ok(t) = proxy::<TextProxy>(&conn, key.0.as_str(), key.1.as_str()).await else {
                return String::new();
            };
            // One character more than listed: whether there was more to say.
            let end = i32::try_from(max_chars.saturating_add(1)).unwrap_or(i32::MAX);
            let text = t.get_text(0, end).await.unwrap_or_default();
            crate::backend::listed_value(&text, max_chars)
        };
        let label = async {
            if !i.name.trim().is_empty() {
                return String::new();
            }
            let Ok(a) = proxy::<AccessibleProxy>(&conn, key.0.as_str(), key.1.as_str()).await
            else {
                return String::new();
            };
            let (rel, attrs) = futures::join!(a.get_relation_set(), a.get_attributes());
            for (kind, targets) in rel.unwrap_or_default() {
                if kind != RelationType::LabelledBy {
                    continue;
                }
                for t in targets {
                    let k: Key = (
                        t.name_as_str().unwrap_or(key.0.as_str()).to_owned(),
                        t.path_as_str().to_owned(),
                    );
                    let name = match info.get(&k) {
                        Some(l) => l.name.clone(),
                        None => self.live_info(&k).await.map(|l| l.name).unwrap_or_default(),
                    };
                    if !name.trim().is_empty() {
                        return name;
                    }
                }
            }
            attrs
                .ok()
                .and_then(|a| a.get("placeholder-text").cloned())
                .unwrap_or_default()
        };
        let (label, value) = futures::join!(label, value);
        (label, value)
    }

    /// Children of an accessible, asked live; none when it reports more than `max` (its child count is
    /// asked first): a spreadsheet's table manages every cell of its sheet (LibreOffice Calc reports
    /// 2³¹ − 1) and, asked for all of them, builds them until the call times out and the application
    /// dies. Such a container is listed without its children.
    pub(super) async fn live_children(&self, key: &Key, max: usize) -> Vec<Key> {
        let Ok(p) = self.at::<AccessibleProxy>(&key.0, &key.1).await else {
            return Vec::new();
        };
        if let Ok(n) = p.child_count().await
            && usize::try_from(n).is_ok_and(|n| n > max)
        {
            tracing::debug!(path = %key.1, children = n, max, "too many children to list");
            return Vec::new();
        }
        p.get_children()
            .await
            .map(|c| {
                c.iter()
                    .filter_map(|o| Some((o.name_as_str()?.to_owned(), o.path_as_str().to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Name, role, states, child count and interfaces of an accessible, asked live (concurrently).
    pub(super) async fn live_info(&self, key: &Key) -> Option<Info> {
        let p = self.at::<AccessibleProxy>(&key.0, &key.1).await.ok()?;
        let (name, role, states, count, ifaces) = futures::join!(
            p.name(),
            p.get_role(),
            p.get_state(),
            p.child_count(),
            p.get_interfaces()
        );
        Some(Info {
            name: name.ok()?,
            role: role.ok()?,
            states: states.ok()?,
            child_count: count.unwrap_or(0),
            ifaces: ifaces.unwrap_or_default(),
        })
    }
}
