//! The tokens `ufo up` gives its services — the API key callers present, the executor's and the session
//! service's — kept in the data directory (`tokens.json`, readable by its owner only) so that they stay
//! the same across restarts: an exported `UFO_TOKEN` keeps working. A token given in the environment or
//! on the command line wins over the stored one and is not written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The file name under the data directory.
pub const FILE: &str = "tokens.json";

/// The three tokens of one `ufo up` installation.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// API key for the agent service's REST and gRPC APIs (`UFO_TOKEN`).
    pub api: String,
    /// Bearer token the local executor requires and the agent presents.
    pub executor: String,
    /// Bearer token the session service requires and the agent presents.
    pub session: String,
    /// An admin API key (`ufo up --admin-key`): may prune and add help files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(<redacted>)")
    }
}

fn fresh() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The tokens file of `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// Reads the stored tokens, if any (a damaged file is an error naming it, never silently replaced).
pub fn read(data_dir: &Path) -> Result<Option<Tokens>, CliError> {
    let file = path(data_dir);
    match std::fs::read_to_string(&file) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            CliError::Up(format!(
                "{} is damaged ({e}); delete it to get new tokens",
                file.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The stored tokens (created on first use), with any given one in place of the stored.
pub fn load_or_create(
    data_dir: &Path,
    api: Option<&str>,
    executor: Option<&str>,
    session: Option<&str>,
) -> Result<Tokens, CliError> {
    let stored = match read(data_dir)? {
        Some(t) => t,
        None => {
            let t = Tokens {
                api: fresh(),
                executor: fresh(),
                session: fresh(),
                admin: None,
            };
            write(&path(data_dir), &t)?;
            t
        }
    };
    let pick = |given: Option<&str>, stored: String| {
        given
            .filter(|g| !g.is_empty())
            .map_or(stored, str::to_owned)
    };
    Ok(Tokens {
        api: pick(api, stored.api),
        executor: pick(executor, stored.executor),
        session: pick(session, stored.session),
        admin: stored.admin,
    })
}

/// The stored admin key, created (and stored beside the others) when there is none yet.
pub fn admin_key(data_dir: &Path) -> Result<String, CliError> {
    let file = path(data_dir);
    let mut stored =
        read(data_dir)?.ok_or_else(|| CliError::Up(format!("{} is missing", file.display())))?;
    if let Some(admin) = &stored.admin {
        return Ok(admin.clone());
    }
    let admin = fresh();
    stored.admin = Some(admin.clone());
    // Written beside, then renamed over: the file is never half-written.
    let fresh_file = file.with_extension("json.new");
    let _ = std::fs::remove_file(&fresh_file);
    write(&fresh_file, &stored)?;
    std::fs::rename(&fresh_file, &file)?;
    Ok(admin)
}

/// The key a client command uses when none is given (`--token` / `UFO_TOKEN`): the one `ufo up` keeps
/// in the data directory (`UFO_DATA_DIR`, default `ufo-data` here) — its admin key for an admin
/// command when it made one, else its API key. None without a readable tokens file.
pub fn client_key(data_dir: &Path, admin_command: bool) -> Option<String> {
    let stored = read(data_dir).ok().flatten()?;
    match stored.admin {
        Some(admin) if admin_command => Some(admin),
        _ => Some(stored.api),
    }
}

fn write(file: &Path, tokens: &Tokens) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(tokens)
        .map_err(|e| CliError::Up(format!("cannot encode the tokens: {e}")))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(file)?;
    std::io::Write::write_all(&mut out, text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_and_given_ones_win_without_being_stored() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), None, None, None).unwrap();
        let again = load_or_create(dir.path(), None, None, None).unwrap();
        assert_eq!(first, again);
        let given = load_or_create(dir.path(), Some("mine"), None, Some("")).unwrap();
        assert_eq!(given.api, "mine");
        assert_eq!(
            given.session, first.session,
            "an empty value is not a token"
        );
        assert_eq!(read(dir.path()).unwrap().unwrap(), first);
        assert!(!format!("{first:?}").contains(&first.api));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let admin = admin_key(dir.path()).unwrap();
        assert_eq!(
            admin_key(dir.path()).unwrap(),
            admin,
            "made once, then kept"
        );
        let kept = read(dir.path()).unwrap().unwrap();
        assert_eq!(
            (kept.api, kept.admin.as_deref()),
            (first.api.clone(), Some(admin.as_str()))
        );
        assert_eq!(client_key(dir.path(), true), Some(admin));
        assert_eq!(client_key(dir.path(), false), Some(first.api.clone()));
        std::fs::write(path(dir.path()), "not json").unwrap();
        assert!(load_or_create(dir.path(), None, None, None).is_err());
    }
}
