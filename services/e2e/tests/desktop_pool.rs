//! The desktop pool end to end, with real processes (issue 36): `ufo-session` on Postgres, two
//! `ufo-agent` replicas (a scripted model), and two `ufo-executor --connect` on two private Xvfb desktops,
//! one dialling each replica. Six tasks submitted at once with `executor: any` all finish; the session
//! store's events show every desktop served its tasks one after another (claim of task N+1 after the end
//! of task N), and each desktop's reset hook ran for each of its tasks in that order, its scratch directory
//! emptied.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use ufo_agent::testing::ScriptedLlm;
use ufo_client::NewTask;
use ufo_e2e::script::host;
use ufo_executor::testing::Desktop;
use ufo_proto::v1::session_store_client::SessionStoreClient;
use ufo_proto::v1::{EventKind, WatchEventsRequest};
use ufo_testkit::{Cluster, ProcessBuilder, ServiceProcess, poll_until, workspace_binary};

const TASKS: usize = 6;

struct Desk {
    name: &'static str,
    _desktop: Desktop,
    scratch: tempfile::TempDir,
    hook_log: PathBuf,
    process: ServiceProcess,
}

fn hook_script(dir: &Path, log: &Path) -> PathBuf {
    let script = dir.join(format!("{}.sh", log.file_stem().unwrap().to_str().unwrap()));
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$UFO_TASK_ID\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

async fn desk(name: &'static str, agent_grpc: &str, token: &Path, dir: &Path) -> Desk {
    let desktop = Desktop::start(800, 600).await.unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // What an earlier task left: the first reset removes it.
    std::fs::write(
        scratch.path().join("left-over.txt"),
        "an earlier task's file",
    )
    .unwrap();
    let hook_log = dir.join(format!("{name}-resets"));
    let hook = hook_script(dir, &hook_log);
    let mut builder = ProcessBuilder::new(name, workspace_binary("ufo-executor").unwrap())
        .args(["--connect", agent_grpc, "--name", name])
        .arg("--enroll-token-file")
        .arg(token)
        .args(["--labels", "os=linux"])
        .arg("--scratch-dir")
        .arg(scratch.path())
        .arg("--reset-hook")
        .arg(&hook)
        .env_remove("UFO_OTLP_ENDPOINT")
        .env_remove("UFO_EXECUTOR_TOKEN");
    for (key, value) in desktop.env() {
        builder = builder.env(key, value);
    }
    Desk {
        name,
        _desktop: desktop,
        scratch,
        hook_log,
        process: builder.spawn().unwrap(),
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_for_any_desktop_share_two_dial_out_desktops_across_two_replicas() {
    let database = ufo_testkit::postgres::TestDatabase::create().await.unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let replica_args = |extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = [
            "--api-admins",
            "test",
            "--runner-slots",
            "2",
            "--dial-out-heartbeat-ms",
            "300",
            "--claim-interval-ms",
            "50",
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
        .llm_base_url(llm.base_url())
        .agent_args(replica_args(&["--worker-id", "replica-a"]))
        .start()
        .await
        .unwrap();
    let agent = ufo_e2e::agent(&cluster).unwrap();
    // The second replica: the same session service (Postgres), enrollments and model.
    let grpc_b = ufo_testkit::free_port().unwrap();
    let http_b = ufo_testkit::free_port().unwrap();
    let mut replica_b = ProcessBuilder::new("ufo-agent-b", workspace_binary("ufo-agent").unwrap())
        .args(["--listen", &format!("127.0.0.1:{grpc_b}")])
        .args(["--http-listen", &format!("127.0.0.1:{http_b}")])
        .args(["--session-url", cluster.session_url.as_str()])
        .args(["--llm-base-url", llm.base_url().as_str()])
        .env("UFO_AGENT_LLM_API_KEY", "test-llm-key")
        .env("UFO_AGENT_API_KEYS", format!("test:{}", cluster.api_key))
        .env_remove("UFO_OTLP_ENDPOINT")
        .args(replica_args(&["--worker-id", "replica-b"]))
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    let grpc_b = format!("http://127.0.0.1:{grpc_b}");
    replica_b
        .wait_grpc_ready(&grpc_b, Duration::from_secs(60))
        .await
        .unwrap();

    let mut desks = Vec::new();
    for (name, replica) in [
        ("desk-a", cluster.grpc_url.clone()),
        ("desk-b", grpc_b.clone()),
    ] {
        let token = dir.path().join(format!("{name}.token"));
        let made = agent.enroll_executor(name).await.unwrap();
        std::fs::write(&token, made["token"].as_str().unwrap()).unwrap();
        desks.push(desk(name, &replica, &token, dir.path()).await);
    }
    let logs = |cluster: &Cluster, b: &ServiceProcess, desks: &[Desk]| {
        let mut all = format!("{}\n--- replica b\n{}", cluster.logs(), b.logs());
        for d in desks {
            all.push_str(&format!("\n--- {}\n{}", d.name, d.process.logs()));
        }
        all
    };
    let free = |pool: &serde_json::Value, name: &str| {
        pool["desktops"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["name"] == name && d["state"] == "free")
    };
    poll_until(
        "both desktops in the pool, free",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let pool = agent.desktops().await.map_err(|e| e.to_string())?;
            if free(&pool, "desk-a") && free(&pool, "desk-b") {
                Ok(Some(pool))
            } else {
                Err(pool.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&cluster, &replica_b, &desks)));
    // The replicas' declared default executor (an address nothing listens on here) is a desktop too:
    // drained, it gets no task.
    let drained = agent.change_desktop("default", "drain").await.unwrap();
    assert_eq!(drained["state"], "draining", "{drained}");

    for _ in 0..TASKS {
        llm.push_json(&host(
            "FINISH",
            json!({"comment": "done", "result": "looked"}),
        ));
    }
    let mut ids = Vec::new();
    for n in 0..TASKS {
        let task = agent
            .submit(&NewTask {
                executor: Some("any".into()),
                max_steps: Some(3),
                ..NewTask::request(format!("look at the desktop ({n})"))
            })
            .await
            .unwrap();
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let done = poll_until(
            "the task to end",
            Duration::from_secs(180),
            Duration::from_millis(50),
            || async {
                let task = agent.get(id).await.map_err(|e| e.to_string())?;
                match task["status"].as_str() {
                    Some("failed" | "finished" | "cancelled") => Ok(Some(task)),
                    other => Err(format!("status {other:?}")),
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&cluster, &replica_b, &desks)));
        assert_eq!(
            done["status"],
            "finished",
            "{done}\n{}",
            logs(&cluster, &replica_b, &desks)
        );
    }

    // Each desktop is checked in (after its reset) once its last task ended.
    poll_until(
        "both desktops back in the pool",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let pool = agent.desktops().await.map_err(|e| e.to_string())?;
            if pool["free"] == 2 {
                Ok(Some(pool))
            } else {
                Err(pool.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&cluster, &replica_b, &desks)));

    // Every desktop served its tasks one after another: each claim comes after the previous task on
    // that desktop ended.
    let mut by_desktop: BTreeMap<String, Vec<(i64, i64, String, String)>> = BTreeMap::new();
    for id in &ids {
        let (claims, ended) = history(&cluster.session_url, id).await;
        assert_eq!(claims.len(), 1, "{id} was claimed once: {claims:?}");
        let (claimed, worker, desktop) = claims.into_iter().next().unwrap();
        by_desktop
            .entry(desktop)
            .or_default()
            .push((claimed, ended, id.clone(), worker));
    }
    assert_eq!(
        by_desktop.keys().cloned().collect::<Vec<_>>(),
        ["desk-a", "desk-b"],
        "{by_desktop:?}"
    );
    for (desktop, tasks) in &mut by_desktop {
        tasks.sort();
        for pair in tasks.windows(2) {
            assert!(
                pair[1].0 > pair[0].1,
                "{desktop} was given {} before {} ended: {tasks:?}",
                pair[1].2,
                pair[0].2
            );
        }
        // A dial-out desktop is served by the replica it is connected to.
        let expected = if desktop == "desk-a" {
            "replica-a"
        } else {
            "replica-b"
        };
        assert!(
            tasks.iter().all(|t| t.3 == expected),
            "{desktop}: {tasks:?}"
        );
    }
    // Reset between tasks: each desktop's hook ran once per task, in the order they ran there, and the
    // scratch directory is empty.
    for d in &desks {
        let ran: Vec<String> = std::fs::read_to_string(&d.hook_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let served: Vec<String> = by_desktop[d.name].iter().map(|t| t.2.clone()).collect();
        assert_eq!(ran, served, "{}'s resets", d.name);
        assert_eq!(
            std::fs::read_dir(d.scratch.path()).unwrap().count(),
            0,
            "{}'s scratch directory",
            d.name
        );
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
    for name in ["desk-a", "desk-b"] {
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
        listed.contains("2 free, 0 busy, 0 tasks waiting for a desktop"),
        "{listed}"
    );
    let all = logs(&cluster, &replica_b, &desks);
    assert!(!all.contains("panicked"), "{all}");
    for mut d in desks {
        d.process.stop().await.unwrap();
    }
    replica_b.stop().await.unwrap();
    cluster.stop().await.unwrap();
    database.drop_database().await.unwrap();
}
