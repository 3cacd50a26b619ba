//! Screens on Linux come from RandR 1.5 monitors: on a real Xvfb the backend's screens equal the
//! monitors the X server reports (read here independently with x11rb), one primary.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ufo_executor::backend::Backend;
use ufo_executor::geometry::Rect;
use ufo_executor::testing::Desktop;
use x11rb::connection::Connection as _;
use x11rb::protocol::randr::ConnectionExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screens_are_the_randr_monitors() {
    let desk = Desktop::start(1024, 640).await.unwrap();
    let backend = desk.backend().await.unwrap();

    let (conn, screen) = x11rb::connect(Some(desk.display())).unwrap();
    let root = conn.setup().roots[screen].root;
    let version = conn.randr_query_version(1, 5).unwrap().reply().unwrap();
    assert!(
        (version.major_version, version.minor_version) >= (1, 5),
        "Xvfb lacks RandR 1.5: {}.{}",
        version.major_version,
        version.minor_version
    );
    let monitors = conn
        .randr_get_monitors(root, true)
        .unwrap()
        .reply()
        .unwrap()
        .monitors;
    assert_eq!(monitors.len(), 1, "Xvfb with one -screen has one monitor");

    let screens = backend.screens().await.unwrap();
    let want: Vec<Rect> = monitors
        .iter()
        .map(|m| Rect::from_xywh(m.x.into(), m.y.into(), m.width.into(), m.height.into()))
        .collect();
    let got: Vec<Rect> = screens.iter().map(|s| s.rect).collect();
    assert_eq!(got, want);
    assert_eq!(got[0], Rect::from_xywh(0, 0, 1024, 640));
    assert_eq!(screens.iter().filter(|s| s.primary).count(), 1);
    assert!(screens.iter().all(|s| s.scale == 1.0));
}
