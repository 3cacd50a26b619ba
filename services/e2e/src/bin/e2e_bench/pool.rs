//! The desktop pool at scale (issue 36): `executors` stand-in executors (default 500) dial out to one
//! agent and stay connected, then `tasks` tasks (default 100) are scheduled onto the pool.
//!
//! Each stand-in is a real client of the real protocol (`ufo.v1.ExecutorHub/Dial`, its enrollment token,
//! its name and labels in the metadata, heartbeats at the interval the agent's welcome gives) and answers
//! the tunnelled Executor API calls through the executor stand-in's `ufo.v1.Executor` service (the agent
//! crate's desktop double, one 400×300 window per executor) with the real executor's own tunnel code
//! (`ufo_executor::dialout::answer`). One tokio task per executor reads its stream, answers each call in
//! turn and sends its heartbeats; nothing is spawned per call.
//!
//! Measured: the agent's resident memory (`VmRSS` in /proc/PID/status) before the executors connect, with
//! all of them connected and idle, and its peak while the tasks run (sampled every 100 ms); the CPU time
//! (/proc/PID/stat) of the agent, the session service and the store over an idle window and over the
//! task run; and the scheduling overhead: from a desktop freeing (its stand-in answered the task's
//! `Reset`; the check-in follows) to the first command (`Execute`) of the next task on it, counted only
//! when that task was already waiting (submitted before the desktop freed).
//!
//! Checked (the run fails otherwise): every task finished; every stand-in connected once and was still
//! connected at the end, and the agent lists all of them connected; in the store's events every desktop's
//! tasks ran one after another (each claimed after the one before it ended); every command a stand-in
//! received fell inside the span of a task the store had checked out to it; and the stand-in's resets
//! name exactly the store's tasks on that desktop, in order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use ufo_agent::dispatch::dialout::enroll::Enrollments;
use ufo_agent::testing::ScriptedLlm;
use ufo_client::NewTask;
use ufo_e2e::standin::{StandIn, notes_desktop};
use ufo_proto::v1::executor_hub_client::ExecutorHubClient;
use ufo_proto::v1::executor_server::ExecutorServer;
use ufo_proto::v1::{
    AgentFrame, EventKind, ExecutorFrame, Heartbeat, ResetRequest, agent_frame, executor_frame,
};
use ufo_testkit::Cluster;

use crate::measure::{CpuSample, Watched, percentile, rss_bytes};
use crate::report::{ms, reply};
use crate::store::Storage;

/// Largest frame a stand-in sends or accepts (the executor's default).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// How many of a handed-over task's first calls the profile shows.
const FIRST_CALLS: usize = 8;
/// How many of the statements (most time first) the Postgres table shows.
const STATEMENTS_SHOWN: usize = 25;
/// How often the agent's resident memory is sampled while the tasks run.
const RSS_SAMPLE: Duration = Duration::from_millis(100);

/// What the run is asked to do.
#[derive(Debug, Clone)]
pub struct Params {
    /// Stand-in executors.
    pub executors: usize,
    /// Of which this many carry the label the tasks ask for (`lane=hot`); 0: the tasks ask for `any`
    /// desktop without labels.
    pub fitting: usize,
    /// Tasks submitted at once.
    pub tasks: usize,
    /// AppAgent CONTINUE steps per task (each task takes this + 3 steps).
    pub app_steps: usize,
    /// How long a stand-in takes for each `Execute` (0: answers at once).
    pub command_delay: Duration,
    /// The idle window measured with every executor connected.
    pub idle: Duration,
    /// The agent's `--dial-out-heartbeat-ms`.
    pub heartbeat_ms: u64,
    /// The agent's `--runner-slots`.
    pub runner_slots: usize,
    /// How long the executors may take to connect, and the tasks to end.
    pub timeout: Duration,
    /// Where to write the agent's and session service's logs after the run (`UFO_LOG` sets their level).
    pub logs: Option<std::path::PathBuf>,
}

/// One call a stand-in answered.
#[derive(Debug, Clone)]
struct CallRecord {
    kind: CallKind,
    received: Instant,
    received_at: SystemTime,
    answered: Instant,
    /// For a reset: the task it names.
    reset_task: Option<String>,
    /// The Executor API method (`Capture`, `Execute`, …).
    method: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallKind {
    Execute,
    Reset,
    Other,
}

/// One stand-in's own account.
#[derive(Debug, Default)]
struct StandInState {
    /// Streams the agent accepted.
    connections: AtomicUsize,
    /// Accepted streams that ended before the bench stopped.
    dropped: AtomicUsize,
    /// The last reason a connection failed or ended.
    last_error: Mutex<Option<String>>,
    calls: Mutex<Vec<CallRecord>>,
}

/// Every stand-in's shared count.
#[derive(Debug, Default)]
struct Fleet {
    connected: AtomicUsize,
}

/// CPU time per process over a window, with its length.
#[derive(Debug, Clone, Default)]
pub struct CpuWindow {
    /// Wall time of the window.
    pub wall: Duration,
    /// CPU time per process label.
    pub cpu: BTreeMap<String, Duration>,
}

impl CpuWindow {
    /// A process's CPU as a percentage of one core.
    pub fn percent(&self, label: &str) -> f64 {
        let used = self.cpu.get(label).copied().unwrap_or_default();
        100.0 * used.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

/// What the run found.
#[derive(Debug, Clone, Default)]
pub struct PoolRun {
    /// Postgres only: the statements while the tasks ran (`pg_stat_statements`), most time first.
    pub statements: Vec<crate::measure::StatementTime>,
    /// Stand-ins started.
    pub executors: usize,
    /// Time from starting the stand-ins to all of them connected.
    pub connect_all: Duration,
    /// Time from then until the store listed every one as a desktop.
    pub registered_all: Duration,
    /// The agent's resident bytes before any executor connected.
    pub rss_before: u64,
    /// ... with every executor connected, after the idle window.
    pub rss_idle: u64,
    /// Its largest sample while the tasks ran.
    pub rss_busy_peak: u64,
    /// The idle window.
    pub idle: CpuWindow,
    /// The task run (first submission to the last task's end).
    pub busy: CpuWindow,
    /// Tasks submitted and finished.
    pub tasks: usize,
    /// Tasks that finished.
    pub finished: usize,
    /// Desktops that served at least one task.
    pub desktops_used: usize,
    /// The most tasks one desktop served.
    pub most_tasks_on_one_desktop: usize,
    /// Stand-ins still connected at the end, by their own account.
    pub still_connected: usize,
    /// Executors the agent lists connected at the end.
    pub agent_lists_connected: usize,
    /// Streams that ended early (reconnections), over all stand-ins.
    pub dropped: usize,
    /// Commands (`Execute`) the stand-ins answered.
    pub commands: usize,
    /// Hand-overs: a desktop freed → the next waiting task's first command on it, sorted.
    pub handovers: Vec<Duration>,
    /// Frees after which the next task on that desktop had not been waiting (not counted above).
    pub not_waiting: usize,
    /// The hand-overs' first part: the desktop freed → the next task's claim (its `TASK_CLAIMED` event's
    /// time in the store), sorted.
    pub freed_to_claim: Vec<Duration>,
    /// Their second part: the claim → the first command, sorted.
    pub claim_to_command: Vec<Duration>,
    /// The desktop freed → the next waiting task's first call of any kind on it (its first touch of the
    /// desktop, before the model is asked anything), sorted.
    pub freed_to_first_call: Vec<Duration>,
    /// The claim → that first call, sorted.
    pub claim_to_first_call: Vec<Duration>,
    /// After each hand-over's claim, its task's first calls: (method, time since the claim) by position.
    pub first_calls: Vec<Vec<(String, Duration)>>,
    /// Claims repeated because a task's lease lapsed (the same desktop each time).
    pub reclaims: usize,
    /// Times `GET /v1/admin/desktops` failed while the executors registered.
    pub list_failures: usize,
}

/// Runs the pool benchmark on `storage`.
pub async fn run(storage: &Storage<'_>, p: &Params) -> anyhow::Result<PoolRun> {
    let dir = tempfile::Builder::new()
        .prefix("ufo-bench-pool")
        .tempdir()?;
    let enrollments = dir.path().join("enrollments.json");
    let names: Vec<String> = (0..p.executors)
        .map(|i| format!("standin-{i:04}"))
        .collect();
    let tokens = Enrollments::new(&enrollments).create_many(&names)?;

    let llm = ScriptedLlm::start().await?;
    let app_steps = p.app_steps;
    for _ in 0..p.tasks * (app_steps + 3) + 20 {
        llm.push_fn(move |req| reply(req, |r| crate::throughput::any_prompt(r, app_steps)));
    }
    let heartbeat = p.heartbeat_ms.to_string();
    let slots = p.runner_slots.to_string();
    let builder = Cluster::builder()
        .llm_base_url(llm.base_url())
        .agent_args([
            std::ffi::OsString::from("--executor-enrollments-file"),
            enrollments.clone().into_os_string(),
        ])
        .agent_args([
            "--api-admins",
            "test",
            "--runner-slots",
            slots.as_str(),
            "--dial-out-heartbeat-ms",
            heartbeat.as_str(),
            "--llm-max-retries",
            "0",
        ]);
    let mut cluster = storage.configure(builder)?.start().await?;
    let result = measure(storage, &cluster, p, tokens).await;
    if let Some(path) = &p.logs {
        std::fs::write(path, cluster.logs())
            .with_context(|| format!("cannot write the services' logs to {}", path.display()))?;
    }
    let logs = if result.is_err() {
        cluster.logs()
    } else {
        String::new()
    };
    cluster.stop().await?;
    result.map_err(|e| e.context(logs))
}

async fn measure(
    storage: &Storage<'_>,
    cluster: &Cluster,
    p: &Params,
    tokens: Vec<(String, String, String)>,
) -> anyhow::Result<PoolRun> {
    ufo_common::tls::install_crypto_provider();
    let agent = ufo_e2e::agent(cluster)?;
    let agent_pid = cluster
        .agent
        .as_ref()
        .and_then(|a| a.pid())
        .context("the agent's pid")?;
    let mut watched = storage.watched(cluster)?;
    watched.push(Watched {
        label: crate::throughput::BENCH.into(),
        pid: std::process::id(),
        children: false,
    });
    let mut run = PoolRun {
        executors: p.executors,
        tasks: p.tasks,
        rss_before: rss_bytes(agent_pid)?,
        ..PoolRun::default()
    };

    // The fleet dials out.
    let fleet = Arc::new(Fleet::default());
    let stop = CancellationToken::new();
    let mut states = Vec::with_capacity(tokens.len());
    let started = Instant::now();
    for (i, (name, _id, token)) in tokens.into_iter().enumerate() {
        let state = Arc::new(StandInState::default());
        states.push((name.clone(), state.clone()));
        let labels = if i < p.fitting {
            "pool=bench,lane=hot"
        } else {
            "pool=bench"
        };
        tokio::spawn(stand_in(
            cluster.grpc_url.clone(),
            name,
            token,
            labels,
            p.command_delay,
            state,
            fleet.clone(),
            stop.clone(),
        ));
    }
    let result = async {
        wait_for("every stand-in to connect", p.timeout, || {
            let n = fleet.connected.load(Ordering::SeqCst);
            (n >= p.executors).then_some(()).ok_or(n)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}; {}", first_errors(&states)))?;
        run.connect_all = started.elapsed();
        let registered = Instant::now();
        let mut unavailable = 0usize;
        loop {
            // Under the connect storm the store may refuse for a while (its pool busy with the
            // registrations): counted and asked again.
            let pool = match agent.desktops().await {
                Ok(pool) => pool,
                Err(e) if registered.elapsed() < p.timeout => {
                    unavailable += 1;
                    eprintln!("listing the desktops failed ({unavailable}): {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let listed = pool["desktops"].as_array().map_or(0, |all| {
                all.iter()
                    .filter(|d| {
                        d["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("standin-"))
                    })
                    .count()
            });
            if listed >= p.executors {
                break;
            }
            if registered.elapsed() > p.timeout {
                bail!(
                    "the store lists {listed} of {} desktops after {:?}",
                    p.executors,
                    p.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        run.registered_all = registered.elapsed();
        run.list_failures = unavailable;

        // Idle, every executor connected: heartbeats only.
        let before = CpuSample::take(&watched)?;
        let idle_started = Instant::now();
        tokio::time::sleep(p.idle).await;
        run.idle = CpuWindow {
            wall: idle_started.elapsed(),
            cpu: CpuSample::take(&watched)?.since(&before),
        };
        run.rss_idle = rss_bytes(agent_pid)?;

        // The tasks, submitted at once.
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(run.rss_idle));
        let sampling = CancellationToken::new();
        let sampler = tokio::spawn({
            let peak = peak.clone();
            let sampling = sampling.clone();
            async move {
                let mut ticks = tokio::time::interval(RSS_SAMPLE);
                loop {
                    tokio::select! {
                        () = sampling.cancelled() => return,
                        _ = ticks.tick() => {
                            if let Ok(rss) = rss_bytes(agent_pid) {
                                peak.fetch_max(rss, Ordering::Relaxed);
                            }
                        }
                    }
                }
            }
        });
        let labels = (p.fitting > 0).then(|| BTreeMap::from([("lane".into(), "hot".into())]));
        let statements = match (storage.postgres(), storage.database()) {
            (Some(pg), Some(db)) => {
                Some(crate::measure::Statements::reset(&pg.admin_url(), db).await?)
            }
            _ => None,
        };
        let before = CpuSample::take(&watched)?;
        let busy_started = Instant::now();
        // All at once, each on its own connection: submitted one after another, the first desktops would
        // free up before the last tasks exist, and those hand-overs would not be measured.
        let max_steps = u32::try_from(p.app_steps + 8)?;
        let submissions = (0..p.tasks).map(|i| {
            let agent = agent.clone();
            let task = NewTask {
                executor: Some("any".into()),
                labels: labels.clone(),
                max_steps: Some(max_steps),
                timeout_seconds: Some(p.timeout.as_secs().max(60)),
                ..NewTask::request(format!("read the total in Notes ({i})"))
            };
            tokio::spawn(async move { agent.submit(&task).await })
        });
        let mut ids = Vec::with_capacity(p.tasks);
        for task in futures::future::join_all(submissions).await {
            let task = task??;
            ids.push(task["id"].as_str().context("task id")?.to_owned());
        }
        let streams = ids.iter().map(|id| {
            let agent = agent.clone();
            let id = id.clone();
            tokio::spawn(async move { agent.events_until_end(&id, 1).await })
        });
        let mut events = Vec::with_capacity(ids.len());
        for stream in futures::future::join_all(streams).await {
            events.push(stream??);
        }
        run.busy = CpuWindow {
            wall: busy_started.elapsed(),
            cpu: CpuSample::take(&watched)?.since(&before),
        };
        if let Some(statements) = &statements {
            run.statements = statements.read_timed().await?;
        }
        sampling.cancel();
        let _ = sampler.await;
        run.rss_busy_peak = peak.load(Ordering::Relaxed);

        // What the agent says at the end.
        for id in &ids {
            let done = agent.get(id).await?;
            if done["status"] == "finished" {
                run.finished += 1;
            }
        }
        let executors = agent.executors().await?;
        run.agent_lists_connected = executors["executors"].as_array().map_or(0, |all| {
            all.iter()
                .filter(|e| e["connected"] == true)
                .filter(|e| {
                    e["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("standin-"))
                })
                .count()
        });
        run.still_connected = fleet.connected.load(Ordering::SeqCst);
        let (spans, reclaims) = task_spans(&ids, &events)?;
        run.reclaims = reclaims;
        check_and_measure(&mut run, &spans, &states)?;
        anyhow::Ok(())
    }
    .await;
    stop.cancel();
    result?;
    if run.finished != run.tasks {
        bail!("{} of {} tasks finished", run.finished, run.tasks);
    }
    if run.still_connected != run.executors
        || run.agent_lists_connected != run.executors
        || run.dropped != 0
    {
        bail!(
            "executors did not stay connected: {} of {} by their own account, {} listed by the agent, {} \
             streams ended early ({})",
            run.still_connected,
            run.executors,
            run.agent_lists_connected,
            run.dropped,
            first_errors(&states)
        );
    }
    Ok(run)
}

/// Polls `ready` every 20 ms until it gives a value, or fails after `timeout` with its last state.
async fn wait_for<T, S: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<T, S>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        match ready() {
            Ok(v) => return Ok(v),
            Err(state) if started.elapsed() > timeout => {
                bail!("timed out after {timeout:?} waiting for {what}: {state:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn first_errors(states: &[(String, Arc<StandInState>)]) -> String {
    let errors: Vec<String> = states
        .iter()
        .filter_map(|(name, s)| {
            let e = s.last_error.lock().ok()?.clone()?;
            Some(format!("{name}: {e}"))
        })
        .take(5)
        .collect();
    if errors.is_empty() {
        "no stand-in reported an error".into()
    } else {
        errors.join("; ")
    }
}

/// One task's time on its desktop, from the store's events.
#[derive(Debug, Clone)]
struct TaskSpan {
    id: String,
    desktop: String,
    created: SystemTime,
    claimed: SystemTime,
    ended: SystemTime,
}

fn event_time(event: &ufo_proto::v1::Event) -> anyhow::Result<SystemTime> {
    let t = event
        .created_at
        .as_ref()
        .context("an event without a time")?;
    Ok(SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(t.seconds)?,
            u32::try_from(t.nanos).unwrap_or(0),
        ))
}

/// Every task's span, and how many claims were repeated (a lease that lapsed).
fn task_spans(
    ids: &[String],
    events: &[Vec<ufo_proto::v1::Event>],
) -> anyhow::Result<(Vec<TaskSpan>, usize)> {
    let mut spans = Vec::with_capacity(ids.len());
    let mut reclaims = 0;
    for (id, events) in ids.iter().zip(events) {
        let created = event_time(events.first().context("a task without events")?)?;
        // A task whose lease lapsed (a loaded machine) is claimed again, with its desktop: its span on
        // the desktop starts at the first claim.
        let claims: Vec<&ufo_proto::v1::Event> = events
            .iter()
            .filter(|e| e.kind == EventKind::TaskClaimed as i32)
            .collect();
        let claim = claims
            .first()
            .with_context(|| format!("task {id} was never claimed"))?;
        let desktop_of = |e: &ufo_proto::v1::Event| {
            let payload = ufo_proto::json::from_optional_struct(e.payload.clone());
            payload["desktop"].as_str().map(str::to_owned)
        };
        let desktop =
            desktop_of(claim).with_context(|| format!("task {id}'s claim names no desktop"))?;
        if claims
            .iter()
            .any(|c| desktop_of(c).as_deref() != Some(&desktop))
        {
            bail!("task {id} was claimed on more than one desktop (no runner died here)");
        }
        reclaims += claims.len() - 1;
        let end = events
            .iter()
            .rfind(|e| {
                e.kind == EventKind::TaskFinished as i32 || e.kind == EventKind::TaskFailed as i32
            })
            .with_context(|| format!("task {id} has no end event"))?;
        spans.push(TaskSpan {
            id: id.clone(),
            desktop,
            created,
            claimed: event_time(claim)?,
            ended: event_time(end)?,
        });
    }
    Ok((spans, reclaims))
}

/// Checks that every desktop served one task at a time, by the store's events and by its stand-in's own
/// calls, and takes the hand-overs from the stand-ins' calls.
fn check_and_measure(
    run: &mut PoolRun,
    spans: &[TaskSpan],
    states: &[(String, Arc<StandInState>)],
) -> anyhow::Result<()> {
    let mut by_desktop: BTreeMap<&str, Vec<&TaskSpan>> = BTreeMap::new();
    for span in spans {
        by_desktop.entry(&span.desktop).or_default().push(span);
    }
    run.desktops_used = by_desktop.len();
    run.most_tasks_on_one_desktop = by_desktop.values().map(Vec::len).max().unwrap_or(0);
    for (name, state) in states {
        run.dropped += state.dropped.load(Ordering::SeqCst);
        if state.connections.load(Ordering::SeqCst) != 1 {
            bail!(
                "{name} connected {} times",
                state.connections.load(Ordering::SeqCst)
            );
        }
        let calls = state.calls.lock().map(|c| c.clone()).unwrap_or_default();
        run.commands += calls.iter().filter(|c| c.kind == CallKind::Execute).count();
        let mut tasks = by_desktop.get(name.as_str()).cloned().unwrap_or_default();
        tasks.sort_by_key(|t| t.claimed);
        for pair in tasks.windows(2) {
            if pair[1].claimed < pair[0].ended {
                bail!(
                    "{name}: task {} was claimed before task {} ended",
                    pair[1].id,
                    pair[0].id
                );
            }
        }
        // Every command inside the span of one of this desktop's tasks.
        let mut task_of_call = Vec::with_capacity(calls.len());
        for call in &calls {
            let owner = tasks
                .iter()
                .position(|t| t.claimed <= call.received_at && call.received_at <= t.ended);
            if call.kind == CallKind::Execute && owner.is_none() {
                bail!(
                    "{name} received a command at {:?}, outside every task the store gave it ({:?})",
                    call.received_at,
                    tasks
                        .iter()
                        .map(|t| (&t.id, t.claimed, t.ended))
                        .collect::<Vec<_>>()
                );
            }
            task_of_call.push(owner);
        }
        let resets: Vec<&str> = calls
            .iter()
            .filter_map(|c| c.reset_task.as_deref())
            .collect();
        let served: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        if resets != served {
            bail!("{name}: the resets name {resets:?}, the store's tasks on it are {served:?}");
        }
        // Hand-overs: the reset of task k answered → the first command of task k+1.
        for (k, next) in tasks.iter().enumerate().skip(1) {
            let Some(freed) = calls
                .iter()
                .find(|c| c.reset_task.as_deref() == Some(tasks[k - 1].id.as_str()))
            else {
                continue;
            };
            let Some(first) = calls
                .iter()
                .zip(&task_of_call)
                .find(|(c, owner)| c.kind == CallKind::Execute && **owner == Some(k))
                .map(|(c, _)| c)
            else {
                continue;
            };
            let freed_at = freed.received_at + freed.answered.duration_since(freed.received);
            if next.created < freed_at {
                run.handovers
                    .push(first.received.saturating_duration_since(freed.answered));
                run.freed_to_claim
                    .push(next.claimed.duration_since(freed_at).unwrap_or_default());
                run.claim_to_command.push(
                    first
                        .received_at
                        .duration_since(next.claimed)
                        .unwrap_or_default(),
                );
                let calls_of_next: Vec<&CallRecord> = calls
                    .iter()
                    .zip(&task_of_call)
                    .filter(|(c, owner)| c.kind != CallKind::Reset && **owner == Some(k))
                    .map(|(c, _)| c)
                    .collect();
                if let Some(touch) = calls_of_next.first() {
                    run.freed_to_first_call
                        .push(touch.received.saturating_duration_since(freed.answered));
                    run.claim_to_first_call.push(
                        touch
                            .received_at
                            .duration_since(next.claimed)
                            .unwrap_or_default(),
                    );
                }
                run.first_calls.push(
                    calls_of_next
                        .iter()
                        .take(FIRST_CALLS)
                        .map(|c| {
                            (
                                c.method.clone(),
                                c.received_at
                                    .duration_since(next.claimed)
                                    .unwrap_or_default(),
                            )
                        })
                        .collect(),
                );
            } else {
                run.not_waiting += 1;
            }
        }
    }
    run.handovers.sort();
    run.freed_to_claim.sort();
    run.claim_to_command.sort();
    run.freed_to_first_call.sort();
    run.claim_to_first_call.sort();
    Ok(())
}

/// One stand-in executor: dials the agent, and dials again (after 100 ms) if its stream ends before
/// `stop`.
#[allow(clippy::too_many_arguments)]
async fn stand_in(
    url: String,
    name: String,
    token: String,
    labels: &'static str,
    delay: Duration,
    state: Arc<StandInState>,
    fleet: Arc<Fleet>,
    stop: CancellationToken,
) {
    let service = ufo_testkit::executor::server(StandIn::new(Arc::new(notes_desktop())));
    loop {
        let mut connected = false;
        let ended = connection(
            &url,
            &name,
            &token,
            labels,
            delay,
            &service,
            &state,
            &fleet,
            &stop,
            &mut connected,
        )
        .await;
        if connected {
            fleet.connected.fetch_sub(1, Ordering::SeqCst);
        }
        match ended {
            Ok(()) => return,
            Err(e) => {
                if connected {
                    state.dropped.fetch_add(1, Ordering::SeqCst);
                }
                if let Ok(mut last) = state.last_error.lock() {
                    *last = Some(format!("{e:#}"));
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    url: &str,
    name: &str,
    token: &str,
    labels: &str,
    delay: Duration,
    service: &ExecutorServer<ufo_testkit::executor::Refusing<StandIn>>,
    state: &StandInState,
    fleet: &Fleet,
    stop: &CancellationToken,
    connected: &mut bool,
) -> anyhow::Result<()> {
    let channel = Endpoint::from_shared(url.to_owned())?
        .connect_timeout(Duration::from_secs(30))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client = ExecutorHubClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let (tx, rx) = mpsc::channel::<ExecutorFrame>(4);
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let md = request.metadata_mut();
    md.insert("authorization", format!("Bearer {token}").parse()?);
    md.insert(ufo_executor::dialout::NAME_HEADER, name.parse()?);
    md.insert(ufo_executor::dialout::LABELS_HEADER, labels.parse()?);
    md.insert(ufo_executor::dialout::VERSION_HEADER, "e2e-bench".parse()?);
    let mut inbound = client.dial(request).await?.into_inner();
    let heartbeat = match inbound.message().await? {
        Some(AgentFrame {
            kind: Some(agent_frame::Kind::Welcome(w)),
        }) => Duration::from_millis(u64::from(w.heartbeat_interval_ms.max(100))),
        other => bail!("the agent did not start with a welcome: {other:?}"),
    };
    *connected = true;
    state.connections.fetch_add(1, Ordering::SeqCst);
    fleet.connected.fetch_add(1, Ordering::SeqCst);
    let mut ticks = tokio::time::interval(heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {
                let beat = ExecutorFrame {
                    kind: Some(executor_frame::Kind::Heartbeat(Heartbeat { sent_at_ms: 0 })),
                };
                tx.send(beat).await.context("the outbound stream closed")?;
            }
            frame = inbound.message() => match frame? {
                Some(AgentFrame { kind: Some(agent_frame::Kind::Request(call)) }) => {
                    let received = Instant::now();
                    let received_at = SystemTime::now();
                    let (kind, reset_task) = match call.path.as_str() {
                        "/ufo.v1.Executor/Execute" => (CallKind::Execute, None),
                        "/ufo.v1.Executor/Reset" => {
                            let task = call
                                .body
                                .get(5..)
                                .and_then(|b| ResetRequest::decode(b).ok())
                                .map(|r| r.task_id)
                                .context("a Reset call that does not decode")?;
                            (CallKind::Reset, Some(task))
                        }
                        _ => (CallKind::Other, None),
                    };
                    let method = call.path.rsplit('/').next().unwrap_or_default().to_owned();
                    if kind == CallKind::Execute && !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let response =
                        ufo_executor::dialout::answer(service.clone(), call, MAX_MESSAGE).await;
                    if let Ok(mut calls) = state.calls.lock() {
                        calls.push(CallRecord {
                            kind,
                            received,
                            received_at,
                            answered: Instant::now(),
                            reset_task,
                            method,
                        });
                    }
                    let frame = ExecutorFrame {
                        kind: Some(executor_frame::Kind::Response(response)),
                    };
                    tx.send(frame).await.context("the outbound stream closed")?;
                }
                Some(_) => {}
                None => bail!("the agent closed the stream"),
            },
        }
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// Prints one column per store.
pub fn print(runs: &[(crate::store::Kind, PoolRun)], p: &Params) {
    type Row = (String, Box<dyn Fn(&PoolRun) -> String>, &'static str);
    let fitting = if p.fitting > 0 {
        format!("{} desktops labelled `lane=hot`", p.fitting)
    } else {
        "any desktop".into()
    };
    let per_task = p.app_steps + 3;
    let rows: Vec<Row> = vec![
        (
            "executors connected (each its own stream) / time to connect all".into(),
            Box::new(|r| format!("{} / {}", r.executors, ms(r.connect_all))),
            "",
        ),
        (
            "then every one listed as a desktop in the store after (listing refused meanwhile)".into(),
            Box::new(|r| format!("{} ({}×)", ms(r.registered_all), r.list_failures)),
            "",
        ),
        (
            "agent RSS: before they connect → all connected, idle".into(),
            Box::new(|r| format!("{} → {}", mb(r.rss_before), mb(r.rss_idle))),
            "",
        ),
        (
            "  per connected executor".into(),
            Box::new(|r| {
                format!(
                    "{:.1} KB",
                    r.rss_idle.saturating_sub(r.rss_before) as f64
                        / 1e3
                        / r.executors.max(1) as f64
                )
            }),
            "",
        ),
        (
            format!(
                "CPU idle, % of one core over {:.0} s (heartbeats every {} ms): agent / session / store",
                p.idle.as_secs_f64(),
                p.heartbeat_ms
            ),
            Box::new(|r| cpu3(&r.idle)),
            "",
        ),
        (
            format!(
                "{} tasks × {per_task} steps at once for {fitting}: wall time",
                p.tasks
            ),
            Box::new(|r| ms(r.busy.wall)),
            "",
        ),
        (
            "  CPU while they run, % of one core: agent / session / store".into(),
            Box::new(|r| cpu3(&r.busy)),
            "",
        ),
        (
            "  agent RSS peak while they run".into(),
            Box::new(|r| mb(r.rss_busy_peak)),
            "",
        ),
        (
            "  bench process CPU (stand-ins, model, clients; not counted), % of one core".into(),
            Box::new(|r| {
                format!(
                    "{:.1} % idle, {:.1} % busy",
                    r.idle.percent(crate::throughput::BENCH),
                    r.busy.percent(crate::throughput::BENCH)
                )
            }),
            "",
        ),
        (
            "**scheduling overhead** (desktop freed → next waiting task's first command) p50".into(),
            Box::new(|r| ms(percentile(&r.handovers, 50.0))),
            "≤ 20 ms",
        ),
        (
            "  p90 / p99 / max".into(),
            Box::new(|r| {
                format!(
                    "{} / {} / {}",
                    ms(percentile(&r.handovers, 90.0)),
                    ms(percentile(&r.handovers, 99.0)),
                    ms(r.handovers.last().copied().unwrap_or_default())
                )
            }),
            "",
        ),
        (
            "  of which freed → claimed (store event time) / claimed → first command, p50".into(),
            Box::new(|r| {
                format!(
                    "{} / {}",
                    ms(percentile(&r.freed_to_claim, 50.0)),
                    ms(percentile(&r.claim_to_command, 50.0))
                )
            }),
            "",
        ),
        (
            "  desktop freed → the next task's first call of any kind (its first touch of the desktop) p50 / p99".into(),
            Box::new(|r| {
                format!(
                    "{} / {}",
                    ms(percentile(&r.freed_to_first_call, 50.0)),
                    ms(percentile(&r.freed_to_first_call, 99.0))
                )
            }),
            "",
        ),
        (
            "    of which claimed → first call, p50".into(),
            Box::new(|r| ms(percentile(&r.claim_to_first_call, 50.0))),
            "",
        ),
        (
            "  a handed-over task's first calls, p50 time since its claim".into(),
            Box::new(|r| first_calls(&r.first_calls)),
            "",
        ),
        (
            "  hand-overs measured (+ frees whose next task was not yet waiting)".into(),
            Box::new(|r| format!("{} (+{})", r.handovers.len(), r.not_waiting)),
            "",
        ),
        (
            "tasks finished (claims repeated after a lapsed lease)".into(),
            Box::new(|r| format!("{} of {} ({})", r.finished, r.tasks, r.reclaims)),
            "all",
        ),
        (
            "executors still connected (own account / agent's list) / streams ended early".into(),
            Box::new(|r| {
                format!(
                    "{} / {} of {} / {}",
                    r.still_connected, r.agent_lists_connected, r.executors, r.dropped
                )
            }),
            "all / 0",
        ),
        (
            "desktops used / most tasks on one / commands answered (each desktop's tasks one at a time: checked)".into(),
            Box::new(|r| {
                format!(
                    "{} / {} / {}",
                    r.desktops_used, r.most_tasks_on_one_desktop, r.commands
                )
            }),
            "",
        ),
    ];
    println!(
        "\n# Desktop pool: {} dial-out stand-in executors, {} tasks{}",
        p.executors,
        p.tasks,
        if p.command_delay.is_zero() {
            String::new()
        } else {
            format!(", each command taking {} ms", p.command_delay.as_millis())
        }
    );
    print!("\n| measure |");
    for (kind, _) in runs {
        print!(" {} |", kind.label());
    }
    println!(" target |");
    print!("| --- |");
    for _ in runs {
        print!(" --- |");
    }
    println!(" --- |");
    for (label, cell, target) in &rows {
        print!("| {label} |");
        for (_, run) in runs {
            print!(" {} |", cell(run));
        }
        println!(" {target} |");
    }
    for (kind, run) in runs.iter().filter(|(_, r)| !r.statements.is_empty()) {
        println!(
            "\nPostgres statements while the tasks ran, {} (`pg_stat_statements`, most time first):\n",
            kind.label()
        );
        println!("| statement | calls | total ms | mean ms |\n| --- | --- | --- | --- |");
        for st in run.statements.iter().take(STATEMENTS_SHOWN) {
            let query: String = st.query.split_whitespace().collect::<Vec<_>>().join(" ");
            let short: String = query.chars().take(110).collect();
            println!(
                "| `{short}` | {} | {:.1} | {:.3} |",
                st.calls, st.total_ms, st.mean_ms
            );
        }
    }
}

/// `method +p50` of each position of the handed-over tasks' first calls (the most common method there).
fn first_calls(all: &[Vec<(String, Duration)>]) -> String {
    let mut out = Vec::new();
    for i in 0..FIRST_CALLS {
        let mut times: Vec<Duration> = all.iter().filter_map(|c| c.get(i)).map(|c| c.1).collect();
        if times.is_empty() {
            break;
        }
        times.sort();
        let mut methods: BTreeMap<&str, usize> = BTreeMap::new();
        for c in all.iter().filter_map(|c| c.get(i)) {
            *methods.entry(c.0.as_str()).or_default() += 1;
        }
        let method = methods
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or("?", |(m, _)| *m);
        out.push(format!("{method} +{}", ms(percentile(&times, 50.0))));
    }
    out.join(", ")
}

fn cpu3(w: &CpuWindow) -> String {
    let store = if w.cpu.contains_key("postgres") {
        format!("{:.1} %", w.percent("postgres"))
    } else {
        "in session".into()
    };
    format!(
        "{:.1} % / {:.1} % / {store}",
        w.percent("ufo-agent"),
        w.percent("ufo-session"),
    )
}
