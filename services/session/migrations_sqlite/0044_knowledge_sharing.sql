-- SQLite dialect of migrations/0044: sharing of experiences and demonstrations (a JSON array of caller
-- names, and everyone), and the optional model-written summary of an experience.
ALTER TABLE knowledge ADD COLUMN shared_with TEXT NOT NULL DEFAULT '[]';
ALTER TABLE knowledge ADD COLUMN shared_everyone BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE knowledge ADD COLUMN model_summary TEXT NOT NULL DEFAULT '';
