-- 0039: trace context (docs/observability.md): a W3C traceparent captured where a run,
-- a child, a continue-as-new successor or a signal is made, so one trace spans the whole
-- workflow across processes and shards.

-- A cross-shard child carries its parent's child.start span to its own shard; an update
-- request its client's update span.
ALTER TABLE harvest.cross_shard_children ADD COLUMN traceparent text;
ALTER TABLE harvest.query_requests ADD COLUMN traceparent text;

-- Each of these takes a traceparent (or returns one): drop the old signatures so the
-- functions/ files create the new ones, not overloads beside them.
DROP FUNCTION IF EXISTS harvest.start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, uuid, integer, double precision, double precision, boolean
);
DROP FUNCTION IF EXISTS harvest._start_insert(
    text, jsonb, text, text, jsonb, integer, uuid, integer, double precision, double precision, jsonb, text, text, uuid
);
DROP FUNCTION IF EXISTS harvest._continue_as_new(harvest.executions, jsonb, bigint, jsonb);
DROP FUNCTION IF EXISTS harvest.claim_cross_shard_children(integer, double precision);
DROP FUNCTION IF EXISTS harvest.start_cross_shard_child(uuid, uuid, integer, text, text, text, jsonb, text);
DROP FUNCTION IF EXISTS harvest.signal_workflow(uuid, text, jsonb, text);
DROP FUNCTION IF EXISTS harvest.signal_with_start(text, text, text, jsonb, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS harvest.request_update(uuid, text, jsonb, text, double precision);
DROP FUNCTION IF EXISTS harvest.update_with_start(text, text, text, jsonb, jsonb, text, text, double precision, jsonb);
