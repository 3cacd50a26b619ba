-- SQLite dialect of migrations/0035: a task parked while it waits for a person (NULL = not parked).
ALTER TABLE sessions ADD COLUMN parked_for TEXT;
ALTER TABLE sessions ADD COLUMN parked_until TEXT;
CREATE INDEX sessions_parked_idx ON sessions (parked_until) WHERE parked_for IS NOT NULL;
