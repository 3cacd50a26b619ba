-- SQLite dialect of migrations/0039: the knowledge rows' change log for the in-memory retrieval index.
-- SQLite has one writer at a time, so the generations are in commit order without a lock.
CREATE TABLE knowledge_generation (
    single INTEGER PRIMARY KEY CHECK (single = 1),
    generation INTEGER NOT NULL
);
INSERT INTO knowledge_generation (single, generation) VALUES (1, 0);

CREATE TABLE knowledge_changes (
    generation INTEGER PRIMARY KEY,
    id BLOB NOT NULL
);

CREATE TRIGGER knowledge_changed_insert AFTER INSERT ON knowledge BEGIN
    UPDATE knowledge_generation SET generation = generation + 1;
    INSERT INTO knowledge_changes (generation, id) SELECT generation, new.id FROM knowledge_generation;
END;
CREATE TRIGGER knowledge_changed_update AFTER UPDATE ON knowledge BEGIN
    UPDATE knowledge_generation SET generation = generation + 1;
    INSERT INTO knowledge_changes (generation, id) SELECT generation, new.id FROM knowledge_generation;
END;
CREATE TRIGGER knowledge_changed_delete AFTER DELETE ON knowledge BEGIN
    UPDATE knowledge_generation SET generation = generation + 1;
    INSERT INTO knowledge_changes (generation, id) SELECT generation, old.id FROM knowledge_generation;
END;
