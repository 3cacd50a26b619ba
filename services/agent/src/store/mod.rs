//! Writing to the session store safely: what the runner's store writes share.
//!
//! - [`retry`]: store writes retried with bounded backoff on transient failures.
//! - [`sanitise`]: NUL in model text replaced before it is recorded.

pub mod blobs;
pub mod client;
pub mod knowledge;
pub mod retry;
pub mod sanitise;
pub mod web_search;
