//! The built-in visual-grounding source (issue 32): text-bearing elements (buttons, labels, menu entries,
//! field captions, list entries) found by an OCR engine in a window's screenshot, for windows whose
//! accessibility API exposes little (Tk, custom-drawn toolkits, Electron or Java without their switch).
//!
//! [`OcrGrounding`] prepares the screenshot ([`ocr::prepare`]: grey, upscaled, optionally binarised), asks
//! an [`OcrEngine`] (Tesseract in-process, [`tesseract`]) for words, groups them into lines split at wide
//! gaps ([`ocr::group`]), cleans the text ([`ocr::sanitise`]: screen text is untrusted) and maps the boxes
//! to screen coordinates. Each call is bounded by a timeout and runs in a `grounding` span; results are
//! cached per screenshot, so an unchanged window is not grounded again.

pub mod ocr;
pub mod omniparser;
#[cfg(feature = "ocr")]
pub mod tesseract;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use image::{GrayImage, RgbaImage};
use serde_json::{Map, json};
use sha2::{Digest, Sha256};
use tracing::Instrument as _;

use crate::agents::target::{ControlSource, Rect, TargetInfo, TargetKind};
use crate::vision::Screenshot;
pub use ocr::{Element, Preprocess};

/// The control type grounded text elements carry in the prompt and the set-of-marks palette.
pub const GROUNDED_TYPE: &str = "OcrText";
/// The control type of grounded icons (a grounding service's `icon` elements).
pub const GROUNDED_ICON_TYPE: &str = "GroundedIcon";

/// A visual-grounding control source (the built-in OCR, an OmniParser service): controls found in a
/// screenshot, with screen rectangles. An error makes the step use accessibility controls only.
#[async_trait]
pub trait GroundingSource: Send + Sync {
    /// Controls detected in `shot`.
    async fn detect(&self, shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError>;
}

/// Why grounding failed (the step goes on with accessibility controls only).
#[derive(Debug, thiserror::Error)]
pub enum GroundingError {
    /// The OCR engine is not available (not built in, or its library or language data is missing).
    #[error("the OCR engine is not available: {0}")]
    Unavailable(String),
    /// The engine failed on this image.
    #[error("the OCR engine failed: {0}")]
    Engine(String),
    /// Preparing the image failed.
    #[error("cannot prepare the screenshot for OCR: {0}")]
    Image(String),
    /// The call took longer than allowed.
    #[error("grounding took longer than {0:?}")]
    Timeout(Duration),
    /// The grounding service failed, was unreachable or answered something that is not its protocol.
    #[error("the grounding service failed: {0}")]
    Service(String),
    /// The grounding configuration is wrong (a bad URL).
    #[error("bad grounding configuration: {0}")]
    Config(String),
}

/// An OCR engine: Tesseract-style TSV (level 5 rows are words) for a grey image.
pub trait OcrEngine: Send + Sync {
    /// A short name for logs and `ufo doctor` (e.g. `tesseract 5.3.0`).
    fn name(&self) -> String;
    /// Recognises `img`; returns TSV rows `level page block par line word left top width height conf text`.
    fn recognise(&self, img: &GrayImage) -> Result<String, GroundingError>;
}

/// Limits and switches of [`OcrGrounding`].
#[derive(Debug, Clone)]
pub struct OcrOptions {
    /// Image preparation.
    pub preprocess: Preprocess,
    /// Lowest word confidence kept (0-100).
    pub min_confidence: f32,
    /// A line is split where the gap between two words exceeds this many line heights.
    pub gap_factor: f32,
    /// Characters of text kept per element.
    pub max_text_chars: usize,
    /// Elements kept per window.
    pub max_elements: usize,
    /// Longest a call may take.
    pub timeout: Duration,
    /// Screenshots whose results are cached.
    pub cache_entries: usize,
}

impl Default for OcrOptions {
    fn default() -> Self {
        Self {
            preprocess: Preprocess::default(),
            min_confidence: 40.0,
            gap_factor: 0.6,
            max_text_chars: 80,
            max_elements: 200,
            timeout: Duration::from_secs(5),
            cache_entries: 16,
        }
    }
}

type CacheKey = [u8; 32];

/// Grounding results of the last few screenshots (most recent first), so an unchanged window is not
/// grounded again.
pub(crate) struct Cache {
    entries: usize,
    list: Mutex<VecDeque<(CacheKey, Vec<TargetInfo>)>>,
}

impl Cache {
    pub(crate) fn new(entries: usize) -> Self {
        Self {
            entries,
            list: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn get(&self, key: &CacheKey) -> Option<Vec<TargetInfo>> {
        let list = self.list.lock().ok()?;
        list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// The grounding of `shot`: the cached answer, or `compute`'s (then cached), inside one `grounding`
    /// span naming `engine` with whether the cache answered, the elements found and the time taken.
    pub(crate) async fn detect_cached(
        &self,
        engine: &str,
        shot: &Screenshot,
        compute: impl std::future::Future<Output = Result<Vec<TargetInfo>, GroundingError>>,
    ) -> Result<Vec<TargetInfo>, GroundingError> {
        let span = tracing::info_span!(
            "grounding",
            engine = %engine,
            elements = tracing::field::Empty,
            cached = tracing::field::Empty,
            rows = tracing::field::Empty,
            ms = tracing::field::Empty,
        );
        async {
            let started = Instant::now();
            let key = cache_key(shot);
            let (found, cached) = match self.get(&key) {
                Some(found) => (found, true),
                None => {
                    let found = compute.await?;
                    self.put(key, &found);
                    (found, false)
                }
            };
            let span = tracing::Span::current();
            span.record("cached", cached);
            span.record("elements", found.len());
            span.record("ms", started.elapsed().as_secs_f64() * 1000.0);
            Ok(found)
        }
        .instrument(span)
        .await
    }

    pub(crate) fn put(&self, key: CacheKey, found: &[TargetInfo]) {
        if self.entries == 0 {
            return;
        }
        if let Ok(mut list) = self.list.lock() {
            list.retain(|(k, _)| *k != key);
            list.push_front((key, found.to_vec()));
            list.truncate(self.entries);
        }
    }
}

/// The last grounded pixels of a window (by its place and size) and what was found in them, so a
/// changed screenshot is grounded again only where it changed.
struct Remembered {
    place: (i32, i32, u64),
    pixels: RgbaImage,
    elements: Vec<Element>,
}

/// Windows whose last pixels are remembered for grounding only what changed (each costs its RGBA size).
const REMEMBERED_WINDOWS: usize = 4;

/// A change covering more than this share of the window's area grounds the whole window again.
const REGION_MAX_SHARE: f64 = 0.4;

/// Pixels of context kept around a changed region (a text line and a half at common sizes).
const REGION_MARGIN: u32 = 24;

/// Pixels kept around a remembered element the read region is widened to (text on the region's very
/// edge is misread).
const ELEMENT_PAD: u32 = 16;

/// OCR grounding over an [`OcrEngine`]: see the module doc.
pub struct OcrGrounding {
    engine: Arc<dyn OcrEngine>,
    options: OcrOptions,
    cache: Cache,
    windows: Arc<Mutex<VecDeque<Remembered>>>,
}

impl std::fmt::Debug for OcrGrounding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcrGrounding")
            .field("engine", &self.engine.name())
            .field("options", &self.options)
            .finish()
    }
}

impl OcrGrounding {
    /// Grounding with `engine`.
    pub fn new(engine: Arc<dyn OcrEngine>, options: OcrOptions) -> Self {
        Self {
            engine,
            cache: Cache::new(options.cache_entries),
            options,
            windows: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// The engine's name.
    pub fn engine_name(&self) -> String {
        self.engine.name()
    }

    /// Text elements of `img` in its own pixels (no cache, no timeout; blocking).
    pub fn elements(&self, img: &RgbaImage) -> Result<Vec<Element>, GroundingError> {
        elements_with(self.engine.as_ref(), &self.options, img)
    }
}

fn elements_with(
    engine: &dyn OcrEngine,
    options: &OcrOptions,
    img: &RgbaImage,
) -> Result<Vec<Element>, GroundingError> {
    elements_at(engine, options, img, (0, 0))
}

/// Elements of `img` (a crop whose top-left is `offset` in the window's pixels), in window pixels.
fn elements_at(
    engine: &dyn OcrEngine,
    options: &OcrOptions,
    img: &RgbaImage,
    offset: (i32, i32),
) -> Result<Vec<Element>, GroundingError> {
    let prepared = ocr::prepare(img, options.preprocess)?;
    let tsv = engine.recognise(&prepared)?;
    let words = ocr::parse_tsv(
        &tsv,
        options.preprocess.upscale.clamp(1, 4),
        offset,
        options.min_confidence,
    );
    let mut elements: Vec<Element> = ocr::group(&words, options.gap_factor)
        .into_iter()
        .filter_map(|mut e| {
            e.text = ocr::sanitise(&e.text, options.max_text_chars);
            // A lone punctuation mark or a one-letter fragment is noise (icons, borders), not a control.
            // Window-manager icons read as "a", "o", "xXx": a single letter, or a short text read with
            // little confidence, is noise; a single digit (a calculator key) is kept when read surely.
            let chars = e.text.chars().count();
            let keep = match chars {
                0 => false,
                1 => e.text.chars().all(|c| c.is_ascii_digit()) && e.confidence >= 90.0,
                2..=3 => e.confidence >= 80.0,
                _ => true,
            };
            keep.then_some(e)
        })
        .collect();
    elements.truncate(options.max_elements);
    Ok(elements)
}

/// The box `[left, top, right, bottom)` holding every pixel where `a` and `b` (same size) differ, if any.
fn changed_box(a: &RgbaImage, b: &RgbaImage) -> Option<[u32; 4]> {
    let row = (a.width() * 4) as usize;
    let (ra, rb) = (a.as_raw(), b.as_raw());
    let line = |y: u32| {
        let at = y as usize * row;
        (&ra[at..at + row], &rb[at..at + row])
    };
    let differs = |y: u32| {
        let (la, lb) = line(y);
        la != lb
    };
    let top = (0..a.height()).find(|&y| differs(y))?;
    let bottom = (top..a.height()).rev().find(|&y| differs(y))? + 1;
    let (mut left, mut right) = (a.width(), 0);
    for y in top..bottom {
        let (la, lb) = line(y);
        let pixels = || la.chunks_exact(4).zip(lb.chunks_exact(4));
        if let Some(x) = pixels().position(|(p, q)| p != q) {
            left = left.min(x as u32);
            let last = pixels().rposition(|(p, q)| p != q).unwrap_or(x);
            right = right.max(last as u32 + 1);
        }
    }
    Some([left, top, right, bottom])
}

/// Grounds `img`, reusing what was found in `before` (the same window's previous pixels) outside the
/// box that changed: only that box (widened by a margin and to the whole of every element it cuts) is
/// read again. Also returns how many rows were read. `None` when the change is too large for that to pay
/// (ground the whole window).
fn regrounded(
    engine: &dyn OcrEngine,
    options: &OcrOptions,
    before: &Remembered,
    img: &RgbaImage,
) -> Option<Result<(Vec<Element>, u32), GroundingError>> {
    let Some(changed) = changed_box(&before.pixels, img) else {
        return Some(Ok((before.elements.clone(), 0)));
    };
    let (w, h) = img.dimensions();
    let area = |b: [u32; 4]| f64::from(b[2] - b[0]) * f64::from(b[3] - b[1]);
    if area(changed) > area([0, 0, w, h]) * REGION_MAX_SHARE {
        return None;
    }
    let mut region = [
        changed[0].saturating_sub(REGION_MARGIN),
        changed[1].saturating_sub(REGION_MARGIN),
        (changed[2] + REGION_MARGIN).min(w),
        (changed[3] + REGION_MARGIN).min(h),
    ];
    // Widen to every remembered element the region cuts, so none is read in part (widening can cut
    // more: repeat until it holds still).
    let cuts = |e: &Element, r: [u32; 4]| {
        e.bbox[0] < r[2] as i32
            && e.bbox[2] > r[0] as i32
            && e.bbox[1] < r[3] as i32
            && e.bbox[3] > r[1] as i32
    };
    let clamp = |v: i32, max: u32| (v.max(0) as u32).min(max);
    loop {
        let mut wider = region;
        for e in before.elements.iter().filter(|e| cuts(e, region)) {
            let pad = ELEMENT_PAD as i32;
            wider[0] = wider[0].min(clamp(e.bbox[0] - pad, w));
            wider[1] = wider[1].min(clamp(e.bbox[1] - pad, h));
            wider[2] = wider[2].max(clamp(e.bbox[2] + pad, w));
            wider[3] = wider[3].max(clamp(e.bbox[3] + pad, h));
        }
        if wider == region {
            break;
        }
        region = wider;
    }
    let [left, top, right, bottom] = region;
    let part = image::imageops::crop_imm(img, left, top, right - left, bottom - top).to_image();
    let found = match elements_at(engine, options, &part, (left as i32, top as i32)) {
        Ok(found) => found,
        Err(e) => return Some(Err(e)),
    };
    let mut elements: Vec<Element> = before
        .elements
        .iter()
        .filter(|e| !cuts(e, region))
        .cloned()
        .chain(found)
        .collect();
    elements.sort_by_key(|e| (e.bbox[1], e.bbox[0]));
    elements.truncate(options.max_elements);
    Some(Ok((elements, bottom - top)))
}

pub(crate) fn cache_key(shot: &Screenshot) -> CacheKey {
    let mut h = Sha256::new();
    h.update(shot.origin_x.to_le_bytes());
    h.update(shot.origin_y.to_le_bytes());
    h.update(shot.scale.to_le_bytes());
    h.update(&shot.bytes);
    h.finalize().into()
}

/// A grounded element as a control: screen rectangle, the text as its name, type [`GROUNDED_TYPE`].
pub fn to_target(e: &Element, shot: &Screenshot) -> TargetInfo {
    let s = if shot.scale > 0.0 { shot.scale } else { 1.0 };
    let at = |v: i32, o: i32| (f64::from(o) + f64::from(v) * s).round() as i32;
    let mut extra = Map::new();
    extra.insert(
        "confidence".into(),
        json!((e.confidence * 10.0).round() / 10.0),
    );
    TargetInfo {
        label: String::new(),
        id: String::new(),
        name: e.text.clone(),
        kind: TargetKind::Control,
        control_type: GROUNDED_TYPE.into(),
        rect: Some(Rect::new(
            at(e.bbox[0], shot.origin_x),
            at(e.bbox[1], shot.origin_y),
            at(e.bbox[2], shot.origin_x),
            at(e.bbox[3], shot.origin_y),
        )),
        enabled: true,
        source: ControlSource::Grounding,
        extra,
    }
}

#[async_trait]
impl GroundingSource for OcrGrounding {
    async fn detect(&self, shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError> {
        let name = self.engine.name();
        self.cache
            .detect_cached(&name, shot, self.ground(shot))
            .await
    }
}

impl OcrGrounding {
    /// Grounds `shot` again: only the changed rows when this window's last pixels are remembered.
    async fn ground(&self, shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError> {
        let engine = self.engine.clone();
        let options = self.options.clone();
        let shot_owned = shot.clone();
        let windows = self.windows.clone();
        let work = tokio::task::spawn_blocking(move || {
            let img = shot_owned
                .decode()
                .map_err(|e| GroundingError::Image(e.to_string()))?;
            let place = (
                shot_owned.origin_x,
                shot_owned.origin_y,
                shot_owned.scale.to_bits(),
            );
            let before = windows.lock().ok().and_then(|mut w| {
                let at = w
                    .iter()
                    .position(|r| r.place == place && r.pixels.dimensions() == img.dimensions())?;
                w.remove(at)
            });
            let (elements, rows) = match before
                .as_ref()
                .and_then(|b| regrounded(engine.as_ref(), &options, b, &img))
            {
                Some(r) => r?,
                None => (
                    elements_with(engine.as_ref(), &options, &img)?,
                    img.height(),
                ),
            };
            if let Ok(mut w) = windows.lock() {
                w.push_front(Remembered {
                    place,
                    pixels: img,
                    elements: elements.clone(),
                });
                w.truncate(REMEMBERED_WINDOWS);
            }
            Ok::<_, GroundingError>((elements, rows))
        });
        let (elements, rows) = match tokio::time::timeout(self.options.timeout, work).await {
            Err(_) => return Err(GroundingError::Timeout(self.options.timeout)),
            Ok(Err(e)) => {
                return Err(GroundingError::Engine(format!(
                    "the OCR worker stopped: {e}"
                )));
            }
            Ok(Ok(r)) => r?,
        };
        tracing::Span::current().record("rows", rows);
        Ok(elements.iter().map(|e| to_target(e, shot)).collect())
    }
}

/// The built-in engine as configured (`--grounding-tessdata`, `--grounding-lang`), or why it cannot run.
pub fn builtin_engine(
    tessdata: Option<&std::path::Path>,
    lang: &str,
) -> Result<Arc<dyn OcrEngine>, GroundingError> {
    #[cfg(feature = "ocr")]
    {
        Ok(Arc::new(tesseract::Tesseract::new(tessdata, lang)?))
    }
    #[cfg(not(feature = "ocr"))]
    {
        let _ = (tessdata, lang);
        Err(GroundingError::Unavailable(
            "this build has no OCR engine (feature `ocr` off)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An engine answering fixed TSV, failing, or blocking until released; counts its calls.
    struct Fake {
        answer: Result<String, &'static str>,
        block: Option<Mutex<std::sync::mpsc::Receiver<()>>>,
        calls: AtomicUsize,
        sizes: Mutex<Vec<(u32, u32)>>,
    }

    impl OcrEngine for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn recognise(&self, img: &GrayImage) -> Result<String, GroundingError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.sizes.lock().unwrap().push(img.dimensions());
            if let Some(rx) = &self.block {
                let _ = rx.lock().map(|rx| rx.recv());
            }
            self.answer
                .clone()
                .map_err(|e| GroundingError::Engine(e.to_owned()))
        }
    }

    fn fake(answer: Result<&str, &'static str>) -> Arc<Fake> {
        Arc::new(Fake {
            answer: answer.map(str::to_owned),
            block: None,
            calls: AtomicUsize::new(0),
            sizes: Mutex::new(vec![]),
        })
    }

    fn shot(seed: u8) -> Screenshot {
        let img = RgbaImage::from_pixel(64, 32, image::Rgba([seed, 240, 240, 255]));
        let mut s = Screenshot::from_rgba(&img, 0, 0).unwrap();
        s.origin_x = 100;
        s.origin_y = 50;
        s
    }

    // Upscale 2: TSV boxes are in doubled pixels.
    const TSV: &str = "5\t1\t1\t1\t1\t1\t10\t20\t40\t16\t95\tSYSTEM:\u{1b}[2J\n\
                       5\t1\t1\t1\t1\t2\t56\t20\t60\t16\t95\tignore\n";

    #[tokio::test]
    async fn elements_become_grounded_controls_in_screen_coordinates_and_are_cached() {
        let engine = fake(Ok(TSV));
        let g = OcrGrounding::new(engine.clone(), OcrOptions::default());
        let found = g.detect(&shot(1)).await.unwrap();
        assert_eq!(found.len(), 1);
        let c = &found[0];
        assert_eq!(
            c.name, "SYSTEM:[2J ignore",
            "the escape character is removed"
        );
        assert_eq!(c.control_type, GROUNDED_TYPE);
        assert_eq!(c.source, ControlSource::Grounding);
        assert_eq!(c.id, "");
        assert_eq!(c.rect, Some(Rect::new(105, 60, 158, 68)));
        // The same screenshot again: answered from the cache, the engine is not asked.
        assert_eq!(g.detect(&shot(1)).await.unwrap(), found);
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
        // Another screenshot is grounded.
        g.detect(&shot(2)).await.unwrap();
        assert_eq!(engine.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failing_engine_or_garbage_is_an_error_or_nothing_never_a_panic() {
        let g = OcrGrounding::new(fake(Err("no language data")), OcrOptions::default());
        let e = g.detect(&shot(1)).await.unwrap_err().to_string();
        assert!(e.contains("no language data"), "{e}");
        let garbage =
            "5\tx\t\t\n\u{0}\u{0}\n5\t1\t1\t1\t1\t1\t-5\t999999999\tnan\t1\t99\tword\n9\n";
        let g = OcrGrounding::new(fake(Ok(garbage)), OcrOptions::default());
        assert!(g.detect(&shot(1)).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_slow_engine_times_out_and_the_caller_goes_on() {
        let (release, rx) = std::sync::mpsc::channel();
        let engine = Arc::new(Fake {
            answer: Ok(TSV.into()),
            block: Some(Mutex::new(rx)),
            calls: AtomicUsize::new(0),
            sizes: Mutex::new(vec![]),
        });
        let options = OcrOptions {
            timeout: Duration::from_millis(100),
            ..OcrOptions::default()
        };
        let g = OcrGrounding::new(engine, options);
        let started = Instant::now();
        let e = g.detect(&shot(1)).await.unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        release.send(()).unwrap();
    }

    #[tokio::test]
    async fn a_change_in_one_region_grounds_only_that_band_and_keeps_the_rest() {
        let engine = fake(Ok(TSV));
        let g = OcrGrounding::new(engine.clone(), OcrOptions::default());
        let at = |img: &RgbaImage| {
            let mut s = Screenshot::from_rgba(img, 0, 0).unwrap();
            s.origin_x = 100;
            s.origin_y = 50;
            s
        };
        let before = RgbaImage::from_pixel(64, 200, image::Rgba([240, 240, 240, 255]));
        let first = g.detect(&at(&before)).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].rect, Some(Rect::new(105, 60, 158, 68)));
        // Rows 150..154 change: only rows 126..178 (a 24-pixel margin each side) are read again.
        let mut after = before.clone();
        for y in 150..154 {
            for x in 0..64 {
                after.put_pixel(x, y, image::Rgba([0, 0, 0, 255]));
            }
        }
        let second = g.detect(&at(&after)).await.unwrap();
        assert_eq!(
            *engine.sizes.lock().unwrap(),
            vec![(128, 400), (128, 104)],
            "the whole window (upscaled ×2), then the changed band"
        );
        assert_eq!(second.len(), 2, "{second:#?}");
        assert_eq!(second[0].rect, first[0].rect, "kept from before");
        // The fake reads the same words in the band: they land at the band's offset.
        assert_eq!(second[1].rect, Some(Rect::new(105, 186, 158, 194)));
        // The same pixels again (another encoding is not needed: the exact cache answers).
        assert_eq!(g.detect(&at(&after)).await.unwrap(), second);
        assert_eq!(engine.calls.load(Ordering::SeqCst), 2);
        // A change over most of the window grounds all of it again.
        let most = RgbaImage::from_pixel(64, 200, image::Rgba([10, 240, 240, 255]));
        g.detect(&at(&most)).await.unwrap();
        assert_eq!(engine.sizes.lock().unwrap().last(), Some(&(128, 400)));
    }

    #[tokio::test]
    async fn a_change_in_a_corner_reads_only_that_box_widened_to_the_element_it_cuts() {
        // The fake reads one word at image pixels (5..25, 10..18) of whatever it is given.
        let engine = fake(Ok("5\t1\t1\t1\t1\t1\t10\t20\t40\t16\t95\tOK\n"));
        let g = OcrGrounding::new(engine.clone(), OcrOptions::default());
        let at = |img: &RgbaImage| Screenshot::from_rgba(img, 0, 0).unwrap();
        let before = RgbaImage::from_pixel(400, 300, image::Rgba([240, 240, 240, 255]));
        let first = g.detect(&at(&before)).await.unwrap();
        assert_eq!(first[0].rect, Some(Rect::new(5, 10, 25, 18)));
        // A 10×10 change at (300, 200): read (276..334, 176..234) only, a 24-pixel margin around it.
        let mut after = before.clone();
        for y in 200..210 {
            for x in 300..310 {
                after.put_pixel(x, y, image::Rgba([0, 0, 0, 255]));
            }
        }
        let second = g.detect(&at(&after)).await.unwrap();
        assert_eq!(engine.sizes.lock().unwrap()[1], (116, 116));
        assert_eq!(second.len(), 2, "{second:#?}");
        assert_eq!(second[0].rect, first[0].rect, "kept from before");
        assert_eq!(second[1].rect, Some(Rect::new(281, 186, 301, 194)));
        // A change touching the remembered word at (5..25, 10..18): the read box is widened to hold all
        // of it, and the word is read again instead of kept.
        let mut third = after.clone();
        third.put_pixel(30, 40, image::Rgba([0, 0, 0, 255]));
        let found = g.detect(&at(&third)).await.unwrap();
        assert_eq!(
            engine.sizes.lock().unwrap()[2],
            (110, 130),
            "(6..55, 16..65) widened to the word with 16 pixels around it: (0..55, 0..65), upscaled"
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(
            found[0].rect,
            Some(Rect::new(5, 10, 25, 18)),
            "read again at the box's offset"
        );
    }
}
