-- Issue 35, parked tasks free their slot: a task waiting for a person drops its lease and waits here
-- instead of in a runner. parked_for says for what ('question' or 'approval'; NULL = not parked);
-- parked_until is when the wait's timeout fallback is due (the task is claimable again from then on, or as
-- soon as an answer or a decision wakes it).
ALTER TABLE sessions ADD COLUMN parked_for TEXT;
ALTER TABLE sessions ADD COLUMN parked_until TIMESTAMPTZ;
CREATE INDEX sessions_parked_idx ON sessions (parked_until) WHERE parked_for IS NOT NULL;
