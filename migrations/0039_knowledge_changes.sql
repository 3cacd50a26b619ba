-- Issue 33: the knowledge rows' change log, which keeps every session-service replica's in-memory
-- retrieval index (services/session/src/knowledge/index.rs) in step with the rows. Every insert, update
-- and delete of a `knowledge` row bumps the single generation and logs the row's id under it, in the
-- writer's transaction. The generation row is locked by the bump until the writer commits, so
-- generations commit in order and without gaps: a reader that has applied generation G and finds G+1..H
-- in the log has seen every change up to H. Writers prune the log to the newest
-- --knowledge-changes-kept entries; a replica further behind rebuilds its index from the rows.
CREATE TABLE knowledge_generation (
    single BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (single),
    generation BIGINT NOT NULL
);
INSERT INTO knowledge_generation (single, generation) VALUES (TRUE, 0);

CREATE TABLE knowledge_changes (
    generation BIGINT PRIMARY KEY,
    id UUID NOT NULL
);

CREATE FUNCTION knowledge_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g BIGINT;
BEGIN
    UPDATE knowledge_generation SET generation = generation + 1 RETURNING generation INTO g;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO knowledge_changes (generation, id) VALUES (g, OLD.id);
    ELSE
        INSERT INTO knowledge_changes (generation, id) VALUES (g, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER knowledge_changed AFTER INSERT OR UPDATE OR DELETE ON knowledge
    FOR EACH ROW EXECUTE FUNCTION knowledge_changed();
