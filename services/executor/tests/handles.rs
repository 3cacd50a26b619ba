//! The shared handle case (tests/shared) against the Linux executor: a real Xvfb desktop with mousepad,
//! the executor served over real gRPC.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod shared;

use std::sync::Arc;

use ufo_executor::backend::Backend;
use ufo_executor::testing::Desktop;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_ids_survive_tree_walks_and_relisting() {
    let mut desk = Desktop::start(1280, 800).await.unwrap();
    let backend = Arc::new(desk.backend().await.unwrap());
    let (_pid, pad) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let dynb: Arc<dyn Backend> = backend;
    let server = tokio::spawn(ufo_executor::run_with_backend(
        ufo_executor::Config::for_tests(addr, Some("t0ken")),
        dynb,
        listener,
        shutdown.clone(),
    ));
    let mut remote = shared::Remote::connect(&format!("http://{addr}"), Some("t0ken"));
    shared::handles_survive(&mut remote, |w| {
        w["handle"] == serde_json::json!(pad.handle)
    })
    .await;
    shutdown.cancel();
    server.await.unwrap().unwrap();
}
