//! API keys that never reach logs.

/// An API key. `Debug` prints `<redacted>`; there is no `Display`, so it cannot be formatted by mistake.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key, for the one place that puts it into a header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ApiKey::new(s))
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let key = ApiKey::new("sk-very-secret");
        let text = format!("{key:?} {:?}", Some(&key));
        assert!(!text.contains("very-secret"), "{text}");
        assert_eq!(key.expose(), "sk-very-secret");
    }
}
