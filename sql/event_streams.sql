-- The processes following the event stream (harvest/web/streams.py, `harvest events
-- tail`): one row per listening process, refreshed while it listens. An event append
-- notifies harvest_events only while a row is fresh (functions/event_streams.sql), so
-- an engine nobody streams from pays no NOTIFY, whose commit lock serialises commits.
-- A row belongs to the login that made it (login: session_user), the only one that
-- refreshes or deletes it; the same id heartbeated by another login is another row.

CREATE TABLE harvest.event_stream_listeners (
    listener_id text NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    login text NOT NULL DEFAULT session_user,
    CONSTRAINT event_stream_listeners_pkey PRIMARY KEY (listener_id, login)
);
