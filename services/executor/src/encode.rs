//! Screenshot encoding: PNG (zlib level 2 by default, or fdeflate's faster and larger output) or JPEG.
//! Images travel as bytes in `Result.images`, never as base64 inside JSON.
//!
//! Level 2 (zlib-rs) is the default because a screenshot is stored with every step and may cross a
//! network: a 1280×800 gtk3-widget-factory window is 100 KB instead of fdeflate's 162 KB, for about
//! 1.8× the encoding time (4.4 vs 2.5 ms; docs/blob-store.md, "Screenshot encoding").

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
            PngEncoder::new_with_quality(&mut out, compression, FilterType::Adaptive).write_image(
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
}
