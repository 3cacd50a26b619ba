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
        let child = self
            .command(program)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let pid = child.id();
        self.children.push(("application", child));
        let window = self.wait_window(backend, pid).await?;
        Ok((pid, window))
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
