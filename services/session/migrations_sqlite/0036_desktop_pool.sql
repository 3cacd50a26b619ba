-- SQLite dialect of migrations/0036: the desktop pool.
CREATE TABLE desktops (
    name TEXT PRIMARY KEY,
    labels TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'free' CONSTRAINT desktops_state_check CHECK (state IN ('free', 'busy', 'broken')),
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    task_id BLOB,
    lease_owner TEXT,
    lease_expires_at TEXT,
    last_heartbeat TEXT NOT NULL,
    version TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    -- Handed over from a task whose check-out lapsed (its runner died before the check-in): the new
    -- task's runner resets it first.
    needs_reset BOOLEAN NOT NULL DEFAULT FALSE,
    freed_at TEXT NOT NULL
);
CREATE UNIQUE INDEX desktops_task_idx ON desktops (task_id) WHERE task_id IS NOT NULL;
ALTER TABLE sessions ADD COLUMN desktop_want TEXT;
ALTER TABLE sessions ADD COLUMN desktop TEXT;
ALTER TABLE sessions ADD COLUMN waiting_for_desktop BOOLEAN NOT NULL DEFAULT FALSE;
