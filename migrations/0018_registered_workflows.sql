-- 0018: the workflow names the workers of each queue registered, so a start of a name
-- no worker registered on that queue is refused up front (functions/start.sql, HR010).
-- Empty after the upgrade: a queue with no registration is not checked until its
-- workers restart on this version and register their names.

CREATE TABLE harvest.registered_workflows (
    queue text NOT NULL,
    workflow_name text NOT NULL,
    first_registered_at timestamptz NOT NULL,
    last_registered_at timestamptz NOT NULL,
    CONSTRAINT registered_workflows_pkey PRIMARY KEY (queue, workflow_name)
);
