//! Checks on real state after a task, read with tools independent of the system under test: the file on
//! disk, a setup application's exit code and output, and a control's states, text or value read by a
//! live pyatspi walk (`probe.py`, run with Debian's Python) — never through our executor.
//!
//! Applications finish writing or exiting asynchronously (a save is written by GIO after the click, a
//! dialog exits after its button): each check is asked again until it holds or its deadline passes, and
//! the last thing seen is what a failure reports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::desk::RunningApp;
use crate::task::{Check, ControlExpect, ControlRef};

/// The probe script, written next to the run's reports.
const PROBE: &str = include_str!("probe.py");

/// How checks run.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    /// The Python with pyatspi (Debian's `/usr/bin/python3`).
    pub python: PathBuf,
    /// How long a check may take to hold.
    pub timeout: Duration,
    /// The desktop's environment (for the probe).
    pub env: Vec<(String, String)>,
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// It holds.
    pub passed: bool,
    /// What was checked and what was found.
    pub message: String,
}

/// Writes the probe script into `dir` and returns its path.
pub fn install_probe(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("probe.py");
    std::fs::write(&path, PROBE)?;
    Ok(path)
}

fn cut(s: &str) -> String {
    const MAX: usize = 300;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        format!(
            "{:?}… ({} chars)",
            s.chars().take(MAX).collect::<String>(),
            s.chars().count()
        )
    }
}

/// Runs one check for the task whose directory is `dir` and whose setup apps are `apps`.
pub async fn run(
    check: &Check,
    dir: &Path,
    apps: &mut [RunningApp],
    probe: &Path,
    s: &CheckSettings,
) -> Verdict {
    let until = Instant::now() + s.timeout;
    loop {
        let verdict = match check {
            Check::File { path, expect } => {
                let full = dir.join(path);
                match tokio::fs::read_to_string(&full).await {
                    Ok(text) if expect.holds(&text) => Verdict {
                        passed: true,
                        message: format!("file {path} is {expect}"),
                    },
                    Ok(text) => Verdict {
                        passed: false,
                        message: format!("file {path}: expected {expect}, found {}", cut(&text)),
                    },
                    Err(e) => Verdict {
                        passed: false,
                        message: format!("file {path}: cannot read it ({e})"),
                    },
                }
            }
            Check::Process {
                command,
                exit_code,
                stdout,
            } => {
                // Waiting for the exit is this check's own deadline.
                let Some(app) = apps.iter_mut().find(|a| a.command == *command) else {
                    return Verdict {
                        passed: false,
                        message: format!("{command} was not started by the setup"),
                    };
                };
                return match app
                    .exit(until.saturating_duration_since(Instant::now()))
                    .await
                {
                    None => Verdict {
                        passed: false,
                        message: format!("{command} is still running after {:?}", s.timeout),
                    },
                    Some(exit) => {
                        let mut problems = Vec::new();
                        if let Some(want) = exit_code
                            && exit.code != Some(*want)
                        {
                            problems.push(format!("exit code {:?}, expected {want}", exit.code));
                        }
                        if let Some(want) = stdout
                            && !want.holds(&exit.stdout)
                        {
                            problems.push(format!("output {}, expected {want}", cut(&exit.stdout)));
                        }
                        Verdict {
                            passed: problems.is_empty(),
                            message: if problems.is_empty() {
                                format!(
                                    "{command} exited {:?} printing {}",
                                    exit.code,
                                    cut(&exit.stdout)
                                )
                            } else {
                                format!("{command}: {}", problems.join("; "))
                            },
                        }
                    }
                };
            }
            Check::Control { target, expect } => control(target, expect, probe, s).await,
        };
        if verdict.passed || Instant::now() >= until {
            return verdict;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn describe(t: &ControlRef) -> String {
    let which = if t.any {
        "any ".to_owned()
    } else if t.nth == 1 {
        String::new()
    } else {
        format!("#{} ", t.nth)
    };
    format!("{which}{} {:?} of {}", t.role, t.name, t.app)
}

/// What is wrong with one control found by the probe (empty when it meets `expect`), and how it looks.
fn judge(found: &Value, expect: &ControlExpect) -> (Vec<String>, String) {
    let states: Vec<&str> = found["states"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut problems = Vec::new();
    for st in &expect.state {
        if !states.contains(&st.as_str()) {
            problems.push(format!("not {st}"));
        }
    }
    for st in &expect.not_state {
        if states.contains(&st.as_str()) {
            problems.push(st.clone());
        }
    }
    let text = found["text"].as_str();
    if let Some(want) = &expect.text
        && !text.is_some_and(|t| want.holds(t))
    {
        problems.push(format!(
            "text {}, expected {want}",
            text.map_or("none".into(), cut)
        ));
    }
    let value = found["value"].as_f64();
    if let Some(want) = expect.value
        && !value.is_some_and(|v| (v - want).abs() < 1e-6)
    {
        problems.push(format!("value {value:?}, expected {want}"));
    }
    let shown = format!(
        "states [{}], text {}, value {value:?}",
        states.join(", "),
        text.map_or("none".into(), cut)
    );
    (problems, shown)
}

async fn control(
    target: &ControlRef,
    expect: &ControlExpect,
    probe: &Path,
    s: &CheckSettings,
) -> Verdict {
    let what = describe(target);
    let bad = |message: String| Verdict {
        passed: false,
        message,
    };
    let arg = serde_json::json!({"app": target.app, "role": target.role, "name": target.name})
        .to_string();
    let run = tokio::process::Command::new(&s.python)
        .arg(probe)
        .arg(arg)
        .env_remove("NO_AT_BRIDGE")
        .envs(s.env.iter().cloned())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(Duration::from_secs(30), run).await {
        Err(_) => return bad(format!("{what}: the pyatspi probe took over 30 s")),
        Ok(Err(e)) => {
            return bad(format!(
                "{what}: cannot run {} for the pyatspi probe: {e}",
                s.python.display()
            ));
        }
        Ok(Ok(out)) => out,
    };
    let found: Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(_) => {
            return bad(format!(
                "{what}: the pyatspi probe printed no verdict ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    };
    if let Some(e) = found["error"].as_str() {
        return bad(format!("{what}: the pyatspi probe failed: {e}"));
    }
    let matches: Vec<&Value> = found["matches"].as_array().into_iter().flatten().collect();
    let candidates: Vec<&Value> = if target.any {
        matches
    } else {
        matches
            .get(target.nth as usize - 1)
            .into_iter()
            .copied()
            .collect()
    };
    if candidates.is_empty() {
        return bad(format!(
            "{what}: not found by pyatspi (applications: {}; shown {}s: {})",
            found["apps"], target.role, found["same_role"]
        ));
    }
    let judged: Vec<(Vec<String>, String)> = candidates.iter().map(|c| judge(c, expect)).collect();
    match judged.iter().find(|(problems, _)| problems.is_empty()) {
        Some((_, shown)) => Verdict {
            passed: true,
            message: format!("{what}: {shown}"),
        },
        None => {
            let all: Vec<String> = judged
                .iter()
                .take(5)
                .map(|(p, shown)| format!("{} ({shown})", p.join("; ")))
                .collect();
            bad(format!("{what}: {}", all.join(" | ")))
        }
    }
}
