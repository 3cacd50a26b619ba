//! `ufo-suite`: parses its settings, starts logging, runs the suite and exits 0 when the success
//! threshold is met, 1 when it is not, 2 when the suite itself could not run.

use std::process::ExitCode;

use clap::Parser as _;
use ufo_suite::config::Config;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    ufo_common::tls::install_crypto_provider();
    let cfg = Config::parse();
    let _telemetry = match ufo_common::telemetry::init("ufo-suite", &cfg.telemetry) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ufo-suite: cannot start logging: {e}");
            return ExitCode::from(2);
        }
    };
    #[cfg(target_os = "linux")]
    {
        match ufo_suite::cli::execute(cfg).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text.push_str(&format!(": {s}"));
                    source = s.source();
                }
                eprintln!("ufo-suite: {text}");
                ExitCode::from(2)
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        drop(cfg);
        eprintln!("ufo-suite: the suite runs on Linux only (it needs Xvfb and AT-SPI)");
        ExitCode::from(2)
    }
}
