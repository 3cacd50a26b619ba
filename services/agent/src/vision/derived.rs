//! Images derived from a step's clean screenshot — the set-of-marks image the model received and the
//! selected control's crop — are not stored: the step records a small JSON *recipe* (the clean image's
//! hash, the prompt's size, every mark with its label, rectangle and colour, the label font's hash and
//! size; or the crop rectangle) and [`render`] draws the image again on read, with the same code the step
//! used, byte for byte (issue 22, point 2; docs/blob-store.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ab_glyph::FontArc;
use bytes::Bytes;
use image::{Rgba, RgbaImage};
use serde::{Deserialize, Serialize};

use super::annotate::{
    EMBEDDED_FONT, FontId, Mark, Marker, Painted, Palette, font_sha256, registered_font,
};
use super::image_ops::resize_fast;
use super::screenshot::{Screenshot, VisionError, encode_png};
use crate::agents::target::Rect;

/// The content type of a recipe artifact (its bytes are the JSON [`Recipe`]).
pub const RECIPE_TYPE: &str = "application/vnd.ufo.derived-image+json";

/// The drawing the recipes describe. A change to how marks, labels or crops are drawn must bump it and
/// keep drawing the older versions, or their images would no longer render as they were sent.
pub const VERSION: u32 = 1;

/// How to draw a derived image from its source screenshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "render", rename_all = "snake_case")]
pub enum Recipe {
    /// The set-of-marks image: the source fitted to `size` (fast_image_resize, bilinear), the marks drawn.
    Annotate {
        /// [`VERSION`] of the drawing.
        version: u32,
        /// Hex SHA-256 of the source screenshot's bytes (its artifact id).
        source: String,
        /// The source's pixel size.
        source_size: [u32; 2],
        /// The drawn image's size (the source's when it fitted the prompt).
        size: [u32; 2],
        /// The label font and size.
        font: FontId,
        /// In drawing order, in `size` pixels.
        marks: Vec<RecordedMark>,
    },
    /// A rectangle of the source, `[left, top, right, bottom]` in source pixels (already clipped).
    Crop {
        /// [`VERSION`] of the drawing.
        version: u32,
        /// Hex SHA-256 of the source screenshot's bytes.
        source: String,
        /// The source's pixel size.
        source_size: [u32; 2],
        /// The rectangle.
        rect: [u32; 4],
    },
}

/// A mark as drawn: label, `[left, top, right, bottom]`, RGB colour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedMark(pub String, pub [i32; 4], pub [u8; 3]);

/// A derived image as a step records it: the recipe's bytes and where the rendered image sits.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// The JSON recipe.
    pub recipe: Bytes,
    /// The rendered image's placement and size (its `bytes` are empty; `mime` is the rendered type).
    pub placement: Screenshot,
}

/// Why a derived image cannot be drawn.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The recipe is not valid JSON of a known shape.
    #[error("the derived image's recipe is unreadable: {0}")]
    Recipe(#[from] serde_json::Error),
    /// Drawn by a newer agent.
    #[error("the derived image was drawn by drawing version {0}; this agent draws up to {VERSION}")]
    Version(u32),
    /// The source is not the image the recipe was made from.
    #[error("the source screenshot is {got:?} pixels, the recipe expects {expected:?}")]
    SourceSize {
        /// Recorded.
        expected: [u32; 2],
        /// Found.
        got: [u32; 2],
    },
    /// The labels were drawn with a font this process has not loaded.
    #[error(
        "the labels were drawn with a font this agent has not loaded (sha256 {0}); start it with that --label-font"
    )]
    Font(String),
    /// The crop lies outside the source.
    #[error("the crop rectangle lies outside the source screenshot")]
    Crop,
    /// Decoding, resizing or encoding failed.
    #[error(transparent)]
    Vision(#[from] VisionError),
}

impl Recipe {
    /// The source screenshot's hash.
    pub fn source(&self) -> &str {
        match self {
            Self::Annotate { source, .. } | Self::Crop { source, .. } => source,
        }
    }

    fn to_derived(&self, placement: Screenshot) -> Derived {
        Derived {
            // A recipe is plain data: serialising it cannot fail.
            recipe: Bytes::from(serde_json::to_vec(self).unwrap_or_default()),
            placement,
        }
    }
}

/// `marks` (in `from`-sized pixels) scaled to a `to`-sized copy of the image: the one scaling the prompt's
/// downscaled annotated image and its recipe share.
pub fn scale_marks<'a>(marks: &[Mark<'a>], from: (u32, u32), to: (u32, u32)) -> Vec<Mark<'a>> {
    if from == to {
        return marks.to_vec();
    }
    let fx = f64::from(to.0) / f64::from(from.0.max(1));
    let fy = f64::from(to.1) / f64::from(from.1.max(1));
    let s = |v: i32, f: f64| (f64::from(v) * f).round() as i32;
    marks
        .iter()
        .map(|m| Mark {
            rect: Rect::new(
                s(m.rect.left, fx),
                s(m.rect.top, fy),
                s(m.rect.right, fx),
                s(m.rect.bottom, fy),
            ),
            ..*m
        })
        .collect()
}

/// The recipe of the set-of-marks image of `clean` (hash `source`, `pixels` its decoded pixels) drawn at
/// `size` with `marks` (in full-size pixels) by `marker`: what the model is sent.
pub fn annotation(
    source: &str,
    clean: &Screenshot,
    pixels: &RgbaImage,
    size: (u32, u32),
    marks: &[Mark<'_>],
    marker: &Marker,
) -> Derived {
    let scaled = scale_marks(marks, pixels.dimensions(), size);
    let recipe = Recipe::Annotate {
        version: VERSION,
        source: source.to_owned(),
        source_size: [pixels.width(), pixels.height()],
        size: [size.0, size.1],
        font: marker.font().clone(),
        marks: marker
            .paint(&scaled)
            .into_iter()
            .map(|p| {
                let r = p.rect;
                let [red, green, blue, _] = p.color.0;
                RecordedMark(
                    p.label.to_owned(),
                    [r.left, r.top, r.right, r.bottom],
                    [red, green, blue],
                )
            })
            .collect(),
    };
    let fx = f64::from(size.0) / f64::from(pixels.width().max(1));
    recipe.to_derived(Screenshot {
        mime: "image/png".into(),
        bytes: Bytes::new(),
        width: size.0,
        height: size.1,
        scale: clean.scale / fx,
        ..clean.clone()
    })
}

/// The recipe of the crop `rect` (pixels, clipped as [`super::image_ops::crop_rect`] clips it) of the
/// `source_size` screenshot with hash `source`, whose result is `crop`.
pub fn crop(source: &str, source_size: (u32, u32), rect: [u32; 4], crop: &Screenshot) -> Derived {
    Recipe::Crop {
        version: VERSION,
        source: source.to_owned(),
        source_size: [source_size.0, source_size.1],
        rect,
    }
    .to_derived(Screenshot {
        bytes: Bytes::new(),
        ..crop.clone()
    })
}

/// Draws the image `recipe` (JSON) describes from `source` (the encoded source screenshot): PNG bytes.
#[tracing::instrument(name = "screenshot.render", skip_all, fields(source_bytes = source.len()))]
pub fn render(recipe: &[u8], source: &[u8]) -> Result<Bytes, RenderError> {
    let recipe: Recipe = serde_json::from_slice(recipe)?;
    let (Recipe::Annotate {
        version,
        source_size,
        ..
    }
    | Recipe::Crop {
        version,
        source_size,
        ..
    }) = &recipe;
    if *version > VERSION {
        return Err(RenderError::Version(*version));
    }
    let img = image::load_from_memory(source)
        .map_err(VisionError::Decode)?
        .into_rgba8();
    if [img.width(), img.height()] != *source_size {
        return Err(RenderError::SourceSize {
            expected: *source_size,
            got: [img.width(), img.height()],
        });
    }
    match recipe {
        Recipe::Annotate {
            size, font, marks, ..
        } => {
            let marker = marker_for(&font)?;
            let mut out = if [img.width(), img.height()] == size {
                img
            } else {
                resize_fast(&img, size[0], size[1])?
            };
            let painted: Vec<Painted<'_>> = marks
                .iter()
                .map(
                    |RecordedMark(label, [l, t, r, b], [red, green, blue])| Painted {
                        label,
                        rect: Rect::new(*l, *t, *r, *b),
                        color: Rgba([*red, *green, *blue, 255]),
                    },
                )
                .collect();
            marker.annotate_painted(&mut out, &painted);
            Ok(encode_png(&out)?)
        }
        Recipe::Crop {
            rect: [l, t, r, b], ..
        } => {
            if r <= l || b <= t || r > img.width() || b > img.height() {
                return Err(RenderError::Crop);
            }
            let cropped = image::imageops::crop_imm(&img, l, t, r - l, b - t).to_image();
            Ok(encode_png(&cropped)?)
        }
    }
}

/// A marker drawing with `id` (cached per font and size): the embedded font, or one this process loaded.
fn marker_for(id: &FontId) -> Result<Arc<Marker>, RenderError> {
    type Cache = Mutex<HashMap<(String, u32), Arc<Marker>>>;
    static MARKERS: OnceLock<Cache> = OnceLock::new();
    let key = (id.sha256.clone(), id.px.to_bits());
    let cache = MARKERS.get_or_init(Default::default);
    if let Some(m) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(m);
    }
    let font = match registered_font(&id.sha256) {
        Some(font) => font,
        None if id.sha256 == font_sha256(EMBEDDED_FONT) => {
            FontArc::try_from_slice(EMBEDDED_FONT)
                .map_err(|_| RenderError::Font(id.sha256.clone()))?
        }
        None => return Err(RenderError::Font(id.sha256.clone())),
    };
    let marker = Arc::new(Marker::from_font(&font, id.clone(), Palette::default()));
    if let Ok(mut c) = cache.lock() {
        c.insert(key, marker.clone());
    }
    Ok(marker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::image_ops::crop_pixels;

    fn clean() -> (Screenshot, RgbaImage) {
        let img = RgbaImage::from_fn(300, 200, |x, y| {
            Rgba([
                (x % 256) as u8,
                (y * 3 % 256) as u8,
                ((x * y) % 256) as u8,
                255,
            ])
        });
        (Screenshot::from_rgba(&img, 10, 20).unwrap(), img)
    }

    #[test]
    fn annotations_and_crops_render_as_drawn_at_capture() {
        let marker = Marker::embedded(14.0, Palette::default()).unwrap();
        let (shot, pixels) = clean();
        let marks = [
            Mark {
                label: "1",
                rect: Rect::new(10, 10, 120, 60),
                control_type: "Button",
            },
            Mark {
                label: "2",
                rect: Rect::new(100, 50, 290, 190),
                control_type: "no such type",
            },
        ];
        for size in [(300, 200), (150, 100)] {
            let derived = annotation("ab", &shot, &pixels, size, &marks, &marker);
            let mut expected = resize_fast(&pixels, size.0, size.1).unwrap();
            marker.annotate(&mut expected, &scale_marks(&marks, (300, 200), size));
            let drawn = render(&derived.recipe, &shot.bytes).unwrap();
            assert_eq!(drawn, encode_png(&expected).unwrap(), "{size:?}");
            assert_eq!((derived.placement.width, derived.placement.height), size);
        }
        let want = crop_pixels(&pixels, &shot, Rect::new(30, 40, 80, 70)).unwrap();
        let derived = crop("ab", (300, 200), [20, 20, 70, 50], &want);
        assert_eq!(render(&derived.recipe, &shot.bytes).unwrap(), want.bytes);
    }

    #[test]
    fn bad_recipes_are_clear_errors() {
        let (shot, _) = clean();
        let recipe = |v: serde_json::Value| render(v.to_string().as_bytes(), &shot.bytes);
        let font = serde_json::json!({"sha256": "00", "px": 14.0});
        let annotate = |version: u32, source_size: [u32; 2]| {
            serde_json::json!({"render": "annotate", "version": version, "source": "ab",
                "source_size": source_size, "size": [300, 200], "font": font, "marks": []})
        };
        assert!(matches!(
            render(b"{", &shot.bytes),
            Err(RenderError::Recipe(_))
        ));
        assert!(matches!(
            recipe(annotate(99, [300, 200])),
            Err(RenderError::Version(99))
        ));
        assert!(matches!(
            recipe(annotate(1, [30, 20])),
            Err(RenderError::SourceSize { .. })
        ));
        assert!(matches!(
            recipe(annotate(1, [300, 200])),
            Err(RenderError::Font(_))
        ));
        let crop = serde_json::json!({"render": "crop", "version": 1, "source": "ab",
            "source_size": [300, 200], "rect": [10, 10, 400, 20]});
        assert!(matches!(recipe(crop), Err(RenderError::Crop)));
    }
}
