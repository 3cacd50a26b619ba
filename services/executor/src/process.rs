//! Long-lived programs a caller talks to over their standard input and output: the agent's MCP servers
//! that must run on the desktop's machine (`transport: {type: stdio, on: desktop}`, docs/mcp.md). Off
//! unless the executor is started with `--mcp-stdio-allow`. The tools (`process_start`,
//! `process_write`, `process_read`, `process_stop`) are in [`crate::tools::process`]; the rules here:
//!
//! - the program is on the allow-list: a bare name is looked up on the executor's own `PATH`, an
//!   absolute path only when that path is itself on the list; batch files and shells are refused
//!   (a shell on the list is refused at start);
//! - no shell: the program is started directly (`execve`) with its arguments as given, its own process
//!   group (Linux) and `PR_SET_PDEATHSIG` = SIGKILL, so the executor's death ends it; it inherits the
//!   executor's environment (the desktop's `DISPLAY` and session: it acts on this desktop) without the
//!   executor's own settings (`UFO_EXECUTOR_*`, its token among them), plus the caller's variables;
//! - its working directory is the executor's, or one the caller asks for inside `--mcp-stdio-workdirs`;
//! - a process belongs to its caller (the connection it was started over: a dial-in peer address, or
//!   one dial-out stream); another caller's id is refused;
//! - it is killed (with its group) when its caller stops it, when its dial-out stream ends, when no call
//!   of its caller touched it for `--mcp-stdio-idle-ms`, and when the executor stops;
//! - output is kept until the caller acknowledges it (reads carry the offset they start from, so a
//!   retried read or write is harmless), bounded: a read returns whole lines of at most
//!   `--mcp-stdio-max-read-bytes` (one longer line alone), and a line longer than
//!   `--mcp-stdio-max-message-bytes` ends the process; the program is not read further while that much
//!   is unacknowledged. Its standard error keeps the last `--mcp-stdio-stderr-bytes`, for the reason
//!   it stopped.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// The prefix of the executor's own settings in its environment, removed from a program's.
const OWN_SETTINGS: &str = "UFO_EXECUTOR_";

/// Who calls: the connection a call came over. A process answers only its starter's calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller(pub String);

impl Caller {
    /// A caller in this process (tests, `testing::TestDesktop`).
    pub fn local() -> Self {
        Self("local".to_owned())
    }
}

/// The settings, from the flags (see [`crate::config::Config`]).
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Programs allowed (empty: the tools are off).
    pub allow: Vec<String>,
    /// Directories (canonical) a caller's working directory must resolve inside (empty: the caller may
    /// not choose one).
    pub workdirs: Vec<PathBuf>,
    /// Most processes at once, for all callers.
    pub max_processes: usize,
    /// Most bytes one read returns (whole lines; one longer line alone).
    pub max_read_bytes: usize,
    /// Longest line (message) the program may write.
    pub max_message_bytes: usize,
    /// Bytes of standard error kept (the last ones).
    pub stderr_bytes: usize,
    /// A process none of its caller's calls touched for this long is killed.
    pub idle: Duration,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            workdirs: Vec::new(),
            max_processes: 16,
            max_read_bytes: 1024 * 1024,
            max_message_bytes: 4 * 1024 * 1024,
            stderr_bytes: 8 * 1024,
            idle: Duration::from_millis(60_000),
        }
    }
}

/// Why a process call is refused or failed (the text is the command's error).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProcessError {
    /// No allow-list.
    #[error(
        "starting programs is off on this executor (start it with --mcp-stdio-allow PROGRAM,... to allow MCP servers on the desktop)"
    )]
    Off,
    /// The program is not on the allow-list.
    #[error("program {0:?} is not on the executor's --mcp-stdio-allow list; allowed: {1}")]
    NotAllowed(String, String),
    /// A bare name not on `PATH`.
    #[error("program {0:?} is allowed but not found on the executor's PATH")]
    NotFound(String),
    /// A batch file or shell.
    #[error("program {0:?} is a batch file or a shell, which would run any command line")]
    Shell(String),
    /// NUL or `=` where it cannot be.
    #[error("{0}")]
    Bad(String),
    /// A working directory outside `--mcp-stdio-workdirs` (or any, without it).
    #[error("working directory {0:?}: {1}")]
    Cwd(String, String),
    /// Too many processes.
    #[error("{0} processes are running, the executor's limit (--mcp-stdio-max-processes)")]
    TooMany(usize),
    /// Spawning failed.
    #[error("cannot start {0:?}: {1}")]
    Spawn(String, String),
    /// No such process.
    #[error("no process {0} (it ended, was stopped, or never existed)")]
    Unknown(String),
    /// Another caller's process.
    #[error("process {0} belongs to another caller")]
    NotYours(String),
    /// An offset the process cannot serve.
    #[error("{0}")]
    Offset(String),
    /// Writing to its input failed (it exited).
    #[error("cannot write to process {0}: {1}")]
    Write(String, String),
}

/// Output kept until acknowledged.
#[derive(Debug, Default)]
struct OutBuf {
    /// The offset of `data[0]` in everything the program wrote.
    base: u64,
    /// Unacknowledged bytes.
    data: Vec<u8>,
    /// Its standard output ended.
    eof: bool,
    /// It exited (and how).
    exited: Option<Option<i32>>,
    /// Why the executor ended it, if it did.
    ended: Option<String>,
}

struct Proc {
    owner: Caller,
    program: String,
    pid: Option<u32>,
    stdin: tokio::sync::Mutex<(Option<tokio::process::ChildStdin>, u64)>,
    out: std::sync::Mutex<OutBuf>,
    /// Output arrived, it ended, or it was acknowledged.
    changed: Notify,
    stderr: std::sync::Mutex<Vec<u8>>,
    last_used: std::sync::Mutex<Instant>,
    /// Reads waiting now (a waiting read is a live caller).
    waiting: AtomicUsize,
    stop: CancellationToken,
}

impl Proc {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stderr))
            .trim()
            .to_owned()
    }

    fn kill(&self, why: &str) {
        {
            let mut out = lock(&self.out);
            if out.ended.is_none() && out.exited.is_none() {
                out.ended = Some(why.to_owned());
            }
        }
        kill_group(self.pid);
        self.stop.cancel();
        self.changed.notify_waiters();
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A started process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its id for the other calls.
    pub id: String,
    /// Its system process id.
    pub pid: Option<u32>,
    /// The program started (resolved).
    pub program: String,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// Whole lines (lossy UTF-8).
    pub data: String,
    /// The offset after them (the next read's).
    pub offset: u64,
    /// The program's output ended and it exited: nothing more will come.
    pub eof: bool,
    /// Its exit code, once it exited (none: killed by a signal).
    pub exit_code: Option<i32>,
    /// Why it ended and the last of its standard error, at the end.
    pub reason: String,
}

/// Every process the executor runs for callers.
pub struct Processes {
    config: ProcessConfig,
    table: std::sync::Mutex<HashMap<String, Arc<Proc>>>,
    counter: AtomicU64,
    env: Vec<(String, String)>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("allow", &self.config.allow)
            .finish_non_exhaustive()
    }
}

impl Processes {
    /// The table, with `env` added to every program's environment (e.g. a private desktop's DISPLAY).
    pub fn new(config: ProcessConfig, env: Vec<(String, String)>) -> Arc<Self> {
        let me = Arc::new(Self {
            config,
            table: std::sync::Mutex::new(HashMap::new()),
            counter: AtomicU64::new(0),
            env,
        });
        if me.enabled() {
            // Idle processes are ended; the task stops with the table.
            let weak = Arc::downgrade(&me);
            let every =
                (me.config.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        let Some(me) = weak.upgrade() else { return };
                        me.reap_idle();
                    }
                });
            }
        }
        me
    }

    /// Whether starting programs is on.
    pub fn enabled(&self) -> bool {
        !self.config.allow.is_empty()
    }

    /// The settings.
    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    fn reap_idle(&self) {
        let idle: Vec<(String, Arc<Proc>)> = lock(&self.table)
            .iter()
            .filter(|(_, p)| {
                p.waiting.load(Ordering::SeqCst) == 0
                    && lock(&p.last_used).elapsed() > self.config.idle
            })
            .map(|(id, p)| (id.clone(), p.clone()))
            .collect();
        for (id, p) in idle {
            tracing::info!(process = %id, program = %p.program, owner = %p.owner.0, "MCP stdio process idle: killed");
            p.kill(&format!(
                "killed: no call from its caller for {} ms (--mcp-stdio-idle-ms)",
                self.config.idle.as_millis()
            ));
            lock(&self.table).remove(&id);
        }
    }

    /// Ends every process of `caller` (its dial-out stream ended); returns how many.
    pub fn caller_gone(&self, caller: &Caller) -> usize {
        let gone: Vec<(String, Arc<Proc>)> = {
            let mut table = lock(&self.table);
            let ids: Vec<String> = table
                .iter()
                .filter(|(_, p)| &p.owner == caller)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| table.remove(&id).map(|p| (id, p)))
                .collect()
        };
        for (id, p) in &gone {
            tracing::info!(process = %id, program = %p.program, "MCP stdio process killed: its caller's connection ended");
            p.kill("killed: its caller's connection ended");
        }
        gone.len()
    }

    /// How many processes run now.
    pub fn len(&self) -> usize {
        lock(&self.table).len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Proc>, ProcessError> {
        let p = lock(&self.table)
            .get(id)
            .cloned()
            .ok_or_else(|| ProcessError::Unknown(short(id)))?;
        if &p.owner != caller {
            return Err(ProcessError::NotYours(short(id)));
        }
        p.touch();
        Ok(p)
    }

    /// `program`'s path if the allow-list lets it run.
    fn check(&self, program: &str) -> Result<PathBuf, ProcessError> {
        if !self.enabled() {
            return Err(ProcessError::Off);
        }
        if program.contains('\0') {
            return Err(ProcessError::Bad("the program contains a NUL byte".into()));
        }
        if !self.config.allow.iter().any(|a| a == program) {
            return Err(ProcessError::NotAllowed(
                short(program),
                self.config.allow.join(", "),
            ));
        }
        let p = Path::new(program);
        let found = if p.is_absolute() {
            p.is_file().then(|| p.to_path_buf())
        } else {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .find_map(|dir| crate::shell::executable_in(&dir, program))
            })
        };
        let found = found.ok_or_else(|| ProcessError::NotFound(program.to_owned()))?;
        let ext = found
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let stem = found
            .file_stem()
            .map(|s| s.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if ext == "bat" || ext == "cmd" || crate::shell::SHELLS.contains(&stem.as_str()) {
            return Err(ProcessError::Shell(program.to_owned()));
        }
        Ok(found)
    }

    /// Starts `program` for `caller` (see the module doc).
    pub fn start(
        &self,
        caller: &Caller,
        program: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&str>,
    ) -> Result<Started, ProcessError> {
        let path = self.check(program)?;
        for (i, a) in args.iter().enumerate() {
            if a.contains('\0') {
                return Err(ProcessError::Bad(format!(
                    "argument {} contains a NUL byte",
                    i + 1
                )));
            }
        }
        for (k, v) in env {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(ProcessError::Bad(format!(
                    "environment variable {k:?}: a name without '=' or NUL, a value without NUL"
                )));
            }
        }
        let cwd = cwd.map(|dir| self.workdir(dir)).transpose()?;
        if self.len() >= self.config.max_processes {
            return Err(ProcessError::TooMany(self.config.max_processes));
        }
        let mut cmd = tokio::process::Command::new(&path);
        cmd.args(args);
        // The executor's own settings (its token, its keys' paths) are not the program's business.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with(OWN_SETTINGS) {
                cmd.env_remove(name);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &cwd {
            cmd.current_dir(dir);
        }
        guard_child(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| ProcessError::Spawn(program.to_owned(), e.to_string()))?;
        let pid = child.id();
        let id = self.new_id();
        let proc = Arc::new(Proc {
            owner: caller.clone(),
            program: path.display().to_string(),
            pid,
            stdin: tokio::sync::Mutex::new((child.stdin.take(), 0)),
            out: std::sync::Mutex::new(OutBuf::default()),
            changed: Notify::new(),
            stderr: std::sync::Mutex::new(Vec::new()),
            last_used: std::sync::Mutex::new(Instant::now()),
            waiting: AtomicUsize::new(0),
            stop: CancellationToken::new(),
        });
        // The process's life, under the command that started it (and so in its caller's trace).
        let span = tracing::info_span!(
            "executor.mcp_stdio",
            process = %id,
            program = %proc.program,
            pid = ?pid,
            owner = %caller.0,
            exit_code = tracing::field::Empty,
            ended = tracing::field::Empty,
        );
        let cap = self.config.max_message_bytes;
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_stdout(proc.clone(), stdout, cap).instrument(span.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(
                read_stderr(proc.clone(), stderr, self.config.stderr_bytes)
                    .instrument(span.clone()),
            );
        }
        tokio::spawn(supervise(proc.clone(), child).instrument(span));
        lock(&self.table).insert(id.clone(), proc.clone());
        tracing::info!(process = %id, program = %proc.program, pid = ?pid, owner = %caller.0, "MCP stdio process started");
        Ok(Started {
            id,
            pid,
            program: proc.program.clone(),
        })
    }

    /// `dir` resolved, if it is inside one of the allowed working directories.
    fn workdir(&self, dir: &str) -> Result<PathBuf, ProcessError> {
        let refuse = |why: String| ProcessError::Cwd(short(dir), why);
        if self.config.workdirs.is_empty() {
            return Err(refuse(
                "this executor lets no caller choose a working directory (--mcp-stdio-workdirs); leave cwd out to start in the executor's"
                    .into(),
            ));
        }
        if dir.contains('\0') {
            return Err(refuse("it contains a NUL byte".into()));
        }
        if !Path::new(dir).is_absolute() {
            return Err(refuse("it must be an absolute path".into()));
        }
        let real = std::fs::canonicalize(dir).map_err(|e| refuse(e.to_string()))?;
        if !real.is_dir() {
            return Err(refuse("not a directory".into()));
        }
        if !self.config.workdirs.iter().any(|w| real.starts_with(w)) {
            let allowed: Vec<String> = self
                .config
                .workdirs
                .iter()
                .map(|w| w.display().to_string())
                .collect();
            return Err(refuse(format!(
                "it resolves to {} which is outside --mcp-stdio-workdirs ({})",
                real.display(),
                allowed.join(", ")
            )));
        }
        Ok(real)
    }

    fn new_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let word = |salt: u64| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(n);
            h.write_u64(salt);
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.finish()
        };
        format!("p{:016x}{:016x}", word(1), word(2))
    }

    /// Writes `data` at `offset` of the process's input (bytes before what was already written are
    /// skipped, so a retried write is harmless); returns the offset after it.
    pub async fn write(
        &self,
        caller: &Caller,
        id: &str,
        offset: u64,
        data: &str,
    ) -> Result<u64, ProcessError> {
        let p = self.get(caller, id)?;
        let mut stdin = p.stdin.lock().await;
        let written = stdin.1;
        let end = offset + data.len() as u64;
        if offset > written {
            return Err(ProcessError::Offset(format!(
                "offset {offset} is past the {written} bytes written so far"
            )));
        }
        if end <= written {
            return Ok(written);
        }
        let skip = usize::try_from(written - offset).unwrap_or(usize::MAX);
        let bytes = data.as_bytes().get(skip..).unwrap_or_default();
        let Some(pipe) = stdin.0.as_mut() else {
            return Err(ProcessError::Write(short(id), "its input is closed".into()));
        };
        let wrote = async {
            pipe.write_all(bytes).await?;
            pipe.flush().await
        };
        let result = tokio::select! {
            () = p.stop.cancelled() => Err(std::io::Error::other("it was stopped")),
            r = wrote => r,
        };
        if let Err(e) = result {
            stdin.0 = None;
            return Err(ProcessError::Write(short(id), e.to_string()));
        }
        stdin.1 = end;
        Ok(end)
    }

    /// Output from `offset` (acknowledging what is before it), waiting up to `wait` for a whole line or
    /// the end.
    pub async fn read(
        &self,
        caller: &Caller,
        id: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<Read, ProcessError> {
        let p = self.get(caller, id)?;
        p.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&p);
        let until = tokio::time::Instant::now() + wait;
        loop {
            let notified = p.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut out = lock(&p.out);
                let end = out.base + out.data.len() as u64;
                if offset < out.base || offset > end {
                    return Err(ProcessError::Offset(format!(
                        "offset {offset} is outside the unread output ({}..={end})",
                        out.base
                    )));
                }
                // Acknowledged: dropped.
                let ack = usize::try_from(offset - out.base).unwrap_or(0);
                if ack > 0 {
                    out.data.drain(..ack);
                    out.base = offset;
                    p.changed.notify_waiters();
                }
                let done = out.eof && out.exited.is_some();
                let mut lines = whole_lines(&out.data, self.config.max_read_bytes);
                // At the end, an unfinished last line comes as it is.
                if done && lines == 0 {
                    lines = out.data.len();
                }
                if lines > 0
                    || (done && out.data.is_empty())
                    || tokio::time::Instant::now() >= until
                {
                    let data = String::from_utf8_lossy(&out.data[..lines]).into_owned();
                    let eof = done && lines == out.data.len();
                    let (exit_code, reason) = if eof {
                        let code = out.exited.flatten();
                        let why = out.ended.clone().unwrap_or_else(|| match code {
                            Some(c) => format!("exited with code {c}"),
                            None => "killed by a signal".to_owned(),
                        });
                        let stderr = p.stderr_text();
                        (
                            code,
                            if stderr.is_empty() {
                                why
                            } else {
                                format!("{why}; its stderr ends: {stderr}")
                            },
                        )
                    } else {
                        (None, String::new())
                    };
                    if eof {
                        drop(out);
                        lock(&self.table).remove(id);
                    }
                    return Ok(Read {
                        data,
                        offset: offset + lines as u64,
                        eof,
                        exit_code,
                        reason,
                    });
                }
            }
            p.touch();
            let _ = tokio::time::timeout_at(until, notified).await;
        }
    }

    /// Kills the process and its group; returns the last of its standard error.
    pub fn stop(&self, caller: &Caller, id: &str) -> Result<String, ProcessError> {
        let p = self.get(caller, id)?;
        lock(&self.table).remove(id);
        p.kill("stopped by its caller");
        tracing::info!(process = %id, program = %p.program, "MCP stdio process stopped");
        Ok(p.stderr_text())
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for p in lock(&self.table).values() {
            p.kill("the executor stopped");
        }
    }
}

struct Waiting<'a>(&'a Proc);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// The length of the whole lines at the start of `data` that fit `max` (at least one line, however
/// long).
fn whole_lines(data: &[u8], max: usize) -> usize {
    let mut end = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            if end > 0 && i + 1 > max {
                break;
            }
            end = i + 1;
        }
    }
    end
}

async fn read_stdout(p: Arc<Proc>, mut stdout: tokio::process::ChildStdout, cap: usize) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Not read further while a full message's worth is unacknowledged.
        loop {
            let notified = p.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&p.out).data.len() < cap || p.stop.is_cancelled() {
                break;
            }
            notified.await;
        }
        let n = tokio::select! {
            () = p.stop.cancelled() => 0,
            r = stdout.read(&mut buf) => r.unwrap_or(0),
        };
        let mut out = lock(&p.out);
        if n == 0 {
            out.eof = true;
            drop(out);
            p.changed.notify_waiters();
            return;
        }
        out.data.extend_from_slice(&buf[..n]);
        // The part after the last newline is one unfinished line.
        let open = out
            .data
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(out.data.len(), |i| out.data.len() - i - 1);
        drop(out);
        if open > cap {
            p.kill(&format!(
                "killed: it wrote a line longer than {cap} bytes (--mcp-stdio-max-message-bytes)"
            ));
        }
        p.changed.notify_waiters();
    }
}

async fn read_stderr(p: Arc<Proc>, mut stderr: tokio::process::ChildStderr, keep: usize) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            () = p.stop.cancelled() => 0,
            r = stderr.read(&mut buf) => r.unwrap_or(0),
        };
        if n == 0 {
            return;
        }
        let mut kept = lock(&p.stderr);
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > keep {
            let cut = kept.len() - keep;
            kept.drain(..cut);
        }
    }
}

/// Waits for the process to exit (or kills it when told), and records how it ended.
async fn supervise(p: Arc<Proc>, mut child: tokio::process::Child) {
    let status = tokio::select! {
        s = child.wait() => s.ok(),
        () = p.stop.cancelled() => {
            kill_group(p.pid);
            let _ = child.kill().await;
            child.wait().await.ok()
        }
    };
    // What the program left behind in its group goes too.
    kill_group(p.pid);
    let code = status.and_then(|s| s.code());
    let span = tracing::Span::current();
    if let Some(c) = code {
        span.record("exit_code", c);
    }
    let mut out = lock(&p.out);
    span.record(
        "ended",
        out.ended.as_deref().unwrap_or(if code.is_some() {
            "exited"
        } else {
            "killed by a signal"
        }),
    );
    out.exited = Some(code);
    drop(out);
    p.changed.notify_waiters();
}

/// Kills the process group `pid` leads (Linux; elsewhere the child itself is killed by its
/// supervisor and on drop).
fn kill_group(pid: Option<u32>) {
    #[cfg(target_os = "linux")]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads (it was made
        // its leader at spawn); no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _pid = pid;
}

/// Makes the child its own process group's leader and, on Linux, asks the kernel to kill it when the
/// executor dies; on Windows, a new process group without a console window.
fn guard_child(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        cmd.process_group(0);
        ufo_common::process::die_with_parent(cmd.as_std_mut(), libc::SIGKILL);
    }
    #[cfg(windows)]
    {
        // CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
        cmd.creation_flags(0x0000_0200 | 0x0800_0000);
    }
}

/// At most 80 characters of a caller's text, for error messages.
fn short(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_return_whole_lines_within_the_cap() {
        assert_eq!(whole_lines(b"", 10), 0);
        assert_eq!(whole_lines(b"abc", 10), 0);
        assert_eq!(whole_lines(b"ab\ncd", 10), 3);
        assert_eq!(whole_lines(b"ab\ncd\nef\n", 6), 6);
        // One line longer than the cap comes alone.
        assert_eq!(whole_lines(b"abcdefgh\nij\n", 4), 9);
    }
}
