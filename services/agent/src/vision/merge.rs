//! Merging a second (visual-grounding) control source into the accessibility controls by IoU
//! (seed 001, "Hybrid (UIA + OmniParser)").

use crate::agents::target::{Rect, TargetInfo};

/// Default IoU threshold: a grounding control overlapping any accessibility control by more is dropped.
pub const DEFAULT_IOU_THRESHOLD: f64 = 0.1;

/// Intersection over union of two rectangles (0 when either is empty).
pub fn iou(a: Rect, b: Rect) -> f64 {
    let inter = Rect::new(
        a.left.max(b.left),
        a.top.max(b.top),
        a.right.min(b.right),
        a.bottom.min(b.bottom),
    )
    .area();
    let union = a.area() + b.area() - inter;
    if union <= 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

/// Accessible control types that are one target with their own caption: a grounded text anywhere inside
/// one that already says something (a name or a value) is that control again, whatever OCR made of it
/// (the "12" of a font button named "Sans Regular", a combo box's shown item).
const CAPTIONED_TYPES: [&str; 14] = [
    "Button",
    "SplitButton",
    "CheckBox",
    "RadioButton",
    "ComboBox",
    "Spinner",
    "Slider",
    "MenuItem",
    "TabItem",
    "ListItem",
    "TreeItem",
    "DataItem",
    "Hyperlink",
    "HeaderItem",
];

/// Accessible control types whose area shows their text (entries, text views, labels): a grounded text
/// inside one is a duplicate when the control's name or value already says it.
const TEXT_TYPES: [&str; 3] = ["Edit", "Document", "Text"];

/// Keeps every `primary` control, then each `secondary` control whose IoU with every primary control is
/// at most `threshold` (a secondary control without a rectangle cannot be placed and is dropped), and
/// which does not repeat a primary control it lies in (its centre inside it):
/// - the caption of any primary control: its text contained in the control's name (the text of a large
///   accessible button has a small IoU with the button, yet it is the same control);
/// - anything inside a control of [`CAPTIONED_TYPES`] that says something;
/// - text inside a control of [`TEXT_TYPES`] whose name or value already says it ([`already_said`]), or
///   whose listed value was cut (it ends with `…`: the control says more than the listing shows, and the
///   model reads it whole through the control).
pub fn merge_controls(
    primary: Vec<TargetInfo>,
    secondary: Vec<TargetInfo>,
    threshold: f64,
) -> Vec<TargetInfo> {
    let placed: Vec<(Rect, &str, String, String)> = primary
        .iter()
        .filter_map(|c| {
            let value = c.extra.get("value").and_then(|v| v.as_str()).unwrap_or("");
            c.rect
                .map(|r| (r, c.control_type.as_str(), fold(&c.name), fold(value)))
        })
        .collect();
    let kept: Vec<TargetInfo> = secondary
        .into_iter()
        .filter(|c| {
            c.rect.is_some_and(|r| {
                let (x, y) = r.center();
                let text = fold(&c.name);
                placed.iter().all(|(p, kind, name, value)| {
                    let inside = x >= p.left && x < p.right && y >= p.top && y < p.bottom;
                    let says = !name.is_empty() || !value.is_empty();
                    let repeats = inside
                        && ((!text.is_empty() && name.contains(&text))
                            || (says && CAPTIONED_TYPES.contains(kind))
                            || (TEXT_TYPES.contains(kind)
                                && (already_said(&text, name)
                                    || already_said(&text, value)
                                    || value.ends_with('…'))));
                    iou(*p, r) <= threshold && !repeats
                })
            })
        })
        .collect();
    let mut merged = primary;
    merged.extend(kept);
    merged
}

/// Whether `text` (read by OCR, folded) is what `said` (a control's own name or value, folded) already
/// says: at least two thirds of its words are found in `said` — as part of a word, one edit away from a
/// word (an OCR misreading, an accent lost), or sharing a first four characters or more with one (a word
/// cut short by an ellipsis).
pub fn already_said(text: &str, said: &str) -> bool {
    let words = |s: &str| -> Vec<Vec<char>> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.chars().collect())
            .collect()
    };
    let (text, said) = (words(text), words(said));
    if text.is_empty() || said.is_empty() {
        return false;
    }
    let found = text
        .iter()
        .filter(|w| {
            said.iter().any(|s| {
                let prefix = w.iter().zip(s.iter()).take_while(|(a, b)| a == b).count();
                contains(s, w) || within_one_edit(w, s) || prefix >= 4
            })
        })
        .count();
    found * 3 >= text.len() * 2
}

fn contains(haystack: &[char], needle: &[char]) -> bool {
    needle.len() <= haystack.len() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Levenshtein distance at most 1.
fn within_one_edit(a: &[char], b: &[char]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if long.len() - short.len() > 1 {
        return false;
    }
    let lead = short.iter().zip(long).take_while(|(x, y)| x == y).count();
    if short.len() == long.len() {
        short[lead..].iter().skip(1).eq(long[lead..].iter().skip(1))
    } else {
        short[lead..] == long[lead + 1..]
    }
}

fn fold(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::target::{ControlSource, TargetKind};
    use serde_json::json;

    fn control(name: &str, r: [i32; 4]) -> TargetInfo {
        TargetInfo::from_json(
            &json!({"id": name, "name": name, "type": "Button", "rect": r}),
            TargetKind::Control,
        )
        .unwrap()
    }

    #[test]
    fn iou_values() {
        let a = Rect::new(0, 0, 10, 10);
        assert_eq!(iou(a, a), 1.0);
        assert_eq!(iou(a, Rect::new(20, 20, 30, 30)), 0.0);
        assert!((iou(a, Rect::new(5, 0, 15, 10)) - 50.0 / 150.0).abs() < 1e-9);
    }

    #[test]
    fn keeps_secondary_only_below_threshold() {
        let primary = vec![control("a", [0, 0, 100, 100])];
        let mut overlapping = control("dup", [10, 10, 100, 100]);
        overlapping.source = ControlSource::Grounding;
        let slight = control("slight", [95, 0, 195, 100]); // IoU 500/19500 ≈ 0.026
        let far = control("far", [300, 300, 340, 320]);
        let merged = merge_controls(
            primary,
            vec![overlapping, slight, far],
            DEFAULT_IOU_THRESHOLD,
        );
        let names: Vec<_> = merged.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "slight", "far"]);
    }

    #[test]
    fn the_caption_of_a_large_accessible_button_is_not_added_again() {
        // A group (not a captioned control): only its caption repeats it.
        let primary = vec![typed("Save  As", "Group", "", [0, 0, 400, 100])];
        let caption = control("save as", [180, 45, 220, 55]); // IoU 0.01
        let other = control("Other", [20, 45, 60, 55]);
        let merged = merge_controls(primary, vec![caption, other], DEFAULT_IOU_THRESHOLD);
        let names: Vec<_> = merged.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Save  As", "Other"]);
    }

    fn grounded(name: &str, r: [i32; 4]) -> TargetInfo {
        let mut c = control(name, r);
        c.source = ControlSource::Grounding;
        c
    }

    fn typed(name: &str, kind: &str, value: &str, r: [i32; 4]) -> TargetInfo {
        TargetInfo::from_json(
            &json!({"id": name, "name": name, "type": kind, "value": value, "rect": r}),
            TargetKind::Control,
        )
        .unwrap()
    }

    #[test]
    fn text_shown_by_an_accessible_control_is_not_added_again() {
        let primary = vec![
            typed("Sans Regular", "Button", "", [0, 0, 200, 40]),
            typed(
                "",
                "Edit",
                "Lorem ipsum dolor sit amet, Guérin",
                [0, 100, 600, 300],
            ),
            typed("", "Button", "", [0, 400, 200, 480]),
            typed("", "Pane", "", [0, 0, 1000, 1000]),
        ];
        let secondary = vec![
            grounded("12", [150, 10, 170, 30]), // inside a captioned button that says something
            grounded("lorem ipsum", [10, 110, 90, 125]), // the entry's own text
            grounded("Guerin", [10, 130, 60, 145]), // an accent lost by OCR
            grounded("dolor sit am…", [100, 110, 190, 125]), // cut short
            grounded("Zebra crossing", [10, 160, 120, 175]), // not the entry's text
            grounded("OK", [10, 410, 30, 430]), // names an unnamed button: kept
            grounded("Status", [700, 700, 760, 720]), // only in a pane: kept
        ];
        let merged = merge_controls(primary, secondary, DEFAULT_IOU_THRESHOLD);
        let added: Vec<_> = merged
            .iter()
            .filter(|c| c.source == ControlSource::Grounding)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(added, ["Zebra crossing", "OK", "Status"]);

        // A text view whose listed value was cut: what is drawn in it is its own text.
        let view = vec![typed("", "Document", "chapter one…", [0, 0, 600, 600])];
        let line = grounded("chapter nine", [10, 500, 200, 515]);
        assert_eq!(
            merge_controls(view, vec![line], DEFAULT_IOU_THRESHOLD).len(),
            1
        );
    }

    #[test]
    fn words_already_said_tolerate_ocr_slips_but_not_other_words() {
        assert!(already_said(
            "tellus malesi",
            "in porttitor tellus malesuada vitae"
        ));
        assert!(already_said("guerin", "guérin"));
        assert!(!already_said("translation updates", "lorem ipsum dolor"));
        assert!(!already_said("", "anything"));
        assert!(!already_said("cat", ""));
        assert!(within_one_edit(&['a', 'b'], &['a', 'c']));
        assert!(!within_one_edit(&['a', 'b', 'c'], &['x', 'y', 'c']));
    }
}
