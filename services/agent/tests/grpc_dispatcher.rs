//! The gRPC command dispatcher over a real socket: commands become `ufo.v1.Command`s with `Struct`
//! parameters, results come back with status, JSON result, image bytes and transform; the bearer token
//! travels in metadata; a whole task runs through it. The server here is a thin tonic adapter over the
//! in-process executor double (the real Linux executor is another issue's).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use ufo_agent::agents::AgentSettings;
use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher, ResultStatus, ToolType};
use ufo_agent::round::{Arrived, RoundEnd};
use ufo_agent::testing::{FakeDesktop, ScriptedLlm};
use ufo_proto::v1;

struct Adapter(Arc<FakeDesktop>);

#[tonic::async_trait]
impl ufo_testkit::executor::TestExecutor for Adapter {
    async fn execute(
        &self,
        request: Request<v1::ExecuteRequest>,
    ) -> Result<Response<v1::ExecuteResponse>, Status> {
        if request
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap())
            != Some("Bearer tok")
        {
            return Err(Status::unauthenticated("missing bearer token"));
        }
        let commands = request
            .into_inner()
            .commands
            .into_iter()
            .map(|c| Command {
                tool_name: c.tool_name,
                parameters: ufo_proto::json::struct_to_map(c.parameters.unwrap_or_default()),
                tool_type: ToolType::from_wire(c.tool_type),
                call_id: c.call_id,
            })
            .collect();
        let results = self.0.execute(commands).await.unwrap();
        Ok(Response::new(v1::ExecuteResponse {
            results: results
                .into_iter()
                .map(|r| v1::Result {
                    status: match r.status {
                        ResultStatus::Success => v1::ResultStatus::Success,
                        ResultStatus::Failure => v1::ResultStatus::Failure,
                        ResultStatus::Skipped => v1::ResultStatus::Skipped,
                        ResultStatus::None => v1::ResultStatus::None,
                    } as i32,
                    error: r.error,
                    result: Some(ufo_proto::json::to_value(r.result)),
                    call_id: r.call_id,
                    duration_us: 1,
                    settle: None,
                    effect: None,
                    images: r
                        .images
                        .into_iter()
                        .map(|i| v1::Image {
                            format: v1::ImageFormat::Png as i32,
                            data: i.bytes.clone(),
                            width: i.width,
                            height: i.height,
                            transform: Some(v1::ScreenTransform {
                                origin_x: i.origin_x,
                                origin_y: i.origin_y,
                                scale: i.scale,
                            }),
                        })
                        .collect(),
                    warnings: vec![],
                })
                .collect(),
        }))
    }
    async fn list_tools(
        &self,
        _r: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        let tools = FakeDesktop::proto_tools();
        Ok(Response::new(v1::ListToolsResponse { tools }))
    }

    async fn get_capabilities(
        &self,
        _r: Request<v1::GetCapabilitiesRequest>,
    ) -> Result<Response<v1::Capabilities>, Status> {
        let allowed = self.0.allowed_applications();
        Ok(Response::new(v1::Capabilities {
            allowed_applications: allowed,
            ..v1::Capabilities::default()
        }))
    }
}

/// Serves the adapter on a loopback port, over TLS with `tls` when given; returns the port.
async fn serve_on(
    desktop: Arc<FakeDesktop>,
    tls: Option<tonic::transport::Identity>,
) -> (u16, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let mut server = tonic::transport::Server::builder();
    if let Some(identity) = tls {
        server = server
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .unwrap();
    }
    tokio::spawn(async move {
        server
            .add_service(ufo_testkit::executor::server(Adapter(desktop)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                token.cancelled_owned(),
            )
            .await
            .unwrap();
    });
    (port, stop)
}

async fn serve(desktop: Arc<FakeDesktop>) -> (String, CancellationToken) {
    let (port, stop) = serve_on(desktop, None).await;
    (format!("http://127.0.0.1:{port}"), stop)
}

#[tokio::test]
async fn commands_and_results_cross_the_wire_intact() {
    let desktop = Arc::new(desktop());
    let (addr, _stop) = serve(desktop.clone()).await;
    let grpc = GrpcDispatcher::connect_lazy(&addr, Some("tok"), 5_000, 16 << 20, None).unwrap();
    let results = grpc
        .execute(vec![
            Command::act(
                "select_application_window",
                json!({"id": "w2", "name": "Sheet"}),
            ),
            Command::observe("capture_window_screenshot", json!({})),
            Command::act("click_input", json!({"id": "s2"})),
            Command::act("click_input", json!({"id": "s3"})),
        ])
        .await
        .unwrap();
    let statuses: Vec<_> = results.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            ResultStatus::Success,
            ResultStatus::Success,
            ResultStatus::Failure,
            ResultStatus::Skipped
        ]
    );
    assert_eq!(results[0].result, json!({"root_name": "sheet"}));
    let shot = &results[1].images[0];
    assert_eq!(
        (shot.width, shot.height, shot.origin_x, shot.origin_y),
        (400, 300, 400, 0)
    );
    assert!(shot.decode().is_ok());
    assert_eq!(desktop.log()[0].parameters["name"], "Sheet");

    let anonymous = GrpcDispatcher::connect_lazy(&addr, None, 5_000, 16 << 20, None).unwrap();
    let err = anonymous
        .execute(vec![Command::observe("get_app_window_info", json!({}))])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Unauthenticated"), "{err}");
}

#[tokio::test]
async fn an_https_executor_is_verified_against_the_configured_ca() {
    let desktop = Arc::new(desktop());
    let (ca, cert, key) = certificates();
    // The test's TLS server needs the process's crypto provider named (the client installs it too).
    ufo_common::tls::install_crypto_provider();
    let (port, stop) = serve_on(
        desktop,
        Some(tonic::transport::Identity::from_pem(cert, key)),
    )
    .await;
    let addr = format!("https://localhost:{port}");
    let probe = || vec![Command::observe("get_app_window_info", json!({}))];

    let trusted =
        GrpcDispatcher::connect_lazy(&addr, Some("tok"), 5_000, 16 << 20, Some(ca.as_bytes()))
            .unwrap();
    let results = trusted.execute(probe()).await.unwrap();
    assert_eq!(results.len(), 1);

    // The public roots do not know this CA, nor does another CA: the handshake fails, nothing runs.
    let (other_ca, _, _) = certificates();
    for ca_pem in [None, Some(other_ca.as_bytes())] {
        let untrusted =
            GrpcDispatcher::connect_lazy(&addr, Some("tok"), 5_000, 16 << 20, ca_pem).unwrap();
        let err = untrusted.execute(probe()).await.unwrap_err();
        assert!(
            !err.to_string().contains("Unauthenticated"),
            "a transport error, not a served call: {err}"
        );
    }
    // A plaintext client cannot talk to it either.
    let plain = GrpcDispatcher::connect_lazy(
        &format!("http://localhost:{port}"),
        Some("tok"),
        5_000,
        16 << 20,
        None,
    )
    .unwrap();
    assert!(plain.execute(probe()).await.is_err());
    stop.cancel();
}

#[tokio::test]
async fn a_task_runs_through_the_grpc_dispatcher() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let (addr, _stop) = serve(desktop.clone()).await;
    let grpc =
        Arc::new(GrpcDispatcher::connect_lazy(&addr, Some("tok"), 5_000, 16 << 20, None).unwrap());
    let mut round = ufo_agent::round::Round::new(
        "s-2",
        1,
        "type 7 in the sheet",
        0,
        ufo_agent::agents::HostAgent::new(services(&llm, AgentSettings::default())),
        Default::default(),
        vec![],
        grpc,
    )
    .unwrap();
    llm.push_json(&assign("1", "type 7"));
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!({"function": "set_edit_text", "arguments": {"id": id("Cell"), "text": "7"}}),
            "typed",
        )
    }));
    llm.push_json(&host("FINISH", json!({"result": "7 typed"})));
    let hooks = Arrived::default();
    while round.next_step(&hooks).await.is_some() {}
    assert_eq!(round.end(), Some(&RoundEnd::Finished("7 typed".into())));
    assert_eq!(desktop.text_of("sheet", "Cell").as_deref(), Some("7"));
}

/// Serves the adapter on `listener` until `stop`; the returned handle ends when the server has stopped.
fn serve_listener(
    desktop: Arc<FakeDesktop>,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ufo_testkit::executor::server(Adapter(desktop)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                stop.cancelled_owned(),
            )
            .await
            .unwrap();
    })
}

#[tokio::test]
async fn the_tool_catalog_is_cached_and_fetched_again_after_the_executor_comes_back() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let first = Arc::new(desktop());
    let stop = CancellationToken::new();
    let server = serve_listener(first.clone(), listener, stop.clone());
    let grpc = GrpcDispatcher::connect_lazy(
        &format!("http://{addr}"),
        Some("tok"),
        5_000,
        16 << 20,
        None,
    )
    .unwrap();
    let catalog = grpc.catalog().await.unwrap();
    assert!(catalog.allowed_applications.is_empty());
    assert_eq!(
        catalog.names(),
        FakeDesktop::tool_specs()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
    );
    // The executor restarts with another allow-list. Until a call fails, the cached catalog is used.
    stop.cancel();
    server.await.unwrap();
    let probe = || vec![Command::observe("get_desktop_app_target_info", json!({}))];
    let err = grpc.execute(probe()).await.unwrap_err();
    assert!(err.to_string().contains("Unavailable"), "{err}");
    let second = Arc::new(desktop());
    second.add_launchable(ufo_agent::testing::FakeWindow {
        id: "w9".into(),
        name: "Calc".into(),
        process: "calc".into(),
        rect: ufo_agent::agents::target::Rect::new(0, 0, 10, 10),
        controls: vec![],
    });
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let stop = CancellationToken::new();
    let server = serve_listener(second, listener, stop.clone());
    assert_eq!(grpc.catalog().await.unwrap().allowed_applications, ["calc"]);
    stop.cancel();
    server.await.unwrap();
}

/// Serves the adapter on `listener` until stopped; the handle ends once the port is released.
fn serve_stoppable(
    desktop: Arc<FakeDesktop>,
    listener: tokio::net::TcpListener,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let token = stop.clone();
    let handle = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ufo_testkit::executor::server(Adapter(desktop)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                token.cancelled_owned(),
            )
            .await
            .unwrap();
    });
    (stop, handle)
}

/// A listener on `port` that accepts connections and drops them at once (an executor that is up at
/// the TCP level but not serving: UNAVAILABLE after connecting). Reports each accept on the channel.
async fn dropping_listener(
    port: u16,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
            let _ = tx.send(());
        }
    });
    (handle, rx)
}

fn retrying_client(port: u16, budget_ms: u64) -> GrpcDispatcher {
    GrpcDispatcher::connect_lazy(
        &format!("http://127.0.0.1:{port}"),
        Some("tok"),
        5_000,
        16 << 20,
        None,
    )
    .unwrap()
    .with_retry_budget(std::time::Duration::from_millis(budget_ms))
}

#[tokio::test]
async fn an_observation_is_retried_until_the_restarted_executor_answers() {
    let desktop = Arc::new(desktop());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, handle) = serve_stoppable(desktop.clone(), listener);
    let grpc = Arc::new(retrying_client(port, 20_000));
    let probe = || vec![Command::observe("get_app_window_info", json!({}))];
    let first = grpc.execute(probe()).await.unwrap();
    let before = desktop.log().len();

    // The executor goes down; while it is down the port accepts and drops connections, so the test
    // can see the client's attempts instead of guessing their timing.
    stop.cancel();
    handle.await.unwrap();
    let (down, mut attempts) = dropping_listener(port).await;
    let call = tokio::spawn({
        let grpc = grpc.clone();
        async move { grpc.execute(probe()).await }
    });
    // One attempt failed while it was down; the call can only succeed below by trying again.
    attempts.recv().await.unwrap();
    down.abort();
    let _ = down.await;
    // Back on the same port: the pending call goes through.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (stop, _handle) = serve_stoppable(desktop.clone(), listener);
    // The restarted executor answered the pending call as the first one did.
    let results = call.await.unwrap().unwrap();
    assert_eq!(results, first);
    assert_eq!(desktop.log().len(), before + 1);
    stop.cancel();
}

#[tokio::test]
async fn an_action_is_not_retried_once_a_connection_was_made() {
    let desktop = Arc::new(desktop());
    let port = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let (down, mut attempts) = dropping_listener(port).await;
    let grpc = retrying_client(port, 20_000);
    let started = std::time::Instant::now();
    let err = grpc
        .execute(vec![Command::act("click_input", json!({"id": "s2"}))])
        .await
        .unwrap_err();
    // It may have reached the executor: failed at once, not after the budget.
    assert!(
        matches!(err, ufo_agent::dispatch::DispatchError::Rpc { .. }),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    attempts.recv().await.unwrap();
    assert!(attempts.try_recv().is_err(), "the action was sent again");
    down.abort();
    assert!(desktop.log().is_empty());
}

#[tokio::test]
async fn an_executor_that_stays_down_fails_after_the_budget_naming_it() {
    // A port nobody listens on: every connection is refused.
    let port = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let grpc = retrying_client(port, 1_500);
    for batch in [
        vec![Command::observe("capture_desktop_screenshot", json!({}))],
        // Refused before sending: provably not delivered, so an action is retried too.
        vec![Command::act("click_input", json!({"id": "s2"}))],
    ] {
        let started = std::time::Instant::now();
        let err = grpc.execute(batch).await.unwrap_err();
        let waited = started.elapsed();
        let text = err.to_string();
        assert!(
            matches!(err, ufo_agent::dispatch::DispatchError::Unreachable { .. }),
            "{text}"
        );
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(text.contains("connection refused"), "{text}");
        assert!(!text.contains("http://"), "{text}");
        assert!(
            waited >= std::time::Duration::from_millis(1_500),
            "{waited:?}"
        );
        assert!(waited < std::time::Duration::from_secs(6), "{waited:?}");
    }
    let err = grpc.catalog().await.unwrap_err();
    assert!(
        matches!(err, ufo_agent::dispatch::DispatchError::Unreachable { .. }),
        "{err}"
    );
}
