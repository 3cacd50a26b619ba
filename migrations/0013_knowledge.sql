-- Issue 33, knowledge: help document sections, experiences (finished tasks) and demonstrations, retrieved
-- into the agents' prompts by Postgres full-text search (a stored, weighted tsvector and a GIN index).
CREATE TABLE knowledge (
    id UUID PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('document', 'experience', 'demonstration')),
    owner TEXT NOT NULL DEFAULT '',
    application TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    position BIGINT NOT NULL DEFAULT 0 CHECK (position >= 0),
    title TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    -- Example code and command lines of a section (searched with a lower weight than the prose).
    code TEXT NOT NULL DEFAULT '',
    task_id UUID,
    rating TEXT NOT NULL DEFAULT 'unspecified' CHECK (rating IN ('unspecified', 'good', 'bad')),
    succeeded BOOLEAN NOT NULL DEFAULT TRUE,
    created_at TIMESTAMPTZ NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')
            || setweight(to_tsvector('english', code), 'D')
    ) STORED
);
CREATE INDEX knowledge_tsv ON knowledge USING GIN (tsv);
CREATE INDEX knowledge_source ON knowledge (source, application);
CREATE INDEX knowledge_owner ON knowledge (owner, kind);
-- One experience per (kind, task): re-recording a task replaces it.
CREATE UNIQUE INDEX knowledge_task ON knowledge (kind, task_id) WHERE task_id IS NOT NULL;
