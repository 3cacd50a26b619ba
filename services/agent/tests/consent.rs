//! Consent by consequence (the operator's `--policy-file`) against the real Linux executor over gRPC,
//! with the scripted OpenAI-compatible model recording every prompt:
//! - a launch whose argument is outside the policy's launch directories is refused by the agent before
//!   the executor: a recorder around the gRPC dispatcher sees no batch with a launch, and the allowed
//!   program (a probe that records its arguments, then runs mousepad) never starts; the step records the
//!   action as `denied` with the reason, and the next HostAgent prompt says why;
//! - the model then launches with a file inside the directory, which the executor runs;
//! - the operator's `confirm` on close_application holds it although the task says `never`; the person
//!   sees the policy's reason, approves, and it runs.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};

use crate::common::*;
use async_trait::async_trait;
use clap::Parser as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use ufo_agent::agents::policy::Policy;
use ufo_agent::agents::{AgentSettings, HostAgent};
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher, CommandResult, DispatchError};
use ufo_agent::round::control::Next;
use ufo_agent::round::{Arrived, Decision, Round, RoundEnd};
use ufo_agent::testing::ScriptedReply;
use ufo_executor::testing::Desktop;
use ufo_proto::v1;

/// Passes every batch to the executor and keeps the tool names and parameters of each.
struct Recorder {
    inner: Arc<dyn CommandDispatcher>,
    batches: Mutex<Vec<Vec<(String, serde_json::Value)>>>,
}

#[async_trait]
impl CommandDispatcher for Recorder {
    async fn execute(&self, commands: Vec<Command>) -> Result<Vec<CommandResult>, DispatchError> {
        self.batches.lock().unwrap().push(
            commands
                .iter()
                .map(|c| (c.tool_name.clone(), json!(c.parameters)))
                .collect(),
        );
        self.inner.execute(commands).await
    }
    async fn catalog(
        &self,
    ) -> Result<Arc<ufo_agent::dispatch::tools::ExecutorCatalog>, DispatchError> {
        self.inner.catalog().await
    }
}

impl Recorder {
    fn launches(&self) -> Vec<serde_json::Value> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .filter(|(tool, _)| tool == "launch_application")
            .map(|(_, params)| params.clone())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_denies_before_the_executor_tells_the_model_and_holds_what_it_must_confirm() {
    let desk = Desktop::start(1024, 700).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(dir.path()).unwrap();
    let docs = work.join("docs");
    std::fs::create_dir(&docs).unwrap();
    let note = docs.join("note.txt");
    std::fs::write(&note, "a note\n").unwrap();
    let started = work.join("started");
    let probe = work.join("mousepad-probe");
    let exports: String = desk
        .env()
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect();
    std::fs::write(
        &probe,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nunset NO_AT_BRIDGE\n{exports}exec /usr/bin/mousepad \"$@\"\n",
            started.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy_file = work.join("policy.json");
    std::fs::write(
        &policy_file,
        json!({
            "tools": {"close_application": "confirm"},
            "launch_directories": [docs.display().to_string()],
        })
        .to_string(),
    )
    .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let config = ufo_executor::Config::try_parse_from([
        "ufo-executor".to_owned(),
        "--token".to_owned(),
        "tok".to_owned(),
        "--allow-app".to_owned(),
        format!("mousepad={}", probe.display()),
        "--launch-dir".to_owned(),
        docs.display().to_string(),
    ])
    .unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend.clone(),
        listener,
        stop.clone(),
    ));
    let grpc = GrpcDispatcher::connect_lazy(&addr, Some("tok"), 20_000, 64 << 20, None).unwrap();
    let recorder = Arc::new(Recorder {
        inner: Arc::new(grpc),
        batches: Mutex::default(),
    });

    let llm = ufo_agent::testing::ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        policy: Arc::new(Policy::load(&policy_file).unwrap()),
        // The task's policy says never; the operator's confirm still holds close_application.
        confirm_never: true,
        ..AgentSettings::default()
    };
    let mut round = Round::new(
        "consent",
        1,
        "show the shadow file, then my note",
        0,
        HostAgent::new(services(&llm, settings)),
        Default::default(),
        vec![],
        recorder.clone() as Arc<dyn CommandDispatcher>,
    )
    .unwrap();
    let launch = |args: serde_json::Value| {
        host(
            "CONTINUE",
            json!({"function": "launch_application", "arguments": {"name": "mousepad", "args": args}}),
        )
    };
    llm.push_json(&launch(json!(["/etc/shadow"])));
    let expected_denial = format!(
        "the operator's policy denies launching with argument 1 \"/etc/shadow\": it is not an absolute \
         path inside a launch directory (launch directories: {})",
        docs.display()
    );
    let reason = expected_denial.clone();
    let note_arg = note.display().to_string();
    llm.push_fn(move |req| {
        let text = req.role_text("user");
        assert!(text.contains(&format!("[denied: {reason}]")), "{text}");
        ScriptedReply::Text(launch(json!([note_arg])).to_string())
    });
    llm.push_json(&host(
        "CONTINUE",
        json!({"function": "close_application", "arguments": {}, "comment": "done with it"}),
    ));
    llm.push_fn(|req| {
        let text = req.role_text("user");
        // The close ran, and the executor saw the window go (issue 31's effect).
        assert!(
            text.contains("close_application [success; effect: confirmed — close of '")
                && text.contains("- Mousepad' closed"),
            "{text}"
        );
        ScriptedReply::Text(host("FINISH", json!({"result": "closed"})).to_string())
    });

    let hooks = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: "fine".into(),
        }),
        ..Arrived::default()
    };
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    let summary: Vec<_> = records
        .iter()
        .map(|r| (r.step.status.clone(), r.step.state_after.clone()))
        .collect();
    assert_eq!(llm.remaining(), 0, "{summary:?}");
    assert_eq!(round.end(), Some(&RoundEnd::Finished("closed".into())));

    // Denied by the agent: recorded as denied with the reason, never sent.
    let denied = records[0].step.actions[0].result.as_ref().unwrap();
    assert_eq!(denied.status, v1::ResultStatus::Denied as i32);
    assert_eq!(denied.error, expected_denial);
    let launches = recorder.launches();
    assert_eq!(
        launches,
        [json!({"name": "mousepad", "args": [note.display().to_string()]})],
        "only the allowed launch reached the executor"
    );
    // The probe ran once, for the allowed launch (it records before starting mousepad).
    assert_eq!(
        std::fs::read_to_string(&started).unwrap(),
        format!("{}\n", note.display())
    );
    // Held for the operator's confirm whatever the task said, with the policy's reason; then run.
    let held: Vec<_> = records
        .iter()
        .filter_map(|r| match &r.control.next {
            Next::Hold { action } => Some(action.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].function, "close_application");
    assert_eq!(
        held[0].reason,
        "the operator's policy asks a person to confirm close_application; done with it"
    );
    let closed = records
        .iter()
        .flat_map(|r| &r.step.actions)
        .find(|a| a.function == "close_application")
        .unwrap();
    assert_eq!(
        closed.result.as_ref().unwrap().status,
        v1::ResultStatus::Success as i32
    );
    stop.cancel();
    server.await.unwrap().unwrap();
}
