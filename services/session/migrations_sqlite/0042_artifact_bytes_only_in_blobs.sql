-- SQLite dialect of migrations/0042: artifact bytes live only in the blob store. The service has moved the
-- bytes rows still carried into its blob store before this runs (services/session/src/store/migrate.rs);
-- a row still carrying bytes fails the guard's CHECK and stops the migration instead of losing them.
-- SQLite cannot drop a column a constraint names, so the table is rebuilt; the artifacts rows that
-- reference it are checked at commit (defer_foreign_keys), once the rebuilt table holds every row.
CREATE TEMP TABLE guard_0042 (
    rows_with_bytes INTEGER,
    CONSTRAINT start_ufo_session_to_move_the_bytes_out_of_artifact_blobs CHECK (rows_with_bytes = 0)
);
INSERT INTO guard_0042 SELECT COUNT(*) FROM artifact_blobs WHERE data IS NOT NULL;
DROP TABLE guard_0042;

PRAGMA defer_foreign_keys = ON;

CREATE TABLE artifact_blobs_0042 AS SELECT sha256, size, created_at FROM artifact_blobs;
DROP TABLE artifact_blobs;

CREATE TABLE artifact_blobs (
    sha256     TEXT        NOT NULL,
    size       BIGINT      NOT NULL,
    created_at TEXT        NOT NULL,
    CONSTRAINT artifact_blobs_pkey PRIMARY KEY (sha256),
    CONSTRAINT artifact_blobs_size_check CHECK (size >= 0)
);

INSERT INTO artifact_blobs (sha256, size, created_at)
    SELECT sha256, size, created_at FROM artifact_blobs_0042;
DROP TABLE artifact_blobs_0042;
