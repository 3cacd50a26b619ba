//! API-key authentication for REST and gRPC: `Authorization: Bearer <key>` (the scheme matched
//! case-insensitively, RFC 7235). Keys come from a configured list and/or a file; with no key the service
//! refuses to start unless explicitly run in insecure local mode (fail-closed). A key may carry a name
//! (`name:key`) that owns the tasks it submits; a key is a `user` (sees only its own tasks) unless its name
//! is in `--api-admins` (sees every task). In insecure mode the one anonymous caller is an admin.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use ufo_common::ErrorCode;
use ufo_common::grpc::constant_time_eq;

use super::error::ApiError;
use crate::config::ApiConfig;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sees, streams, answers, confirms, follows up and cancels only its own tasks.
    User,
    /// Sees and acts on every task.
    Admin,
}

/// The authenticated caller: the key's name (which owns the tasks it submits) and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's name (`anonymous` in insecure mode).
    pub name: String,
    /// Its role.
    pub role: Role,
}

impl Caller {
    /// A caller named `name` with `role`.
    pub fn new(name: impl Into<String>, role: Role) -> Self {
        Self {
            name: name.into(),
            role,
        }
    }

    /// Whether this caller may see a task owned by `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        self.role == Role::Admin || self.name == owner
    }

    /// The owner filter of this caller's listings (`None`: everyone's).
    pub fn owner_filter(&self) -> Option<&str> {
        (self.role != Role::Admin).then_some(self.name.as_str())
    }
}

/// The accepted keys, or insecure mode.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Arc<[(Caller, Vec<u8>)]>,
    insecure: bool,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.keys.len())
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Why the keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// Neither keys nor `--insecure-no-auth` were given.
    #[error(
        "no API keys configured: pass --api-keys or --api-keys-file, or --insecure-no-auth for a trusted local machine"
    )]
    NoKeys,
    /// The key file cannot be read.
    #[error("cannot read the API key file")]
    File(#[from] std::io::Error),
    /// A key is empty or contains whitespace.
    #[error("an API key is empty or contains whitespace")]
    BadKey,
}

impl ApiKeys {
    /// Loads the keys named by the configuration.
    pub fn from_config(config: &ApiConfig) -> Result<Self, AuthConfigError> {
        let mut lines: Vec<String> = config.api_keys.clone();
        if let Some(path) = &config.api_keys_file {
            let text = std::fs::read_to_string(path)?;
            lines.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            );
        }
        let mut keys = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let (name, key) = match line.split_once(':') {
                Some((name, key)) => (name.trim().to_owned(), key.trim()),
                None => (format!("key{}", i + 1), line.trim()),
            };
            if key.is_empty() || key.chars().any(char::is_whitespace) {
                return Err(AuthConfigError::BadKey);
            }
            let role = if config.api_admins.iter().any(|a| a.trim() == name) {
                Role::Admin
            } else {
                Role::User
            };
            keys.push((Caller::new(name, role), key.as_bytes().to_vec()));
        }
        if keys.is_empty() && !config.insecure_no_auth {
            return Err(AuthConfigError::NoKeys);
        }
        Ok(Self {
            keys: keys.into(),
            insecure: config.insecure_no_auth
                && config.api_keys.is_empty()
                && config.api_keys_file.is_none(),
        })
    }

    /// Checks a raw `authorization` header value.
    pub fn check(&self, header: Option<&[u8]>) -> Result<Caller, ApiError> {
        if self.insecure {
            return Ok(Caller::new("anonymous", Role::Admin));
        }
        let presented = header
            .and_then(ufo_common::grpc::bearer)
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthenticated, "missing bearer token"))?;
        self.keys
            .iter()
            .find(|(_, key)| constant_time_eq(presented, key))
            .map(|(caller, _)| caller.clone())
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthenticated, "invalid bearer token"))
    }
}

/// Axum middleware: rejects unauthenticated requests with 401 and records the caller.
pub async fn require_key(
    State(keys): State<ApiKeys>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let caller = keys.check(
        request
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
    )?;
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}

impl tonic::service::Interceptor for ApiKeys {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let caller = self.check(
            request
                .metadata()
                .get("authorization")
                .map(|v| v.as_bytes()),
        )?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn config(args: &[&str]) -> ApiConfig {
        crate::Config::parse_from(std::iter::once("ufo-agent").chain(args.iter().copied())).api
    }

    #[test]
    fn no_keys_fails_closed() {
        assert!(matches!(
            ApiKeys::from_config(&config(&[])),
            Err(AuthConfigError::NoKeys)
        ));
        let open = ApiKeys::from_config(&config(&["--insecure-no-auth"])).unwrap();
        assert_eq!(
            open.check(None).unwrap(),
            Caller::new("anonymous", Role::Admin)
        );
    }

    #[test]
    fn named_keys_label_the_caller() {
        let keys = ApiKeys::from_config(&config(&[
            "--api-keys",
            "ci:abc,def,ops:ghi",
            "--api-admins",
            "ops",
        ]))
        .unwrap();
        assert_eq!(
            keys.check(Some(b"Bearer abc")).unwrap(),
            Caller::new("ci", Role::User)
        );
        assert_eq!(keys.check(Some(b"bearer abc")).unwrap().name, "ci");
        assert_eq!(keys.check(Some(b"BEARER   abc")).unwrap().name, "ci");
        assert_eq!(keys.check(Some(b"Bearer def")).unwrap().name, "key2");
        assert_eq!(keys.check(Some(b"Bearer ghi")).unwrap().role, Role::Admin);
        assert!(keys.check(Some(b"Basic abc")).is_err());
        assert_eq!(
            keys.check(Some(b"Bearer nope")).unwrap_err().code,
            ErrorCode::Unauthenticated
        );
        assert_eq!(
            keys.check(None).unwrap_err().code,
            ErrorCode::Unauthenticated
        );
        assert!(!format!("{keys:?}").contains("abc"));
    }

    #[test]
    fn keys_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, "# comment\nops:k1\n\nk2\n").unwrap();
        let keys =
            ApiKeys::from_config(&config(&["--api-keys-file", path.to_str().unwrap()])).unwrap();
        assert_eq!(keys.check(Some(b"Bearer k1")).unwrap().name, "ops");
        assert!(keys.check(Some(b"Bearer k2")).is_ok());
    }
}
