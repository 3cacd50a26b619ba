//! Enrollment tokens of dial-out executors, kept in `--executor-enrollments-file` (JSON, written by the
//! admin API, mode 0600). A token is `ufo-enroll-` and 64 hex digits (256 random bits); only its SHA-256
//! is stored, so the file proves nothing to a reader. Each token belongs to one executor name and may be
//! revoked; a revoked token stays listed (with when) so a connection using it is told it was revoked.
//!
//! ```json
//! {"executors": {"desk1": {"tokens": [{"id": "…", "sha256": "…", "created_at": "…", "revoked_at": null}]}}}
//! ```
//!
//! A connection's check reads a cached copy, reloaded when the file's size, modification time or inode
//! changed (one `stat` per connection instead of reading and parsing the whole file: with 500 enrolled
//! executors that is ≈ 100 KB of JSON per connection), so an edit, a revocation or a token created by
//! another replica sharing the file applies to the next connection without a restart. Admin calls and
//! every read-modify-write read the file itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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
    /// A given token's file (`--enroll-executor NAME=FILE`) cannot be read.
    #[error("the enrollment token file {path} of executor {name:?} cannot be read: {source}")]
    TokenFile {
        /// The executor.
        name: String,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A given token is empty, or not one a connection can present.
    #[error("the enrollment token given for executor {name:?} {why}")]
    BadToken {
        /// The executor.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A given token already enrolls another executor (a token enrolls one name).
    #[error("the enrollment token given for executor {name:?} already enrolls executor {other:?}")]
    TokenOfAnother {
        /// The executor it was given for.
        name: String,
        /// The executor it enrolls.
        other: String,
    },
}

/// What [`Enrollments::enroll_given`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// The token's hash was stored with this id.
    Stored(String),
    /// It was enrolled already (a restart): this id.
    Already(String),
    /// It was enrolled and revoked: it stays revoked (this id).
    Revoked(String),
}

/// Shortest token `--enroll-executor` accepts (the ones the API creates have 75 characters).
pub const MIN_GIVEN_TOKEN: usize = 16;
/// Longest.
pub const MAX_GIVEN_TOKEN: usize = 4096;

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

/// What tells one version of the file from another without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// The inode (unix): every save renames a new file into place.
    ino: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let ino = 0;
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            ino,
        }
    }
}

/// The file as last read, with the stamp it had.
type Cached = Option<(Stamp, Arc<EnrollmentsFile>)>;

/// The enrollment tokens in one file.
#[derive(Debug, Clone)]
pub struct Enrollments {
    path: PathBuf,
    /// Shared by clones (the hub's service and the registry hold one each).
    cache: Arc<Mutex<Cached>>,
}

impl Enrollments {
    /// The tokens in `path` (a missing file has none).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            cache: Arc::default(),
        }
    }

    /// The file's content through the cache: read again only when its stamp changed.
    fn current(&self) -> Result<Arc<EnrollmentsFile>, EnrollError> {
        let stamp = match std::fs::metadata(&self.path) {
            Ok(meta) => Stamp::of(&meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Arc::new(EnrollmentsFile::default()));
            }
            Err(e) => return Err(self.io(e)),
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cached, file)) = cache.as_ref()
            && *cached == stamp
        {
            return Ok(file.clone());
        }
        let _span = tracing::debug_span!("dialout.enrollments_reload").entered();
        let file = Arc::new(self.load()?);
        // Stamped with what was seen before the read: a write during it is read again next time.
        *cache = Some((stamp, file.clone()));
        Ok(file)
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
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
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

    /// Enrolls a token chosen by the operator (`--enroll-executor NAME=FILE`, e.g. a compose secret) for
    /// `name`: only its hash is stored, as for a created one. Idempotent: a token enrolled already is
    /// left as it is, and one that was revoked stays revoked.
    pub fn enroll_given(&self, name: &str, token: &str) -> Result<Given, EnrollError> {
        if !valid_name(name) {
            return Err(EnrollError::BadName(name.chars().take(80).collect()));
        }
        let bad = |why| EnrollError::BadToken {
            name: name.to_owned(),
            why,
        };
        if token.is_empty() {
            return Err(bad("is empty"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                "has a character other than visible ASCII (spaces, control characters and non-ASCII cannot be sent in a header)",
            ));
        }
        if !(MIN_GIVEN_TOKEN..=MAX_GIVEN_TOKEN).contains(&token.len()) {
            return Err(bad("must be 16 to 4096 characters long"));
        }
        let _guard = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = self.load()?;
        let digest = hash(token);
        let matches = |t: &TokenRecord| {
            ufo_common::grpc::constant_time_eq(t.sha256.as_bytes(), digest.as_bytes())
        };
        if let Some((other, _)) = file
            .executors
            .iter()
            .find(|(other, e)| other.as_str() != name && e.tokens.iter().any(matches))
        {
            return Err(EnrollError::TokenOfAnother {
                name: name.to_owned(),
                other: other.clone(),
            });
        }
        if let Some(record) = file
            .executors
            .get(name)
            .and_then(|e| e.tokens.iter().find(|t| matches(t)))
        {
            return Ok(match record.revoked_at {
                None => Given::Already(record.id.clone()),
                Some(_) => Given::Revoked(record.id.clone()),
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        file.executors
            .entry(name.to_owned())
            .or_default()
            .tokens
            .push(TokenRecord {
                id: id.clone(),
                sha256: digest,
                created_at: Utc::now(),
                revoked_at: None,
            });
        self.save(&file)?;
        Ok(Given::Stored(id))
    }

    /// [`Self::enroll_given`] with the token read from `path` (surrounding whitespace, such as a final
    /// newline, is not part of it).
    pub fn enroll_given_file(&self, name: &str, path: &Path) -> Result<Given, EnrollError> {
        let text = std::fs::read_to_string(path).map_err(|source| EnrollError::TokenFile {
            name: name.chars().take(80).collect(),
            path: path.display().to_string(),
            source,
        })?;
        self.enroll_given(name, text.trim())
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
        self.current().is_ok_and(|f| {
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
        let file = self.current()?;
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

    #[test]
    fn the_cached_file_follows_writes_of_another_replica_and_edits_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("enrollments.json");
        let here = Enrollments::new(&path);
        let there = Enrollments::new(&path);
        assert_eq!(
            here.verify("desk1", "ufo-enroll-x").unwrap(),
            Err(TokenRefusal::Unknown)
        );
        // Created and revoked by another replica sharing the file.
        let (id, token) = there.create("desk1").unwrap();
        assert_eq!(here.verify("desk1", &token).unwrap(), Ok(id.clone()));
        assert!(here.is_enrolled("desk1"));
        there.revoke("desk1", &id).unwrap();
        assert_eq!(
            here.verify("desk1", &token).unwrap(),
            Err(TokenRefusal::Revoked(id.clone()))
        );
        // An operator's edit in place (same inode): the token's record removed.
        let (id2, token2) = there.create("desk2").unwrap();
        assert_eq!(here.verify("desk2", &token2).unwrap(), Ok(id2));
        let mut file = here.load().unwrap();
        file.executors.remove("desk2");
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(
            here.verify("desk2", &token2).unwrap(),
            Err(TokenRefusal::Unknown)
        );
        // A file that stops being valid is reported, not served from the cache.
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(
            here.verify("desk1", &token),
            Err(EnrollError::Invalid { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            here.verify("desk1", &token).unwrap(),
            Err(TokenRefusal::Unknown)
        );
    }

    #[test]
    fn a_given_token_is_stored_hashed_once_and_its_errors_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let e = Enrollments::new(dir.path().join("enrollments.json"));
        let token_file = dir.path().join("desk2.token");
        std::fs::write(&token_file, "compose-desk2-enrollment-token\n").unwrap();
        let Given::Stored(id) = e.enroll_given_file("desk2", &token_file).unwrap() else {
            panic!("stored");
        };
        let stored = std::fs::read_to_string(e.path()).unwrap();
        assert!(!stored.contains("compose-desk2"), "only the hash is stored");
        assert_eq!(
            e.verify("desk2", "compose-desk2-enrollment-token").unwrap(),
            Ok(id.clone())
        );
        // A restart: the same token, nothing new.
        assert_eq!(
            e.enroll_given_file("desk2", &token_file).unwrap(),
            Given::Already(id.clone())
        );
        assert_eq!(e.load().unwrap().executors["desk2"].tokens.len(), 1);
        // Revoked by an admin: a restart does not bring it back.
        e.revoke("desk2", &id).unwrap();
        assert_eq!(
            e.enroll_given_file("desk2", &token_file).unwrap(),
            Given::Revoked(id.clone())
        );
        assert_eq!(
            e.verify("desk2", "compose-desk2-enrollment-token").unwrap(),
            Err(TokenRefusal::Revoked(id))
        );
        // The same token for another name.
        let err = e.enroll_given_file("desk3", &token_file).unwrap_err();
        assert!(
            matches!(&err, EnrollError::TokenOfAnother { other, .. } if other == "desk2"),
            "{err}"
        );
        // A missing file, a bad name, an empty, short or unsendable token.
        let err = e
            .enroll_given_file("desk4", &dir.path().join("missing"))
            .unwrap_err();
        assert!(matches!(err, EnrollError::TokenFile { .. }), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
        assert!(matches!(
            e.enroll_given("bad name", "0123456789abcdef"),
            Err(EnrollError::BadName(_))
        ));
        std::fs::write(&token_file, "\n").unwrap();
        let err = e.enroll_given_file("desk4", &token_file).unwrap_err();
        assert!(err.to_string().contains("is empty"), "{err}");
        for bad in [
            "short",
            "has a space in it ok",
            "caf\u{e9}-0123456789abcdef",
        ] {
            assert!(
                matches!(
                    e.enroll_given("desk4", bad),
                    Err(EnrollError::BadToken { .. })
                ),
                "{bad}"
            );
        }
        assert!(!e.is_enrolled("desk4"));
    }

    #[test]
    fn a_connection_reads_the_cached_file_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let e = Enrollments::new(dir.path().join("enrollments.json"));
        let names: Vec<String> = (0..500).map(|i| format!("standin-{i:04}")).collect();
        let made = e.create_many(&names).unwrap();
        let first = e.current().unwrap();
        assert!(
            Arc::ptr_eq(&first, &e.current().unwrap()),
            "an unchanged file is not read again"
        );
        // What a connection's check costs with 500 executors enrolled: reading and parsing the file
        // (as before the cache) against the cached copy.
        let timed = |f: &dyn Fn()| {
            let started = std::time::Instant::now();
            for _ in 0..50 {
                f();
            }
            started.elapsed() / 50
        };
        let read = timed(&|| {
            e.load().unwrap();
        });
        let (name, id, token) = &made[250];
        let cached = timed(&|| {
            assert_eq!(e.verify(name, token).unwrap(), Ok(id.clone()));
        });
        eprintln!("500 executors enrolled: reading the file {read:?}, a cached verify {cached:?}");
        e.create("desk-new").unwrap();
        assert!(!Arc::ptr_eq(&first, &e.current().unwrap()));
    }
}
