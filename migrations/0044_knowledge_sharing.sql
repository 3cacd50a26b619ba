-- Issue 33: an admin shares one owner's experience or demonstration with named callers or with everyone
-- (`shared_with`: a JSON array of caller names, sorted, without the owner; `shared_everyone`), and a
-- finished task's experience may carry a model-written summary beside the deterministic one in `body`
-- (`model_summary`, "" when none was written). Updates fire 0039's trigger like any write, so every
-- replica's in-memory index follows a share, an unshare and a summary.
ALTER TABLE knowledge ADD COLUMN shared_with JSONB NOT NULL DEFAULT '[]';
ALTER TABLE knowledge ADD COLUMN shared_everyone BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE knowledge ADD COLUMN model_summary TEXT NOT NULL DEFAULT '';
