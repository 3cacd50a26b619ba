//! PNG row filter: the executor's encoding of real screenshots (`encode::encode`, `Up` rows at a zlib
//! level) beside the adaptive choice among all five filters it replaced, on a private Xvfb 1920×1080
//! desktop with gtk3-widget-factory: bytes, encode time, and the time the agent then spends decoding
//! (`image::load_from_memory(..).into_rgba8()`, as `vision::Screenshot::decode` does). The two are
//! encoded alternately from the same capture; the table prints medians and new / adaptive ratios.
//!
//! Run: `cargo bench -p ufo-executor --bench png`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use image::ImageEncoder as _;
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    use ufo_executor::backend::{Backend, Capture};
    use ufo_executor::encode::{Format, PngCompression, encode};
    use ufo_executor::geometry::Rect;
    use ufo_executor::testing::Desktop;

    const RUNS: usize = 31;
    fn median(mut v: Vec<Duration>) -> f64 {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    }
    fn adaptive(cap: &Capture, level: u8) -> Vec<u8> {
        let mut out = Vec::new();
        PngEncoder::new_with_quality(
            &mut out,
            CompressionType::Level(level),
            FilterType::Adaptive,
        )
        .write_image(
            &cap.rgb,
            cap.width,
            cap.height,
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
        out
    }

    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let dynb: Arc<dyn Backend> = backend.clone();
    let r = window.rect;
    println!("| capture | level | bytes: adaptive → Up | encode ms | agent decode ms |");
    println!("| --- | --- | --- | --- | --- |");
    for (what, rect) in [
        ("desktop", Rect::from_xywh(0, 0, 1920, 1080)),
        ("gtk3-widget-factory window", r),
    ] {
        // The window has painted once two captures in a row are the same.
        let mut cap = dynb.capture(rect).await.unwrap();
        for _ in 0..200 {
            let next = dynb.capture(rect).await.unwrap();
            if next.rgb == cap.rgb {
                break;
            }
            cap = next;
        }
        for level in [1u8, 2, 6] {
            let (mut enc, mut dec) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
            let mut size = [0; 2];
            for _ in 0..RUNS {
                for (i, enc) in enc.iter_mut().enumerate() {
                    let t = Instant::now();
                    let png = if i == 0 {
                        adaptive(&cap, level)
                    } else {
                        encode(&cap, Format::Png(PngCompression::Level(level))).unwrap()
                    };
                    enc.push(t.elapsed());
                    size[i] = png.len();
                    let t = Instant::now();
                    let px = image::load_from_memory(&png).unwrap().into_rgba8();
                    dec[i].push(t.elapsed());
                    assert_eq!((px.width(), px.height()), (cap.width, cap.height));
                }
            }
            let [e0, e1] = enc.map(median);
            let [d0, d1] = dec.map(median);
            println!(
                "| {what} {}×{} | {level} | {} → {} KiB ({:.2}×) | {e0:.2} → {e1:.2} ({:.2}×) | {d0:.2} → {d1:.2} ({:.2}×) |",
                cap.width,
                cap.height,
                size[0] / 1024,
                size[1] / 1024,
                size[1] as f64 / size[0] as f64,
                e1 / e0,
                d1 / d0,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
