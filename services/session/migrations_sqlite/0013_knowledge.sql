-- SQLite dialect of migrations/0013: knowledge rows and an FTS5 index over them (external content,
-- kept in step by triggers; ranked with bm25()).
CREATE TABLE knowledge (
    id BLOB PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('document', 'experience', 'demonstration')),
    owner TEXT NOT NULL DEFAULT '',
    application TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    position INTEGER NOT NULL DEFAULT 0 CHECK (position >= 0),
    title TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    code TEXT NOT NULL DEFAULT '',
    task_id BLOB,
    rating TEXT NOT NULL DEFAULT 'unspecified' CHECK (rating IN ('unspecified', 'good', 'bad')),
    succeeded BOOLEAN NOT NULL DEFAULT TRUE,
    created_at TEXT NOT NULL
);
CREATE INDEX knowledge_source ON knowledge (source, application);
CREATE INDEX knowledge_owner ON knowledge (owner, kind);
CREATE UNIQUE INDEX knowledge_task ON knowledge (kind, task_id) WHERE task_id IS NOT NULL;

CREATE VIRTUAL TABLE knowledge_fts USING fts5(
    title, body, code, content = 'knowledge', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER knowledge_fts_insert AFTER INSERT ON knowledge BEGIN
    INSERT INTO knowledge_fts (rowid, title, body, code) VALUES (new.rowid, new.title, new.body, new.code);
END;
CREATE TRIGGER knowledge_fts_delete AFTER DELETE ON knowledge BEGIN
    INSERT INTO knowledge_fts (knowledge_fts, rowid, title, body, code)
    VALUES ('delete', old.rowid, old.title, old.body, old.code);
END;
CREATE TRIGGER knowledge_fts_update AFTER UPDATE OF title, body, code ON knowledge BEGIN
    INSERT INTO knowledge_fts (knowledge_fts, rowid, title, body, code)
    VALUES ('delete', old.rowid, old.title, old.body, old.code);
    INSERT INTO knowledge_fts (rowid, title, body, code) VALUES (new.rowid, new.title, new.body, new.code);
END;
