//! Migrations of the row stores, with the one step SQL cannot take: artifact bytes that rows still carry
//! (written before migration 0008, when Postgres kept them in `artifact_blobs.data`) are moved into the blob
//! store before migration [`BYTES_LEAVE_ROWS`] drops that column.
//!
//! [`run`] applies the migrations before it, moves every row's bytes (put into the blob store under their
//! hash, checked, then the row's `data` set NULL, one row at a time), and applies the rest. Each part is
//! idempotent: a start interrupted anywhere moves what is left at the next start (a blob put twice is stored
//! once). Migration 0042 refuses to run while a row still carries bytes, so running the migrations without
//! the service (and its blob store) cannot lose them.

use std::borrow::Cow;

use bytes::Bytes;
use sqlx::migrate::Migrator;
use tracing::instrument;

use crate::blob::{BlobHash, BlobStore};
use crate::store::StoreResult;

/// The migration that drops `artifact_blobs.data` (both dialects).
pub const BYTES_LEAVE_ROWS: i64 = 42;

/// Rows read per query while moving bytes out (each holds up to one artifact).
const MOVE_BATCH: i64 = 16;

// `POSTGRES` and `SQLITE`: each migration file's (version, description, SQL), sorted by version (build.rs).
include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// The migrator of embedded migration files, as `sqlx::migrate!` builds it: each migration's checksum is
/// the SHA-384 of its SQL, and one whose SQL starts with `-- no-transaction` runs outside a transaction.
pub fn embedded(files: &'static [(i64, &'static str, &'static str)]) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            files
                .iter()
                .map(|&(version, description, sql)| {
                    sqlx::migrate::Migration::new(
                        version,
                        Cow::Borrowed(description),
                        sqlx::migrate::MigrationType::Simple,
                        Cow::Borrowed(sql),
                        sql.starts_with("-- no-transaction"),
                    )
                })
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// `all`'s migrations numbered below `version`.
pub fn before(all: &Migrator, version: i64) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            all.migrations
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect(),
        ),
        // A database migrated further keeps its later migrations: not an error here.
        ignore_missing: true,
        ..Migrator::DEFAULT
    }
}

macro_rules! dialect {
    ($run:ident, $move_bytes:ident, $pool:ty) => {
        /// Applies `all` to `pool`, moving any bytes still in `artifact_blobs` rows into `blobs` before the
        /// migration that drops their column.
        pub async fn $run(all: &Migrator, pool: &$pool, blobs: &dyn BlobStore) -> StoreResult<()> {
            before(all, BYTES_LEAVE_ROWS).run(pool).await?;
            let applied: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 AND success)",
            )
            .bind(BYTES_LEAVE_ROWS)
            .fetch_one(pool)
            .await?;
            if !applied {
                $move_bytes(pool, blobs).await?;
            }
            all.run(pool).await?;
            Ok(())
        }

        /// Moves the bytes of every `artifact_blobs` row that still has them into `blobs` and clears the
        /// row's copy; returns how many rows it moved.
        #[instrument(name = "store.move_row_bytes", skip_all, fields(moved))]
        pub async fn $move_bytes(pool: &$pool, blobs: &dyn BlobStore) -> StoreResult<u64> {
            let mut moved = 0_u64;
            loop {
                let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
                    "SELECT sha256, data FROM artifact_blobs WHERE data IS NOT NULL LIMIT $1",
                )
                .bind(MOVE_BATCH)
                .fetch_all(pool)
                .await?;
                if rows.is_empty() {
                    break;
                }
                for (sha256, data) in rows {
                    let hash = BlobHash::parse(&sha256)?;
                    // The row's name must be its bytes' hash: a mismatch stops the start, nothing is lost.
                    blobs.put(Bytes::from(data), Some(&hash)).await?;
                    sqlx::query("UPDATE artifact_blobs SET data = NULL WHERE sha256 = $1")
                        .bind(&sha256)
                        .execute(pool)
                        .await?;
                    moved += 1;
                }
            }
            tracing::Span::current().record("moved", moved);
            if moved > 0 {
                tracing::info!(
                    moved,
                    "artifact bytes moved from database rows into the blob store"
                );
            }
            Ok(moved)
        }
    };
}

dialect!(run_postgres, move_postgres_bytes, sqlx::PgPool);
dialect!(run_sqlite, move_sqlite_bytes, sqlx::SqlitePool);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use sqlx::migrate::Migrator;

    /// The embedded migrators hold what `sqlx` reads from the directories at run time (what
    /// `sqlx::migrate!` embedded before): the same versions, descriptions, types, SQL, checksums (the
    /// ones databases already migrated recorded) and no-transaction flags, in the same order.
    #[tokio::test]
    async fn the_embedded_migrations_are_sqlxs_reading_of_the_directories() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (embedded, dir) in [
            (
                &*crate::store::postgres::MIGRATOR,
                root.join("../../migrations"),
            ),
            (
                &*crate::store::sqlite::MIGRATOR,
                root.join("migrations_sqlite"),
            ),
        ] {
            let read = Migrator::new(dir.as_path()).await.unwrap();
            let fields = |m: &Migrator| {
                m.iter()
                    .map(|m| {
                        let kind = format!("{:?}", m.migration_type);
                        let text = (m.description.to_string(), kind, m.sql.to_string());
                        (m.version, text, m.checksum.to_vec(), m.no_tx)
                    })
                    .collect::<Vec<_>>()
            };
            assert!(read.iter().count() >= 12, "{}", dir.display());
            assert_eq!(fields(embedded), fields(&read), "{}", dir.display());
        }
    }
}
