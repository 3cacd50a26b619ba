//! Downscaling images for prompts and cropping the selected control.

use bytes::Bytes;
use image::RgbaImage;

use super::screenshot::{Screenshot, VisionError, encode_png};
use crate::agents::target::Rect;

/// Returns `shot` re-encoded to fit within `max_width`×`max_height` (aspect kept); unchanged when it
/// already fits. Prompts carry the result; the stored artifact keeps full resolution.
pub fn downscale_png(
    shot: &Screenshot,
    max_width: u32,
    max_height: u32,
) -> Result<Screenshot, VisionError> {
    if fitted_size(shot.width, shot.height, max_width, max_height).is_none() {
        return Ok(shot.clone());
    }
    downscale_pixels(&shot.decode()?, shot, max_width, max_height)
}

/// [`downscale_png`] from already decoded pixels of `shot` (saves a decode when the caller has them).
pub fn downscale_pixels(
    img: &RgbaImage,
    shot: &Screenshot,
    max_width: u32,
    max_height: u32,
) -> Result<Screenshot, VisionError> {
    let Some((w, h)) = fitted_size(img.width(), img.height(), max_width, max_height) else {
        return Ok(shot.clone());
    };
    let small = resize_fast(img, w, h)?;
    let factor = f64::from(img.width()) / f64::from(small.width().max(1));
    Ok(Screenshot {
        mime: "image/png".into(),
        bytes: encode_png(&small)?,
        width: small.width(),
        height: small.height(),
        scale: shot.scale * factor,
        ..shot.clone()
    })
}

/// The size `width`×`height` takes when fitted within `max_width`×`max_height` (aspect kept), or `None`
/// when it already fits (prompts then carry the image unchanged, with no resize and no re-encode).
pub fn fitted_size(width: u32, height: u32, max_width: u32, max_height: u32) -> Option<(u32, u32)> {
    if width <= max_width && height <= max_height {
        return None;
    }
    let ratio = f64::min(
        f64::from(max_width) / f64::from(width.max(1)),
        f64::from(max_height) / f64::from(height.max(1)),
    );
    let w = ((f64::from(width) * ratio).round() as u32).max(1);
    let h = ((f64::from(height) * ratio).round() as u32).max(1);
    Some((w, h))
}

/// Resizes with `fast_image_resize`'s SIMD bilinear convolution (an area-aware filter: no aliasing when
/// shrinking, so text stays legible), about a millisecond for 1600×1000 → 1280×800 where a scalar resize
/// took ≈ 6 ms (see the bench).
pub fn resize_fast(img: &RgbaImage, w: u32, h: u32) -> Result<RgbaImage, VisionError> {
    use fast_image_resize as fr;
    let (w, h) = (w.max(1), h.max(1));
    if img.dimensions() == (w, h) {
        return Ok(img.clone());
    }
    let src =
        fr::images::ImageRef::new(img.width(), img.height(), img.as_raw(), fr::PixelType::U8x4)
            .map_err(|e| VisionError::Resize(e.to_string()))?;
    let mut dst = fr::images::Image::new(w, h, fr::PixelType::U8x4);
    // Screenshots are opaque: premultiplying alpha would only cost time.
    let options = fr::ResizeOptions::new()
        .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear))
        .use_alpha(false);
    // `resize_typed` on the one pixel type: `resize` dispatches over all 13 and so compiles every pixel
    // type's SIMD kernels into this crate (a tenth of the agent's machine code; docs/build-time.md).
    let (Some(src), Some(mut view)) = (
        src.typed_image::<fr::pixels::U8x4>(),
        dst.typed_image_mut::<fr::pixels::U8x4>(),
    ) else {
        return Err(VisionError::Resize("not an RGBA8 image".into()));
    };
    fr::Resizer::new()
        .resize_typed(&src, &mut view, &options)
        .map_err(|e| VisionError::Resize(e.to_string()))?;
    drop(view);
    RgbaImage::from_raw(w, h, dst.into_vec())
        .ok_or_else(|| VisionError::Resize("resized buffer has the wrong size".into()))
}

/// Crops the control at screen rectangle `rect` out of `shot` (the "selected control" image).
pub fn crop_control(shot: &Screenshot, rect: Rect) -> Result<Screenshot, VisionError> {
    crop_pixels(&shot.decode()?, shot, rect)
}

/// [`crop_control`] from already decoded pixels of `shot`.
pub fn crop_pixels(
    img: &RgbaImage,
    shot: &Screenshot,
    rect: Rect,
) -> Result<Screenshot, VisionError> {
    let [left, top, right, bottom] = crop_rect(img.dimensions(), shot, rect)?;
    let cropped = image::imageops::crop_imm(img, left, top, right - left, bottom - top).to_image();
    let bytes: Bytes = encode_png(&cropped)?;
    Ok(Screenshot {
        mime: "image/png".into(),
        bytes,
        width: cropped.width(),
        height: cropped.height(),
        origin_x: shot.origin_x + (f64::from(left) * shot.scale).round() as i32,
        origin_y: shot.origin_y + (f64::from(top) * shot.scale).round() as i32,
        scale: shot.scale,
    })
}

/// The pixels of `shot` (an image of `size`) the screen rectangle `rect` covers, clipped to the image:
/// `[left, top, right, bottom]`.
pub fn crop_rect(size: (u32, u32), shot: &Screenshot, rect: Rect) -> Result<[u32; 4], VisionError> {
    let p = shot.to_pixels(rect);
    let clamp = |v: i32, max: u32| v.clamp(0, i32::try_from(max).unwrap_or(i32::MAX)) as u32;
    let (left, right) = (clamp(p.left, size.0), clamp(p.right, size.0));
    let (top, bottom) = (clamp(p.top, size.1), clamp(p.bottom, size.1));
    if right <= left || bottom <= top {
        return Err(VisionError::OutOfBounds);
    }
    Ok([left, top, right, bottom])
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::RgbaImage;

    #[test]
    fn downscales_keeping_aspect_and_crops_in_screen_coordinates() {
        let shot = Screenshot::from_rgba(&RgbaImage::new(400, 200), 100, 50).unwrap();
        let small = downscale_png(&shot, 200, 200).unwrap();
        assert_eq!((small.width, small.height), (200, 100));
        // Colours survive the resize: a half-black, half-white image keeps both halves.
        let mut two = RgbaImage::from_pixel(800, 400, image::Rgba([255, 255, 255, 255]));
        for x in 0..400 {
            for y in 0..400 {
                two.put_pixel(x, y, image::Rgba([0, 0, 0, 255]));
            }
        }
        let r = resize_fast(&two, 300, 150).unwrap();
        assert_eq!(r.dimensions(), (300, 150));
        assert_eq!(r.get_pixel(10, 75).0, [0, 0, 0, 255]);
        assert_eq!(r.get_pixel(290, 75).0, [255, 255, 255, 255]);
        assert!((small.scale - 2.0).abs() < 1e-9);
        let same = downscale_png(&shot, 1000, 1000).unwrap();
        assert_eq!(same.bytes, shot.bytes);

        let crop = crop_control(&shot, Rect::new(110, 60, 150, 80)).unwrap();
        assert_eq!((crop.width, crop.height), (40, 20));
        assert_eq!((crop.origin_x, crop.origin_y), (110, 60));
        assert!(matches!(
            crop_control(&shot, Rect::new(0, 0, 50, 40)),
            Err(VisionError::OutOfBounds)
        ));
    }
}
