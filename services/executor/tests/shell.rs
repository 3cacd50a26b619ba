//! `run_command`, the shell agent's tool, against a real `ufo-executor` process over gRPC (as anyone
//! holding its token could call it), running real programs:
//! - refusals: a program not on `--shell-allow`, shell syntax (`;`, `&&`, `||`, `|`, a backtick, `$(`,
//!   `>`, `<`), NUL, paths resolving outside `--shell-workdir` (absolute, `..`, a symlink, an
//!   `--option=/path`), too many or too long arguments; none of them starts anything (the allowed
//!   program is a probe that records each run);
//! - an allowed command's output, exit code and stderr, in the working directory with the fixed
//!   environment (PATH, HOME, LANG and nothing of the executor's);
//! - a command that never ends is killed at its timeout with its process group (checked by pid);
//! - 100 MB of output: drained, cut at `--shell-max-output-bytes`, marked truncated, while the
//!   executor's peak memory stays bounded.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ufo_proto::v1::ResultStatus;

/// A directory with the working directory `work` inside it (files `a.txt`, `sub/b.txt`, a symlink
/// `escape` to /etc) and room for probe programs beside it.
struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let work = root.join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(work.join("a.txt"), "hello from a\n").unwrap();
    std::fs::write(work.join("sub/b.txt"), "b").unwrap();
    std::os::unix::fs::symlink("/etc", work.join("escape")).unwrap();
    Dirs {
        _tmp: tmp,
        root,
        work,
    }
}

/// An executable `#!/bin/sh` script at `path`.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

async fn run(r: &mut shared::Remote, params: Value) -> ufo_proto::v1::Result {
    r.run("run_command", params).await
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// Waits (bounded) until process `pid` is gone.
async fn gone(pid: u64, what: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < end, "{what} (pid {pid}) is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A process's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_commands_are_clear_errors_and_start_nothing() {
    let d = dirs();
    let seen = d.root.join("probe-runs");
    let probe = d.root.join("probe");
    script(
        &probe,
        &format!("printf '%s\\n' \"$*\" >> '{}'", seen.display()),
    );
    let (_process, mut r) = shared::headless::start(&[
        "--shell-allow",
        &format!("{},ls", probe.display()),
        "--shell-workdir",
        d.work.to_str().unwrap(),
        "--shell-max-args",
        "4",
        "--shell-max-arg-bytes",
        "256",
    ])
    .await;
    let p = probe.display().to_string();
    let refused: Vec<(Value, &str)> = vec![
        (
            json!({"program": "rm", "args": ["a.txt"]}),
            "program \"rm\" is not on the shell allow-list; allowed:",
        ),
        // A bare name on the list does not allow other paths to a program of that name.
        (
            json!({"program": "/bin/ls"}),
            "is not on the shell allow-list",
        ),
        (
            json!({"program": "probe"}),
            "is not on the shell allow-list",
        ),
        (
            json!({"program": &p, "args": ["a.txt;rm"]}),
            "contains \";\"",
        ),
        (
            json!({"program": &p, "args": ["a.txt", "&&", "id"]}),
            "contains \"&&\"",
        ),
        (json!({"program": &p, "args": ["x||y"]}), "contains \"||\""),
        (
            json!({"program": &p, "args": ["a.txt", "|", "wc"]}),
            "contains \"|\"",
        ),
        (json!({"program": &p, "args": ["`id`"]}), "contains \"`\""),
        (json!({"program": &p, "args": ["$(id)"]}), "contains \"$(\""),
        (
            json!({"program": &p, "args": [">out.txt"]}),
            "contains \">\"",
        ),
        (json!({"program": &p, "args": ["<a.txt"]}), "contains \"<\""),
        (
            json!({"program": &p, "args": ["a\u{0}b"]}),
            "argument 1 contains a NUL byte",
        ),
        (
            json!({"program": format!("{p}\u{0}")}),
            "the program contains a NUL byte",
        ),
        (
            json!({"program": &p, "args": ["/etc/passwd"]}),
            "argument 1 \"/etc/passwd\" is outside the working directory",
        ),
        (
            json!({"program": &p, "args": ["../probe-runs"]}),
            "is outside the working directory",
        ),
        (
            json!({"program": &p, "args": ["sub/../../x"]}),
            "is outside the working directory",
        ),
        (
            json!({"program": &p, "args": ["escape/passwd"]}),
            "is outside the working directory",
        ),
        (
            json!({"program": &p, "args": ["-n", "--file=/etc/shadow"]}),
            "argument 2 \"--file=/etc/shadow\" is outside the working directory",
        ),
        (
            json!({"program": &p, "args": ["1", "2", "3", "4", "5"]}),
            "5 arguments, more than the limit of 4",
        ),
        (
            json!({"program": &p, "args": ["x".repeat(257)]}),
            "argument 1 is 257 bytes, more than the limit of 256",
        ),
        (
            json!({"program": &p, "timeout_ms": 0}),
            "timeout_ms must be at least 1",
        ),
        (
            json!({"program": &p, "shell": true}),
            "unknown field `shell`",
        ),
    ];
    for (params, why) in refused {
        let res = run(&mut r, params.clone()).await;
        assert_eq!(res.status, ResultStatus::Failure as i32, "{params}");
        assert!(
            res.error
                .starts_with("invalid parameters for run_command: "),
            "{params}: {}",
            res.error
        );
        assert!(res.error.contains(why), "{why}: {}", res.error);
    }
    assert!(!seen.exists(), "a refused command ran the probe");

    // Inside the working directory (through `..` too, and a file not there yet) it runs, once.
    let (ran, _) = r
        .ok(
            "run_command",
            json!({"program": &p, "args": ["sub/../a.txt", "new.txt", "-n"]}),
        )
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "sub/../a.txt new.txt -n\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_command_returns_its_output_in_the_working_directory_and_a_fixed_environment() {
    let d = dirs();
    let (_process, mut r) = shared::headless::start(&[
        "--shell-allow",
        "cat,ls,printenv,pwd",
        "--shell-workdir",
        d.work.to_str().unwrap(),
    ])
    .await;
    let (cat, record) = r
        .ok("run_command", json!({"program": "cat", "args": ["a.txt"]}))
        .await;
    assert_eq!(cat["stdout"], "hello from a\n", "{cat}");
    assert_eq!(cat["exit_code"], 0);
    assert_eq!(cat["stderr"], "");
    assert_eq!(cat["truncated"], false);
    assert_eq!(cat["timed_out"], false);
    assert_eq!(cat["program"], "/usr/bin/cat");
    assert!(record.warnings.is_empty(), "{:?}", record.warnings);

    let (ls, _) = r
        .ok("run_command", json!({"program": "ls", "args": ["sub"]}))
        .await;
    assert_eq!(ls["stdout"], "b.txt\n");
    let (pwd, _) = r.ok("run_command", json!({"program": "pwd"})).await;
    assert_eq!(pwd["stdout"], format!("{}\n", d.work.display()));

    // Only PATH, HOME (the working directory) and LANG: nothing of the executor's environment.
    let (env, _) = r.ok("run_command", json!({"program": "printenv"})).await;
    let mut vars: Vec<&str> = env["stdout"].as_str().unwrap().lines().collect();
    vars.sort_unstable();
    assert_eq!(
        vars,
        [
            format!("HOME={}", d.work.display()).as_str(),
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ]
    );

    // A failing command is a successful run with its exit code and stderr.
    let (missing, _) = r
        .ok(
            "run_command",
            json!({"program": "cat", "args": ["missing.txt"]}),
        )
        .await;
    assert_eq!(missing["exit_code"], 1, "{missing}");
    assert!(
        missing["stderr"]
            .as_str()
            .unwrap()
            .contains("No such file or directory"),
        "{missing}"
    );
    assert_eq!(missing["stdout"], "");

    // A timeout above the executor's is not granted (a warning says so).
    let (_, record) = r
        .ok(
            "run_command",
            json!({"program": "cat", "args": ["a.txt"], "timeout_ms": 999_999}),
        )
        .await;
    assert_eq!(
        record.warnings,
        ["timeout_ms 999999 is above the executor's limit; 10000 ms used"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_never_ends_is_killed_with_its_process_group_at_the_timeout() {
    let d = dirs();
    let pidfile = d.work.join("child.pid");
    let forks = d.root.join("forks");
    // Leaves a grandchild in the group, then waits for it.
    script(
        &forks,
        &format!("sleep 1000 &\necho $! > '{}'\nwait", pidfile.display()),
    );
    let (_process, mut r) = shared::headless::start(&[
        "--shell-allow",
        &format!("sleep,{}", forks.display()),
        "--shell-workdir",
        d.work.to_str().unwrap(),
        "--shell-timeout-ms",
        "2000",
    ])
    .await;
    let started = Instant::now();
    let (slept, _) = r
        .ok(
            "run_command",
            json!({"program": "sleep", "args": ["1000"], "timeout_ms": 300}),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(slept["timed_out"], true, "{slept}");
    assert_eq!(slept["exit_code"], Value::Null);
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(slept["elapsed_ms"].as_u64().unwrap() >= 300, "{slept}");
    gone(slept["pid"].as_u64().unwrap(), "sleep 1000").await;

    // The executor's own limit applies without a caller's timeout; the grandchild goes with the group.
    let started = Instant::now();
    let (forked, _) = r
        .ok(
            "run_command",
            json!({"program": forks.display().to_string()}),
        )
        .await;
    assert_eq!(forked["timed_out"], true, "{forked}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let grandchild: u64 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    gone(forked["pid"].as_u64().unwrap(), "the script").await;
    gone(grandchild, "its background sleep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_megabytes_of_output_are_drained_and_cut_at_the_cap() {
    let d = dirs();
    let flood = d.root.join("flood");
    script(&flood, "head -c 100000000 /dev/zero\necho done >&2");
    let (process, mut r) = shared::headless::start(&[
        "--shell-allow",
        &format!("yes,{}", flood.display()),
        "--shell-workdir",
        d.work.to_str().unwrap(),
        "--shell-max-output-bytes",
        "65536",
    ])
    .await;
    let pid = process.0.id();
    let before = peak_rss_kib(pid);
    let (out, _) = r
        .ok(
            "run_command",
            json!({"program": flood.display().to_string()}),
        )
        .await;
    let after = peak_rss_kib(pid);
    assert_eq!(out["exit_code"], 0, "{}", out["stderr"]);
    assert_eq!(out["truncated"], true);
    assert_eq!(out["stdout_bytes"], 100_000_000);
    assert_eq!(out["stdout"].as_str().unwrap().len(), 65_536);
    assert_eq!(out["stderr"], "done\n");
    println!(
        "100 MB of output in {} ms; executor peak RSS {before} KiB -> {after} KiB",
        out["elapsed_ms"]
    );
    assert!(
        after - before < 32 * 1024,
        "the executor's peak memory grew by {} KiB",
        after - before
    );

    // Output that never ends: cut at the cap, killed at the timeout.
    let (yes, _) = r
        .ok("run_command", json!({"program": "yes", "timeout_ms": 500}))
        .await;
    assert_eq!(yes["timed_out"], true);
    assert_eq!(yes["truncated"], true);
    assert_eq!(yes["stdout"].as_str().unwrap().len(), 65_536);
    assert!(
        yes["stdout_bytes"].as_u64().unwrap() > 65_536,
        "{}",
        yes["stdout_bytes"]
    );
    gone(yes["pid"].as_u64().unwrap(), "yes").await;
}
