-- Issue 36: the claim and the hand-over (a desktop's check-in followed by the claim of the next task it
-- fits) on Postgres as one statement, `ufo_claim`, instead of about sixteen round trips in a transaction
-- (each a wake-up of this backend and of the session service on a busy machine). The rules are those of
-- the embedded store's claim in Rust (services/session/src/store/sql/queue.rs `claim_in` and
-- desktops.rs `Pool`), which runs the same conformance suite:
--
-- * the claimable tasks are read in claim order without a lock (at most p_scan of them); a candidate is
--   locked (FOR UPDATE SKIP LOCKED, read again) only once the pool can give it what it needs, so a claim
--   that finds nothing holds no row a hand-over or another replica's claim wants;
-- * a candidate that wants a desktop takes the one its dead runner held (it keeps it), else the desktop
--   it held last when that one is available and fits, else the least recently freed one that fits; the
--   check-out is fenced on the desktop still being available (a concurrent check-out makes it wait for
--   that commit and re-check, then the next desktop that fits is tried);
-- * a candidate passed over for want of a desktop is flagged `waiting_for_desktop` once;
-- * with p_start, the claimed task's first pending round is begun (ROUND_STARTED after TASK_CLAIMED);
-- * the events get their sequence numbers from `sessions.last_seq` and wake every replica's watchers.
--
-- With p_check_in, desktop p_check_in is first checked in from session p_check_in_session and worker
-- p_worker (free; broken with p_broken_reason when that is given, and then nothing is claimed), and only
-- that desktop is offered besides the desktops candidates already hold. No row comes back when the
-- check-in's fence refused it (the desktop is not checked out to that session and worker). Otherwise
-- rows of `ufo_claim_row`, each named by its `role` and holding the columns of what it is, so the caller
-- reads everything it answers with in the same round trip:
-- * 'outcome' (always): whether a desktop was checked in, the claimed session, the desktop it was given,
--   the session's newest sequence number and, with p_start, whether nothing the runner reads back is
--   recorded for it yet (`fresh`);
-- * 'checked_in': the checked-in desktop as the check-in left it;
-- * 'session', 'claimed', 'round': the claimed session, its desktop and (with p_start) its rounds in
--   order, as the claim left them.
--
-- p_reachable: a JSON array of the desktop names the claiming worker can reach, or JSON null for any.

-- Whether a desktop named p_name with labels p_labels fits a stored want (`DesktopWant` as serde writes
-- it: "any", {"name": ...} or {"labels": {...}}); NULL for anything else (`ufo_claim` refuses such a
-- want). SQL, so it is inlined into the queries that call it.
CREATE FUNCTION ufo_desktop_fits(p_want JSONB, p_name TEXT, p_labels JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $fits$
    SELECT CASE
        WHEN p_want = '"any"'::JSONB THEN TRUE
        WHEN jsonb_typeof(p_want) <> 'object' THEN NULL
        WHEN p_want ? 'name' THEN p_want ->> 'name' = p_name
        WHEN p_want ? 'labels' THEN p_labels @> (p_want -> 'labels')
    END
$fits$;

-- The desktops a claim at p_at may hand out among those reachable (p_reach: a JSON object whose keys are
-- the names; NULL: any): free ones, and busy ones whose check-out lapsed after their session ended (the
-- runner died before the check-in; they are reset first). Read without a lock: the check-out takes one
-- only if it is still available. An object, because `?` finds a key by binary search, while a join with
-- the names could be planned as a nested loop on a table without statistics.
CREATE FUNCTION ufo_available_desktops(p_at TIMESTAMPTZ, p_reach JSONB)
RETURNS TABLE (name TEXT, labels JSONB, freed_at TIMESTAMPTZ)
LANGUAGE sql STABLE AS $available$
    SELECT a.name, a.labels::JSONB, a.freed_at
    FROM desktops a LEFT JOIN sessions o ON o.id = a.task_id
    WHERE NOT a.draining AND (a.state = 'free' OR (a.state = 'busy' AND a.lease_expires_at < p_at
            AND (o.id IS NULL OR o.status IN ('finished', 'failed', 'cancelled'))))
        AND (p_reach IS NULL OR p_reach ? a.name)
$available$;

-- A row of `ufo_claim`'s answer: its role, then the columns of a session (with its place in the queue),
-- a round and a desktop (the names they share have one type), then the claim's outcome.
CREATE TYPE ufo_claim_row AS (
    role TEXT,
    id UUID,
    request TEXT,
    status TEXT,
    config JSONB,
    owner TEXT,
    result TEXT,
    cancel_requested BOOLEAN,
    lease_owner TEXT,
    lease_expires_at TIMESTAMPTZ,
    rounds BIGINT,
    last_seq BIGINT,
    steps BIGINT,
    cost DOUBLE PRECISION,
    input_tokens BIGINT,
    output_tokens BIGINT,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    queued_at TIMESTAMPTZ,
    images_pruned_at TIMESTAMPTZ,
    parked_for TEXT,
    parked_until TIMESTAMPTZ,
    desktop_want TEXT,
    desktop TEXT,
    waiting_for_desktop BOOLEAN,
    kind TEXT,
    queue_place BIGINT,
    session_id UUID,
    number BIGINT,
    started_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    name TEXT,
    labels TEXT,
    state TEXT,
    draining BOOLEAN,
    task_id UUID,
    last_heartbeat TIMESTAMPTZ,
    version TEXT,
    reason TEXT,
    needs_reset BOOLEAN,
    freed_at TIMESTAMPTZ,
    generation BIGINT,
    checked_in BOOLEAN,
    claimed UUID,
    claimed_desktop TEXT,
    claimed_last_seq BIGINT,
    fresh BOOLEAN
);

CREATE FUNCTION ufo_claim(
    p_at TIMESTAMPTZ,
    p_until TIMESTAMPTZ,
    p_worker TEXT,
    p_reachable JSONB,
    p_start BOOLEAN,
    p_scan BIGINT,
    p_check_in TEXT,
    p_check_in_session UUID,
    p_broken_reason TEXT
) RETURNS SETOF ufo_claim_row
LANGUAGE plpgsql
-- Planned once per connection and reused (as the step-recording functions, migration 0005): the custom
-- plans of the default mode cost more than these small statements themselves.
SET plan_cache_mode = force_generic_plan
AS $claim$
DECLARE
    v_in desktops%ROWTYPE;
    v_checked_in BOOLEAN := FALSE;
    -- The reachable names as the keys of an object (NULL: any).
    v_reach JSONB := CASE WHEN p_reachable IS NULL OR jsonb_typeof(p_reachable) = 'null' THEN NULL
        ELSE COALESCE((SELECT jsonb_object_agg(r, TRUE) FROM jsonb_array_elements_text(p_reachable) r),
            '{}'::JSONB) END;
    v_loaded BOOLEAN := FALSE;
    v_names TEXT[] := '{}';
    v_labels JSONB[] := '{}';
    -- Desktops checked out now, and to which sessions (loaded with the available ones).
    v_held_ids UUID[] := '{}';
    -- Wants no available desktop fits (the available list only shrinks during a claim).
    v_unfit JSONB[] := '{}';
    v_c RECORD;
    v_l RECORD;
    v_want JSONB;
    v_held TEXT;
    v_pick INT;
    v_name TEXT;
    v_claimed UUID;
    v_desktop TEXT;
    v_round RECORD;
    v_begun BOOLEAN := FALSE;
    v_recorded BOOLEAN;
    v_count BIGINT;
    v_last_seq BIGINT;
BEGIN
    IF p_check_in IS NOT NULL THEN
        UPDATE desktops d SET state = CASE WHEN p_broken_reason IS NULL THEN 'free' ELSE 'broken' END,
            task_id = NULL, lease_owner = NULL, lease_expires_at = NULL, needs_reset = FALSE,
            reason = COALESCE(p_broken_reason, ''), freed_at = p_at
        WHERE d.name = p_check_in AND d.task_id = p_check_in_session AND d.lease_owner = p_worker
        RETURNING d.* INTO v_in;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_checked_in := TRUE;
    END IF;

    -- A desktop checked in broken is given to nobody: nothing is claimed.
    <<candidates>>
    FOR v_c IN
        SELECT s.id, s.desktop_want AS want, s.desktop AS last, s.waiting_for_desktop AS waiting
        FROM sessions s
        WHERE s.kind = 'task' AND ((s.status = 'queued' AND NOT s.cancel_requested)
            OR (s.status IN ('running', 'waiting') AND s.parked_for IS NULL
                AND (s.lease_expires_at IS NULL OR s.lease_expires_at < p_at))
            OR (s.status = 'waiting' AND s.parked_for IS NOT NULL AND s.parked_until < p_at))
        ORDER BY s.queued_at, s.id LIMIT CASE WHEN p_broken_reason IS NULL THEN p_scan ELSE 0 END
    LOOP
        -- Whether the pool as it stands could give it what it needs (read, nothing locked).
        IF v_c.want IS NOT NULL THEN
            v_want := v_c.want::JSONB;
            IF NOT (v_want = '"any"'::JSONB OR (jsonb_typeof(v_want) = 'object'
                    AND (v_want ? 'name' OR v_want ? 'labels'))) THEN
                RAISE EXCEPTION 'desktop_want of session %: not a want: %', v_c.id, v_want
                    USING ERRCODE = 'data_corrupted';
            END IF;
            IF NOT v_loaded THEN
                -- The desktops that may be handed out: free ones, and busy ones whose check-out lapsed
                -- after their session ended; least recently freed first.
                SELECT COALESCE(array_agg(a.name ORDER BY a.freed_at, a.name), '{}'),
                       COALESCE(array_agg(a.labels ORDER BY a.freed_at, a.name), '{}')
                INTO v_names, v_labels
                FROM ufo_available_desktops(p_at, v_reach) a;
                SELECT COALESCE(array_agg(d.task_id), '{}') INTO v_held_ids
                FROM desktops d WHERE d.task_id IS NOT NULL;
                v_loaded := TRUE;
            END IF;
            IF NOT v_c.id = ANY (v_held_ids) AND (v_want = ANY (v_unfit) OR NOT EXISTS (
                    SELECT 1 FROM unnest(v_names, v_labels) AS u (n, l)
                    WHERE ufo_desktop_fits(v_want, u.n, u.l))) THEN
                IF NOT v_want = ANY (v_unfit) THEN
                    v_unfit := v_unfit || v_want;
                END IF;
                IF NOT v_c.waiting THEN
                    UPDATE sessions SET waiting_for_desktop = TRUE
                    WHERE id = (SELECT w.id FROM sessions w WHERE w.id = v_c.id
                        AND w.status = 'queued' AND NOT w.waiting_for_desktop FOR UPDATE SKIP LOCKED);
                END IF;
                CONTINUE candidates;
            END IF;
        END IF;

        -- Locked only now, read again: skipped when another claim holds it or it is no longer claimable.
        SELECT s.id, s.lease_owner AS owner, s.desktop AS last, s.waiting_for_desktop AS waiting
        INTO v_l
        FROM sessions s
        WHERE s.id = v_c.id AND s.kind = 'task' AND ((s.status = 'queued' AND NOT s.cancel_requested)
            OR (s.status IN ('running', 'waiting') AND s.parked_for IS NULL
                AND (s.lease_expires_at IS NULL OR s.lease_expires_at < p_at))
            OR (s.status = 'waiting' AND s.parked_for IS NOT NULL AND s.parked_until < p_at))
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE candidates;
        END IF;

        -- (Its want is the one read above: `desktop_want` is written once, when the session is created;
        -- so is v_want, and the pool is loaded when there is one.)
        IF v_c.want IS NULL THEN
            v_claimed := v_l.id;
            EXIT candidates;
        END IF;
        -- Its runner died mid-task: the session takes its desktop with it (unless the dead runner's
        -- check-in got there first; then that desktop is free like any other).
        SELECT d.name INTO v_held FROM desktops d WHERE d.task_id = v_l.id;
        IF v_held IS NOT NULL THEN
            UPDATE desktops SET lease_owner = p_worker, lease_expires_at = p_until
            WHERE name = v_held AND task_id = v_l.id;
            IF FOUND THEN
                v_claimed := v_l.id;
                v_desktop := v_held;
                EXIT candidates;
            END IF;
        END IF;
        LOOP
            -- The desktop it held last when available and fitting, else the first that fits.
            SELECT u.i INTO v_pick FROM unnest(v_names, v_labels) WITH ORDINALITY AS u (n, l, i)
            WHERE ufo_desktop_fits(v_want, u.n, u.l)
            ORDER BY (u.n IS NOT DISTINCT FROM v_l.last) DESC, u.i LIMIT 1;
            EXIT WHEN v_pick IS NULL;
            v_name := v_names[v_pick];
            v_names := v_names[1:v_pick - 1] || v_names[v_pick + 1:];
            v_labels := v_labels[1:v_pick - 1] || v_labels[v_pick + 1:];
            UPDATE desktops SET state = 'busy', task_id = v_l.id, lease_owner = p_worker,
                lease_expires_at = p_until,
                needs_reset = CASE WHEN state = 'busy' THEN TRUE ELSE FALSE END
            WHERE name = v_name AND NOT draining AND (state = 'free'
                OR (state = 'busy' AND lease_expires_at < p_at AND (task_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM sessions o WHERE o.id = desktops.task_id
                    AND o.status NOT IN ('finished', 'failed', 'cancelled')))));
            IF FOUND THEN
                v_claimed := v_l.id;
                v_desktop := v_name;
                EXIT candidates;
            END IF;
        END LOOP;
        -- Another claim took the desktop it could have had; this claim holds the row.
        IF NOT v_l.waiting THEN
            UPDATE sessions SET waiting_for_desktop = TRUE
            WHERE id = v_l.id AND status = 'queued' AND NOT waiting_for_desktop;
        END IF;
    END LOOP;

    IF v_claimed IS NULL THEN
        -- The desktop checked in free stays free: every replica's pool watchers are woken.
        IF v_checked_in AND p_broken_reason IS NULL THEN
            PERFORM pg_notify('ufo_pool', '');
        END IF;
    ELSE
        UPDATE sessions SET lease_owner = p_worker, lease_expires_at = p_until, updated_at = p_at,
            parked_for = NULL, parked_until = NULL, waiting_for_desktop = FALSE,
            desktop = COALESCE(v_desktop, desktop),
            status = CASE WHEN status = 'queued' THEN 'running' ELSE status END
        WHERE id = v_claimed;

        IF p_start THEN
            -- Everything a runner's start reads back: steps, memory, the board, and in the event log the
            -- releases (counted against --max-releases) and intents (a dead runner's actions to settle).
            v_recorded := EXISTS (SELECT 1 FROM steps x WHERE x.session_id = v_claimed)
                OR EXISTS (SELECT 1 FROM memory_items x WHERE x.session_id = v_claimed)
                OR EXISTS (SELECT 1 FROM blackboard x WHERE x.session_id = v_claimed)
                OR EXISTS (SELECT 1 FROM events x WHERE x.session_id = v_claimed
                    AND x.kind IN ('task_released', 'step_started'));
            SELECT r.number, r.status, r.request INTO v_round FROM rounds r
            WHERE r.session_id = v_claimed AND r.status IN ('pending', 'running')
            ORDER BY r.number LIMIT 1;
            IF FOUND AND v_round.status = 'pending' THEN
                UPDATE rounds SET status = 'running', started_at = p_at
                WHERE session_id = v_claimed AND number = v_round.number;
                v_begun := TRUE;
            END IF;
        END IF;

        v_count := CASE WHEN v_begun THEN 2 ELSE 1 END;
        UPDATE sessions SET last_seq = last_seq + v_count, updated_at = p_at WHERE id = v_claimed
        RETURNING last_seq INTO v_last_seq;
        PERFORM pg_notify('ufo_session_events', v_claimed::TEXT || ':' || v_last_seq::TEXT);
        INSERT INTO events (session_id, seq, kind, payload, step, round, created_at)
        VALUES (v_claimed, v_last_seq - v_count + 1, 'task_claimed',
            jsonb_build_object('worker', p_worker, 'previous_owner', v_l.owner, 'desktop', v_desktop),
            0, 0, p_at);
        IF v_begun THEN
            INSERT INTO events (session_id, seq, kind, payload, step, round, created_at)
            VALUES (v_claimed, v_last_seq, 'round_started', jsonb_build_object('request', v_round.request),
                0, v_round.number, p_at);
        END IF;

        IF v_checked_in AND v_desktop IS DISTINCT FROM p_check_in THEN
            PERFORM pg_notify('ufo_pool', '');
        END IF;
    END IF;
    RETURN NEXT jsonb_populate_record(NULL::ufo_claim_row, jsonb_build_object('role', 'outcome',
        'checked_in', v_checked_in, 'claimed', v_claimed, 'claimed_desktop', v_desktop,
        'claimed_last_seq', v_last_seq, 'fresh', CASE WHEN p_start THEN NOT v_recorded END));
    IF v_checked_in THEN
        RETURN NEXT jsonb_populate_record(NULL::ufo_claim_row,
            to_jsonb(v_in) || jsonb_build_object('role', 'checked_in'));
    END IF;
    IF v_claimed IS NOT NULL THEN
        -- Claimed: running or waiting, so not in the queue (place 0). (`LATERAL`, not `(f(...)).*`,
        -- which would call the function once per column.)
        RETURN QUERY SELECT p.* FROM sessions s CROSS JOIN LATERAL jsonb_populate_record(
                NULL::ufo_claim_row, to_jsonb(s) || jsonb_build_object('role', 'session', 'queue_place', 0)) p
            WHERE s.id = v_claimed;
        RETURN QUERY SELECT p.* FROM desktops d CROSS JOIN LATERAL jsonb_populate_record(
                NULL::ufo_claim_row, to_jsonb(d) || jsonb_build_object('role', 'claimed')) p
            WHERE d.name = v_desktop;
        IF p_start THEN
            RETURN QUERY SELECT p.* FROM rounds r CROSS JOIN LATERAL jsonb_populate_record(
                    NULL::ufo_claim_row, to_jsonb(r) || jsonb_build_object('role', 'round')) p
                WHERE r.session_id = v_claimed ORDER BY r.number;
        END IF;
    END IF;
END
$claim$;
