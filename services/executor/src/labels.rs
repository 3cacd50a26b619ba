//! Names for unnamed input fields from the label a person reads next to them. Toolkits do not always
//! relate a form's labels to its fields (zenity's `--forms` dialog lays out "First name" beside an entry
//! with no accessible name or labelled-by relation), and a field listed as `''` cannot be told apart by
//! a model or a person reading the list. A field without a name takes the text of the label on its row,
//! just to its left, else the label just above it; fields with a name keep it.

use crate::backend::RawNode;
use crate::geometry::Rect;

/// Control types that are filled in and are usually labelled beside or above.
const FIELDS: &[&str] = &["Edit", "ComboBox", "Spinner", "Slider"];

/// Control types whose bounds naming needs: the labels and the fields.
pub(crate) const BOUNDS_USED: &[&str] = &["Text", "Edit", "ComboBox", "Spinner", "Slider"];

/// The largest gap between a label and its field, as a multiple of the field's height.
const MAX_GAP_HEIGHTS: i32 = 4;

/// A field labelled this way is a line of input: at most this many times its label's height (a text
/// area under a banner is not named after the banner).
const MAX_FIELD_LABEL_HEIGHTS: u32 = 3;

fn label_left_of(field: &Rect, label: &Rect) -> Option<i32> {
    let middle = (label.top + label.bottom) / 2;
    let gap = field.left - label.right;
    let row = field.top <= middle && middle < field.bottom;
    let height = i32::try_from(field.height()).unwrap_or(i32::MAX);
    (row && (-2..=height.saturating_mul(MAX_GAP_HEIGHTS)).contains(&gap)).then_some(gap)
}

fn label_above(field: &Rect, label: &Rect) -> Option<i32> {
    let gap = field.top - label.bottom;
    let height = i32::try_from(field.height()).unwrap_or(i32::MAX);
    let aligned = label.left >= field.left - 8 && label.left < field.right;
    (aligned && (-2..=height).contains(&gap)).then_some(gap)
}

/// Names every unnamed field after the nearest label to its left on its row, else just above it.
pub fn name_unlabelled_fields(nodes: &mut [RawNode]) {
    let labels: Vec<(Rect, String)> = nodes
        .iter()
        .filter(|n| n.control_type == "Text" && n.visible && !n.name.trim().is_empty())
        .map(|n| (n.rect, n.name.trim().to_owned()))
        .collect();
    for node in nodes.iter_mut() {
        if !node.name.trim().is_empty()
            || !FIELDS.contains(&node.control_type.as_str())
            || node.rect.is_empty()
        {
            continue;
        }
        let nearest = |how: fn(&Rect, &Rect) -> Option<i32>| {
            labels
                .iter()
                .filter(|(r, _)| node.rect.height() <= r.height() * MAX_FIELD_LABEL_HEIGHTS)
                .filter_map(|(r, name)| how(&node.rect, r).map(|gap| (gap, name)))
                .min_by_key(|(gap, _)| *gap)
                .map(|(_, name)| name.clone())
        };
        if let Some(name) = nearest(label_left_of).or_else(|| nearest(label_above)) {
            node.name = name;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::ControlHandle;

    #[test]
    fn the_bounds_naming_needs_cover_labels_and_fields() {
        assert!(BOUNDS_USED.contains(&"Text"));
        assert!(FIELDS.iter().all(|f| BOUNDS_USED.contains(f)));
    }

    fn node(name: &str, kind: &str, [l, t, r, b]: [i32; 4]) -> RawNode {
        RawNode {
            handle: ControlHandle(String::new()),
            parent: None,
            depth: 1,
            name: name.into(),
            control_type: kind.into(),
            rect: Rect {
                left: l,
                top: t,
                right: r,
                bottom: b,
            },
            enabled: true,
            visible: true,
            automation_id: String::new(),
            value: String::new(),
        }
    }

    fn names(nodes: &[RawNode]) -> Vec<&str> {
        nodes.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn zenitys_form_fields_take_the_labels_on_their_rows() {
        // As zenity --forms lays them out (rects read from a real dialog).
        let mut nodes = vec![
            node("", "ComboBox", [603, 445, 771, 479]),
            node("Team", "Text", [524, 445, 559, 479]),
            node("", "Edit", [603, 405, 771, 439]),
            node("Last name", "Text", [524, 405, 592, 439]),
            node("", "Edit", [603, 365, 771, 399]),
            node("First name", "Text", [524, 365, 593, 399]),
            node("Register a visitor", "Text", [511, 335, 643, 352]),
            node("OK", "Button", [692, 488, 778, 522]),
        ];
        name_unlabelled_fields(&mut nodes);
        assert_eq!(
            names(&nodes),
            [
                "Team",
                "Team",
                "Last name",
                "Last name",
                "First name",
                "First name",
                "Register a visitor",
                "OK"
            ]
        );
    }

    #[test]
    fn a_label_above_counts_and_named_or_distant_fields_keep_theirs() {
        let mut nodes = vec![
            node("Comment", "Text", [10, 10, 80, 30]),
            node("", "Edit", [10, 34, 300, 60]),
            node("Size", "Edit", [10, 100, 300, 126]),
            node("far away", "Text", [10, 300, 80, 320]),
            node("", "Edit", [600, 300, 700, 320]),
            node("", "Button", [100, 34, 120, 60]),
            // mousepad: a warning banner right above the (tall) document view.
            node(
                "Warning: you are using the root account.",
                "Text",
                [10, 400, 890, 420],
            ),
            node("", "Edit", [10, 422, 890, 900]),
        ];
        name_unlabelled_fields(&mut nodes);
        assert_eq!(
            names(&nodes),
            [
                "Comment",
                "Comment",
                "Size",
                "far away",
                "",
                "",
                "Warning: you are using the root account.",
                ""
            ]
        );
    }
}
