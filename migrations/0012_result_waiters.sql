-- 0012: clients waiting for a result mark themselves, so a closing run notifies
-- only when someone listens (NOTIFY serialises the commits that send it).
-- Unlogged: a mark is a hint for this server's life; losing it on a crash costs
-- a waiter at most its periodic re-read.

CREATE UNLOGGED TABLE harvest.result_waiters (
    execution_id uuid NOT NULL,
    waiter_id uuid NOT NULL,
    since timestamptz NOT NULL,
    CONSTRAINT result_waiters_pkey PRIMARY KEY (execution_id, waiter_id)
);
