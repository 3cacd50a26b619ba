//! The pool benchmark's own check (issue 36), small: `e2e-bench --pool` with 50 dial-out stand-in
//! executors and 20 tasks for 5 of them, on the embedded store, as a real process against the real agent
//! and session service. The bench fails unless every task finished, every executor connected once and
//! stayed connected, and every desktop served its tasks one at a time (by the store's events and by the
//! stand-in's own calls); this test checks that it succeeded and printed its figures. No figure is
//! compared with a bound: the machine's load decides them.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[test]
fn fifty_dial_out_stand_ins_serve_twenty_tasks_one_at_a_time_and_the_bench_prints_its_figures() {
    // The services the bench starts: the workspace's, next to the bench in the same target directory.
    let agent = ufo_testkit::workspace_binary("ufo-agent").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-bench"))
        .args(["--pool", "--store", "embedded"])
        .args(["--pool-executors", "50", "--pool-tasks", "20"])
        .args(["--pool-fitting", "5", "--pool-idle-ms", "500"])
        .args(["--pool-heartbeat-ms", "2000", "--pool-timeout-secs", "240"])
        .arg("--services-from")
        .arg(agent.parent().unwrap())
        .env_remove("UFO_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "e2e-bench --pool failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let row = |label: &str| -> String {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {label}")))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"))
            .to_owned()
    };
    assert!(row("tasks finished").contains("| 20 of 20 ("), "{stdout}");
    assert!(
        row("executors still connected").contains("| 50 / 50 of 50 / 0 |"),
        "{stdout}"
    );
    // Five desktops fit the tasks: all of them served, none of the other 45.
    assert!(row("desktops used").contains("| 5 / "), "{stdout}");
    // Every figure is a number: the hand-over percentiles, memory and CPU.
    for label in [
        "**scheduling overhead**",
        "agent RSS: before",
        "CPU idle",
        "  CPU while they run",
    ] {
        let line = row(label);
        assert!(
            line.chars().any(|c| c.is_ascii_digit()) && !line.contains("NaN"),
            "{line}"
        );
    }
    let measured: usize = row("  hand-overs measured")
        .split('|')
        .nth(2)
        .and_then(|cell| cell.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        measured > 0,
        "20 tasks waiting for 5 desktops give hand-overs: {stdout}"
    );
}
