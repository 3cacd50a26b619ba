//! Issue 36, the reset between tasks of the pool, on a real `ufo-executor` process and its own Xvfb
//! desktop: `Reset` ends what `launch_application` started, empties `--scratch-dir`, runs the
//! `--reset-hook` (no shell, `UFO_TASK_ID` set); a failing hook fails the reset with the reason.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::time::{Duration, Instant};

use serde_json::json;
use ufo_proto::v1::ResetRequest;

fn alive(pid: u64) -> bool {
    // A zombie is gone for our purpose: /proc/PID/stat's third field is its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z")
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_ends_launched_programs_empties_scratch_and_runs_the_hook() {
    let scratch = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let script = marks.path().join("hook.sh");
    // The hook records the task it was run for (a script: the hook itself is run without a shell).
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$UFO_TASK_ID\" >> {}/ran\n",
            marks.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hook = format!("{} ignored-argument", script.display());
    let (_process, mut remote) = shared::headless::start(&[
        "--allow-app",
        "mousepad",
        "--scratch-dir",
        scratch.path().to_str().unwrap(),
        "--reset-hook",
        &hook,
    ])
    .await;
    let (launched, _) = remote
        .ok("launch_application", json!({"name": "mousepad"}))
        .await;
    let pid = launched["pid"].as_u64().unwrap();
    remote
        .find_window("mousepad", |w| {
            w["name"].as_str().unwrap_or_default().contains("Mousepad")
        })
        .await;
    std::fs::write(scratch.path().join("report.txt"), "task 1's file").unwrap();
    std::fs::create_dir(scratch.path().join("sub")).unwrap();
    std::fs::write(scratch.path().join("sub/more.txt"), "x").unwrap();

    let done = remote
        .client
        .reset(ResetRequest {
            task_id: "task-1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (done.closed, done.removed, done.hook_ran),
        (1, 2, true),
        "{done:?}"
    );
    assert!(
        !alive(pid),
        "mousepad (pid {pid}) still runs after the reset"
    );
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    assert!(
        scratch.path().is_dir(),
        "the scratch directory itself is kept"
    );
    assert_eq!(
        std::fs::read_to_string(marks.path().join("ran")).unwrap(),
        "task-1\n"
    );
    // No window of task 1 is left for the next task.
    let end = Instant::now() + shared::SETTLE;
    loop {
        let (listing, _) = remote.ok("get_desktop_app_target_info", json!({})).await;
        let left = listing
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["name"].as_str().unwrap_or_default().contains("Mousepad"));
        if !left {
            break;
        }
        assert!(
            Instant::now() < end,
            "mousepad's window outlived the reset: {listing}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second reset has nothing to close.
    let again = remote
        .client
        .reset(ResetRequest {
            task_id: "task-2".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((again.closed, again.removed), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_fails_the_reset_with_the_reason() {
    let (_process, mut remote) = shared::headless::start(&["--reset-hook", "/bin/false"]).await;
    let refused = remote
        .client
        .reset(ResetRequest {
            task_id: "task-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused
            .message()
            .contains("the reset hook exited with exit status: 1"),
        "{refused:?}"
    );
    let bad = remote
        .client
        .reset(ResetRequest {
            task_id: "a\u{7}b".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}
