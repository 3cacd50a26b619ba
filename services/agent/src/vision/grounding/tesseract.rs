//! Tesseract 5 in-process (Debian `libtesseract-dev`, through `leptess`): the built-in [`OcrEngine`].
//! One engine is initialised once (loading the language model costs ~100 ms) and reused; calls take
//! turns on it. Page segmentation "sparse text" (11) suits screens: scattered labels, not paragraphs.

use std::ffi::CString;
use std::path::Path;
use std::sync::Mutex;

use image::GrayImage;
use leptess::tesseract::TessApi;

use super::{GroundingError, OcrEngine};

/// Resolution told to Tesseract: screen text at 96 dpi, upscaled ×2, reads as about 192 dpi.
const SOURCE_DPI: i32 = 192;

/// The Tesseract engine.
pub struct Tesseract {
    api: Mutex<TessApi>,
    lang: String,
}

impl std::fmt::Debug for Tesseract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tesseract")
            .field("lang", &self.lang)
            .finish()
    }
}

impl Tesseract {
    /// Initialises Tesseract with language(s) `lang` from `tessdata` (default: the system's).
    pub fn new(tessdata: Option<&Path>, lang: &str) -> Result<Self, GroundingError> {
        let bad = |what: &str| GroundingError::Unavailable(format!("{what} contains a NUL byte"));
        if lang.contains('\0') || lang.is_empty() {
            return Err(bad("the language"));
        }
        let data = match tessdata {
            Some(p) => {
                let s = p.to_str().ok_or_else(|| {
                    GroundingError::Unavailable("the tessdata path is not UTF-8".into())
                })?;
                if s.contains('\0') {
                    return Err(bad("the tessdata path"));
                }
                Some(s.to_owned())
            }
            None => None,
        };
        let mut api = TessApi::new(data.as_deref(), lang).map_err(|e| {
            GroundingError::Unavailable(format!(
                "Tesseract cannot load language `{lang}` ({e}); install tesseract-ocr-{lang} or set \
                 --grounding-tessdata"
            ))
        })?;
        for (k, v) in [
            ("tessedit_pageseg_mode", "11"),
            // Screens have no dictionary words to prefer: UI strings, names, numbers.
            ("load_system_dawg", "0"),
            ("load_freq_dawg", "0"),
        ] {
            if let (Ok(k), Ok(v)) = (CString::new(k), CString::new(v)) {
                // An unknown variable only costs a warning; these are all known to Tesseract 5.
                let _ = api.raw.set_variable(&k, &v);
            }
        }
        Ok(Self {
            api: Mutex::new(api),
            lang: lang.to_owned(),
        })
    }
}

impl OcrEngine for Tesseract {
    fn name(&self) -> String {
        format!("tesseract ({})", self.lang)
    }

    fn recognise(&self, img: &GrayImage) -> Result<String, GroundingError> {
        let (w, h) = img.dimensions();
        let (Ok(wi), Ok(hi)) = (i32::try_from(w), i32::try_from(h)) else {
            return Err(GroundingError::Image("the image is too large".into()));
        };
        if w == 0 || h == 0 {
            return Ok(String::new());
        }
        let mut api = self
            .api
            .lock()
            .map_err(|_| GroundingError::Engine("an earlier OCR call panicked".into()))?;
        api.raw
            .set_image(img.as_raw(), wi, hi, 1, wi)
            .map_err(|e| GroundingError::Engine(format!("cannot hand the image over: {e:?}")))?;
        api.raw.set_source_resolution(SOURCE_DPI);
        let text = api
            .raw
            .get_tsv_text(0)
            .map_err(|e| GroundingError::Engine(format!("recognition failed: {e:?}")))?;
        let c: &std::ffi::CStr = text.as_ref();
        Ok(c.to_string_lossy().into_owned())
    }
}

/// The environment variable libgomp reads, once, when it is loaded with Tesseract (before `main`).
pub const OPENMP_THREAD_LIMIT: &str = "OMP_THREAD_LIMIT";

/// Restarts this program (same arguments, same process id) with OpenMP's thread limit set to `threads`,
/// unless `threads` is 0 or the environment already sets a limit (an operator's choice wins).
///
/// Tesseract runs its recogniser's loops on OpenMP threads (4 per loop, fixed in its code). On a small
/// machine they spin and switch against each other: half of a cold grounding's time was libgomp and the
/// kernel's scheduler (docs/grounding.md). Neither `omp_set_num_threads` (Tesseract names its own count)
/// nor setting the variable after start (libgomp read it before `main`) changes that; only a limit in the
/// environment at load time does, hence the restart. Returns only if there was nothing to do (`None`) or
/// the restart failed (`Some(error)`; the program then goes on with OpenMP's defaults). Call it first
/// thing in `main`, before anything else was started.
#[cfg(unix)]
pub fn limit_openmp_threads(threads: usize) -> Option<std::io::Error> {
    use std::os::unix::process::CommandExt as _;
    if threads == 0 || std::env::var_os(OPENMP_THREAD_LIMIT).is_some() {
        return None;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Some(e),
    };
    Some(
        std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(OPENMP_THREAD_LIMIT, threads.to_string())
            .exec(),
    )
}
