//! Suite isolation (issue 31): every task's applications run with a private home, so one task's
//! recent files, settings and histories (GTK's file chooser lists `recently-used.xbel` from
//! `$XDG_DATA_HOME`) are not another's, nor another run's.
//!
//! A task's home is `home/` in its scratch folder, created fresh with each setup (the folder is
//! emptied first), with `HOME` and the XDG base directories pointing into it. Setup applications get
//! it in their environment ([`TaskHome::env`]). Applications the HostAgent launches are started by the
//! executor, a process shared by every task: each allow-listed program is a small wrapper script
//! ([`launch_wrapper`]) that reads the current task's home from one file ([`TaskHome::publish`],
//! rewritten before each task) and then runs the program.

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The XDG base directories set, each relative to the home.
const XDG: &[(&str, &str)] = &[
    ("XDG_CONFIG_HOME", ".config"),
    ("XDG_DATA_HOME", ".local/share"),
    ("XDG_CACHE_HOME", ".cache"),
    ("XDG_STATE_HOME", ".local/state"),
];

/// One task's private home.
#[derive(Debug, Clone)]
pub struct TaskHome {
    root: PathBuf,
}

impl TaskHome {
    /// Creates `home/` and its XDG folders in the task's scratch folder `dir` (fresh: the setup
    /// empties `dir` first).
    pub fn create(dir: &Path) -> io::Result<Self> {
        let root = dir.join("home");
        for (_, sub) in XDG {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(Self { root })
    }

    /// The home folder.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `HOME` and the XDG base directories, for an application's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![("HOME".to_owned(), self.root.display().to_string())];
        env.extend(
            XDG.iter()
                .map(|(k, sub)| ((*k).to_owned(), self.root.join(sub).display().to_string())),
        );
        env
    }

    /// Writes the environment as a shell file the launch wrappers source (`export K='v'` lines).
    pub fn publish(&self, file: &Path) -> io::Result<()> {
        let text: String = self
            .env()
            .iter()
            .map(|(k, v)| format!("export {k}={}\n", sh_quote(v)))
            .collect();
        std::fs::write(file, text)
    }
}

/// `s` in single quotes for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Writes `bin_dir/<program>`, a script that sources `env_file` (the current task's home, see
/// [`TaskHome::publish`]) and runs `program` (looked up in `PATH`) with its arguments; returns its
/// path, for the executor's `--allow-app program=<path>`.
pub fn launch_wrapper(bin_dir: &Path, env_file: &Path, program: &str) -> io::Result<PathBuf> {
    std::fs::create_dir_all(bin_dir)?;
    let name = Path::new(program)
        .file_name()
        .map_or_else(|| program.to_owned(), |n| n.to_string_lossy().into_owned());
    let path = bin_dir.join(name);
    let script = format!(
        "#!/bin/sh\n# ufo-suite: {program} with the current task's private home (docs/suite.md)\n\
         . {}\nexec {} \"$@\"\n",
        sh_quote(&env_file.display().to_string()),
        sh_quote(program)
    );
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A launched program sees the home of the task published last, and a new task's home is
    /// another folder.
    #[test]
    fn a_wrapped_program_runs_with_the_current_tasks_home() {
        let out = tempfile::tempdir().unwrap();
        let env_file = out.path().join("task-home.env");
        let wrapper = launch_wrapper(&out.path().join("bin"), &env_file, "printenv").unwrap();
        let run = |var: &str| {
            let o = std::process::Command::new(&wrapper)
                .arg(var)
                .env("HOME", "/root-of-the-suite")
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
            String::from_utf8(o.stdout).unwrap().trim().to_owned()
        };
        let first = TaskHome::create(&out.path().join("tasks/it's-one")).unwrap();
        first.publish(&env_file).unwrap();
        assert_eq!(run("HOME"), first.path().display().to_string());
        assert_eq!(
            run("XDG_DATA_HOME"),
            first.path().join(".local/share").display().to_string()
        );
        assert!(first.path().join(".local/share").is_dir());
        let second = TaskHome::create(&out.path().join("tasks/two")).unwrap();
        second.publish(&env_file).unwrap();
        assert_eq!(run("HOME"), second.path().display().to_string());
        assert_eq!(
            run("XDG_CONFIG_HOME"),
            second.path().join(".config").display().to_string()
        );
    }
}
