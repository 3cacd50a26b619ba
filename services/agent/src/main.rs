//! `ufo-agent`: parses the configuration, starts telemetry, binds, and runs until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::Parser as _;
use std::sync::Arc;

use ufo_agent::agents::setup::GroundingReadiness;
use ufo_agent::runner::{AgentsDriver, TaskDriver};
use ufo_agent::{Config, Listeners};

// mimalloc: glibc malloc and free were about a seventh of the services' CPU per step (docs/benchmark.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`, which the bindings do not name: in `mimalloc.h` (v2 and v3) it
/// comes right before `mi_option_use_numa_nodes`.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t =
    libmimalloc_sys::mi_option_use_numa_nodes - 1;

fn main() -> anyhow::Result<()> {
    let set = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    if let Some(message) = ufo_common::agent_env::renamed_in(set) {
        eprintln!("ufo-agent: {message}");
        std::process::exit(2);
    }
    let config = Config::parse();
    if !config.transparent_huge_pages
        && let Err(e) = ufo_common::memory::disable_transparent_huge_pages()
    {
        eprintln!("ufo-agent: cannot turn transparent huge pages off ({e}); going on with them");
    }
    // SAFETY: sets one of mimalloc's options, read at each purge; every value is valid (negative: never).
    unsafe {
        libmimalloc_sys::mi_option_set(
            MI_OPTION_PURGE_DELAY,
            config.allocator_purge_delay_ms.into(),
        );
    }
    // First, before any thread exists: the OCR engine's OpenMP thread limit (a restart when needed).
    #[cfg(all(unix, feature = "ocr"))]
    if config.agents.uses_builtin_ocr()
        && let Some(e) = ufo_agent::vision::grounding::tesseract::limit_openmp_threads(
            config.agents.grounding_ocr_threads,
        )
    {
        eprintln!(
            "ufo-agent: cannot restart with OMP_THREAD_LIMIT set ({e}); OCR uses OpenMP's default threads"
        );
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    ufo_common::tls::install_crypto_provider();
    let check_timeout = std::time::Duration::from_secs(config.llm_check_timeout_secs.max(1));
    if config.check_model {
        let findings = ufo_agent::llm::check::check(&config.llm, check_timeout).await;
        for finding in &findings {
            println!("{}: {}", finding.word(), finding.text);
        }
        // Grounding degrades (steps go on with accessibility controls), so it is a note, not a failure.
        match config.agents.check_grounding().await {
            GroundingReadiness::Ready(text) => println!("grounding-ok: {text}"),
            GroundingReadiness::NotReady(text) => println!("grounding-note: {text}"),
        }
        std::process::exit(i32::from(findings.iter().any(|f| f.problem)));
    }
    let mut telemetry = ufo_common::telemetry::init("ufo-agent", &config.telemetry)?;
    let grpc = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    let http = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("cannot bind {}", config.http_listen))?;
    tracing::info!(grpc = %grpc.local_addr()?, http = %http.local_addr()?, "ufo-agent listening");
    // A wrong key or address should show at start, not as the first task's failure.
    let llm = config.llm.clone();
    tokio::spawn(async move {
        for finding in ufo_agent::llm::check::check(&llm, check_timeout).await {
            if finding.problem {
                tracing::warn!("{}", finding.text);
            } else {
                tracing::info!("{}", finding.text);
            }
        }
    });
    let shutdown = ufo_common::shutdown::signal_token();
    let driver: Arc<dyn TaskDriver> =
        Arc::new(AgentsDriver::from_config(&config).context("cannot set up the agents")?);
    let outcome = ufo_agent::run(config, Listeners { grpc, http }, Some(driver), shutdown).await;
    telemetry.shutdown();
    outcome?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PURGE_DELAY` is mimalloc's purge delay: before any set it reads that option's default,
    /// 1000 ms in the mimalloc v3 libmimalloc-sys builds (its `options.c`); a changed order of the
    /// options enum, or a v2 build (default 10), fails here instead of silently setting another option.
    #[test]
    fn the_purge_delay_constant_names_mimallocs_purge_delay() {
        // SAFETY: reads one of mimalloc's options.
        let default = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(default, 1000);
    }
}
