//! Shared by the `ufo` binary's tests against a real [`Cluster`]: the CLI pointed at the cluster's
//! services with a token, none of the caller's own `UFO_*` settings leaking in.
#![allow(dead_code)]

use std::process::{Output, Stdio};

use ufo_testkit::Cluster;

/// `ufo ARGS` against `cluster`, authenticated with `token`.
pub fn command(cluster: &Cluster, token: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ufo"));
    command
        .args(["--server", &cluster.rest_url, "--grpc", &cluster.grpc_url])
        .args(["--token", token])
        .args(args)
        .env_remove("UFO_SERVER")
        .env_remove("UFO_GRPC")
        .env_remove("UFO_TOKEN")
        .stdin(Stdio::null());
    command
}

/// `ufo ARGS` against `cluster` with its API key, run to the end.
pub async fn ufo(cluster: &Cluster, args: &[&str]) -> Output {
    command(cluster, &cluster.api_key, args)
        .output()
        .await
        .expect("the ufo binary runs")
}

/// What a finished `ufo` printed: standard output, then standard error.
pub fn out(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
