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

/// Keeps every `primary` control, then each `secondary` control whose IoU with every primary control is
/// at most `threshold` (a secondary control without a rectangle cannot be placed and is dropped), and
/// which is not the caption of a primary control: its centre inside a primary control whose name
/// contains its text (case and whitespace folded) — the text of a large accessible button has a small
/// IoU with the button, yet it is the same control.
pub fn merge_controls(
    primary: Vec<TargetInfo>,
    secondary: Vec<TargetInfo>,
    threshold: f64,
) -> Vec<TargetInfo> {
    let placed: Vec<(Rect, String)> = primary
        .iter()
        .filter_map(|c| c.rect.map(|r| (r, fold(&c.name))))
        .collect();
    let mut merged = primary;
    merged.extend(secondary.into_iter().filter(|c| {
        c.rect.is_some_and(|r| {
            let (x, y) = r.center();
            let text = fold(&c.name);
            placed.iter().all(|(p, name)| {
                let inside = x >= p.left && x < p.right && y >= p.top && y < p.bottom;
                iou(*p, r) <= threshold && !(inside && !text.is_empty() && name.contains(&text))
            })
        })
    }));
    merged
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
        let primary = vec![control("Save  As", [0, 0, 400, 100])];
        let caption = control("save as", [180, 45, 220, 55]); // IoU 0.01
        let other = control("Other", [20, 45, 60, 55]);
        let merged = merge_controls(primary, vec![caption, other], DEFAULT_IOU_THRESHOLD);
        let names: Vec<_> = merged.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Save  As", "Other"]);
    }
}
