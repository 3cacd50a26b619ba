//! Test helpers on the private desktop ([`crate::desktop::Desktop`]) for this crate's and the end-to-end
//! tests and benchmarks: a backend bound to it, and applications started on it and waited for until
//! their accessible tree is readable.

#![allow(clippy::missing_errors_doc)]

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::backend::linux::LinuxBackend;
use crate::backend::{Backend, TreeLimits, WindowInfo};
pub use crate::desktop::Desktop;

impl Desktop {
    /// A backend connected to this desktop.
    pub async fn backend(&self) -> anyhow::Result<LinuxBackend> {
        Ok(LinuxBackend::connect_to(Some(&self.display), Some(&self.bus_address)).await?)
    }

    /// Starts `program` on this desktop and waits until its window is listed and its controls are
    /// readable through AT-SPI; returns its pid and window.
    pub async fn launch(
        &mut self,
        backend: &dyn Backend,
        program: &str,
        args: &[&str],
    ) -> anyhow::Result<(u32, WindowInfo)> {
        let pid = self.spawn_application(program, args)?;
        let window = self.wait_window(backend, pid).await?;
        Ok((pid, window))
    }

    /// Starts `program` on this desktop, stopped with it; returns its pid.
    fn spawn_application(&mut self, program: &str, args: &[&str]) -> anyhow::Result<u32> {
        let child = self
            .command(program)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let pid = child.id();
        self.children.push(("application", child));
        Ok(pid)
    }

    /// Starts `program`, whose window has no accessible tree (a Tk window), and waits until a window
    /// titled `title` is listed; returns its pid and window.
    pub async fn launch_plain(
        &mut self,
        backend: &dyn Backend,
        program: &str,
        args: &[&str],
        title: &str,
    ) -> anyhow::Result<(u32, WindowInfo)> {
        let pid = self.spawn_application(program, args)?;
        let window = crate::desktop::poll("a plain window", || async move {
            backend
                .windows()
                .await
                .ok()?
                .into_iter()
                .find(|w| w.title == title)
        })
        .await?;
        Ok((pid, window))
    }

    /// The busy windows of issue 37 (`tests/busy_window.py`), at the right of a 1920-pixel-wide screen:
    /// another program typing into its own GTK text view (a character, an accessibility event and its
    /// drawing every `writer_ms`), a caret blinking every 530 ms and a clock redrawn every second.
    /// Returns their windows (needs python3-tk and python3-gi).
    pub async fn launch_busy_windows(
        &mut self,
        backend: &dyn Backend,
        writer_ms: u32,
    ) -> anyhow::Result<Vec<WindowInfo>> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/busy_window.py");
        let period = writer_ms.to_string();
        let mut out = Vec::new();
        for (mode, title, geometry, ms) in [
            (
                "writer",
                "busy writer",
                ["1480", "40", "400", "300"],
                period.as_str(),
            ),
            ("blink", "busy caret", ["1480", "400", "400", "60"], "530"),
            ("clock", "busy clock", ["1480", "520", "400", "40"], "1000"),
        ] {
            let mut args = vec![script, mode, title];
            args.extend(geometry);
            args.push(ms);
            let (_pid, w) = self
                .launch_plain(backend, "/usr/bin/python3", &args, title)
                .await
                .with_context(|| format!("{title} (python3-tk, python3-gi)"))?;
            out.push(w);
        }
        Ok(out)
    }

    /// Waits until process `pid` has a titled top-level window whose accessible tree can be read.
    pub async fn wait_window(&self, backend: &dyn Backend, pid: u32) -> anyhow::Result<WindowInfo> {
        let window = crate::desktop::poll("the application window", || async move {
            let w = backend
                .windows()
                .await
                .ok()?
                .into_iter()
                .find(|w| w.pid == Some(pid) && !w.title.is_empty())?;
            let limits = TreeLimits {
                max_nodes: 10_000,
                max_depth: 64,
                deadline: Instant::now() + Duration::from_secs(5),
                max_value_chars: 0,
                bounds_of: None,
            };
            match backend.control_tree(&w, &limits).await {
                Ok(tree) => (tree.nodes.len() > 1).then_some(w),
                Err(e) => {
                    tracing::debug!(error = %e, pid, "application not readable yet");
                    None
                }
            }
        })
        .await?;
        Ok(window)
    }
}

/// Driving an [`Executor`](crate::executor::Executor) the way the tests do: one command at a time under
/// the test's batch options.
pub mod drive {
    #![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use crate::executor::{BatchOptions, CommandSpec, Executor, Outcome, Status};

    /// The command `tool(params)`, its call id the tool name.
    pub fn cmd(tool: &str, params: Value) -> CommandSpec {
        CommandSpec {
            tool: tool.into(),
            params,
            call_id: tool.into(),
        }
    }

    /// `tool(params)` alone in a batch; its outcome, whatever it is.
    pub async fn one(exec: &Executor, opts: BatchOptions, tool: &str, params: Value) -> Outcome {
        exec.execute(vec![cmd(tool, params)], opts).await.remove(0)
    }

    /// `tool(params)` alone in a batch, which must succeed (the test fails naming it otherwise).
    pub async fn ok(exec: &Executor, opts: BatchOptions, tool: &str, params: Value) -> Outcome {
        let o = one(exec, opts, tool, params.clone()).await;
        assert_eq!(o.status, Status::Success, "{tool} {params}: {}", o.error);
        o
    }

    /// The selected window's controls (`get_app_window_controls_target_info`).
    pub async fn controls(exec: &Executor, opts: BatchOptions) -> Value {
        ok(exec, opts, "get_app_window_controls_target_info", json!({}))
            .await
            .output
            .result
    }

    /// Selects the listed window whose handle is `handle`.
    pub async fn select(exec: &Executor, opts: BatchOptions, handle: u64) {
        let apps = ok(exec, opts, "get_desktop_app_target_info", json!({}))
            .await
            .output
            .result;
        let id = apps
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["handle"] == json!(handle))
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .expect("window listed");
        ok(exec, opts, "select_application_window", json!({"id": id})).await;
    }

    /// The id of the first control of a `get_app_window_controls_target_info` result matching `pred`.
    pub fn id_where(controls: &Value, pred: impl Fn(&Value) -> bool) -> Option<String> {
        controls
            .as_array()?
            .iter()
            .find(|c| pred(c))
            .map(|c| c["id"].as_str().unwrap().to_owned())
    }

    /// Waits up to 10 s for `f` to hold, asking again every 10 ms; fails naming `what`.
    pub async fn until<F, Fut>(what: &str, mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let end = Instant::now() + Duration::from_secs(10);
        while !f().await {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
