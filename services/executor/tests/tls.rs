//! TLS on the executor's gRPC server, over real sockets: a CA and a server certificate generated here,
//! a TLS client trusting the CA calls ListTools with the token, a plaintext client cannot; unusable
//! certificates and a refused start are reported before anything listens.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use ufo_executor::backend::Backend;
use ufo_executor::testing::Desktop;
use ufo_proto::v1::ListToolsRequest;
use ufo_proto::v1::executor_client::ExecutorClient;

/// A CA and a `localhost` server certificate it signed, as PEM: (ca, server cert, server key).
fn certificates() -> (String, String, String) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ufo test ca");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

/// The call failed in the transport (connection or handshake), not with a status from the server.
fn is_transport_error(err: &tonic::Status) -> bool {
    std::error::Error::source(err)
        .is_some_and(|s| s.downcast_ref::<tonic::transport::Error>().is_some())
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_with_the_ca_and_token_is_served_plaintext_is_not() {
    let desk = Desktop::start(640, 480).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates();

    // A key that does not parse is refused before serving, naming the problem.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut bad = ufo_executor::Config::for_tests(listener.local_addr().unwrap(), Some("s3cret"));
    bad.tls_cert = Some(write(dir.path(), "cert.pem", &cert));
    bad.tls_key = Some(write(dir.path(), "bad-key.pem", "not a key"));
    let err = ufo_executor::run_with_backend(
        bad,
        backend.clone(),
        listener,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ufo_executor::RunError::Tls(_)), "{err:?}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ufo_executor::Config::for_tests(addr, Some("s3cret"));
    config.tls_cert = Some(write(dir.path(), "cert.pem", &cert));
    config.tls_key = Some(write(dir.path(), "key.pem", &key));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend,
        listener,
        shutdown.clone(),
    ));

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_lazy();
    let ctx = ufo_common::grpc::ClientContext::new(Some("s3cret")).unwrap();
    let mut client = ExecutorClient::with_interceptor(channel, ctx);
    // The server task is already accepting (the listener was bound before spawning), but the TLS
    // acceptor starts with the task: retry while the connection is refused, up to a deadline.
    let end = Instant::now() + Duration::from_secs(10);
    let tools = loop {
        match client.list_tools(ListToolsRequest {}).await {
            Err(e) if e.code() == tonic::Code::Unavailable && Instant::now() < end => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => break other.unwrap().into_inner().tools,
        }
    };
    assert_eq!(
        tools.len(),
        25,
        "the 20 GUI tools, run_command and the 4 process tools"
    );

    // Over TLS without the token: rejected by the bearer check.
    let channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect_lazy();
    let err = ExecutorClient::new(channel)
        .list_tools(ListToolsRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // Plaintext HTTP/2 to the TLS port never reaches the service, token or not.
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    let ctx = ufo_common::grpc::ClientContext::new(Some("s3cret")).unwrap();
    let err = ExecutorClient::with_interceptor(channel, ctx)
        .list_tools(ListToolsRequest {})
        .await
        .unwrap_err();
    // The server drops the connection at the TLS layer: a transport error (broken pipe or closed
    // connection, depending on timing), never a gRPC answer.
    assert!(is_transport_error(&err), "{err:?}");

    // A client that does not trust the CA fails the handshake.
    let channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(ClientTlsConfig::new().domain_name("localhost"))
        .unwrap()
        .connect_lazy();
    let ctx = ufo_common::grpc::ClientContext::new(Some("s3cret")).unwrap();
    let err = ExecutorClient::with_interceptor(channel, ctx)
        .list_tools(ListToolsRequest {})
        .await
        .unwrap_err();
    assert!(is_transport_error(&err), "{err:?}");

    shutdown.cancel();
    server.await.unwrap().unwrap();
    drop(desk);
}

/// `--insecure` on a non-loopback address is refused before binding: stderr holds the error and no
/// "listening" line, and the process exits non-zero without touching the desktop.
#[tokio::test]
async fn refused_start_logs_only_the_error() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ufo-executor"))
        .args(["--listen", "0.0.0.0:0", "--insecure"])
        .env_remove("UFO_EXECUTOR_TOKEN")
        .env_remove("UFO_EXECUTOR_TLS_CERT")
        .env_remove("UFO_EXECUTOR_TLS_KEY")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("--insecure is only allowed on a loopback address"),
        "{text}"
    );
    assert!(!text.contains("listening"), "{text}");

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ufo-executor"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--token",
            "t",
            "--tls-cert",
            "x.pem",
        ])
        .env_remove("UFO_EXECUTOR_TLS_KEY")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("--tls-cert and --tls-key must be given together"),
        "{text}"
    );
    assert!(!text.contains("listening"), "{text}");
}
