//! The agent's own gRPC API (`ufo.v1.AgentService`) and the executor's (`ufo.v1.Executor`) against a
//! generated malformed-input sweep (`ufo_testkit::malformed`, as `services/session/tests/malformed.rs` does
//! for the session service), each a real process called with a valid token: NUL in each string and JSON
//! field, JSON nested too deep, random and corrupted bytes, truncated, missing and oversized messages.
//! Nothing may come back INTERNAL (or UNKNOWN). The agent stores what it is sent in Postgres, so it refuses
//! NUL as INVALID_ARGUMENT naming the field; the executor stores nothing and may accept it.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tonic::Code;
use ufo_testkit::malformed::{Expect, Sweep, call, client};
use ufo_testkit::{Cluster, ProcessBuilder, TestDatabase, free_port, workspace_binary};

/// The agent's gRPC decoding limit (tonic's default, see `ufo_agent::run`).
const AGENT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// The executor's, set by flag to keep the oversized variant small.
const EXECUTOR_MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// `--max-json-depth`'s default.
const MAX_JSON_DEPTH: usize = 32;

/// Sends every variant of every unary-request method of `service`; returns the number of calls and the
/// calls answered otherwise than `expect` allows (with `nul_refused`: NUL must be INVALID_ARGUMENT naming
/// the field; without, anything but INTERNAL).
async fn sweep(
    url: &str,
    service: &str,
    token: &str,
    max_message_bytes: usize,
    nul_refused: bool,
) -> (usize, usize, Vec<String>) {
    let sweep = Sweep::new(ufo_proto::FILE_DESCRIPTOR_SET).unwrap();
    let methods = sweep.methods(service);
    let http = client().unwrap();
    let mut failures = Vec::new();
    let mut calls = 0;
    for (i, method) in methods.iter().enumerate() {
        let variants = sweep.variants(
            &method.input,
            MAX_JSON_DEPTH,
            max_message_bytes,
            i as u64 + 11,
        );
        for variant in variants {
            calls += 1;
            let status = call(&http, url, &method.path, variant.body, Some(token))
                .await
                .unwrap();
            let not_internal = !matches!(status.code(), Code::Internal | Code::Unknown);
            let ok = match &variant.expect {
                Expect::InvalidNaming(field) if nul_refused => {
                    status.code() == Code::InvalidArgument
                        && ufo_testkit::malformed::names_field(status.message(), field)
                }
                Expect::InvalidNaming(_) | Expect::NotInternal => not_internal,
                Expect::Invalid => status.code() == Code::InvalidArgument,
            };
            if !ok {
                failures.push(format!(
                    "{} {}: {:?} {:?}",
                    method.path,
                    variant.name,
                    status.code(),
                    status.message()
                ));
            }
        }
    }
    (methods.len(), calls, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_malformed_request_to_the_agent_api_is_internal() {
    let db = TestDatabase::create().await.unwrap();
    let cluster = Cluster::builder()
        .database_url(db.url())
        .agent_args(["--runner-slots", "0"])
        .start()
        .await
        .unwrap();
    let (methods, calls, failures) = sweep(
        &cluster.grpc_url,
        "ufo.v1.AgentService",
        &cluster.api_key,
        AGENT_MAX_MESSAGE_BYTES,
        true,
    )
    .await;
    println!("agent: {calls} calls over {methods} RPCs");
    assert!(methods >= 5, "{methods} methods");
    assert!(
        failures.is_empty(),
        "{} of {calls} calls:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        cluster.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_malformed_request_to_the_executor_is_internal() {
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let token = "malformed-sweep-token";
    let mut executor =
        ProcessBuilder::new("ufo-executor", workspace_binary("ufo-executor").unwrap())
            .args(["--desktop", "headless", "--desktop-size", "800x600"])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--token", token])
            .args([
                "--max-message-bytes",
                &EXECUTOR_MAX_MESSAGE_BYTES.to_string(),
            ])
            .env_remove("UFO_OTLP_ENDPOINT")
            .spawn()
            .unwrap();
    executor
        .wait_grpc_ready(&url, Duration::from_secs(60))
        .await
        .unwrap();
    let (methods, calls, failures) = sweep(
        &url,
        "ufo.v1.Executor",
        token,
        EXECUTOR_MAX_MESSAGE_BYTES,
        false,
    )
    .await;
    println!("executor: {calls} calls over {methods} RPCs");
    assert!(methods >= 3, "{methods} methods");
    executor.check_running().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {calls} calls:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        executor.logs()
    );
}
