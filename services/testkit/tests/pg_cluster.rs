//! [`PgCluster`]: a private cluster that really stops (connections fail, the old connection is ended) and
//! comes back on the same port with its data.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use sqlx::Connection as _;
use ufo_testkit::PgCluster;

#[tokio::test]
async fn a_private_cluster_restarts_with_its_data_and_drops_its_connections() {
    let cluster = PgCluster::start().await.unwrap();
    let url = cluster.create_database("kept").await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in ["CREATE TABLE t (v int)", "INSERT INTO t VALUES (7)"] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }

    cluster.stop().await.unwrap();
    assert!(
        sqlx::PgConnection::connect(&url).await.is_err(),
        "a stopped cluster accepts no connection"
    );
    assert!(
        sqlx::query("SELECT 1").execute(&mut conn).await.is_err(),
        "the old connection was ended"
    );

    cluster.start_server().await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let v: i32 = sqlx::query_scalar("SELECT v FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, 7);
    cluster.restart().await.unwrap();
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err());
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
}
