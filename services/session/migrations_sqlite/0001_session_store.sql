-- SQLite dialect of migrations/0001 (the embedded store): sessions, rounds, steps, memory items, blackboard, artifacts and the
-- per-session event log. Timestamps are written by the service (UTC, microseconds); constraints are named so
-- the service can map violations.

CREATE TABLE sessions (
    id               BLOB             NOT NULL,
    request          TEXT             NOT NULL,
    status           TEXT             NOT NULL,
    config           TEXT             NOT NULL,
    owner            TEXT             NOT NULL DEFAULT '',
    result           TEXT             NOT NULL DEFAULT '',
    cancel_requested BOOLEAN          NOT NULL DEFAULT FALSE,
    lease_owner      TEXT,
    lease_expires_at TEXT       ,
    rounds           BIGINT           NOT NULL DEFAULT 1,
    -- Sequence number of the newest event: bumped in the transaction that appends events, so the row lock
    -- serialises writers of one session and sequence numbers have no gaps.
    last_seq         BIGINT           NOT NULL DEFAULT 0,
    steps            BIGINT           NOT NULL DEFAULT 0,
    cost             REAL             NOT NULL DEFAULT 0,
    input_tokens     BIGINT           NOT NULL DEFAULT 0,
    output_tokens    BIGINT           NOT NULL DEFAULT 0,
    created_at       TEXT             NOT NULL,
    updated_at       TEXT             NOT NULL,
    -- When the session last entered the queue: the claim order.
    queued_at        TEXT             NOT NULL,
    CONSTRAINT sessions_pkey PRIMARY KEY (id),
    CONSTRAINT sessions_status_check
        CHECK (status IN ('queued', 'running', 'waiting', 'finished', 'failed', 'cancelled')),
    CONSTRAINT sessions_lease_check CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT sessions_counters_check
        CHECK (rounds >= 1 AND last_seq >= 0 AND steps >= 0 AND input_tokens >= 0 AND output_tokens >= 0)
);

CREATE INDEX sessions_list_idx ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_queue_idx ON sessions (queued_at, id) WHERE status = 'queued';
CREATE INDEX sessions_lease_idx ON sessions (lease_expires_at) WHERE status IN ('running', 'waiting');

CREATE TABLE rounds (
    session_id  BLOB        NOT NULL,
    number      BIGINT      NOT NULL,
    request     TEXT        NOT NULL,
    status      TEXT        NOT NULL,
    result      TEXT        NOT NULL DEFAULT '',
    steps       BIGINT      NOT NULL DEFAULT 0,
    created_at  TEXT        NOT NULL,
    started_at  TEXT       ,
    finished_at TEXT       ,
    CONSTRAINT rounds_pkey PRIMARY KEY (session_id, number),
    CONSTRAINT rounds_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE,
    CONSTRAINT rounds_number_check CHECK (number >= 1),
    CONSTRAINT rounds_status_check
        CHECK (status IN ('pending', 'running', 'finished', 'failed', 'cancelled'))
);

CREATE TABLE steps (
    session_id    BLOB             NOT NULL,
    step          BIGINT           NOT NULL,
    round         BIGINT           NOT NULL,
    round_step    BIGINT           NOT NULL,
    agent_name    TEXT             NOT NULL,
    agent_kind    TEXT             NOT NULL,
    state_before  TEXT             NOT NULL,
    state_after   TEXT             NOT NULL,
    subtask       TEXT             NOT NULL,
    observation   TEXT             NOT NULL,
    thought       TEXT             NOT NULL,
    plan          TEXT             NOT NULL,
    comment       TEXT             NOT NULL,
    status        TEXT             NOT NULL,
    actions       TEXT             NOT NULL,
    phases        TEXT             NOT NULL,
    cost          REAL             NOT NULL,
    input_tokens  BIGINT           NOT NULL,
    output_tokens BIGINT           NOT NULL,
    started_at    TEXT       ,
    finished_at   TEXT       ,
    extra         TEXT             NOT NULL,
    -- SHA-256 of the canonical encoding of the whole RecordStep request (minus the lease owner): an
    -- identical re-record is recognised by it, a different one is refused.
    content_hash  BLOB             NOT NULL,
    recorded_at   TEXT             NOT NULL,
    CONSTRAINT steps_pkey PRIMARY KEY (session_id, step),
    CONSTRAINT steps_round_fkey FOREIGN KEY (session_id, round) REFERENCES rounds (session_id, number)
        ON DELETE CASCADE,
    CONSTRAINT steps_step_check CHECK (step >= 1 AND round_step >= 1),
    CONSTRAINT steps_agent_kind_check CHECK (agent_kind IN ('host', 'app'))
);

CREATE TABLE memory_items (
    session_id BLOB   NOT NULL,
    step       BIGINT NOT NULL,
    agent_name TEXT   NOT NULL,
    item       TEXT   NOT NULL,
    CONSTRAINT memory_items_pkey PRIMARY KEY (session_id, step),
    CONSTRAINT memory_items_step_fkey FOREIGN KEY (session_id, step) REFERENCES steps (session_id, step)
        ON DELETE CASCADE
);

CREATE INDEX memory_items_agent_idx ON memory_items (session_id, agent_name, step);

CREATE TABLE blackboard (
    session_id  BLOB        NOT NULL,
    kind        TEXT        NOT NULL,
    idx         BIGINT      NOT NULL,
    value       TEXT        NOT NULL,
    artifact_id TEXT,
    -- 0 when written outside a step (e.g. a person's answer).
    step        BIGINT      NOT NULL DEFAULT 0,
    created_at  TEXT        NOT NULL,
    CONSTRAINT blackboard_pkey PRIMARY KEY (session_id, kind, idx),
    CONSTRAINT blackboard_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE,
    CONSTRAINT blackboard_kind_check CHECK (kind IN ('question', 'request', 'trajectory', 'image'))
);

-- Artifact bytes, content-addressed (hex SHA-256), stored once however often they are referenced. Bytes live
-- in the database (bytea, TOASTed out of line) rather than in files: they commit and back up with the steps
-- that reference them, and any replica can serve them without shared storage.
CREATE TABLE artifact_blobs (
    sha256     TEXT        NOT NULL,
    size       BIGINT      NOT NULL,
    data       BLOB        NOT NULL,
    created_at TEXT        NOT NULL,
    CONSTRAINT artifact_blobs_pkey PRIMARY KEY (sha256),
    CONSTRAINT artifact_blobs_size_check CHECK (size = length(data))
);

-- A reference from a session's step to a blob, with what kind of artifact it is and its metadata.
CREATE TABLE artifacts (
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
        'desktop_screenshot', 'selected_control_screenshot', 'ui_tree', 'other'))
);

CREATE INDEX artifacts_sha256_idx ON artifacts (sha256);

-- Append-only per-session log; seq is 1-based and gap-free (allocated from sessions.last_seq).
CREATE TABLE events (
    session_id BLOB        NOT NULL,
    seq        BIGINT      NOT NULL,
    kind       TEXT        NOT NULL,
    payload    TEXT        NOT NULL,
    step       BIGINT      NOT NULL DEFAULT 0,
    round      BIGINT      NOT NULL DEFAULT 0,
    created_at TEXT        NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (session_id, seq),
    CONSTRAINT events_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE,
    CONSTRAINT events_seq_check CHECK (seq >= 1)
);
