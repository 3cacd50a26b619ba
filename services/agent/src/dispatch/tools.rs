//! What an executor can do: its tools (`ListTools`: name, description, kind, parameter schema) and the
//! programs `launch_application` may start (`GetCapabilities`). The agents build their prompts' function
//! lists from this instead of a list compiled into the agent, so a tool the executor adds (or lacks) is
//! offered (or not) without an agent change.
//!
//! Each dispatcher fetches its executor's catalog once and caches it ([`CatalogCache`]); a transport
//! failure drops the cached copy so the catalog is fetched again after the executor comes back (it may
//! have been restarted with other tools or another allow-list).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Mutex;

use super::{DispatchError, ToolType};

/// One tool as the executor describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name commands use, e.g. `click_input`.
    pub name: String,
    /// What it does (shown to the model).
    pub description: String,
    /// Observes or acts.
    pub kind: ToolType,
    /// JSON schema of the parameters object (`Value::Null` when the executor gave none).
    pub parameters: Value,
}

/// An executor's tools and launch allow-list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutorCatalog {
    /// Every tool, in the executor's order.
    pub tools: Vec<ToolSpec>,
    /// Programs `launch_application` may start.
    pub allowed_applications: Vec<String>,
}

impl ExecutorCatalog {
    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Every tool name, in the executor's order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name.as_str()).collect()
    }
}

/// A catalog fetched once and kept until [`CatalogCache::invalidate`].
#[derive(Debug, Default)]
pub struct CatalogCache {
    slot: Mutex<Option<Arc<ExecutorCatalog>>>,
}

impl CatalogCache {
    /// The cached catalog, fetching it with `fetch` first when there is none (concurrent callers wait for
    /// the one fetch instead of each asking the executor).
    pub async fn get_or_fetch<F, Fut>(
        &self,
        fetch: F,
    ) -> Result<Arc<ExecutorCatalog>, DispatchError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<ExecutorCatalog, DispatchError>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let fresh = Arc::new(fetch().await?);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// Forgets the cached catalog (the next call fetches it again).
    pub fn invalidate(&self) {
        // A fetch in progress holds the lock and stores a fresh copy anyway.
        if let Ok(mut slot) = self.slot.try_lock() {
            *slot = None;
        }
    }
}

/// Whether an RPC failure means the connection was lost (so the executor may come back changed).
pub fn is_transport_failure(code: tonic::Code) -> bool {
    matches!(code, tonic::Code::Unavailable | tonic::Code::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn fetches_once_until_invalidated() {
        let cache = CatalogCache::default();
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(ExecutorCatalog {
                tools: vec![],
                allowed_applications: vec!["mousepad".into()],
            })
        };
        for _ in 0..3 {
            let c = cache.get_or_fetch(fetch).await.unwrap();
            assert_eq!(c.allowed_applications, ["mousepad"]);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cache.invalidate();
        cache.get_or_fetch(fetch).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let failing = || async {
            Err(DispatchError::Rpc {
                code: tonic::Code::Unavailable,
                message: "down".into(),
            })
        };
        cache.invalidate();
        assert!(cache.get_or_fetch(failing).await.is_err());
        // A failed fetch caches nothing.
        cache.get_or_fetch(fetch).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
