//! The agent limits the OCR engine's OpenMP threads itself (`--grounding-ocr-threads`, default 1): libgomp
//! reads `OMP_THREAD_LIMIT` once, when it loads before `main`, so the agent restarts itself with it set
//! (same process id). An operator's own `OMP_THREAD_LIMIT` wins; grounding off or a grounding service
//! leaves the environment alone. Checked on the running process's `/proc/<pid>/environ`.
#![cfg(all(target_os = "linux", feature = "ocr"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

/// Starts `ufo-agent` (API only) with `args` and `env`, waits until it listens, and returns the
/// `OMP_THREAD_LIMIT` of the running process.
fn limit_seen(args: &[&str], env: &[(&str, &str)]) -> Option<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ufo-agent"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--insecure-no-auth",
            "--runner-slots",
            "0",
        ])
        .args(args)
        .env_remove("OMP_THREAD_LIMIT")
        .env_remove("UFO_AGENT_GROUNDING_OCR_THREADS")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the agent stopped before listening: {seen:#?}"))
            .unwrap();
        if line.contains("ufo-agent listening") {
            break;
        }
        seen.push(line);
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("OMP_THREAD_LIMIT=").map(str::to_owned))
}

#[test]
fn the_agent_restarts_itself_with_one_openmp_thread_for_the_builtin_ocr() {
    assert_eq!(limit_seen(&[], &[]).as_deref(), Some("1"));
    assert_eq!(
        limit_seen(&["--grounding-ocr-threads", "2"], &[]).as_deref(),
        Some("2")
    );
    assert_eq!(
        limit_seen(&[], &[("UFO_AGENT_GROUNDING_OCR_THREADS", "3")]).as_deref(),
        Some("3")
    );
}

#[test]
fn an_operators_limit_zero_grounding_off_and_a_grounding_service_leave_openmp_alone() {
    assert_eq!(
        limit_seen(&[], &[("OMP_THREAD_LIMIT", "4")]).as_deref(),
        Some("4")
    );
    assert_eq!(limit_seen(&["--grounding-ocr-threads", "0"], &[]), None);
    assert_eq!(limit_seen(&["--grounding", "off"], &[]), None);
    assert_eq!(
        limit_seen(&["--grounding-url", "http://127.0.0.1:9"], &[]),
        None
    );
}
