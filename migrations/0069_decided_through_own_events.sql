-- 0069: a decision's own events count as read by the worker that decided it.
-- harvest._append_events takes p_own_events (its decided_through then covers the
-- decision's own events, which the next claim of the run leaves out: docs/performance.md,
-- "Fan-out row, twelfth cut"). The new signature is installed with the functions, after
-- the migrations; the old one goes here (a call with six arguments would match both).
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint, boolean);
