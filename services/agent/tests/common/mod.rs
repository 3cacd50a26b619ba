//! Shared rig for the agent tests: a scripted OpenAI-compatible server, the executor double, and the
//! agents' services wired to them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use ufo_agent::agents::target::Rect;
use ufo_agent::agents::{AgentServices, AgentSettings, HostAgent};
use ufo_agent::llm::PriceTable;
use ufo_agent::llm::openai::{OpenAiCompatible, OpenAiConfig};
use ufo_agent::llm::retry::RetryPolicy;
use ufo_agent::memory::Blackboard;
use ufo_agent::round::Round;
use ufo_agent::testing::{
    FakeControl, FakeDesktop, FakeWindow, RecordedRequest, ScriptedLlm, ScriptedReply,
};
use ufo_agent::vision::{Marker, Palette};

pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
    }
}

pub fn model(llm: &ScriptedLlm, name: &str) -> Arc<OpenAiCompatible> {
    let mut config = OpenAiConfig::openai(llm.base_url(), name);
    config.retry = fast_retry();
    Arc::new(
        OpenAiCompatible::new(config, Arc::new(PriceTable::new().with(name, 1.0, 2.0))).unwrap(),
    )
}

pub fn marker() -> Arc<Marker> {
    Arc::new(
        Marker::load(
            Path::new(ufo_agent::vision::annotate::DEFAULT_FONT),
            14.0,
            Palette::default(),
        )
        .unwrap(),
    )
}

pub fn services(llm: &ScriptedLlm, settings: AgentSettings) -> AgentServices {
    AgentServices {
        host_model: model(llm, "host-model"),
        app_model: model(llm, "app-model"),
        marker: marker(),
        grounding: None,
        knowledge: None,
        replay: None,
        reuse: None,
        settings: Arc::new(settings),
        uploads: None,
        mcp: None,
    }
}

/// "notes": Body holds "total=42"; "sheet": Cell edit, Apply (fails), Save.
pub fn desktop() -> FakeDesktop {
    let mut body = FakeControl::new("n2", "Body", "Edit", Rect::new(20, 60, 380, 250));
    body.text = "total=42".into();
    let mut apply = FakeControl::new("s2", "Apply", "Button", Rect::new(520, 120, 600, 150));
    apply.fails = true;
    FakeDesktop::new(vec![
        FakeWindow {
            id: "w1".into(),
            name: "Notes - today".into(),
            process: "notes".into(),
            rect: Rect::new(0, 0, 400, 300),
            controls: vec![
                FakeControl::new("n1", "Title", "Edit", Rect::new(20, 20, 380, 50)),
                body,
                FakeControl::new("n3", "Copy", "Button", Rect::new(20, 260, 100, 290)),
            ],
        },
        FakeWindow {
            id: "w2".into(),
            name: "Sheet - book1".into(),
            process: "sheet".into(),
            rect: Rect::new(400, 0, 800, 300),
            controls: vec![
                FakeControl::new("s1", "Cell", "Edit", Rect::new(420, 40, 780, 80)),
                apply,
                FakeControl::new("s3", "Save", "Button", Rect::new(620, 120, 700, 150)),
            ],
        },
    ])
}

pub fn round(services: AgentServices, desktop: Arc<FakeDesktop>, request: &str) -> Round {
    Round::new(
        "s-1",
        1,
        request,
        0,
        HostAgent::new(services),
        Blackboard::default(),
        vec![],
        desktop,
    )
    .unwrap()
}

pub fn host(status: &str, extra: Value) -> Value {
    let mut v = json!({"observation": "desktop", "thought": "think", "status": status, "plan": []});
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    v
}

pub fn assign(label: &str, subtask: &str) -> Value {
    host(
        "ASSIGN",
        json!({"current_subtask": subtask, "message": "go", "function": "select_application_window", "arguments": {"id": label}}),
    )
}

pub fn app(status: &str, actions: Value, result: &str) -> Value {
    json!({"observation": "window", "thought": "act", "status": status, "action": actions, "result": result, "plan": []})
}

/// A reply choosing controls by name from the prompt's control list.
pub fn by_name(
    f: impl Fn(&dyn Fn(&str) -> String) -> Value + Send + Sync + 'static,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    move |req: &RecordedRequest| {
        let id = |name: &str| {
            req.control_id(name)
                .unwrap_or_else(|| panic!("no control {name} in prompt"))
        };
        ScriptedReply::Text(f(&id).to_string())
    }
}

/// The reference filesystem MCP server (`mcp-server-filesystem`, installed by .ci/run) as the
/// third-party agent `files`, allowed to touch `dir` only.
pub fn files_hub(dir: &Path) -> Arc<ufo_agent::mcp::McpHub> {
    let bin = which("mcp-server-filesystem");
    let file = ufo_agent::mcp::McpServersFile::parse(
        &json!({"servers": [{
            "name": "files",
            "transport": {"type": "stdio", "command": bin, "args": [dir]},
            "bind": {"type": "agent", "description": "Reads and writes files in the output directory"}
        }]})
        .to_string(),
        false,
    )
    .unwrap();
    Arc::new(ufo_agent::mcp::McpHub::new(
        file,
        ufo_agent::mcp::McpLimits::default(),
    ))
}

/// The path of `program` on PATH (a test of an installed program panics naming it when it is missing).
pub fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(program))
                .find(|f| f.is_file())
        })
        .unwrap_or_else(|| panic!("{program} is not installed (.ci/run installs it with npm)"))
        .display()
        .to_string()
}

/// A third-party agent's reply.
pub fn third(status: &str, action: Value, result: &str) -> Value {
    json!({"observation": "files", "thought": "write", "status": status, "action": action,
           "result": result, "plan": []})
}

/// The label of the target whose name contains `needle` (case-insensitive), from the HostAgent prompt.
pub fn target_label(req: &RecordedRequest, needle: &str) -> String {
    req.text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.to_lowercase().contains(needle))
        })
        .and_then(|v| v["label"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no target named like {needle}: {}", req.text()))
}

/// A real executor (in-process, over gRPC) on a private headless desktop, with `run_command` allowed
/// `allow` in `workdir`; [`Self::dispatcher`] sends the shell agent's `shell__run` to it.
#[cfg(target_os = "linux")]
pub struct ShellExecutor {
    _desk: ufo_executor::testing::Desktop,
    stop: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<Result<(), ufo_executor::RunError>>,
    /// The shell agent's dispatcher in front of the executor's gRPC client.
    pub dispatcher: Arc<dyn ufo_agent::dispatch::CommandDispatcher>,
}

#[cfg(target_os = "linux")]
impl ShellExecutor {
    pub async fn start(workdir: &Path, allow: &str) -> Self {
        use clap::Parser as _;
        let desk = ufo_executor::testing::Desktop::start(800, 600)
            .await
            .unwrap();
        let backend = Arc::new(desk.backend().await.unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ufo_executor::Config::try_parse_from([
            "ufo-executor",
            "--token",
            "tok",
            "--shell-allow",
            allow,
            "--shell-workdir",
            workdir.to_str().unwrap(),
        ])
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(ufo_executor::run_with_backend(
            config,
            backend,
            listener,
            stop.clone(),
        ));
        let grpc = ufo_agent::dispatch::grpc::GrpcDispatcher::connect_lazy(
            &format!("http://{addr}"),
            Some("tok"),
            20_000,
            64 << 20,
            None,
        )
        .unwrap();
        Self {
            _desk: desk,
            stop,
            server,
            dispatcher: Arc::new(ufo_agent::shell::ShellDispatcher::new(
                Arc::new(grpc),
                8_000,
            )),
        }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.server.await.unwrap().unwrap();
    }
}

/// Settings with the shell agent on.
pub fn shell_settings(policy: Option<Value>) -> AgentSettings {
    AgentSettings {
        shell_agent: Some("Runs cat and ls in the work directory".into()),
        policy: Arc::new(
            ufo_agent::agents::policy::Policy::parse(
                &policy.unwrap_or_else(|| json!({})).to_string(),
            )
            .unwrap(),
        ),
        ..AgentSettings::default()
    }
}

/// A CA and a `localhost` certificate it signed, as PEM: (ca, cert, key).
pub fn certificates() -> (String, String, String) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A real executor in this process on its own headless desktop (800x600, token `tok`), with `extra`
/// flags; its URL and stopper, once it serves.
pub async fn headless_executor(extra: &[&str]) -> (String, tokio_util::sync::CancellationToken) {
    use clap::Parser as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut args = vec![
        "ufo-executor",
        "--token",
        "tok",
        "--desktop",
        "headless",
        "--desktop-size",
        "800x600",
    ];
    args.extend_from_slice(extra);
    let config = ufo_executor::Config::try_parse_from(args).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(ufo_executor::run(config, listener, stop.clone()));
    ufo_testkit::poll_until(
        "the headless executor serving",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || ufo_testkit::grpc_serving(&url),
    )
    .await
    .unwrap();
    (url, stop)
}
