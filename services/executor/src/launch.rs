//! The executor's own hard limits on `launch_application` (the tool is in [`crate::tools::apps`]),
//! enforced whatever the agent sends:
//! only allow-listed programs, at most `max_launch_args` arguments of at most `max_launch_arg_bytes`
//! bytes each, and every argument an absolute path inside a declared launch directory
//! (`--launch-dir`). Without launch directories a program starts without arguments. So an allowed
//! editor cannot be pointed at a file elsewhere (the shadow password database when the executor runs as
//! root), nor be given options such as a browser's `--renderer-cmd-prefix`.
//!
//! A path is judged by what it resolves to: `..` components are refused outright, the longest existing
//! prefix is resolved through symlinks (`std::fs::canonicalize`), and the program receives the resolved
//! path, so a symlink inside a launch directory pointing outside it is refused. What is not protected: a
//! component replaced by a symlink between the check and the program opening the file.

use std::path::{Component, Path, PathBuf};

use crate::executor::Limits;

/// Why a launch argument is refused (the argument is numbered from 1 and shortened for the message).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LaunchArgError {
    /// Too many arguments.
    #[error("{count} arguments, more than the limit of {max}")]
    TooMany {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Arguments to an executor that declares no launch directories.
    #[error("this executor starts programs without arguments (it declares no launch directories)")]
    NoLaunchDirs,
    /// An argument over the size limit.
    #[error("argument {n} is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// Which argument.
        n: usize,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An argument that is no usable path.
    #[error("argument {n} {arg:?} {why}")]
    BadPath {
        /// Which argument.
        n: usize,
        /// The argument, shortened.
        arg: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A path outside every launch directory.
    #[error("argument {n} {arg:?} is outside the launch directories ({dirs})")]
    Outside {
        /// Which argument.
        n: usize,
        /// The argument, shortened.
        arg: String,
        /// The launch directories.
        dirs: String,
    },
}

/// The arguments a program may be started with, resolved; or why not (naming the argument).
pub fn check_args(limits: &Limits, args: &[String]) -> Result<Vec<PathBuf>, LaunchArgError> {
    if args.len() > limits.max_launch_args {
        return Err(LaunchArgError::TooMany {
            count: args.len(),
            max: limits.max_launch_args,
        });
    }
    if !args.is_empty() && limits.launch_dirs.is_empty() {
        return Err(LaunchArgError::NoLaunchDirs);
    }
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            let n = i + 1;
            if arg.len() > limits.max_launch_arg_bytes {
                return Err(LaunchArgError::TooLong {
                    n,
                    len: arg.len(),
                    max: limits.max_launch_arg_bytes,
                });
            }
            let resolved = resolve(Path::new(arg)).map_err(|why| LaunchArgError::BadPath {
                n,
                arg: shorten(arg),
                why,
            })?;
            if limits.launch_dirs.iter().any(|d| resolved.starts_with(d)) {
                Ok(resolved)
            } else {
                Err(LaunchArgError::Outside {
                    n,
                    arg: shorten(arg),
                    dirs: limits
                        .launch_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        })
        .collect()
}

/// `path` with its longest existing prefix resolved through symlinks; refused unless absolute and
/// free of `..`.
fn resolve(path: &Path) -> Result<PathBuf, &'static str> {
    if !path.is_absolute() {
        return Err("is not an absolute path");
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err("contains '..'");
    }
    resolve_existing(path)
}

/// `path` with its longest existing prefix resolved through symlinks (and the `..` in it) by the
/// system; a `..` in the part that does not exist yet cannot be resolved.
pub(crate) fn resolve_existing(path: &Path) -> Result<PathBuf, &'static str> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(real) => {
                // What does not exist yet has no symlinks to follow.
                return Ok(rest.iter().rev().fold(real, |p, c| p.join(c)));
            }
            // `file_name` is `None` for a last component `..`: refused.
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return Err("cannot be resolved"),
            },
        }
    }
}

/// At most 200 characters of an argument, for error texts.
fn shorten(arg: &str) -> String {
    match arg.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &arg[..cut]),
        None => arg.to_owned(),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn limits(dirs: Vec<PathBuf>) -> Limits {
        Limits {
            launch_dirs: dirs,
            max_launch_args: 3,
            max_launch_arg_bytes: 64,
            ..Limits::default()
        }
    }

    #[test]
    fn arguments_must_resolve_inside_a_launch_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let docs = std::fs::canonicalize(tmp.path()).unwrap().join("docs");
        std::fs::create_dir(&docs).unwrap();
        std::fs::write(docs.join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", docs.join("escape")).unwrap();
        let l = limits(vec![docs.clone()]);
        let arg = |s: &Path| vec![s.display().to_string()];
        assert_eq!(
            check_args(&l, &arg(&docs.join("a.txt"))).unwrap(),
            [docs.join("a.txt")]
        );
        // A file that does not exist yet (a new document) inside the directory is fine.
        assert_eq!(
            check_args(&l, &arg(&docs.join("new/b.txt"))).unwrap(),
            [docs.join("new/b.txt")]
        );
        for (bad, why) in [
            (
                PathBuf::from("/etc/shadow"),
                "outside the launch directories",
            ),
            (docs.join("escape"), "outside the launch directories"),
            (docs.join("../docs/a.txt"), "contains '..'"),
            (docs.join("new/../../x"), "contains '..'"),
            (PathBuf::from("a.txt"), "not an absolute path"),
            (PathBuf::from("--new-window"), "not an absolute path"),
        ] {
            let e = check_args(&l, &arg(&bad)).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let many = vec![docs.join("a.txt").display().to_string(); 4];
        assert_eq!(
            check_args(&l, &many).unwrap_err(),
            LaunchArgError::TooMany { count: 4, max: 3 }
        );
        let long = vec![format!("{}/{}", docs.display(), "x".repeat(80))];
        assert!(matches!(
            check_args(&l, &long).unwrap_err(),
            LaunchArgError::TooLong { n: 1, .. }
        ));
        let none = check_args(&limits(vec![]), &arg(&docs.join("a.txt"))).unwrap_err();
        assert_eq!(none, LaunchArgError::NoLaunchDirs);
        assert!(check_args(&limits(vec![]), &[]).unwrap().is_empty());
    }
}
