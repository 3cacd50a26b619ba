-- SQLite dialect of migrations/0038: a session's kind ('task' or 'direct'); the claim picks tasks only.
ALTER TABLE sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'task'
    CONSTRAINT sessions_kind_check CHECK (kind IN ('task', 'direct'));
