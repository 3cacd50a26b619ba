//! `ufo up`: the zero-setup way to run the system on one machine. Starts `ufo-session` (embedded SQLite
//! store), a local `ufo-executor` when a desktop is available, and `ufo-agent` as child processes, waits
//! for each to report ready, prints the URLs, and on Ctrl-C (or when a child dies) stops them in reverse
//! order with SIGTERM, killing any that outlive the stop timeout.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::commands::Outcome;
use crate::config::{Connection, ExecutorMode, UpArgs};
use crate::error::CliError;

/// How often readiness and liveness are checked.
const POLL: Duration = Duration::from_millis(100);

/// One started service.
struct Service {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// `ufo up`.
pub async fn up(args: UpArgs, conn: &Connection) -> Result<Outcome, CliError> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    let logs = args.data_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let ready_timeout = Duration::from_secs(args.ready_timeout_seconds);
    let host = &args.host;
    let session_url = format!("http://{host}:{}", args.session_port);
    let agent_grpc = format!("http://{host}:{}", args.grpc_port);
    let agent_http = format!("http://{host}:{}", args.http_port);
    let token = conn
        .token
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let executor_token = args
        .executor_token
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let start_executor = match args.executor {
        ExecutorMode::Always => true,
        ExecutorMode::Never => false,
        ExecutorMode::Auto => args.desktop_available(),
    };

    let mut services: Vec<Service> = Vec::new();
    let outcome = async {
        let mut session = command(&bin_dir, "ufo-session", &args)?;
        session
            .args(["--listen", &format!("{host}:{}", args.session_port)])
            .env("UFO_SESSION_SQLITE_PATH", args.data_dir.join("session.sqlite3"));
        services.push(spawn("ufo-session", session, &logs)?);
        wait_grpc(services.last_mut(), &session_url, ready_timeout).await?;

        let executor_url = if start_executor {
            let url = format!("http://{host}:{}", args.executor_port);
            let mut executor = command(&bin_dir, "ufo-executor", &args)?;
            executor.args(["--listen", &format!("{host}:{}", args.executor_port)]);
            // The executor refuses unauthenticated callers; the agent presents the same token.
            executor.env("UFO_EXECUTOR_TOKEN", &executor_token);
            services.push(spawn("ufo-executor", executor, &logs)?);
            wait_grpc(services.last_mut(), &url, ready_timeout).await?;
            Some(url)
        } else {
            args.remote_executor.clone()
        };

        let mut agent = command(&bin_dir, "ufo-agent", &args)?;
        agent
            .args(["--listen", &format!("{host}:{}", args.grpc_port)])
            .args(["--http-listen", &format!("{host}:{}", args.http_port)])
            .args(["--session-url", &session_url])
            .env("UFO_API_KEYS", format!("local:{token}"));
        if let Some(url) = &executor_url {
            agent.args(["--default-executor", url]);
        }
        if start_executor || args.executor_token.is_some() {
            agent.env("UFO_EXECUTOR_TOKEN", &executor_token);
        }
        services.push(spawn("ufo-agent", agent, &logs)?);
        wait_grpc(services.last_mut(), &agent_grpc, ready_timeout).await?;

        println!("ufo is up (logs in {})", logs.display());
        println!("  REST API       {agent_http}   (OpenAPI at {agent_http}/openapi.json)");
        println!("  gRPC API       {agent_grpc}");
        println!("  session store  {session_url}   (SQLite {})", args.data_dir.join("session.sqlite3").display());
        match (&executor_url, start_executor) {
            (Some(url), true) => println!("  executor       {url}   (this desktop)"),
            (Some(url), false) => println!("  executor       {url}   (remote)"),
            (None, _) => println!(
                "  executor       none: no desktop here; pass --remote-executor or name one per task with `ufo run --executor`"
            ),
        }
        if let Some(otlp) = &args.otlp_endpoint {
            println!("  traces         exported to {otlp}");
        }
        if conn.token.is_none() {
            println!("API key for this run:\n  export UFO_TOKEN={token}");
        }
        println!("Ctrl-C stops everything.");
        supervise(&mut services).await
    }
    .await;
    stop_all(
        &mut services,
        Duration::from_secs(args.stop_timeout_seconds),
    )
    .await;
    outcome
}

/// A command for service binary `name` in `bin_dir`, with telemetry flags passed through.
fn command(bin_dir: &Path, name: &'static str, args: &UpArgs) -> Result<Command, CliError> {
    let program = bin_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !program.is_file() {
        return Err(CliError::Up(format!(
            "cannot find {} (build the services with `cargo build --release --bins`, or pass --bin-dir)",
            program.display()
        )));
    }
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).kill_on_drop(true);
    if let Some(otlp) = &args.otlp_endpoint {
        command.args(["--otlp-endpoint", otlp]);
    }
    Ok(command)
}

fn spawn(name: &'static str, mut command: Command, logs: &Path) -> Result<Service, CliError> {
    let log = logs.join(format!("{name}.log"));
    let file = std::fs::File::create(&log)?;
    command.stdout(file.try_clone()?).stderr(file);
    let child = command
        .spawn()
        .map_err(|e| CliError::Up(format!("cannot start {name}: {e}")))?;
    Ok(Service { name, child, log })
}

/// Waits until the service's gRPC health reports SERVING; fails with its log tail if it exits first.
async fn wait_grpc(
    service: Option<&mut Service>,
    url: &str,
    timeout: Duration,
) -> Result<(), CliError> {
    let Some(service) = service else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(status) = service.child.try_wait()? {
            return Err(CliError::Up(format!(
                "{} exited ({status}) while starting; its log ({}):\n{}",
                service.name,
                service.log.display(),
                tail(&service.log)
            )));
        }
        if serving(url).await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::Up(format!(
                "{} did not become ready at {url} within {timeout:?}; its log ({}):\n{}",
                service.name,
                service.log.display(),
                tail(&service.log)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn serving(url: &str) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(url.to_owned()) else {
        return false;
    };
    let Ok(channel) = endpoint
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
    else {
        return false;
    };
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32)
}

/// Runs until Ctrl-C (success) or until a service exits on its own (an error naming it).
async fn supervise(services: &mut [Service]) -> Result<Outcome, CliError> {
    let signal = ufo_common::shutdown::wait_for_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => {
                println!("stopping…");
                return Ok(Outcome::Success);
            }
            () = tokio::time::sleep(POLL) => {
                for service in services.iter_mut() {
                    if let Some(status) = service.child.try_wait()? {
                        return Err(CliError::Up(format!(
                            "{} exited ({status}); its log ({}):\n{}",
                            service.name,
                            service.log.display(),
                            tail(&service.log)
                        )));
                    }
                }
            }
        }
    }
}

/// Stops the services in reverse start order: SIGTERM, then kill after `timeout`.
async fn stop_all(services: &mut Vec<Service>, timeout: Duration) {
    while let Some(mut service) = services.pop() {
        if matches!(service.child.try_wait(), Ok(Some(_))) {
            continue;
        }
        terminate(&service.child);
        match tokio::time::timeout(timeout, service.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "{} did not stop within {timeout:?}; killing it",
                    service.name
                );
                let _ = service.child.kill().await;
            }
        }
    }
}

/// Asks a child to shut down gracefully (SIGTERM on Unix, where services flush spans and drain; on
/// Windows the console's Ctrl-C already reached it, so this only kills a straggler).
fn terminate(child: &Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child, not yet reaped (try_wait returned None), so the pid is its.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    #[cfg(not(unix))]
    let _ = child;
}

/// The last lines of a log file, for error messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // An error's backtrace (RUST_BACKTRACE) would push the error itself out of the tail.
    let text = text.split("Stack backtrace:").next().unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
