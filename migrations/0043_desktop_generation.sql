-- Issue 36: the generation of the connection that last registered a desktop. A dial-out executor that
-- reconnects gets a greater generation; a registration or refresh below the stored one (from a connection
-- the new one replaced, landing late) is refused instead of overwriting the newer connection's labels.
-- 0: only unfenced registrations (declared executors) so far.
ALTER TABLE desktops ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
