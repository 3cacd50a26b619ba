-- Issue 38, direct sessions: an MCP client's own desktop calls are recorded as the steps of a session of
-- kind 'direct' (created RUNNING with round 1 running and no lease). The claim picks 'task' sessions only,
-- so no runner ever works on a direct session.
ALTER TABLE sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'task'
    CONSTRAINT sessions_kind_check CHECK (kind IN ('task', 'direct'));
