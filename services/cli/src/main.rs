//! `ufo`: parses the command line, runs the command, and turns failures into a message and exit code
//! (1 for errors, 2 when a followed task failed or was cancelled).

use std::process::ExitCode;

use clap::Parser as _;
use ufo_cli::{Cli, Outcome};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match ufo_cli::run(cli).await {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::TaskUnsuccessful) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}
