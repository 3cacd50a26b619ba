//! The live desktop and a person's input over gRPC (docs/live.md), on a private Xvfb desktop: the
//! first frame comes at once, a desktop where nothing draws sends no more, a window opening sends
//! frames, a person's click and typed text reach mousepad's document (read back through AT-SPI), and bad
//! input is INVALID_ARGUMENT.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tonic::Code;
use ufo_executor::backend::Backend;
use ufo_executor::encode::Format;
use ufo_executor::executor::{BatchOptions, Executor, Limits};
use ufo_executor::testing::{Desktop, drive};
use ufo_proto::v1::executor_client::ExecutorClient;
use ufo_proto::v1::takeover_input_request::Input;
use ufo_proto::v1::{
    DesktopFrame, GetCapabilitiesRequest, ImageFormat, PointerClick, TakeoverInputRequest,
    WatchDesktopRequest,
};

const OPTS: BatchOptions = BatchOptions {
    deadline: Duration::from_secs(10),
    format: Format::PNG,
};

/// How long a desktop where nothing draws must stay without a frame.
const IDLE: Duration = Duration::from_secs(2);

type Client = ExecutorClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        ufo_common::grpc::ClientContext,
    >,
>;

async fn serve(backend: Arc<dyn Backend>) -> (Client, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ufo_executor::Config::for_tests(addr, Some("s3cret"));
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(ufo_executor::run_with_backend(
        config,
        backend,
        listener,
        shutdown.clone(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let ctx = ufo_common::grpc::ClientContext::new(Some("s3cret")).unwrap();
    let mut client = ExecutorClient::with_interceptor(channel, ctx);
    loop {
        match client.get_capabilities(GetCapabilitiesRequest {}).await {
            Err(e) if e.code() == Code::Unavailable => tokio::task::yield_now().await,
            other => {
                other.unwrap();
                break;
            }
        }
    }
    (client, shutdown)
}

async fn next(
    frames: &mut tonic::Streaming<DesktopFrame>,
    within: Duration,
) -> Option<DesktopFrame> {
    match tokio::time::timeout(within, frames.message()).await {
        Ok(m) => Some(m.unwrap().expect("the stream ended")),
        Err(_) => None,
    }
}

/// Reads frames until none came for [`IDLE`]; fails if the desktop never goes quiet.
async fn until_idle(frames: &mut tonic::Streaming<DesktopFrame>) -> Vec<DesktopFrame> {
    let mut seen = Vec::new();
    while let Some(f) = next(frames, IDLE).await {
        seen.push(f);
        assert!(seen.len() < 200, "the desktop never went quiet");
    }
    seen
}

async fn input(client: &mut Client, input: Input) -> Result<(), tonic::Status> {
    client
        .takeover_input(TakeoverInputRequest { input: Some(input) })
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_follow_changes_and_a_persons_input_reaches_mousepad() {
    let mut desk = Desktop::start(1024, 768).await.unwrap();
    let backend: Arc<dyn Backend> = Arc::new(desk.backend().await.unwrap());
    let (mut client, shutdown) = serve(backend.clone()).await;

    let mut frames = client
        .watch_desktop(WatchDesktopRequest {
            max_fps: 20,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut frames, Duration::from_secs(10))
        .await
        .expect("the first frame comes at once");
    assert_eq!(first.seq, 1);
    let image = first.image.as_ref().unwrap();
    assert_eq!(image.format, ImageFormat::Jpeg as i32);
    assert_eq!((image.width, image.height), (1024, 768));
    let decoded = image::load_from_memory(&image.data).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (1024, 768));

    // Whatever the window manager drew after start-up, the desktop goes quiet and then sends nothing.
    let settling = until_idle(&mut frames).await;
    let last_seq = settling.last().map_or(1, |f| f.seq);

    // A window opening is drawn: frames follow, each numbered on, with the changes that caused it.
    let (_pid, window) = desk
        .launch(backend.as_ref(), "mousepad", &[])
        .await
        .unwrap();
    let opened = next(&mut frames, Duration::from_secs(10))
        .await
        .expect("a frame after mousepad opened");
    assert_eq!(opened.seq, last_seq + 1);
    assert!(opened.changes > 0, "{opened:?}");

    // The person clicks into the document and types; the executor's own listing reads the text back.
    let exec = Executor::new(backend.clone(), Limits::default(), Vec::new());
    drive::select(&exec, OPTS, window.handle).await;
    let list = drive::controls(&exec, OPTS).await;
    let doc = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Document" || c["type"] == "Edit")
        .expect("mousepad's document")
        .clone();
    let r = doc["rect"].as_array().unwrap();
    let (x, y) = (
        ((r[0].as_i64().unwrap() + r[2].as_i64().unwrap()) / 2) as i32,
        ((r[1].as_i64().unwrap() + r[3].as_i64().unwrap()) / 2) as i32,
    );
    input(
        &mut client,
        Input::Click(PointerClick {
            x,
            y,
            button: String::new(),
            double: false,
        }),
    )
    .await
    .unwrap();
    let before = until_idle_or_blink(&mut frames).await;
    input(&mut client, Input::Text("typed by a person\n".into()))
        .await
        .unwrap();
    input(&mut client, Input::Keys("second line".into()))
        .await
        .unwrap();
    let id = doc["id"].as_str().unwrap().to_owned();
    drive::until("the person's text in mousepad", || {
        let exec = &exec;
        let id = id.clone();
        async move {
            let text = drive::ok(exec, OPTS, "texts", json!({"id": id}))
                .await
                .output
                .result;
            text.as_str()
                .is_some_and(|t| t.contains("typed by a person\nsecond line"))
        }
    })
    .await;
    let typing = next(&mut frames, Duration::from_secs(10))
        .await
        .expect("frames while the person types");
    assert!(typing.seq > before, "{} after {before}", typing.seq);

    // Bad input is refused before it reaches the desktop.
    let refused = [
        (
            Input::Click(PointerClick {
                x: 5000,
                y: 10,
                button: String::new(),
                double: false,
            }),
            "not on a screen",
        ),
        (
            Input::Click(PointerClick {
                x: 10,
                y: 10,
                button: "thumb".into(),
                double: false,
            }),
            "not left, right or middle",
        ),
        (Input::Text("a\u{0}b".into()), "control character"),
        (Input::Text(String::new()), "empty"),
        (
            Input::Text("x".repeat(Limits::default().max_text_bytes + 1)),
            "more than the limit",
        ),
        (Input::Keys("{NOSUCHKEY}".into()), "unknown key name"),
    ];
    for (bad, want) in refused {
        let err = input(&mut client, bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(want), "{want}: {}", err.message());
    }
    let err = client
        .takeover_input(TakeoverInputRequest { input: None })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = client
        .watch_desktop(WatchDesktopRequest {
            max_fps: 1000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("max_fps 1000"), "{}", err.message());

    // PNG frames on request.
    let mut png = client
        .watch_desktop(WatchDesktopRequest {
            image_format: ImageFormat::Png as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let f = next(&mut png, Duration::from_secs(10)).await.unwrap();
    let image = f.image.unwrap();
    assert_eq!(image.format, ImageFormat::Png as i32);
    assert!(image.data.starts_with(b"\x89PNG"));
    shutdown.cancel();
}

/// Reads frames until the screen has been quiet for a moment or only the text cursor's blink is left;
/// returns the newest frame number.
async fn until_idle_or_blink(frames: &mut tonic::Streaming<DesktopFrame>) -> u64 {
    let mut seq = 0;
    while let Some(f) = next(frames, Duration::from_millis(300)).await {
        seq = f.seq;
        if seq > 1000 {
            break;
        }
    }
    seq
}
