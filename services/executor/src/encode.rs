//! Screenshot encoding: PNG with fast compression (the default: ~3 ms for a 1920×1080 screen) or JPEG.
//! Images travel as bytes in `Result.images`, never as base64 inside JSON.

use image::ImageEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};

use crate::backend::Capture;

/// How to encode a screenshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PNG, fast compression.
    Png,
    /// JPEG at this quality (1..=100).
    Jpeg(u8),
}

impl Format {
    /// The lowercase name used in result JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Png => "png",
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
    // PNG fast output is about a tenth of the raw size; reserve that to avoid regrowth.
    let mut out = Vec::with_capacity(capture.rgb.len() / 8);
    match format {
        Format::Png => {
            PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive)
                .write_image(
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
    fn round_trips_png_and_jpeg() {
        let (w, h) = (64u32, 32u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let cap = Capture {
            width: w,
            height: h,
            rgb,
            origin: Point { x: 0, y: 0 },
        };
        let png = encode(&cap, Format::Png).unwrap();
        let back = image::load_from_memory(&png).unwrap().to_rgb8();
        assert_eq!(back.as_raw(), &cap.rgb);
        let jpg = encode(&cap, Format::Jpeg(80)).unwrap();
        let img = image::load_from_memory(&jpg).unwrap();
        assert_eq!((img.width(), img.height()), (w, h));
    }
}
