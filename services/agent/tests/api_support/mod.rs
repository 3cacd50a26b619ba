//! Shared by the `api_*` tests: a fresh Postgres database per test, the real session service (`ufo-session`
//! on port 0, in-process), the agent's REST router and servers, and a deterministic [`TaskDriver`] double
//! standing in for the agents.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod driver;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use ufo_agent::store::client::SessionClient;
use ufo_agent::{Config, api};

/// The key the tests authenticate with.
pub const KEY: &str = "test-key";

/// One authenticated REST call; the reply's JSON body.
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut req = http.request(method, url).bearer_auth(KEY);
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.unwrap().json().await.unwrap()
}

/// Creates an empty database with a unique name; it is dropped with the returned value.
pub async fn fresh_database() -> ufo_testkit::TestDatabase {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    ufo_testkit::TestDatabase::create_from(&base)
        .await
        .expect("postgres")
}

/// The real session service on a fresh database.
pub struct Session {
    pub url: String,
    pub database_url: String,
    /// The session service's blob directory (unless the test configured another store).
    pub blob_dir: std::path::PathBuf,
    _blobs: tempfile::TempDir,
    database: ufo_testkit::TestDatabase,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Session {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// The real session service with its configuration adjusted by `configure`.
    pub async fn start_with(configure: impl FnOnce(&mut ufo_session::Config)) -> Self {
        let database = fresh_database().await;
        let database_url = database.url().to_owned();
        let blobs = tempfile::tempdir().unwrap();
        let blob_dir = blobs.path().join("blobs");
        let mut config = ufo_session::Config::defaults();
        config.database_url = Some(database_url.clone());
        config.blobs.blob_dir = Some(blob_dir.clone());
        config.auth_token = None;
        config.pool_size = 4;
        configure(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            ufo_session::run(config, listener, token).await.unwrap();
        });
        let session = Self {
            url,
            database_url,
            blob_dir,
            _blobs: blobs,
            database,
            shutdown,
            task,
        };
        session.wait_ready().await;
        session
    }

    async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut client = self.client();
            if client
                .list_sessions(ufo_proto::v1::ListSessionsRequest::default())
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "session service not ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the session service and starts it again on the same address and database (the test's own
    /// in-process service: its connections drop and clients see it unreachable meanwhile).
    #[allow(dead_code)] // used by some test binaries only
    pub async fn restart(&mut self, down_for: Duration) {
        self.shutdown.cancel();
        (&mut self.task).await.unwrap();
        tokio::time::sleep(down_for).await;
        let addr = self.url.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind(&addr).await.unwrap();
        let mut config = ufo_session::Config::defaults();
        config.database_url = Some(self.database_url.clone());
        config.blobs.blob_dir = Some(self.blob_dir.clone());
        config.auth_token = None;
        config.pool_size = 4;
        self.shutdown = CancellationToken::new();
        let token = self.shutdown.clone();
        self.task = tokio::spawn(async move {
            ufo_session::run(config, listener, token).await.unwrap();
        });
        self.wait_ready().await;
    }

    pub fn client(&self) -> SessionClient {
        ufo_agent::store::client::connect(&agent_config(&self.url, &[]).session).unwrap()
    }

    /// Every recorded step of a session (the first 100), straight from the session service.
    pub async fn steps(&self, id: &str) -> Vec<ufo_proto::v1::Step> {
        self.client()
            .list_steps(ufo_proto::v1::ListStepsRequest {
                session_id: id.into(),
                from_step: 1,
                limit: 100,
            })
            .await
            .unwrap()
            .into_inner()
            .steps
    }

    /// Every event of an ended session, straight from the session service (the stream ends with it).
    pub async fn events(&self, id: &str) -> Vec<ufo_proto::v1::Event> {
        use futures::StreamExt as _;
        let request = ufo_proto::v1::WatchEventsRequest {
            session_id: id.into(),
            from_seq: 1,
            kinds: Vec::new(),
        };
        let mut stream = self
            .client()
            .watch_events(request)
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(event) = stream.next().await {
            out.push(event.unwrap());
        }
        out
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
        self.database.drop_database().await.unwrap();
    }
}

/// An agent configuration pointing at `session_url`, with the test key and `extra` flags.
pub fn agent_config(session_url: &str, extra: &[&str]) -> Config {
    let mut args = vec![
        "ufo-agent".to_owned(),
        "--session-url".to_owned(),
        session_url.to_owned(),
        "--api-keys".to_owned(),
        format!("tests:{KEY}"),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--http-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Config::parse_from(args)
}

/// The REST router of an agent configured by `config`.
pub fn router(config: &Config) -> axum::Router {
    let client = ufo_agent::store::client::connect(&config.session).unwrap();
    let watch = ufo_agent::store::client::connect_streaming(&config.session).unwrap();
    let tasks = api::Tasks::new(client, watch, config).unwrap();
    api::app(api::AppState {
        tasks,
        keys: api::ApiKeys::from_config(&config.api).unwrap(),
        shutdown: CancellationToken::new(),
    })
}

/// A whole agent process in-process: REST + gRPC (+ runner with `driver`) on port 0.
pub struct Agent {
    pub http: String,
    pub grpc: String,
    pub shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    pub async fn start(
        config: Config,
        driver: Option<Arc<dyn ufo_agent::runner::TaskDriver>>,
    ) -> Self {
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_addr = grpc.local_addr().unwrap();
        let http_addr = http.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            ufo_agent::run(config, ufo_agent::Listeners { grpc, http }, driver, token)
                .await
                .unwrap();
        });
        Self {
            http: format!("http://{http_addr}"),
            grpc: format!("http://{grpc_addr}"),
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

/// The agent's REST API as one caller (the [`KEY`]) sees it.
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(agent: &Agent) -> Self {
        Self {
            base: agent.http.clone(),
            http: ufo_testkit::http_client(),
        }
    }

    /// One call: the status and the JSON body (`null` when it is not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(KEY);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Submits `body` (202 expected); the task's id.
    pub async fn submit(&self, body: serde_json::Value) -> String {
        let (status, task) = self
            .call(reqwest::Method::POST, "/v1/tasks", Some(body))
            .await;
        assert_eq!(status, 202, "{task}");
        task["id"].as_str().unwrap().to_owned()
    }

    pub async fn task(&self, id: &str) -> serde_json::Value {
        self.call(reqwest::Method::GET, &format!("/v1/tasks/{id}"), None)
            .await
            .1
    }

    /// The task once its status is `status` (60 s at most).
    pub async fn wait_status(&self, id: &str, status: &str) -> serde_json::Value {
        eventually(60, &format!("task {id} {status}"), || async {
            let task = self.task(id).await;
            (task["status"] == status).then_some(task)
        })
        .await
    }

    /// The task's first 100 steps.
    pub async fn steps(&self, id: &str) -> Vec<serde_json::Value> {
        let (_, page) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/tasks/{id}/steps?limit=100"),
                None,
            )
            .await;
        page["steps"].as_array().cloned().unwrap_or_default()
    }

    /// The caller's first 100 tasks.
    pub async fn list(&self) -> Vec<serde_json::Value> {
        let (status, page) = self
            .call(reqwest::Method::GET, "/v1/tasks?page_size=100", None)
            .await;
        assert_eq!(status, 200, "{page}");
        page["tasks"].as_array().unwrap().clone()
    }
}

/// Polls `check` until it returns `Some`, failing after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `GetTask` over gRPC with the test key.
pub async fn grpc_task(agent: &Agent, id: &str) -> ufo_proto::v1::Task {
    let mut client =
        ufo_proto::v1::agent_service_client::AgentServiceClient::connect(agent.grpc.clone())
            .await
            .unwrap();
    let mut req = tonic::Request::new(ufo_proto::v1::GetTaskRequest {
        task_id: id.to_owned(),
    });
    req.metadata_mut()
        .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    client.get_task(req).await.unwrap().into_inner()
}
