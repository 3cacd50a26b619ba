//! The AppAgent's prompt copies of a window screenshot (seed 001, "LLM interaction": clean and annotated
//! screenshots, downscaled): one resize per step, the set-of-marks drawn on the small copy.
//!
//! Annotating at full size and downscaling the clean and the annotated images cost two resizes and blurred
//! the labels; here the clean screenshot is resized once, encoded, and the marks (boxes scaled to the small
//! image, labels at the configured pixel size, so they stay as legible as on the full-size artifact) are
//! drawn on that same buffer. When the screenshot already fits, the clean image is sent as the executor
//! encoded it, and the annotated one is drawn at full size: the only case a full-size annotated image is
//! drawn and encoded.

use image::RgbaImage;
use serde_json::Value;

use super::annotate::{Mark, Marker};
use super::derived::scale_marks;
use super::image_ops::{downscale_png, fitted_size, resize_fast};
use super::screenshot::{Screenshot, VisionError, encode_png};
use crate::llm::ImageData;
use crate::memory::Blackboard;

/// Which prompt images to build.
#[derive(Debug, Clone, Copy)]
pub struct PromptImageSpec {
    /// Largest width and height sent.
    pub max: (u32, u32),
    /// Build the clean copy.
    pub clean: bool,
    /// Build the annotated copy.
    pub annotated: bool,
}

/// The prompt copies of one screenshot (each present when asked for).
#[derive(Debug, Default)]
pub struct PromptImages {
    /// The clean screenshot, fitted to the prompt size.
    pub clean: Option<Screenshot>,
    /// The set-of-marks screenshot, fitted to the prompt size.
    pub annotated: Option<Screenshot>,
}

/// Builds the prompt copies of `clean`, the set-of-marks one drawn from `marks` (in full-size pixels).
/// `pixels` are `clean`'s decoded pixels when the caller has them.
pub fn prompt_images(
    clean: &Screenshot,
    pixels: Option<&RgbaImage>,
    marks: &[Mark<'_>],
    marker: &Marker,
    spec: PromptImageSpec,
) -> Result<PromptImages, VisionError> {
    if !spec.clean && !spec.annotated {
        return Ok(PromptImages::default());
    }
    let resized = fitted_size(clean.width, clean.height, spec.max.0, spec.max.1);
    if resized.is_none() && !spec.annotated {
        return Ok(PromptImages {
            clean: spec.clean.then(|| clean.clone()),
            annotated: None,
        });
    }
    let decoded;
    let full = match pixels {
        Some(p) => p,
        None => {
            decoded = clean.decode()?;
            &decoded
        }
    };
    let Some((w, h)) = resized else {
        let mut drawn = full.clone();
        marker.annotate(&mut drawn, marks);
        return Ok(PromptImages {
            clean: spec.clean.then(|| clean.clone()),
            annotated: Some(clean.with_pixels(&drawn)?),
        });
    };
    let mut small = resize_fast(full, w, h)?;
    let fx = f64::from(w) / f64::from(full.width().max(1));
    let placed = |img: &RgbaImage| -> Result<Screenshot, VisionError> {
        Ok(Screenshot {
            mime: "image/png".into(),
            bytes: encode_png(img)?,
            width: w,
            height: h,
            scale: clean.scale / fx,
            ..clean.clone()
        })
    };
    let mut out = PromptImages::default();
    if spec.clean {
        out.clean = Some(placed(&small)?);
    }
    if spec.annotated {
        // The clean copy is already encoded, so the marks go on the same buffer: no copy. The scaling is
        // the one the step's recipe records (`derived::annotation`), so the image renders again on read.
        let scaled = scale_marks(marks, full.dimensions(), (w, h));
        marker.annotate(&mut small, &scaled);
        out.annotated = Some(placed(&small)?);
    }
    Ok(out)
}

/// The newest `count` blackboard images this process holds the pixels of, downscaled to fit `max`, each
/// with a caption naming its blackboard index and metadata (so the text's `image_i` entry and the image
/// match). Images whose bytes could not be read back from the session store after a restart
/// (`memory::board_images`) stay as metadata in the text; an image that cannot be decoded is left out
/// with a warning.
pub fn blackboard_images(
    board: &Blackboard,
    count: usize,
    max: (u32, u32),
) -> Vec<(String, ImageData)> {
    let mut out: Vec<(String, ImageData)> = board
        .images
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, img)| img.screenshot.as_ref().map(|s| (i, img, s)))
        .take(count)
        .filter_map(|(i, img, shot)| match downscale_png(shot, max.0, max.1) {
            Ok(small) => Some((
                format!(
                    "Blackboard image_{i} ({})",
                    Value::Object(img.metadata.clone())
                ),
                small.to_image_data(),
            )),
            Err(e) => {
                tracing::warn!(error = %e, index = i, "blackboard image left out of the prompt");
                None
            }
        })
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::target::Rect;
    use crate::memory::BlackboardImage;
    use crate::vision::Palette;
    use crate::vision::annotate::DEFAULT_FONT;
    use image::Rgba;
    use std::path::Path;

    fn setup() -> (Marker, Screenshot, Screenshot, Vec<Mark<'static>>) {
        // The third is the full-size annotated image, drawn here as a reference.
        let marker = Marker::load(Path::new(DEFAULT_FONT), 14.0, Palette::default()).unwrap();
        let img = RgbaImage::from_pixel(800, 400, Rgba([255, 255, 255, 255]));
        let clean = Screenshot::from_rgba(&img, 100, 50).unwrap();
        let marks = vec![Mark {
            label: "7",
            rect: Rect::new(200, 100, 600, 300),
            control_type: "Button",
        }];
        let mut full = img.clone();
        marker.annotate(&mut full, &marks);
        let annotated = clean.with_pixels(&full).unwrap();
        (marker, clean, annotated, marks)
    }

    #[test]
    fn downscales_once_and_draws_scaled_boxes_on_the_small_copy() {
        let (marker, clean, _, marks) = setup();
        let spec = PromptImageSpec {
            max: (400, 400),
            clean: true,
            annotated: true,
        };
        let out = prompt_images(&clean, None, &marks, &marker, spec).unwrap();
        let (c, a) = (out.clean.unwrap(), out.annotated.unwrap());
        // Same placement as downscaling the clean screenshot on its own.
        let reference = downscale_png(&clean, 400, 400).unwrap();
        for s in [&c, &a] {
            assert_eq!((s.width, s.height), (400, 200));
            assert_eq!((s.origin_x, s.origin_y), (100, 50));
            assert!((s.scale - reference.scale).abs() < 1e-9);
        }
        assert_eq!(c.decode().unwrap(), reference.decode().unwrap());
        // The box lands at half the full-size coordinates, in the Button colour; its inside is untouched.
        let px = a.decode().unwrap();
        let red = marker.palette().color("Button");
        assert_eq!(*px.get_pixel(299, 120), red, "right edge of the box");
        assert_eq!(*px.get_pixel(200, 149), red, "bottom edge of the box");
        assert!(
            px.get_pixel(200, 100).0.iter().all(|&v| v > 250),
            "inside the box"
        );
        // The label keeps its full pixel size: white glyph pixels inside a label-coloured area.
        let label: Vec<_> = (100..112)
            .flat_map(|x| (50..66).map(move |y| (x, y)))
            .collect();
        assert!(label.iter().any(|&(x, y)| *px.get_pixel(x, y) == red));
        assert!(
            label
                .iter()
                .any(|&(x, y)| px.get_pixel(x, y).0[..3].iter().all(|&v| v > 200))
        );
    }

    #[test]
    fn reuses_the_clean_image_and_draws_the_annotated_one_at_full_size_only_when_they_fit() {
        let (marker, clean, annotated, marks) = setup();
        let fits = PromptImageSpec {
            max: (800, 800),
            clean: true,
            annotated: true,
        };
        let out = prompt_images(&clean, None, &marks, &marker, fits).unwrap();
        assert_eq!(out.clean.unwrap().bytes, clean.bytes);
        assert_eq!(out.annotated.unwrap().bytes, annotated.bytes);
        let only_annotated = PromptImageSpec {
            max: (400, 400),
            clean: false,
            annotated: true,
        };
        let out = prompt_images(&clean, None, &marks, &marker, only_annotated).unwrap();
        assert!(out.clean.is_none());
        assert_eq!(out.annotated.unwrap().width, 400);
    }

    #[test]
    fn the_newest_blackboard_images_with_pixels_are_downscaled_in_order() {
        let (_, clean, _, _) = setup();
        let image = |app: &str, shot: Option<Screenshot>| BlackboardImage {
            metadata: serde_json::json!({"application": app})
                .as_object()
                .cloned()
                .unwrap(),
            artifact_id: String::new(),
            screenshot: shot,
        };
        let mut board = Blackboard::default();
        board.images.push(image("first", Some(clean.clone())));
        board.images.push(image("stored", None));
        board.images.push(image("second", Some(clean.clone())));
        board.images.push(image("third", Some(clean.clone())));
        let got = blackboard_images(&board, 2, (200, 200));
        let captions: Vec<_> = got.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            captions,
            [
                r#"Blackboard image_2 ({"application":"second"})"#,
                r#"Blackboard image_3 ({"application":"third"})"#
            ]
        );
        let small = image::load_from_memory(&got[0].1.bytes).unwrap();
        assert_eq!((small.width(), small.height()), (200, 100));
        assert!(blackboard_images(&board, 0, (200, 200)).is_empty());
    }
}
