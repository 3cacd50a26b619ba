-- SQLite dialect of migrations/0041: the artifact kind `after_screenshot` (the whole desktop after a task's
-- last step). SQLite cannot alter a constraint, so the table is rebuilt with every row and its index.
CREATE TABLE artifacts_0041 (
    session_id   BLOB        NOT NULL,
    step         BIGINT      NOT NULL,
    kind         TEXT        NOT NULL,
    sha256       TEXT        NOT NULL,
    content_type TEXT        NOT NULL,
    metadata     TEXT        NOT NULL,
    created_at   TEXT        NOT NULL,
    CONSTRAINT artifacts_pkey PRIMARY KEY (session_id, step, kind, sha256),
    CONSTRAINT artifacts_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE,
    CONSTRAINT artifacts_blob_fkey FOREIGN KEY (sha256) REFERENCES artifact_blobs (sha256),
    CONSTRAINT artifacts_kind_check CHECK (kind IN ('clean_screenshot', 'annotated_screenshot',
        'desktop_screenshot', 'selected_control_screenshot', 'ui_tree', 'other', 'after_screenshot'))
);

INSERT INTO artifacts_0041 (session_id, step, kind, sha256, content_type, metadata, created_at)
    SELECT session_id, step, kind, sha256, content_type, metadata, created_at FROM artifacts;
DROP TABLE artifacts;
ALTER TABLE artifacts_0041 RENAME TO artifacts;
CREATE INDEX artifacts_sha256_idx ON artifacts (sha256);
