//! The desktop pool end to end, with real processes (issue 36, its acceptance): `ufo-session` on
//! Postgres, two `ufo-agent` replicas, three `ufo-executor --connect` each on its own Xvfb desktop, and
//! the suite's stand-in model (it follows each task's demonstration by reading the prompts, so any
//! number of tasks run at once).
//!
//! 1. Fifteen suite-like Mousepad tasks with `executor: any`, submitted at once: each launches Mousepad
//!    on the desktop's scratch file, types its own line, saves it and reads the document back. All
//!    finish, each with exactly its own line (a file of an earlier task on that desktop would show in
//!    the document); the store's events show every desktop served its tasks one after another; the
//!    first observation of each task lists no window of the task before it; every reset closed the
//!    task's Mousepad and removed its file, the operator's hook ran once per task in order, and the
//!    scratch directories end empty.
//! 2. An executor SIGKILLed mid-task: its task fails after `--executor-retry-budget-ms`, naming the
//!    desktop; the desktop is checked in broken (its reset could not run) while the other desktops go
//!    on; restarted and marked ready, it is free again.
//! 3. An agent replica SIGKILLed mid-task: the desktop's executor dials the surviving replica (a TCP
//!    forwarder stands for the load balancer in front of the replicas), which takes the task over with
//!    its desktop once the leases lapse and finishes it; no other task ran on that desktop meanwhile and
//!    every desktop is back in the pool at the end.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use ufo_client::{AgentClient, NewTask, Timeouts};
use ufo_executor::testing::Desktop;
use ufo_proto::v1::session_store_client::SessionStoreClient;
use ufo_proto::v1::{EventKind, WatchEventsRequest};
use ufo_suite::standin::{Mode, ModelServer, Patience};
use ufo_suite::task::Task;
use ufo_testkit::{Cluster, ProcessBuilder, ServiceProcess, poll_until, workspace_binary};

const TASKS: usize = 15;
const MODEL: &str = "ufo-suite-standin";
const TIMEOUT: Duration = Duration::from_secs(200);

struct Desk {
    name: &'static str,
    desktop: Desktop,
    scratch: tempfile::TempDir,
    hook_log: PathBuf,
    token: PathBuf,
    /// Where it dials: its forwarder's address.
    agent_url: String,
    dir: PathBuf,
    process: ServiceProcess,
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// `ufo-executor --connect` on the desk's desktop. `mousepad` is allowed through a wrapper that opens
/// the desk's scratch file (tasks do not know which desktop they get, so not where its scratch is).
fn spawn_executor(
    desk_name: &str,
    desktop: &Desktop,
    scratch: &Path,
    dir: &Path,
    agent_url: &str,
    token: &Path,
) -> ServiceProcess {
    let wrapper = dir.join(format!("{desk_name}-mousepad.sh"));
    script(
        &wrapper,
        &format!("exec mousepad '{}'", scratch.join("note.txt").display()),
    );
    let hook = dir.join(format!("{desk_name}-hook.sh"));
    script(
        &hook,
        &format!(
            "echo \"$UFO_TASK_ID\" >> '{}'",
            dir.join(format!("{desk_name}-resets")).display()
        ),
    );
    let home = dir.join(format!("{desk_name}-home"));
    std::fs::create_dir_all(&home).unwrap();
    let mut builder = ProcessBuilder::new(desk_name, workspace_binary("ufo-executor").unwrap())
        .args(["--connect", agent_url, "--name", desk_name])
        .arg("--enroll-token-file")
        .arg(token)
        .args(["--labels", "os=linux,app=mousepad"])
        .args(["--connect-max-backoff-ms", "500"])
        .arg("--allow-app")
        .arg(format!("mousepad={}", wrapper.display()))
        .arg("--scratch-dir")
        .arg(scratch)
        .arg("--reset-hook")
        .arg(&hook)
        .env("HOME", &home)
        .env_remove("UFO_OTLP_ENDPOINT")
        .env_remove("UFO_EXECUTOR_TOKEN");
    for (key, value) in desktop.env() {
        builder = builder.env(key, value);
    }
    builder.spawn().unwrap()
}

/// A TCP forwarder standing for the load balancer in front of the replicas: every connection goes to
/// the first of `upstreams` that accepts it, and ends when either side closes.
async fn forwarder(upstreams: Vec<SocketAddr>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let upstreams = upstreams.clone();
            tokio::spawn(async move {
                for upstream in &upstreams {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A task of the stand-in's: parsed as the suite parses its task files.
fn task(name: &str, toml: &str) -> Task {
    Task::parse(Path::new(&format!("{name}.toml")), toml).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Launch Mousepad (on the desktop's scratch file), type a line, save, read the document back.
fn mousepad_task(n: usize) -> Task {
    task(
        &format!("pool-{n}"),
        &format!(
            r#"
request = "Open Mousepad, type 'pool task {n}' into the note, save it and read the note back"

[[subtask]]
app = "note.txt"
launch = "mousepad"
do = "type pool task {n} into the note, save it and read it back"
steps = [
  "type 'pool task {n}' into the text field named ''",
  "press ctrl+s",
  "read the text field named ''",
]

[[check]]
file = "note.txt"
equals = "pool task {n}"
"#
        ),
    )
}

/// Waits for a dialog titled "Pool marker {tag}" (which the test opens when it wants), then answers Yes.
fn marker_task(tag: &str) -> Task {
    task(
        &format!("marker-{tag}"),
        &format!(
            r#"
request = "Wait for the Pool marker {tag} dialog and answer Yes"

[[subtask]]
app = "Pool marker {tag}"
do = "answer Yes in the Pool marker {tag} dialog"
steps = ["click the button named 'Yes'"]

[[check]]
file = "unused.txt"
equals = "the check is not run here"
"#
        ),
    )
}

/// A task's claims (time, worker, desktop) and its end time, from the session store's events.
async fn history(session_url: &str, id: &str) -> (Vec<(i64, String, String)>, i64) {
    let mut client = SessionStoreClient::connect(session_url.to_owned())
        .await
        .unwrap();
    let mut stream = client
        .watch_events(WatchEventsRequest {
            session_id: id.to_owned(),
            from_seq: 1,
            kinds: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let micros = |e: &ufo_proto::v1::Event| {
        let t = e.created_at.unwrap();
        t.seconds * 1_000_000 + i64::from(t.nanos / 1_000)
    };
    let mut claims = Vec::new();
    let mut ended = 0;
    while let Some(event) = stream.message().await.unwrap() {
        let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
        if event.kind == EventKind::TaskClaimed as i32 {
            claims.push((
                micros(&event),
                payload["worker"].as_str().unwrap_or_default().to_owned(),
                payload["desktop"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        if event.kind == EventKind::TaskFinished as i32
            || event.kind == EventKind::TaskFailed as i32
        {
            ended = micros(&event);
        }
    }
    (claims, ended)
}

async fn submit(agent: &AgentClient, model: &ModelServer, t: &Task, executor: &str) -> String {
    model.begin(&t.request, t.subtasks.clone());
    let made = agent
        .submit(&NewTask {
            executor: Some(executor.into()),
            max_steps: Some(300),
            timeout_seconds: Some(TIMEOUT.as_secs()),
            ..NewTask::request(t.request.clone())
        })
        .await
        .unwrap();
    made["id"].as_str().unwrap().to_owned()
}

async fn ended(agent: &AgentClient, id: &str, logs: &dyn Fn() -> String) -> Value {
    poll_until(
        "the task to end",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let task = agent.get(id).await.map_err(|e| e.to_string())?;
            match task["status"].as_str() {
                Some("failed" | "finished" | "cancelled") => Ok(Some(task)),
                other => Err(format!("status {other:?}")),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()))
}

/// Waits until the task runs and has recorded a step: it is mid-task.
fn desk_logs(desks: &[Desk]) -> String {
    let mut all = String::new();
    for d in desks {
        all.push_str(&format!("\n--- {}\n{}", d.name, d.process.logs()));
    }
    all
}

async fn mid_task(agent: &AgentClient, id: &str, logs: &dyn Fn() -> String) -> Value {
    poll_until(
        "the task to be mid-task",
        TIMEOUT,
        Duration::from_millis(50),
        || async {
            let task = agent.get(id).await.map_err(|e| e.to_string())?;
            if task["status"] == "running" && task["totals"]["steps"].as_u64().unwrap_or(0) >= 2 {
                Ok(Some(task))
            } else {
                Err(task.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()))
}

async fn pool_state(
    agent: &AgentClient,
    what: &str,
    ok: impl Fn(&Value) -> bool,
    logs: &dyn Fn() -> String,
) -> Value {
    poll_until(
        what,
        Duration::from_secs(90),
        Duration::from_millis(50),
        || async {
            let pool = agent.desktops().await.map_err(|e| e.to_string())?;
            if ok(&pool) {
                Ok(Some(pool))
            } else {
                Err(pool.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()))
}

fn desktop<'a>(pool: &'a Value, name: &str) -> &'a Value {
    pool["desktops"]
        .as_array()
        .and_then(|all| all.iter().find(|d| d["name"] == name))
        .unwrap_or(&Value::Null)
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifteen_tasks_share_three_dial_out_desktops_across_two_replicas_and_survive_kills() {
    let started = std::time::Instant::now();
    let database = ufo_testkit::postgres::TestDatabase::create().await.unwrap();
    let model = ModelServer::start(
        Mode::StandIn(Patience {
            max_waits: 1000,
            max_retries: 3,
        }),
        64 << 20,
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let replica_args = |extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = [
            "--api-admins",
            "test",
            "--runner-slots",
            "3",
            // Three silent heartbeats end a connection: 900 ms (300 ms heartbeats) is passed on a loaded
            // 2-core machine while the desktops are busy, so 2 s here.
            "--dial-out-heartbeat-ms",
            "2000",
            "--claim-interval-ms",
            "50",
            "--lease-ms",
            "6000",
            "--executor-retry-budget-ms",
            "4000",
            "--desktop-reset-timeout-ms",
            "20000",
            "--host-model",
            MODEL,
            "--app-model",
            MODEL,
            "--llm-default-price",
            "0/0",
            "--llm-max-retries",
            "0",
            "--max-steps",
            "300",
            "--executor-enrollments-file",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(enrollments.clone().into_os_string());
        args.extend(extra.iter().map(Into::into));
        args
    };
    let mut cluster = Cluster::builder()
        .database_url(database.url())
        .llm_base_url(model.base_url())
        .agent_args(replica_args(&["--worker-id", "replica-a"]))
        .start()
        .await
        .unwrap();
    // The second replica: the same session service (Postgres), enrollments and model.
    let grpc_b = ufo_testkit::free_port().unwrap();
    let http_b = ufo_testkit::free_port().unwrap();
    let mut replica_b = ProcessBuilder::new("ufo-agent-b", workspace_binary("ufo-agent").unwrap())
        .args(["--listen", &format!("127.0.0.1:{grpc_b}")])
        .args(["--http-listen", &format!("127.0.0.1:{http_b}")])
        .args(["--session-url", cluster.session_url.as_str()])
        .args(["--llm-base-url", model.base_url().as_str()])
        .env("UFO_AGENT_LLM_API_KEY", "test-llm-key")
        .env("UFO_AGENT_API_KEYS", format!("test:{}", cluster.api_key))
        .env_remove("UFO_OTLP_ENDPOINT")
        .args(replica_args(&["--worker-id", "replica-b"]))
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    replica_b
        .wait_grpc_ready(
            &format!("http://127.0.0.1:{grpc_b}"),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    // The replica that survives serves the API throughout.
    let agent = AgentClient::new(
        &format!("http://127.0.0.1:{http_b}"),
        Some(cluster.api_key.clone()),
        Timeouts::default(),
    )
    .unwrap();
    let grpc_a: SocketAddr = cluster
        .grpc_url
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let grpc_b: SocketAddr = format!("127.0.0.1:{grpc_b}").parse().unwrap();

    // desk-a dials replica a (b when a is gone); desk-b and desk-c dial replica b (a when b is gone).
    let mut desks = Vec::new();
    for (name, upstreams) in [
        ("desk-a", vec![grpc_a, grpc_b]),
        ("desk-b", vec![grpc_b, grpc_a]),
        ("desk-c", vec![grpc_b, grpc_a]),
    ] {
        let token = dir.path().join(format!("{name}.token"));
        let made = agent.enroll_executor(name).await.unwrap();
        std::fs::write(&token, made["token"].as_str().unwrap()).unwrap();
        let agent_url = format!("http://{}", forwarder(upstreams).await);
        let desktop = Desktop::start(900, 650).await.unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let process = spawn_executor(
            name,
            &desktop,
            scratch.path(),
            dir.path(),
            &agent_url,
            &token,
        );
        desks.push(Desk {
            name,
            desktop,
            scratch,
            hook_log: dir.path().join(format!("{name}-resets")),
            token,
            agent_url,
            dir: dir.path().to_owned(),
            process,
        });
    }
    // Everything the services logged, for failure messages (a macro: the desks change on the way).
    macro_rules! all_logs {
        () => {
            format!(
                "{}\n--- replica b\n{}{}",
                cluster.logs(),
                replica_b.logs(),
                desk_logs(&desks)
            )
        };
    }
    let free_count = |n: u64| move |pool: &Value| pool["free"] == n;
    pool_state(
        &agent,
        "the three desktops in the pool, free",
        |pool| {
            ["desk-a", "desk-b", "desk-c"]
                .iter()
                .all(|n| desktop(pool, n)["state"] == "free")
        },
        &|| all_logs!(),
    )
    .await;
    // The replicas' declared default executor (an address nothing listens on here) is a desktop too:
    // drained, it gets no task.
    let drained = agent.change_desktop("default", "drain").await.unwrap();
    assert_eq!(drained["state"], "draining", "{drained}");

    // 1. Fifteen tasks for any desktop, at once.
    let tasks: Vec<Task> = (0..TASKS).map(mousepad_task).collect();
    let mut ids = Vec::new();
    for t in &tasks {
        ids.push(submit(&agent, &model, t, "any").await);
    }
    for (n, (t, id)) in tasks.iter().zip(&ids).enumerate() {
        let done = ended(&agent, id, &|| all_logs!()).await;
        eprintln!(
            "[{:?}] task {n}: {} ({})",
            started.elapsed(),
            done["status"],
            done["result"]
        );
        assert_eq!(
            done["status"],
            "finished",
            "{done}\n{:#?}\n{}",
            model.end(&t.request).1,
            all_logs!()
        );
    }
    pool_state(
        &agent,
        "the three desktops back in the pool",
        |pool| pool["free"] == 3,
        &|| all_logs!(),
    )
    .await;
    let phase_one = started.elapsed();

    // Every desktop served its tasks one after another: each claim comes after the previous task on
    // that desktop ended; a dial-out desktop is served by the replica it is connected to.
    let mut by_desktop: BTreeMap<String, Vec<(i64, i64, usize, String)>> = BTreeMap::new();
    for (n, id) in ids.iter().enumerate() {
        let (claims, ended) = history(&cluster.session_url, id).await;
        assert_eq!(claims.len(), 1, "{id} was claimed once: {claims:?}");
        let (claimed, worker, desktop) = claims.into_iter().next().unwrap();
        by_desktop
            .entry(desktop)
            .or_default()
            .push((claimed, ended, n, worker));
    }
    assert_eq!(
        by_desktop.keys().cloned().collect::<Vec<_>>(),
        ["desk-a", "desk-b", "desk-c"],
        "{by_desktop:?}"
    );
    for (desktop, served) in &mut by_desktop {
        served.sort();
        for pair in served.windows(2) {
            assert!(
                pair[1].0 > pair[0].1,
                "{desktop} was given task {} before task {} ended: {served:?}",
                pair[1].2,
                pair[0].2
            );
        }
        let expected = if desktop == "desk-a" {
            "replica-a"
        } else {
            "replica-b"
        };
        assert!(
            served.iter().all(|t| t.3 == expected),
            "{desktop}: {served:?}"
        );
    }
    // On screen, nothing of task N reaches task N+1: its first observation lists no Mousepad window,
    // and its document (the desktop's scratch file, reopened) holds its own line only.
    for (n, (t, id)) in tasks.iter().zip(&ids).enumerate() {
        let done = agent.get(id).await.unwrap();
        assert_eq!(done["result"], format!("pool task {n}"), "{done}");
        let (_, seen) = model.end(&t.request);
        let first = seen.first().cloned().unwrap_or_default();
        assert_eq!(first["agent"], "host", "{first}");
        let windows = first["windows"].to_string();
        assert!(
            !windows.contains("note.txt") && !windows.to_lowercase().contains("mousepad"),
            "task {n}'s first observation shows an earlier task's window: {windows}"
        );
        // It did open its own (the observation can tell).
        assert!(
            seen.iter()
                .any(|c| c["windows"].to_string().contains("note.txt")),
            "task {n}: {seen:#?}"
        );
    }
    // Each reset closed the task's Mousepad and removed its file; the hook ran once per task, in the
    // order the tasks ran there; the scratch directories are empty.
    {
        for d in &desks {
            let served: Vec<String> = by_desktop[d.name]
                .iter()
                .map(|t| ids[t.2].clone())
                .collect();
            assert_eq!(lines_of(&d.hook_log), served, "{}'s resets", d.name);
            let executor_log = d.process.logs();
            for id in &served {
                let line = executor_log
                    .lines()
                    .find(|l| l.contains("desktop reset") && l.contains(id.as_str()))
                    .unwrap_or_else(|| {
                        panic!("no reset of {id} in {}'s log:\n{executor_log}", d.name)
                    });
                assert!(
                    line.contains("closed=1") && line.contains("removed=1"),
                    "{line}"
                );
            }
            assert_eq!(
                std::fs::read_dir(d.scratch.path()).unwrap().count(),
                0,
                "{}'s scratch directory",
                d.name
            );
        }
    }
    // The operator's view (`ufo desktops list`).
    let out = std::process::Command::new(workspace_binary("ufo").unwrap())
        .args([
            "desktops",
            "list",
            "--server",
            &cluster.rest_url,
            "--token",
            &cluster.api_key,
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for name in ["desk-a", "desk-b", "desk-c"] {
        let line = listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default();
        assert!(
            line.contains("os=linux") && line.contains("\tfree\t"),
            "{listed}"
        );
    }
    assert!(
        listed.contains("3 free, 0 busy, 0 tasks waiting for a desktop"),
        "{listed}"
    );

    // 2 and 3. A task waiting on desk-c for a dialog that never comes (its executor is killed), and a
    // Mousepad task on desk-a (its replica is killed mid-task); two ordinary tasks for any desktop go
    // on meanwhile.
    let lost_executor = marker_task("c");
    let lost_replica = mousepad_task(100);
    let id_c = submit(&agent, &model, &lost_executor, "desk-c").await;
    let id_a = submit(&agent, &model, &lost_replica, "desk-a").await;
    // SIGKILL replica a mid-task: desk-a's task has launched Mousepad, its typing is still to come.
    mid_task(&agent, &id_a, &|| all_logs!()).await;
    cluster.agent.as_mut().unwrap().kill().unwrap();
    // SIGKILL desk-c's executor mid-task.
    mid_task(&agent, &id_c, &|| all_logs!()).await;
    let killed_at = std::time::Instant::now();
    desks[2].process.kill().unwrap();
    let others: Vec<Task> = (TASKS..TASKS + 2).map(mousepad_task).collect();
    let mut other_ids = Vec::new();
    for t in &others {
        other_ids.push(submit(&agent, &model, t, "any").await);
    }
    eprintln!(
        "[{:?}] replica a and desk-c's executor killed mid-task",
        started.elapsed()
    );

    // desk-c's task fails naming the desktop, within the retry budget (and the time to notice).
    let failed = ended(&agent, &id_c, &|| all_logs!()).await;
    assert_eq!(failed["status"], "failed", "{failed}\n{}", all_logs!());
    let message = failed.to_string();
    assert!(message.contains("desk-c is unreachable"), "{failed:#}");
    assert!(
        killed_at.elapsed() < Duration::from_secs(60),
        "{:?}",
        killed_at.elapsed()
    );
    // Its desktop could not be reset: checked in broken, with the reason.
    let pool = pool_state(
        &agent,
        "desk-c broken",
        |pool| desktop(pool, "desk-c")["state"] == "broken",
        &|| all_logs!(),
    )
    .await;
    assert!(
        !desktop(&pool, "desk-c")["reason"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{pool}"
    );

    // desk-a's task: replica b takes it over with desk-a once desk-a dialled it and the leases lapsed.
    poll_until(
        "replica b to take desk-a's task over",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let (claims, _) = history(&cluster.session_url, &id_a).await;
            if claims.iter().any(|c| c.1 == "replica-b") {
                Ok(Some(claims))
            } else {
                Err(format!("{claims:?}"))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", all_logs!()));
    let done_a = ended(&agent, &id_a, &|| all_logs!()).await;
    eprintln!(
        "[{:?}] desk-a's task: {}",
        started.elapsed(),
        done_a["status"]
    );
    assert_eq!(
        done_a["status"],
        "finished",
        "{done_a}\n{:#?}\n{}",
        model.end(&lost_replica.request).1,
        all_logs!()
    );
    // Its line was typed once: the document holds it exactly.
    assert_eq!(done_a["result"], "pool task 100", "{done_a}");
    let (claims, _) = history(&cluster.session_url, &id_a).await;
    let workers: Vec<(&str, &str)> = claims
        .iter()
        .map(|c| (c.1.as_str(), c.2.as_str()))
        .collect();
    assert_eq!(
        workers,
        [("replica-a", "desk-a"), ("replica-b", "desk-a")],
        "{claims:?}"
    );
    for (t, id) in others.iter().zip(&other_ids) {
        let done = ended(&agent, id, &|| all_logs!()).await;
        assert_eq!(
            done["status"],
            "finished",
            "{done}\n{:#?}\n{}",
            model.end(&t.request).1,
            all_logs!()
        );
    }

    // Nothing ran twice on one desktop: over every task, each desktop's tasks (first claim to end) do
    // not overlap.
    let mut spans: BTreeMap<String, Vec<(i64, i64, String)>> = BTreeMap::new();
    for id in ids.iter().chain(&other_ids).chain([&id_a, &id_c]) {
        let (claims, ended) = history(&cluster.session_url, id).await;
        let desktops: std::collections::BTreeSet<&String> = claims.iter().map(|c| &c.2).collect();
        assert_eq!(desktops.len(), 1, "{id} stayed on one desktop: {claims:?}");
        spans
            .entry(claims[0].2.clone())
            .or_default()
            .push((claims[0].0, ended, id.clone()));
    }
    for (desktop, served) in &mut spans {
        served.sort();
        for pair in served.windows(2) {
            assert!(pair[1].0 > pair[0].1, "{desktop}: {served:?}");
        }
    }

    // desk-c's executor started again dials in; marked ready by the operator, it is free. Every
    // check-out returned to the pool.
    {
        let d = &mut desks[2];
        d.process = spawn_executor(
            d.name,
            &d.desktop,
            d.scratch.path(),
            &d.dir,
            &d.agent_url,
            &d.token,
        );
    }
    poll_until(
        "desk-c connected again",
        TIMEOUT,
        Duration::from_millis(50),
        || async {
            let all = agent.executors().await.map_err(|e| e.to_string())?;
            let c = all["executors"]
                .as_array()
                .and_then(|e| e.iter().find(|e| e["name"] == "desk-c").cloned())
                .unwrap_or_default();
            if c["connected"] == true {
                Ok(Some(c))
            } else {
                Err(c.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", all_logs!()));
    assert_eq!(
        desktop(&agent.desktops().await.unwrap(), "desk-c")["state"],
        "broken",
        "a broken desktop stays broken until an operator says it is ready"
    );
    let ready = agent.change_desktop("desk-c", "ready").await.unwrap();
    assert_eq!(ready["state"], "free", "{ready}");
    pool_state(&agent, "every desktop free", free_count(3), &|| all_logs!()).await;

    let all = all_logs!();
    assert!(!all.contains("panicked"), "{all}");
    eprintln!(
        "desktop pool acceptance: {TASKS} tasks on 3 desktops in {phase_one:?}; all in {:?}",
        started.elapsed()
    );
    for mut d in desks {
        d.process.stop().await.unwrap();
    }
    replica_b.stop().await.unwrap();
    cluster.stop().await.unwrap();
    database.drop_database().await.unwrap();
}
