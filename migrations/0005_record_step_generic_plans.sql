-- The statements inside the step-recording functions are planned once per connection and reused, instead
-- of being planned again on every call. Under the default plan_cache_mode (auto) PL/pgSQL plans a
-- statement with parameters afresh for its first five executions and then keeps doing so whenever the
-- generic plan does not look cheaper than the custom ones, which for these single-row lookups and inserts
-- by primary key it never does; the planning was a sixth of the work of recording a step
-- (pgbench calling ufo_record_step: 0.75 → 0.62 ms per durable call on the 2-core machine). A setting on a
-- function holds for everything it calls, so ufo_record_steps' calls of ufo_record_step use it too.
ALTER FUNCTION ufo_record_step(UUID, BIGINT, BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, JSONB,
    TEXT, TEXT, JSONB, JSONB, DOUBLE PRECISION, BIGINT, BIGINT, TIMESTAMPTZ, TIMESTAMPTZ, JSONB, BYTEA,
    TIMESTAMPTZ, JSONB, TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], BIGINT[], BIGINT[], TEXT, TEXT[])
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[], INT[], INT[], TEXT[])
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ufo_record_steps(UUID[], BIGINT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT[], JSONB[], TEXT[], TEXT[], JSONB[], JSONB[], DOUBLE PRECISION[], BIGINT[], BIGINT[],
    TIMESTAMPTZ[], TIMESTAMPTZ[], JSONB[], BYTEA[], TIMESTAMPTZ[], JSONB[], TEXT[], INT[], INT[], TEXT[],
    JSONB[], TEXT[], INT[], INT[], TEXT[], JSONB[], BIGINT[], BIGINT[], INT[], INT[], TEXT[],
    INT[], INT[], TEXT[], TEXT[], TEXT[], JSONB[], BYTEA[])
    SET plan_cache_mode = force_generic_plan;
