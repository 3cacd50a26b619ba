//! `ufo-executor`: parses the configuration, starts telemetry, binds, and runs until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::Parser as _;
use ufo_executor::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ufo_common::tls::install_crypto_provider();
    let config = Config::parse();
    let mut telemetry = ufo_common::telemetry::init("ufo-executor", &config.telemetry)?;
    // Refuse a bad configuration (token rule, TLS pair) before binding, so a refused start logs only
    // the error; `run` checks again against the bound address and the TLS files.
    let shutdown = ufo_common::shutdown::signal_token();
    if config.connect.is_some() {
        let outcome = ufo_executor::run_dial_out(config, shutdown).await;
        telemetry.shutdown();
        outcome?;
        return Ok(());
    }
    config.validate(config.listen)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    let outcome = ufo_executor::run(config, listener, shutdown).await;
    telemetry.shutdown();
    outcome?;
    Ok(())
}
