//! The Tk form of the grounding conformance test and the grounding benchmark (issue 32): started on a
//! private 1280×800 Xvfb desktop (`tests/assets/tk_form.py`), it writes each widget's own geometry and its
//! text's box (the ground truth) and is captured by the real Linux backend. Tk has no AT-SPI bridge on
//! Linux, so only grounding sees its widgets.

use std::io::BufRead as _;
use std::path::Path;

use image::RgbaImage;
use serde_json::Value;
use ufo_executor::backend::Backend as _;
use ufo_executor::testing::Desktop;

const FORM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/assets/tk_form.py");

/// The whole screen with the Tk form on it, and the form's truth (also left in `dir/truth.json`).
pub async fn form_screenshot(dir: &Path) -> (RgbaImage, Value) {
    let desk = Desktop::start(1280, 800).await.unwrap();
    let backend = desk.backend().await.unwrap();
    let truth_file = dir.join("truth.json");
    let mut child = std::process::Command::new("python3")
        .arg(FORM)
        .arg(&truth_file)
        .envs(desk.env())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(line.trim(), "ready", "the Tk form did not start");
    let capture = backend
        .capture(ufo_executor::geometry::Rect {
            left: 0,
            top: 0,
            right: 1280,
            bottom: 800,
        })
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let rgba = capture
        .rgb
        .chunks_exact(3)
        .flat_map(|px| [px[0], px[1], px[2], 255])
        .collect();
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    (
        RgbaImage::from_raw(capture.width, capture.height, rgba).unwrap(),
        truth,
    )
}
