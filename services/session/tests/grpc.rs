//! The gRPC service over real sockets: the server is started with `run` on port 0 (embedded SQLite store),
//! a real tonic client calls it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;

use client::Client;
use tokio::net::TcpListener;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use ufo_proto::v1::*;
use ufo_session::Config;

struct Server {
    url: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::result::Result<(), ufo_session::RunError>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(configure: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.database_url = None;
        config.sqlite_path = dir.path().join("grpc.sqlite3");
        config.auth_token = None;
        config.max_page_size = 2;
        config.default_page_size = 2;
        configure(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(ufo_session::run(config, listener, shutdown.clone()));
        Self {
            url,
            shutdown,
            task,
            _dir: dir,
        }
    }

    async fn client(&self, token: Option<&str>) -> Client {
        client::connect(&self.url, token).await
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn assert_invalid(status: tonic::Status, field: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{field}:")),
        "message should name {field}: {}",
        status.message()
    );
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field() {
    let server = Server::start(|_| {}).await;
    let mut c = server.client(None).await;

    let err = c
        .get_session(GetSessionRequest {
            session_id: "not-a-uuid".into(),
        })
        .await
        .unwrap_err();
    assert_invalid(err, "session_id");
    let err = c
        .create_session(CreateSessionRequest {
            request: "  ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "request");
    let err = c
        .record_step(RecordStepRequest::default())
        .await
        .unwrap_err();
    assert_invalid(err, "step");
    let err = c
        .record_step(RecordStepRequest {
            step: Some(Step {
                session_id: uuid::Uuid::new_v4().to_string(),
                step: 0,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "step.step");
    let err = c
        .record_step(RecordStepRequest {
            step: Some(Step {
                session_id: uuid::Uuid::new_v4().to_string(),
                step: 1,
                round: 1,
                round_step: 1,
                agent_name: "HostAgent".into(),
                agent_kind: ufo_proto::v1::AgentKind::Host.into(),
                ..Default::default()
            }),
            blobs: vec![ufo_proto::v1::StepBlob {
                kind: ArtifactKind::CleanScreenshot.into(),
                content_type: "image/png".into(),
                sha256: "ab".repeat(32),
                size: 0,
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "blobs[0].size");
    let err = c
        .claim_task(ClaimTaskRequest {
            worker_id: String::new(),
            lease_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "worker_id");
    let err = c
        .set_session_status(SetSessionStatusRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            status: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "status");
    let err = c
        .list_sessions(ListSessionsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "page_token");
    let err = c
        .get_artifact(GetArtifactRequest {
            artifact_id: "abc".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "artifact_id");
    let err = c
        .append_events(AppendEventsRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            events: vec![EventDraft {
                kind: 1234,
                ..Default::default()
            }],
            lease_owner: String::new(),
        })
        .await
        .unwrap_err();
    assert_invalid(err, "events[0].kind");

    // Unknown ids are NOT_FOUND, and no SQL leaks into any message.
    let unknown = uuid::Uuid::new_v4().to_string();
    let err = c
        .get_session(GetSessionRequest {
            session_id: unknown.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains(&unknown));
    let err = c
        .watch_events(WatchEventsRequest {
            session_id: unknown.clone(),
            from_seq: 1,
            kinds: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    for kinds in [vec![1234], vec![0], vec![-3], vec![1; 65]] {
        let err = c
            .watch_events(WatchEventsRequest {
                session_id: unknown.clone(),
                from_seq: 1,
                kinds,
            })
            .await
            .unwrap_err();
        assert_invalid(err, "kinds");
    }
    for message in [err.message()] {
        for sql in ["SELECT", "INSERT", "sqlx", "sqlite"] {
            assert!(!message.contains(sql), "{message}");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_task_flows_through_the_api_and_pages_are_capped() {
    let server = Server::start(|_| {}).await;
    let mut c = server.client(None).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let s = c
            .create_session(CreateSessionRequest {
                request: format!("task {i}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        ids.push(s.id);
    }
    // page_size larger than the cap (2) is clamped.
    let page = c
        .list_sessions(ListSessionsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.sessions.len(), 2);
    assert_eq!(page.sessions[0].id, ids[2], "newest first");
    let rest = c
        .list_sessions(ListSessionsRequest {
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.sessions.len(), 1);
    assert!(rest.next_page_token.is_empty());

    let claimed = c
        .claim_task(ClaimTaskRequest {
            worker_id: "w1".into(),
            lease_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(claimed.id, ids[0], "oldest first");
    let mut events = c
        .watch_events(WatchEventsRequest {
            session_id: claimed.id.clone(),
            from_seq: 0,
            kinds: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    c.begin_round(BeginRoundRequest {
        session_id: claimed.id.clone(),
        number: 1,
        lease_owner: "w1".into(),
    })
    .await
    .unwrap();
    let request = RecordStepRequest {
        step: Some(Step {
            session_id: claimed.id.clone(),
            step: 1,
            round: 1,
            round_step: 1,
            agent_name: "HostAgent".into(),
            agent_kind: AgentKind::Host.into(),
            ..Default::default()
        }),
        lease_owner: "w1".into(),
        ..Default::default()
    };
    let first = c.record_step(request.clone()).await.unwrap().into_inner();
    assert!(!first.duplicate);
    let again = c.record_step(request.clone()).await.unwrap().into_inner();
    assert!(again.duplicate);
    let mut changed = request.clone();
    changed.step.as_mut().unwrap().thought = "other".into();
    assert_eq!(
        c.record_step(changed).await.unwrap_err().code(),
        Code::AlreadyExists
    );
    let mut stale = request;
    stale.step.as_mut().unwrap().step = 2;
    stale.lease_owner = "w2".into();
    assert_eq!(
        c.record_step(stale).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    c.set_session_status(SetSessionStatusRequest {
        session_id: claimed.id.clone(),
        status: SessionStatus::Finished.into(),
        result: "done".into(),
        lease_owner: "w1".into(),
    })
    .await
    .unwrap();
    let mut kinds = Vec::new();
    while let Some(event) = events.next().await {
        kinds.push(EventKind::try_from(event.unwrap().kind).unwrap());
    }
    assert_eq!(
        kinds,
        vec![
            EventKind::TaskCreated,
            EventKind::TaskClaimed,
            EventKind::RoundStarted,
            EventKind::StepFinished,
            EventKind::TaskFinished,
        ]
    );
    // A watcher asking for some kinds is sent those alone, and its stream still ends after the
    // terminal event, whether it asked for that kind or not.
    for (asked, sent) in [
        (
            vec![EventKind::StepFinished, EventKind::TaskFinished],
            vec![EventKind::StepFinished, EventKind::TaskFinished],
        ),
        (vec![EventKind::RoundStarted], vec![EventKind::RoundStarted]),
        (vec![EventKind::CancelRequested], vec![]),
    ] {
        let mut events = c
            .watch_events(WatchEventsRequest {
                session_id: claimed.id.clone(),
                from_seq: 1,
                kinds: asked.iter().map(|&k| k.into()).collect(),
            })
            .await
            .unwrap()
            .into_inner();
        let mut kinds = Vec::new();
        while let Some(event) = events.next().await {
            kinds.push(EventKind::try_from(event.unwrap().kind).unwrap());
        }
        assert_eq!(kinds, sent, "asked for {asked:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_configured_token_is_required_on_every_call() {
    let server = Server::start(|c| c.auth_token = Some("s3cret".into())).await;
    let mut anonymous = server.client(None).await;
    let err = anonymous
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut wrong = server.client(Some("nope")).await;
    let err = wrong
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut right = server.client(Some("s3cret")).await;
    right
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test]
async fn oversized_messages_are_refused() {
    let server = Server::start(|c| c.max_message_bytes = 64 * 1024).await;
    let mut c = server.client(None).await;
    let s = c
        .create_session(CreateSessionRequest {
            request: "big".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let err = c
        .put_blob(PutBlobRequest {
            data: vec![0; 128 * 1024].into(),
            sha256: String::new(),
        })
        .await
        .unwrap_err();
    // tonic refuses a message over the decoding limit before it reaches the service; the servers report it
    // with gRPC's code for an over-limit message.
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("too large"), "{err:?}");
    // The same limit bounds a step.
    let err = c
        .record_step(RecordStepRequest {
            step: Some(Step {
                session_id: s.id,
                step: 1,
                observation: "x".repeat(128 * 1024),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    server.stop().await;
}
