//! `ufo doctor`: checks what a first task needs — a desktop with its accessibility bus (or the packages
//! for a headless one), the service binaries, the launch allow-list, the model endpoint and key, the
//! store, the ports and the tokens — and prints one line per check with the fix. Exits 1 when a check
//! found a problem.

use std::time::Duration;

use crate::commands::Outcome;
use crate::config::{Connection, DoctorArgs, ExecutorMode};
use crate::error::CliError;
use crate::up::{self, Desktop};

/// One check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Note,
    Problem,
}

struct Report {
    problems: usize,
}

impl Report {
    fn line(&mut self, verdict: Verdict, what: &str, text: &str) {
        let word = match verdict {
            Verdict::Ok => "ok     ",
            Verdict::Note => "note   ",
            Verdict::Problem => {
                self.problems += 1;
                "PROBLEM"
            }
        };
        println!("{word} {what:<14} {text}");
    }
}

/// `ufo doctor`.
pub async fn doctor(args: DoctorArgs, conn: &Connection) -> Result<Outcome, CliError> {
    let args = args.up;
    let mut report = Report { problems: 0 };
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default(),
    };

    // Display and accessibility bus.
    let desktop = up::choose_desktop(&args);
    match &desktop {
        Ok(Some(Desktop::Current)) => {
            let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some();
            let hidden = std::env::var_os("NO_AT_BRIDGE").is_some();
            if hidden {
                report.line(Verdict::Problem, "display", "NO_AT_BRIDGE is set: applications started from here hide from AT-SPI; fix: unset NO_AT_BRIDGE");
            } else if !bus {
                report.line(Verdict::Problem, "display", "DISPLAY is set but there is no session bus (DBUS_SESSION_BUS_ADDRESS), so no accessibility bus; fix: run from a desktop session, or `ufo up --desktop headless`");
            } else {
                report.line(Verdict::Ok, "display", "this session's desktop (DISPLAY and a session bus)");
            }
        }
        Ok(Some(Desktop::Headless)) => report.line(
            Verdict::Ok,
            "display",
            "no DISPLAY here; `ufo up` starts its own headless desktop (Xvfb, session bus, AT-SPI bus, xfwm4)",
        ),
        Ok(None) => {
            let missing = up::missing_headless_packages();
            if args.executor == ExecutorMode::Never || missing.is_empty() {
                report.line(Verdict::Note, "display", "no local desktop (--desktop none / --executor never): tasks need a --remote-executor");
            } else {
                report.line(
                    Verdict::Problem,
                    "display",
                    &format!(
                        "no display and no headless desktop; fix: apt-get install {} (then `ufo up` brings its own desktop), or run in a desktop session",
                        missing.join(" ")
                    ),
                );
            }
        }
        Err(e) => report.line(Verdict::Problem, "display", &format!("{e}; fix: change --desktop")),
    }

    // The service binaries.
    let missing: Vec<&str> = ["ufo-session", "ufo-agent", "ufo-executor"]
        .into_iter()
        .filter(|b| {
            !bin_dir
                .join(format!("{b}{}", std::env::consts::EXE_SUFFIX))
                .is_file()
        })
        .collect();
    if missing.is_empty() {
        report.line(
            Verdict::Ok,
            "binaries",
            &format!("found in {}", bin_dir.display()),
        );
    } else {
        report.line(
            Verdict::Problem,
            "binaries",
            &format!(
                "{} missing in {}; fix: cargo build --release --bins, or pass --bin-dir",
                missing.join(", "),
                bin_dir.display()
            ),
        );
    }

    // The launch allow-list.
    let local_executor = matches!(desktop, Ok(Some(_))) && args.executor != ExecutorMode::Never;
    if local_executor {
        let absent: Vec<&str> = args
            .allow_apps
            .iter()
            .map(|a| a.split_once('=').map_or(a.as_str(), |(_, p)| p).trim())
            .filter(|p| up::find_program(p).is_none())
            .collect();
        if args.allow_apps.is_empty() {
            report.line(Verdict::Problem, "allow-list", "empty: tasks cannot launch any application; fix: --allow-app mousepad (or UFO_UP_ALLOW_APPS)");
        } else if absent.is_empty() {
            report.line(
                Verdict::Ok,
                "allow-list",
                &format!("tasks may launch {}", args.allow_apps.join(", ")),
            );
        } else {
            report.line(
                Verdict::Problem,
                "allow-list",
                &format!(
                    "{} not installed; fix: apt-get install {}, or change --allow-app / UFO_UP_ALLOW_APPS",
                    absent.join(", "),
                    absent.join(" ")
                ),
            );
        }
    }

    // The model endpoint and key (the agent's own check, with the agent's configuration).
    let agent = bin_dir.join(format!("ufo-agent{}", std::env::consts::EXE_SUFFIX));
    if agent.is_file() {
        let mut check = tokio::process::Command::new(&agent);
        // The CLI's own model variables reach the agent under its names only (see up::command).
        for (old, _) in ufo_common::agent_env::RENAMED {
            check.env_remove(old);
        }
        match check
            .arg("--check-model")
            .envs(args.model.env())
            .stdin(std::process::Stdio::null())
            .output()
            .await
        {
            Ok(output) => {
                let text = String::from_utf8_lossy(&output.stdout);
                for line in text.lines() {
                    match line.split_once(": ") {
                        Some(("problem", rest)) => report.line(Verdict::Problem, "model", rest),
                        Some(("ok", rest)) => report.line(Verdict::Ok, "model", rest),
                        Some(("note", rest)) => report.line(Verdict::Note, "model", rest),
                        Some(("grounding-ok", rest)) => report.line(Verdict::Ok, "grounding", rest),
                        Some(("grounding-note", rest)) => {
                            report.line(Verdict::Note, "grounding", rest)
                        }
                        _ => {}
                    }
                }
                if !text
                    .lines()
                    .any(|l| l.starts_with("ok: ") || l.starts_with("problem: "))
                {
                    let err = String::from_utf8_lossy(&output.stderr);
                    report.line(
                        Verdict::Problem,
                        "model",
                        &format!(
                            "the agent refuses its model settings: {}; fix: correct the UFO_LLM_* variables",
                            err.lines().find(|l| !l.trim().is_empty()).unwrap_or("(no output)")
                        ),
                    );
                }
            }
            Err(e) => report.line(
                Verdict::Problem,
                "model",
                &format!("cannot run {} --check-model: {e}", agent.display()),
            ),
        }
    }

    // The store.
    let probe = args.data_dir.join(".doctor-probe");
    let writable = std::fs::create_dir_all(&args.data_dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    match writable {
        Ok(()) => report.line(
            Verdict::Ok,
            "database",
            &format!(
                "SQLite store {} (writable)",
                args.data_dir.join("session.sqlite3").display()
            ),
        ),
        Err(e) => report.line(
            Verdict::Problem,
            "database",
            &format!(
                "cannot write {} ({e}); fix: choose another --data-dir",
                args.data_dir.display()
            ),
        ),
    }

    // Ports, and whether a `ufo up` already runs there.
    let host = args.host.clone();
    let taken = up::taken_ports(&host, &up::ports(&args, local_executor));
    let running =
        !taken.is_empty() && grpc_serving(&format!("http://{host}:{}", args.grpc_port)).await;
    if running && local_executor {
        let url = format!("http://{host}:{}", args.executor_port);
        if grpc_serving(&url).await {
            report.line(Verdict::Ok, "executor", &format!("serving at {url}"));
        } else {
            report.line(
                Verdict::Problem,
                "executor",
                &format!(
                    "not serving at {url}; fix: see {}",
                    args.data_dir.join("logs/ufo-executor.log").display()
                ),
            );
        }
    }
    if taken.is_empty() {
        report.line(Verdict::Ok, "ports", "free");
    } else if running {
        report.line(
            Verdict::Ok,
            "ports",
            &format!(
                "in use by a running ufo (agent gRPC on {host}:{} serving)",
                args.grpc_port
            ),
        );
    } else {
        let list: Vec<String> = taken
            .iter()
            .map(|(p, what, flag, _)| format!("{p} ({what}, {flag})"))
            .collect();
        report.line(
            Verdict::Problem,
            "ports",
            &format!("in use by something else: {}; fix: stop it, or choose other ports with those flags", list.join(", ")),
        );
    }

    // Tokens.
    match crate::tokens::read(&args.data_dir) {
        Ok(Some(stored)) => match &conn.token {
            Some(t) if *t != stored.api => report.line(
                Verdict::Problem,
                "tokens",
                &format!(
                    "UFO_TOKEN differs from the API key `ufo up` keeps in {} (a `ufo up` started with that UFO_TOKEN uses it instead); fix: export UFO_TOKEN={}",
                    crate::tokens::path(&args.data_dir).display(),
                    stored.api
                ),
            ),
            _ => report.line(Verdict::Ok, "tokens", &format!("kept in {} (stable across restarts)", crate::tokens::path(&args.data_dir).display())),
        },
        Ok(None) => report.line(Verdict::Note, "tokens", "none yet: the first `ufo up` creates them (and prints the API key)"),
        Err(e) => report.line(Verdict::Problem, "tokens", &format!("{e}")),
    }

    if report.problems == 0 {
        println!("no problems found");
        Ok(Outcome::Success)
    } else {
        Err(CliError::Up(format!(
            "{} problem(s) found",
            report.problems
        )))
    }
}

async fn grpc_serving(url: &str) -> bool {
    crate::up::serving(url, Duration::from_secs(2)).await
}
