//! `launch_application` and the executor's own hard limits on it, enforced whatever the agent sends:
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

use serde_json::json;

use crate::executor::{Executor, Limits, ToolOutput};

impl Executor {
    /// Starts the allow-listed program `name` with `args` (checked, see the module doc), without a shell.
    pub(crate) fn launch(&self, name: &str, args: &[String]) -> Result<ToolOutput, String> {
        let Some((_, program)) = self.apps.iter().find(|(n, _)| n == name) else {
            let allowed = self.app_names();
            return Err(format!(
                "application '{name}' is not on the allow-list; allowed: {}",
                if allowed.is_empty() {
                    "none".to_owned()
                } else {
                    allowed.join(", ")
                }
            ));
        };
        let args = check_args(&self.limits, args)?;
        let mut child = tokio::process::Command::new(program)
            .args(&args)
            .envs(self.launch_env.iter().map(|(k, v)| (k, v)))
            .env_remove("NO_AT_BRIDGE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start '{name}': {e}"))?;
        let pid = child.id();
        // Reap the child when it exits so it does not linger as a zombie.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(ToolOutput {
            result: json!({"name": name, "pid": pid, "args": args}),
            ..ToolOutput::default()
        })
    }
}

/// The arguments a program may be started with, resolved; or why not (naming the argument).
pub fn check_args(limits: &Limits, args: &[String]) -> Result<Vec<PathBuf>, String> {
    const BAD: &str = "invalid parameters for launch_application";
    if args.len() > limits.max_launch_args {
        return Err(format!(
            "{BAD}: {} arguments, more than the limit of {}",
            args.len(),
            limits.max_launch_args
        ));
    }
    if !args.is_empty() && limits.launch_dirs.is_empty() {
        return Err(format!(
            "{BAD}: this executor starts programs without arguments (it declares no launch directories)"
        ));
    }
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            let n = i + 1;
            if arg.len() > limits.max_launch_arg_bytes {
                return Err(format!(
                    "{BAD}: argument {n} is {} bytes, more than the limit of {}",
                    arg.len(),
                    limits.max_launch_arg_bytes
                ));
            }
            let resolved = resolve(Path::new(arg))
                .map_err(|why| format!("{BAD}: argument {n} {:?} {why}", shorten(arg)))?;
            if limits.launch_dirs.iter().any(|d| resolved.starts_with(d)) {
                Ok(resolved)
            } else {
                Err(format!(
                    "{BAD}: argument {n} {:?} is outside the launch directories ({})",
                    shorten(arg),
                    limits
                        .launch_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
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
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(real) => {
                // What does not exist yet has no symlinks to follow, and no `..` (refused above).
                return Ok(rest.iter().rev().fold(real, |p, c| p.join(c)));
            }
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

/// The declared launch directories, resolved once at start (each must exist and be a directory).
pub fn launch_dirs(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, (PathBuf, String)> {
    dirs.iter()
        .map(|d| match std::fs::canonicalize(d) {
            Ok(real) if real.is_dir() => Ok(real),
            Ok(_) => Err((d.clone(), "is not a directory".to_owned())),
            Err(e) => Err((d.clone(), e.to_string())),
        })
        .collect()
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
            let e = check_args(&l, &arg(&bad)).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let many = vec![docs.join("a.txt").display().to_string(); 4];
        assert!(check_args(&l, &many).unwrap_err().contains("4 arguments"));
        let long = vec![format!("{}/{}", docs.display(), "x".repeat(80))];
        assert!(check_args(&l, &long).unwrap_err().contains("argument 1 is"));
        let none = check_args(&limits(vec![]), &arg(&docs.join("a.txt"))).unwrap_err();
        assert!(none.contains("without arguments"), "{none}");
        assert!(check_args(&limits(vec![]), &[]).unwrap().is_empty());
    }
}
