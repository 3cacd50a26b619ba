//! The executor's own rules for `run_command` (the tool is in [`crate::tools::shell`]), enforced whatever
//! the agent sends. Off unless the executor is started with an allow-list (`--shell-allow`) and a working
//! directory (`--shell-workdir`):
//!
//! - the program is on the allow-list: a bare name on the list is looked up on the fixed `PATH`
//!   (`--shell-path`), an absolute path is accepted only when it is itself on the list; batch files
//!   (`.bat`, `.cmd`, which Windows runs through `cmd.exe`) are refused;
//! - no shell interpreter: the program is started directly (`execve`), so an argument is one argument.
//!   Arguments carrying shell syntax (`;`, `&&`, `||`, `|`, a backtick, `$(`, `>`, `<`) or NUL are
//!   refused all the same: they can only mean the caller expected a shell;
//! - every argument (and the value of an `--option=value`) is judged as a path relative to the working
//!   directory: what it resolves to (through symlinks, `..` included) must stay inside it, so
//!   `/etc/shadow`, `../x` and a symlink pointing out are refused; at most `--shell-max-args` arguments
//!   of at most `--shell-max-arg-bytes` bytes each;
//! - the command runs in the working directory with a fixed environment (`PATH`, `HOME` = the working
//!   directory, `LANG`; on Windows also `SystemRoot`), nothing of the executor's own;
//! - it is killed at its timeout (`--shell-timeout-ms`; a caller may ask for less, never more), on Linux
//!   with its whole process group, on Windows the child itself;
//! - each output stream keeps at most `--shell-max-output-bytes`; the rest is read and discarded (so
//!   memory stays bounded whatever the command writes) and the result is marked `truncated`.
//!
//! What is not protected: an allowed program that itself runs other programs (an interpreter, `env`,
//! `xargs`, `find -exec`) runs whatever it is told, so keep those off the list (well-known shells are
//! refused at start); a path component replaced by a symlink between the check and the program opening
//! it; a descendant that leaves the process group (`setsid`) outlives the kill.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio_util::sync::CancellationToken;

use crate::launch::resolve_existing;

/// Shells refused on the allow-list: allowing one would let any command line through.
pub const SHELLS: [&str; 12] = [
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "cmd",
    "powershell",
    "pwsh",
];

/// What an argument may not contain (shell syntax), checked in this order.
const SHELL_SYNTAX: [&str; 8] = [";", "&&", "||", "|", "`", "$(", ">", "<"];

/// The shell's configuration, from the flags (see [`crate::config::Config`]).
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// Programs allowed: bare names looked up on `path`, or absolute paths (empty: the tool is off).
    pub allow: Vec<String>,
    /// Where commands run (resolved; it is also their `HOME`).
    pub workdir: PathBuf,
    /// The `PATH` commands get, and bare program names are looked up on.
    pub path: String,
    /// The longest a command may run.
    pub timeout: Duration,
    /// Bytes kept of each output stream.
    pub max_output_bytes: usize,
    /// Most arguments.
    pub max_args: usize,
    /// Longest argument (and program), in bytes.
    pub max_arg_bytes: usize,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            workdir: PathBuf::new(),
            path: DEFAULT_PATH.to_owned(),
            timeout: Duration::from_millis(10_000),
            max_output_bytes: 64 * 1024,
            max_args: 64,
            max_arg_bytes: 4096,
        }
    }
}

/// The default `PATH` of commands.
#[cfg(windows)]
pub const DEFAULT_PATH: &str = r"C:\Windows\System32;C:\Windows";
/// The default `PATH` of commands.
#[cfg(not(windows))]
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why a command is refused (each text names what is wrong and, where there is one, what to do).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShellError {
    /// The executor was started without an allow-list.
    #[error(
        "run_command is off on this executor (start it with --shell-allow and --shell-workdir to allow programs)"
    )]
    Off,
    /// The program is not on the allow-list (second: the allowed ones).
    #[error("program {0:?} is not on the shell allow-list; allowed: {1}")]
    NotAllowed(String, String),
    /// An allowed bare name that is not on `PATH`.
    #[error("program {0:?} is allowed but not found on the command PATH ({1})")]
    NotFound(String, String),
    /// A batch file, which Windows would run through `cmd.exe`.
    #[error(
        "program {0:?} is a batch file, which runs through cmd.exe; only programs run directly"
    )]
    Batch(String),
    /// Too many arguments.
    #[error("{count} arguments, more than the limit of {max}")]
    TooManyArgs {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An argument (0: the program) over the size limit.
    #[error("{what} is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// "program" or "argument N".
        what: String,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// NUL in the program or an argument.
    #[error("{0} contains a NUL byte")]
    Nul(String),
    /// Shell syntax in an argument.
    #[error(
        "argument {n} {arg:?} contains {syntax:?}: no shell runs the command, so pass one program and its arguments without operators, pipes or redirections"
    )]
    Syntax {
        /// Which argument.
        n: usize,
        /// The argument, shortened.
        arg: String,
        /// What it contains.
        syntax: &'static str,
    },
    /// A path outside the working directory.
    #[error("argument {n} {arg:?} {why} the working directory {workdir}")]
    Outside {
        /// Which argument.
        n: usize,
        /// The argument, shortened.
        arg: String,
        /// "is outside" or "cannot be resolved inside".
        why: &'static str,
        /// The working directory.
        workdir: String,
    },
    /// A caller's timeout of 0.
    #[error("timeout_ms must be at least 1")]
    ZeroTimeout,
}

/// A checked command: the program's resolved path and its arguments as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The program to start.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

impl ShellConfig {
    /// Whether `run_command` is on.
    pub fn enabled(&self) -> bool {
        !self.allow.is_empty()
    }

    /// `program` and `args` as they may run, or why not (see the module doc).
    pub fn check(&self, program: &str, args: &[String]) -> Result<Checked, ShellError> {
        if !self.enabled() {
            return Err(ShellError::Off);
        }
        if program.contains('\0') {
            return Err(ShellError::Nul("the program".into()));
        }
        if program.len() > self.max_arg_bytes {
            return Err(ShellError::TooLong {
                what: "the program".into(),
                len: program.len(),
                max: self.max_arg_bytes,
            });
        }
        if !self.allow.iter().any(|a| a == program) {
            return Err(ShellError::NotAllowed(
                shorten(program),
                self.allow.join(", "),
            ));
        }
        let resolved = self.resolve_program(program)?;
        if args.len() > self.max_args {
            return Err(ShellError::TooManyArgs {
                count: args.len(),
                max: self.max_args,
            });
        }
        for (i, arg) in args.iter().enumerate() {
            self.check_arg(i + 1, arg)?;
        }
        Ok(Checked {
            program: resolved,
            args: args.to_vec(),
        })
    }

    /// An allowed program's path: an absolute one as it is, a bare name from `PATH`.
    fn resolve_program(&self, program: &str) -> Result<PathBuf, ShellError> {
        let p = Path::new(program);
        let found = if p.is_absolute() {
            Some(p.to_path_buf())
        } else {
            std::env::split_paths(&self.path).find_map(|dir| executable_in(&dir, program))
        };
        let Some(found) = found else {
            return Err(ShellError::NotFound(program.to_owned(), self.path.clone()));
        };
        let ext = found
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if ext == "bat" || ext == "cmd" {
            return Err(ShellError::Batch(program.to_owned()));
        }
        Ok(found)
    }

    /// Argument `n`'s size, syntax and paths.
    fn check_arg(&self, n: usize, arg: &str) -> Result<(), ShellError> {
        if arg.len() > self.max_arg_bytes {
            return Err(ShellError::TooLong {
                what: format!("argument {n}"),
                len: arg.len(),
                max: self.max_arg_bytes,
            });
        }
        if arg.contains('\0') {
            return Err(ShellError::Nul(format!("argument {n}")));
        }
        if let Some(syntax) = SHELL_SYNTAX.iter().find(|s| arg.contains(**s)) {
            return Err(ShellError::Syntax {
                n,
                arg: shorten(arg),
                syntax,
            });
        }
        // `--output=/etc/x`: the value is a path as much as the argument.
        let value = arg
            .starts_with('-')
            .then(|| arg.split_once('=').map(|(_, v)| v))
            .flatten();
        for candidate in std::iter::once(arg).chain(value) {
            if candidate.is_empty() {
                continue;
            }
            let why = match resolve_existing(&self.workdir.join(candidate)) {
                Ok(real) if real.starts_with(&self.workdir) => continue,
                Ok(_) => "is outside",
                Err(_) => "cannot be resolved inside",
            };
            return Err(ShellError::Outside {
                n,
                arg: shorten(arg),
                why,
                workdir: self.workdir.display().to_string(),
            });
        }
        Ok(())
    }

    /// The environment commands get.
    fn env(&self) -> Vec<(String, String)> {
        [
            ("PATH".to_owned(), self.path.clone()),
            ("HOME".to_owned(), self.workdir.display().to_string()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ]
        .into_iter()
        .chain(system_root())
        .collect()
    }

    /// Runs a checked command for at most `timeout` (see the module doc). The output read before a
    /// timeout is kept.
    pub async fn run(&self, cmd: &Checked, timeout: Duration) -> Result<Ran, std::io::Error> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut command = tokio::process::Command::new(&cmd.program);
        command
            .args(&cmd.args)
            .env_clear()
            .envs(self.env())
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        {
            command.process_group(0);
            ufo_common::process::die_with_parent(command.as_std_mut(), libc::SIGKILL);
        }
        let mut child = command.spawn()?;
        let pid = child.id();
        // However this ends (a dropped future included): what is left of the group is killed and the
        // readers stop.
        let group = KillGuard(pid);
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let cap = self.max_output_bytes;
        let out = tokio::spawn(drain(child.stdout.take(), cap, stop.clone()));
        let err = tokio::spawn(drain(child.stderr.take(), cap, stop.clone()));
        let mut timed_out = false;
        let status = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(status) => Some(status?),
            Err(_) => {
                timed_out = true;
                group.kill();
                // On Windows only the child; everywhere it is reaped.
                let _ = child.kill().await;
                None
            }
        };
        // The streams end when every process holding them has gone; one that outlives the command
        // (a background child) is cut at the deadline too.
        let readers = async { (out.await, err.await) };
        tokio::pin!(readers);
        let (out, err) = match tokio::time::timeout_at(deadline, &mut readers).await {
            Ok(r) => r,
            Err(_) => {
                timed_out = true;
                stop.cancel();
                readers.await
            }
        };
        Ok(Ran {
            pid,
            exit_code: status.and_then(|s| s.code()),
            stdout: out.unwrap_or_default(),
            stderr: err.unwrap_or_default(),
            timed_out,
            elapsed: started.elapsed(),
        })
    }
}

/// Windows programs need `SystemRoot` to load their libraries.
#[cfg(windows)]
fn system_root() -> Option<(String, String)> {
    std::env::var("SystemRoot")
        .ok()
        .map(|root| ("SystemRoot".to_owned(), root))
}

/// Only Windows programs need `SystemRoot`.
#[cfg(not(windows))]
fn system_root() -> Option<(String, String)> {
    None
}

/// `name` in `dir` when it is an executable file there (on Windows also `name.exe`).
pub(crate) fn executable_in(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut candidates = vec![dir.join(name)];
    if cfg!(windows) && Path::new(name).extension().is_none() {
        candidates.push(dir.join(format!("{name}.exe")));
    }
    candidates.into_iter().find(|c| is_executable(c))
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file()
}

/// What a command did.
#[derive(Debug)]
pub struct Ran {
    /// Its process id.
    pub pid: Option<u32>,
    /// Its exit code (none when it was killed).
    pub exit_code: Option<i32>,
    /// Its standard output, cut at the cap.
    pub stdout: Captured,
    /// Its standard error, cut at the cap.
    pub stderr: Captured,
    /// It was killed at its timeout.
    pub timed_out: bool,
    /// How long it ran.
    pub elapsed: Duration,
}

/// One output stream: the bytes kept and how many were written in all.
#[derive(Debug, Default)]
pub struct Captured {
    /// At most the cap.
    pub kept: Vec<u8>,
    /// Everything the command wrote to the stream.
    pub total: u64,
}

impl Captured {
    /// Whether bytes were discarded.
    pub fn truncated(&self) -> bool {
        self.total > self.kept.len() as u64
    }
}

/// Reads `stream` to its end (or until `stop`), keeping the first `cap` bytes and counting the rest.
async fn drain(
    stream: Option<impl AsyncRead + Unpin>,
    cap: usize,
    stop: CancellationToken,
) -> Captured {
    let mut captured = Captured::default();
    let Some(mut stream) = stream else {
        return captured;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            _ = stop.cancelled() => return captured,
            read = stream.read(&mut buf) => read,
        };
        match read {
            Ok(0) | Err(_) => return captured,
            Ok(n) => {
                let room = cap.saturating_sub(captured.kept.len()).min(n);
                captured.kept.extend_from_slice(&buf[..room]);
                captured.total += n as u64;
            }
        }
    }
}

/// Kills the process group a command leads (Linux; elsewhere nothing: the child is killed on drop)
/// when told and when dropped. After the command ended the group holds only what it left behind, if
/// anything.
struct KillGuard(Option<u32>);

impl KillGuard {
    fn kill(&self) {
        #[cfg(target_os = "linux")]
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) with a negative pid signals the process group the child leads (it was
            // made its leader at spawn); no memory is touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        // Elsewhere the child is killed by tokio (`kill_on_drop`, `Child::kill`).
        #[cfg(not(target_os = "linux"))]
        let _pid = self.0;
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// At most 200 characters of an argument, for error texts.
fn shorten(arg: &str) -> String {
    match arg.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &arg[..cut]),
        None => arg.to_owned(),
    }
}
