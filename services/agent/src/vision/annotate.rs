//! Set-of-marks annotation: a coloured box around each control and a numbered label at its top-left
//! corner, colour chosen by control type (seed 001, "Annotation Process").
//!
//! Glyphs are rasterised once per [`Marker`] (printable ASCII), so annotating is box drawing plus alpha
//! blits: a 1920×1080 screenshot with 50 controls takes well under the 2 ms budget (see the bench).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use ab_glyph::{Font as _, FontArc, PxScale, ScaleFont as _};
use image::{Rgba, RgbaImage};

use super::screenshot::VisionError;
use crate::agents::target::Rect;

/// Where Debian's fonts-dejavu-core puts the font the binary embeds (tests and benchmarks load it from
/// there to compare; the service needs no system font).
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf";

/// DejaVu Sans Bold, embedded so that the agent starts in an image without fonts (its licence, in
/// `assets/DejaVu-LICENSE.txt`, allows redistribution with the notice).
pub static EMBEDDED_FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-Bold.ttf");

/// Colours by control type; unknown types get the default.
#[derive(Debug, Clone)]
pub struct Palette {
    by_type: HashMap<String, Rgba<u8>>,
    default: Rgba<u8>,
}

impl Default for Palette {
    fn default() -> Self {
        let c = |r, g, b| Rgba([r, g, b, 255]);
        let by_type = [
            ("Button", c(230, 40, 40)),
            ("push button", c(230, 40, 40)),
            ("Edit", c(30, 120, 230)),
            ("text", c(30, 120, 230)),
            ("entry", c(30, 120, 230)),
            ("MenuItem", c(20, 160, 70)),
            ("menu item", c(20, 160, 70)),
            ("CheckBox", c(200, 120, 0)),
            ("check box", c(200, 120, 0)),
            ("ComboBox", c(150, 60, 200)),
            ("combo box", c(150, 60, 200)),
            ("TabItem", c(0, 150, 150)),
            ("page tab", c(0, 150, 150)),
            ("Hyperlink", c(200, 0, 130)),
            ("link", c(200, 0, 130)),
            // Visually grounded text (no accessible control): a colour no accessibility type uses.
            (crate::vision::grounding::GROUNDED_TYPE, c(255, 0, 255)),
            (crate::vision::grounding::GROUNDED_ICON_TYPE, c(255, 0, 255)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
        Self {
            by_type,
            default: c(90, 90, 90),
        }
    }
}

impl Palette {
    /// The colour for a control type (case-insensitive).
    pub fn color(&self, control_type: &str) -> Rgba<u8> {
        self.by_type
            .get(&control_type.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.default)
    }

    /// Sets a type's colour.
    pub fn set(&mut self, control_type: &str, color: Rgba<u8>) {
        self.by_type
            .insert(control_type.to_ascii_lowercase(), color);
    }
}

struct Glyph {
    advance: u32,
    width: u32,
    height: u32,
    offset_x: i32,
    offset_y: i32,
    alpha: Vec<u8>,
}

/// Draws set-of-marks annotations. Build once (it loads the font and rasterises glyphs), share freely.
pub struct Marker {
    glyphs: HashMap<char, Glyph>,
    line_height: u32,
    palette: Palette,
    font: FontId,
}

/// Which font at which size a [`Marker`] draws labels with: the font file's hex SHA-256 and the pixel
/// size. Recorded with every annotation rendered on read, so it is drawn again with the same glyphs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FontId {
    /// Hex SHA-256 of the font file's bytes.
    pub sha256: String,
    /// Label size in pixels.
    pub px: f32,
}

/// The hex SHA-256 of font bytes (a [`FontId`]'s `sha256`).
pub fn font_sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(data))
}

impl std::fmt::Debug for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marker")
            .field("glyphs", &self.glyphs.len())
            .field("line_height", &self.line_height)
            .finish()
    }
}

/// The set-of-marks of `controls` in `clean`'s pixel coordinates, each labelled with its `label`
/// (controls without a rectangle have none): what the AppAgent draws for the model, and what the MCP
/// `screenshot` tool draws with `marks` (labels = the executor's control ids).
pub fn control_marks<'a>(
    controls: &'a [crate::agents::target::TargetInfo],
    clean: &super::Screenshot,
) -> Vec<Mark<'a>> {
    controls
        .iter()
        .filter_map(|c| {
            c.rect.map(|r| Mark {
                label: &c.label,
                rect: clean.to_pixels(r),
                control_type: &c.control_type,
            })
        })
        .collect()
}

/// One control to mark, in image pixel coordinates.
#[derive(Debug, Clone, Copy)]
pub struct Mark<'a> {
    /// The number drawn.
    pub label: &'a str,
    /// Box in image pixels.
    pub rect: Rect,
    /// Control type (chooses the colour).
    pub control_type: &'a str,
}

/// A mark with its colour chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Painted<'a> {
    /// The number drawn.
    pub label: &'a str,
    /// Box in image pixels.
    pub rect: Rect,
    /// Box and label background colour.
    pub color: Rgba<u8>,
}

impl Marker {
    /// Loads the font at `path` (a clear error if it is missing) and rasterises labels at `px` pixels.
    pub fn load(path: &Path, px: f32, palette: Palette) -> Result<Self, VisionError> {
        let font_err = |reason: String| VisionError::Font {
            path: path.display().to_string(),
            reason,
        };
        let data = std::fs::read(path).map_err(|e| font_err(e.to_string()))?;
        let sha256 = font_sha256(&data);
        let font = FontArc::try_from_vec(data).map_err(|e| font_err(e.to_string()))?;
        register_font(&sha256, &font);
        Ok(Self::from_font(&font, FontId { sha256, px }, palette))
    }

    /// Rasterises labels with the embedded DejaVu Sans Bold.
    pub fn embedded(px: f32, palette: Palette) -> Result<Self, VisionError> {
        let font = FontArc::try_from_slice(EMBEDDED_FONT).map_err(|e| VisionError::Font {
            path: "(embedded DejaVuSans-Bold.ttf)".to_owned(),
            reason: e.to_string(),
        })?;
        let sha256 = font_sha256(EMBEDDED_FONT);
        Ok(Self::from_font(&font, FontId { sha256, px }, palette))
    }

    /// Rasterises labels from an already loaded font (`id` names that font and the size).
    pub fn from_font(font: &FontArc, id: FontId, palette: Palette) -> Self {
        let px = id.px;
        let scaled = font.as_scaled(PxScale::from(px));
        let ascent = scaled.ascent();
        let line_height = (scaled.ascent() - scaled.descent()).ceil().max(1.0) as u32;
        let mut glyphs = HashMap::new();
        for ch in (0x20u8..0x7f).map(char::from) {
            let id = scaled.glyph_id(ch);
            let advance = scaled.h_advance(id).ceil().max(0.0) as u32;
            let glyph = id.with_scale_and_position(PxScale::from(px), ab_glyph::point(0.0, ascent));
            let Some(outline) = font.outline_glyph(glyph) else {
                glyphs.insert(
                    ch,
                    Glyph {
                        advance,
                        width: 0,
                        height: 0,
                        offset_x: 0,
                        offset_y: 0,
                        alpha: vec![],
                    },
                );
                continue;
            };
            let bounds = outline.px_bounds();
            let (w, h) = (bounds.width().ceil() as u32, bounds.height().ceil() as u32);
            let mut alpha = vec![0u8; (w * h) as usize];
            outline.draw(|x, y, c| {
                if x < w && y < h {
                    alpha[(y * w + x) as usize] = (c.clamp(0.0, 1.0) * 255.0) as u8;
                }
            });
            glyphs.insert(
                ch,
                Glyph {
                    advance,
                    width: w,
                    height: h,
                    offset_x: bounds.min.x.floor() as i32,
                    offset_y: bounds.min.y.floor() as i32,
                    alpha,
                },
            );
        }
        Self {
            glyphs,
            line_height,
            palette,
            font: id,
        }
    }

    /// The palette in use.
    pub fn palette(&self) -> &Palette {
        &self.palette
    }

    /// The font and size the labels are drawn with.
    pub fn font(&self) -> &FontId {
        &self.font
    }

    /// Draws every mark onto `img` (boxes first, then labels, so labels stay readable).
    pub fn annotate(&self, img: &mut RgbaImage, marks: &[Mark<'_>]) {
        self.draw(img, marks, None);
    }

    /// Draws marks whose colours are already chosen (as recorded for rendering on read): the same
    /// drawing as [`Marker::annotate`] with the palette's colour of each mark's type.
    pub fn annotate_painted(&self, img: &mut RgbaImage, marks: &[Painted<'_>]) {
        self.draw_painted(img, marks, None);
    }

    /// `marks` with the palette's colours.
    pub fn paint<'a>(&self, marks: &[Mark<'a>]) -> Vec<Painted<'a>> {
        marks
            .iter()
            .map(|m| Painted {
                label: m.label,
                rect: m.rect,
                color: self.palette.color(m.control_type),
            })
            .collect()
    }

    /// [`Marker::annotate`], keeping the overwritten pixels: [`Undo::restore`] turns `img` back into the
    /// clean image, which saves copying a whole screenshot to annotate it.
    pub fn annotate_undoable(&self, img: &mut RgbaImage, marks: &[Mark<'_>]) -> Undo {
        let mut undo = Undo::default();
        self.draw(img, marks, Some(&mut undo));
        undo
    }

    fn draw(&self, img: &mut RgbaImage, marks: &[Mark<'_>], undo: Option<&mut Undo>) {
        self.draw_painted(img, &self.paint(marks), undo);
    }

    fn draw_painted(
        &self,
        img: &mut RgbaImage,
        marks: &[Painted<'_>],
        mut undo: Option<&mut Undo>,
    ) {
        for m in marks {
            let color = m.color;
            for edge in box_edges(m.rect, 2) {
                if let Some(u) = undo.as_deref_mut() {
                    u.save(img, edge);
                }
                fill(img, edge, color);
            }
        }
        for m in marks {
            let color = m.color;
            self.draw_label(img, m.rect, m.label, color, undo.as_deref_mut());
        }
    }

    fn draw_label(
        &self,
        img: &mut RgbaImage,
        rect: Rect,
        text: &str,
        bg: Rgba<u8>,
        undo: Option<&mut Undo>,
    ) {
        let pad = 2;
        let width: u32 = text
            .chars()
            .filter_map(|c| self.glyphs.get(&c))
            .map(|g| g.advance)
            .sum();
        let (bw, bh) = (width as i32 + 2 * pad, self.line_height as i32 + pad);
        let (x, y) = label_origin(rect, (bw, bh), (img.width() as i32, img.height() as i32));
        let background = Rect::new(x, y, x + bw, y + bh);
        if let Some(u) = undo {
            // Glyph outlines may overhang the background by a pixel or two: save their extent as well.
            let mut extent = background;
            let mut pen = x + pad;
            for g in text.chars().filter_map(|c| self.glyphs.get(&c)) {
                let (gx, gy) = (pen + g.offset_x, y + g.offset_y);
                extent = Rect::new(
                    extent.left.min(gx),
                    extent.top.min(gy),
                    extent.right.max(gx + g.width as i32),
                    extent.bottom.max(gy + g.height as i32),
                );
                pen += g.advance as i32;
            }
            u.save(img, extent);
        }
        fill(img, background, bg);
        let mut pen = x + pad;
        for c in text.chars() {
            let Some(g) = self.glyphs.get(&c) else {
                continue;
            };
            blit_alpha(
                img,
                pen + g.offset_x,
                y + g.offset_y,
                g,
                Rgba([255, 255, 255, 255]),
            );
            pen += g.advance as i32;
        }
    }
}

/// Pixels overwritten by [`Marker::annotate_undoable`], by rectangle, in drawing order.
#[derive(Debug, Default)]
pub struct Undo {
    patches: Vec<(Rect, Vec<u8>)>,
}

impl Undo {
    fn save(&mut self, img: &RgbaImage, r: Rect) {
        let Some(r) = clip(img, r) else {
            return;
        };
        let stride = img.width() as usize * 4;
        let (l, rr) = (r.left as usize * 4, r.right as usize * 4);
        let raw = img.as_raw();
        let mut saved = Vec::with_capacity((rr - l) * r.height() as usize);
        for y in r.top..r.bottom {
            let row = y as usize * stride;
            saved.extend_from_slice(&raw[row + l..row + rr]);
        }
        self.patches.push((r, saved));
    }

    /// Puts the saved pixels back into `img` (the image they were saved from), latest first, so
    /// overlapping marks end with the original pixels.
    pub fn restore(self, img: &mut RgbaImage) {
        let stride = img.width() as usize * 4;
        let raw: &mut [u8] = img;
        for (r, saved) in self.patches.into_iter().rev() {
            let (l, rr) = (r.left as usize * 4, r.right as usize * 4);
            for (y, src) in (r.top..r.bottom).zip(saved.chunks_exact(rr - l)) {
                let row = y as usize * stride;
                raw[row + l..row + rr].copy_from_slice(src);
            }
        }
    }
}

/// `r` clipped to `img`, or `None` when nothing is left.
fn clip(img: &RgbaImage, r: Rect) -> Option<Rect> {
    let (w, h) = (img.width() as i32, img.height() as i32);
    let c = Rect::new(r.left.max(0), r.top.max(0), r.right.min(w), r.bottom.min(h));
    (c.right > c.left && c.bottom > c.top).then_some(c)
}

/// The four edges of a `thickness`-pixel box around `r`.
fn box_edges(r: Rect, thickness: i32) -> [Rect; 4] {
    let t = thickness;
    [
        Rect::new(r.left, r.top, r.right, r.top + t),
        Rect::new(r.left, r.bottom - t, r.right, r.bottom),
        Rect::new(r.left, r.top, r.left + t, r.bottom),
        Rect::new(r.right - t, r.top, r.right, r.bottom),
    ]
}

fn fill(img: &mut RgbaImage, r: Rect, color: Rgba<u8>) {
    let Some(r) = clip(img, r) else {
        return;
    };
    let stride = img.width() as usize * 4;
    let raw: &mut [u8] = img;
    for y in r.top..r.bottom {
        let row = y as usize * stride;
        for px in raw[row + r.left as usize * 4..row + r.right as usize * 4].chunks_exact_mut(4) {
            px.copy_from_slice(&color.0);
        }
    }
}

fn blit_alpha(img: &mut RgbaImage, x: i32, y: i32, g: &Glyph, color: Rgba<u8>) {
    let (w, h) = (img.width() as i32, img.height() as i32);
    for gy in 0..g.height as i32 {
        let py = y + gy;
        if py < 0 || py >= h {
            continue;
        }
        for gx in 0..g.width as i32 {
            let px = x + gx;
            if px < 0 || px >= w {
                continue;
            }
            let a = u16::from(g.alpha[(gy as u32 * g.width + gx as u32) as usize]);
            if a == 0 {
                continue;
            }
            let dst = img.get_pixel_mut(px as u32, py as u32);
            for i in 0..3 {
                dst.0[i] =
                    ((u16::from(color.0[i]) * a + u16::from(dst.0[i]) * (255 - a)) / 255) as u8;
            }
        }
    }
}

fn fonts() -> &'static Mutex<HashMap<String, FontArc>> {
    static FONTS: OnceLock<Mutex<HashMap<String, FontArc>>> = OnceLock::new();
    FONTS.get_or_init(Default::default)
}

/// Remembers a loaded label font by its hash, so annotations drawn with it render on read.
pub(crate) fn register_font(sha256: &str, font: &FontArc) {
    if let Ok(mut fonts) = fonts().lock() {
        fonts
            .entry(sha256.to_owned())
            .or_insert_with(|| font.clone());
    }
}

/// A label font this process loaded, by its hash.
pub(crate) fn registered_font(sha256: &str) -> Option<FontArc> {
    fonts().lock().ok().and_then(|f| f.get(sha256).cloned())
}

/// Where a `size` label of the box `rect` goes in an image of `bounds`: outside the box, so that it
/// covers none of the control's own text — above its top-left corner, else left of it, else below it;
/// inside the corner only when the box fills the image; always within the image.
fn label_origin(rect: Rect, (w, h): (i32, i32), (width, height): (i32, i32)) -> (i32, i32) {
    let (x, y) = if rect.top - h >= 0 {
        (rect.left, rect.top - h)
    } else if rect.left - w >= 0 {
        (rect.left - w, rect.top)
    } else if rect.bottom + h <= height {
        (rect.left, rect.bottom)
    } else {
        (rect.left, rect.top)
    };
    (
        x.clamp(0, (width - w).max(0)),
        y.clamp(0, (height - h).max(0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_restores_the_clean_pixels_even_for_overlapping_marks_at_the_edges() {
        let marker = Marker::load(Path::new(DEFAULT_FONT), 14.0, Palette::default()).unwrap();
        let clean = RgbaImage::from_fn(120, 80, |x, y| {
            Rgba([
                (x * 7 % 256) as u8,
                (y * 13 % 256) as u8,
                ((x + y) % 256) as u8,
                255,
            ])
        });
        let mut img = clean.clone();
        let marks = [
            Mark {
                label: "1",
                rect: Rect::new(-5, -5, 60, 40),
                control_type: "Button",
            },
            Mark {
                label: "23",
                rect: Rect::new(40, 20, 130, 90),
                control_type: "Edit",
            },
            Mark {
                label: "4",
                rect: Rect::new(110, 70, 119, 79),
                control_type: "link",
            },
        ];
        let undo = marker.annotate_undoable(&mut img, &marks);
        let mut plain = clean.clone();
        marker.annotate(&mut plain, &marks);
        assert_eq!(img, plain, "the same drawing as annotate");
        assert_ne!(img, clean);
        undo.restore(&mut img);
        assert_eq!(img, clean);
    }

    #[test]
    fn the_embedded_font_draws_like_the_system_one() {
        let marks = [Mark {
            label: "7",
            rect: Rect::new(10, 10, 90, 60),
            control_type: "Button",
        }];
        let mut embedded = RgbaImage::from_pixel(100, 70, Rgba([255, 255, 255, 255]));
        let mut system = embedded.clone();
        Marker::embedded(14.0, Palette::default())
            .unwrap()
            .annotate(&mut embedded, &marks);
        Marker::load(Path::new(DEFAULT_FONT), 14.0, Palette::default())
            .unwrap()
            .annotate(&mut system, &marks);
        assert_eq!(embedded, system, "the embedded font is DejaVu Sans Bold");
    }

    #[test]
    fn missing_font_is_a_clear_error() {
        let err =
            Marker::load(Path::new("/nonexistent/font.ttf"), 14.0, Palette::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/font.ttf"), "{err}");
    }

    #[test]
    fn draws_type_coloured_boxes_and_labels() {
        let marker = Marker::load(Path::new(DEFAULT_FONT), 14.0, Palette::default()).unwrap();
        let mut img = RgbaImage::from_pixel(200, 100, Rgba([255, 255, 255, 255]));
        marker.annotate(
            &mut img,
            &[
                Mark {
                    label: "1",
                    rect: Rect::new(10, 10, 90, 60),
                    control_type: "Button",
                },
                Mark {
                    label: "12",
                    rect: Rect::new(100, 40, 190, 95),
                    control_type: "Edit",
                },
            ],
        );
        let red = marker.palette().color("Button");
        let blue = marker.palette().color("edit");
        // Box edges away from the label carry the type's colour.
        assert_eq!(*img.get_pixel(89, 50), red);
        assert_eq!(*img.get_pixel(189, 90), blue);
        // The first box has no room above or left of it: its label is below it, white glyph pixels on
        // the coloured background.
        let label_pixels: Vec<_> = (10..30)
            .flat_map(|x| (60..76).map(move |y| (x, y)))
            .collect();
        assert!(
            label_pixels
                .iter()
                .any(|&(x, y)| *img.get_pixel(x, y) == red)
        );
        assert!(
            label_pixels
                .iter()
                .any(|&(x, y)| img.get_pixel(x, y).0[..3].iter().all(|&c| c > 200))
        );
        // Inside the boxes (within their 2-pixel edges), untouched: the labels cover none of the text.
        let white = Rgba([255, 255, 255, 255]);
        for (x0, y0, x1, y1) in [(12, 12, 88, 58), (102, 42, 188, 93)] {
            for (x, y) in (x0..x1).flat_map(|x| (y0..y1).map(move |y| (x, y))) {
                assert_eq!(*img.get_pixel(x, y), white, "({x}, {y}) inside a box");
            }
        }
        // The second box has room above: its label sits on top of it.
        assert!((100..120).any(|x| (24..40).any(|y| *img.get_pixel(x, y) == blue)));
    }

    #[test]
    fn labels_go_above_else_left_else_below_else_inside_and_stay_in_the_image() {
        let bounds = (200, 100);
        let label = (20, 16);
        assert_eq!(
            label_origin(Rect::new(50, 40, 90, 60), label, bounds),
            (50, 24)
        );
        assert_eq!(
            label_origin(Rect::new(50, 5, 90, 30), label, bounds),
            (30, 5)
        );
        assert_eq!(
            label_origin(Rect::new(5, 5, 90, 30), label, bounds),
            (5, 30)
        );
        assert_eq!(
            label_origin(Rect::new(0, 0, 200, 100), label, bounds),
            (0, 0)
        );
        assert_eq!(
            label_origin(Rect::new(195, 50, 200, 60), label, bounds),
            (180, 34)
        );
    }
}
