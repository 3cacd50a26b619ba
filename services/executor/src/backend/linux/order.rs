//! The shape of a walk: which containers' children are asked live (all containers of one level at
//! once), then the pre-order of the showing nodes within the limits, computed without any call.

use std::collections::HashMap;
use std::time::Instant;

use atspi::State;
use futures::future::join_all;

use super::atspi::{Atspi, Key};
use super::walk::{Children, Info};
use crate::backend::TreeLimits;

/// One node of a walk's pre-order: its key, its parent's position in the order, its depth.
pub(super) type Placed = (Key, Option<usize>, u32);

/// Whether the cache leaves out some of a node's children (it manages its descendants, or it lists
/// fewer than it reports): they are asked live — unless it reports more children than a whole listing
/// may hold (`max_nodes`): a spreadsheet's table reports every cell of the sheet (LibreOffice Calc:
/// 2³¹ − 1), and asking for them makes the application build them all (the listing then never ends).
/// Such a container is listed without its children.
fn wants_live(key: &Key, i: &Info, children: &Children, max_nodes: usize) -> bool {
    let reported = usize::try_from(i.child_count).unwrap_or(0);
    if reported > max_nodes {
        return false;
    }
    i.child_count < 0 || children.get(key).map_or(0, Vec::len) < reported
}

/// The showing children of `key` in index order (sorted in place), or none.
fn showing_children<'c>(
    key: &Key,
    info: &HashMap<Key, Info>,
    children: &'c mut Children,
) -> impl Iterator<Item = &'c Key> {
    let kids = children.get_mut(key).map(|k| {
        k.sort_by_key(|(n, _)| *n);
        &*k
    });
    kids.into_iter().flatten().map(|(_, k)| k).filter(|k| {
        info.get(*k)
            .is_some_and(|i| i.states.contains(State::Showing))
    })
}

impl Atspi {
    /// Asks live the children of every showing container the cache does not describe fully, level by
    /// level from `roots`: the containers of one level and then their new children's details are asked
    /// concurrently, so a level costs two round trips (however many containers it has). At most
    /// `limits.max_nodes` nodes are asked live; nothing below `limits.max_depth`; stops at the deadline.
    pub(super) async fn expand_live(
        &self,
        roots: &[Key],
        info: &mut HashMap<Key, Info>,
        children: &mut Children,
        limits: &TreeLimits,
    ) {
        let mut budget = limits.max_nodes;
        let mut level: Vec<Key> = roots.to_vec();
        let mut depth = 0;
        while !level.is_empty() && depth < limits.max_depth && Instant::now() < limits.deadline {
            let open: Vec<&Key> = level
                .iter()
                .filter(|k| {
                    info.get(*k)
                        .is_some_and(|i| wants_live(k, i, children, limits.max_nodes))
                })
                .collect();
            if budget > 0 && !open.is_empty() {
                let kids =
                    join_all(open.iter().map(|k| self.live_children(k, limits.max_nodes))).await;
                let mut new: Vec<Key> = Vec::new();
                for (key, kids) in open.into_iter().zip(kids) {
                    new.extend(
                        kids.iter()
                            .filter(|k| !info.contains_key(*k))
                            .take(budget.saturating_sub(new.len()))
                            .cloned()
                            .collect::<Vec<_>>(),
                    );
                    let list = kids
                        .into_iter()
                        .enumerate()
                        .map(|(n, k)| (i32::try_from(n).unwrap_or(i32::MAX), k))
                        .collect();
                    children.insert(key.clone(), list);
                }
                budget -= new.len();
                let infos = join_all(new.iter().map(|k| self.live_info(k))).await;
                for (k, i) in new.into_iter().zip(infos) {
                    if let Some(i) = i {
                        info.insert(k, i);
                    }
                }
            }
            let mut next = Vec::new();
            for k in &level {
                next.extend(showing_children(k, info, children).cloned());
            }
            level = next;
            depth += 1;
        }
    }
}

/// The pre-order of the showing nodes under `frame` (and the `popups`, hung under it at depth 1)
/// within the node and depth limits; true when a limit cut it short.
pub(super) fn preorder(
    frame: Key,
    popups: Vec<Key>,
    info: &HashMap<Key, Info>,
    children: &mut Children,
    limits: &TreeLimits,
) -> (Vec<Placed>, bool) {
    let mut truncated = false;
    let mut order: Vec<Placed> = Vec::new();
    let mut stack: Vec<Placed> = popups.into_iter().rev().map(|k| (k, Some(0), 1)).collect();
    stack.push((frame, None, 0));
    while let Some((key, parent, depth)) = stack.pop() {
        if order.len() >= limits.max_nodes || Instant::now() >= limits.deadline {
            truncated = true;
            break;
        }
        let Some(i) = info.get(&key) else { continue };
        if parent.is_some() && !i.states.contains(State::Showing) {
            continue;
        }
        let me = order.len();
        order.push((key.clone(), parent, depth));
        if let Some(kids) = children.get_mut(&key) {
            kids.sort_by_key(|(n, _)| *n);
            if depth >= limits.max_depth {
                truncated |= !kids.is_empty();
            } else {
                stack.extend(
                    kids.iter()
                        .rev()
                        .map(|(_, k)| (k.clone(), Some(me), depth + 1)),
                );
            }
        }
    }
    (order, truncated)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use atspi::{InterfaceSet, Role};

    use super::*;

    fn key(p: &str) -> Key {
        (":1.1".into(), p.into())
    }

    fn node(showing: bool, child_count: i32) -> Info {
        Info {
            name: String::new(),
            role: Role::Panel,
            states: if showing {
                [State::Showing].into_iter().collect()
            } else {
                Default::default()
            },
            child_count,
            ifaces: InterfaceSet::empty(),
        }
    }

    fn limits(max_nodes: usize, max_depth: u32) -> TreeLimits {
        TreeLimits {
            max_nodes,
            max_depth,
            deadline: Instant::now() + Duration::from_secs(60),
            max_value_chars: 0,
            bounds_of: None,
        }
    }

    /// frame ─ a (showing) ─ a1 (showing); frame ─ b (hidden) ─ b1 (showing); popup (showing).
    fn tree() -> (HashMap<Key, Info>, Children) {
        let info: HashMap<Key, Info> = [
            ("/f", node(false, 2)),
            ("/a", node(true, 1)),
            ("/a1", node(true, 0)),
            ("/b", node(false, 1)),
            ("/b1", node(true, 0)),
            ("/p", node(true, 0)),
        ]
        .into_iter()
        .map(|(p, i)| (key(p), i))
        .collect();
        let mut children = Children::new();
        // Listed out of order: the index decides.
        children.insert(key("/f"), vec![(1, key("/b")), (0, key("/a"))]);
        children.insert(key("/a"), vec![(0, key("/a1"))]);
        children.insert(key("/b"), vec![(0, key("/b1"))]);
        (info, children)
    }

    #[test]
    fn the_preorder_skips_hidden_subtrees_and_hangs_popups_under_the_window() {
        let (info, mut children) = tree();
        let (order, truncated) = preorder(
            key("/f"),
            vec![key("/p")],
            &info,
            &mut children,
            &limits(100, 64),
        );
        let got: Vec<(&str, Option<usize>, u32)> = order
            .iter()
            .map(|(k, p, d)| (k.1.as_str(), *p, *d))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/f", None, 0),
                ("/a", Some(0), 1),
                ("/a1", Some(1), 2),
                ("/p", Some(0), 1)
            ]
        );
        assert!(!truncated);
    }

    #[test]
    fn the_node_and_depth_limits_truncate() {
        let (info, mut children) = tree();
        let (order, truncated) = preorder(key("/f"), vec![], &info, &mut children, &limits(2, 64));
        assert_eq!(order.len(), 2);
        assert!(truncated);
        let (order, truncated) = preorder(key("/f"), vec![], &info, &mut children, &limits(100, 1));
        assert_eq!(order.len(), 2, "{order:?}");
        assert!(truncated);
    }

    #[test]
    fn containers_the_cache_lists_short_are_asked_live() {
        let (info, children) = tree();
        assert!(!wants_live(&key("/a"), &info[&key("/a")], &children, 100));
        assert!(wants_live(&key("/a1"), &node(true, -1), &children, 100));
        assert!(wants_live(&key("/a1"), &node(true, 3), &children, 100));
        // A spreadsheet's table reporting every cell of the sheet: listed without them.
        assert!(!wants_live(
            &key("/a1"),
            &node(true, i32::MAX),
            &children,
            100
        ));
        assert!(!wants_live(&key("/a1"), &node(true, 101), &children, 100));
    }
}
