-- Payloads (docs/payloads.md): the default offload store and the legal holds.

-- The offload store: a payload larger than a worker's offload threshold is kept here and the
-- history holds a reference to it ({"_harvest_ref": id, "bytes": n}). data is the payload as
-- the writer's codecs left it (an encrypted envelope stays encrypted). execution_id is the run
-- that wrote it (NULL when the writer did not say), and the row goes with that run when
-- retention deletes it; erase_payloads also finds a row through the references in the run's
-- own rows. An erased row keeps its id and holds the erased marker. login is the login
-- that stored a run-less row (session_user), the only one that may hand it to a run
-- (set_payloads_execution); NULL on a run's own rows and on rows stored before 0083.
CREATE TABLE harvest.payloads (
    id uuid NOT NULL,
    execution_id uuid,
    created_at timestamptz NOT NULL,
    bytes integer NOT NULL,
    data jsonb NOT NULL,
    erased_at timestamptz,
    login text,
    CONSTRAINT payloads_pkey PRIMARY KEY (id),
    CONSTRAINT payloads_bytes_check CHECK (bytes >= 0),
    CONSTRAINT payloads_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

CREATE INDEX payloads_execution
ON harvest.payloads (execution_id)
WHERE execution_id IS NOT NULL;

-- Run-less rows, oldest first, for retention (functions/retention.sql, 0037).
CREATE INDEX payloads_runless
ON harvest.payloads (created_at)
WHERE execution_id IS NULL;

-- Legal holds: while a row is here, erase_payloads refuses the execution (HR030). Set and
-- released by admins, audited.
CREATE TABLE harvest.legal_holds (
    execution_id uuid NOT NULL,
    reason text NOT NULL,
    set_at timestamptz NOT NULL,
    set_by text NOT NULL,
    CONSTRAINT legal_holds_pkey PRIMARY KEY (execution_id)
);
