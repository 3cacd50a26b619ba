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

/// The variables cargo sets for the test process it runs (its package's name, version, manifest
/// directory, ...), none of which the build of the workspace's binaries should see.
fn set_by_cargo_for_the_test(name: &str) -> bool {
    matches!(
        name,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_MANIFEST_LINKS"
            | "CARGO_CRATE_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_TARGET_TMPDIR"
            | "CARGO_RUSTC_CURRENT_DIR"
            | "OUT_DIR"
    ) || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
}

/// `cargo build --workspace --bins` into `target_dir`, without the variables cargo set for the test:
/// `ring`'s build script reruns when `CARGO_MANIFEST_DIR` changes, so inheriting the test package's
/// directory rebuilt ring, rustls and every binary above them (≈ 30 s) whenever tests of another
/// package, or a plain `cargo build`, had built them last.
fn build_command(target_dir: &Path, profile: &str) -> std::process::Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--quiet", "--workspace", "--bins"])
        .arg("--target-dir")
        .arg(target_dir);
    if profile == "release" {
        command.arg("--release");
    }
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_the_test) {
            command.env_remove(name);
        }
    }
    command
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
    let output = build_command(target_dir, &profile)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binaries_build_without_the_test_packages_variables() {
        // Cargo runs this unit test with its package's variables set, as it does every test.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let command = build_command(Path::new("/tmp/target"), "debug");
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} is passed on: {removed:?}"
            );
        }
        assert!(
            !removed.iter().any(|r| r == "CARGO_HOME" || r == "PATH"),
            "{removed:?}"
        );
        assert!(set_by_cargo_for_the_test("OUT_DIR"));
        assert!(!set_by_cargo_for_the_test("CARGO_TARGET_DIR"));
        assert!(!set_by_cargo_for_the_test("CARGO_HOME"));
    }
}
