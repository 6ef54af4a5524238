-- Clients waiting for a run's result (handle.result()): a closing run notifies
-- harvest_done only when one is waiting. Unlogged: a hint, not data. A mark belongs to
-- the login that made it (login: session_user, which an entry point running as the owner
-- still sees as the caller's): only that login deletes it (stop_waiting_for_result), besides
-- the run's close and retention; the same ids marked by another login are another row.

CREATE UNLOGGED TABLE harvest.result_waiters (
    execution_id uuid NOT NULL,
    waiter_id uuid NOT NULL,
    since timestamptz NOT NULL,
    login text NOT NULL DEFAULT session_user,
    CONSTRAINT result_waiters_pkey PRIMARY KEY (execution_id, waiter_id, login)
);
-- A wait that ends drops its marks by waiter id (stop_waiting_for_result): one probe here,
-- not a scan of every client's marks (the key leads with the run, for the close's delete).
CREATE INDEX result_waiters_waiter ON harvest.result_waiters (waiter_id);
