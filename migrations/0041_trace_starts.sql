-- 0041: traces of the starts no client makes (docs/observability.md): a schedule's firing
-- keeps the W3C traceparent of the scheduler's harvest.schedule.fire span (a buffered firing
-- starts its run under it later), a deferred start (throttle, debounce, batch) keeps its
-- caller's, a DAG trigger takes its caller's, and a worker claims an update request with its
-- client's span (the validation span's parent).
ALTER TABLE harvest.schedule_firings ADD COLUMN traceparent text;
ALTER TABLE harvest.pending_starts ADD COLUMN traceparent text;

-- Each of these takes a traceparent (or returns one): drop the old signatures so the
-- functions/ files create the new ones, not overloads beside them.
DROP FUNCTION IF EXISTS harvest.fire_schedule(
    bigint, bigint, timestamptz[], timestamptz, timestamptz, timestamptz, timestamptz, integer
);
DROP FUNCTION IF EXISTS harvest._fire_slot(harvest.schedules, timestamptz, text, text);
DROP FUNCTION IF EXISTS harvest._start_gate(
    text, jsonb, jsonb, text, text, text, jsonb, integer, double precision, double precision
);
DROP FUNCTION IF EXISTS harvest._start_defer(
    text, jsonb, jsonb, text, text, text, text, jsonb, integer, double precision, double precision
);
DROP FUNCTION IF EXISTS harvest.claim_query_requests(text, text[], integer, double precision);
DROP FUNCTION IF EXISTS harvest.trigger_dag(text, jsonb, text, text);
