//! The engine-independent half of OCR grounding: preparing small anti-aliased screen text for an OCR
//! engine (grey, upscaled, optionally binarised with dark backgrounds inverted), reading Tesseract's TSV
//! words back into screenshot pixels, grouping words into lines and splitting lines at wide gaps into
//! control-sized elements, and cleaning screen text (untrusted input) before it reaches a prompt.

use fast_image_resize as fr;
use image::{GrayImage, RgbaImage};

use super::GroundingError;

/// How a screenshot is prepared for the engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preprocess {
    /// Integer upscale factor (1 = none); small screen text reads far better at 2.
    pub upscale: u32,
    /// Binarise (Otsu) and make text dark on light (Tesseract's LSTM prefers it).
    pub binarise: bool,
    /// Erase thin horizontal lines at least this long (field borders, separators, button reliefs: text
    /// touching a frame is otherwise often skipped or read with a stray `|`); 0 = keep them.
    pub line_min_len: u32,
    /// Erase thin vertical lines at least this long (shorter than a small field's height, longer than
    /// the strokes of text up to about 22 px); 0 = keep them.
    pub vline_min_len: u32,
}

impl Default for Preprocess {
    fn default() -> Self {
        Self {
            upscale: 2,
            binarise: false,
            line_min_len: 24,
            vline_min_len: 18,
        }
    }
}

/// Grey, upscaled (bilinear), optionally binarised copy of `img` for the engine.
pub fn prepare(img: &RgbaImage, p: Preprocess) -> Result<GrayImage, GroundingError> {
    let (w, h) = img.dimensions();
    let grey: Vec<u8> = img
        .pixels()
        .map(|px| {
            let [r, g, b, _] = px.0;
            // Rec. 601 luma in integers.
            ((u32::from(r) * 299 + u32::from(g) * 587 + u32::from(b) * 114) / 1000) as u8
        })
        .collect();
    let mut grey = grey;
    erase_lines(
        &mut grey,
        w as usize,
        h as usize,
        p.line_min_len as usize,
        p.vline_min_len as usize,
    );
    let k = p.upscale.clamp(1, 4);
    let mut out = if k == 1 {
        grey
    } else {
        let src = fr::images::ImageRef::new(w, h, &grey, fr::PixelType::U8)
            .map_err(|e| GroundingError::Image(e.to_string()))?;
        let mut dst = fr::images::Image::new(w * k, h * k, fr::PixelType::U8);
        let options = fr::ResizeOptions::new()
            .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear));
        // One pixel type (`resize` would compile all 13's kernels into this crate; image_ops::resize_fast).
        let (Some(src), Some(mut view)) = (
            src.typed_image::<fr::pixels::U8>(),
            dst.typed_image_mut::<fr::pixels::U8>(),
        ) else {
            return Err(GroundingError::Image("not an 8-bit grey image".into()));
        };
        fr::Resizer::new()
            .resize_typed(&src, &mut view, &options)
            .map_err(|e| GroundingError::Image(e.to_string()))?;
        drop(view);
        dst.into_vec()
    };
    if p.binarise {
        let t = otsu(&out);
        let dark = out.iter().filter(|v| **v <= t).count();
        // Text is the minority: when most pixels are dark the background is dark, so invert.
        let invert = dark * 2 > out.len();
        for v in &mut out {
            let ink = (*v <= t) != invert;
            *v = if ink { 0 } else { 255 };
        }
    }
    GrayImage::from_raw(w * k, h * k, out)
        .ok_or_else(|| GroundingError::Image("prepared buffer has the wrong size".into()))
}

/// How far (pixels) across a line its background is looked for: lines up to `REACH - 1` thick are erased.
const REACH: usize = 3;
/// Grey-level contrast between a line and its background on both sides.
const LINE_CONTRAST: i16 = 40;

/// Erases thin horizontal lines at least `min_len` long and vertical ones at least `min_vlen` (0: none of
/// that direction): a pixel belongs to a line when, within [`REACH`] pixels across the line on each
/// side, some pixel differs from it by more than [`LINE_CONTRAST`] (so text right beside a field's
/// border does not hide the border), and a run of such pixels along the line is long enough; it is
/// replaced by the background found on the first side.
fn erase_lines(g: &mut [u8], w: usize, h: usize, min_len: usize, min_vlen: usize) {
    if w <= 2 * REACH || h <= 2 * REACH {
        return;
    }
    // The background beside pixel `i` across the line (`step` = 1 for vertical lines, `w` for
    // horizontal ones), or None when it is not a thin-line pixel.
    let beside = |g: &[u8], i: usize, step: usize| -> Option<u8> {
        let v = i16::from(g[i]);
        let far = |j: usize| (i16::from(g[j]) - v).abs() > LINE_CONTRAST;
        let before = (1..=REACH).map(|d| i - d * step).find(|j| far(*j))?;
        (1..=REACH).map(|d| i + d * step).find(|j| far(*j))?;
        Some(g[before])
    };
    let mut erase: Vec<(usize, u8)> = Vec::new();
    let mut scan = |line: &mut dyn Iterator<Item = usize>, step: usize, min: usize, g: &[u8]| {
        let mut run: Vec<(usize, u8)> = Vec::new();
        for i in line.map(Some).chain(std::iter::once(None)) {
            match i.and_then(|i| beside(g, i, step).map(|bg| (i, bg))) {
                Some(p) => run.push(p),
                None => {
                    if run.len() >= min {
                        erase.append(&mut run);
                    }
                    run.clear();
                }
            }
        }
    };
    if min_len > 0 {
        for y in REACH..h - REACH {
            scan(&mut (y * w..(y + 1) * w), w, min_len, g);
        }
    }
    if min_vlen > 0 {
        for x in REACH..w - REACH {
            scan(&mut (0..h).map(|y| y * w + x), 1, min_vlen, g);
        }
    }
    for (i, v) in erase {
        g[i] = v;
    }
}

/// Otsu's threshold of a grey histogram.
fn otsu(pixels: &[u8]) -> u8 {
    let mut hist = [0u64; 256];
    for v in pixels {
        hist[usize::from(*v)] += 1;
    }
    let total = pixels.len() as f64;
    let sum: f64 = hist
        .iter()
        .enumerate()
        .map(|(i, n)| i as f64 * *n as f64)
        .sum();
    let (mut sum_b, mut w_b, mut best, mut best_t) = (0.0, 0.0, -1.0, 127u8);
    for (t, n) in hist.iter().enumerate() {
        w_b += *n as f64;
        if w_b == 0.0 {
            continue;
        }
        let w_f = total - w_b;
        if w_f == 0.0 {
            break;
        }
        sum_b += t as f64 * *n as f64;
        let (m_b, m_f) = (sum_b / w_b, (sum - sum_b) / w_f);
        let between = w_b * w_f * (m_b - m_f) * (m_b - m_f);
        if between > best {
            best = between;
            best_t = t as u8;
        }
    }
    best_t
}

/// One recognised word, in screenshot pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    /// Tesseract's block, paragraph and line numbers (words of one line share them).
    pub line: (u32, u32, u32),
    /// Left, top, right, bottom.
    pub bbox: [i32; 4],
    /// Confidence 0-100.
    pub confidence: f32,
    /// The text.
    pub text: String,
}

/// Words of Tesseract's TSV output (`level 5` rows) with at least `min_confidence`, mapped back from an
/// image upscaled by `upscale` (and offset by `offset` pixels, for a region).
pub fn parse_tsv(tsv: &str, upscale: u32, offset: (i32, i32), min_confidence: f32) -> Vec<Word> {
    let k = upscale.max(1) as i32;
    tsv.lines()
        .filter_map(|row| {
            let f: Vec<&str> = row.split('\t').collect();
            if f.len() < 12 || f[0] != "5" {
                return None;
            }
            let n = |i: usize| f[i].trim().parse::<i32>().ok();
            let confidence: f32 = f[10].trim().parse().ok()?;
            let text = f[11].trim();
            // Frames and reliefs read as `|`, `[`, `_`: no letter or digit, no control text.
            if !text.chars().any(char::is_alphanumeric) || confidence < min_confidence {
                return None;
            }
            let (l, t, w, h) = (n(6)?, n(7)?, n(8)?, n(9)?);
            Some(Word {
                line: (
                    n(2)?.max(0) as u32,
                    n(3)?.max(0) as u32,
                    n(4)?.max(0) as u32,
                ),
                bbox: [
                    offset.0 + l / k,
                    offset.1 + t / k,
                    offset.0 + (l + w + k - 1) / k,
                    offset.1 + (t + h + k - 1) / k,
                ],
                confidence,
                text: text.to_owned(),
            })
        })
        .collect()
}

/// A text-bearing element: words of one line with no wide gap between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    /// Left, top, right, bottom in screenshot pixels.
    pub bbox: [i32; 4],
    /// The words joined by single spaces.
    pub text: String,
    /// Mean word confidence.
    pub confidence: f32,
}

/// Groups words into lines (Tesseract's line numbers, in reading order) and splits a line wherever the
/// gap between two words exceeds `gap_factor` × the line's height (two buttons side by side, a label
/// and its field).
pub fn group(words: &[Word], gap_factor: f32) -> Vec<Element> {
    let mut out: Vec<Element> = Vec::new();
    let mut current: Option<(Element, (u32, u32, u32), usize)> = None;
    for w in words {
        let height = (w.bbox[3] - w.bbox[1]).max(1) as f32;
        let joins = current.as_ref().is_some_and(|(e, line, _)| {
            *line == w.line
                && (w.bbox[0] - e.bbox[2]) as f32
                    <= gap_factor * height.max((e.bbox[3] - e.bbox[1]) as f32)
        });
        if joins {
            if let Some((e, _, n)) = current.as_mut() {
                e.bbox = [
                    e.bbox[0].min(w.bbox[0]),
                    e.bbox[1].min(w.bbox[1]),
                    e.bbox[2].max(w.bbox[2]),
                    e.bbox[3].max(w.bbox[3]),
                ];
                e.text.push(' ');
                e.text.push_str(&w.text);
                e.confidence += w.confidence;
                *n += 1;
            }
        } else {
            if let Some((mut e, _, n)) = current.take() {
                e.confidence /= n as f32;
                out.push(e);
            }
            current = Some((
                Element {
                    bbox: w.bbox,
                    text: w.text.clone(),
                    confidence: w.confidence,
                },
                w.line,
                1,
            ));
        }
    }
    if let Some((mut e, _, n)) = current {
        e.confidence /= n as f32;
        out.push(e);
    }
    out
}

/// Screen text made safe to show a model as data: control and bidirectional-override characters
/// removed, whitespace runs folded to one space, at most `max_chars` characters (an ellipsis marks a cut).
pub fn sanitise(text: &str, max_chars: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .filter(|c| {
            !c.is_control()
                && !matches!(*c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        })
        .collect();
    let folded = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max_chars {
        folded
    } else {
        let mut cut: String = folded.chars().take(max_chars.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TSV: &str = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext
1\t1\t0\t0\t0\t0\t0\t0\t200\t100\t-1\t
5\t1\t1\t1\t1\t1\t10\t20\t40\t16\t95.5\tSave
5\t1\t1\t1\t1\t2\t56\t20\t30\t16\t91.0\tas
5\t1\t1\t1\t1\t3\t200\t20\t60\t16\t90.0\tCancel
5\t1\t1\t1\t2\t1\t10\t60\t40\t16\t12.0\t~~
5\t1\t2\t1\t1\t1\t10\t90\t40\t16\t80.0\tOK
";

    #[test]
    fn words_are_scaled_back_filtered_and_grouped_by_line_and_gap() {
        let words = parse_tsv(TSV, 2, (100, 0), 40.0);
        assert_eq!(words.len(), 4, "the low-confidence word is dropped");
        assert_eq!(words[0].bbox, [105, 10, 125, 18]);
        let elements = group(&words, 1.5);
        let texts: Vec<_> = elements.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts, ["Save as", "Cancel", "OK"]);
        assert_eq!(elements[0].bbox, [105, 10, 143, 18]);
        assert!((elements[0].confidence - 93.25).abs() < 1e-3);
    }

    #[test]
    fn screen_text_is_cleaned_and_bounded() {
        assert_eq!(
            sanitise("  SYSTEM:\u{7}\tignore\u{202e} me\n", 80),
            "SYSTEM: ignore me"
        );
        assert_eq!(sanitise("abcdef", 4), "abc…");
        assert_eq!(sanitise("\u{1b}[31m", 10), "[31m");
    }

    #[test]
    fn binarising_makes_text_dark_on_light_even_on_a_dark_background() {
        // A dark window with a light stroke: after binarisation the stroke is black on white.
        let mut img = RgbaImage::from_pixel(20, 10, image::Rgba([30, 30, 40, 255]));
        for x in 5..15 {
            img.put_pixel(x, 5, image::Rgba([230, 230, 230, 255]));
        }
        let out = prepare(
            &img,
            Preprocess {
                upscale: 2,
                binarise: true,
                line_min_len: 0,
                vline_min_len: 0,
            },
        )
        .unwrap();
        assert_eq!(out.dimensions(), (40, 20));
        assert_eq!(out.get_pixel(0, 0).0, [255]);
        assert_eq!(out.get_pixel(20, 10).0, [0]);
    }
}
