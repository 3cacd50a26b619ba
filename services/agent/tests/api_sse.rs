//! `GET /v1/tasks/{id}/events` against the real session service (Postgres) and a real agent process with
//! the scripted task driver: the SSE stream carries the same events as gRPC `StreamSteps`, resumes after a
//! dropped connection with `Last-Event-ID` without a gap or a duplicate, ends with `end` when the task
//! ends, and 100 clients on one task all receive every event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use futures::StreamExt as _;
use serde_json::{Value, json};
use ufo_proto::v1::StreamStepsRequest;
use ufo_proto::v1::agent_service_client::AgentServiceClient;

const RUNNER_FLAGS: &[&str] = &["--lease-ms", "1500", "--claim-interval-ms", "50"];

/// One SSE message.
#[derive(Debug, Clone)]
struct Message {
    event: String,
    id: Option<u64>,
    data: Value,
}

/// Reads an SSE response message by message.
struct Reader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl Reader {
    async fn open(base: &str, id: &str, last_event_id: Option<u64>, query: &str) -> Self {
        let mut req = ufo_testkit::http_client()
            .get(format!("{base}/v1/tasks/{id}/events{query}"))
            .bearer_auth(KEY);
        if let Some(last) = last_event_id {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Self {
            body: res.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next message (keep-alive comments skipped), or None when the server closed the stream.
    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = ("message".to_owned(), None, Vec::new());
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => event = value.to_owned(),
                        "id" => id = Some(value.parse().unwrap()),
                        "data" => data.push(value.to_owned()),
                        _ => {}
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive
                }
                return Some(Message {
                    event,
                    id,
                    data: serde_json::from_str(&data.join("\n")).unwrap(),
                });
            }
            let chunk = self.body.next().await?.unwrap();
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Every message up to and including `end`; asserts the stream closes after it.
    async fn rest(mut self) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(m) = self.next().await {
            let end = m.event == "end";
            out.push(m);
            if end {
                assert!(self.next().await.is_none(), "nothing may follow `end`");
                return out;
            }
        }
        panic!("the stream closed without `end`: {out:?}");
    }
}

async fn call(
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = ufo_testkit::http_client()
        .request(method, format!("{base}{path}"))
        .bearer_auth(KEY);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn submit(base: &str, request: &str) -> String {
    let (status, task) = call(
        base,
        reqwest::Method::POST,
        "/v1/tasks",
        Some(json!({"request": request})),
    )
    .await;
    assert_eq!(status, 202, "{task}");
    task["id"].as_str().unwrap().to_owned()
}

async fn wait_status(base: &str, id: &str, status: &str) -> Value {
    eventually(60, &format!("task {id} {status}"), || async {
        let (_, task) = call(base, reqwest::Method::GET, &format!("/v1/tasks/{id}"), None).await;
        (task["status"] == status).then_some(task)
    })
    .await
}

async fn approve(base: &str, id: &str) {
    let (_, task) = call(base, reqwest::Method::GET, &format!("/v1/tasks/{id}"), None).await;
    let (status, body) = call(
        base,
        reqwest::Method::POST,
        &format!("/v1/tasks/{id}/confirmation"),
        Some(json!({"approve": true, "action_id": task["held_action"]["id"]})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

fn seqs(messages: &[Message]) -> Vec<u64> {
    messages.iter().filter_map(|m| m.id).collect()
}

async fn start(session: &Session) -> Agent {
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    Agent::start(agent_config(&session.url, RUNNER_FLAGS), Some(driver)).await
}

#[tokio::test]
async fn sse_resumes_with_last_event_id_without_gap_or_duplicate_and_matches_stream_steps() {
    let session = Session::start().await;
    let agent = start(&session).await;
    let base = agent.http.clone();
    let id = submit(&base, "steps=4 hold=2").await;

    // First connection: read live until the action is held, then drop the connection.
    let mut first = Reader::open(&base, &id, None, "").await;
    let mut seen = Vec::new();
    loop {
        let m = first.next().await.expect("stream open while the task runs");
        assert_eq!(
            m.id,
            Some(m.data["seq"].as_u64().unwrap()),
            "id: is the seq"
        );
        assert_eq!(m.event, m.data["kind"]);
        let held = m.event == "action_held";
        seen.push(m);
        if held {
            break;
        }
    }
    drop(first);
    wait_status(&base, &id, "waiting").await;
    // What happens while no client is connected must arrive on the reconnect.
    approve(&base, &id).await;
    let last = seen.last().unwrap().id.unwrap();
    let rest = Reader::open(&base, &id, Some(last), "?from_seq=1")
        .await
        .rest()
        .await;
    let end = rest.last().unwrap();
    assert_eq!(end.event, "end");
    assert_eq!(end.data["status"], "finished");

    let mut all = seqs(&seen);
    all.extend(seqs(&rest));
    let expected: Vec<u64> = (1..=end.data["last_seq"].as_u64().unwrap()).collect();
    assert_eq!(
        all, expected,
        "no gap and no duplicate across the reconnect"
    );
    assert!(rest.iter().any(|m| m.event == "action_approved"));
    assert!(rest.iter().any(|m| m.event == "task_finished"));

    // The same events as gRPC StreamSteps, in the same order.
    let mut client = AgentServiceClient::connect(agent.grpc.clone())
        .await
        .unwrap();
    let mut req = tonic::Request::new(StreamStepsRequest {
        task_id: id.clone(),
        from_seq: 1,
    });
    req.metadata_mut()
        .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    let grpc: Vec<(u64, u64, u32)> = client
        .stream_steps(req)
        .await
        .unwrap()
        .into_inner()
        .map(|e| {
            let e = e.unwrap();
            (e.seq, e.step, e.round)
        })
        .collect()
        .await;
    let sse: Vec<(u64, u64, u32)> = seen
        .iter()
        .chain(rest.iter())
        .filter(|m| m.id.is_some())
        .map(|m| {
            (
                m.id.unwrap(),
                m.data["step"].as_u64().unwrap(),
                u32::try_from(m.data["round"].as_u64().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(sse, grpc);

    // A finished task replays from from_seq and ends; resuming after its last event gets just `end`.
    let tail = Reader::open(&base, &id, None, "?from_seq=3")
        .await
        .rest()
        .await;
    assert_eq!(seqs(&tail), expected[2..].to_vec());
    let none = Reader::open(&base, &id, Some(*expected.last().unwrap()), "")
        .await
        .rest()
        .await;
    assert_eq!(none.len(), 1);
    assert_eq!(none[0].event, "end");

    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn sse_refuses_bad_input_and_unknown_tasks() {
    let session = Session::start().await;
    let agent = start(&session).await;
    let base = agent.http.clone();
    let id = submit(&base, "steps=1").await;
    let get = |path: String, last: Option<&'static str>, auth: bool| {
        let base = base.clone();
        async move {
            let mut req = ufo_testkit::http_client().get(format!("{base}{path}"));
            if auth {
                req = req.bearer_auth(KEY);
            }
            if let Some(l) = last {
                req = req.header("Last-Event-ID", l);
            }
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, _) = get(format!("/v1/tasks/{id}/events"), None, false).await;
    assert_eq!(status, 401);
    let (status, body) = get(
        "/v1/tasks/0195f8a0-0000-7000-8000-000000000000/events".into(),
        None,
        true,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get(format!("/v1/tasks/{id}/events?from_seq=0"), None, true).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_argument");
    let (status, body) = get(format!("/v1/tasks/{id}/events"), Some("abc"), true).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().unwrap().contains("Last-Event-ID"));
    let (status, _) = get("/v1/tasks/nope/events".into(), None, true).await;
    assert_eq!(status, 400);

    // Documented in the OpenAPI document as an event stream.
    let (_, doc) = get("/openapi.json".into(), None, false).await;
    let op = &doc["paths"]["/v1/tasks/{id}/events"]["get"];
    assert!(
        op["responses"]["200"]["content"]["text/event-stream"].is_object(),
        "{op}"
    );
    assert!(
        op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "Last-Event-ID" && p["in"] == "header")
    );
    agent.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn a_hundred_sse_clients_on_one_task_all_receive_every_event() {
    let session = Session::start().await;
    let agent = start(&session).await;
    let base = agent.http.clone();
    // Held at its first step: every client connects while the task is live, then it runs to the end.
    let id = submit(&base, "steps=5 hold=1").await;
    wait_status(&base, &id, "waiting").await;
    let started = std::time::Instant::now();
    let mut readers = Vec::new();
    for _ in 0..100 {
        readers.push(Reader::open(&base, &id, None, "").await);
    }
    let clients: Vec<_> = readers
        .into_iter()
        .map(|r| tokio::spawn(r.rest()))
        .collect();
    let connected = started.elapsed();
    approve(&base, &id).await;
    let task = wait_status(&base, &id, "finished").await;
    let last = task["last_seq"].as_u64().unwrap();
    let expected: Vec<u64> = (1..=last).collect();
    for client in clients {
        let messages = client.await.unwrap();
        assert_eq!(seqs(&messages), expected);
        assert_eq!(messages.last().unwrap().event, "end");
    }
    eprintln!(
        "100 SSE clients: connected in {connected:?}, all {last} events and `end` received by all {:?} after",
        started.elapsed() - connected
    );
    agent.stop().await;
    session.stop().await;
}
