//! The live desktop's benchmark (docs/live.md), ignored by default: the real `ufo-session`,
//! `ufo-executor` (on a private Xvfb desktop) and `ufo-agent` processes, 10 viewers on
//! `GET /v1/tasks/{id}/live`, then:
//! 1. an idle desktop (nothing but the window manager) for 10 s: frames sent after the first;
//! 2. typing into mousepad, 20 characters a second for 10 s: frames a second one viewer gets, bytes per
//!    frame, and the agent process's CPU time (from /proc) over those 10 s.
//!
//! ```text
//! cargo nextest run -p ufo-agent --test it live_bench:: --run-ignored only --no-capture
//! ```
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};
use ufo_executor::backend::Backend;
use ufo_executor::keys::{Key, KeyStroke};
use ufo_executor::testing::Desktop;
use ufo_testkit::Cluster;

const WATCHERS: usize = 10;
const WINDOW: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Seen {
    frames: AtomicU64,
    bytes: AtomicU64,
}

/// Reads one viewer's stream, counting frames and their bytes.
async fn watch(res: reqwest::Response, seen: Arc<Seen>, first: tokio::sync::mpsc::Sender<()>) {
    let mut body = res.bytes_stream();
    let mut buf = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let message: String = buf.drain(..end + 2).collect();
            if !message.lines().any(|l| l == "event: frame") {
                continue;
            }
            let data: String = message
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            let frame: Value = serde_json::from_str(&data).unwrap();
            seen.frames.fetch_add(1, Ordering::Relaxed);
            seen.bytes
                .fetch_add(frame["bytes"].as_u64().unwrap(), Ordering::Relaxed);
            let _ = first.try_send(());
        }
    }
}

/// The process's user + system CPU time.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --run-ignored only --no-capture"]
async fn live_view_benchmark() {
    let mut desk = Desktop::start(1280, 800).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let mut cluster = Cluster::builder()
        .local_executor(desk.env())
        .agent_args(["--runner-slots", "0", "--live-fps", "10"])
        .start()
        .await
        .unwrap();
    let http = ufo_testkit::http_client();
    let task: Value = http
        .post(format!("{}/v1/tasks", cluster.rest_url))
        .bearer_auth(&cluster.api_key)
        .json(&json!({"request": "be watched"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel(WATCHERS);
    let mut viewers = Vec::new();
    for _ in 0..WATCHERS {
        let res = http
            .get(format!("{}/v1/tasks/{id}/live", cluster.rest_url))
            .bearer_auth(&cluster.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let seen = Arc::new(Seen::default());
        tokio::spawn(watch(res, seen.clone(), first_tx.clone()));
        viewers.push(seen);
    }
    for _ in 0..WATCHERS {
        first_rx.recv().await.unwrap();
    }
    let frames = |v: &[Arc<Seen>]| -> Vec<u64> {
        v.iter().map(|s| s.frames.load(Ordering::Relaxed)).collect()
    };

    // 1. Idle: nothing draws.
    let before = frames(&viewers);
    tokio::time::sleep(WINDOW).await;
    let idle: u64 = frames(&viewers)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .sum();

    // 2. Typing into mousepad.
    desk.launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    // Let the window's opening drawings pass before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = cluster.agent.as_ref().unwrap().pid().unwrap();
    let before = frames(&viewers);
    let bytes_before = viewers[0].bytes.load(Ordering::Relaxed);
    let cpu_before = cpu(pid);
    let started = Instant::now();
    let mut typed = 0;
    let text = "the quick brown fox jumps over the lazy dog ";
    while started.elapsed() < WINDOW {
        let c = text.chars().nth(typed % text.len()).unwrap();
        backend
            .send_keys(&[
                KeyStroke {
                    key: Key::Char(c),
                    down: true,
                },
                KeyStroke {
                    key: Key::Char(c),
                    down: false,
                },
            ])
            .await
            .unwrap();
        typed += 1;
        tokio::time::sleep_until((started + Duration::from_millis(50) * typed as u32).into()).await;
    }
    let elapsed = started.elapsed();
    let cpu_used = cpu(pid) - cpu_before;
    let during: Vec<u64> = frames(&viewers)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    let one = during[0];
    let bytes = viewers[0].bytes.load(Ordering::Relaxed) - bytes_before;
    println!("| measure | value |");
    println!("| --- | --- |");
    println!("| idle desktop, 10 s, {WATCHERS} viewers: frames after the first | {idle} |");
    println!(
        "| typing {typed} characters in {:.1} s: frames a second (one viewer) | {:.1} |",
        elapsed.as_secs_f64(),
        one as f64 / elapsed.as_secs_f64()
    );
    println!(
        "| frames per viewer while typing (min..max over {WATCHERS}) | {}..{} |",
        during.iter().min().unwrap(),
        during.iter().max().unwrap()
    );
    println!(
        "| bytes per frame (JPEG 1280x800, quality 60) | {} |",
        bytes / one.max(1)
    );
    println!(
        "| agent CPU while typing, {WATCHERS} viewers | {:.1} % of one core ({} ms in {:.1} s) |",
        cpu_used.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        cpu_used.as_millis(),
        elapsed.as_secs_f64()
    );
    assert_eq!(idle, 0, "an idle desktop sent frames");
    assert!(one > 0, "no frame while typing");
    cluster.stop().await.unwrap();
}
