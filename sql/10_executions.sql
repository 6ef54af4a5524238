-- Executions and their append-only event log.

CREATE TABLE harvest.executions (
    id uuid NOT NULL,
    workflow_name text NOT NULL,
    workflow_id text NOT NULL,
    status text NOT NULL DEFAULT 'RUNNING',
    task_queue text NOT NULL DEFAULT 'default',
    input jsonb NOT NULL DEFAULT '[]'::jsonb,
    output jsonb,
    failure jsonb,
    search_attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    parent_id uuid,
    last_event_id bigint NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    completed_at timestamptz,
    parent_seq integer,
    parent_close_policy text NOT NULL DEFAULT 'terminate',
    continued_from uuid,
    -- The whole chain's deadline (carried across continue-as-new) and this run's.
    execution_timeout_at timestamptz,
    timeout_at timestamptz,
    CONSTRAINT executions_pkey PRIMARY KEY (id),
    CONSTRAINT executions_status_check CHECK (status IN (
        'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
        'CONTINUED_AS_NEW'
    )),
    CONSTRAINT executions_search_attributes_object CHECK (
        jsonb_typeof(search_attributes) = 'object'
    ),
    CONSTRAINT executions_parent_close_policy_check CHECK (
        parent_close_policy IN ('terminate', 'request_cancel', 'abandon')
    )
);

-- One live run per business key; terminal runs keep their rows for history.
CREATE UNIQUE INDEX executions_active_workflow_id
ON harvest.executions (workflow_name, workflow_id)
WHERE status = 'RUNNING';

CREATE INDEX executions_workflow_id_latest
ON harvest.executions (workflow_name, workflow_id, created_at DESC);

CREATE INDEX executions_status_created
ON harvest.executions (status, created_at DESC, id);

CREATE INDEX executions_parent
ON harvest.executions (parent_id)
WHERE parent_id IS NOT NULL;

CREATE INDEX executions_timeout
ON harvest.executions (timeout_at)
WHERE status = 'RUNNING' AND timeout_at IS NOT NULL;

CREATE TABLE harvest.events (
    execution_id uuid NOT NULL,
    event_id bigint NOT NULL,
    event_type text NOT NULL,
    event_data jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (execution_id, event_id),
    CONSTRAINT events_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);
