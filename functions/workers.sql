-- The worker registry. A worker registers on start, heartbeats on a timer (the
-- answer tells it whether an operator asked it to drain), and on shutdown
-- releases what it could not finish.

-- p_incarnation: the registering process's own id, drawn at its start. A register of an id by
-- another process than the one that registered it last (a pod restarted under its StatefulSet
-- name, a fixed --worker-id) proves that one gone, or else two live processes share the id:
-- either way the tasks the id held are not the new process's, so they come back at once (an
-- activity's attempt fails with WorkerLost, as expire_lost_workers fails it; rows as its), not
-- at their leases; and the predecessor's heartbeats, drain and stop change nothing of the
-- successor's (heartbeat_worker answers it 'superseded'). The latest register wins: the
-- registry cannot tell a dead predecessor from a live duplicate (a restarted container's
-- hostname and pid are its predecessor's).
CREATE OR REPLACE FUNCTION harvest.register_worker(
    p_worker_id text, p_queues text[], p_hostname text, p_pid integer,
    p_heartbeat_interval_secs double precision DEFAULT 10, p_metadata jsonb DEFAULT '{}'::jsonb,
    p_lost_after_secs double precision DEFAULT NULL, p_incarnation text DEFAULT NULL
)
RETURNS TABLE (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_interval double precision := coalesce(p_heartbeat_interval_secs, 10);
    v_lost_after double precision := coalesce(p_lost_after_secs, 6 * coalesce(p_heartbeat_interval_secs, 10));
    v_before harvest.workers;
BEGIN
    IF p_worker_id IS NULL OR p_worker_id = '' OR p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'a worker needs an id and at least one queue' USING ERRCODE = 'HR001';
    END IF;
    -- A 0 s interval made the worker commit thousands of heartbeats a second.
    IF NOT coalesce(p_heartbeat_interval_secs BETWEEN 0.1 AND 3600, true) THEN
        RAISE EXCEPTION 'heartbeat_interval_secs % is out of range: allowed 0.1 to 3600 seconds',
            harvest._num_text(p_heartbeat_interval_secs) USING ERRCODE = 'HR001';
    END IF;
    -- Lost sooner than 3 missed heartbeats, one slow heartbeat would cost a live worker its work.
    -- (a hair of slack: 3 x 0.1 is 0.30000000000000004 in floating point)
    IF v_lost_after * (1 + 1e-9) < 3 * v_interval OR v_lost_after > 86400 THEN
        RAISE EXCEPTION 'lost_after_secs % is out of range for a heartbeat interval of % s',
            harvest._num_text(v_lost_after), harvest._num_text(v_interval) USING ERRCODE = 'HR001',
            HINT = 'use at least 3 x the heartbeat interval (' || harvest._num_text(3 * v_interval)
                   || ' s) and at most 86400 s, or leave it unset for 6 x the interval';
    END IF;
    -- (read unlocked: the take-back locks runs before tasks, and nothing here waits on the
    -- worker row while it holds a run)
    SELECT * INTO v_before FROM harvest.workers AS w WHERE w.id = p_worker_id;
    IF FOUND AND v_before.incarnation IS DISTINCT FROM p_incarnation THEN
        RETURN QUERY SELECT * FROM harvest._take_back_worker_tasks(p_worker_id,
            'was lost (WorkerLost: its worker id was registered again by another process; the one holding it, pid '
            || v_before.pid || ' on ' || v_before.hostname || ', last heartbeated at '
            || harvest._iso_time(v_before.last_heartbeat_at) || ')');
    END IF;
    INSERT INTO harvest.workers (id, queues, hostname, pid, started_at, last_heartbeat_at,
                                 heartbeat_interval_secs, metadata, lost_after_secs, lost_at, incarnation)
    VALUES (p_worker_id, p_queues, p_hostname, p_pid, v_now, v_now, v_interval,
            coalesce(p_metadata, '{}'::jsonb), v_lost_after, v_now + make_interval(secs => v_lost_after),
            p_incarnation)
    ON CONFLICT (id) DO UPDATE
    SET queues = excluded.queues, hostname = excluded.hostname, pid = excluded.pid,
        status = 'active', started_at = excluded.started_at,
        last_heartbeat_at = excluded.last_heartbeat_at,
        heartbeat_interval_secs = excluded.heartbeat_interval_secs, metadata = excluded.metadata,
        drain_deadline = NULL, lost_after_secs = excluded.lost_after_secs, lost_at = excluded.lost_at,
        incarnation = excluded.incarnation;
END;
$$;

-- Whether p_incarnation may act on the worker row p_worker_id as its own: the process that
-- registered it last, or a caller that names no incarnation (psql, an older worker).
CREATE OR REPLACE FUNCTION harvest._worker_incarnation_holds(p_worker harvest.workers, p_incarnation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_incarnation IS NULL OR p_worker.incarnation IS NOT DISTINCT FROM p_incarnation;
$$;

-- Returns the worker's status ('active', 'draining', 'stopped'), or 'superseded' to a process
-- whose id another process registered since (register_worker): its heartbeat changes nothing.
-- Each heartbeat moves the time the worker is lost at (expire_lost_workers) to lost_after_secs
-- from now.
CREATE OR REPLACE FUNCTION harvest.heartbeat_worker(p_worker_id text, p_incarnation text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    UPDATE harvest.workers AS w
    SET last_heartbeat_at = harvest.now(),
        lost_at = CASE WHEN w.status <> 'stopped' THEN harvest.now() + make_interval(secs => w.lost_after_secs) END
    WHERE w.id = p_worker_id AND harvest._worker_incarnation_holds(w, p_incarnation)
    RETURNING w.status INTO v_status;
    IF v_status IS NULL THEN
        IF EXISTS (SELECT 1 FROM harvest.workers AS w WHERE w.id = p_worker_id) THEN
            RETURN 'superseded';
        END IF;
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
    -- The runs first, in id order (the execution-then-task lock order): a pause
    -- (lifecycle.sql) cannot slip between the read of a run's status and the release.
    PERFORM 1 FROM harvest.executions AS e
    WHERE e.id IN (SELECT t.execution_id FROM harvest.tasks AS t
                   WHERE t.status = 'running' AND t.lease_owner = p_worker_id
                     AND (p_task_ids IS NULL OR t.id = ANY(p_task_ids)))
    ORDER BY e.id
    FOR SHARE;
    WITH released AS (
        UPDATE harvest.tasks AS t
        SET status = harvest._queued_status(t.execution_id),
            lease_owner = NULL, lease_expires_at = NULL, due_at = harvest.now(),
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
CREATE OR REPLACE FUNCTION harvest.begin_worker_drain(p_worker_id text, p_incarnation text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    UPDATE harvest.workers AS w
    SET status = CASE WHEN w.status = 'active' THEN 'draining' ELSE w.status END,
        last_heartbeat_at = harvest.now(),
        lost_at = CASE WHEN w.status <> 'stopped' THEN harvest.now() + make_interval(secs => w.lost_after_secs) END
    WHERE w.id = p_worker_id AND harvest._worker_incarnation_holds(w, p_incarnation)
    RETURNING w.status INTO v_status;
    IF v_status IS NULL THEN
        IF EXISTS (SELECT 1 FROM harvest.workers AS w WHERE w.id = p_worker_id) THEN
            RETURN 'superseded';  -- another process registered the id since: its row is not ours
        END IF;
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002';
    END IF;
    RETURN v_status;
END;
$$;

-- A process whose id another registered since (register_worker) stops nothing and releases
-- nothing of its successor's: 0 (each of its handlers gives its own task back by its fencing
-- token, release_task).
CREATE OR REPLACE FUNCTION harvest.stop_worker(p_worker_id text, p_incarnation text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_worker harvest.workers;
    v_released integer;
BEGIN
    SELECT * INTO v_worker FROM harvest.workers AS w WHERE w.id = p_worker_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002';
    END IF;
    IF NOT harvest._worker_incarnation_holds(v_worker, p_incarnation) THEN
        RETURN 0;
    END IF;
    v_released := harvest.release_worker_tasks(p_worker_id);
    PERFORM harvest._release_partitions(p_worker_id);  -- owner mode (owners.sql)
    UPDATE harvest.workers
    SET status = 'stopped', sleeping = false, last_heartbeat_at = harvest.now(), lost_at = NULL
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
    v_status text;
BEGIN
    -- The run first (see release_worker_tasks).
    PERFORM 1 FROM harvest.executions AS e
    WHERE e.id = (SELECT t.execution_id FROM harvest.tasks AS t WHERE t.id = p_task_id)
    FOR SHARE;
    UPDATE harvest.tasks AS t
    SET status = harvest._queued_status(t.execution_id),
        lease_owner = NULL, lease_expires_at = NULL, due_at = harvest.now(),
        attempt = CASE WHEN t.kind = 'activity' THEN greatest(t.attempt - 1, 0) ELSE t.attempt END
    WHERE t.id = p_task_id AND t.status = 'running' AND t.fencing_token = p_fencing_token
    RETURNING t.queue, t.status INTO v_queue, v_status;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    IF v_status = 'pending' THEN
        PERFORM harvest._notify_queue(v_queue);
    END IF;
    RETURN true;
END;
$$;

-- A worker about to wait for work marks itself asleep (producers then notify its
-- queues) and clears the mark once it is busy again (producers stop notifying).
-- Marking, it answers whether every producer that checked its queues for a sleeping
-- worker without seeing the mark has ended (_notify_queue): each queue's wake lock is
-- tried exclusively (no producer is made to wait; a producer that finds it taken
-- notifies without checking) and held until this call commits. After true the worker
-- looks for work once more and finds what those producers committed; after false it
-- looks, then calls again (the mark stands) until true, and looks again.
CREATE OR REPLACE FUNCTION harvest.set_worker_sleeping(p_worker_id text, p_sleeping boolean)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_settled boolean := true;
BEGIN
    IF p_sleeping THEN
        SELECT coalesce(bool_and(pg_try_advisory_xact_lock(1463897925, hashtext(q.name) & 1023)), true)  -- class 'WAKE'
        INTO v_settled
        FROM harvest.workers AS w CROSS JOIN LATERAL unnest(w.queues) AS q (name)
        WHERE w.id = p_worker_id;
    END IF;
    UPDATE harvest.workers SET sleeping = p_sleeping WHERE id = p_worker_id AND sleeping <> p_sleeping;
    RETURN v_settled;
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
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- An operator mutation: starts of this name on this queue are refused from now on.
    PERFORM harvest._audit('workflow.unregister', p_workflow_name, NULL, jsonb_build_object('queue', p_queue));
    RETURN true;
END;
$$;

-- Whether p_workflow_name is registered on p_queue, as a start, a schedule's check and the
-- schedules' listing read it: true when a worker registered it there, false when the
-- queue's workers registered other names only (such a start is refused, HR010), NULL when
-- no worker registered anything on the queue (it cannot be checked, and passes). One row.
-- Each probe reads the head of registered_workflows_pkey (ORDER BY, LIMIT 1: a scalar
-- subquery, not EXISTS), the second only when the first found nothing. A SQL set-returning
-- function, STABLE, read as (SELECT r FROM harvest._workflow_registered(...) AS r): the
-- planner inlines it into that query (as _may_hand_off); not STRICT, not PL/pgSQL: either
-- would keep it from being inlined.
CREATE OR REPLACE FUNCTION harvest._workflow_registered(p_workflow_name text, p_queue text)
RETURNS SETOF boolean
LANGUAGE sql STABLE
ROWS 1
AS $$
    SELECT CASE
        WHEN (SELECT true FROM harvest.registered_workflows AS r
              WHERE r.queue = p_queue AND r.workflow_name = p_workflow_name) THEN true
        WHEN (SELECT true FROM harvest.registered_workflows AS r
              WHERE r.queue = p_queue ORDER BY r.workflow_name LIMIT 1) THEN false
    END;
$$;

-- The fleet seen by an operator: the registry with derived health, one worker
-- with the tasks it holds, the health roll-up, remote drain and its preview.
--
-- Health is derived at query time: a worker that is not stopped and has not
-- heartbeated within 2 x its heartbeat interval is stale (never auto-deleted while
-- recent: retention.sql's worker rule deletes stopped and long-stale rows).

CREATE OR REPLACE FUNCTION harvest._worker_health(p_worker harvest.workers)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_worker.status = 'stopped' THEN 'stopped'
        WHEN p_worker.last_heartbeat_at
             < harvest.now() - make_interval(secs => 2 * p_worker.heartbeat_interval_secs) THEN 'stale'
        ELSE 'healthy'
    END;
$$;

-- A rolling deploy: old and new workers poll one queue, and only the new ones have a new
-- workflow or activity. A worker that lacks what a task or a query names hands it back and is
-- remembered (unknown_to); while a live worker polling the queue has not tried it, the work
-- waits for that one instead of failing. The one rule of fail_workflow_task (UnknownWorkflow),
-- fail_activity (ActivityNotRegistered) and release_query_request.
--
-- p_tried: the ids kept so far (a JSON array: anything else, and entries that are not
-- strings, count as none); p_worker_id (NULL: none) is added last. unknown_to: those ids,
-- each once, the latest last, at most 64 (the oldest dropped). untried_live: whether a live
-- worker (harvest._worker_health: active, heartbeating) polling p_queue is missing from
-- them; never once 64 are kept (a fleet's size is not a bound on the wait).
CREATE OR REPLACE FUNCTION harvest._unknown_to(
    p_tried jsonb, p_worker_id text, p_queue text, OUT unknown_to jsonb, OUT untried_live boolean
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    c_max CONSTANT integer := 64;
BEGIN
    SELECT coalesce(jsonb_agg(k.id ORDER BY k.ord), '[]'::jsonb) INTO unknown_to
    FROM (
        SELECT ids.id, max(ids.ord) AS ord
        FROM (
            SELECT e.value AS id, e.ord
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_tried) = 'array' THEN p_tried
                                           ELSE '[]'::jsonb END) WITH ORDINALITY AS e (value, ord)
            WHERE jsonb_typeof(e.value) = 'string'
            UNION ALL
            SELECT to_jsonb(p_worker_id), 1000000 WHERE p_worker_id IS NOT NULL
        ) AS ids
        GROUP BY ids.id
        ORDER BY max(ids.ord) DESC
        LIMIT c_max
    ) AS k;
    untried_live := jsonb_array_length(unknown_to) < c_max AND EXISTS (
        SELECT 1 FROM harvest.workers AS w
        WHERE w.status = 'active' AND p_queue = ANY(w.queues)
          AND harvest._worker_health(w) = 'healthy' AND NOT unknown_to ? w.id);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.list_workers(
    p_queue text DEFAULT NULL, p_status text DEFAULT NULL, p_health text DEFAULT NULL, p_limit integer DEFAULT NULL
)
RETURNS TABLE (
    worker_id text, queues text[], hostname text, pid integer, status text, health text,
    started_at timestamptz, last_heartbeat_at timestamptz, heartbeat_interval_secs double precision,
    drain_deadline timestamptz, in_flight bigint, metadata jsonb, total bigint
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_status IS NOT NULL AND lower(p_status) NOT IN ('active', 'draining', 'stopped') THEN
        RAISE EXCEPTION 'unknown worker status "%"', p_status USING ERRCODE = 'HR001',
            HINT = 'use active, draining or stopped';
    END IF;
    IF p_health IS NOT NULL AND lower(p_health) NOT IN ('healthy', 'stale', 'stopped') THEN
        RAISE EXCEPTION 'unknown worker health "%"', p_health USING ERRCODE = 'HR001',
            HINT = 'use healthy, stale or stopped';
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001',
            HINT = 'pass NULL for every worker';
    END IF;
    -- At most p_limit rows, each with how many matched (total): a churning fleet leaves a row a
    -- pod until retention prunes it, and a glance needs the first ones and the count (migration
    -- 0100). The registry is kept small by that retention, so the read sorts it whole.
    -- The in-flight counts of the rows kept only.
    RETURN QUERY
    SELECT w.id, w.queues, w.hostname, w.pid, w.status, w.health, w.started_at,
           w.last_heartbeat_at, w.heartbeat_interval_secs, w.drain_deadline,
           (SELECT count(*) FROM harvest.tasks AS t WHERE t.status = 'running' AND t.lease_owner = w.id),
           w.metadata, w.total
    FROM (
        SELECT r.*, harvest._worker_health(r) AS health, count(*) OVER () AS total
        FROM harvest.workers AS r
        WHERE (p_queue IS NULL OR p_queue = ANY(r.queues))
          AND (p_status IS NULL OR r.status = lower(p_status))
          AND (p_health IS NULL OR harvest._worker_health(r) = lower(p_health))
        -- Stale first within each status group: the ones to look at.
        ORDER BY CASE r.status WHEN 'active' THEN 0 WHEN 'draining' THEN 1 ELSE 2 END,
                 harvest._worker_health(r) = 'stale' DESC, r.id
        LIMIT p_limit
    ) AS w
    ORDER BY CASE w.status WHEN 'active' THEN 0 WHEN 'draining' THEN 1 ELSE 2 END,
             w.health = 'stale' DESC, w.id;
END;
$$;

-- One worker, with the ids of the tasks it holds a lease on.
CREATE OR REPLACE FUNCTION harvest.get_worker(p_worker_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_worker harvest.workers;
BEGIN
    SELECT * INTO v_worker FROM harvest.workers WHERE id = p_worker_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'worker % is not registered', p_worker_id USING ERRCODE = 'HR002',
            HINT = 'list workers with harvest worker list (GET /workers, or harvest.list_workers() in SQL)';
    END IF;
    RETURN to_jsonb(v_worker) - 'id' || jsonb_build_object(
        'worker_id', v_worker.id,
        'health', harvest._worker_health(v_worker),
        'claimed_task_ids', coalesce((
            SELECT jsonb_agg(t.id ORDER BY t.id) FROM harvest.tasks AS t
            WHERE t.status = 'running' AND t.lease_owner = v_worker.id), '[]'::jsonb));
END;
$$;

-- The fleet roll-up: healthy = active and fresh; stale = not stopped and
-- silent for 2 heartbeat intervals. by_queue counts every registered worker
-- that is not stopped (the spec's 4 healthy + 1 stale = 5), by_queue_health
-- splits each queue's count into healthy, draining and stale, and by_shard
-- counts the same workers under this database's shard number (fan-out reads add shards up).
CREATE OR REPLACE FUNCTION harvest.get_worker_health()
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH w AS (
        SELECT
            ws.*,
            harvest._worker_health(ws) AS health,
            CASE
                WHEN harvest._worker_health(ws) = 'stale' THEN 'stale'
                WHEN ws.status = 'draining' THEN 'draining'
                ELSE 'healthy'
            END AS bucket
        FROM harvest.workers AS ws
    ),

    per_queue AS (
        SELECT
            u.queue,
            count(*) AS workers,
            count(*) FILTER (WHERE w.bucket = 'healthy') AS healthy,
            count(*) FILTER (WHERE w.bucket = 'draining') AS draining,
            count(*) FILTER (WHERE w.bucket = 'stale') AS stale
        FROM w CROSS JOIN LATERAL unnest(w.queues) AS u (queue)
        WHERE w.status <> 'stopped'
        GROUP BY u.queue
    )

    SELECT jsonb_build_object(
        'healthy', (SELECT count(*) FROM w WHERE w.status = 'active' AND w.health = 'healthy'),
        'stale', (SELECT count(*) FROM w WHERE w.health = 'stale'),
        'draining', (SELECT count(*) FROM w WHERE w.status = 'draining'),
        'stopped', (SELECT count(*) FROM w WHERE w.status = 'stopped'),
        'total', (SELECT count(*) FROM w),
        'by_queue', coalesce((SELECT jsonb_object_agg(p.queue, p.workers) FROM per_queue AS p), '{}'::jsonb),
        'by_queue_health', coalesce((
            SELECT jsonb_object_agg(p.queue, jsonb_build_object(
                'healthy', p.healthy, 'draining', p.draining, 'stale', p.stale))
            FROM per_queue AS p), '{}'::jsonb),
        'by_shard', jsonb_build_object(harvest.get_shard_id()::text,
                                       (SELECT count(*) FROM w WHERE w.status <> 'stopped')));
$$;

-- What a drain of this worker would answer, without changing anything.
CREATE OR REPLACE FUNCTION harvest._drain_outcome(p_worker harvest.workers)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_worker.id IS NULL THEN 'not_found'
        WHEN p_worker.status = 'stopped' THEN 'already_stopped'
        WHEN p_worker.status = 'draining' THEN 'already_draining'
        WHEN harvest._worker_health(p_worker) = 'stale' THEN 'stale_worker'
        ELSE 'accepted'
    END;
$$;

-- Ask a worker to drain: it learns it on its next heartbeat (within two
-- heartbeat intervals), stops claiming, finishes its in-flight work and ends
-- 'stopped'. A stale worker is not marked (it cannot hear it): stale_worker.
-- Every request, whatever its outcome, is written to the audit log.
CREATE OR REPLACE FUNCTION harvest.drain_worker(
    p_worker_id text, p_deadline timestamptz DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_worker harvest.workers;
    v_outcome text;
    v_in_flight bigint;
BEGIN
    IF p_deadline IS NOT NULL AND p_deadline <= harvest.now() THEN
        RAISE EXCEPTION 'drain deadline % is not in the future', harvest._iso_time(p_deadline) USING ERRCODE = 'HR001';
    END IF;
    SELECT * INTO v_worker FROM harvest.workers WHERE id = p_worker_id FOR UPDATE;
    v_outcome := harvest._drain_outcome(v_worker);
    IF v_outcome = 'accepted' THEN
        UPDATE harvest.workers SET status = 'draining', drain_deadline = p_deadline
        WHERE id = p_worker_id
        RETURNING * INTO v_worker;
    END IF;
    SELECT count(*) INTO v_in_flight FROM harvest.tasks AS t
    WHERE t.status = 'running' AND t.lease_owner = p_worker_id;
    PERFORM harvest._audit('worker.drain', p_worker_id, p_operator_id, jsonb_build_object(
        'outcome', v_outcome, 'deadline', p_deadline, 'in_flight', v_in_flight));
    RETURN jsonb_build_object(
        'worker_id', p_worker_id, 'outcome', v_outcome, 'status', v_worker.status,
        'in_flight', v_in_flight, 'drain_deadline', v_worker.drain_deadline,
        'queues', to_jsonb(v_worker.queues));
END;
$$;

-- Who a drain would affect: each matching worker that is not stopped, its
-- in-flight tasks, the outcome a drain would have, and the queues it polls
-- that no live worker outside the drained set covers (they stall until a
-- replacement starts).
CREATE OR REPLACE FUNCTION harvest.preview_drain(p_queue text DEFAULT NULL, p_worker_id text DEFAULT NULL)
RETURNS TABLE (
    worker_id text, status text, health text, queues text[], in_flight bigint,
    claimed_task_ids bigint[], outcome text, uncovered_queues text[]
)
LANGUAGE sql STABLE
AS $$
    SELECT w.id, w.status, harvest._worker_health(w), w.queues,
           (SELECT count(*) FROM harvest.tasks AS t WHERE t.status = 'running' AND t.lease_owner = w.id),
           (SELECT coalesce(array_agg(t.id ORDER BY t.id), ARRAY[]::bigint[]) FROM harvest.tasks AS t
            WHERE t.status = 'running' AND t.lease_owner = w.id),
           harvest._drain_outcome(w),
           (SELECT coalesce(array_agg(q.queue ORDER BY q.queue), ARRAY[]::text[])
            FROM unnest(w.queues) AS q (queue)
            WHERE NOT EXISTS (
                SELECT 1 FROM harvest.workers AS o
                WHERE o.status = 'active' AND harvest._worker_health(o) = 'healthy'
                  AND q.queue = ANY(o.queues)
                  -- o stays up: it is not among the workers this preview would drain.
                  AND NOT ((p_queue IS NULL OR p_queue = ANY(o.queues))
                           AND (p_worker_id IS NULL OR o.id = p_worker_id))))
    FROM harvest.workers AS w
    WHERE w.status <> 'stopped'
      AND (p_queue IS NULL OR p_queue = ANY(w.queues))
      AND (p_worker_id IS NULL OR w.id = p_worker_id)
    ORDER BY w.id;
$$;

-- A draining worker asks when its drain must be done: the deadline an operator
-- gave harvest.drain_worker, and the seconds left by the database clock
-- (negative once it has passed). No row when the worker is unknown; NULLs when
-- no deadline was given. The worker stops at the deadline and releases what is
-- still in flight (harvest_py/harvest/worker/worker.py).
CREATE OR REPLACE FUNCTION harvest.get_worker_drain_deadline(p_worker_id text)
RETURNS TABLE (drain_deadline timestamptz, remaining_secs double precision)
LANGUAGE sql STABLE
AS $$
    SELECT w.drain_deadline,
           extract(epoch FROM w.drain_deadline - harvest.now())::double precision
    FROM harvest.workers AS w
    WHERE w.id = p_worker_id;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.register_worker IS
'Register (or re-register) a worker and its queues as active; HR001 without an id or queue or for a heartbeat '
'interval outside 0.1..3600 s or a lost_after_secs (default 6 x the interval) below 3 x the interval or over a day. '
'Called by the Python worker at start (role harvest_worker).';
COMMENT ON FUNCTION harvest.heartbeat_worker IS
'Record a worker''s heartbeat (and move the time it is lost at to lost_after_secs from now); returns its status (active, draining or stopped), so it learns of a remote drain. '
'HR002 when it is not registered. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.release_worker_tasks IS
'Give back the tasks a worker holds (all, or p_task_ids) without counting a failed attempt, so another worker '
'takes them at once; returns how many. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.begin_worker_drain IS
'A worker told to stop records that it is draining before it finishes its in-flight work (a remote drain''s '
'deadline is kept, a stopped worker stays stopped); returns the status. Called by the Python worker (role '
'harvest_worker).';
COMMENT ON FUNCTION harvest.stop_worker IS
'Mark a worker stopped and release the tasks it still holds; returns how many. HR002 when it is not registered. '
'Called by the Python worker at shutdown (role harvest_worker).';
COMMENT ON FUNCTION harvest.release_task IS
'Give back one claimed task without counting a failed attempt, only while the caller''s fencing token is the '
'current claim; returns whether it was released. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.set_worker_sleeping IS
'A worker about to wait for work marks itself asleep (producers then notify its queues), and clears the mark once'
' busy. Marking, returns whether every producer that checked its queues without seeing the mark has committed (the'
' worker looks for work once more when it has; calls again until it has). Called by the Python worker (role'
' harvest_worker).';
COMMENT ON FUNCTION harvest.register_workflows IS
'Register the workflow names a worker can run on each of its queues; a start of a name not registered on a queue '
'with registrations is refused (HR010). Returns how many pairs were new. Called by the Python worker at start '
'(role harvest_worker).';
COMMENT ON FUNCTION harvest.unregister_workflow IS
'Retire a workflow name from a queue (a workflow deleted from the code); returns whether it was registered; audited. For '
'admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.list_workers IS
'The worker registry with derived health (healthy, stale) and in-flight counts, optionally of one queue, status '
'or health (else HR001); at most p_limit rows (1..10000; NULL: every one), each with the total matched. For '
'operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_worker IS
'One worker with the ids of the tasks it holds a lease on; HR002 when it is not registered. For operators (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.get_worker_health IS
'The fleet roll-up: healthy, draining and stale workers by queue and by shard. For operators (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.drain_worker IS
'Ask a worker to drain (it stops claiming, finishes in-flight work, ends stopped), optionally by p_deadline; '
'returns the outcome (accepted, stale_worker, already_draining, ...), every request audited. For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.preview_drain IS
'Who a drain would affect: each matching live worker, its in-flight tasks, the outcome a drain would have, and '
'queues no other live worker covers. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_worker_drain_deadline IS
'When a draining worker''s drain must be done: the deadline given to drain_worker and the seconds left by the '
'database clock. Called by the Python worker (role harvest_worker).';
