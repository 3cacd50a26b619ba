//! Enrollment tokens of dial-out executors, kept in `--executor-enrollments-file` (JSON, written by the
//! admin API, mode 0600). A token is `ufo-enroll-` and 64 hex digits (256 random bits); only its SHA-256
//! is stored, so the file proves nothing to a reader. Each token belongs to one executor name and may be
//! revoked; a revoked token stays listed (with when) so a connection using it is told it was revoked.
//!
//! ```json
//! {"executors": {"desk1": {"tokens": [{"id": "…", "sha256": "…", "created_at": "…", "revoked_at": null}]}}}
//! ```
//!
//! The file is read at every connection and every admin call (it is small), so an edit or a revocation
//! applies to the next connection without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The prefix of every enrollment token.
pub const TOKEN_PREFIX: &str = "ufo-enroll-";

/// Serialises read-modify-write of the file within this process.
static WRITE: Mutex<()> = Mutex::new(());

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollmentsFile {
    /// Executors by name.
    #[serde(default)]
    pub executors: BTreeMap<String, Enrolled>,
}

/// One executor's tokens.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrolled {
    /// Its tokens, oldest first.
    #[serde(default)]
    pub tokens: Vec<TokenRecord>,
}

/// One token, hashed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    /// Its id (shown, used to revoke).
    pub id: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked.
    #[serde(default)]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// It cannot be read or written.
    #[error("enrollments file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not valid.
    #[error("enrollments file {path} is not valid: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A name that cannot name an executor.
    #[error("executor name {0:?} must be 1 to 64 letters, digits, '.', '_' or '-'")]
    BadName(String),
    /// No such token.
    #[error("executor {name:?} has no token {id:?}")]
    NoToken {
        /// The executor.
        name: String,
        /// The token id.
        id: String,
    },
}

/// Why a connection's token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// No token matches.
    #[error("the enrollment token is not valid")]
    Unknown,
    /// The token was revoked.
    #[error("the enrollment token {0} was revoked")]
    Revoked(String),
    /// The token enrolls another executor.
    #[error("the enrollment token belongs to another executor, not {0:?}")]
    OtherExecutor(String),
}

/// Whether `name` may name a dial-out executor: 1 to 64 of letters, digits, `.`, `_`, `-`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The enrollment tokens in one file.
#[derive(Debug, Clone)]
pub struct Enrollments {
    path: PathBuf,
}

impl Enrollments {
    /// The tokens in `path` (a missing file has none).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> EnrollError {
        EnrollError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// The file's content.
    pub fn load(&self) -> Result<EnrollmentsFile, EnrollError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(EnrollmentsFile::default());
            }
            Err(e) => return Err(self.io(e)),
        };
        if text.trim().is_empty() {
            return Ok(EnrollmentsFile::default());
        }
        serde_json::from_str(&text).map_err(|e| EnrollError::Invalid {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })
    }

    fn save(&self, file: &EnrollmentsFile) -> Result<(), EnrollError> {
        let text = serde_json::to_string_pretty(file).map_err(|e| EnrollError::Invalid {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        let tmp = self.path.with_extension("tmp");
        write_private(&tmp, text.as_bytes()).map_err(|e| self.io(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))
    }

    /// Creates a token for `name`: `(id, token)`; the token is shown only here.
    pub fn create(&self, name: &str) -> Result<(String, String), EnrollError> {
        if !valid_name(name) {
            return Err(EnrollError::BadName(name.chars().take(80).collect()));
        }
        let _guard = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = self.load()?;
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let token = format!("{TOKEN_PREFIX}{secret}");
        let id = uuid::Uuid::new_v4().to_string();
        file.executors
            .entry(name.to_owned())
            .or_default()
            .tokens
            .push(TokenRecord {
                id: id.clone(),
                sha256: hash(&token),
                created_at: Utc::now(),
                revoked_at: None,
            });
        self.save(&file)?;
        Ok((id, token))
    }

    /// Creates one token for each of `names` in a single write of the file (a benchmark's or a fleet's
    /// enrollment, e.g. 500 executors): `(name, id, token)` each; the tokens are shown only here.
    pub fn create_many(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, String, String)>, EnrollError> {
        if let Some(bad) = names.iter().find(|n| !valid_name(n)) {
            return Err(EnrollError::BadName(bad.chars().take(80).collect()));
        }
        let _guard = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = self.load()?;
        let mut made = Vec::with_capacity(names.len());
        for name in names {
            let token = format!(
                "{TOKEN_PREFIX}{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let id = uuid::Uuid::new_v4().to_string();
            file.executors
                .entry(name.clone())
                .or_default()
                .tokens
                .push(TokenRecord {
                    id: id.clone(),
                    sha256: hash(&token),
                    created_at: Utc::now(),
                    revoked_at: None,
                });
            made.push((name.clone(), id, token));
        }
        self.save(&file)?;
        Ok(made)
    }

    /// Revokes `name`'s token `id` (revoking twice is fine).
    pub fn revoke(&self, name: &str, id: &str) -> Result<(), EnrollError> {
        let _guard = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = self.load()?;
        let record = file
            .executors
            .get_mut(name)
            .and_then(|e| e.tokens.iter_mut().find(|t| t.id == id))
            .ok_or_else(|| EnrollError::NoToken {
                name: name.chars().take(80).collect(),
                id: id.chars().take(80).collect(),
            })?;
        if record.revoked_at.is_none() {
            record.revoked_at = Some(Utc::now());
        }
        self.save(&file)
    }

    /// Whether `name` has a token that is not revoked.
    pub fn is_enrolled(&self, name: &str) -> bool {
        self.load().is_ok_and(|f| {
            f.executors
                .get(name)
                .is_some_and(|e| e.tokens.iter().any(|t| t.revoked_at.is_none()))
        })
    }

    /// Checks that `token` enrolls `name`: the token's id.
    pub fn verify(
        &self,
        name: &str,
        token: &str,
    ) -> Result<Result<String, TokenRefusal>, EnrollError> {
        let file = self.load()?;
        let digest = hash(token);
        let matches = |t: &TokenRecord| {
            ufo_common::grpc::constant_time_eq(t.sha256.as_bytes(), digest.as_bytes())
        };
        if let Some(record) = file
            .executors
            .get(name)
            .and_then(|e| e.tokens.iter().find(|t| matches(t)))
        {
            return Ok(match record.revoked_at {
                None => Ok(record.id.clone()),
                Some(_) => Err(TokenRefusal::Revoked(record.id.clone())),
            });
        }
        let elsewhere = file
            .executors
            .iter()
            .any(|(other, e)| other != name && e.tokens.iter().any(matches));
        Ok(Err(if elsewhere {
            TokenRefusal::OtherExecutor(name.to_owned())
        } else {
            TokenRefusal::Unknown
        }))
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_for_their_executor_only_and_stop_when_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let e = Enrollments::new(dir.path().join("enrollments.json"));
        let (id, token) = e.create("desk1").unwrap();
        let (_, other) = e.create("desk2").unwrap();
        assert!(token.starts_with(TOKEN_PREFIX));
        let stored = std::fs::read_to_string(e.path()).unwrap();
        assert!(!stored.contains(&token), "the token itself is never stored");
        assert_eq!(e.verify("desk1", &token).unwrap(), Ok(id.clone()));
        assert_eq!(
            e.verify("desk1", &other).unwrap(),
            Err(TokenRefusal::OtherExecutor("desk1".into()))
        );
        assert_eq!(
            e.verify("desk1", "ufo-enroll-nope").unwrap(),
            Err(TokenRefusal::Unknown)
        );
        assert!(e.is_enrolled("desk1"));
        e.revoke("desk1", &id).unwrap();
        assert_eq!(
            e.verify("desk1", &token).unwrap(),
            Err(TokenRefusal::Revoked(id.clone()))
        );
        assert!(!e.is_enrolled("desk1"));
        assert!(matches!(
            e.revoke("desk1", "nope"),
            Err(EnrollError::NoToken { .. })
        ));
        assert!(matches!(e.create("bad name"), Err(EnrollError::BadName(_))));
    }

    #[test]
    fn many_tokens_are_created_in_one_write_and_each_enrolls_its_own_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = Enrollments::new(dir.path().join("enrollments.json"));
        let names: Vec<String> = (0..3).map(|i| format!("desk{i}")).collect();
        let made = e.create_many(&names).unwrap();
        assert_eq!(made.len(), 3);
        for (name, id, token) in &made {
            assert_eq!(e.verify(name, token).unwrap(), Ok(id.clone()));
        }
        assert_eq!(
            e.verify("desk0", &made[1].2).unwrap(),
            Err(TokenRefusal::OtherExecutor("desk0".into()))
        );
        assert!(matches!(
            e.create_many(&["ok".into(), "bad name".into()]),
            Err(EnrollError::BadName(_))
        ));
        assert!(
            !e.is_enrolled("ok"),
            "nothing is written when a name is refused"
        );
    }
}
