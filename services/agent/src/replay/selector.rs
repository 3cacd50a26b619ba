//! Selectors: how a recorded action's target is found again without its positional id (the executor
//! numbers controls per listing, so an id means nothing in a later one). A selector keeps what the
//! executor reported about the target: its type and name, the names and types of its ancestors, its
//! automation id where it has one, its index among identical siblings, and a window's process.
//!
//! Finding a control: the candidates are the listed controls of the same type and (loosely) the same
//! name; an automation id, when recorded and present, narrows them; ties go to the candidate whose
//! ancestors agree most, then to the one at the recorded sibling index. Positions never count: a moved
//! or resized window finds the same controls.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use ufo_common::names::names_match;
use ufo_proto::v1;

use crate::agents::target::{TargetInfo, TargetKind};

/// A selector as the replay plan keeps it (the serde form of `ufo.v1.Selector`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// Control type (`Button`, `Edit`, ...), or the window's type.
    #[serde(rename = "type")]
    pub control_type: String,
    /// Accessible name or window title.
    pub name: String,
    /// `(name, type)` of each ancestor, the parent first.
    #[serde(default)]
    pub ancestors: Vec<(String, String)>,
    /// Automation id; empty when none.
    #[serde(default)]
    pub automation_id: String,
    /// Index among the parent's children of the same name and type.
    #[serde(default)]
    pub sibling_index: u32,
    /// A window's process name; empty for controls.
    #[serde(default)]
    pub process: String,
}

fn clean(s: &str) -> String {
    // The store refuses NUL in text; an accessible name could carry one.
    s.replace('\0', "")
}

impl Selector {
    /// The selector of a target as the executor reported it (`ancestors` and `sibling_index` come with
    /// each listed control).
    pub fn of_target(t: &TargetInfo) -> Self {
        let text = |k: &str| t.extra.get(k).and_then(Value::as_str).map(clean);
        let ancestors = t
            .extra
            .get("ancestors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|a| {
                let name = a.get("name")?.as_str()?;
                let ty = a.get("type")?.as_str()?;
                Some((clean(name), clean(ty)))
            })
            .collect();
        Self {
            control_type: clean(&t.control_type),
            name: clean(&t.name),
            ancestors,
            automation_id: text("automation_id").unwrap_or_default(),
            sibling_index: t
                .extra
                .get("sibling_index")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            process: if t.kind == TargetKind::Application {
                clean(&t.app_root())
            } else {
                String::new()
            },
        }
    }

    /// As the session proto.
    pub fn to_proto(&self) -> v1::Selector {
        v1::Selector {
            control_type: self.control_type.clone(),
            name: self.name.clone(),
            ancestors: self
                .ancestors
                .iter()
                .map(|(name, ty)| v1::SelectorNode {
                    name: name.clone(),
                    control_type: ty.clone(),
                })
                .collect(),
            automation_id: self.automation_id.clone(),
            sibling_index: self.sibling_index,
            process: self.process.clone(),
        }
    }

    /// From the session proto.
    pub fn from_proto(s: &v1::Selector) -> Self {
        Self {
            control_type: s.control_type.clone(),
            name: s.name.clone(),
            ancestors: s
                .ancestors
                .iter()
                .map(|n| (n.name.clone(), n.control_type.clone()))
                .collect(),
            automation_id: s.automation_id.clone(),
            sibling_index: s.sibling_index,
            process: s.process.clone(),
        }
    }

    /// For messages: `Button "Save" in Dialog "Save As" › Frame "Untitled" (sibling 0)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {:?}", self.control_type, self.name);
        if !self.automation_id.is_empty() {
            s.push_str(&format!(" [automation id {:?}]", self.automation_id));
        }
        if !self.process.is_empty() {
            s.push_str(&format!(" of process {:?}", self.process));
        }
        if !self.ancestors.is_empty() {
            let path: Vec<String> = self
                .ancestors
                .iter()
                .map(|(n, t)| format!("{t} {n:?}"))
                .collect();
            s.push_str(&format!(" in {}", path.join(" › ")));
        }
        if self.process.is_empty() {
            s.push_str(&format!(" (sibling {})", self.sibling_index));
        }
        s
    }

    /// The control (or window) among `candidates` this selector names, if any.
    pub fn find<'a>(&self, candidates: &'a [TargetInfo]) -> Option<&'a TargetInfo> {
        if !self.process.is_empty() {
            return self.find_window(candidates);
        }
        let same: Vec<&TargetInfo> = candidates
            .iter()
            .filter(|c| c.kind != TargetKind::Application)
            .filter(|c| c.control_type == self.control_type && names_match(&c.name, &self.name))
            .collect();
        let by_id: Vec<&TargetInfo> = same
            .iter()
            .copied()
            .filter(|c| {
                !self.automation_id.is_empty()
                    && c.extra.get("automation_id").and_then(Value::as_str)
                        == Some(self.automation_id.as_str())
            })
            .collect();
        let pool = if by_id.is_empty() { same } else { by_id };
        // Highest score wins; the first listed among equals (pre-order, like the recording).
        let mut best: Option<(&TargetInfo, (usize, bool))> = None;
        for c in pool {
            let other = Self::of_target(c);
            let score = (
                self.ancestors_agreeing(&other),
                other.sibling_index == self.sibling_index,
            );
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((c, score));
            }
        }
        best.map(|(c, _)| c)
    }

    /// How many ancestors, from the parent up, agree in type and (loosely) name; the outermost
    /// ancestor (the window) agrees by type alone, since titles change with the document.
    fn ancestors_agreeing(&self, other: &Self) -> usize {
        let last = self.ancestors.len().saturating_sub(1);
        self.ancestors
            .iter()
            .zip(&other.ancestors)
            .enumerate()
            .take_while(|(i, (a, b))| a.1 == b.1 && (*i == last || names_match(&a.0, &b.0)))
            .count()
    }

    fn find_window<'a>(&self, candidates: &'a [TargetInfo]) -> Option<&'a TargetInfo> {
        let windows = candidates
            .iter()
            .filter(|c| c.kind == TargetKind::Application);
        let mut same_process = windows
            .clone()
            .filter(|w| names_match(&w.app_root(), &self.process));
        windows
            .clone()
            .find(|w| names_match(&w.name, &self.name) && names_match(&w.app_root(), &self.process))
            .or_else(|| same_process.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn control(label: &str, v: Value) -> TargetInfo {
        let mut t = TargetInfo::from_json(&v, TargetKind::Control).unwrap();
        t.label = label.into();
        t
    }

    fn listing() -> Vec<TargetInfo> {
        let win = json!({"name": "Untitled 1 - Mousepad", "type": "Frame"});
        let dialog = json!({"name": "Save As", "type": "Dialog"});
        vec![
            control(
                "1",
                json!({"id": "1", "name": "OK", "type": "Button", "rect": [0, 0, 9, 9],
                "ancestors": [{"name": "Find", "type": "Dialog"}, win], "sibling_index": 0}),
            ),
            control(
                "2",
                json!({"id": "2", "name": "OK", "type": "Button", "rect": [50, 0, 59, 9],
                "ancestors": [dialog, win], "sibling_index": 0}),
            ),
            control(
                "3",
                json!({"id": "3", "name": "_Save", "type": "Button", "rect": [9, 9, 19, 19],
                "ancestors": [dialog, win], "sibling_index": 0}),
            ),
            control(
                "4",
                json!({"id": "4", "name": "", "type": "Edit", "rect": [0, 20, 9, 29],
                "ancestors": [dialog, win], "sibling_index": 0}),
            ),
            control(
                "5",
                json!({"id": "5", "name": "", "type": "Edit", "rect": [0, 30, 9, 39],
                "ancestors": [dialog, win], "sibling_index": 1}),
            ),
        ]
    }

    #[test]
    fn finds_by_name_ancestors_and_sibling_index_not_by_position() {
        let list = listing();
        let save = Selector::of_target(&list[2]);
        assert_eq!(save.ancestors[0], ("Save As".into(), "Dialog".into()));
        // The window moved: every rectangle differs, the same control is found.
        let mut moved = list.clone();
        for c in &mut moved {
            c.rect = c.rect.map(|r| {
                crate::agents::target::Rect::new(
                    r.left + 300,
                    r.top + 200,
                    r.right + 330,
                    r.bottom + 210,
                )
            });
        }
        assert_eq!(save.find(&moved).unwrap().label, "3");
        // Two "OK" buttons: the ancestors decide.
        assert_eq!(
            Selector::of_target(&list[1]).find(&list).unwrap().label,
            "2"
        );
        assert_eq!(
            Selector::of_target(&list[0]).find(&list).unwrap().label,
            "1"
        );
        // Two unnamed edits under the same dialog: the sibling index decides.
        assert_eq!(
            Selector::of_target(&list[4]).find(&list).unwrap().label,
            "5"
        );
        assert_eq!(
            Selector::of_target(&list[3]).find(&list).unwrap().label,
            "4"
        );
        // The window's title changed (a saved document): still found.
        let mut retitled = list.clone();
        for c in &mut retitled {
            if let Some(Value::Array(a)) = c.extra.get_mut("ancestors") {
                a[1]["name"] = json!("notes.txt - Mousepad");
            }
        }
        assert_eq!(save.find(&retitled).unwrap().label, "3");
        // Gone: none.
        assert!(save.find(&list[..2]).is_none());
        assert!(
            save.describe()
                .contains("Button \"_Save\" in Dialog \"Save As\"")
        );
    }

    #[test]
    fn windows_by_title_then_process_and_proto_round_trip() {
        let w = |label: &str, title: &str, process: &str| {
            let mut t = TargetInfo::from_json(
                &json!({"id": label, "name": title, "type": "Frame", "process_name": process}),
                TargetKind::Application,
            )
            .unwrap();
            t.label = label.into();
            t
        };
        let recorded = Selector::of_target(&w("0", "Untitled 1 - Mousepad", "mousepad"));
        assert_eq!(recorded.process, "mousepad");
        let now = [
            w("0", "Calculator", "galculator"),
            w("1", "notes.txt - Mousepad", "mousepad"),
        ];
        assert_eq!(recorded.find(&now).unwrap().label, "1");
        assert!(recorded.find(&now[..1]).is_none());
        let back = Selector::from_proto(&recorded.to_proto());
        assert_eq!(back, recorded);
    }

    #[test]
    fn a_window_of_an_unknown_process_is_found_by_its_title() {
        // Tk sets no _NET_WM_PID: the executor reports an empty process name.
        let w = |label: &str, title: &str| {
            let mut t = TargetInfo::from_json(
                &json!({"id": label, "name": title, "type": "Window", "process_name": ""}),
                TargetKind::Application,
            )
            .unwrap();
            t.label = label.into();
            t
        };
        let recorded = Selector::of_target(&w("1", "New ticket"));
        assert_eq!(recorded.process, "New ticket");
        let now = [w("0", "Reports"), w("1", "New ticket")];
        assert_eq!(recorded.find(&now).unwrap().label, "1");
    }
}
