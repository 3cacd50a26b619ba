//! Benchmarks (run with `cargo bench -p ufo-agent --bench agents`):
//! - set-of-marks annotation of a 1920×1080 screenshot with 50 controls (target ≤ 2 ms);
//! - per-step processor overhead of the HostAgent and AppAgent, excluding LLM and executor time: the model
//!   answers instantly in-process and the executor double runs in-process, so what is measured is the
//!   framework, prompt building, parsing, annotation and image work of one step.
//!
//! The AppAgent step runs twice: on a flat grey window (the executor double's screenshot: PNG work is
//! nearly free) and on a synthetic but realistic one (antialiased text, gradients, a noisy photo area),
//! whose PNG decode/encode cost is close to a real desktop's. The image pieces are also timed one by one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ab_glyph::{Font as _, FontArc, PxScale, ScaleFont as _};
use async_trait::async_trait;
use hdrhistogram::Histogram;
use image::{Rgba, RgbaImage};
use serde_json::json;
use ufo_agent::agents::app::AppProcessor;
use ufo_agent::agents::host::HostProcessor;
use ufo_agent::agents::keys::*;
use ufo_agent::agents::target::{Rect, TargetInfo, TargetKind};
use ufo_agent::agents::{AgentServices, AgentSettings, AppAgent, HostAgent};
use ufo_agent::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError, execute_one};
use ufo_agent::llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Usage};
use ufo_agent::memory::Blackboard;
use ufo_agent::processor::{Processor, Values, keys as pkeys};
use ufo_agent::testing::{FakeControl, FakeDesktop, FakeWindow};
use ufo_agent::vision::annotate::{DEFAULT_FONT, Mark};
use ufo_agent::vision::{Marker, Palette, Screenshot};

struct Instant0(&'static str);

#[async_trait]
impl ChatModel for Instant0 {
    fn model_name(&self) -> &str {
        "instant"
    }
    async fn chat(&self, _r: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            text: self.0.to_owned(),
            model: "instant".into(),
            usage: Usage::default(),
            cost: 0.0,
        })
    }
}

fn report(name: &str, h: &Histogram<u64>) {
    println!(
        "{name:<48} n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0
    );
}

fn bench(iterations: usize, mut f: impl FnMut()) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).unwrap();
    for _ in 0..iterations / 10 {
        f();
    }
    for _ in 0..iterations {
        let t = Instant::now();
        f();
        h.record(t.elapsed().as_micros() as u64).unwrap();
    }
    h
}

/// Reports an encoder's p50/p99 with the size of what it produces (`encode` returns the byte count).
fn report_encode(label: &str, encode: impl Fn() -> usize) {
    let kib = encode() / 1024;
    report(
        &format!("{label} ({kib} KiB)"),
        &bench(30, || {
            encode();
        }),
    );
}

fn controls(n: usize, w: i32, h: i32) -> Vec<(String, Rect, &'static str)> {
    let types = ["Button", "Edit", "MenuItem", "CheckBox", "ComboBox", "Text"];
    (0..n)
        .map(|i| {
            let (col, row) = ((i % 10) as i32, (i / 10) as i32);
            let (x, y) = (20 + col * (w / 10), 20 + row * (h / 6));
            (
                format!("{}", i + 1),
                Rect::new(x, y, x + 150, y + 40),
                types[i % types.len()],
            )
        })
        .collect()
}

/// A window screenshot with what makes real ones costly to encode: antialiased text everywhere, a
/// gradient banner, a noisy photo area, panels and icons.
fn realistic(w: u32, h: u32) -> RgbaImage {
    let font = FontArc::try_from_vec(std::fs::read(DEFAULT_FONT).unwrap()).unwrap();
    let mut img = RgbaImage::from_pixel(w, h, Rgba([246, 246, 246, 255]));
    let rect = |img: &mut RgbaImage, x0: u32, y0: u32, x1: u32, y1: u32, c: [u8; 3]| {
        for y in y0..y1.min(h) {
            for x in x0..x1.min(w) {
                img.put_pixel(x, y, Rgba([c[0], c[1], c[2], 255]));
            }
        }
    };
    rect(&mut img, 0, 0, w, 36, [50, 54, 62]);
    rect(&mut img, 0, 36, w, 80, [228, 230, 235]);
    rect(&mut img, 0, 80, 260, h, [236, 238, 242]);
    for i in 0..24 {
        let c = [
            (i * 37 % 200) as u8 + 30,
            (i * 91 % 180) as u8 + 40,
            (i * 53 % 160) as u8 + 60,
        ];
        rect(&mut img, 8 + i * 30, 44, 32 + i * 30, 68, c);
    }
    for y in 96..220 {
        for x in 300..w - 40 {
            let t = (x - 300) as f32 / (w - 340) as f32;
            let u = (y - 96) as f32 / 124.0;
            img.put_pixel(
                x,
                y,
                Rgba([
                    (40.0 + 180.0 * t) as u8,
                    (90.0 + 100.0 * u) as u8,
                    (200.0 - 120.0 * t) as u8,
                    255,
                ]),
            );
        }
    }
    let mut seed = 0x2545_f491_u32;
    for y in 260..480 {
        for x in (w - 380)..(w - 60) {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let n = (seed & 0x3f) as u8;
            img.put_pixel(x, y, Rgba([90 + n, 120 + n / 2, 60 + n, 255]));
        }
    }
    let words = [
        "File",
        "Edit",
        "View",
        "Insert",
        "Format",
        "Tools",
        "Help",
        "document",
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "total",
        "invoice",
        "amount",
        "2026",
        "42.00",
        "settings",
        "apply",
        "cancel",
        "open",
        "save",
        "Quarterly",
        "report",
        "(draft)",
    ];
    let scale = PxScale::from(13.0);
    let scaled = font.as_scaled(scale);
    let draw = |img: &mut RgbaImage, text: &str, x: f32, y: f32, c: [u8; 3]| {
        let mut pen = x;
        for ch in text.chars() {
            let id = scaled.glyph_id(ch);
            if let Some(o) =
                font.outline_glyph(id.with_scale_and_position(scale, ab_glyph::point(pen, y)))
            {
                let b = o.px_bounds();
                o.draw(|gx, gy, a| {
                    let (px, py) = (b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32);
                    if px >= 0 && py >= 0 && (px as u32) < w && (py as u32) < h {
                        let d = img.get_pixel_mut(px as u32, py as u32);
                        for (dst, src) in d.0.iter_mut().zip(c) {
                            *dst = (f32::from(src) * a + f32::from(*dst) * (1.0 - a)) as u8;
                        }
                    }
                });
            }
            pen += scaled.h_advance(id);
        }
    };
    let mut k = 0usize;
    for (line, y) in (100..h - 10).step_by(18).enumerate() {
        let mut x = 300.0;
        let right = if (260..480).contains(&y) {
            w - 400
        } else {
            w - 30
        };
        if !(96..226).contains(&y) {
            while x < right as f32 - 80.0 {
                let word = words[k % words.len()];
                k += 7 + line;
                draw(&mut img, word, x, y as f32, [30, 30, 30]);
                x += scaled.h_advance(scaled.glyph_id('n')) * (word.len() as f32 + 1.0);
            }
        }
        draw(
            &mut img,
            words[line % words.len()],
            16.0,
            y as f32,
            [60, 60, 90],
        );
    }
    draw(
        &mut img,
        "Quarterly report - Editor",
        12.0,
        24.0,
        [240, 240, 240],
    );
    img
}

/// The executor double, with its window screenshot replaced by `shot` (placed where the double put it).
struct WithScreenshot {
    inner: Arc<FakeDesktop>,
    shot: Screenshot,
}

#[async_trait]
impl CommandDispatcher for WithScreenshot {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        let window: Vec<bool> = commands
            .iter()
            .map(|c| c.tool_name == "capture_window_screenshot")
            .collect();
        let mut results = self.inner.execute(commands).await?;
        for (r, is_window) in results.iter_mut().zip(window) {
            if let (true, Some(img)) = (is_window, r.images.first_mut()) {
                *img = Screenshot {
                    origin_x: img.origin_x,
                    origin_y: img.origin_y,
                    ..self.shot.clone()
                };
            }
        }
        Ok(results)
    }

    async fn catalog(
        &self,
    ) -> Result<Arc<ufo_agent::dispatch::tools::ExecutorCatalog>, DispatchError> {
        self.inner.catalog().await
    }
}

fn main() {
    let marker = Arc::new(Marker::load(Path::new(DEFAULT_FONT), 14.0, Palette::default()).unwrap());

    // Set-of-marks on 1920×1080 with 50 controls.
    let mut img = RgbaImage::from_pixel(1920, 1080, Rgba([240, 240, 240, 255]));
    let list = controls(50, 1920, 1080);
    let marks: Vec<Mark<'_>> = list
        .iter()
        .map(|(l, r, t)| Mark {
            label: l,
            rect: *r,
            control_type: t,
        })
        .collect();
    let h = bench(2000, || marker.annotate(&mut img, &marks));
    report("set-of-marks 1920x1080, 50 controls", &h);
    let clean = RgbaImage::from_pixel(1920, 1080, Rgba([240, 240, 240, 255]));
    let h = bench(200, || {
        let mut copy = clean.clone();
        marker.annotate(&mut copy, &marks);
        ufo_agent::vision::screenshot::encode_png(&copy).unwrap();
    });
    report("  + copy + PNG encode (fast), for reference", &h);

    // The image work of an AppAgent step, piece by piece (1600×1000 window), flat and realistic.
    let real_px = realistic(1600, 1000);
    let real_png = Screenshot::from_rgba(&real_px, 0, 0).unwrap();
    for (what, px) in [
        (
            "flat",
            RgbaImage::from_pixel(1600, 1000, Rgba([235, 235, 235, 255])),
        ),
        ("realistic", real_px.clone()),
    ] {
        let png = Screenshot::from_rgba(&px, 0, 0).unwrap();
        report(
            &format!("  {what}: decode PNG 1600x1000"),
            &bench(50, || {
                png.decode().unwrap();
            }),
        );
        report(
            &format!(
                "  {what}: encode PNG 1600x1000 ({} KiB)",
                png.bytes.len() / 1024
            ),
            &bench(50, || {
                ufo_agent::vision::screenshot::encode_png(&px).unwrap();
            }),
        );
        report(
            &format!("  {what}: copy 1600x1000 pixels"),
            &bench(50, || {
                std::hint::black_box(px.clone());
            }),
        );
        report(
            &format!("  {what}: resize 1600x1000 -> 1280x800"),
            &bench(50, || {
                ufo_agent::vision::image_ops::resize_fast(&px, 1280, 800).unwrap();
            }),
        );
        let small = ufo_agent::vision::image_ops::resize_fast(&px, 1280, 800).unwrap();
        let encoded = ufo_agent::vision::screenshot::encode_png(&small).unwrap();
        report(
            &format!(
                "  {what}: encode PNG 1280x800 ({} KiB)",
                encoded.len() / 1024
            ),
            &bench(50, || {
                ufo_agent::vision::screenshot::encode_png(&small).unwrap();
            }),
        );
    }
    // Alternatives measured for the prompt images (realistic 1280×800): other PNG filters, and JPEG.
    let small = ufo_agent::vision::image_ops::resize_fast(&real_px, 1280, 800).unwrap();
    let rgb: Vec<u8> = small
        .pixels()
        .flat_map(|p| [p.0[0], p.0[1], p.0[2]])
        .collect();
    for (name, filter) in [
        ("NoFilter", image::codecs::png::FilterType::NoFilter),
        ("Sub", image::codecs::png::FilterType::Sub),
        ("Up", image::codecs::png::FilterType::Up),
        ("Paeth", image::codecs::png::FilterType::Paeth),
        ("Adaptive", image::codecs::png::FilterType::Adaptive),
    ] {
        for (channels, raw, color) in [
            (
                "rgba",
                small.as_raw().as_slice(),
                image::ExtendedColorType::Rgba8,
            ),
            ("rgb", rgb.as_slice(), image::ExtendedColorType::Rgb8),
        ] {
            let encode = || {
                use image::ImageEncoder as _;
                let mut out = Vec::new();
                image::codecs::png::PngEncoder::new_with_quality(
                    &mut out,
                    image::codecs::png::CompressionType::Fast,
                    filter,
                )
                .write_image(raw, 1280, 800, color)
                .unwrap();
                out.len()
            };
            report_encode(&format!("    png fast {name} {channels} 1280x800"), encode);
        }
    }
    // The png crate's own levels (`image` maps its "fast" to png's Fast; Fastest is not reachable there).
    for (name, compression, filter) in [
        ("fastest Up", png::Compression::Fastest, png::Filter::Up),
        (
            "fastest Paeth",
            png::Compression::Fastest,
            png::Filter::Paeth,
        ),
        ("fast Paeth", png::Compression::Fast, png::Filter::Paeth),
    ] {
        for (channels, raw, color) in [
            ("rgba", small.as_raw().as_slice(), png::ColorType::Rgba),
            ("rgb", rgb.as_slice(), png::ColorType::Rgb),
        ] {
            let encode = || {
                let mut out = Vec::new();
                let mut e = png::Encoder::new(&mut out, 1280, 800);
                e.set_color(color);
                e.set_depth(png::BitDepth::Eight);
                e.set_compression(compression);
                e.set_filter(filter);
                e.write_header().unwrap().write_image_data(raw).unwrap();
                out.len()
            };
            report_encode(&format!("    png {name} {channels} 1280x800"), encode);
        }
    }
    let jpeg = || {
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
            .encode(&rgb, 1280, 800, image::ExtendedColorType::Rgb8)
            .unwrap();
        out.len()
    };
    report_encode("    jpeg (image) q90 1280x800, lossy", jpeg);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings = AgentSettings::default();
    let services = AgentServices {
        host_model: Arc::new(Instant0(
            r#"{"observation": "o", "thought": "t", "status": "CONTINUE", "plan": ["a"], "function": ""}"#,
        )),
        app_model: Arc::new(Instant0(
            r#"{"observation": "o", "thought": "t", "plan": [], "action": {"function": "click_input", "arguments": {"id": "3"}, "status": "CONTINUE"}}"#,
        )),
        marker,
        grounding: None,
        knowledge: None,
        replay: None,
        reuse: None,
        settings: Arc::new(settings),
        uploads: None,
        mcp: None,
    };
    let window_controls: Vec<FakeControl> = controls(50, 1200, 800)
        .into_iter()
        .map(|(l, r, t)| FakeControl::new(&format!("c{l}"), &format!("control {l}"), t, r))
        .collect();
    let desktop = Arc::new(FakeDesktop::new(vec![FakeWindow {
        id: "w1".into(),
        name: "App".into(),
        process: "app".into(),
        rect: Rect::new(0, 0, 1600, 1000),
        controls: window_controls,
    }]));
    let dispatcher: Arc<dyn CommandDispatcher> = desktop.clone();
    rt.block_on(execute_one(
        dispatcher.as_ref(),
        Command::act("select_application_window", json!({"id": "w1"})),
    ))
    .unwrap();
    let make_globals = |dispatcher: Arc<dyn CommandDispatcher>| {
        Arc::new(
            Values::new()
                .with(pkeys::REQUEST, "do it".to_owned())
                .with(pkeys::SESSION_STEP, 1)
                .with(pkeys::ROUND, 1)
                .with(pkeys::ROUND_STEP, 1)
                .with(DISPATCHER, dispatcher)
                .with(BLACKBOARD, Arc::new(Blackboard::default()))
                .with(PREVIOUS_SUBTASKS, vec![])
                .with(SUBTASK, "click".to_owned())
                .with(HOST_MESSAGE, String::new()),
        )
    };
    let globals = make_globals(dispatcher.clone());

    let host = HostAgent::new(services.clone());
    let host_proc = Processor::build(HostProcessor).unwrap();
    let h = bench(500, || {
        rt.block_on(host_proc.process(&host, globals.clone()))
            .unwrap();
    });
    report("HostAgent step (instant LLM + in-process executor)", &h);

    let window = TargetInfo::from_json(
        &json!({"id": "w1", "name": "App", "process_name": "app"}),
        TargetKind::Application,
    )
    .unwrap();
    let mut app = AppAgent::new(window, services);
    // The previous step's selected-control crop is the first prompt image, as in a real round.
    app.last_control = Some(Screenshot::from_rgba(&realistic(150, 40), 20, 20).unwrap());
    let app_proc = Processor::build(AppProcessor).unwrap();
    let realistic_dispatcher: Arc<dyn CommandDispatcher> = Arc::new(WithScreenshot {
        inner: desktop.clone(),
        shot: real_png,
    });
    let realistic_globals = make_globals(realistic_dispatcher);
    for (what, globals) in [("flat", &globals), ("realistic", &realistic_globals)] {
        let h = bench(200, || {
            rt.block_on(app_proc.process(&app, globals.clone()))
                .unwrap();
        });
        report(
            &format!("AppAgent step, 1600x1000 {what} window, 50 controls"),
            &h,
        );
        let outcome = rt
            .block_on(app_proc.process(&app, globals.clone()))
            .unwrap();
        for p in &outcome.result.phases {
            println!(
                "  {:<20} {:>8.3} ms",
                p.phase.as_str(),
                p.execution_time.as_secs_f64() * 1000.0
            );
        }
    }
}
