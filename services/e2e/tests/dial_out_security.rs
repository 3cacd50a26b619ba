//! Dial-out executors' security, against a real `ufo-agent` process: stand-in executors in this test speak
//! the real protocol (`ufo.v1.ExecutorHub/Dial`) and misbehave. Each refusal comes with a clear status,
//! the agent never panics, and a call meant for one desktop never reaches another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use bytes::{BufMut as _, Bytes};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status, Streaming};
use ufo_client::{AgentClient, NewTask};
use ufo_proto::v1::executor_hub_client::ExecutorHubClient;
use ufo_proto::v1::{AgentFrame, ExecutorFrame, TunnelResponse, agent_frame, executor_frame};
use ufo_testkit::Cluster;

/// A stand-in executor's open connection.
struct Conn {
    tx: mpsc::Sender<ExecutorFrame>,
    inbound: Streaming<AgentFrame>,
}

fn request<T>(name: &str, token: &str, body: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(body);
    let md = request.metadata_mut();
    md.insert("x-ufo-executor-name", name.parse().unwrap());
    md.insert("authorization", format!("Bearer {token}").parse().unwrap());
    md.insert("x-ufo-executor-labels", "os=test".parse().unwrap());
    request
}

/// Opens a connection as `name` with `token`; Ok once the agent's welcome came.
async fn connect(url: &str, name: &str, token: &str) -> Result<Conn, Status> {
    let mut client = ExecutorHubClient::connect(url.to_owned())
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(8);
    let mut inbound = client
        .dial(request(name, token, ReceiverStream::new(rx)))
        .await?
        .into_inner();
    match inbound.message().await? {
        Some(AgentFrame {
            kind: Some(agent_frame::Kind::Welcome(_)),
        }) => Ok(Conn { tx, inbound }),
        other => panic!("expected a welcome, got {other:?}"),
    }
}

/// Reads until the agent ends the connection: its status, and any call frames that came first.
async fn ended(conn: &mut Conn) -> (Status, Vec<u64>) {
    let mut calls = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), conn.inbound.message()).await {
            Err(_) => panic!("the agent did not end the connection within 30 s"),
            Ok(Ok(Some(AgentFrame {
                kind: Some(agent_frame::Kind::Request(r)),
            }))) => calls.push(r.id),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return (Status::ok("ended"), calls),
            Ok(Err(status)) => return (status, calls),
        }
    }
}

/// The next call the agent sends on `conn` (heartbeats skipped).
async fn next_call(conn: &mut Conn) -> ufo_proto::v1::TunnelRequest {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), conn.inbound.message())
            .await
            .expect("a call within 60 s")
            .unwrap()
            .expect("the connection is open");
        if let Some(agent_frame::Kind::Request(r)) = frame.kind {
            return r;
        }
    }
}

fn refused(outcome: Result<Conn, Status>) -> Status {
    match outcome {
        Ok(_) => panic!("the connection was accepted"),
        Err(s) => s,
    }
}

/// Sends bytes as they are, as the stream's messages (tonic frames them; their content is not protobuf).
#[derive(Debug, Clone, Default)]
struct RawCodec;

#[derive(Debug)]
struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

#[derive(Debug)]
struct FrameDecoder(tonic_prost::ProstDecoder<AgentFrame>);

impl Decoder for FrameDecoder {
    type Item = AgentFrame;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<AgentFrame>, Status> {
        self.0.decode(src)
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = AgentFrame;
    type Encoder = RawEncoder;
    type Decoder = FrameDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> FrameDecoder {
        FrameDecoder(tonic_prost::ProstCodec::<ExecutorFrame, AgentFrame>::default().decoder())
    }
}

async fn executors(agent: &AgentClient) -> Value {
    agent.executors().await.unwrap()["executors"].clone()
}

fn connected(all: &Value, name: &str) -> bool {
    all.as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == name && e["connected"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dial_out_connections_are_refused_or_closed_with_a_clear_status() {
    let dir = tempfile::tempdir().unwrap();
    let enrollments = dir.path().join("enrollments.json");
    let mut cluster = Cluster::builder()
        .agent_args(["--api-admins", "test", "--dial-out-heartbeat-ms", "500"])
        .agent_args(["--executor-max-message-bytes", "1048576"])
        .agent_args([
            std::ffi::OsString::from("--executor-enrollments-file"),
            enrollments.clone().into_os_string(),
        ])
        .start()
        .await
        .unwrap();
    let url = cluster.grpc_url.clone();
    let agent = ufo_e2e::agent(&cluster).unwrap();
    let token = |v: &Value| v["token"].as_str().unwrap().to_owned();
    let a1 = agent.enroll_executor("desk-a").await.unwrap();
    let a2 = agent.enroll_executor("desk-a").await.unwrap();
    let b = agent.enroll_executor("desk-b").await.unwrap();
    let c = agent.enroll_executor("desk-c").await.unwrap();

    // A wrong token, and none at all.
    let s = refused(connect(&url, "desk-a", "ufo-enroll-0000").await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("not valid"), "{s:?}");
    let mut anonymous = ExecutorHubClient::connect(url.clone()).await.unwrap();
    let mut bare = tonic::Request::new(ReceiverStream::new(mpsc::channel(1).1));
    bare.metadata_mut()
        .insert("x-ufo-executor-name", "desk-a".parse().unwrap());
    let s = anonymous.dial(bare).await.unwrap_err();
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");

    // A token of another executor.
    let s = refused(connect(&url, "desk-a", &token(&b)).await);
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("another executor"), "{s:?}");

    // A revoked token: its live connection is closed, and it connects no more.
    let mut live_c = connect(&url, "desk-c", &token(&c)).await.unwrap();
    let c_id = c["id"].as_str().unwrap();
    let revoked = agent.revoke_enrollment("desk-c", c_id).await.unwrap();
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (s, _) = ended(&mut live_c).await;
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("revoked"), "{s:?}");
    let s = refused(connect(&url, "desk-c", &token(&c)).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("revoked"), "{s:?}");

    // A second connection claiming a connected name: refused with another token; with the same token it
    // is the executor reconnecting, and its earlier connection is closed.
    let mut first_a = connect(&url, "desk-a", &token(&a1)).await.unwrap();
    let s = refused(connect(&url, "desk-a", &token(&a2)).await);
    assert_eq!(s.code(), Code::AlreadyExists, "{s:?}");
    let mut desk_a = connect(&url, "desk-a", &token(&a1)).await.unwrap();
    let (s, _) = ended(&mut first_a).await;
    assert_eq!(s.code(), Code::Aborted, "{s:?}");

    // A task naming desk-a: its calls go to desk-a only. desk-b, connected meanwhile, answers the call
    // desk-a was given: desk-b is closed (it was never given that id), and the call stays desk-a's.
    let mut desk_b = connect(&url, "desk-b", &token(&b)).await.unwrap();
    agent
        .submit(&NewTask {
            executor: Some("desk-a".into()),
            ..NewTask::request("look at the desktop")
        })
        .await
        .unwrap();
    let call = next_call(&mut desk_a).await;
    assert!(call.path.starts_with("/ufo.v1.Executor/"), "{call:?}");
    desk_b
        .tx
        .send(ExecutorFrame {
            kind: Some(executor_frame::Kind::Response(TunnelResponse {
                id: call.id,
                body: Bytes::from_static(b"\0\0\0\0\0"),
                code: 0,
                message: String::new(),
            })),
        })
        .await
        .unwrap();
    let (s, calls_to_b) = ended(&mut desk_b).await;
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("never given"), "{s:?}");
    assert!(calls_to_b.is_empty(), "desk-b was sent {calls_to_b:?}");
    let all = executors(&agent).await;
    assert!(connected(&all, "desk-a"), "{all}");
    assert!(!connected(&all, "desk-b"), "{all}");

    // desk-a answers with an empty frame: closed too.
    desk_a.tx.send(ExecutorFrame { kind: None }).await.unwrap();
    let (s, _) = ended(&mut desk_a).await;
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("empty frame"), "{s:?}");

    // An oversized frame (over --executor-max-message-bytes and the frame's own room).
    let mut big = connect(&url, "desk-b", &token(&b)).await.unwrap();
    big.tx
        .send(ExecutorFrame {
            kind: Some(executor_frame::Kind::Response(TunnelResponse {
                id: 1,
                body: Bytes::from(vec![7u8; 2 << 20]),
                code: 0,
                message: String::new(),
            })),
        })
        .await
        .unwrap();
    let (s, _) = ended(&mut big).await;
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");

    // A frame that is not protobuf at all.
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let (raw_tx, raw_rx) = mpsc::channel::<Bytes>(4);
    let mut raw = grpc
        .streaming(
            request("desk-b", &token(&b), ReceiverStream::new(raw_rx)),
            tonic::codegen::http::uri::PathAndQuery::from_static("/ufo.v1.ExecutorHub/Dial"),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        raw.message().await.unwrap().and_then(|f| f.kind),
        Some(agent_frame::Kind::Welcome(_))
    ));
    raw_tx
        .send(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]))
        .await
        .unwrap();
    let s = loop {
        match tokio::time::timeout(Duration::from_secs(30), raw.message())
            .await
            .unwrap()
        {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended without a status"),
            Err(s) => break s,
        }
    };
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("malformed frame"), "{s:?}");

    // The agent is still up and never panicked.
    let agent_process = cluster.agent.as_mut().unwrap();
    agent_process.check_running().unwrap();
    assert!(!cluster.logs().contains("panicked"), "{}", cluster.logs());
    assert!(
        cluster.logs().contains("dial-out connection refused"),
        "{}",
        cluster.logs()
    );
}
