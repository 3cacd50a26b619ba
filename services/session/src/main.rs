//! `ufo-session`: parses the configuration, starts telemetry, binds, and runs until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::Parser as _;
use ufo_session::Config;

// mimalloc: glibc malloc and free were about a seventh of the services' CPU per step (docs/benchmark.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    ufo_common::tls::install_crypto_provider();
    let config = Config::parse();
    if !config.transparent_huge_pages
        && let Err(e) = ufo_common::memory::disable_transparent_huge_pages()
    {
        eprintln!("ufo-session: cannot turn transparent huge pages off ({e}); going on with them");
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.runtime_threads())
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let mut telemetry = ufo_common::telemetry::init("ufo-session", &config.telemetry)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    tracing::info!(addr = %listener.local_addr()?, threads = config.runtime_threads(), "ufo-session listening");
    let shutdown = ufo_common::shutdown::signal_token();
    let outcome = ufo_session::run(config, listener, shutdown).await;
    telemetry.shutdown();
    outcome?;
    Ok(())
}
