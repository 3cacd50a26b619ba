//! `ufo`: parses the command line, runs the command, and turns failures into a message and exit code
//! (1 for errors, 2 when a followed task failed or was cancelled).

use ufo_cli::Outcome;

#[tokio::main]
async fn main() {
    ufo_common::tls::install_crypto_provider();
    let cli = ufo_cli::config::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let code = outcome(ufo_cli::run(cli).await);
    // Exit now: a terminal prompt's pending stdin read (after Ctrl-C) would keep the runtime waiting.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(code)
}

fn outcome(result: Result<Outcome, ufo_cli::CliError>) -> i32 {
    match result {
        Ok(Outcome::Success) => 0,
        Ok(Outcome::TaskUnsuccessful) => 2,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            1
        }
    }
}
