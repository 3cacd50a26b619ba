//! What `ufo-suite` does with its settings: check them, load the task files (`--validate` stops there
//! after listing them), choose the output folder, run, print the table and summary, write
//! `report.json`, and say whether the success threshold is met.

use std::path::PathBuf;
use std::time::Instant;

use crate::config::{Config, ConfigError};
use crate::report::{self, TaskReport};
use crate::run::{self, SuiteError};
use crate::task::{self, TaskError};

/// Why the suite could not run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A setting is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A task file is unusable.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The run could not start.
    #[error(transparent)]
    Suite(#[from] SuiteError),
    /// No task is selected.
    #[error("no task to run (tasks in {0}; --only {1:?})")]
    Empty(String, Vec<String>),
    /// The output folder.
    #[error("cannot use the output folder {0}")]
    Out(PathBuf, #[source] std::io::Error),
}

/// Runs the suite as configured; true when the success threshold is met.
pub async fn execute(cfg: Config) -> Result<bool, CliError> {
    cfg.validate()?;
    let tasks = task::select(&task::load_all(&cfg.tasks)?, &cfg.only);
    if tasks.is_empty() {
        let places: Vec<String> = cfg.tasks.iter().map(|p| p.display().to_string()).collect();
        return Err(CliError::Empty(places.join(", "), cfg.only.clone()));
    }
    if cfg.validate {
        for t in &tasks {
            let steps: usize = t.subtasks.iter().map(|s| s.steps.len()).sum();
            let demo = match (&t.learn_from, &t.repeat_of) {
                (Some(teacher), _) => format!("learns from {teacher} (no demonstration)"),
                (None, Some(first)) => format!(
                    "repeats {first} with reuse ({} subtask(s) for the model's fallbacks)",
                    t.subtasks.len()
                ),
                (None, None) => format!("{} subtask(s), {steps} step(s)", t.subtasks.len()),
            };
            println!(
                "{}: {demo}, {} check(s) — {}",
                t.name,
                t.checks.len(),
                t.path.display()
            );
        }
        println!("{} task file(s) are valid", tasks.len());
        return Ok(true);
    }
    let out = match &cfg.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("ufo-suite-{}", chrono_free_stamp())),
    };
    std::fs::create_dir_all(&out).map_err(|e| CliError::Out(out.clone(), e))?;
    eprintln!(
        "ufo-suite: {} task(s), {} model; output in {}",
        tasks.len(),
        cfg.model_url
            .as_deref()
            .unwrap_or("the demonstration-following stand-in"),
        out.display()
    );
    let started = Instant::now();
    let total = tasks.len();
    let reports = run::run(&cfg, &tasks, &out, |i, r: &TaskReport| {
        eprintln!(
            "[{}/{total}] {} {} ({} steps, {:.1} s)",
            i + 1,
            r.name,
            if r.passed { "pass" } else { "FAIL" },
            r.steps,
            r.wall_seconds
        );
    })
    .await?;
    println!("{}", report::table(&reports));
    for r in reports.iter().filter(|r| !r.passed) {
        println!("## {} failed\n{}\n", r.name, r.why.trim());
    }
    for r in reports.iter().filter_map(|r| r.replay.as_deref()) {
        if !r.passed {
            println!("## {} failed\n{}\n", r.name, r.why.trim());
        }
    }
    println!(
        "{}",
        report::summary(&reports, started.elapsed(), cfg.min_success)
    );
    let json = serde_json::json!({"tasks": reports, "success_rate": report::success_rate(&reports),
                                  "replay_rate": report::replay_rate(&reports),
                                  "threshold": cfg.min_success});
    let path = out.join("report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&json).unwrap_or_default())
        .map_err(|e| CliError::Out(path.clone(), e))?;
    // With --replay the replays of the passed tasks must meet the same threshold.
    Ok(report::success_rate(&reports) + 1e-9 >= cfg.min_success
        && report::replay_rate(&reports) + 1e-9 >= cfg.min_success)
}

/// A folder name part unique to this run: seconds since the epoch and the process id.
fn chrono_free_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{secs}-{}", std::process::id())
}
