//! The session service against malformed input and a lost database, over real gRPC on Postgres.
//!
//! The sweep is generated from the descriptor set (`ufo_testkit::malformed`): every unary-request RPC of
//! `ufo.v1.SessionStore`, NUL in each string and JSON field, deep JSON, random and corrupted bytes,
//! truncated, missing and oversized messages. Nothing may come back INTERNAL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;

use std::sync::Arc;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use ufo_proto::v1::{CreateSessionRequest, GetSessionRequest};
use ufo_session::Config;
use ufo_session::store::{Store, postgres};
use ufo_testkit::malformed::{Expect, Sweep, call, client};

const SECS_10: std::time::Duration = std::time::Duration::from_secs(10);
const TICK: std::time::Duration = std::time::Duration::from_millis(20);
const MAX_MESSAGE_BYTES: u32 = 256 * 1024;

/// Serves the test's database on the test's pool.
async fn serve(pool: &PgPool) -> (String, CancellationToken) {
    let mut config = Config::defaults();
    config.auth_token = None;
    config.max_message_bytes = MAX_MESSAGE_BYTES;
    let store: Arc<dyn Store> = Arc::new(
        postgres::from_pool(pool.clone(), postgres::StepBatching::default())
            .await
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { ufo_session::serve(store, &config, listener, token).await });
    let probe = url.clone();
    ufo_testkit::poll_until("session service serving", SECS_10, TICK, || {
        let url = probe.clone();
        async move { ufo_testkit::grpc_serving(&url).await }
    })
    .await
    .unwrap();
    (url, shutdown)
}

#[sqlx::test(migrations = "../../migrations")]
async fn no_malformed_request_is_internal(pool: PgPool) {
    let (url, shutdown) = serve(&pool).await;
    let sweep = Sweep::new(ufo_proto::FILE_DESCRIPTOR_SET).unwrap();
    let methods = sweep.methods("ufo.v1.SessionStore");
    assert!(methods.len() >= 20, "{} methods", methods.len());
    let http = client().unwrap();
    let mut failures = Vec::new();
    let (mut calls, mut nul_fields) = (0, 0);
    for (i, method) in methods.iter().enumerate() {
        let variants = sweep.variants(&method.input, 32, MAX_MESSAGE_BYTES as usize, i as u64 + 7);
        for variant in variants {
            calls += 1;
            let status = call(&http, &url, &method.path, variant.body, None)
                .await
                .unwrap();
            let ok = match &variant.expect {
                Expect::InvalidNaming(field) => {
                    nul_fields += 1;
                    status.code() == Code::InvalidArgument
                        && ufo_testkit::malformed::names_field(status.message(), field)
                }
                Expect::Invalid => status.code() == Code::InvalidArgument,
                Expect::NotInternal => !matches!(status.code(), Code::Internal | Code::Unknown),
            };
            if !ok {
                failures.push(format!(
                    "{} {}: {:?} {:?}",
                    method.path,
                    variant.name,
                    status.code(),
                    status.message()
                ));
            }
        }
    }
    shutdown.cancel();
    println!(
        "{calls} calls over {} RPCs, {nul_fields} field-naming variants",
        methods.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {calls} calls:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A TCP proxy to Postgres that the test can take down (every connection cut, the port closed) and
/// bring back on the same port: the service sees what a Postgres restart or a network cut looks like.
struct Proxy {
    port: u16,
    upstream: String,
    down: CancellationToken,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = CancellationToken::new();
        tokio::spawn(Self::serve(listener, upstream.clone(), down.clone()));
        Self {
            port,
            upstream,
            down,
        }
    }

    async fn serve(listener: TcpListener, upstream: String, down: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                () = down.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((mut client, _)) = accepted else {
                return;
            };
            let upstream = upstream.clone();
            let down = down.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                tokio::select! {
                    () = down.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                }
            });
        }
    }

    fn stop(&mut self) {
        self.down.cancel();
    }

    async fn restart(&mut self) {
        self.down = CancellationToken::new();
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        tokio::spawn(Self::serve(
            listener,
            self.upstream.clone(),
            self.down.clone(),
        ));
    }
}

/// Postgres going away (every connection cut, new ones refused, as in a restart) is UNAVAILABLE, never
/// INTERNAL, and the service recovers by itself when it is back.
#[sqlx::test(migrations = "../../migrations")]
async fn database_connection_loss_is_unavailable(pool: PgPool) {
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let admin = reqwest::Url::parse(&std::env::var("DATABASE_URL").unwrap()).unwrap();
    let upstream = format!(
        "{}:{}",
        admin.host_str().unwrap(),
        admin.port().unwrap_or(5432)
    );
    let mut proxy = Proxy::start(upstream).await;
    let mut url = admin.clone();
    url.set_port(Some(proxy.port)).unwrap();
    url.set_path(&format!("/{database}"));

    let mut config = Config::defaults();
    config.auth_token = None;
    config.database_url = Some(url.to_string());
    config.db_acquire_timeout_ms = 500;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(ufo_session::run(config, listener, shutdown.clone()));
    let probe = service.clone();
    ufo_testkit::poll_until("session service serving", SECS_10, TICK, || {
        let url = probe.clone();
        async move { ufo_testkit::grpc_serving(&url).await }
    })
    .await
    .unwrap();
    let mut client = client::connect(&service, None).await;
    let session = client
        .create_session(CreateSessionRequest {
            request: "connection loss".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let get = GetSessionRequest {
        session_id: session.id.clone(),
    };
    client.get_session(get.clone()).await.unwrap();

    proxy.stop();
    let err = client.get_session(get.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let err = client
        .create_session(CreateSessionRequest {
            request: "while down".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");

    proxy.restart().await;
    ufo_testkit::poll_until("the session service recovers", SECS_10, TICK, || {
        let mut client = client.clone();
        let get = get.clone();
        async move {
            match client.get_session(get).await {
                Ok(_) => Ok(Some(())),
                Err(e) if e.code() == Code::Unavailable => Ok(None),
                Err(e) => Err(format!("{e:?}")),
            }
        }
    })
    .await
    .unwrap();
    shutdown.cancel();
}
