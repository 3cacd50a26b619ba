//! The process's rustls crypto provider.
//!
//! Every TLS client and server in the workspace (tonic, reqwest, sqlx, object_store) runs on rustls with
//! ring: it cross-builds for Windows without NASM and keeps `aws-lc-sys`' C build out of the tree.
//! reqwest is built without a bundled provider (`rustls-no-provider`) and panics when it builds a client
//! in a process that installed none, so every binary calls [`install_crypto_provider`] first thing, and
//! every library function that builds a TLS client calls it too (it is idempotent and cheap). A call site
//! that was missed fails the tests that build that client, never a request in production.

use std::sync::Once;

/// Installs ring as the process-wide rustls provider, once. A provider installed before (by a test or
/// an embedding program) is kept.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // `Err` means a provider is installed already: that one stays, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_is_installed_and_a_second_call_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
