//! Catches a service that cannot start in its Docker image (issue 18: the agent's image had no font the
//! agent opened at start) without a Docker engine: each service binary is started under `strace` with a
//! local configuration until it reports SERVING, every file it opened is recorded, and each file must
//! come into its image — from the packages debian:bookworm-slim ships, the packages the image's stage
//! installs (with what they depend on), or a file the stage copies in. A file owned by no such package
//! fails the check, naming the file, its package and the Dockerfile stage to add it to.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ufo_testkit::{free_port, workspace_binary};

/// Packages of debian:bookworm-slim whose files a Rust service may open (the C library and its loader
/// configuration, time zones, name service configuration).
const BASE_PACKAGES: [&str; 6] = [
    "libc6",
    "libgcc-s1",
    "base-files",
    "tzdata",
    "netbase",
    "libc-bin",
];

/// Paths whose files are not part of an image's contents: kernel interfaces, the test's own data, and
/// the files the container runtime provides to every container (Docker bind-mounts these three).
const NOT_IMAGE_FILES: [&str; 8] = [
    "/proc/",
    "/sys/",
    "/dev/",
    "/tmp/",
    "/etc/ld.so.cache",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/hostname",
];

/// Files generated at install time by a package's scripts, by path prefix, with that package.
const GENERATED: [(&str, &str); 2] = [
    ("/etc/ssl/certs/", "ca-certificates"),
    ("/etc/nsswitch.conf", "libc-bin"),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One stage of a Dockerfile (from its `FROM ... AS target` line to the next `FROM`).
fn stage(dockerfile: &str, target: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(dockerfile)).unwrap();
    let mut out = None::<String>;
    let mut runtime_parent = None::<String>;
    for line in text.lines() {
        let upper = line.to_uppercase();
        if upper.starts_with("FROM ") {
            if out.is_some() {
                break;
            }
            if upper.ends_with(&format!(" AS {}", target.to_uppercase())) {
                out = Some(String::new());
                // `FROM runtime AS agent`: the parent stage's packages are in the image too.
                let parent = line.split_whitespace().nth(1).unwrap_or_default();
                if text
                    .to_uppercase()
                    .contains(&format!(" AS {}", parent.to_uppercase()))
                {
                    runtime_parent = Some(parent.to_owned());
                }
            }
        }
        if let Some(out) = out.as_mut() {
            out.push_str(line);
            out.push('\n');
        }
    }
    let mut out = out.unwrap_or_else(|| panic!("{dockerfile} has no stage {target}"));
    if let Some(parent) = runtime_parent {
        out.push_str(&stage(dockerfile, &parent));
    }
    out
}

/// The Debian package owning `path`, if any. On a merged-/usr system a library the loader opens as
/// `/lib/x86_64-linux-gnu/...` may be registered by its package under `/usr/lib/...` (or the other way
/// round), so both spellings and the resolved path are asked.
fn owner(path: &str) -> Option<String> {
    let mut candidates = vec![path.to_owned()];
    if let Some(rest) = path.strip_prefix("/usr") {
        candidates.push(rest.to_owned());
    } else {
        candidates.push(format!("/usr{path}"));
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        candidates.push(real.display().to_string());
    }
    candidates.iter().find_map(|candidate| {
        let out = std::process::Command::new("dpkg")
            .args(["-S", candidate])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next()?;
        let package = line.split(':').next()?.trim();
        (!package.is_empty() && out.status.success()).then(|| package.to_owned())
    })
}

/// `packages` and everything they depend on (Depends and Pre-Depends, recursively, as installed on
/// this machine): what `apt-get install` of those packages puts into an image.
fn dependency_closure<'a>(packages: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = packages.into_iter().map(str::to_owned).collect();
    while let Some(package) = todo.pop() {
        if !seen.insert(package.clone()) {
            continue;
        }
        let Ok(out) = std::process::Command::new("dpkg-query")
            .args(["-W", "-f=${Depends}, ${Pre-Depends}", &package])
            .output()
        else {
            continue;
        };
        if !out.status.success() {
            continue; // not a package installed here (a word of the Dockerfile that is no package)
        }
        for dependency in String::from_utf8_lossy(&out.stdout).split(',') {
            // `a (>= 1) | b`: whichever alternative is installed here.
            for alternative in dependency.split('|') {
                let name = alternative
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .split(':')
                    .next()
                    .unwrap_or_default();
                if !name.is_empty() && !seen.contains(name) {
                    todo.push(name.to_owned());
                }
            }
        }
    }
    seen
}

/// The files of `opened` that the image built from `stage` would not have, each with why.
fn missing_in_image(opened: &BTreeSet<String>, stage: &str, binary: &Path) -> Vec<String> {
    let installs = dependency_closure(
        stage
            .split(|c: char| c.is_whitespace() || c == '\\')
            .filter(|w| !w.is_empty() && !w.starts_with('-')),
    );
    // The home directory of whoever runs the test is that user's, not the image's (an image's
    // service user has its own home, e.g. an X authority file there is optional).
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| h.len() > 1)
        .map(|h| format!("{}/", h.trim_end_matches('/')));
    let mut missing = Vec::new();
    for path in opened {
        if NOT_IMAGE_FILES.iter().any(|p| path.starts_with(p))
            || home.as_deref().is_some_and(|h| path.starts_with(h))
            || Path::new(path) == binary
        {
            continue;
        }
        if stage.contains(&format!(" {path}")) {
            continue; // copied in by the stage
        }
        // Files a package's scripts generate (the CA bundle and its hash links) are not in `dpkg -S`.
        let generated = GENERATED
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix))
            .map(|(_, package)| (*package).to_owned());
        match generated.or_else(|| owner(path)) {
            Some(package) if BASE_PACKAGES.contains(&package.as_str()) => {}
            Some(package) if installs.contains(&package) => {}
            Some(package) => missing.push(format!(
                "{path} (package {package}: install it in the stage, or stop needing the file)"
            )),
            None => missing.push(format!("{path} (no Debian package: COPY it in the stage)")),
        }
    }
    missing
}

/// Whether `ufo health` finds the service at `url` SERVING.
fn serving(url: &str) -> bool {
    std::process::Command::new(workspace_binary("ufo").unwrap())
        .args(["health", "--url", url])
        .output()
        .unwrap()
        .status
        .success()
}

/// Starts `binary` under strace with `args`/`env` until `health_url` reports SERVING; the regular files
/// it (any of its threads, not programs it starts) opened successfully.
fn opened_at_start(
    binary: &Path,
    args: &[&str],
    env: &[(&str, String)],
    health_url: &str,
) -> BTreeSet<String> {
    opened_until(binary, args, env, || serving(health_url))
}

/// Starts `binary` under strace with `args`/`env` until `ready()`; the regular files it (any of its
/// threads, not programs it starts) opened successfully.
fn opened_until(
    binary: &Path,
    args: &[&str],
    env: &[(&str, String)],
    ready: impl Fn() -> bool,
) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let mut child = std::process::Command::new("strace")
        // `--seccomp-bpf`: only the traced calls stop the service, so it starts at nearly full speed.
        .args([
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-e",
            "trace=open,openat,openat2,execve,clone,clone3,fork,vfork",
            "-o",
        ])
        .arg(&log)
        .arg(binary)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strace is installed (Debian package strace)");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if ready() {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{} exited while starting",
            binary.display()
        );
        assert!(
            Instant::now() < until,
            "{} never became ready",
            binary.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stop the service (strace's child) so strace writes its log and exits with it.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
        .unwrap_or_default();
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: signalling the service process this test started (through strace).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    // A service that does not stop within its drain time is killed: the log is complete either way.
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            for pid in children
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: as above, the service this test started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    // Processes that exec another program (a desktop the service starts), and every process those
    // fork afterwards, are not the service.
    let mut others = BTreeSet::new();
    let mut files = BTreeSet::new();
    let name = binary.display().to_string();
    for line in text.lines() {
        let Some((pid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if call.starts_with("execve(") && !call.contains(&name) {
            others.insert(pid.to_owned());
            continue;
        }
        let forks = [
            "clone",
            "fork",
            "vfork",
            "<... clone",
            "<... fork",
            "<... vfork",
        ]
        .iter()
        .any(|c| call.starts_with(c));
        if forks {
            let child = call
                .rsplit("= ")
                .next()
                .filter(|c| c.parse::<u32>().is_ok());
            if let Some(child) = child.filter(|_| others.contains(pid)) {
                others.insert(child.to_owned());
            }
            continue;
        }
        if others.contains(pid) || !call.starts_with("open") || call.contains("= -1") {
            continue;
        }
        if call.contains("O_DIRECTORY") {
            continue;
        }
        if let Some(path) = call.split('"').nth(1).filter(|p| p.starts_with('/')) {
            files.insert(path.to_owned());
        }
    }
    files
}

fn agent_opened(extra_env: &[(&str, String)]) -> (BTreeSet<String>, PathBuf) {
    let agent = workspace_binary("ufo-agent").unwrap();
    let (grpc, http) = (free_port().unwrap(), free_port().unwrap());
    let mut env = vec![
        ("UFO_AGENT_LISTEN", format!("127.0.0.1:{grpc}")),
        ("UFO_AGENT_HTTP_LISTEN", format!("127.0.0.1:{http}")),
        ("UFO_AGENT_API_KEYS", "k".to_owned()),
        ("UFO_AGENT_LLM_BASE_URL", "http://127.0.0.1:9/v1".to_owned()),
    ];
    env.extend(extra_env.iter().cloned());
    let files = opened_at_start(&agent, &[], &env, &format!("http://127.0.0.1:{grpc}"));
    (files, agent)
}

#[test]
fn each_service_opens_at_start_only_files_its_image_has() {
    let data = tempfile::tempdir().unwrap();
    let session = workspace_binary("ufo-session").unwrap();
    let port = free_port().unwrap();
    let opened = opened_at_start(
        &session,
        &[],
        &[
            ("UFO_SESSION_LISTEN", format!("127.0.0.1:{port}")),
            (
                "UFO_SESSION_SQLITE_PATH",
                data.path().join("s.sqlite3").display().to_string(),
            ),
        ],
        &format!("http://127.0.0.1:{port}"),
    );
    let missing = missing_in_image(
        &opened,
        &stage("docker/services.Dockerfile", "session"),
        &session,
    );
    assert!(missing.is_empty(), "the session image lacks: {missing:#?}");

    let (opened, agent) = agent_opened(&[]);
    let missing = missing_in_image(
        &opened,
        &stage("docker/services.Dockerfile", "agent"),
        &agent,
    );
    assert!(missing.is_empty(), "the agent image lacks: {missing:#?}");

    let executor = workspace_binary("ufo-executor").unwrap();
    let port = free_port().unwrap();
    let opened = opened_at_start(
        &executor,
        &["--desktop", "headless", "--insecure"],
        &[("UFO_EXECUTOR_LISTEN", format!("127.0.0.1:{port}"))],
        &format!("http://127.0.0.1:{port}"),
    );
    let missing = missing_in_image(
        &opened,
        &stage("docker/executor.Dockerfile", "executor"),
        &executor,
    );
    assert!(missing.is_empty(), "the executor image lacks: {missing:#?}");
}

/// The compose file's dial-out desktop (desk2): an agent that enrolls its token at start
/// (`--enroll-executor`), and the executor image's `ufo-executor --connect` dialling it. Each opens at
/// start only files its image has (the token and the enrollments file are the compose file's, here in
/// /tmp); the executor is ready once the agent lists it connected.
#[test]
fn the_dial_out_desktop_and_the_agent_enrolling_it_open_only_files_their_images_have() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("desk2.token");
    std::fs::write(&token, "compose-desk2-enrollment-token\n").unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let given = vec![
        (
            "UFO_AGENT_EXECUTOR_ENROLLMENTS_FILE",
            enrollments.display().to_string(),
        ),
        (
            "UFO_AGENT_ENROLL_EXECUTOR",
            format!("desk2={}", token.display()),
        ),
    ];
    let (opened, agent) = agent_opened(&given);
    let missing = missing_in_image(
        &opened,
        &stage("docker/services.Dockerfile", "agent"),
        &agent,
    );
    assert!(missing.is_empty(), "the agent image lacks: {missing:#?}");
    let stored = std::fs::read_to_string(&enrollments).unwrap();
    assert!(
        stored.contains("desk2") && !stored.contains("compose-desk2"),
        "the token's hash is enrolled for desk2: {stored}"
    );

    // An agent (not traced) for desk2 to dial, with an admin key to list the executors.
    let (grpc, http) = (free_port().unwrap(), free_port().unwrap());
    let mut agent = std::process::Command::new(workspace_binary("ufo-agent").unwrap())
        .envs([
            ("UFO_AGENT_LISTEN", format!("127.0.0.1:{grpc}")),
            ("UFO_AGENT_HTTP_LISTEN", format!("127.0.0.1:{http}")),
            ("UFO_AGENT_API_KEYS", "admin:k".to_owned()),
            ("UFO_AGENT_API_ADMINS", "admin".to_owned()),
            ("UFO_AGENT_LLM_BASE_URL", "http://127.0.0.1:9/v1".to_owned()),
        ])
        .envs(given.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("UFO_OTLP_ENDPOINT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let grpc_url = format!("http://127.0.0.1:{grpc}");
    let until = Instant::now() + Duration::from_secs(60);
    while !serving(&grpc_url) {
        assert!(Instant::now() < until, "the agent never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let executor = workspace_binary("ufo-executor").unwrap();
    let http_url = format!("http://127.0.0.1:{http}");
    let connected = || {
        let out = std::process::Command::new(workspace_binary("ufo").unwrap())
            .args(["--server", &http_url, "--token", "k", "executors", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("desk2\tdial-out\tconnected")
    };
    let opened = opened_until(
        &executor,
        &[
            "--desktop",
            "headless",
            "--connect",
            &grpc_url,
            "--name",
            "desk2",
        ],
        &[(
            "UFO_EXECUTOR_ENROLL_TOKEN_FILE",
            token.display().to_string(),
        )],
        connected,
    );
    let _ = agent.kill();
    let _ = agent.wait();
    let missing = missing_in_image(
        &opened,
        &stage("docker/executor.Dockerfile", "executor"),
        &executor,
    );
    assert!(missing.is_empty(), "the executor image lacks: {missing:#?}");
}

#[test]
fn the_check_catches_a_file_the_image_lacks() {
    // The agent as it was before issue 18: loading its label font from the system at start.
    let font = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf";
    let (opened, agent) = agent_opened(&[("UFO_AGENT_LABEL_FONT", font.to_owned())]);
    assert!(
        opened.contains(font),
        "strace saw the font opened: {opened:#?}"
    );
    let missing = missing_in_image(
        &opened,
        &stage("docker/services.Dockerfile", "agent"),
        &agent,
    );
    assert!(
        missing
            .iter()
            .any(|m| m.contains(font) && m.contains("fonts-dejavu-core")),
        "{missing:#?}"
    );
}
