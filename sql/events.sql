-- The append-only event log of each execution (functions/core.sql _append_event).

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
