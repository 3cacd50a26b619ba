//! Screenshot encoding: PNG (zlib level 2 by default, or fdeflate's faster and larger output) or JPEG.
//! Images travel as bytes in `Result.images`, never as base64 inside JSON.
//!
//! Level 2 (zlib-rs) is the default because a screenshot is stored with every step and may cross a
//! network: a 1280×800 gtk3-widget-factory window is 100 KB instead of fdeflate's 162 KB, for about
//! 1.8× the encoding time (4.4 vs 2.5 ms; docs/blob-store.md, "Screenshot encoding").
//!
//! A zlib level filters every row with `Up` (the row above subtracted), not the adaptive choice among
//! all five filters: on a 1920×1080 gtk3-widget-factory desktop at level 2, 112 instead of 108 KiB
//! (+4 %), encoded in 0.6–0.7× the time and *decoded by the agent* in 0.5× (4.8 vs 9.9 ms), because
//! undoing `Up` is one vector add per row while `Paeth`, which the adaptive choice picks for most rows,
//! is a serial predictor per byte (docs/benchmark.md, "PNG row filter"). fdeflate's fast output keeps
//! the adaptive choice: without it, its simple compressor makes `Up` rows 2.5× larger.

use image::ImageEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};

use crate::backend::Capture;

/// How hard PNG output is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PngCompression {
    /// fdeflate: the fastest, the largest.
    Fast,
    /// zlib at this level (1..=9): smaller, slower as the level grows.
    Level(u8),
}

impl PngCompression {
    /// The default: zlib level 2.
    pub const DEFAULT: Self = Self::Level(2);
}

impl Default for PngCompression {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl std::str::FromStr for PngCompression {
    type Err = String;

    /// `fast`, or a zlib level `1`..=`9`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(Self::Fast),
            _ => match s.parse::<u8>() {
                Ok(level @ 1..=9) => Ok(Self::Level(level)),
                _ => Err(format!(
                    "{s:?} is not a PNG compression: `fast` or a zlib level 1..=9"
                )),
            },
        }
    }
}

impl std::fmt::Display for PngCompression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fast => f.write_str("fast"),
            Self::Level(level) => write!(f, "{level}"),
        }
    }
}

/// How to encode a screenshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PNG, compressed as given.
    Png(PngCompression),
    /// JPEG at this quality (1..=100).
    Jpeg(u8),
}

impl Format {
    /// PNG at the default compression.
    pub const PNG: Self = Self::Png(PngCompression::DEFAULT);

    /// The lowercase name used in result JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Png(_) => "png",
            Self::Jpeg(_) => "jpeg",
        }
    }
}

/// Encoding failed (only on inconsistent buffers).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the screenshot")]
pub struct EncodeError(#[from] image::ImageError);

/// The row filter used with `compression` (see the module's doc).
fn filter(compression: CompressionType) -> FilterType {
    match compression {
        CompressionType::Fast => FilterType::Adaptive,
        _ => FilterType::Up,
    }
}

/// Encodes `capture` as `format`.
pub fn encode(capture: &Capture, format: Format) -> Result<Vec<u8>, EncodeError> {
    // PNG output is about a tenth of the raw size or less; reserve that to avoid regrowth.
    let mut out = Vec::with_capacity(capture.rgb.len() / 8);
    match format {
        Format::Png(compression) => {
            let compression = match compression {
                PngCompression::Fast => CompressionType::Fast,
                PngCompression::Level(level) => CompressionType::Level(level.clamp(1, 9)),
            };
            PngEncoder::new_with_quality(&mut out, compression, filter(compression)).write_image(
                &capture.rgb,
                capture.width,
                capture.height,
                image::ExtendedColorType::Rgb8,
            )?
        }
        Format::Jpeg(q) => JpegEncoder::new_with_quality(&mut out, q.clamp(1, 100)).write_image(
            &capture.rgb,
            capture.width,
            capture.height,
            image::ExtendedColorType::Rgb8,
        )?,
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Point;

    #[test]
    fn png_compression_parses_fast_and_levels_only() {
        assert_eq!("fast".parse(), Ok(PngCompression::Fast));
        assert_eq!("1".parse(), Ok(PngCompression::Level(1)));
        assert_eq!("9".parse(), Ok(PngCompression::Level(9)));
        for bad in ["0", "10", "", "best", "-1", "1\0"] {
            let err = bad.parse::<PngCompression>().unwrap_err();
            assert!(err.contains("not a PNG compression"), "{bad:?}: {err}");
        }
        assert_eq!(PngCompression::default().to_string(), "2");
    }

    #[test]
    fn round_trips_png_and_jpeg() {
        let (w, h) = (64u32, 32u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let cap = Capture {
            width: w,
            height: h,
            rgb,
            origin: Point { x: 0, y: 0 },
        };
        for compression in [
            PngCompression::Fast,
            PngCompression::Level(1),
            PngCompression::Level(9),
        ] {
            let png = encode(&cap, Format::Png(compression)).unwrap();
            let back = image::load_from_memory(&png).unwrap().to_rgb8();
            assert_eq!(back.as_raw(), &cap.rgb, "{compression}");
        }
        let jpg = encode(&cap, Format::Jpeg(80)).unwrap();
        let img = image::load_from_memory(&jpg).unwrap();
        assert_eq!((img.width(), img.height()), (w, h));
    }

    /// The filter-type byte that starts each row of `png`'s image data (8-bit RGB, not interlaced).
    fn row_filters(png: &[u8], width: usize) -> Vec<u8> {
        use std::io::Read as _;
        let mut idat = Vec::new();
        let mut at = 8;
        while at + 8 <= png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            if &png[at + 4..at + 8] == b"IDAT" {
                idat.extend_from_slice(&png[at + 8..at + 8 + len]);
            }
            at += 12 + len;
        }
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&idat[..])
            .read_to_end(&mut raw)
            .unwrap();
        raw.chunks(1 + width * 3).map(|row| row[0]).collect()
    }

    #[test]
    fn zlib_levels_filter_rows_with_up_and_fast_adapts() {
        // A screen-like image: flat panels, a gradient, and noisy "text" rows.
        let (w, h) = (96u32, 48u32);
        let rgb: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let (x, y) = (i % w, i / w);
                let v = if y % 12 < 3 {
                    ((x * 37 + y * 11) % 256) as u8
                } else {
                    (x * 2) as u8
                };
                [v, v / 2, 200]
            })
            .collect();
        let cap = Capture {
            width: w,
            height: h,
            rgb,
            origin: Point { x: 0, y: 0 },
        };
        for level in [1, 2, 9] {
            let png = encode(&cap, Format::Png(PngCompression::Level(level))).unwrap();
            let filters = row_filters(&png, w as usize);
            assert_eq!(filters.len(), h as usize);
            assert!(
                filters.iter().all(|f| *f == 2),
                "level {level}: {filters:?}"
            );
        }
        let fast = encode(&cap, Format::Png(PngCompression::Fast)).unwrap();
        let filters = row_filters(&fast, w as usize);
        assert!(filters.iter().any(|f| *f != 2), "fast: {filters:?}");
    }
}
