-- Issue 22, retention: when a session's screenshots were pruned (its steps' records are all kept; the
-- screenshot artifacts rows go, and the blobs no row references any more are swept). NULL = never pruned.
ALTER TABLE sessions ADD COLUMN images_pruned_at TIMESTAMPTZ;
