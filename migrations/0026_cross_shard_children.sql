-- 0026: cross-shard children (ChildPlacement). A child placed on another shard
-- than its parent's is recorded on the parent's shard in
-- harvest.cross_shard_children (sql/cross_shard_children.sql), which the
-- cross-shard pump drives (functions/cross_shard.sql); harvest._start_insert takes
-- the execution id a parent minted for its child's shard (functions/start.sql), so
-- its earlier form goes.

DROP FUNCTION IF EXISTS harvest._start_insert(
    text, jsonb, text, text, jsonb, integer, uuid, integer, double precision, double precision, jsonb, text, text
);

CREATE TABLE harvest.cross_shard_children (
    child_execution_id uuid NOT NULL,
    parent_execution_id uuid NOT NULL,
    parent_seq integer NOT NULL,
    target_shard integer NOT NULL,
    workflow_name text NOT NULL,
    workflow_id text NOT NULL,
    queue text NOT NULL,
    input jsonb NOT NULL,
    parent_close_policy text NOT NULL,
    status text NOT NULL DEFAULT 'starting',
    cancel_requested boolean NOT NULL DEFAULT false,
    attempts integer NOT NULL DEFAULT 0,
    last_attempt_at timestamptz,
    last_error text,
    next_attempt_at timestamptz,
    created_at timestamptz NOT NULL,
    CONSTRAINT cross_shard_children_pkey PRIMARY KEY (child_execution_id),
    CONSTRAINT cross_shard_children_status_check CHECK (status IN ('starting', 'running')),
    CONSTRAINT cross_shard_children_policy_check CHECK (
        parent_close_policy IN ('terminate', 'request_cancel', 'abandon')
    ),
    CONSTRAINT cross_shard_children_target_shard_range CHECK (target_shard BETWEEN 0 AND 65535)
);

-- The parent's close finds its remote children (functions/core.sql, _close_execution).
CREATE INDEX cross_shard_children_parent ON harvest.cross_shard_children (parent_execution_id);
