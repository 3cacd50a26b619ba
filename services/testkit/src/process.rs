//! A service binary running as a real child process for a test: started with args and env, its stdout and
//! stderr captured (shown when the test fails), readiness awaited by polling gRPC health or an HTTP URL,
//! and stopped on drop with SIGTERM (so it flushes its spans) and SIGKILL after a grace period.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::wait::WaitError;

/// How often readiness probes run.
const PROBE_INTERVAL: Duration = Duration::from_millis(25);

/// Why a process could not be started, got ready, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Spawning failed (missing binary, permissions).
    #[error("cannot start {name} ({program})")]
    Spawn {
        /// The process's label.
        name: String,
        /// The program path.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The process exited while the test waited for it.
    #[error("{name} exited with {status} before it was ready; its output:\n{logs}")]
    Exited {
        /// The process's label.
        name: String,
        /// Its exit status.
        status: ExitStatus,
        /// Its captured output.
        logs: String,
    },
    /// It did not become ready in time.
    #[error("{name} is not ready: {source}; its output:\n{logs}")]
    NotReady {
        /// The process's label.
        name: String,
        /// What was awaited.
        #[source]
        source: WaitError,
        /// Its captured output.
        logs: String,
    },
    /// Waiting for the process failed.
    #[error("cannot wait for {0}")]
    Wait(String, #[source] std::io::Error),
}

/// Builds a [`ServiceProcess`].
#[derive(Debug, Clone)]
pub struct ProcessBuilder {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    env_removes: Vec<OsString>,
    current_dir: Option<PathBuf>,
    grace: Duration,
}

impl ProcessBuilder {
    /// A process running `program`, labelled `name` in logs and errors.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            env_removes: Vec::new(),
            current_dir: None,
            grace: Duration::from_secs(10),
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Removes an inherited environment variable (e.g. `UFO_OTLP_ENDPOINT` from the developer's shell).
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env_removes.push(key.into());
        self
    }

    /// Runs it in `dir` (e.g. a temporary directory, so files it creates do not land in the source tree).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// How long a stop waits after SIGTERM before SIGKILL (default 10 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Starts the process with stdin closed and stdout/stderr captured.
    pub fn spawn(self) -> Result<ServiceProcess, ProcessError> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        for key in &self.env_removes {
            command.env_remove(key);
        }
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        let mut child = command.spawn().map_err(|source| ProcessError::Spawn {
            name: self.name.clone(),
            program: self.program.display().to_string(),
            source,
        })?;
        let logs = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(capture(out, logs.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(capture(err, logs.clone()));
        }
        Ok(ServiceProcess {
            name: self.name,
            child: Some(child),
            logs,
            readers,
            grace: self.grace,
        })
    }
}

/// Copies a pipe into the shared log buffer on its own thread until the process closes it.
fn capture(
    pipe: impl Read + Send + 'static,
    logs: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut logs = logs.lock().unwrap_or_else(PoisonError::into_inner);
            logs.push_str(&line);
            logs.push('\n');
        }
    })
}

/// A running child process; SIGTERM then SIGKILL when dropped.
pub struct ServiceProcess {
    name: String,
    child: Option<Child>,
    logs: Arc<Mutex<String>>,
    /// The threads copying stdout and stderr; finished once the process and its pipes are closed.
    readers: Vec<std::thread::JoinHandle<()>>,
    grace: Duration,
}

impl std::fmt::Debug for ServiceProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceProcess")
            .field("name", &self.name)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl ServiceProcess {
    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything it wrote to stdout and stderr so far.
    pub fn logs(&self) -> String {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lets the copying threads take in the exited process's last output (bounded: a grandchild could
    /// keep a pipe open).
    fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Fails with its output if it has exited.
    pub fn check_running(&mut self) -> Result<(), ProcessError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                self.drain_output();
                Err(ProcessError::Exited {
                    name: self.name.clone(),
                    status,
                    logs: self.logs(),
                })
            }
            Ok(None) => Ok(()),
            Err(e) => Err(ProcessError::Wait(self.name.clone(), e)),
        }
    }

    /// Waits until the gRPC health service at `url` (e.g. `http://127.0.0.1:50053`) reports the overall
    /// server SERVING; fails early if the process exits.
    pub async fn wait_grpc_ready(
        &mut self,
        url: &str,
        timeout: Duration,
    ) -> Result<(), ProcessError> {
        let url = url.to_owned();
        self.wait_ready(
            &format!("gRPC health SERVING at {url}"),
            timeout,
            move || {
                let url = url.clone();
                async move { grpc_serving(&url).await }
            },
        )
        .await
    }

    /// Waits until `GET url` answers 2xx; fails early if the process exits.
    pub async fn wait_http_ready(
        &mut self,
        url: &str,
        timeout: Duration,
    ) -> Result<(), ProcessError> {
        ufo_common::tls::install_crypto_provider();
        let client = reqwest::Client::new();
        let url = url.to_owned();
        self.wait_ready(&format!("HTTP 2xx from {url}"), timeout, move || {
            let (client, url) = (client.clone(), url.clone());
            async move {
                match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => Ok(Some(())),
                    Ok(r) => Err(format!("status {}", r.status())),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await
    }

    /// Waits until its output contains `needle` (e.g. a "listening" line).
    pub async fn wait_for_log(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> Result<(), ProcessError> {
        let logs = self.logs.clone();
        let needle = needle.to_owned();
        self.wait_ready(
            &format!("output containing {needle:?}"),
            timeout,
            move || {
                let found = logs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains(&needle);
                async move { Ok(found.then_some(())) }
            },
        )
        .await
    }

    async fn wait_ready<F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut probe: F,
    ) -> Result<(), ProcessError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<()>, String>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = String::from("nothing yet");
        loop {
            // An exited process will never become ready: fail at once with its output.
            self.check_running()?;
            match tokio::time::timeout_at(deadline, probe()).await {
                Ok(Ok(Some(()))) => return Ok(()),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => last = e,
                Err(_) => break,
            }
            if tokio::time::Instant::now() + PROBE_INTERVAL > deadline {
                break;
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        self.check_running()?;
        Err(ProcessError::NotReady {
            name: self.name.clone(),
            source: WaitError::new(what, timeout, last),
            logs: self.logs(),
        })
    }

    /// Sends SIGTERM and waits (polling, without blocking the runtime) for the exit; SIGKILL after the
    /// grace period. Returns the exit status.
    pub async fn stop(&mut self) -> Result<Option<ExitStatus>, ProcessError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        terminate(child);
        let deadline = Instant::now() + self.grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    self.drain_output();
                    return Ok(Some(status));
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(PROBE_INTERVAL).await;
                }
                Ok(None) => {
                    let _ = child.kill();
                    let status = child
                        .wait()
                        .map_err(|e| ProcessError::Wait(self.name.clone(), e))?;
                    self.child = None;
                    self.drain_output();
                    return Ok(Some(status));
                }
                Err(e) => return Err(ProcessError::Wait(self.name.clone(), e)),
            }
        }
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) -> Result<Option<ExitStatus>, ProcessError> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        let _ = child.kill();
        child
            .wait()
            .map(Some)
            .map_err(|e| ProcessError::Wait(self.name.clone(), e))
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        terminate(&mut child);
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() {
            eprintln!("----- output of {} -----\n{}", self.name, self.logs());
        }
    }
}

/// Asks the process to shut down gracefully (SIGTERM on Unix; elsewhere there is only kill).
fn terminate(child: &mut Child) {
    #[cfg(unix)]
    {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) with a pid we spawned and have not reaped, so it cannot name another process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = child.kill();
    }
}

/// Whether the gRPC server at `url` reports the overall service SERVING.
pub async fn grpc_serving(url: &str) -> Result<Option<()>, String> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|e| format!("health: {e}"))?;
    if response.into_inner().status == ServingStatus::Serving as i32 {
        Ok(Some(()))
    } else {
        Err("not serving".to_owned())
    }
}

/// A TCP port that was free a moment ago on 127.0.0.1, for a child process's listen address.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
