-- The workflow names the workers of each queue registered (harvest.register_workflows,
-- called by every worker as it starts): a start of a name that no worker ever registered
-- on a queue that has registrations is refused up front (HR010, start.sql). A name stays
-- registered after the last worker that had it stops, so a restart or a rolling deploy
-- never refuses a start; harvest.unregister_workflow retires one.

CREATE TABLE harvest.registered_workflows (
    queue text NOT NULL,
    workflow_name text NOT NULL,
    first_registered_at timestamptz NOT NULL,
    last_registered_at timestamptz NOT NULL,
    CONSTRAINT registered_workflows_pkey PRIMARY KEY (queue, workflow_name)
);
