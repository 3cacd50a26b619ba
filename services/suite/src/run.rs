//! One run of the suite: one private desktop, one model endpoint and one cluster (`ufo-session`,
//! `ufo-executor`, `ufo-agent` as real processes talking gRPC) shared by every task; per task: its
//! files and applications, the request submitted over REST and followed over `StreamSteps`, the checks,
//! the figures, and a clean desktop for the next task.
//!
//! A task passes when the agent says it finished *and* every check holds on real state. With `--replay`,
//! once every task ran, the model endpoint is shut and each passed task is submitted again as a replay
//! ([`Submission::Replay`]) from a fresh setup, its windows moved and resized, and checked again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::Instrument as _;
use ufo_client::{AgentClient, ClientError, NewTask};
use ufo_testkit::Cluster;

use crate::check::{self, CheckSettings, Verdict};
use crate::config::Config;
use crate::desk::{Desk, DeskError, Placed, RunningApp};
use crate::home::TaskHome;
use crate::report::TaskReport;
use crate::standin::{Mode, ModelServer, Patience};
use crate::task::Task;

/// Why the suite itself (not a task) could not run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The desktop did not start.
    #[error(transparent)]
    Desk(#[from] DeskError),
    /// The services did not start.
    #[error("the services did not start")]
    Cluster(#[from] ufo_testkit::ClusterError),
    /// Local files or sockets.
    #[error("{0}")]
    Io(String, #[source] std::io::Error),
    /// The agent's client could not be built.
    #[error("cannot build the agent's client")]
    Client(#[from] ClientError),
}

/// Why a task could not be submitted and followed.
#[derive(Debug, thiserror::Error)]
enum TaskRunError {
    /// A call to the agent failed.
    #[error(transparent)]
    Api(#[from] ClientError),
    /// The created task has no id.
    #[error("POST /v1/tasks returned no id: {0}")]
    NoId(Value),
}

/// A teacher's experience the agents could not retrieve in time.
#[derive(Debug, thiserror::Error)]
#[error("the teacher's experience {experience} was not retrievable within {} ms ({last})", .waited.as_millis())]
struct NotTaught {
    /// The experience's source, `task:<id>`.
    experience: String,
    /// How long the suite waited (`--experience-timeout-ms`).
    waited: Duration,
    /// What the last search answered.
    last: String,
}

/// How a task is put to the agent: by the model (today), or later as a replay of a recorded task.
#[derive(Debug, Clone)]
pub enum Submission {
    /// The request, decided step by step by the model endpoint.
    Model,
    /// The request with `reuse: true` (a repeat, docs/knowledge.md "Reuse"): the agent follows the
    /// earlier run's steps and asks the model once for the new texts and where the screen differs.
    Reuse,
    /// A replay of the recorded task `of` (`replay_of`), its windows moved and resized.
    Replay {
        /// The recorded task's id.
        of: String,
        /// Where the recording's setup windows were, in setup order.
        recorded: Vec<Placed>,
    },
}

/// What every task shares.
struct Shared<'a> {
    cfg: &'a Config,
    desk: Desk,
    model: ModelServer,
    agent: AgentClient,
    checks: CheckSettings,
    probe: PathBuf,
    out: PathBuf,
    /// The file the launch wrappers read the current task's home from.
    home_env: PathBuf,
    baseline: Vec<ufo_executor::backend::WindowInfo>,
    /// The `ufo` CLI (beside the services' binaries), the agent's REST address and the suite user's key:
    /// tasks a person shows run `ufo record` with them.
    ufo: PathBuf,
    rest_url: String,
    api_key: String,
}

/// The largest step limit the suite submits: its `--max-steps`, or a task file's own when larger.
fn steps_cap(cfg: &Config, tasks: &[Task]) -> u32 {
    tasks
        .iter()
        .filter_map(|t| t.max_steps)
        .fold(cfg.max_steps, u32::max)
}

fn stand_in_model(cfg: &Config) -> &str {
    if cfg.model_url.is_some() {
        &cfg.model
    } else {
        "ufo-suite-standin"
    }
}

/// Runs `tasks` and returns a report per task, in order. `progress` is told each finished task.
pub async fn run(
    cfg: &Config,
    tasks: &[Task],
    out: &Path,
    mut progress: impl FnMut(usize, &TaskReport),
) -> Result<Vec<TaskReport>, SuiteError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |e| SuiteError::Io(what, e)
    };
    let desk = Desk::start(cfg.screen.0, cfg.screen.1).await?;
    let mode = match &cfg.model_url {
        Some(url) => Mode::Forward {
            base_url: url.clone(),
            api_key: cfg.model_key.clone(),
        },
        None => Mode::StandIn(Patience {
            max_waits: cfg.standin_max_waits,
            max_retries: cfg.standin_max_retries,
        }),
    };
    let model = ModelServer::start(mode, cfg.max_body_bytes)
        .await
        .map_err(io("cannot start the model endpoint"))?;
    model.set_latency_ms(cfg.standin_latency_ms);
    let model_name = stand_in_model(cfg);
    let mut builder = Cluster::builder()
        .local_executor(desk.env())
        .llm_base_url(model.base_url())
        .agent_args(["--claim-interval-ms", "50"])
        .agent_args(["--host-model", model_name, "--app-model", model_name])
        // The suite measures steps, not money: every model is priced at 0 so no task stops on cost.
        .agent_args(["--llm-default-price", "0/0"])
        // Nobody answers questions or approves actions during a suite run.
        .agent_args([
            "--question-timeout-seconds",
            "5",
            "--question-fallback",
            "continue",
        ])
        .agent_args(["--confirm-timeout-seconds", "5"])
        // The suite's own step limit (and any task's) is what the agents run: the agent refuses a
        // task asking for more than its --max-steps, so the suite raises it to the largest it asks.
        .agent_args(["--max-steps".to_owned(), steps_cap(cfg, tasks).to_string()]);
    if cfg.knowledge {
        // Every finished task becomes an experience of the suite's user; learning tasks follow them.
        builder = builder.agent_args([
            "--knowledge".to_owned(),
            "--knowledge-budget-chars".to_owned(),
            cfg.knowledge_budget_chars.to_string(),
        ]);
    }
    if cfg.model_url.is_none() {
        // The stand-in never fails transiently; a retry would only hide a bug.
        builder = builder.agent_args(["--llm-max-retries", "0"]);
    }
    // Programs the HostAgent launches run through wrappers that give them the current task's home.
    let home_env = out.join("task-home.env");
    let launchable: BTreeSet<&str> = tasks.iter().flat_map(Task::launchable).collect();
    for program in launchable {
        let wrapper = crate::home::launch_wrapper(&out.join("bin"), &home_env, program)
            .map_err(io("cannot write a launch wrapper"))?;
        builder = builder.executor_args([
            "--allow-app".to_owned(),
            format!("{program}={}", wrapper.display()),
        ]);
    }
    // The tasks' MCP servers, each with its own task folder filled in: one file for the whole run
    // (the agent reads it at start; a server starts on its first use).
    let servers: Vec<Value> = tasks
        .iter()
        .filter(|_| cfg.mcp)
        .flat_map(|t| t.resolved(&out.join("tasks").join(&t.name)).mcp)
        .map(|m| m.config())
        .collect();
    if !servers.is_empty() {
        let path = out.join("mcp-servers.json");
        std::fs::write(&path, json!({"servers": servers}).to_string())
            .map_err(io("cannot write the MCP servers file"))?;
        builder = builder.agent_args(["--mcp-servers".to_owned(), path.display().to_string()]);
    }
    if let Some(url) = &cfg.database_url {
        builder = builder.database_url(url.clone());
    }
    let bin_dir = match &cfg.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .map_err(io("cannot locate ufo-suite"))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    let ufo = bin_dir.join("ufo");
    let mut cluster = builder.binaries_from(bin_dir).start().await?;
    let agent = AgentClient::new(
        &cluster.rest_url,
        Some(cluster.api_key.clone()),
        ufo_client::Timeouts::default(),
    )?
    .with_grpc(cluster.grpc_url.clone());
    let probe = check::install_probe(out).map_err(io("cannot write the probe script"))?;
    let baseline = desk.windows().await?;
    let shared = Shared {
        cfg,
        checks: CheckSettings {
            python: cfg.python.clone(),
            timeout: Duration::from_millis(cfg.check_timeout_ms),
            env: desk.env(),
        },
        desk,
        model,
        agent,
        probe,
        out: out.to_owned(),
        home_env,
        baseline,
        ufo,
        rest_url: cluster.rest_url.clone(),
        api_key: cluster.api_key.clone(),
    };
    let mut reports: Vec<TaskReport> = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let span = tracing::info_span!("suite.task", task = %task.name);
        let report = match (&task.learn_from, &task.repeat_of) {
            (Some(teacher), _) => {
                let taught = tasks.iter().zip(&reports).find(|(t, _)| t.name == *teacher);
                run_learner(&shared, task, teacher, taught, Submission::Model)
                    .instrument(span)
                    .await
            }
            (None, Some(first)) => {
                let done = tasks.iter().zip(&reports).find(|(t, _)| t.name == *first);
                run_learner(&shared, task, first, done, Submission::Reuse)
                    .instrument(span)
                    .await
            }
            (None, None) if task.person.is_some() => {
                run_person(&shared, task).instrument(span).await
            }
            (None, None) => {
                run_task(&shared, task, Submission::Model)
                    .instrument(span)
                    .await
            }
        };
        progress(i, &report);
        reports.push(report);
    }
    if cfg.replay {
        // Replays run with no model to call: the endpoint is shut and its port refuses connections.
        let stopped = shared
            .model
            .stop()
            .await
            .map_err(io("cannot stop the model endpoint"))?;
        tracing::info!(%stopped, "model endpoint stopped for the replays");
        eprintln!("ufo-suite: {stopped}; replaying the passed tasks");
        for (i, (task, report)) in tasks.iter().zip(&mut reports).enumerate() {
            // A task a person showed has no recorded run of the agent to replay.
            if !report.passed || task.person.is_some() {
                continue;
            }
            let how = Submission::Replay {
                of: report.task_id.clone(),
                recorded: report.windows.clone(),
            };
            for run in 1..=cfg.replay_times {
                let span = tracing::info_span!("suite.replay", task = %task.name, run);
                let mut replay = run_task(&shared, &task.for_replay(), how.clone())
                    .instrument(span)
                    .await;
                replay.model_stopped = true;
                replay.replay_run = run;
                replay.replay_times = cfg.replay_times;
                replay.name.push_str(" (replay)");
                progress(i, &replay);
                let passed = replay.passed;
                report.replay = Some(Box::new(replay));
                if !passed {
                    break;
                }
            }
        }
    }
    // What the services said, for a failure the table and the report do not explain.
    let logs = out.join("services.log");
    if let Err(e) = std::fs::write(&logs, cluster.logs()) {
        tracing::warn!(error = %e, path = %logs.display(), "cannot write the services' logs");
    }
    if let Err(e) = cluster.stop().await {
        tracing::warn!(error = %e, "stopping the services failed");
    }
    Ok(reports)
}

/// A learning task: run once its teacher passed and the teacher's experience can be retrieved (with
/// `--knowledge`), in a fresh setup like any task; the stand-in has no demonstration for it. A repeat
/// (`how` = [`Submission::Reuse`]) runs the same way after the task it repeats, with reuse on.
async fn run_learner(
    s: &Shared<'_>,
    task: &Task,
    teacher: &str,
    taught: Option<(&Task, &TaskReport)>,
    how: Submission,
) -> TaskReport {
    let repeat = matches!(how, Submission::Reuse);
    let mut report = match taught {
        Some((t, r)) if r.passed => {
            let stored = if s.cfg.knowledge {
                let request = t.resolved(&task_dir(s, t)).request;
                let source = r
                    .shown
                    .clone()
                    .unwrap_or_else(|| format!("task:{}", r.task_id));
                experience_stored(s, &request, &source).await
            } else {
                Ok(())
            };
            let mut report = run_task(s, task, how).await;
            if let (Err(why), false) = (stored, report.passed) {
                report.why = format!("{why}\n{}", report.why);
            }
            report
        }
        Some((_, r)) => TaskReport {
            name: task.name.clone(),
            status: "not taught".into(),
            why: format!("its teacher {teacher} did not pass ({})", r.status),
            ..TaskReport::default()
        },
        None => TaskReport {
            name: task.name.clone(),
            status: "not taught".into(),
            why: format!("its teacher {teacher} did not run"),
            ..TaskReport::default()
        },
    };
    if repeat {
        report.repeat_of = Some(teacher.to_owned());
    } else {
        report.learns_from = Some(teacher.to_owned());
    }
    report
}

/// Waits until the teacher's experience (`task:<id>`, or a person's demonstration `recording:<id>`) is
/// among the hits the agents retrieve for the teacher's request (`GET /v1/knowledge/search`): the agent
/// stores an experience after the task's end is reported. Err after `--experience-timeout-ms`, saying
/// what the search last answered.
async fn experience_stored(s: &Shared<'_>, request: &str, source: &str) -> Result<(), NotTaught> {
    let span = tracing::info_span!("suite.experience_wait", source);
    async {
        let source = source.to_owned();
        let timeout = Duration::from_millis(s.cfg.experience_timeout_ms);
        let deadline = Instant::now() + timeout;
        loop {
            let last = match s.agent.search_knowledge(request, None).await {
                Ok(found) => {
                    let hits = found["hits"].as_array().cloned().unwrap_or_default();
                    if hits.iter().any(|h| h["source"] == source.as_str()) {
                        return Ok(());
                    }
                    format!("{} other hit(s)", hits.len())
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(NotTaught {
                    experience: source,
                    waited: timeout,
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .instrument(span)
    .await
}

/// A task a person shows (`[person]`): its setup like any task's, then `ufo record` while the scripted
/// person does its steps ([`crate::person`]), then its checks on what the person did. It passes when the
/// demonstration was stored and every check holds; its learners follow that demonstration.
async fn run_person(s: &Shared<'_>, task: &Task) -> TaskReport {
    let dir = task_dir(s, task);
    let task = task.resolved(&dir);
    let mut report = TaskReport {
        name: task.name.clone(),
        ..TaskReport::default()
    };
    let Some(person) = &task.person else {
        report.status = "error".into();
        report.why = "not a task a person shows".into();
        return report;
    };
    let mut apps = Vec::new();
    if let Err(why) = set_up(s, &task, &dir, &mut apps, None, &mut report).await {
        report.status = "setup failed".into();
        report.why = why.to_string();
    } else {
        let env = s.desk.env();
        let setting = crate::person::Setting {
            ufo: &s.ufo,
            server: &s.rest_url,
            token: &s.api_key,
            env: &env,
            timeout: Duration::from_millis(s.cfg.person_timeout_ms),
        };
        let started = Instant::now();
        let shown = crate::person::show(&s.agent, &setting, &task.request, person).await;
        report.wall_seconds = started.elapsed().as_secs_f64();
        match shown {
            Ok(shown) => {
                report.status = "shown".into();
                report.steps = shown.steps;
                report.result = shown.printed;
                report.shown = Some(shown.source);
                let verdicts = checks(s, &task, &dir, &mut apps).await;
                report.checks = verdicts.iter().map(|v| v.message.clone()).collect();
                report.passed = verdicts.iter().all(|v| v.passed);
                if !report.passed {
                    report.why = verdicts
                        .iter()
                        .filter(|v| !v.passed)
                        .map(|v| format!("check failed: {}", v.message))
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
            Err(e) => {
                report.status = "not shown".into();
                report.why = e.to_string();
            }
        }
    }
    let cleanup = Duration::from_millis(s.cfg.cleanup_timeout_ms);
    if let Err(e) = s.desk.clean_up(apps, &s.baseline, cleanup).await {
        report.why.push_str(&format!("\nclean-up: {e}"));
        tracing::warn!(error = %e, "desktop not clean after the task");
    }
    report
}

fn task_dir(s: &Shared<'_>, task: &Task) -> PathBuf {
    s.out.join("tasks").join(&task.name)
}

async fn run_task(s: &Shared<'_>, task: &Task, how: Submission) -> TaskReport {
    let dir = task_dir(s, task);
    let task = task.resolved(&dir);
    let mut report = TaskReport {
        name: task.name.clone(),
        ..TaskReport::default()
    };
    let mut apps = Vec::new();
    let recorded = match &how {
        Submission::Replay { recorded, .. } => Some(recorded.as_slice()),
        Submission::Model | Submission::Reuse => None,
    };
    if let Err(why) = set_up(s, &task, &dir, &mut apps, recorded, &mut report).await {
        report.status = "setup failed".into();
        report.why = why.to_string();
    } else {
        s.model.begin(&task.request, task.subtasks.clone());
        let started = Instant::now();
        let outcome = submit_and_follow(s, &task, &how).await;
        report.wall_seconds = started.elapsed().as_secs_f64();
        let (tally, calls) = s.model.end(&task.request);
        report = report.with_tally(tally);
        keep_calls(&dir, &calls);
        match outcome {
            Err(e) => {
                report.status = "error".into();
                report.why = e.to_string();
            }
            Ok((id, view, steps)) => {
                report.task_id = id;
                report.status = view["status"].as_str().unwrap_or("unknown").to_owned();
                report.replayed = view["replay"]["replayed"].as_u64().unwrap_or(0);
                report.fell_back = view["replay"]["fell_back"].as_u64().unwrap_or(0);
                if let Some(r) = view.get("reuse").filter(|r| r.is_object()) {
                    report.reused_of = r["of"].as_str().map(str::to_owned);
                    report.replayed = r["reused"].as_u64().unwrap_or(0);
                    report.fell_back = r["fell_back"].as_u64().unwrap_or(0);
                }
                report.result = view["result"].as_str().unwrap_or("").to_owned();
                report.steps = steps.len() as u64;
                report.observe_act_seconds = observe_act(&steps);
                report.step_log = steps.iter().map(brief).collect();
                let verdicts = checks(s, &task, &dir, &mut apps).await;
                report.checks = verdicts.iter().map(|v| v.message.clone()).collect();
                report.passed = report.status == "finished" && verdicts.iter().all(|v| v.passed);
                if !report.passed {
                    report.why = explain(s, &report, &verdicts, &steps, &dir).await;
                }
            }
        }
    }
    let cleanup = Duration::from_millis(s.cfg.cleanup_timeout_ms);
    if let Err(e) = s.desk.clean_up(apps, &s.baseline, cleanup).await {
        // The next task would see these windows: say so with this task.
        report.why.push_str(&format!("\nclean-up: {e}"));
        tracing::warn!(error = %e, "desktop not clean after the task");
    }
    report
}

/// Writes the task's model calls, one JSON object a line, to `prompts.jsonl` in its folder (what each
/// agent was shown, for reading a run afterwards and for the tests).
fn keep_calls(dir: &Path, calls: &[Value]) {
    let lines: String = calls.iter().map(|c| format!("{c}\n")).collect();
    let path = dir.join("prompts.jsonl");
    if let Err(e) = std::fs::write(&path, lines) {
        tracing::warn!(error = %e, path = %path.display(), "cannot keep the task's prompts");
    }
}

/// Why a task's setup failed.
#[derive(Debug, thiserror::Error)]
enum SetUpError {
    /// A file or folder of the task could not be prepared.
    #[error("cannot {what} {}: {source}", .path.display())]
    Files {
        /// `empty`, `create`, `write`.
        what: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A replay's recording has fewer windows than the task has applications.
    #[error("setup: the recording has no window for app {0}")]
    NoRecordedWindow(usize),
    /// An application did not start.
    #[error("setup: {0}")]
    App(#[from] DeskError),
}

async fn set_up(
    s: &Shared<'_>,
    task: &Task,
    dir: &Path,
    apps: &mut Vec<RunningApp>,
    recorded: Option<&[Placed]>,
    report: &mut TaskReport,
) -> Result<(), SetUpError> {
    let files = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| SetUpError::Files { what, path, source }
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(files("empty", dir))?;
    }
    std::fs::create_dir_all(dir).map_err(files("create", dir))?;
    let home = TaskHome::create(dir).map_err(files("create", &dir.join("home")))?;
    home.publish(&s.home_env)
        .map_err(files("write", &s.home_env))?;
    let home = home.env();
    for f in &task.files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(files("create", parent))?;
        }
        std::fs::write(&path, &f.content).map_err(files("write", &path))?;
    }
    for (i, app) in task.apps.iter().enumerate() {
        let was = match recorded {
            Some(r) => Some(*r.get(i).ok_or(SetUpError::NoRecordedWindow(i + 1))?),
            None => None,
        };
        let (running, placed) = s
            .desk
            .start_app(app, s.cfg.app_ready_timeout(), was, &home)
            .await?;
        apps.push(running);
        report.windows.push(placed);
    }
    Ok(())
}

async fn submit_and_follow(
    s: &Shared<'_>,
    task: &Task,
    how: &Submission,
) -> Result<(String, Value, Vec<Value>), TaskRunError> {
    let timeout = task
        .timeout
        .unwrap_or(Duration::from_secs(u64::from(s.cfg.task_timeout_seconds)));
    let work = match how {
        Submission::Model => NewTask::request(task.request.clone()),
        Submission::Reuse => NewTask {
            reuse: Some(true),
            ..NewTask::request(task.request.clone())
        },
        Submission::Replay { of, .. } => NewTask::replay(of.clone(), None),
    };
    let submitted = NewTask {
        max_steps: Some(task.max_steps.unwrap_or(s.cfg.max_steps)),
        timeout_seconds: Some(timeout.as_secs()),
        confirm_policy: Some("never".to_owned()),
        ..work
    };
    let created = s.agent.submit(&submitted).await?;
    let id = match created.get("id").and_then(Value::as_str) {
        Some(id) => id.to_owned(),
        None => return Err(TaskRunError::NoId(created)),
    };
    // The agent enforces the time limit; the extra minute only guards against a stuck stream.
    let ended = follow(&s.agent, &id, timeout + Duration::from_secs(60)).await?;
    if !ended {
        s.agent
            .cancel(&id, Some("the suite's time limit passed"))
            .await?;
        follow(&s.agent, &id, Duration::from_secs(30)).await?;
    }
    let view = s.agent.get(&id).await?;
    let steps = s.agent.all_steps(&id).await?;
    Ok((id, view, steps))
}

/// Follows `StreamSteps` until the server ends it with the task; false when `timeout` passed first.
async fn follow(agent: &AgentClient, id: &str, timeout: Duration) -> Result<bool, ClientError> {
    match tokio::time::timeout(timeout, agent.events_until_end(id, 1)).await {
        Ok(events) => events.map(|_| true),
        Err(_) => Ok(false),
    }
}

async fn checks(s: &Shared<'_>, task: &Task, dir: &Path, apps: &mut [RunningApp]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for c in &task.checks {
        let span = tracing::info_span!("suite.check", check = ?c);
        verdicts.push(
            check::run(c, dir, apps, &s.probe, &s.checks)
                .instrument(span)
                .await,
        );
    }
    verdicts
}

/// A step in brief for the JSON report.
fn brief(step: &Value) -> Value {
    let phases: serde_json::Map<String, Value> = step["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["phase"].as_str()?.to_owned(), p["seconds"].clone())))
        .collect();
    json!({
        "step": step["step"], "agent": step["agent_name"], "status": step["status"],
        "actions": step["actions"].as_array().into_iter().flatten()
            .map(|a| a["representation"].clone()).collect::<Vec<_>>(),
        "seconds": phases,
        // A replayed step's remark (e.g. how long it waited for its target).
        "note": step["replay"]["note"],
    })
}

/// Seconds the steps spent in data collection and action execution.
fn observe_act(steps: &[Value]) -> f64 {
    steps
        .iter()
        .flat_map(|st| st["phases"].as_array().cloned().unwrap_or_default())
        .filter(|p| {
            matches!(
                p["phase"].as_str(),
                Some("data_collection" | "action_execution")
            )
        })
        .filter_map(|p| p["seconds"].as_f64())
        .sum()
}

/// Why a task did not pass: its status and result, the checks that failed, and the last step (what it
/// observed, decided and what its actions did), with that step's screenshot saved next to the task.
async fn explain(
    s: &Shared<'_>,
    r: &TaskReport,
    verdicts: &[Verdict],
    steps: &[Value],
    dir: &Path,
) -> String {
    let mut why = vec![format!(
        "task {} ended {}: {}",
        r.task_id, r.status, r.result
    )];
    if r.status == "finished" {
        why.push("the agent reported success, but the checks disagree".into());
    }
    for v in verdicts.iter().filter(|v| !v.passed) {
        why.push(format!("check failed: {}", v.message));
    }
    if let Some(last) = steps.last() {
        let actions: Vec<&str> = last["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["representation"].as_str())
            .collect();
        why.push(format!(
            "last step {} ({}, status {}): observed: {}; thought: {}; actions: {}",
            last["step"],
            last["agent_name"].as_str().unwrap_or(""),
            last["status"].as_str().unwrap_or(""),
            last["observation"].as_str().unwrap_or(""),
            last["thought"].as_str().unwrap_or(""),
            if actions.is_empty() {
                "none".into()
            } else {
                actions.join("; ")
            }
        ));
        let step = last["step"].as_u64().unwrap_or(0);
        let kinds: Vec<&str> = last["screenshots"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(kind) = ["annotated", "desktop", "clean"]
            .into_iter()
            .find(|k| kinds.contains(k))
        {
            match s.agent.screenshot(&r.task_id, step, kind).await {
                Ok(shot) => {
                    let path = dir.join(format!("last-step-{step}-{kind}.png"));
                    if std::fs::write(&path, shot.bytes).is_ok() {
                        why.push(format!("its screenshot: {}", path.display()));
                    }
                }
                Err(e) => why.push(format!("its screenshot could not be read: {e}")),
            }
        }
    }
    why.join("\n")
}
