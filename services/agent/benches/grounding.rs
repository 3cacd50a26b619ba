//! Grounding benchmark (issue 32; run with `cargo bench -p ufo-agent --bench grounding`): the built-in OCR
//! grounding of a real 1280×800 screen — the Tk form of the conformance test (`tests/assets/tk_form.py`)
//! on a private Xvfb desktop — measured
//! - **cold**: a fresh grounding source (no cache, no remembered pixels) on the whole window;
//! - **one region changed**: the same window with one widget's pixels changed since the last call (a new
//!   shade each time, so the exact cache never answers): only the changed band is read again;
//! - **unchanged**: the same screenshot again (the exact cache answers);
//! - beside **Tesseract's own command line** on the same image, raw and as the grounding prepares it.
//!
//! Prints p50 / p90 / max per case. Needs Xvfb, python3-tk, tesseract-ocr (as the tests do).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use image::RgbaImage;
use ufo_agent::agents::services::GroundingSource as _;
use ufo_agent::vision::Screenshot;
use ufo_agent::vision::grounding::{OcrGrounding, OcrOptions, builtin_engine};

#[path = "../tests/tk_form/mod.rs"]
mod tk_form;

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<44} n={:<4} p50 {:>9.2} ms   p90 {:>9.2} ms   max {:>9.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1000.0,
        at(0.9).as_secs_f64() * 1000.0,
        samples.last().unwrap().as_secs_f64() * 1000.0,
    );
}

/// `img` with the pixels of `rect` shifted by `shade` (a changed widget; a new shade each call).
fn changed(img: &RgbaImage, rect: [u32; 4], shade: u8) -> RgbaImage {
    let mut out = img.clone();
    for y in rect[1]..rect[3].min(img.height()) {
        for x in rect[0]..rect[2].min(img.width()) {
            let p = out.get_pixel_mut(x, y);
            for c in &mut p.0[..3] {
                *c = c.wrapping_add(shade);
            }
        }
    }
    out
}

fn cli(path: &std::path::Path, extra: &[&str]) -> Duration {
    let started = Instant::now();
    let out = std::process::Command::new("tesseract")
        .arg(path)
        .arg("stdout")
        .args(["--psm", "11"])
        .args(extra)
        .arg("tsv")
        .env("OMP_THREAD_LIMIT", "1")
        .output()
        .expect("tesseract (Debian tesseract-ocr) is not installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // As the agent does (`--grounding-ocr-threads 1`); `OMP_THREAD_LIMIT=4` in the environment measures
    // OpenMP's default instead.
    if let Some(e) = ufo_agent::vision::grounding::tesseract::limit_openmp_threads(1) {
        eprintln!("cannot restart with OMP_THREAD_LIMIT=1: {e}");
    }
    println!(
        "OMP_THREAD_LIMIT={}",
        std::env::var("OMP_THREAD_LIMIT").unwrap_or_default()
    );
    let dir = tempfile::tempdir().unwrap();
    let (form, truth) = tk_form::form_screenshot(dir.path()).await;
    let shot = Screenshot::from_rgba(&form, 0, 0).unwrap();
    let engine = builtin_engine(None, "eng").expect("install tesseract-ocr and tesseract-ocr-eng");
    let options = OcrOptions {
        timeout: Duration::from_secs(120),
        ..OcrOptions::default()
    };
    println!(
        "grounding a {}x{} Tk form screenshot ({} widgets), engine {}",
        form.width(),
        form.height(),
        truth["widgets"].as_array().map_or(0, Vec::len),
        engine.name()
    );

    let mut cold = vec![];
    let mut found = 0;
    for _ in 0..6 {
        let g = OcrGrounding::new(engine.clone(), options.clone());
        let started = Instant::now();
        found = g.detect(&shot).await.unwrap().len();
        cold.push(started.elapsed());
    }
    report(&format!("cold, whole window ({found} elements)"), cold);

    // One widget changes between calls: the first entry's box (its own geometry from the truth).
    let widget = truth["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "entry")
        .unwrap_or(&truth["widgets"][0]);
    let r: Vec<u32> = (0..4)
        .map(|i| widget["widget"][i].as_f64().unwrap().max(0.0) as u32)
        .collect();
    let rect = [r[0], r[1], r[2], r[3]];
    let g = OcrGrounding::new(engine.clone(), options.clone());
    g.detect(&shot).await.unwrap();
    let mut region = vec![];
    for i in 0..12u8 {
        let next = Screenshot::from_rgba(&changed(&form, rect, 1 + i), 0, 0).unwrap();
        let started = Instant::now();
        g.detect(&next).await.unwrap();
        region.push(started.elapsed());
    }
    report(
        &format!(
            "one region changed ({}x{} px widget)",
            rect[2] - rect[0],
            rect[3] - rect[1]
        ),
        region,
    );

    let mut unchanged = vec![];
    g.detect(&shot).await.unwrap();
    for _ in 0..200 {
        let started = Instant::now();
        g.detect(&shot).await.unwrap();
        unchanged.push(started.elapsed());
    }
    report("unchanged window (cache)", unchanged);

    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("form.png");
    form.save(&raw).unwrap();
    let prepared = dir.path().join("prepared.png");
    ufo_agent::vision::grounding::ocr::prepare(&form, Default::default())
        .unwrap()
        .save(&prepared)
        .unwrap();
    report(
        "tesseract CLI, raw screenshot",
        (0..4).map(|_| cli(&raw, &[])).collect(),
    );
    report(
        "tesseract CLI, prepared (lines erased, x2)",
        (0..4).map(|_| cli(&prepared, &["--dpi", "192"])).collect(),
    );
}
