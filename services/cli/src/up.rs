//! `ufo up`: the zero-setup way to run the system on one machine. Refuses when its ports are taken;
//! starts `ufo-session` (embedded SQLite store), a local `ufo-executor` on this session's desktop or on a
//! private headless one it brings along, and `ufo-agent` as child processes, each with the tokens kept in
//! the data directory (so they survive restarts); checks the model endpoint; waits for each service to
//! report ready, prints the URLs, and on Ctrl-C (or when a child dies) stops them in reverse order with
//! SIGTERM, killing any that outlive the stop timeout.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::commands::Outcome;
use crate::config::{Connection, DesktopArg, ExecutorMode, UpArgs};
use crate::error::CliError;
/// How often readiness and liveness are checked.
const POLL: Duration = Duration::from_millis(100);

/// One started service.
struct Service {
    name: &'static str,
    child: Child,
    log: PathBuf,
    /// The tasks copying its stdout and stderr into its log.
    copies: Vec<tokio::task::JoinHandle<()>>,
}

impl Service {
    /// The last lines of its log, once what it printed before exiting is in the file (bounded: a
    /// grandchild holding the pipe open must not hold the report).
    async fn tail(&mut self) -> String {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            let copies = std::mem::take(&mut self.copies);
            let _ = tokio::time::timeout(Duration::from_secs(1), futures::future::join_all(copies))
                .await;
        }
        tail(&self.log)
    }
}

/// Where the services' logs go and how they are rotated.
struct Logs {
    dir: PathBuf,
    max_bytes: u64,
    keep: u32,
}

/// The desktop a local executor drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desktop {
    /// This session's.
    Current,
    /// A private Xvfb desktop the executor starts.
    Headless,
}

/// Programs a headless desktop needs (those the executor's `desktop` module starts) and the Debian
/// package of each.
pub const HEADLESS_PROGRAMS: [(&str, &str); 4] = [
    ("Xvfb", "xvfb"),
    ("dbus-daemon", "dbus"),
    ("/usr/libexec/at-spi-bus-launcher", "at-spi2-core"),
    ("xfwm4", "xfwm4"),
];

/// The headless desktop's programs that are missing, as Debian package names.
pub fn missing_headless_packages() -> Vec<&'static str> {
    if !cfg!(target_os = "linux") {
        return HEADLESS_PROGRAMS.iter().map(|(_, p)| *p).collect();
    }
    HEADLESS_PROGRAMS
        .iter()
        .filter(|(program, _)| find_program(program).is_none())
        .map(|(_, package)| *package)
        .collect()
}

/// `program` resolved through PATH (or as given when it is a path).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = Path::new(program);
    if path.is_absolute() {
        return path.is_file().then(|| path.to_path_buf());
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Which desktop `ufo up` gives a local executor, or why none.
pub fn choose_desktop(args: &UpArgs) -> Result<Option<Desktop>, String> {
    let desktop = match args.desktop {
        DesktopArg::None => return Ok(None),
        DesktopArg::Current if args.display_available() => Desktop::Current,
        DesktopArg::Current => {
            return Err("--desktop current, but DISPLAY is not set".to_owned());
        }
        DesktopArg::Headless => {
            let missing = missing_headless_packages();
            if !missing.is_empty() {
                return Err(format!(
                    "--desktop headless needs the Debian packages {} (apt-get install {})",
                    missing.join(" "),
                    missing.join(" ")
                ));
            }
            Desktop::Headless
        }
        DesktopArg::Auto if args.display_available() => Desktop::Current,
        DesktopArg::Auto if missing_headless_packages().is_empty() => Desktop::Headless,
        DesktopArg::Auto => return Ok(None),
    };
    Ok(Some(desktop))
}

/// The ports `ufo up` binds, each with what listens there.
pub fn ports(args: &UpArgs, with_executor: bool) -> Vec<(u16, &'static str, &'static str)> {
    let mut ports = vec![
        (args.session_port, "session service", "--session-port"),
        (args.grpc_port, "agent gRPC API", "--grpc-port"),
        (args.http_port, "agent REST API", "--http-port"),
    ];
    if with_executor {
        ports.push((args.executor_port, "executor", "--executor-port"));
    }
    ports
}

/// The ports of `ports` that cannot be bound on `host`, with the reason.
pub fn taken_ports(
    host: &str,
    ports: &[(u16, &'static str, &'static str)],
) -> Vec<(u16, &'static str, &'static str, String)> {
    ports
        .iter()
        .filter_map(|&(port, what, flag)| {
            std::net::TcpListener::bind((host, port))
                .err()
                .map(|e| (port, what, flag, e.to_string()))
        })
        .collect()
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
    let desktop = match args.executor {
        ExecutorMode::Never => None,
        ExecutorMode::Auto => choose_desktop(&args).ok().flatten(),
        ExecutorMode::Always => Some(
            choose_desktop(&args)
                .map_err(CliError::Up)?
                .ok_or_else(|| CliError::Up("--executor always, but --desktop none".to_owned()))?,
        ),
    };
    let start_executor = desktop.is_some();
    let host = &args.host;
    // A second `ufo up` (or anything else on these ports) must not half-start and then die on a bind.
    let taken = taken_ports(host, &ports(&args, start_executor));
    if !taken.is_empty() {
        let lines: Vec<String> = taken
            .iter()
            .map(|(port, what, flag, e)| format!("  {host}:{port} ({what}, {flag}): {e}"))
            .collect();
        return Err(CliError::Up(format!(
            "cannot start: ports already in use\n{}\nis another `ufo up` running? stop it (Ctrl-C in its \
             terminal), or choose other ports with the flags named above",
            lines.join("\n")
        )));
    }
    let logs = Logs {
        dir: args.data_dir.join("logs"),
        max_bytes: args.log_max_bytes,
        keep: args.log_files,
    };
    std::fs::create_dir_all(&logs.dir)?;
    let tokens = crate::tokens::load_or_create(
        &args.data_dir,
        conn.token.as_deref(),
        args.executor_token.as_deref(),
        args.session_token.as_deref(),
    )?;
    let admin = if args.admin_key {
        Some(crate::tokens::admin_key(&args.data_dir)?)
    } else {
        None
    };
    let ready_timeout = Duration::from_secs(args.ready_timeout_seconds);
    let session_url = format!("http://{host}:{}", args.session_port);
    let agent_grpc = format!("http://{host}:{}", args.grpc_port);
    let agent_http = format!("http://{host}:{}", args.http_port);
    let desktop_info = args.data_dir.join("desktop.env");

    let mut services: Vec<Service> = Vec::new();
    let mut previous_display = None;
    let outcome = async {
        // The model check runs while the services start; its findings are printed with the URLs.
        let model_check = command(&bin_dir, "ufo-agent", &args)?
            .arg("--check-model")
            .envs(args.model.env())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::Up(format!("cannot run ufo-agent --check-model: {e}")))?
            .wait_with_output();

        let mut session = command(&bin_dir, "ufo-session", &args)?;
        session
            .args(["--listen", &format!("{host}:{}", args.session_port)])
            .env(
                "UFO_SESSION_SQLITE_PATH",
                args.data_dir.join("session.sqlite3"),
            )
            .env("UFO_SESSION_AUTH_TOKEN", &tokens.session);
        services.push(spawn("ufo-session", session, &logs)?);
        wait_grpc(services.last_mut(), &session_url, ready_timeout).await?;

        let executor_url = if let Some(desktop) = desktop {
            let url = format!("http://{host}:{}", args.executor_port);
            let mut executor = command(&bin_dir, "ufo-executor", &args)?;
            executor.args(["--listen", &format!("{host}:{}", args.executor_port)]);
            // The executor refuses unauthenticated callers; the agent presents the same token.
            executor.env("UFO_EXECUTOR_TOKEN", &tokens.executor);
            executor.env("UFO_EXECUTOR_ALLOW_APPS", args.allow_apps.join(","));
            if desktop == Desktop::Headless {
                // The display this data directory used last is asked for again (a viewer or script
                // pointed at it keeps working); the file is written anew once the desktop is ready.
                if let Some(number) = desktop_number(&desktop_info) {
                    executor.args(["--desktop-display", &number.to_string()]);
                    previous_display = Some(number);
                }
                let _ = std::fs::remove_file(&desktop_info);
                executor
                    .args(["--desktop", "headless", "--desktop-info"])
                    .arg(&desktop_info)
                    .env_remove("DISPLAY")
                    .env_remove("DBUS_SESSION_BUS_ADDRESS");
            }
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
            // One person's own desktop: what a task opened stays for them to see (a pool's reset between
            // tasks is for shared desktops; docs/executors.md).
            .arg("--no-desktop-reset")
            .envs(args.model.env())
            .env("UFO_AGENT_SESSION_TOKEN", &tokens.session);
        match &admin {
            Some(admin) => agent
                .env(
                    "UFO_AGENT_API_KEYS",
                    format!("local:{},admin:{admin}", tokens.api),
                )
                .env("UFO_AGENT_API_ADMINS", "admin"),
            None => agent
                .env("UFO_AGENT_API_KEYS", format!("local:{}", tokens.api))
                .env_remove("UFO_AGENT_API_ADMINS"),
        };
        if let Some(url) = &executor_url {
            agent.args(["--default-executor", url]);
        }
        if start_executor || args.executor_token.is_some() {
            agent.env("UFO_AGENT_EXECUTOR_TOKEN", &tokens.executor);
        }
        services.push(spawn("ufo-agent", agent, &logs)?);
        wait_grpc(services.last_mut(), &agent_grpc, ready_timeout).await?;

        println!("ufo is up (logs in {})", logs.dir.display());
        println!("  REST API       {agent_http}   (OpenAPI at {agent_http}/openapi.json)");
        println!("  gRPC API       {agent_grpc}");
        println!(
            "  session store  {session_url}   (SQLite {})",
            args.data_dir.join("session.sqlite3").display()
        );
        match (&executor_url, desktop) {
            (Some(url), Some(Desktop::Current)) => {
                println!("  executor       {url}   (this desktop)")
            }
            (Some(url), Some(Desktop::Headless)) => {
                println!("  executor       {url}   (its own headless desktop)");
                print_desktop(&desktop_info, &agent_http);
                if let Some(before) = previous_display
                    && desktop_number(&desktop_info) != Some(before)
                {
                    println!(
                        "note: display :{before}, this data directory's last one, was taken; the \
                         desktop is on another one now"
                    );
                }
            }
            (Some(url), None) => println!("  executor       {url}   (remote)"),
            (None, _) => println!("  executor       none: {}", no_executor_reason(&args)),
        }
        if start_executor {
            println!(
                "  may launch     {}   (change with --allow-app / UFO_UP_ALLOW_APPS)",
                args.allow_apps.join(", ")
            );
        }
        if let Some(otlp) = &args.otlp_endpoint {
            println!("  traces         exported to {otlp}");
        }
        if let Ok(output) = model_check.await {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                if let Some(problem) = line.strip_prefix("problem: ") {
                    println!("warning: {problem}");
                } else if let Some(note) = line.strip_prefix("note: ") {
                    println!("note: {note}");
                }
            }
            if !output.status.success() && output.stdout.is_empty() {
                println!(
                    "warning: the model endpoint check failed: {}",
                    tail_text(&String::from_utf8_lossy(&output.stderr))
                );
            }
        }
        if conn.token.is_none() {
            println!(
                "API key (kept in {}, the same after a restart):\n  export UFO_TOKEN={}",
                crate::tokens::path(&args.data_dir).display(),
                tokens.api
            );
        }
        if let Some(admin) = &admin {
            println!(
                "Admin key (ufo prune, ufo knowledge add; kept in {}; the CLI uses it for those when no \
                 token is given):\n  export UFO_ADMIN_TOKEN={admin}",
                crate::tokens::path(&args.data_dir).display()
            );
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

/// Why `ufo up` starts no executor, with what to do.
fn no_executor_reason(args: &UpArgs) -> String {
    match (args.executor, choose_desktop(args)) {
        (ExecutorMode::Never, _) => "--executor never".to_owned(),
        (_, Err(e)) => e,
        (_, Ok(_)) => format!(
            "no desktop here (no DISPLAY, and a headless one needs: apt-get install {}); pass \
             --remote-executor or name one per task with `ufo run --executor`",
            missing_headless_packages().join(" ")
        ),
    }
}

/// The X display number in a desktop info file (`DISPLAY=:N`).
fn desktop_number(info: &Path) -> Option<u32> {
    std::fs::read_to_string(info)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("DISPLAY=:"))?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// How to look at the headless desktop.
fn print_desktop(info: &Path, agent_http: &str) {
    let text = std::fs::read_to_string(info).unwrap_or_default();
    let display = text
        .lines()
        .find_map(|l| l.strip_prefix("DISPLAY="))
        .unwrap_or("?");
    println!(
        "  desktop        Xvfb display {display} (stopped with ufo up; DISPLAY and bus address in {})",
        info.display()
    );
    println!(
        "                 see it: the viewer at {agent_http}/ shows it live on each task's page, with Take over / Hand back (docs/live.md)"
    );
}

fn tail_text(text: &str) -> String {
    text.lines().last().unwrap_or_default().to_owned()
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
    if name == "ufo-agent" {
        // `ufo up`'s own model settings (UFO_LLM_BASE_URL…) reach the agent under its names
        // (ModelArgs::env); inherited as they are, the agent would refuse them as names it no longer reads.
        for (old, _) in ufo_common::agent_env::RENAMED {
            command.env_remove(old);
        }
    }
    if let Some(otlp) = &args.otlp_endpoint {
        command.args(["--otlp-endpoint", otlp]);
    }
    Ok(command)
}

fn spawn(name: &'static str, mut command: Command, logs: &Logs) -> Result<Service, CliError> {
    let log = logs.dir.join(format!("{name}.log"));
    let mut file = crate::logfile::RotatingLog::open(&log, logs.max_bytes, logs.keep)?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    file.write_line(
        format!(
            "--- ufo up starts {name} (unix time {started}); earlier runs' lines are above ---"
        )
        .as_bytes(),
    )?;
    let file = std::sync::Arc::new(std::sync::Mutex::new(file));
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| CliError::Up(format!("cannot start {name}: {e}")))?;
    let mut copies = Vec::new();
    if let Some(out) = child.stdout.take() {
        copies.push(crate::logfile::copy_lines(out, file.clone()));
    }
    if let Some(err) = child.stderr.take() {
        copies.push(crate::logfile::copy_lines(err, file));
    }
    Ok(Service {
        name,
        child,
        log,
        copies,
    })
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
            let tail = service.tail().await;
            return Err(CliError::Up(format!(
                "{} exited ({status}) while starting; its log ({}):\n{}",
                service.name,
                service.log.display(),
                tail
            )));
        }
        if serving(url, Duration::from_secs(1)).await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let tail = service.tail().await;
            return Err(CliError::Up(format!(
                "{} did not become ready at {url} within {timeout:?}; its log ({}):\n{}",
                service.name,
                service.log.display(),
                tail
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the gRPC health service at `url` says SERVING (false when nothing answers within
/// `connect_timeout`).
pub(crate) async fn serving(url: &str, connect_timeout: Duration) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(url.to_owned()) else {
        return false;
    };
    let Ok(channel) = endpoint.connect_timeout(connect_timeout).connect().await else {
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
                        let tail = service.tail().await;
                        return Err(CliError::Up(format!(
                            "{} exited ({status}); its log ({}):\n{}",
                            service.name,
                            service.log.display(),
                            tail
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
        if !matches!(service.child.try_wait(), Ok(Some(_))) {
            terminate(&service.child);
            if tokio::time::timeout(timeout, service.child.wait())
                .await
                .is_err()
            {
                eprintln!(
                    "{} did not stop within {timeout:?}; killing it",
                    service.name
                );
                let _ = service.child.kill().await;
            }
        }
        // Its last lines (how it stopped) are in the log before `ufo up` exits.
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            futures::future::join_all(std::mem::take(&mut service.copies)),
        )
        .await;
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
