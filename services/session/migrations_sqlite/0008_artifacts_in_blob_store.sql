-- SQLite dialect of migrations/0008: artifact bytes move to the blob store (services/session/src/blob); new
-- artifact_blobs rows keep hash and size with data NULL, rows written before keep their bytes and are served
-- from the row. SQLite cannot alter a constraint, so the table is rebuilt; the artifacts rows that reference
-- it are checked at commit (defer_foreign_keys), once the rebuilt table holds every old row.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE artifact_blobs_0008 AS SELECT sha256, size, data, created_at FROM artifact_blobs;
DROP TABLE artifact_blobs;

CREATE TABLE artifact_blobs (
    sha256     TEXT        NOT NULL,
    size       BIGINT      NOT NULL,
    data       BLOB,
    created_at TEXT        NOT NULL,
    CONSTRAINT artifact_blobs_pkey PRIMARY KEY (sha256),
    CONSTRAINT artifact_blobs_size_check CHECK (size >= 0 AND (data IS NULL OR size = length(data)))
);

INSERT INTO artifact_blobs (sha256, size, data, created_at)
    SELECT sha256, size, data, created_at FROM artifact_blobs_0008;
DROP TABLE artifact_blobs_0008;
