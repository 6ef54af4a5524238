-- Cross-shard children, on the parent's shard: the lifecycle record of a child a
-- decision placed on another shard (ChildPlacement, docs/workflows.md). The
-- decision writes the row in the same transaction as the parent's
-- ChildWorkflowStarted, instead of inserting the child here; the cross-shard pump
-- (harvest/shard/relay_pump.py) drives every edge from it: start the child on
-- target_shard (idempotent: child_execution_id is the key), pull the child's end
-- back into the parent (a pull, not a push: nothing is in flight to lose), and
-- apply the parent's close policy to the child when the parent ends first
-- (cancel_requested). A settled row is deleted, so the table is the in-flight
-- gauge (docs/sharding.md, "Cross-shard children and relays").
--
-- status: starting (not yet started on target_shard), running (started there) or
-- delivered (its end was handed to the parent: the child's shard is still to be told,
-- clear_owed_child_end, so that its retention lets the child go; migration 0101).
-- attempts, last_attempt_at and last_error are written on every step that made no
-- progress (an unreachable target shard); next_attempt_at is when the pump may
-- take the row again (a lease while it works on it, a backoff of
-- min(attempts, 6) x 5 s after a failed step).

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
    -- The W3C traceparent of the parent's child.start span (tracing on), for the
    -- child's WorkflowStarted: its spans join the root run's trace on any shard.
    traceparent text,
    CONSTRAINT cross_shard_children_pkey PRIMARY KEY (child_execution_id),
    CONSTRAINT cross_shard_children_status_check CHECK (status IN ('starting', 'running', 'delivered')),
    CONSTRAINT cross_shard_children_policy_check CHECK (
        parent_close_policy IN ('terminate', 'request_cancel', 'abandon')
    ),
    CONSTRAINT cross_shard_children_target_shard_range CHECK (target_shard BETWEEN 0 AND 65535)
);

-- The parent's close finds its remote children (functions/core.sql, _close_execution).
CREATE INDEX cross_shard_children_parent ON harvest.cross_shard_children (parent_execution_id);

-- The pump's claim order (claim_cross_shard_children, migration 0118): by when a row is due (no
-- next_attempt_at: at once), then oldest first; a claim reads the due rows only, and a running
-- child polled (leased for the poll) goes behind the rows not read since.
CREATE INDEX cross_shard_children_due
ON harvest.cross_shard_children ((coalesce(next_attempt_at, '-infinity'::timestamptz)), created_at, child_execution_id);
