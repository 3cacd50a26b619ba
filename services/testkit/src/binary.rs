//! Finding a workspace binary for a real-process test, built from the current sources.
//!
//! `env!("CARGO_BIN_EXE_<name>")` only exists for binaries of the test's own package, so tests of other
//! crates ask for a binary by name: the workspace's binaries are built once per test process with the same
//! cargo and profile that built the test (a no-op when up to date) and taken from the same target directory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Why a binary could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    /// The test executable's location does not look like `<target>/<profile>/deps/<test>`.
    #[error("cannot locate the target directory from the test executable {0}")]
    TargetDir(PathBuf),
    /// Running cargo failed.
    #[error("cannot run cargo to build {0}")]
    Cargo(String, #[source] std::io::Error),
    /// Cargo ran but the build failed.
    #[error("building {name} failed:\n{stderr}")]
    Build {
        /// The binary.
        name: String,
        /// Cargo's error output.
        stderr: String,
    },
}

/// The directory holding the test's profile outputs, e.g. `target/debug`.
pub fn profile_dir() -> Result<PathBuf, BinaryError> {
    let exe = std::env::current_exe().map_err(|_| BinaryError::TargetDir(PathBuf::new()))?;
    let deps = exe
        .parent()
        .ok_or_else(|| BinaryError::TargetDir(exe.clone()))?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent()
    } else {
        Some(deps)
    };
    dir.map(Path::to_path_buf)
        .ok_or_else(|| BinaryError::TargetDir(exe.clone()))
}

/// The path of workspace binary `name` (e.g. `ufo-session`), after building every workspace binary once
/// per test process (`cargo build --workspace --bins`: one feature resolution, so the binaries share their
/// dependencies' builds, and a no-op when they are up to date).
pub fn workspace_binary(name: &str) -> Result<PathBuf, BinaryError> {
    static BUILT: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = match built.as_ref() {
        Some(dir) => dir.clone(),
        None => {
            let dir = build_workspace_bins()?;
            *built = Some(dir.clone());
            dir
        }
    };
    Ok(dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)))
}

fn build_workspace_bins() -> Result<PathBuf, BinaryError> {
    let dir = profile_dir()?;
    let target_dir = dir
        .parent()
        .ok_or_else(|| BinaryError::TargetDir(dir.clone()))?;
    let profile = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--quiet", "--workspace", "--bins"])
        .arg("--target-dir")
        .arg(target_dir);
    if profile == "release" {
        command.arg("--release");
    }
    let output = command
        .output()
        .map_err(|e| BinaryError::Cargo("the workspace binaries".to_owned(), e))?;
    if !output.status.success() {
        return Err(BinaryError::Build {
            name: "the workspace binaries".to_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(dir)
}
