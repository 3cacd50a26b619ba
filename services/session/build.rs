//! Embeds the migrations (`migrations/` for Postgres, `migrations_sqlite/` for SQLite) as
//! `$OUT_DIR/migrations.rs`: each file's version, description and SQL (`include_str!`), read the way
//! `sqlx::migrate!` reads them (`<version>_<description>.sql`, sorted by version). Done here rather than with
//! `sqlx::migrate!`, whose proc-macro crate compiles sqlx's drivers, tokio, rustls and SQLite's C sources a
//! second time for the compiler's host (docs/build-time.md). Rebuilt when a migration is added or changed.

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A migration file: version, description, path.
type File = (i64, String, PathBuf);

/// Each migration file in `dir`, as `sqlx`'s `resolve_blocking` reads them: files named
/// `<version>_<description>.sql`, other entries ignored.
fn migrations(dir: &Path) -> Result<Vec<File>, Box<dyn Error>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry?;
        if !entry.metadata()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((version, rest)) = name.split_once('_') else {
            continue;
        };
        if !rest.ends_with(".sql") {
            continue;
        }
        if rest.ends_with(".up.sql") || rest.ends_with(".down.sql") {
            return Err(format!(
                "{name}: reversible migrations are not embedded (simple ones only)"
            )
            .into());
        }
        let version: i64 = version.parse().map_err(|_| {
            format!("{name}: expected an integer version prefix (e.g. `0001_foo.sql`)")
        })?;
        let description = rest.trim_end_matches(".sql").replace('_', " ");
        found.push((version, description, entry.path().canonicalize()?));
    }
    found.sort_by_key(|(version, _, _)| *version);
    Ok(found)
}

fn main() -> Result<(), Box<dyn Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let mut out = String::new();
    for (name, dir) in [
        ("POSTGRES", manifest.join("../../migrations")),
        ("SQLITE", manifest.join("migrations_sqlite")),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
        writeln!(out, "pub(crate) const {name}: &[(i64, &str, &str)] = &[")?;
        for (version, description, path) in migrations(&dir)? {
            let path = path.to_str().ok_or("a migration path is not UTF-8")?;
            writeln!(
                out,
                "    ({version}, {description:?}, include_str!({path:?})),"
            )?;
        }
        writeln!(out, "];")?;
    }
    std::fs::write(
        PathBuf::from(std::env::var("OUT_DIR")?).join("migrations.rs"),
        out,
    )?;
    Ok(())
}
