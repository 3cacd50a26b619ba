//! A fresh, uniquely named Postgres database per test (for tests that start service processes, where
//! `#[sqlx::test]`'s pool cannot be handed over): created from an admin URL, dropped afterwards.

use sqlx::Connection as _;

/// Why a test database could not be created or dropped.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// `DATABASE_URL` is not set.
    #[error("DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/test)")]
    NoUrl,
    /// The admin URL does not parse.
    #[error("invalid database url")]
    Url(#[from] url_error::UrlError),
    /// Postgres refused.
    #[error("postgres error")]
    Sql(#[from] sqlx::Error),
}

/// Wraps the URL parser's error without exposing its crate.
pub mod url_error {
    /// The URL does not parse.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    pub struct UrlError(pub(crate) String);
}

/// A database that exists for one test. Dropped (with its connections) when this value is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
    dropped: bool,
}

impl TestDatabase {
    /// Creates a database on the server named by `DATABASE_URL`.
    pub async fn create() -> Result<Self, DatabaseError> {
        let admin = std::env::var("DATABASE_URL").map_err(|_| DatabaseError::NoUrl)?;
        Self::create_from(&admin).await
    }

    /// Creates a database on the server of `admin_url` (a role allowed to create databases).
    pub async fn create_from(admin_url: &str) -> Result<Self, DatabaseError> {
        let name = format!("ufo_test_{}", uuid::Uuid::new_v4().simple());
        let mut url =
            reqwest::Url::parse(admin_url).map_err(|e| url_error::UrlError(e.to_string()))?;
        url.set_path(&format!("/{name}"));
        let mut admin = sqlx::PgConnection::connect(admin_url).await?;
        // Identifiers cannot be bound; the name is ours (a prefix and hex digits), quoted anyway.
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        Ok(Self {
            admin_url: admin_url.to_owned(),
            name,
            url: url.to_string(),
            dropped: false,
        })
    }

    /// The URL of the new database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now, ending its connections, and reports errors.
    pub async fn drop_database(mut self) -> Result<(), DatabaseError> {
        self.dropped = true;
        drop_database(&self.admin_url, &self.name).await
    }
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), DatabaseError> {
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    admin.close().await?;
    Ok(())
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs outside async context (or inside one we must not block), so a short-lived runtime on
        // its own thread does the work.
        let worker = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime
                && let Err(e) = runtime.block_on(drop_database(&admin_url, &name))
            {
                eprintln!("cannot drop test database {name}: {e}");
            }
        });
        let _ = worker.join();
    }
}
