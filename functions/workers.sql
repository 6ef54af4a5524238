-- The worker registry. A worker registers on start, heartbeats on a timer (the
-- answer tells it whether an operator asked it to drain), and on shutdown
-- releases what it could not finish.

CREATE OR REPLACE FUNCTION harvest.register_worker(
    p_worker_id text, p_queues text[], p_hostname text, p_pid integer,
    p_heartbeat_interval_secs double precision DEFAULT 10, p_metadata jsonb DEFAULT '{}'::jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
BEGIN
    IF p_worker_id IS NULL OR p_worker_id = '' OR p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'a worker needs an id and at least one queue' USING ERRCODE = 'HR001';
    END IF;
    -- A 0 s interval made the worker commit thousands of heartbeats a second.
    IF NOT coalesce(p_heartbeat_interval_secs BETWEEN 0.1 AND 3600, true) THEN
        RAISE EXCEPTION 'heartbeat_interval_secs % is out of range: allowed 0.1 to 3600 seconds',
            p_heartbeat_interval_secs USING ERRCODE = 'HR001';
    END IF;
    INSERT INTO harvest.workers (id, queues, hostname, pid, started_at, last_heartbeat_at,
                                 heartbeat_interval_secs, metadata)
    VALUES (p_worker_id, p_queues, p_hostname, p_pid, v_now, v_now, coalesce(p_heartbeat_interval_secs, 10),
            coalesce(p_metadata, '{}'::jsonb))
    ON CONFLICT (id) DO UPDATE
    SET queues = excluded.queues, hostname = excluded.hostname, pid = excluded.pid,
        status = 'active', started_at = excluded.started_at,
        last_heartbeat_at = excluded.last_heartbeat_at,
        heartbeat_interval_secs = excluded.heartbeat_interval_secs, metadata = excluded.metadata,
        drain_deadline = NULL;
END;
$$;

-- Returns the worker's status ('active', 'draining', 'stopped').
CREATE OR REPLACE FUNCTION harvest.worker_heartbeat(p_worker_id text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    UPDATE harvest.workers SET last_heartbeat_at = harvest.now()
    WHERE id = p_worker_id
    RETURNING status INTO v_status;
    IF v_status IS NULL THEN
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002';
    END IF;
    RETURN v_status;
END;
$$;

-- Give back the tasks a worker holds without counting a failed attempt, so
-- another worker takes them at once. Returns how many were released.
CREATE OR REPLACE FUNCTION harvest.release_worker_tasks(p_worker_id text, p_task_ids bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
    v_queues text[];
BEGIN
    WITH released AS (
        UPDATE harvest.tasks AS t
        SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, due_at = harvest.now(),
            attempt = CASE WHEN t.kind = 'activity' THEN greatest(t.attempt - 1, 0) ELSE t.attempt END
        WHERE t.status = 'running' AND t.lease_owner = p_worker_id
          AND (p_task_ids IS NULL OR t.id = ANY(p_task_ids))
        RETURNING t.queue
    )
    SELECT count(*), array_agg(DISTINCT r.queue) INTO v_count, v_queues FROM released AS r;
    PERFORM harvest._notify_queue(q.name) FROM unnest(v_queues) AS q (name);
    RETURN v_count;
END;
$$;

-- A worker told to stop (SIGTERM, SIGINT, Worker.stop) records that it is draining
-- before it finishes its in-flight work: the same status a remote drain sets, so
-- the fleet sees it take no new work. A remote drain's deadline is kept; a stopped
-- worker stays stopped. Returns the status.
CREATE OR REPLACE FUNCTION harvest.begin_worker_drain(p_worker_id text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    UPDATE harvest.workers
    SET status = CASE WHEN status = 'active' THEN 'draining' ELSE status END,
        last_heartbeat_at = harvest.now()
    WHERE id = p_worker_id
    RETURNING status INTO v_status;
    IF v_status IS NULL THEN
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002';
    END IF;
    RETURN v_status;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.stop_worker(p_worker_id text)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_released integer;
BEGIN
    PERFORM 1 FROM harvest.workers WHERE id = p_worker_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002';
    END IF;
    v_released := harvest.release_worker_tasks(p_worker_id);
    UPDATE harvest.workers SET status = 'stopped', sleeping = false, last_heartbeat_at = harvest.now()
    WHERE id = p_worker_id;
    RETURN v_released;
END;
$$;

-- Give back one claimed task without counting a failed attempt, but only while
-- the caller's claim is the current one (an older handler cannot release a newer
-- claim of the same task). Returns whether it was released.
CREATE OR REPLACE FUNCTION harvest.release_task(p_task_id bigint, p_fencing_token bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue text;
BEGIN
    UPDATE harvest.tasks AS t
    SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, due_at = harvest.now(),
        attempt = CASE WHEN t.kind = 'activity' THEN greatest(t.attempt - 1, 0) ELSE t.attempt END
    WHERE t.id = p_task_id AND t.status = 'running' AND t.fencing_token = p_fencing_token
    RETURNING t.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM harvest._notify_queue(v_queue);
    RETURN true;
END;
$$;

-- A worker about to wait for work marks itself asleep (producers then notify its
-- queues) and clears the mark once it is busy again (producers stop notifying).
CREATE OR REPLACE FUNCTION harvest.worker_sleep(p_worker_id text, p_sleeping boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE harvest.workers SET sleeping = p_sleeping WHERE id = p_worker_id AND sleeping <> p_sleeping;
END;
$$;

-- A starting worker registers the workflow names its App can run on each queue it
-- polls; a start of a name no worker registered on a queue with registrations is
-- refused (start.sql). Registering again refreshes last_registered_at. Returns how
-- many (queue, name) pairs were new.
CREATE OR REPLACE FUNCTION harvest.register_workflows(p_queues text[], p_workflow_names text[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_new integer;
BEGIN
    IF p_queues IS NULL OR cardinality(p_queues) = 0
       OR EXISTS (SELECT 1 FROM unnest(p_queues) AS q (name) WHERE q.name IS NULL OR btrim(q.name) = '') THEN
        RAISE EXCEPTION 'register_workflows needs at least one non-empty queue' USING ERRCODE = 'HR001';
    END IF;
    IF p_workflow_names IS NULL
       OR EXISTS (SELECT 1 FROM unnest(p_workflow_names) AS n (name) WHERE n.name IS NULL OR btrim(n.name) = '') THEN
        RAISE EXCEPTION 'register_workflows needs an array of non-empty workflow names' USING ERRCODE = 'HR001';
    END IF;
    WITH registered AS (
        INSERT INTO harvest.registered_workflows AS r (queue, workflow_name, first_registered_at, last_registered_at)
        SELECT DISTINCT q.name, n.name, v_now, v_now
        FROM unnest(p_queues) AS q (name) CROSS JOIN unnest(p_workflow_names) AS n (name)
        ORDER BY q.name, n.name  -- one lock order for two workers registering at once
        ON CONFLICT (queue, workflow_name) DO UPDATE SET last_registered_at = excluded.last_registered_at
        RETURNING r.first_registered_at = v_now AS fresh
    )
    SELECT count(*) FILTER (WHERE fresh) INTO v_new FROM registered;
    RETURN v_new;
END;
$$;

-- Retire a workflow name from a queue (a workflow deleted from the code): later
-- starts of it there are refused once other names remain registered. Returns
-- whether it was registered.
CREATE OR REPLACE FUNCTION harvest.unregister_workflow(p_queue text, p_workflow_name text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM harvest.registered_workflows AS r WHERE r.queue = p_queue AND r.workflow_name = p_workflow_name;
    RETURN FOUND;
END;
$$;
