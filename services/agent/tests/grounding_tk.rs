//! Grounding conformance against ground truth (issue 32): a real Tk form (Tk has no AT-SPI bridge on
//! Linux) draws text-bearing widgets at three font sizes on a 1280×800 Xvfb screen and writes each
//! widget's own geometry and its text's box; the built-in OCR grounding must find them.
//!
//! Recall: a widget counts as found when a grounded element's centre lies inside it and the element's
//! box has IoU ≥ 0.5 with the text's box. Text: the found element's text equals the widget's after case
//! and whitespace folding. Spurious: grounded elements whose centre lies in no widget.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::tk_form;
use std::time::Instant;

use serde_json::Value;
use ufo_agent::agents::services::GroundingSource as _;
use ufo_agent::agents::target::Rect;
use ufo_agent::testing::grounding_service::{Behaviour, start};
use ufo_agent::vision::Screenshot;
use ufo_agent::vision::grounding::omniparser::{OmniParserClient, OmniParserOptions};
use ufo_agent::vision::grounding::{OcrGrounding, OcrOptions, builtin_engine};
use ufo_agent::vision::iou;

fn rect(v: &Value) -> Rect {
    let n = |i: usize| v[i].as_f64().unwrap().round() as i32;
    Rect::new(n(0), n(1), n(2), n(3))
}

fn fold(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ocr_grounding_finds_the_tk_forms_widgets_and_their_text() {
    let dir = tempfile::tempdir().unwrap();
    let (img, truth) = tk_form::form_screenshot(dir.path()).await;
    // For comparing engines on the same image (docs/grounding.md).
    if let Ok(path) = std::env::var("UFO_GROUNDING_DUMP") {
        img.save(&path).unwrap();
        std::fs::copy(dir.path().join("truth.json"), format!("{path}.truth.json")).unwrap();
        let prepared =
            ufo_agent::vision::grounding::ocr::prepare(&img, Default::default()).unwrap();
        prepared.save(format!("{path}.prepared.png")).unwrap();
    }

    let engine = builtin_engine(None, "eng").expect("install tesseract-ocr and tesseract-ocr-eng");
    let grounding = OcrGrounding::new(engine.clone(), OcrOptions::default());
    let started = Instant::now();
    let found = grounding.elements(&img).unwrap();
    let took = started.elapsed();

    // The same grounding through the OmniParser protocol (`--grounding-url`): a stand-in service running
    // this OCR answers in that protocol's fractions; the client maps them back to the same boxes.
    let svc = start(Behaviour::Ocr(engine)).await.unwrap();
    let client = OmniParserClient::new(
        &svc.url,
        OmniParserOptions {
            timeout: std::time::Duration::from_secs(120),
            ..OmniParserOptions::default()
        },
    )
    .unwrap();
    let via_service = client
        .detect(&Screenshot::from_rgba(&img, 0, 0).unwrap())
        .await
        .unwrap();
    let local: Vec<(String, Rect)> = found
        .iter()
        .map(|e| {
            (
                e.text.clone(),
                Rect::new(e.bbox[0], e.bbox[1], e.bbox[2], e.bbox[3]),
            )
        })
        .collect();
    let remote: Vec<(String, Rect)> = via_service
        .iter()
        .map(|c| (c.name.clone(), c.rect.unwrap()))
        .collect();
    assert_eq!(
        remote, local,
        "the protocol round trip keeps every element and box"
    );

    let widgets = truth["widgets"].as_array().unwrap();
    assert!(widgets.len() >= 30, "the form draws at least 30 widgets");
    let (mut recalled, mut exact) = (0usize, 0usize);
    let mut misses = vec![];
    for w in widgets {
        let (wbox, tbox) = (rect(&w["widget"]), rect(&w["text_box"]));
        let text = w["text"].as_str().unwrap();
        let hit = found.iter().find(|e| {
            let r = Rect::new(e.bbox[0], e.bbox[1], e.bbox[2], e.bbox[3]);
            let (cx, cy) = r.center();
            cx >= wbox.left
                && cx < wbox.right
                && cy >= wbox.top
                && cy < wbox.bottom
                && iou(r, tbox) >= 0.5
        });
        match hit {
            Some(e) => {
                recalled += 1;
                if fold(&e.text) == fold(text) {
                    exact += 1;
                } else {
                    misses.push(format!("{text:?} read as {:?}", e.text));
                }
            }
            None => misses.push(format!("{text:?} ({}) not found", w["kind"])),
        }
    }
    let spurious: Vec<_> = found
        .iter()
        .filter(|e| {
            let (cx, cy) = Rect::new(e.bbox[0], e.bbox[1], e.bbox[2], e.bbox[3]).center();
            !widgets.iter().any(|w| {
                let b = rect(&w["widget"]);
                cx >= b.left && cx < b.right && cy >= b.top && cy < b.bottom
            })
        })
        .map(|e| e.text.clone())
        .collect();
    let n = widgets.len() as f64;
    let recall = recalled as f64 / n;
    let text_rate = exact as f64 / n;
    let spurious_rate = spurious.len() as f64 / found.len().max(1) as f64;
    eprintln!(
        "widgets {} grounded {} recall {recall:.3} text {text_rate:.3} spurious {spurious_rate:.3} in \
         {took:?}\nmisses: {misses:#?}\nspurious: {spurious:?}",
        widgets.len(),
        found.len(),
    );
    assert!(recall >= 0.95, "recall {recall:.3}: {misses:#?}");
    assert!(text_rate >= 0.95, "exact text {text_rate:.3}: {misses:#?}");
    assert!(
        spurious_rate <= 0.05,
        "spurious {spurious_rate:.3}: {spurious:?}"
    );
}

/// Grounding only what changed reads what grounding the whole window reads: one entry of the Tk form is
/// darkened (its text stays legible), the remembered window is grounded again through the changed box,
/// and the answer is compared with a cold grounding of the same pixels (texts and boxes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grounding_only_the_changed_box_reads_what_a_cold_grounding_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (img, truth) = tk_form::form_screenshot(dir.path()).await;
    let engine = builtin_engine(None, "eng").expect("install tesseract-ocr and tesseract-ocr-eng");
    let options = OcrOptions {
        timeout: std::time::Duration::from_secs(120),
        ..OcrOptions::default()
    };
    let shot = |img: &image::RgbaImage| Screenshot::from_rgba(img, 0, 0).unwrap();
    let remembering = OcrGrounding::new(engine.clone(), options.clone());
    remembering.detect(&shot(&img)).await.unwrap();

    let entry = truth["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "entry")
        .unwrap();
    let b = rect(&entry["widget"]);
    let mut after = img.clone();
    for y in b.top.max(0) as u32..(b.bottom.max(0) as u32).min(img.height()) {
        for x in b.left.max(0) as u32..(b.right.max(0) as u32).min(img.width()) {
            for c in &mut after.get_pixel_mut(x, y).0[..3] {
                *c = c.saturating_sub(40);
            }
        }
    }
    let regional = remembering.detect(&shot(&after)).await.unwrap();
    let cold = OcrGrounding::new(engine, options)
        .detect(&shot(&after))
        .await
        .unwrap();
    let same = |a: &ufo_agent::agents::target::TargetInfo| {
        regional
            .iter()
            .any(|r| fold(&r.name) == fold(&a.name) && iou(r.rect.unwrap(), a.rect.unwrap()) >= 0.5)
    };
    let missing: Vec<_> = cold.iter().filter(|c| !same(c)).map(|c| &c.name).collect();
    let extra: Vec<_> = regional
        .iter()
        .filter(|r| {
            !cold.iter().any(|c| {
                fold(&r.name) == fold(&c.name) && iou(r.rect.unwrap(), c.rect.unwrap()) >= 0.5
            })
        })
        .map(|r| (&r.name, r.rect))
        .collect();
    eprintln!(
        "changed box {b:?}; cold {} elements, regional {}, missing {missing:?}, read only in the \
         regional answer {extra:?}",
        cold.len(),
        regional.len()
    );
    assert!(
        missing.len() as f64 <= cold.len() as f64 * 0.03,
        "the regional answer misses {missing:?} of {}",
        cold.len()
    );
    assert!(
        regional.len().abs_diff(cold.len()) as f64 <= cold.len() as f64 * 0.03,
        "regional {} vs cold {}",
        regional.len(),
        cold.len()
    );
    let text = fold(entry["text"].as_str().unwrap());
    assert!(
        regional.iter().any(|r| fold(&r.name) == text),
        "the darkened entry's text {text:?} is read again"
    );
}
