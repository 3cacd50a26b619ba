//! A real `ufo-executor` process on its own headless Xvfb desktop, called over gRPC as anyone holding its
//! token could (Linux).

use std::time::{Duration, Instant};

use ufo_proto::v1::ListToolsRequest;

use super::Remote;

/// The executor process; SIGTERM on drop so it tears its desktop down.
pub struct Process(pub std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: kill(2) with the pid of our own child; no memory is touched.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Starts `ufo-executor --desktop headless` with token `tok` and `args`, and waits until it answers.
pub async fn start(args: &[&str]) -> (Process, Remote) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut process = Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_ufo-executor"))
            .args(["--desktop", "headless", "--desktop-size", "800x600"])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--token", "tok"])
            .args(args)
            .env_remove("UFO_OTLP_ENDPOINT")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut remote = Remote::connect(&format!("http://127.0.0.1:{port}"), Some("tok"));
    let end = Instant::now() + Duration::from_secs(60);
    while remote.client.list_tools(ListToolsRequest {}).await.is_err() {
        assert!(
            process.0.try_wait().unwrap().is_none(),
            "ufo-executor exited before it was ready"
        );
        assert!(Instant::now() < end, "ufo-executor not ready within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (process, remote)
}

/// [`start`] with `env` set on the executor process only.
pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> (Process, Remote) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut process = Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_ufo-executor"))
            .args(["--desktop", "headless", "--desktop-size", "800x600"])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--token", "tok"])
            .args(args)
            .envs(env.iter().copied())
            .env_remove("UFO_OTLP_ENDPOINT")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut remote = Remote::connect(&format!("http://127.0.0.1:{port}"), Some("tok"));
    let end = Instant::now() + Duration::from_secs(60);
    while remote.client.list_tools(ListToolsRequest {}).await.is_err() {
        assert!(
            process.0.try_wait().unwrap().is_none(),
            "ufo-executor exited before it was ready"
        );
        assert!(Instant::now() < end, "ufo-executor not ready within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (process, remote)
}
