-- The event stream (sql/event_streams.sql, docs/event-streams.md): every event of this
-- database in global_id order, read by one listening connection per process
-- (harvest/web/streams.py) that harvest_events wakes. The reader, not the writer, does
-- the work: an append costs one probe of the listener table, and a NOTIFY only while a
-- process listens.

-- The event stream's listeners that count: a heartbeat within 30 s (a process that stopped
-- heartbeating stops the notifications; heartbeat_event_stream deletes its row after a
-- minute). The one statement of the rule for every notifying append (_notify_events,
-- core.sql _insert_events, start.sql _start_plain_batch): a SQL set-returning function, STABLE,
-- which the planner inlines into the query that reads it, so it costs no call of its own.
CREATE OR REPLACE FUNCTION harvest._live_event_listeners()
RETURNS SETOF harvest.event_stream_listeners
LANGUAGE sql STABLE
AS $$
    SELECT * FROM harvest.event_stream_listeners AS l WHERE l.heartbeat_at > now() - interval '30 seconds';
$$;

-- Wake the event stream's listeners, if any process listens (a fresh heartbeat:
-- _live_event_listeners): NOTIFY takes a cluster-wide lock at commit, so an engine nobody
-- streams from skips it. Postgres folds the identical notifications of one transaction into one.
CREATE OR REPLACE FUNCTION harvest._notify_events(p_execution_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM harvest._live_event_listeners()) THEN
        PERFORM pg_notify('harvest_events', p_execution_id::text);
    END IF;
END;
$$;

-- A listening process says it still listens (every 10 s; a row older than 30 s stops
-- the notifications, and is deleted here after a minute). Wall-clock time: liveness of a
-- process, not engine time, so the test clock does not move it.
CREATE OR REPLACE FUNCTION harvest.heartbeat_event_stream(p_listener_id text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_listener_id IS NULL OR btrim(p_listener_id) = '' OR length(p_listener_id) > 200 THEN
        RAISE EXCEPTION 'listener id "%" is empty or longer than 200 characters', coalesce(p_listener_id, '')
            USING ERRCODE = 'HR001', HINT = 'pass a process-unique id such as host:pid:random';
    END IF;
    DELETE FROM harvest.event_stream_listeners AS l WHERE l.heartbeat_at < now() - interval '1 minute';
    -- The row of this id and the caller's login (login defaults to session_user): another
    -- login's row of the same id is not refreshed, nor taken over (sql/event_streams.sql).
    INSERT INTO harvest.event_stream_listeners (listener_id, heartbeat_at) VALUES (p_listener_id, now())
    ON CONFLICT (listener_id, login) DO UPDATE SET heartbeat_at = excluded.heartbeat_at;
END;
$$;

-- A listening process stops listening: its login's row only (a reader can read every
-- listener id; deleting another process's row would stop its notifications).
CREATE OR REPLACE FUNCTION harvest.stop_event_stream(p_listener_id text)
RETURNS boolean
LANGUAGE sql
AS $$
    WITH gone AS (
        DELETE FROM harvest.event_stream_listeners AS l
        WHERE l.listener_id = p_listener_id AND l.login = session_user
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM gone);
$$;

-- Events after global id p_after_global_id in global_id order, at most p_limit
-- (1..10000), of one execution when p_execution_id is given. With p_max_bytes, each with its
-- size (bytes: its event_data as JSON text, what a reader holds of it), and the page ends with
-- the event that brings its total to p_max_bytes or past it (the first event always comes,
-- whatever its size), so a page of large events is a few megabytes, not p_limit of them: a
-- reader whose page has fewer than p_limit events and under p_max_bytes has read to the end.
-- A row's size is taken in the loop, not the query, so rows fetched ahead (the loop's 10) but
-- never returned are not read whole. Without it (NULL) the page is one query and no event is
-- sized (bytes NULL): sizing turned each event's data into text a second time, once here and
-- once for the answer (500 events of 1 MiB: about 1 s, against 0.3 ms). Global ids are taken
-- at insert, so a committed event can have a smaller id than one already read: the reader
-- skips a gap only once get_event_horizon says it is final.
CREATE OR REPLACE FUNCTION harvest.list_events(
    p_after_global_id bigint DEFAULT 0,
    p_limit integer DEFAULT 500,
    p_execution_id uuid DEFAULT NULL,
    p_max_bytes bigint DEFAULT NULL
)
RETURNS TABLE (
    global_id bigint, execution_id uuid, event_id bigint, event_type text, event_data jsonb,
    created_at timestamptz, workflow_name text, workflow_id text, bytes integer
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_total bigint := 0;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_page_bytes(p_max_bytes);
    IF p_max_bytes IS NULL THEN
        RETURN QUERY
        SELECT ev.global_id, ev.execution_id, ev.event_id, ev.event_type, ev.event_data, ev.created_at,
               e.workflow_name, e.workflow_id, NULL::integer
        FROM harvest.events AS ev
        JOIN harvest.executions AS e ON e.id = ev.execution_id
        WHERE ev.global_id > coalesce(p_after_global_id, 0)
          AND (p_execution_id IS NULL OR ev.execution_id = p_execution_id)
        ORDER BY ev.global_id
        LIMIT p_limit;
        RETURN;
    END IF;
    FOR global_id, execution_id, event_id, event_type, event_data, created_at, workflow_name, workflow_id IN
        SELECT ev.global_id, ev.execution_id, ev.event_id, ev.event_type, ev.event_data, ev.created_at,
               e.workflow_name, e.workflow_id
        FROM harvest.events AS ev
        JOIN harvest.executions AS e ON e.id = ev.execution_id
        WHERE ev.global_id > coalesce(p_after_global_id, 0)
          AND (p_execution_id IS NULL OR ev.execution_id = p_execution_id)
        ORDER BY ev.global_id
        LIMIT p_limit
    LOOP
        bytes := octet_length(event_data::text);
        RETURN NEXT;
        v_total := v_total + bytes;
        EXIT WHEN v_total >= p_max_bytes;
    END LOOP;
END;
$$;

-- What the stream reader needs to tell a gap that will fill from one that never will:
-- the last global id handed out, then (later statements, so later snapshots) the oldest
-- transaction still running and a bound above every transaction id assigned by then.
-- Every transaction that took a global id up to last_global_id had its transaction id
-- before (an append writes its execution row first), so below that bound; once a later
-- call's xmin reaches it, each of them has ended and every id up to last_global_id is final.
-- The bound is not the snapshot's xmax alone: xmax is one past the newest transaction
-- that has *ended*, and a running transaction assigned after it (a lone writer, the newest
-- of the server) is below no xmax and lowers no xmin, so a horizon of xmax would call its
-- id final while it still runs, and the reader would pass over its event for good. The
-- running transactions' own ids come from their locks (pg_locks: every top-level
-- transaction holds one on its id, a prepared one too; readable by every role), each
-- widened to 64 bits against xmax, which lies within 2^31 of every running id.
CREATE OR REPLACE FUNCTION harvest.get_event_horizon(
    OUT last_global_id bigint, OUT xmin bigint, OUT xmax bigint
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_snapshot pg_snapshot;
    v_newest_running bigint;
BEGIN
    last_global_id := coalesce(pg_sequence_last_value('harvest.events_global_id_seq'), 0);
    SELECT pg_current_snapshot() INTO v_snapshot;
    xmin := pg_snapshot_xmin(v_snapshot)::text::bigint;
    xmax := pg_snapshot_xmax(v_snapshot)::text::bigint;
    -- Ids at or after xmax (a 32-bit distance under 2^31): running, and newer than any ended.
    SELECT max(xmax + d.distance) INTO v_newest_running
    FROM pg_catalog.pg_locks AS l
    CROSS JOIN LATERAL (
        SELECT ((l.transactionid::text::bigint - xmax) % 4294967296 + 4294967296) % 4294967296 AS distance
    ) AS d
    WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
      AND d.distance < 2147483648;
    xmax := greatest(xmax, v_newest_running + 1);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.heartbeat_event_stream IS
'A process following the event stream says it listens (every 10 s): while one does, event appends notify '
'harvest_events; HR001 for a blank id. For stream readers (role harvest_reader).';
COMMENT ON FUNCTION harvest.stop_event_stream IS
'A process stops following the event stream; true when it was registered by the caller''s login (another '
'login''s row of the same id stays). For stream readers (role harvest_reader).';
COMMENT ON FUNCTION harvest.list_events IS
'Events after a global id, in global id order, optionally of one execution, with their workflow name and id '
'and, with p_max_bytes, size in bytes; p_limit 1..10000 events, and p_max_bytes (NULL: no bound, no sizes) '
'ends a page at the event that reaches it (HR001 for a bad one). For stream readers and operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_event_horizon IS
'The last global event id handed out and the transaction horizon the stream reader uses to tell a final gap from '
'an event still being written: xmin, the oldest transaction running, and xmax, a bound above every transaction id '
'assigned (running ones included); once a later call''s xmin reaches a call''s xmax, every id up to its '
'last_global_id is final. For stream readers (role harvest_reader).';
