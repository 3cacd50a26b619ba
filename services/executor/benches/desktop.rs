//! Executor benchmark on a private Xvfb 1920×1080 desktop with gtk3-widget-factory:
//! capture + PNG encode, full controls listing, click latency (p50/p90 over many runs), and click /
//! set-text / controls from request to confirmed effect beside an in-process pyatspi baseline
//! (`benches/pyatspi_baseline.py`, Debian's python3-pyatspi) run on the same desktop at the same time.
//!
//! Run: `cargo bench -p ufo-executor --bench desktop`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_os = "linux")]
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use ufo_executor::backend::{Backend, TreeLimits};
    use ufo_executor::encode::{Format, PngCompression, encode};
    use ufo_executor::executor::{BatchOptions, CommandSpec, Executor, Limits, Status};
    use ufo_executor::geometry::Rect;
    use ufo_executor::testing::Desktop;
    use ufo_executor::tree::filter_controls;

    const RUNS: usize = 60;
    let mut desk = Desktop::start(1920, 1080).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (pid, window) = desk
        .launch(backend.as_ref(), "gtk3-widget-factory", &[])
        .await
        .unwrap();
    let dynb: Arc<dyn Backend> = backend.clone();
    let exec = Executor::new(dynb.clone(), Limits::default(), Vec::new());
    let opts = BatchOptions {
        deadline: Duration::from_secs(10),
        format: Format::PNG,
    };
    let one = |tool: &str, params: Value| {
        let cmd = CommandSpec {
            tool: tool.into(),
            params,
            call_id: String::new(),
        };
        let exec = &exec;
        async move {
            let o = exec.execute(vec![cmd], opts).await.remove(0);
            assert_eq!(o.status, Status::Success, "{}", o.error);
            o
        }
    };
    let apps = one("get_desktop_app_target_info", json!({}))
        .await
        .output
        .result;
    let id = apps
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["handle"] == json!(window.handle))
        .unwrap()["id"]
        .clone();
    one("select_application_window", json!({"id": id})).await;

    let mut rows: Vec<(String, Vec<Duration>, String)> = Vec::new();
    let mut time = |name: &str, samples: Vec<Duration>, note: String| {
        rows.push((name.to_owned(), samples, note))
    };

    let screen = Rect::from_xywh(0, 0, 1920, 1080);
    let mut raw = Vec::new();
    // The default (zlib level 1) and fdeflate's fast output, encoded alternately from the same capture.
    let compressions = [PngCompression::DEFAULT, PngCompression::Fast];
    let mut enc = compressions.map(|_| Vec::new());
    let mut size = [0; 2];
    for _ in 0..RUNS {
        let t = Instant::now();
        let cap = dynb.capture(screen).await.unwrap();
        raw.push(t.elapsed());
        for (i, compression) in compressions.into_iter().enumerate() {
            let t = Instant::now();
            size[i] = encode(&cap, Format::Png(compression)).unwrap().len();
            enc[i].push(t.elapsed());
        }
    }
    time(
        "capture 1920x1080 (X11 MIT-SHM, to RGB)",
        raw,
        String::new(),
    );
    for ((compression, samples), size) in compressions.into_iter().zip(enc).zip(size) {
        time(
            &format!("PNG encode (--png-compression {compression})"),
            samples,
            format!("{} KiB", size / 1024),
        );
    }
    let mut full = Vec::new();
    for _ in 0..RUNS {
        full.push(one("capture_desktop_screenshot", json!({})).await.duration);
    }
    time(
        "capture_desktop_screenshot (capture + PNG)",
        full,
        String::new(),
    );

    let limits = TreeLimits {
        max_nodes: 5000,
        max_depth: 64,
        deadline: Instant::now() + Duration::from_secs(60),
        max_value_chars: 256,
    };
    let nodes = dynb
        .control_tree(&window, &limits)
        .await
        .unwrap()
        .nodes
        .len();
    let mut walk = Vec::new();
    let mut listed = 0;
    for _ in 0..RUNS {
        let o = one("get_app_window_controls_target_info", json!({})).await;
        listed = o.output.result.as_array().unwrap().len();
        walk.push(o.duration);
    }
    time(
        "get_app_window_controls_target_info",
        walk,
        format!("{nodes} nodes walked, {listed} listed"),
    );

    let controls = one("get_app_window_controls_target_info", json!({}))
        .await
        .output
        .result;
    let cb = controls
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "CheckBox" && c["enabled"] == true)
        .unwrap()["id"]
        .clone();
    let mut clicks = Vec::new();
    let mut method = String::new();
    for _ in 0..RUNS {
        let o = one("click_input", json!({"id": cb})).await;
        method = o.output.result["method"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        clicks.push(o.duration);
    }
    time("click_input (check box)", clicks, format!("via {method}"));
    // Request to confirmed effect, observed through AT-SPI as the pyatspi baseline observes it.
    let tree = dynb
        .control_tree(
            &window,
            &TreeLimits {
                max_nodes: 5000,
                max_depth: 64,
                deadline: Instant::now() + Duration::from_secs(60),
                max_value_chars: 256,
            },
        )
        .await
        .unwrap();
    let listed_nodes = filter_controls(&tree, &Limits::default().control_types);
    let node =
        |id: &Value| listed_nodes[id.as_str().unwrap().parse::<usize>().unwrap() - 1].clone();
    let box_node = node(&cb);
    let mut seen = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let before = backend.a11y().is_checked(&box_node.handle).await.unwrap();
        one("click_input", json!({"id": cb})).await;
        while backend.a11y().is_checked(&box_node.handle).await.unwrap() == before {}
        seen.push(t.elapsed());
    }
    time(
        "click_input until the check box is seen toggled",
        seen,
        String::new(),
    );
    let edit = controls
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Edit" && c["enabled"] == true)
        .unwrap()["id"]
        .clone();
    let edit_node = node(&edit);
    let mut set = Vec::new();
    for i in 0..RUNS {
        let want = format!("{i:020}");
        let t = Instant::now();
        one("set_edit_text", json!({"id": edit, "text": want})).await;
        while backend
            .a11y()
            .read_text(&edit_node.handle, "")
            .await
            .unwrap()
            != want
        {}
        set.push(t.elapsed());
    }
    time("set_edit_text 20 chars until read back", set, String::new());
    // Accessibility calls per action (each reply the application sends is one call).
    let mut calls = Vec::new();
    for (tool, params) in [
        ("click_input", json!({"id": cb})),
        ("set_edit_text", json!({"id": edit, "text": "x".repeat(20)})),
    ] {
        let (_, n) = backend
            .a11y()
            .calls_during(pid, one(tool, params))
            .await
            .unwrap();
        calls.push(format!("{tool} {n}"));
    }

    let mut coords = Vec::new();
    for _ in 0..RUNS {
        coords.push(
            one("click_on_coordinates", json!({"x": 0.5, "y": 0.01}))
                .await
                .duration,
        );
    }
    time("click_on_coordinates (XTEST)", coords, String::new());

    // The pyatspi baseline, same desktop, same application.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pyatspi_baseline.py");
    match std::process::Command::new("/usr/bin/python3")
        .args([script, &pid.to_string(), &RUNS.to_string()])
        .env_remove("NO_AT_BRIDGE")
        .envs(desk.env())
        .output()
    {
        Ok(out) if out.status.success() => {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            for (key, name) in [
                ("controls", "pyatspi: live walk of the shown controls"),
                (
                    "click",
                    "pyatspi: doAction until the check box is seen toggled",
                ),
                (
                    "set_text",
                    "pyatspi: setTextContents 20 chars until read back",
                ),
            ] {
                let samples = v[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|ms| Duration::from_secs_f64(ms.as_f64().unwrap() / 1000.0))
                    .collect();
                time(name, samples, "in-process Python baseline".into());
            }
        }
        Ok(out) => eprintln!(
            "pyatspi baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("pyatspi baseline not run (install python3-pyatspi): {e}"),
    }

    println!("accessibility calls per action: {}", calls.join(", "));
    println!("| operation | p50 | p90 | notes |\n| --- | --- | --- | --- |");
    for (name, mut s, note) in rows {
        s.sort();
        let p = |q: f64| s[((s.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
        println!("| {name} | {:.2} ms | {:.2} ms | {note} |", p(0.5), p(0.9));
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the desktop benchmark runs on Linux (Xvfb + AT-SPI) only");
}
