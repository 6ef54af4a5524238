-- 0083: a result waiter's mark and an event stream listener belong to the login that made
-- them (login, session_user by default: every entry point runs as the owner, but
-- session_user is still the caller's login), and stop_waiting_for_result, wait_for_result and
-- stop_event_stream delete only the caller's own (functions/executions.sql, event_streams.sql).
-- Before, any reader could read another client's waiter or listener id and delete its rows,
-- so that client was no longer notified. The login is in the primary key: the same ids
-- marked first under another login are that login's rows, not the client's.
-- A run-less offloaded payload (a client's start input, stored before its run exists) keeps
-- the login that stored it, and set_payloads_execution hands only the caller's login's rows
-- (functions/payloads.sql): before, another login could hand them to a run of its own, and
-- they went with that run. NULL on every row stored before, and on a run's own rows.
-- (Re-runnable: IF NOT EXISTS, and the keys dropped and made again.)
ALTER TABLE harvest.result_waiters ADD COLUMN IF NOT EXISTS login text NOT NULL DEFAULT session_user;
ALTER TABLE harvest.result_waiters DROP CONSTRAINT IF EXISTS result_waiters_pkey;
ALTER TABLE harvest.result_waiters
ADD CONSTRAINT result_waiters_pkey PRIMARY KEY (execution_id, waiter_id, login);
ALTER TABLE harvest.event_stream_listeners ADD COLUMN IF NOT EXISTS login text NOT NULL DEFAULT session_user;
ALTER TABLE harvest.event_stream_listeners DROP CONSTRAINT IF EXISTS event_stream_listeners_pkey;
ALTER TABLE harvest.event_stream_listeners
ADD CONSTRAINT event_stream_listeners_pkey PRIMARY KEY (listener_id, login);
ALTER TABLE harvest.payloads ADD COLUMN IF NOT EXISTS login text;
