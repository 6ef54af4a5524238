-- 0002: child workflows (parent linkage and close policy), continue-as-new
-- lineage, workflow timeouts, and relay rows for cross-execution effects.

ALTER TABLE harvest.executions
ADD COLUMN parent_seq integer,
ADD COLUMN parent_close_policy text NOT NULL DEFAULT 'terminate',
ADD COLUMN continued_from uuid,
ADD COLUMN execution_timeout_at timestamptz,
ADD COLUMN timeout_at timestamptz,
ADD CONSTRAINT executions_parent_close_policy_check CHECK (
    parent_close_policy IN ('terminate', 'request_cancel', 'abandon')
);

CREATE INDEX executions_timeout
ON harvest.executions (timeout_at)
WHERE status = 'RUNNING' AND timeout_at IS NOT NULL;

CREATE TABLE harvest.relays (
    id bigint GENERATED ALWAYS AS IDENTITY,
    target_execution_id uuid NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    CONSTRAINT relays_pkey PRIMARY KEY (id),
    CONSTRAINT relays_kind_check CHECK (kind IN ('child_closed', 'parent_closed'))
);

-- start_workflow gained timeout parameters; drop the old signature so the
-- re-applied functions/start.sql does not leave an ambiguous overload behind.
DROP FUNCTION IF EXISTS harvest.start_workflow(text, jsonb, text, text, text, text, jsonb, integer, uuid, integer);
