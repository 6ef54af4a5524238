-- Queries and updates: requests from clients that a worker answers from the
-- workflow's state. A query never touches the history; an update writes
-- UpdateAccepted once its validator passed, and UpdateCompleted when its handler
-- returned (functions/messages.sql, docs/internals.md "Queries and updates").
-- A row lives until expires_at (the client's deadline), then the cleaner deletes it.

CREATE TABLE harvest.query_requests (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    arg jsonb NOT NULL DEFAULT 'null'::jsonb,
    update_id text,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    answer jsonb,
    error jsonb,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    claimed_by text,
    lease_expires_at timestamptz,
    answered_at timestamptz,
    -- The W3C traceparent of the client's update span (tracing on): UpdateAccepted carries
    -- it, and the workflow task that runs the handler links to it.
    traceparent text,
    -- The workers that claimed it without having its run's workflow or the handler (a rolling
    -- deploy's old ones: release_query_request), the latest last: their claims skip it. (While
    -- it is pending again, error holds the answer a decliner gave, if no worker is left.)
    unknown_to jsonb NOT NULL DEFAULT '[]'::jsonb,
    CONSTRAINT query_requests_pkey PRIMARY KEY (id),
    CONSTRAINT query_requests_kind_check CHECK (kind IN ('query', 'update')),
    CONSTRAINT query_requests_status_check CHECK (
        status IN ('pending', 'running', 'waiting', 'accepted', 'completed', 'failed', 'rejected')
    ),
    CONSTRAINT query_requests_update_id_check CHECK ((kind = 'update') = (update_id IS NOT NULL)),
    CONSTRAINT query_requests_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

-- The claim path: open requests of a queue, oldest first.
CREATE INDEX query_requests_claimable
ON harvest.query_requests (queue, id)
WHERE status IN ('pending', 'running');

-- One live request per update id and run: asking again attaches to it.
CREATE UNIQUE INDEX query_requests_update
ON harvest.query_requests (execution_id, update_id)
WHERE kind = 'update';

-- Requests that wait for their run's first workflow task (status 'waiting': a worker found no
-- completed workflow task to read the state of, harvest.wait_for_first_workflow_task): each
-- claim (harvest.claim_query_requests) sets those whose run has decided or ended pending again,
-- one scan of this index, empty but for such runs.
CREATE INDEX query_requests_waiting
ON harvest.query_requests (execution_id)
WHERE status = 'waiting';

-- The cleaner.
CREATE INDEX query_requests_expires
ON harvest.query_requests (expires_at);
