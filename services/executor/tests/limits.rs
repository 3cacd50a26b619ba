//! The executor's own hard limits, whatever the agent sends: a real `ufo-executor` process (its own
//! headless Xvfb desktop) called directly over gRPC, as anyone holding its token could.
//! - launch arguments only inside `--launch-dir` (resolved through symlinks, no `..`, absolute), at most
//!   `--max-launch-args` of at most `--max-launch-arg-bytes`; a refused launch starts nothing (the
//!   allowed program is a probe that records its arguments);
//! - text sizes of set_edit_text, keyboard_input and summary;
//! - run_command is off without `--shell-allow`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use ufo_proto::v1::ResultStatus;

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_enforces_its_launch_and_text_limits_when_called_directly() {
    let work = tempfile::tempdir().unwrap();
    let work_path = std::fs::canonicalize(work.path()).unwrap();
    let docs = work_path.join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("notes.txt"), "notes").unwrap();
    std::os::unix::fs::symlink("/etc/shadow", docs.join("shadow-link")).unwrap();
    let seen = work_path.join("probe-args");
    let probe = work_path.join("probe");
    std::fs::write(
        &probe,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{}'; done\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_process, mut r) = shared::headless::start(&[
        "--allow-app",
        &format!("probe={}", probe.display()),
        "--launch-dir",
        docs.to_str().unwrap(),
        "--max-launch-args",
        "3",
        "--max-launch-arg-bytes",
        "256",
        "--max-text-bytes",
        "1000",
        "--max-summary-bytes",
        "1000",
    ])
    .await;
    // Without --shell-allow the shell tool runs nothing.
    let off = r.run("run_command", json!({"program": "probe"})).await;
    assert_eq!(off.status, ResultStatus::Failure as i32);
    assert!(off.error.contains("run_command is off"), "{}", off.error);

    let notes = docs.join("notes.txt").display().to_string();
    let refused: Vec<(serde_json::Value, &str)> = vec![
        (json!(["/etc/shadow"]), "is outside the launch directories"),
        (
            json!([docs.join("shadow-link")]),
            "is outside the launch directories",
        ),
        (
            json!([format!("{}/../docs/notes.txt", docs.display())]),
            "contains '..'",
        ),
        (json!(["notes.txt"]), "is not an absolute path"),
        (
            json!(["--renderer-cmd-prefix=/bin/sh"]),
            "is not an absolute path",
        ),
        (json!([&notes, &notes, &notes, &notes]), "4 arguments"),
        (
            json!(vec![notes.clone(); 100_000]),
            "100000 arguments, more than the limit of 3",
        ),
        (
            json!([format!("{}/{}", docs.display(), "x".repeat(300))]),
            "more than the limit of 256",
        ),
    ];
    for (args, why) in refused {
        let res = r
            .run("launch_application", json!({"name": "probe", "args": args}))
            .await;
        assert_eq!(res.status, ResultStatus::Failure as i32, "{args}");
        assert!(res.error.contains(why), "{why}: {}", res.error);
    }
    for (tool, params, why) in [
        (
            "summary",
            json!({"text": "x".repeat(1001)}),
            "text is 1001 bytes, more than the limit of 1000",
        ),
        (
            "keyboard_input",
            json!({"keys": "a".repeat(1001)}),
            "keys is 1001 bytes, more than the limit of 1000",
        ),
        (
            "set_edit_text",
            json!({"id": "1", "text": "é".repeat(501)}),
            "text is 1002 bytes, more than the limit of 1000",
        ),
    ] {
        let res = r.run(tool, params).await;
        assert_eq!(res.status, ResultStatus::Failure as i32, "{tool}");
        assert!(res.error.contains(why), "{tool}: {}", res.error);
    }
    let (echo, _) = r.ok("summary", json!({"text": "y".repeat(1000)})).await;
    assert_eq!(echo, json!("y".repeat(1000)));

    // Inside the directory (a new file too): started, with the resolved paths.
    let new_file = docs.join("new.txt").display().to_string();
    let (started, _) = r
        .ok(
            "launch_application",
            json!({"name": "probe", "args": [&notes, &new_file]}),
        )
        .await;
    assert_eq!(started["args"], json!([&notes, &new_file]));
    let end = Instant::now() + Duration::from_secs(20);
    while lines(&seen).len() < 2 {
        assert!(Instant::now() < end, "the probe did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Only the allowed launch ran: none of the refused ones started the probe.
    assert_eq!(lines(&seen), [notes, new_file]);
}
