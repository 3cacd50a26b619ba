//! A scripted person for tasks a person shows (`[person]`, docs/suite.md "Learning from a person"):
//! the real `ufo record` CLI records while this module does the task's steps on the suite's desktop
//! with xdotool — moving the pointer to the control a step names (looked up through the agent's
//! desktop tools, `list_controls`), clicking, typing — and then presses Enter on the CLI's terminal to
//! stop it. What the CLI stored is the demonstration the task's learners follow.
//!
//! Each click waits until the CLI has printed it as a recorded step before the next step starts, so the
//! person never runs ahead of the recording; typing is recorded as one text when the next event (or
//! the stop) closes it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tracing::Instrument as _;
use ufo_client::{AgentClient, ClientError};

use crate::demo::{Action, Nth, Target};
use crate::standin::follow::same_name;
use crate::task::Person;

/// The executor the suite's agent knows its desktop by (its default executor, an address, is declared
/// under this name).
const EXECUTOR: &str = "default";

/// Why the person could not show the task.
#[derive(Debug, thiserror::Error)]
pub enum PersonError {
    /// The CLI could not be started.
    #[error("cannot start {}: {source}", .path.display())]
    Start {
        /// The `ufo` binary.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CLI ended or went quiet before it said it records.
    #[error("ufo record did not start recording: {0}")]
    NotRecording(String),
    /// A step's control is not in the window.
    #[error("person step {step} ({text}): {why}")]
    Control {
        /// 1-based.
        step: usize,
        /// The step as written.
        text: String,
        /// What was listed instead, or the desktop tool's error.
        why: String,
    },
    /// xdotool failed.
    #[error("xdotool {args:?}: {why}")]
    Xdotool {
        /// Its arguments.
        args: Vec<String>,
        /// Its exit status and error output.
        why: String,
    },
    /// The CLI did not print a click as recorded.
    #[error("ufo record did not print click {click} within {seconds} s; it printed: {printed}")]
    NotRecorded {
        /// 1-based count of the person's clicks.
        click: usize,
        /// How long it waited.
        seconds: u64,
        /// Its output so far.
        printed: String,
    },
    /// The CLI failed or did not say what it stored.
    #[error("ufo record {status}: {output}")]
    Cli {
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// The desktop tools could not be asked.
    #[error("desktop tools: {0}")]
    Client(#[from] ClientError),
}

/// What `ufo record` stored.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The demonstration's source, `recording:<id>`.
    pub source: String,
    /// How many steps it holds.
    pub steps: u64,
    /// The CLI's output (each recorded step and the stored id).
    pub printed: String,
}

/// Where and how the person works.
#[derive(Debug, Clone)]
pub struct Setting<'a> {
    /// The `ufo` CLI binary.
    pub ufo: &'a Path,
    /// The agent's REST address and the suite user's key (`ufo --server --token`).
    pub server: &'a str,
    /// The key.
    pub token: &'a str,
    /// The desktop's environment (DISPLAY for xdotool).
    pub env: &'a [(String, String)],
    /// How long the CLI may take to start recording, to print a click, and to store the result.
    pub timeout: Duration,
}

/// Records `description` with `ufo record` while the person does `person`'s steps.
pub async fn show(
    agent: &AgentClient,
    at: &Setting<'_>,
    description: &str,
    person: &Person,
) -> Result<Shown, PersonError> {
    let span = tracing::info_span!("suite.person", app = %person.app, steps = person.steps.len());
    async {
        let mut cli = tokio::process::Command::new(at.ufo)
            .args(["--server", at.server, "--token", at.token, "record"])
            .args(["--app", &person.app, "--executor", EXECUTOR, description])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| PersonError::Start {
                path: at.ufo.to_owned(),
                source,
            })?;
        let mut lines = read_lines(&mut cli);
        let mut printed = String::new();
        // The CLI says on stderr that it records once the executor's recording runs.
        let said = tokio::time::timeout(at.timeout, async {
            while let Some(line) = lines.recv().await {
                printed.push_str(&line);
                printed.push('\n');
                if line.starts_with("recording on ") {
                    return true;
                }
            }
            false
        })
        .await;
        if said != Ok(true) {
            return Err(PersonError::NotRecording(finish(cli, printed).await));
        }
        let mut clicks = 0;
        for (i, step) in person.steps.iter().enumerate() {
            let at_step = |why: String| PersonError::Control {
                step: i + 1,
                text: step.text.clone(),
                why,
            };
            if let Some(target) = &step.target {
                let (x, y) = centre(agent, &person.window, target)
                    .await?
                    .map_err(at_step)?;
                let repeat = if step.action == Action::DoubleClick {
                    "2"
                } else {
                    "1"
                };
                xdotool(
                    at.env,
                    &[
                        "mousemove",
                        &x.to_string(),
                        &y.to_string(),
                        "click",
                        "--repeat",
                        repeat,
                        "1",
                    ],
                )
                .await?;
                clicks += 1;
                recorded(&mut lines, &mut printed, clicks, at.timeout).await?;
            }
            if let Action::Type(text) = &step.action {
                xdotool(at.env, &["type", "--delay", "30", text]).await?;
            }
        }
        // Enter on the CLI's terminal stops the recording; the CLI then stores it.
        if let Some(mut stdin) = cli.stdin.take() {
            enter(&mut stdin).await;
        }
        let ended = tokio::time::timeout(at.timeout, async {
            while let Some(line) = lines.recv().await {
                printed.push_str(&line);
                printed.push('\n');
            }
        })
        .await;
        let status = match tokio::time::timeout(at.timeout, cli.wait()).await {
            Ok(Ok(status)) if ended.is_ok() => status,
            Ok(Ok(_)) | Err(_) => {
                return Err(PersonError::Cli {
                    status: "did not end after Enter".into(),
                    output: printed,
                });
            }
            Ok(Err(e)) => {
                return Err(PersonError::Cli {
                    status: e.to_string(),
                    output: printed,
                });
            }
        };
        match (status.success(), stored(&printed)) {
            (true, Some((source, steps))) => Ok(Shown {
                source,
                steps,
                printed,
            }),
            _ => Err(PersonError::Cli {
                status: status.to_string(),
                output: printed,
            }),
        }
    }
    .instrument(span)
    .await
}

/// The CLI's stdout and stderr, line by line, in one channel (stderr's "recording on …" and stdout's
/// steps interleave as they come).
fn read_lines(cli: &mut Child) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    if let Some(out) = cli.stdout.take() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    if let Some(err) = cli.stderr.take() {
        tokio::spawn(async move {
            let mut err = BufReader::new(err).lines();
            while let Ok(Some(line)) = err.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

async fn enter(stdin: &mut ChildStdin) {
    if let Err(e) = stdin.write_all(b"\n").await {
        tracing::warn!(error = %e, "cannot press Enter on ufo record's terminal");
    }
    let _ = stdin.flush().await;
}

/// Stops a CLI that failed to start recording and returns everything it said.
async fn finish(mut cli: Child, mut printed: String) -> String {
    let _ = cli.start_kill();
    if let Ok(out) = cli.wait_with_output().await {
        printed.push_str(&String::from_utf8_lossy(&out.stdout));
        printed.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    printed
}

/// Waits until the CLI has printed `clicks` recorded clicks.
async fn recorded(
    lines: &mut mpsc::UnboundedReceiver<String>,
    printed: &mut String,
    clicks: usize,
    timeout: Duration,
) -> Result<(), PersonError> {
    let count = |p: &str| {
        p.lines()
            .filter(|l| l.trim_start().starts_with("click_input"))
            .count()
    };
    let waited = tokio::time::timeout(timeout, async {
        while count(printed) < clicks {
            match lines.recv().await {
                Some(line) => {
                    printed.push_str(&line);
                    printed.push('\n');
                }
                None => return false,
            }
        }
        true
    })
    .await;
    if waited == Ok(true) {
        Ok(())
    } else {
        Err(PersonError::NotRecorded {
            click: clicks,
            seconds: timeout.as_secs(),
            printed: printed.clone(),
        })
    }
}

/// `demonstration <id> stored for <app> (<n> steps, source recording:<id>)` → the source and `n`.
fn stored(printed: &str) -> Option<(String, u64)> {
    let line = printed
        .lines()
        .find(|l| l.starts_with("demonstration ") && l.contains(" stored for "))?;
    let (_, rest) = line.rsplit_once(" (")?;
    let (steps, rest) = rest.split_once(" steps, source ")?;
    let source = rest.strip_suffix(')')?;
    Some((source.to_owned(), steps.parse().ok()?))
}

/// The centre of the control `target` names in `window`, in screen pixels; Err lists what is there.
async fn centre(
    agent: &AgentClient,
    window: &str,
    target: &Target,
) -> Result<Result<(i64, i64), String>, PersonError> {
    let mut arguments = Map::new();
    arguments.insert("executor".into(), json!(EXECUTOR));
    let windows = agent.desktop_call("list_windows", &arguments).await?;
    let windows = windows["result"].as_array().cloned().unwrap_or_default();
    let Some(id) = windows
        .iter()
        .find(|w| same_name(w["name"].as_str().unwrap_or_default(), window))
        .and_then(|w| w["id"].as_str())
    else {
        let titles: Vec<&str> = windows.iter().filter_map(|w| w["name"].as_str()).collect();
        return Ok(Err(format!(
            "no window {window:?} on the desktop; open: {titles:?}"
        )));
    };
    arguments.insert("window".into(), json!(id));
    let listed = agent.desktop_call("list_controls", &arguments).await?;
    let controls = listed["result"].as_array().cloned().unwrap_or_default();
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_owned();
    let mut matching = controls.iter().filter(|c| {
        same_name(&text(c, "name"), &target.name) && target.kind.matches(&text(c, "type"))
    });
    let found = match target.nth {
        Nth::Index(n) => matching.nth(n.saturating_sub(1)),
        Nth::Last => matching.next_back(),
    };
    let Some(control) = found else {
        let shown: Vec<String> = controls
            .iter()
            .map(|c| format!("{} {:?}", text(c, "type"), text(c, "name")))
            .collect();
        return Ok(Err(format!(
            "no {target} in window {window:?}; listed: {}",
            shown.join(", ")
        )));
    };
    let rect: Vec<i64> = control["rect"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    Ok(match rect.as_slice() {
        [l, t, r, b] => Ok(((l + r) / 2, (t + b) / 2)),
        _ => Err(format!("{target} has no rectangle: {control}")),
    })
}

async fn xdotool(env: &[(String, String)], args: &[&str]) -> Result<(), PersonError> {
    let failed = |why: String| PersonError::Xdotool {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        why,
    };
    let out = tokio::process::Command::new("xdotool")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await
        .map_err(|e| failed(format!("cannot run it (install xdotool): {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_line_gives_the_source_and_the_steps() {
        let printed = "recording on default — show it now; press Enter or Ctrl-C\n  click_input on Edit \"Name:\" (in New)\ndemonstration 0193 stored for zenity (3 steps, source recording:01J9)\n";
        assert_eq!(stored(printed), Some(("recording:01J9".to_owned(), 3)));
        assert_eq!(stored("demonstration stored nowhere"), None);
    }
}
