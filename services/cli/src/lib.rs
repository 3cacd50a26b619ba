//! `ufo`: the one command users run.
//!
//! Layout:
//! - [`config`]: flags and environment (`UFO_SERVER`, `UFO_GRPC`, `UFO_TOKEN`, ...), one subcommand per job.
//! - [`follow`]: a task's live event stream over gRPC, with prompts and resume after a dropped stream.
//! - [`render`]: how tasks, steps and events are printed.
//! - [`mcp`]: `ufo mcp`, the task tools for MCP clients over stdio.
//! - [`commands`]: the task subcommands; [`up`]: running the services locally (with [`tokens`] kept
//!   across restarts); [`doctor`]: what a first task needs, checked.
//! - [`error`]: failures with messages that say what to do.

pub mod commands;
pub mod config;
pub mod doctor;
pub mod error;
pub mod follow;
pub mod logfile;
pub mod mcp;
pub mod render;
pub mod tokens;
pub mod up;

pub use commands::Outcome;
pub use config::{Cli, Command};
pub use error::CliError;

use std::time::Duration;

/// Runs one parsed command line.
/// Returned boxed: the service's whole state machine is compiled here, once, in this crate. An `async fn`
/// would be compiled in each crate that awaits it instead (the binary, every test crate), since an async
/// function's body is instantiated where it is polled (docs/build-time.md, "Release build, 2026-11-30").
pub fn run(cli: Cli) -> futures::future::BoxFuture<'static, Result<Outcome, CliError>> {
    Box::pin(run_command(cli))
}

async fn run_command(cli: Cli) -> Result<Outcome, CliError> {
    let mut conn = cli.connection;
    let serves = matches!(cli.command, Command::Up(_) | Command::Doctor(_));
    if conn.token.is_none() && !serves {
        // No key given: the one `ufo up` keeps in its data directory (its admin key for admin commands).
        let admin = matches!(
            cli.command,
            Command::Prune(_)
                | Command::Executors(_)
                | Command::Desktops(_)
                | Command::Knowledge(config::KnowledgeCommand::Add(_))
                | Command::Knowledge(config::KnowledgeCommand::Share(_))
                | Command::Knowledge(config::KnowledgeCommand::Unshare(_))
        );
        conn.token = tokens::client_key(&config::client_data_dir(), admin);
    }
    let api = || {
        let timeouts = ufo_client::Timeouts {
            call: Some(Duration::from_secs(conn.call_timeout_seconds)),
            ..ufo_client::Timeouts::default()
        };
        ufo_client::AgentClient::new(&conn.server, conn.token.clone(), timeouts)
            .map_err(CliError::from)
    };
    match cli.command {
        Command::Up(args) => up::up(args, &conn).await,
        Command::Run(args) => commands::run(api()?, &conn, args).await,
        Command::Tasks(args) => commands::tasks(api()?, args).await,
        Command::Show(args) => commands::show(api()?, &conn, args).await,
        Command::Watch(args) => commands::watch(api()?, &conn, args).await,
        Command::Answer(args) => commands::answer(api()?, args).await,
        Command::Confirm(args) => commands::confirm(api()?, args).await,
        Command::Request(args) => commands::request(api()?, &conn, args).await,
        Command::Cancel(args) => commands::cancel(api()?, args).await,
        Command::Takeover(args) => commands::takeover(api()?, args).await,
        Command::Input(args) => commands::input(api()?, args).await,
        Command::Handback(args) => commands::handback(api()?, args).await,
        Command::Replay(args) => commands::replay(api()?, &conn, args).await,
        Command::Health(args) => commands::health(&conn, args).await,
        Command::Doctor(args) => doctor::doctor(args, &conn).await,
        Command::Screenshot(args) => commands::screenshot(api()?, args).await,
        Command::Prune(args) => commands::prune(api()?, args).await,
        Command::Mcp(args) => mcp::serve(api()?, &conn, args)
            .await
            .map(|()| Outcome::Success),
        Command::Knowledge(config::KnowledgeCommand::Add(args)) => {
            commands::knowledge_add(api()?, args).await
        }
        Command::Knowledge(config::KnowledgeCommand::Search(args)) => {
            commands::knowledge_search(api()?, args).await
        }
        Command::Knowledge(config::KnowledgeCommand::Share(args)) => {
            commands::knowledge_share(api()?, args, false).await
        }
        Command::Knowledge(config::KnowledgeCommand::Unshare(args)) => {
            commands::knowledge_share(api()?, args, true).await
        }
        Command::Rate(args) => commands::rate(api()?, args).await,
        Command::Record(args) => commands::record(api()?, args).await,
        Command::Executors(command) => commands::executors(api()?, command).await,
        Command::Desktops(command) => commands::desktops(api()?, command).await,
    }
}
