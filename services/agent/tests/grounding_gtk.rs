//! Merging grounding into a window that is accessible (issue 32): on gtk3-widget-factory, every page of
//! it in turn, the built-in OCR grounding of the window's pixels is merged into the executor's
//! accessible controls exactly as the AppAgent merges them (`vision::merge::merge_controls`, the default
//! IoU threshold). The independent check of what was added: a grounded element duplicates an accessible
//! control when its centre lies inside a text-bearing accessible control (a button, label, entry, menu
//! item, tab, check box...) that already exposes a name or a text. At most 2 % of the merged elements may
//! be such duplicates.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use image::RgbaImage;
use serde_json::json;
use ufo_agent::agents::services::GroundingSource as _;
use ufo_agent::agents::target::{ControlSource, TargetInfo, TargetKind};
use ufo_agent::vision::Screenshot;
use ufo_agent::vision::grounding::{OcrGrounding, OcrOptions, builtin_engine};
use ufo_agent::vision::merge::{DEFAULT_IOU_THRESHOLD, merge_controls};
use ufo_executor::backend::{Backend, WindowInfo};
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits};
use ufo_executor::testing::Desktop;
use ufo_executor::testing::drive;

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(20),
    format: Format::PNG,
};

/// Control types that carry their own text: a grounded word inside one repeats what the control says.
const TEXT_BEARING: [&str; 14] = [
    "Button",
    "CheckBox",
    "RadioButton",
    "ComboBox",
    "Edit",
    "Text",
    "Document",
    "MenuItem",
    "Menu",
    "TabItem",
    "ListItem",
    "DataItem",
    "Spinner",
    "Hyperlink",
];

fn fold(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The window's pixels as the AppAgent's screenshot of it (origin at the window's corner).
async fn window_shot(backend: &dyn Backend, w: &WindowInfo) -> Screenshot {
    let capture = backend.capture(w.rect).await.unwrap();
    let rgba = capture
        .rgb
        .chunks_exact(3)
        .flat_map(|px| [px[0], px[1], px[2], 255])
        .collect();
    let img = RgbaImage::from_raw(capture.width, capture.height, rgba).unwrap();
    Screenshot::from_rgba(&img, w.rect.left, w.rect.top).unwrap()
}

/// (merged elements, grounded elements added, added ones that duplicate an accessible control) on the
/// page showing now.
async fn measure_page(
    exec: &Executor,
    backend: &dyn Backend,
    window: &WindowInfo,
    grounding: &OcrGrounding,
    page: &str,
) -> (usize, usize, Vec<String>) {
    let listed = drive::controls(exec, OPTS).await;
    let accessible: Vec<TargetInfo> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| TargetInfo::from_json(c, TargetKind::Control))
        .collect();
    let grounded = grounding
        .detect(&window_shot(backend, window).await)
        .await
        .unwrap();
    let merged = merge_controls(accessible.clone(), grounded, DEFAULT_IOU_THRESHOLD);
    let added: Vec<&TargetInfo> = merged
        .iter()
        .filter(|c| c.source == ControlSource::Grounding)
        .collect();
    let duplicates: Vec<String> = added
        .iter()
        .filter_map(|g| {
            let (x, y) = g.rect?.center();
            let owner = accessible.iter().find(|a| {
                let Some(r) = a.rect else { return false };
                let text = ["text", "value"]
                    .iter()
                    .filter_map(|k| a.extra.get(*k).and_then(|v| v.as_str()))
                    .any(|t| !fold(t).is_empty());
                let says = !fold(&a.name).is_empty() || text;
                TEXT_BEARING.contains(&a.control_type.as_str())
                    && says
                    && x >= r.left
                    && x < r.right
                    && y >= r.top
                    && y < r.bottom
            })?;
            Some(format!(
                "{page}: grounded {:?} {:?} inside {} {:?} {:?}",
                g.name, g.rect, owner.control_type, owner.name, owner.rect
            ))
        })
        .collect();
    println!(
        "{page}: {} accessible, {} grounded added, {} duplicates",
        accessible.len(),
        added.len(),
        duplicates.len()
    );
    (merged.len(), added.len(), duplicates)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_grounding_into_the_widget_factory_adds_few_duplicates() {
    let mut desk = Desktop::start(1280, 800).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let (_, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let exec =
        Executor::new(backend.clone(), Limits::default(), Vec::new()).with_launch_env(desk.env());
    drive::select(&exec, OPTS, window.handle).await;
    let engine = builtin_engine(None, "eng").expect("install tesseract-ocr and tesseract-ocr-eng");
    let grounding = OcrGrounding::new(
        engine,
        OcrOptions {
            timeout: Duration::from_secs(120),
            ..OcrOptions::default()
        },
    );

    let (mut merged, mut added, mut duplicates) = (0, 0, Vec::new());
    for page in ["Page 1", "Page 2", "Page 3"] {
        let listed = drive::controls(&exec, OPTS).await;
        let tab = drive::id_where(&listed, |c| {
            // The factory's pages are switched by a stack switcher: radio buttons named "Page N".
            matches!(c["type"].as_str(), Some("TabItem" | "RadioButton"))
                && c["name"].as_str().is_some_and(|n| n.trim() == page)
        })
        .unwrap_or_else(|| panic!("the factory has a tab {page}: {listed}"));
        drive::ok(
            &exec,
            OPTS,
            "click_input",
            json!({"id": tab, "button": "left"}),
        )
        .await;
        // The window may have been redrawn at another size: take its place from the listing again.
        let window = backend
            .windows()
            .await
            .unwrap()
            .into_iter()
            .find(|w| w.handle == window.handle)
            .unwrap();
        let (m, a, d) = measure_page(&exec, backend.as_ref(), &window, &grounding, page).await;
        merged += m;
        added += a;
        duplicates.extend(d);
    }
    let share = duplicates.len() as f64 / merged as f64;
    println!(
        "3 pages: {merged} merged elements, {added} added by grounding, {} duplicates ({:.2} %)",
        duplicates.len(),
        share * 100.0
    );
    assert!(
        added > 0,
        "grounding added nothing: the check would be vacuous"
    );
    assert!(
        share <= 0.02,
        "{:.2} % of the merged elements duplicate an accessible control: {duplicates:#?}",
        share * 100.0
    );
}
