-- Artifact bytes live only in the blob store (issue 30): PutBlob first, then a step references the blob.
-- Before this migration runs, the service has moved the bytes any artifact_blobs row still carried (rows
-- written before 0008) into its blob store and set them NULL (services/session/src/store/migrate.rs,
-- docs/blob-store.md); a row still carrying bytes stops the migration instead of losing them. The column
-- goes, with the ufo_record_steps overloads that wrote it or linked artifacts put earlier (PutArtifact is
-- gone); the one left takes each step's blob references.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM artifact_blobs WHERE data IS NOT NULL) THEN
        RAISE EXCEPTION 'artifact_blobs rows still carry bytes: start ufo-session (it moves them into the '
            'blob store before this migration) instead of running the migrations alone';
    END IF;
END
$$;

DROP FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[], INT[], INT[], TEXT[]);
DROP FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[], INT[], INT[], TEXT[],
    INT[], INT[], TEXT[], TEXT[], TEXT[], JSONB[], BYTEA[]);
DROP FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[], INT[], INT[], TEXT[],
    INT[], INT[], TEXT[], TEXT[], TEXT[], JSONB[], BYTEA[], BIGINT[]);

ALTER TABLE artifact_blobs DROP CONSTRAINT artifact_blobs_size_check;
ALTER TABLE artifact_blobs DROP COLUMN data;
ALTER TABLE artifact_blobs ADD CONSTRAINT artifact_blobs_size_check CHECK (size >= 0);

-- Records steps (group commit, services/session/src/store/postgres/batch.rs): each step through
-- ufo_record_step (migration 0003, its p_artifacts always empty now), then, when written, its artifacts:
-- a blob row (hash and size, once per content) and a reference from the step for each of
-- [p_new_first[i]:p_new_last[i]] of p_new_*.
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
    p_new_first INT[], p_new_last INT[], p_new_kinds TEXT[], p_new_sha256 TEXT[], p_new_types TEXT[],
    p_new_metadata JSONB[], p_new_size BIGINT[])
RETURNS TABLE (r_index INT, r_outcome TEXT, r_detail TEXT, r_last_seq BIGINT, r_board JSONB, r_artifacts JSONB)
LANGUAGE plpgsql AS $$
DECLARE
    b1 INT; b2 INT; e1 INT; e2 INT; n1 INT; n2 INT;
    o RECORD;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_session), 0) LOOP
        b1 := p_board_first[i]; b2 := p_board_last[i];
        e1 := p_event_first[i]; e2 := p_event_last[i];
        n1 := p_new_first[i]; n2 := p_new_last[i];
        SELECT * INTO o FROM ufo_record_step(p_session[i], p_step[i], p_round[i], p_round_step[i],
            p_agent_name[i], p_agent_kind[i], p_state_before[i], p_state_after[i], p_subtask[i],
            p_observation[i], p_thought[i], p_plan[i], p_comment[i], p_status[i], p_actions[i], p_phases[i],
            p_cost[i], p_input_tokens[i], p_output_tokens[i], p_started_at[i], p_finished_at[i], p_extra[i],
            p_content_hash[i], p_at[i], p_memory[i],
            coalesce(p_board_kinds[b1:b2], '{}'), coalesce(p_board_values[b1:b2], '{}'),
            coalesce(p_board_artifacts[b1:b2], '{}'),
            coalesce(p_event_kinds[e1:e2], '{}'), coalesce(p_event_payloads[e1:e2], '{}'),
            coalesce(p_event_steps[e1:e2], '{}'), coalesce(p_event_rounds[e1:e2], '{}'),
            p_lease_owner[i], '{}'::TEXT[]);
        IF o.r_outcome = 'written' AND n1 <= n2 THEN
            INSERT INTO artifact_blobs (sha256, size, created_at)
                SELECT p_new_sha256[j], p_new_size[j], p_at[i]
                FROM generate_series(n1, n2) AS j
                ON CONFLICT (sha256) DO NOTHING;
            INSERT INTO artifacts (session_id, step, kind, sha256, content_type, metadata, created_at)
                SELECT p_session[i], p_step[i], p_new_kinds[j], p_new_sha256[j], p_new_types[j],
                    p_new_metadata[j], p_at[i]
                FROM generate_series(n1, n2) AS j
                ON CONFLICT (session_id, step, kind, sha256) DO NOTHING;
            SELECT jsonb_agg(jsonb_build_array(a.kind, a.sha256, a.content_type, a.metadata, bl.size)
                    ORDER BY a.created_at, a.kind)
                INTO o.r_artifacts
                FROM artifacts a JOIN artifact_blobs bl ON bl.sha256 = a.sha256
                WHERE a.session_id = p_session[i] AND a.step = p_step[i];
        END IF;
        r_index := i; r_outcome := o.r_outcome; r_detail := o.r_detail; r_last_seq := o.r_last_seq;
        r_board := o.r_board; r_artifacts := o.r_artifacts;
        RETURN NEXT;
    END LOOP;
END
$$;

ALTER FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[],
    INT[], INT[], TEXT[], TEXT[], TEXT[], JSONB[], BIGINT[])
    SET plan_cache_mode = force_generic_plan;
