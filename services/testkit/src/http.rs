//! HTTP clients for tests: the process's TLS provider installed first (see [`ufo_common::tls`]), so a
//! test that talks HTTP never trips reqwest's "no provider" panic.

/// A default client.
pub fn http_client() -> reqwest::Client {
    http_client_builder()
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// A builder to configure (timeouts, redirects, HTTP/2).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    ufo_common::tls::install_crypto_provider();
    reqwest::Client::builder()
}
