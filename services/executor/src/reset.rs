//! The desktop's reset between tasks (issue 36, the pool): when the agent checks a desktop back in it
//! calls `Reset`, and the executor
//!
//! 1. ends every program `launch_application` started since the last reset (killed; waited for at most
//!    `close_timeout`),
//! 2. forgets the selected window and listings,
//! 3. empties the scratch directory (`--scratch-dir`: the directory tasks save their files in; the
//!    directory itself is kept),
//! 4. runs the operator's reset hook (`--reset-hook`, e.g. a snapshot revert) — a program and its
//!    arguments split on whitespace, run without a shell, with `UFO_TASK_ID` set; it must exit 0 within
//!    `hook_timeout`.
//!
//! Any step's failure fails the reset with the reason: the agent then marks the desktop broken.

use std::path::PathBuf;
use std::time::Duration;

use crate::executor::Executor;

/// How the executor resets its desktop.
#[derive(Debug, Clone, Default)]
pub struct ResetConfig {
    /// The directory emptied at every reset.
    pub scratch_dir: Option<PathBuf>,
    /// The hook: program and arguments.
    pub hook: Vec<String>,
    /// Longest the hook may run.
    pub hook_timeout: Duration,
    /// Longest a launched program is waited for after it was killed.
    pub close_timeout: Duration,
}

/// What a reset did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Launched programs ended.
    pub closed: u32,
    /// Entries removed from the scratch directory.
    pub removed: u32,
    /// Whether the hook ran (and exited 0).
    pub hook_ran: bool,
}

/// Why a reset failed.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// A launched program did not exit after it was killed.
    #[error("launched program (pid {0:?}) did not exit within the close timeout")]
    NotClosed(Option<u32>),
    /// The scratch directory could not be emptied.
    #[error("cannot empty the scratch directory {path}")]
    Scratch {
        /// The directory or entry.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The hook could not be started.
    #[error("cannot start the reset hook {0:?}")]
    HookSpawn(String, #[source] std::io::Error),
    /// The hook ran too long (it was killed).
    #[error("the reset hook ran longer than {0} ms and was killed")]
    HookTimeout(u128),
    /// The hook failed.
    #[error("the reset hook exited with {0}")]
    HookFailed(String),
}

impl Executor {
    /// Resets the desktop after (or before) task `task_id` (see the module docs).
    pub async fn reset(&self, task_id: &str) -> Result<ResetReport, ResetError> {
        let mut report = ResetReport::default();
        let launched = match self.launched.lock() {
            Ok(mut children) => std::mem::take(&mut *children),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for mut child in launched {
            if matches!(child.try_wait(), Ok(Some(_))) {
                continue;
            }
            let pid = child.id();
            // Already gone between the check and the kill: nothing to close.
            let _ = child.start_kill();
            match tokio::time::timeout(self.reset.close_timeout, child.wait()).await {
                Ok(_) => report.closed += 1,
                Err(_) => return Err(ResetError::NotClosed(pid)),
            }
        }
        *self.state.lock().await = crate::executor::DesktopState::default();
        if let Some(dir) = &self.reset.scratch_dir {
            report.removed = empty_dir(dir)?;
        }
        if let Some((program, args)) = self.reset.hook.split_first() {
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .env("UFO_TASK_ID", task_id)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| ResetError::HookSpawn(program.clone(), e))?;
            let status = tokio::time::timeout(self.reset.hook_timeout, child.wait())
                .await
                .map_err(|_| ResetError::HookTimeout(self.reset.hook_timeout.as_millis()))?
                .map_err(|e| ResetError::HookSpawn(program.clone(), e))?;
            if !status.success() {
                return Err(ResetError::HookFailed(status.to_string()));
            }
            report.hook_ran = true;
        }
        Ok(report)
    }
}

/// Removes everything inside `dir` (not `dir` itself); how many entries.
fn empty_dir(dir: &std::path::Path) -> Result<u32, ResetError> {
    let scratch = |path: &std::path::Path, source| ResetError::Scratch {
        path: path.display().to_string(),
        source,
    };
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| scratch(dir, e))? {
        let entry = entry.map_err(|e| scratch(dir, e))?;
        let path = entry.path();
        // Not following symlinks: a link is removed, never what it points at.
        let is_dir = entry.file_type().map_err(|e| scratch(&path, e))?.is_dir();
        if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        }
        .map_err(|e| scratch(&path, e))?;
        removed += 1;
    }
    Ok(removed)
}
