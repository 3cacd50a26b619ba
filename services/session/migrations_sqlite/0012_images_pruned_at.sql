-- SQLite dialect of migrations/0012: when a session's screenshots were pruned (NULL = never).
ALTER TABLE sessions ADD COLUMN images_pruned_at TEXT;
