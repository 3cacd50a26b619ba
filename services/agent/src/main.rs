//! `ufo-agent`: parses the configuration, starts telemetry, binds, and runs until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::Parser as _;
use std::sync::Arc;

use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::{Config, Listeners};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let mut telemetry = ufo_common::telemetry::init("ufo-agent", &config.telemetry)?;
    let grpc = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    let http = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("cannot bind {}", config.http_listen))?;
    tracing::info!(grpc = %grpc.local_addr()?, http = %http.local_addr()?, "ufo-agent listening");
    let shutdown = ufo_common::shutdown::signal_token();
    let driver: Arc<dyn TaskDriver> =
        Arc::new(AgentsDriver::from_config(&config).context("cannot set up the agents")?);
    let outcome = ufo_agent::run(config, Listeners { grpc, http }, Some(driver), shutdown).await;
    telemetry.shutdown();
    outcome?;
    Ok(())
}
