-- Clients waiting for a run's result (handle.result()): a closing run notifies
-- harvest_done only when one is waiting. Unlogged: a hint, not data.

CREATE UNLOGGED TABLE harvest.result_waiters (
    execution_id uuid NOT NULL,
    waiter_id uuid NOT NULL,
    since timestamptz NOT NULL,
    CONSTRAINT result_waiters_pkey PRIMARY KEY (execution_id, waiter_id)
);
