-- Recording a step in one round trip. The service used to send BEGIN, a locking SELECT, the write and
-- COMMIT (four round trips and four statements for the server to process); this function does the same in
-- one call, which Postgres runs as its own transaction.
--
-- It locks the session row first; every later statement takes a fresh snapshot (a VOLATILE function under
-- READ COMMITTED), so after waiting for another writer of the same session it sees that writer's step,
-- blackboard indices and sequence numbers. Checks, in the service's order:
--   no_session         the session does not exist
--   duplicate          step p_step exists with the same content hash (nothing written)
--   conflict           step p_step exists with different content
--   lease_lost         p_lease_owner is given and does not hold the lease (r_detail: the holder)
--   ended              the session is not queued/running/waiting (r_detail: its status)
--   no_round           round p_round does not exist
--   round_not_running  round p_round is not running (r_detail: its status)
--   missing_artifact   an id of p_artifacts was not put for this session (r_detail: the id)
-- and otherwise 'written': the step row, its memory item, blackboard entries (indices continue each kind),
-- the round's and session's counters, the events (sequence numbers allocated from sessions.last_seq, a
-- notification on commit) and the artifact links. r_board and r_artifacts return what was stored.
CREATE FUNCTION ufo_record_step(
    p_session UUID, p_step BIGINT, p_round BIGINT, p_round_step BIGINT, p_agent_name TEXT,
    p_agent_kind TEXT, p_state_before TEXT, p_state_after TEXT, p_subtask TEXT, p_observation TEXT,
    p_thought TEXT, p_plan JSONB, p_comment TEXT, p_status TEXT, p_actions JSONB, p_phases JSONB,
    p_cost DOUBLE PRECISION, p_input_tokens BIGINT, p_output_tokens BIGINT, p_started_at TIMESTAMPTZ,
    p_finished_at TIMESTAMPTZ, p_extra JSONB, p_content_hash BYTEA, p_at TIMESTAMPTZ, p_memory JSONB,
    p_board_kinds TEXT[], p_board_values JSONB[], p_board_artifacts TEXT[],
    p_event_kinds TEXT[], p_event_payloads JSONB[], p_event_steps BIGINT[], p_event_rounds BIGINT[],
    p_lease_owner TEXT, p_artifacts TEXT[])
RETURNS TABLE (r_outcome TEXT, r_detail TEXT, r_last_seq BIGINT, r_board JSONB, r_artifacts JSONB)
LANGUAGE plpgsql AS $$
DECLARE
    v_status TEXT;
    v_owner TEXT;
    v_hash BYTEA;
    v_round TEXT;
    v_missing TEXT;
    v_events INT := cardinality(p_event_kinds);
    v_seq BIGINT;
    v_board JSONB;
    v_artifacts JSONB := '[]'::jsonb;
BEGIN
    SELECT s.status, s.lease_owner INTO v_status, v_owner
        FROM sessions s WHERE s.id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_session'::text, NULL::text, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    SELECT st.content_hash INTO v_hash FROM steps st WHERE st.session_id = p_session AND st.step = p_step;
    IF FOUND THEN
        RETURN QUERY SELECT CASE WHEN v_hash = p_content_hash THEN 'duplicate' ELSE 'conflict' END,
            NULL::text, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    IF p_lease_owner IS NOT NULL AND v_owner IS DISTINCT FROM p_lease_owner THEN
        RETURN QUERY SELECT 'lease_lost'::text, v_owner, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    IF v_status NOT IN ('queued', 'running', 'waiting') THEN
        RETURN QUERY SELECT 'ended'::text, v_status, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    SELECT r.status INTO v_round FROM rounds r WHERE r.session_id = p_session AND r.number = p_round;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_round'::text, NULL::text, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    IF v_round <> 'running' THEN
        RETURN QUERY SELECT 'round_not_running'::text, v_round, NULL::bigint, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    IF cardinality(p_artifacts) > 0 THEN
        SELECT a.id INTO v_missing FROM unnest(p_artifacts) WITH ORDINALITY AS a(id, ord)
            WHERE NOT EXISTS (SELECT 1 FROM artifacts x WHERE x.session_id = p_session
                AND x.sha256 = a.id AND x.step IN (0, p_step))
            ORDER BY a.ord LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT 'missing_artifact'::text, v_missing, NULL::bigint, NULL::jsonb, NULL::jsonb;
            RETURN;
        END IF;
    END IF;

    INSERT INTO steps (session_id, step, round, round_step, agent_name, agent_kind, state_before,
        state_after, subtask, observation, thought, plan, comment, status, actions, phases, cost,
        input_tokens, output_tokens, started_at, finished_at, extra, content_hash, recorded_at)
    VALUES (p_session, p_step, p_round, p_round_step, p_agent_name, p_agent_kind, p_state_before,
        p_state_after, p_subtask, p_observation, p_thought, p_plan, p_comment, p_status, p_actions,
        p_phases, p_cost, p_input_tokens, p_output_tokens, p_started_at, p_finished_at, p_extra,
        p_content_hash, p_at);
    INSERT INTO memory_items (session_id, step, agent_name, item)
        VALUES (p_session, p_step, p_agent_name, p_memory);
    WITH written AS (
        INSERT INTO blackboard (session_id, kind, idx, value, artifact_id, step, created_at)
        SELECT p_session, b.kind,
            COALESCE((SELECT MAX(x.idx) FROM blackboard x WHERE x.session_id = p_session AND x.kind = b.kind), -1)
                + row_number() OVER (PARTITION BY b.kind ORDER BY b.ord),
            b.value, b.artifact_id, p_step, p_at
        FROM unnest(p_board_kinds, p_board_values, p_board_artifacts) WITH ORDINALITY
            AS b(kind, value, artifact_id, ord)
        RETURNING blackboard.kind, blackboard.idx, blackboard.value, blackboard.artifact_id)
    SELECT COALESCE(jsonb_agg(jsonb_build_array(w.kind, w.idx, w.value, w.artifact_id)
        ORDER BY w.kind, w.idx), '[]'::jsonb) INTO v_board FROM written w;
    UPDATE rounds SET steps = steps + 1 WHERE session_id = p_session AND number = p_round;
    UPDATE sessions SET last_seq = last_seq + v_events, steps = steps + 1, cost = cost + p_cost,
        input_tokens = input_tokens + p_input_tokens, output_tokens = output_tokens + p_output_tokens,
        updated_at = p_at
        WHERE id = p_session RETURNING last_seq INTO v_seq;
    PERFORM pg_notify('ufo_session_events', p_session::text || ':' || v_seq::text);
    INSERT INTO events (session_id, seq, kind, payload, step, round, created_at)
        SELECT p_session, v_seq - v_events + e.ord, e.kind, e.payload, e.step, e.round, p_at
        FROM unnest(p_event_kinds, p_event_payloads, p_event_steps, p_event_rounds) WITH ORDINALITY
            AS e(kind, payload, step, round, ord);
    IF cardinality(p_artifacts) > 0 THEN
        UPDATE artifacts a SET step = p_step WHERE a.session_id = p_session AND a.sha256 = ANY (p_artifacts)
            AND a.step = 0 AND NOT EXISTS (SELECT 1 FROM artifacts b WHERE b.session_id = p_session
                AND b.sha256 = a.sha256 AND b.step = p_step);
        SELECT jsonb_agg(jsonb_build_array(a.kind, a.sha256, a.content_type, a.metadata, bl.size)
                ORDER BY a.created_at, a.kind)
            INTO v_artifacts
            FROM artifacts a JOIN artifact_blobs bl ON bl.sha256 = a.sha256
            WHERE a.session_id = p_session AND a.step = p_step;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, v_seq, v_board, v_artifacts;
END
$$;

-- Group commit: several steps (of any sessions) in one call and one transaction, so concurrent writers share
-- a round trip, a commit and its WAL flush. Step i's scalars are element i of the p_* arrays; its blackboard
-- entries, events and artifact ids are the slices [first[i]:last[i]] of theirs (first > last: none). Each
-- step gets its own outcome, as from ufo_record_step (a refused step writes nothing and does not affect the
-- others). The caller orders the steps by session id, so concurrent batches lock session rows in one order.
CREATE FUNCTION ufo_record_steps(
    p_session UUID[], p_step BIGINT[], p_round BIGINT[], p_round_step BIGINT[], p_agent_name TEXT[],
    p_agent_kind TEXT[], p_state_before TEXT[], p_state_after TEXT[], p_subtask TEXT[], p_observation TEXT[],
    p_thought TEXT[], p_plan JSONB[], p_comment TEXT[], p_status TEXT[], p_actions JSONB[], p_phases JSONB[],
    p_cost DOUBLE PRECISION[], p_input_tokens BIGINT[], p_output_tokens BIGINT[], p_started_at TIMESTAMPTZ[],
    p_finished_at TIMESTAMPTZ[], p_extra JSONB[], p_content_hash BYTEA[], p_at TIMESTAMPTZ[], p_memory JSONB[],
    p_lease_owner TEXT[],
    p_board_first INT[], p_board_last INT[], p_board_kinds TEXT[], p_board_values JSONB[],
    p_board_artifacts TEXT[],
    p_event_first INT[], p_event_last INT[], p_event_kinds TEXT[], p_event_payloads JSONB[],
    p_event_steps BIGINT[], p_event_rounds BIGINT[],
    p_artifact_first INT[], p_artifact_last INT[], p_artifacts TEXT[])
RETURNS TABLE (r_index INT, r_outcome TEXT, r_detail TEXT, r_last_seq BIGINT, r_board JSONB, r_artifacts JSONB)
LANGUAGE plpgsql AS $$
DECLARE
    b1 INT; b2 INT; e1 INT; e2 INT; a1 INT; a2 INT;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_session), 0) LOOP
        b1 := p_board_first[i]; b2 := p_board_last[i];
        e1 := p_event_first[i]; e2 := p_event_last[i];
        a1 := p_artifact_first[i]; a2 := p_artifact_last[i];
        RETURN QUERY SELECT i, o.r_outcome, o.r_detail, o.r_last_seq, o.r_board, o.r_artifacts
        FROM ufo_record_step(p_session[i], p_step[i], p_round[i], p_round_step[i], p_agent_name[i],
            p_agent_kind[i], p_state_before[i], p_state_after[i], p_subtask[i], p_observation[i],
            p_thought[i], p_plan[i], p_comment[i], p_status[i], p_actions[i], p_phases[i], p_cost[i],
            p_input_tokens[i], p_output_tokens[i], p_started_at[i], p_finished_at[i], p_extra[i],
            p_content_hash[i], p_at[i], p_memory[i],
            coalesce(p_board_kinds[b1:b2], '{}'), coalesce(p_board_values[b1:b2], '{}'),
            coalesce(p_board_artifacts[b1:b2], '{}'),
            coalesce(p_event_kinds[e1:e2], '{}'), coalesce(p_event_payloads[e1:e2], '{}'),
            coalesce(p_event_steps[e1:e2], '{}'), coalesce(p_event_rounds[e1:e2], '{}'),
            p_lease_owner[i], coalesce(p_artifacts[a1:a2], '{}')) AS o;
    END LOOP;
END
$$;
