-- Issue 36, the desktop pool: every executor (declared or dialling out) is a desktop row; a task is claimed
-- together with a desktop that fits it, and the desktop is checked out to that task under a lease renewed
-- with the task's own. Several agent replicas share the pool through these rows alone.
CREATE TABLE desktops (
    name TEXT PRIMARY KEY,
    -- JSON object of string labels, e.g. {"os": "linux", "app": "mousepad"}.
    labels TEXT NOT NULL DEFAULT '{}',
    -- 'free' | 'busy' | 'broken'; draining is the separate flag below.
    state TEXT NOT NULL DEFAULT 'free' CONSTRAINT desktops_state_check CHECK (state IN ('free', 'busy', 'broken')),
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    task_id UUID,
    lease_owner TEXT,
    lease_expires_at TIMESTAMPTZ,
    last_heartbeat TIMESTAMPTZ NOT NULL,
    version TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    -- Handed over from a task whose check-out lapsed (its runner died before the check-in): the new
    -- task's runner resets it first.
    needs_reset BOOLEAN NOT NULL DEFAULT FALSE,
    -- When it last became free (free desktops are handed out least recently used first).
    freed_at TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX desktops_task_idx ON desktops (task_id) WHERE task_id IS NOT NULL;
-- What a session needs from the pool (JSON {"name": ...} | {"any": true} | {"labels": {...}}; NULL = no
-- desktop from the pool), the desktop it holds or held last, and whether its last claim found none free.
ALTER TABLE sessions ADD COLUMN desktop_want TEXT;
ALTER TABLE sessions ADD COLUMN desktop TEXT;
ALTER TABLE sessions ADD COLUMN waiting_for_desktop BOOLEAN NOT NULL DEFAULT FALSE;
