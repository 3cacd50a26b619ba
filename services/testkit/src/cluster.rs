//! A whole system as separate real processes for end-to-end tests and benchmarks: `ufo-session` (on a
//! given Postgres database, or SQLite in a temporary directory), optionally a local `ufo-executor` (on the
//! display the caller prepared), and `ufo-agent` with an API key, every one on its own free port, exporting
//! spans to an optional collector, each awaited on gRPC health before the next starts.

use std::ffi::OsString;
use std::time::Duration;

use crate::binary::{BinaryError, workspace_binary};
use crate::process::{ProcessBuilder, ProcessError, ServiceProcess, free_port};

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A binary could not be built.
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// A process failed to start or get ready.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Local I/O (ports, temporary directory).
    #[error("cluster setup failed")]
    Io(#[from] std::io::Error),
}

/// Where tasks' commands go.
#[derive(Debug, Clone)]
enum ExecutorSetup {
    /// No executor (tasks fail at their first command unless they name one).
    None,
    /// A local `ufo-executor` with these extra environment variables (e.g. DISPLAY, the session bus).
    Local(Vec<(OsString, OsString)>),
    /// An executor already running at this URL.
    Remote(String),
}

/// Configures a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    database_url: Option<String>,
    otlp_endpoint: Option<String>,
    llm_base_url: Option<String>,
    executor: ExecutorSetup,
    api_key: String,
    session_args: Vec<OsString>,
    executor_args: Vec<OsString>,
    agent_args: Vec<OsString>,
    ready_timeout: Duration,
    bin_dir: Option<std::path::PathBuf>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            database_url: None,
            otlp_endpoint: None,
            llm_base_url: None,
            executor: ExecutorSetup::None,
            api_key: format!("test-{}", uuid::Uuid::new_v4().simple()),
            session_args: Vec::new(),
            executor_args: Vec::new(),
            agent_args: Vec::new(),
            ready_timeout: Duration::from_secs(60),
            bin_dir: None,
        }
    }
}

impl ClusterBuilder {
    /// The session store's Postgres database (e.g. a [`crate::TestDatabase`]'s URL); default: SQLite in
    /// the cluster's temporary directory.
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// Every service exports spans here (e.g. [`crate::OtlpCollector::endpoint`]).
    pub fn otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// The OpenAI-compatible LLM server the agent calls (a scripted one in tests).
    pub fn llm_base_url(mut self, url: impl Into<String>) -> Self {
        self.llm_base_url = Some(url.into());
        self
    }

    /// Starts a local executor with these environment variables (DISPLAY, DBUS_SESSION_BUS_ADDRESS, ...).
    pub fn local_executor<K: Into<OsString>, V: Into<OsString>>(
        mut self,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.executor =
            ExecutorSetup::Local(env.into_iter().map(|(k, v)| (k.into(), v.into())).collect());
        self
    }

    /// Uses an executor that already runs at `url` as the agent's default.
    pub fn remote_executor(mut self, url: impl Into<String>) -> Self {
        self.executor = ExecutorSetup::Remote(url.into());
        self
    }

    /// Extra flags for `ufo-session`.
    pub fn session_args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.session_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Extra flags for `ufo-executor`.
    pub fn executor_args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.executor_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Extra flags for `ufo-agent` (e.g. `--runner-slots 0`, LLM settings).
    pub fn agent_args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.agent_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// How long each service may take to become ready (default 60 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Takes the service binaries from `dir` (e.g. next to a tool that ships with them) instead of
    /// building the workspace's.
    pub fn binaries_from(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    fn binary(&self, name: &str) -> Result<std::path::PathBuf, BinaryError> {
        match &self.bin_dir {
            Some(dir) => Ok(dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))),
            None => workspace_binary(name),
        }
    }

    /// Starts session, executor (if any) and agent, in that order, each awaited on gRPC health.
    pub async fn start(self) -> Result<Cluster, ClusterError> {
        let dir = tempfile::tempdir()?;
        let otlp = |b: ProcessBuilder| match &self.otlp_endpoint {
            Some(endpoint) => b.args(["--otlp-endpoint", endpoint.as_str()]),
            None => b.env_remove("UFO_OTLP_ENDPOINT"),
        };

        let session_port = free_port()?;
        let session_url = format!("http://127.0.0.1:{session_port}");
        let mut session = ProcessBuilder::new("ufo-session", self.binary("ufo-session")?)
            .args(["--listen", &format!("127.0.0.1:{session_port}")])
            .current_dir(dir.path());
        session = match &self.database_url {
            Some(url) => session.args(["--database-url", url.as_str()]),
            None => session
                .arg("--sqlite-path")
                .arg(dir.path().join("session.sqlite3")),
        };
        let mut session = otlp(session).args(&self.session_args).spawn()?;
        session
            .wait_grpc_ready(&session_url, self.ready_timeout)
            .await?;

        let executor_token = format!("executor-{}", uuid::Uuid::new_v4().simple());
        let (executor, executor_url) = match &self.executor {
            ExecutorSetup::None => (None, None),
            ExecutorSetup::Remote(url) => (None, Some(url.clone())),
            ExecutorSetup::Local(env) => {
                let port = free_port()?;
                let url = format!("http://127.0.0.1:{port}");
                let mut builder = ProcessBuilder::new("ufo-executor", self.binary("ufo-executor")?)
                    .args(["--listen", &format!("127.0.0.1:{port}")])
                    .env("UFO_EXECUTOR_TOKEN", &executor_token)
                    .current_dir(dir.path());
                for (key, value) in env {
                    builder = builder.env(key, value);
                }
                let mut executor = otlp(builder).args(&self.executor_args).spawn()?;
                executor.wait_grpc_ready(&url, self.ready_timeout).await?;
                (Some(executor), Some(url))
            }
        };

        let grpc_port = free_port()?;
        let http_port = free_port()?;
        let grpc_url = format!("http://127.0.0.1:{grpc_port}");
        let rest_url = format!("http://127.0.0.1:{http_port}");
        let mut agent = ProcessBuilder::new("ufo-agent", self.binary("ufo-agent")?)
            .args(["--listen", &format!("127.0.0.1:{grpc_port}")])
            .args(["--http-listen", &format!("127.0.0.1:{http_port}")])
            .args(["--session-url", session_url.as_str()])
            .env("UFO_AGENT_API_KEYS", format!("test:{}", self.api_key))
            .current_dir(dir.path());
        if let Some(url) = &executor_url {
            agent = agent.args(["--default-executor", url.as_str()]);
        }
        if executor.is_some() {
            agent = agent.env("UFO_AGENT_EXECUTOR_TOKEN", &executor_token);
        }
        if let Some(url) = &self.llm_base_url {
            agent = agent
                .args(["--llm-base-url", url.as_str()])
                .env("UFO_AGENT_LLM_API_KEY", "test-llm-key");
        }
        let mut agent = otlp(agent).args(&self.agent_args).spawn()?;
        agent.wait_grpc_ready(&grpc_url, self.ready_timeout).await?;
        agent
            .wait_http_ready(&format!("{rest_url}/readyz"), self.ready_timeout)
            .await?;

        Ok(Cluster {
            agent: Some(agent),
            executor,
            session: Some(session),
            rest_url,
            grpc_url,
            session_url,
            executor_url,
            api_key: self.api_key,
            dir,
        })
    }
}

/// Running services. Dropping it stops them (agent first, session last).
#[derive(Debug)]
pub struct Cluster {
    /// The agent process.
    pub agent: Option<ServiceProcess>,
    /// The local executor process, when started.
    pub executor: Option<ServiceProcess>,
    /// The session process.
    pub session: Option<ServiceProcess>,
    /// The agent's REST base URL.
    pub rest_url: String,
    /// The agent's gRPC URL.
    pub grpc_url: String,
    /// The session service's URL.
    pub session_url: String,
    /// The agent's default executor, if any.
    pub executor_url: Option<String>,
    /// The API key the agent accepts.
    pub api_key: String,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A builder with SQLite, no executor, no span export.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The cluster's scratch directory (SQLite file, working directories).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Stops every service gracefully (SIGTERM, so they flush spans), agent first.
    pub async fn stop(&mut self) -> Result<(), ClusterError> {
        for process in [&mut self.agent, &mut self.executor, &mut self.session] {
            if let Some(mut p) = process.take() {
                p.stop().await?;
            }
        }
        Ok(())
    }

    /// Everything the services logged, for failure messages.
    pub fn logs(&self) -> String {
        [&self.agent, &self.executor, &self.session]
            .into_iter()
            .flatten()
            .map(|p| format!("----- {p:?} -----\n{}", p.logs()))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Agent first, so it does not see the session vanish mid-step.
        drop(self.agent.take());
        drop(self.executor.take());
        drop(self.session.take());
    }
}
