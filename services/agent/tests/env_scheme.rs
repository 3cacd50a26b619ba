//! One environment-variable scheme for `ufo-agent`: every flag's fallback is `UFO_AGENT_` + the flag's name
//! (the flags all services share keep their shared names), and a name from before the scheme stops the
//! agent at start with the new name in the message instead of being ignored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use clap::CommandFactory as _;

/// The flags every service binary shares (telemetry, logs, reflection, JSON depth), with their names.
const SHARED: [&str; 7] = [
    "UFO_LOG",
    "UFO_LOG_FORMAT",
    "UFO_OTLP_ENDPOINT",
    "UFO_OTLP_TIMEOUT_MS",
    "UFO_OTLP_METRICS_INTERVAL_MS",
    "UFO_GRPC_REFLECTION",
    "UFO_MAX_JSON_DEPTH",
];

#[test]
fn every_flag_reads_ufo_agent_and_its_own_name() {
    let command = ufo_agent::Config::command();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for arg in command.get_arguments() {
        let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let env = env.to_str().unwrap();
        let want = format!("UFO_AGENT_{}", long.to_uppercase().replace('-', "_"));
        if env != want && !SHARED.contains(&env) {
            wrong.push(format!("--{long}: {env}, not {want}"));
        }
        checked += 1;
    }
    assert!(checked > 100, "only {checked} flags with a variable");
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Each renamed name maps to a variable the agent reads now.
    let read: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_str().unwrap().to_owned()))
        .collect();
    for (old, new) in ufo_common::agent_env::RENAMED {
        assert!(
            read.iter().any(|r| r == new),
            "{old} → {new}, which nothing reads"
        );
        assert!(!read.iter().any(|r| r == old), "{old} is still read");
    }
}

#[test]
fn a_name_from_before_the_scheme_stops_the_agent_naming_the_new_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_ufo-agent"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .env("UFO_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        .env("UFO_RUNNER_SLOTS", "3")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("UFO_LLM_BASE_URL is now UFO_AGENT_LLM_BASE_URL")
            && err.contains("UFO_RUNNER_SLOTS is now UFO_AGENT_RUNNER_SLOTS"),
        "{err}"
    );
    // The executor's own settings, which a shell starting both services may set, are not refused.
    let out = Command::new(env!("CARGO_BIN_EXE_ufo-agent"))
        .arg("--help")
        .env("UFO_EXECUTOR_TOKEN", "t")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
