//! `TestDatabase` against the real Postgres of `DATABASE_URL`: a fresh database exists, is usable, and is
//! gone after it is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use sqlx::Connection as _;
use ufo_testkit::TestDatabase;

async fn exists(name: &str) -> bool {
    let admin = std::env::var("DATABASE_URL").unwrap();
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_test_database_is_fresh_usable_and_dropped() {
    let db = TestDatabase::create().await.unwrap();
    let other = TestDatabase::create().await.unwrap();
    assert_ne!(db.name(), other.name());
    assert!(exists(db.name()).await);

    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let current: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(current, db.name());
    // An open connection must not keep the database alive.
    let name = db.name().to_owned();
    db.drop_database().await.unwrap();
    assert!(!exists(&name).await);
    drop(conn);

    let other_name = other.name().to_owned();
    drop(other);
    assert!(!exists(&other_name).await);
}
