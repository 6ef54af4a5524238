-- The worker fleet seen by an operator: the registry with derived health, one
-- worker with the tasks it holds, the health roll-up, remote drain and its
-- preview, and the audit log every operator action writes to.
--
-- Health is derived at query time: a worker that is not stopped and has not
-- heartbeated within 2 x its heartbeat interval is stale (never auto-deleted while
-- recent: retention.sql's worker rule deletes stopped and long-stale rows).

-- Record an operator action, in the transaction of the action. actor is the
-- database login (session_user: these functions run as their owner, so
-- current_user would name the owner); operator_id is whatever the caller says it
-- is (a person, a ticket, a bot); source is the face the call came through
-- (_audit_source). Every operator mutation writes one row: cancel, terminate,
-- reset, dead-letter replay and discard (one by one, and in bulk), rate-limit
-- overrides, worker drains, retention settings and runs. Starts, signals,
-- queries and updates are application traffic, not audited.
CREATE OR REPLACE FUNCTION harvest._audit(p_operation text, p_target text, p_operator text, p_details jsonb)
RETURNS bigint
LANGUAGE sql
AS $$
    INSERT INTO harvest.audit_log (at, actor, operator_id, operation, target, details, source)
    SELECT harvest.now(), session_user, p_operator, p_operation, p_target,
           -- An application name that is not a Harvest face is kept (psql, a script, or
           -- '' for a client that gave none).
           CASE WHEN s.application_name IN ('harvest-cli', 'harvest-api', 'harvest-ui')
               THEN coalesce(p_details, '{}'::jsonb)
               ELSE coalesce(p_details, '{}'::jsonb) || jsonb_build_object('application_name', s.application_name)
           END,
           harvest._audit_source(s.application_name)
    FROM (SELECT coalesce(current_setting('application_name', true), '') AS application_name) AS s
    RETURNING id;
$$;

-- The audit source of a session, from the application_name Harvest's own faces
-- set (the CLI 'harvest-cli', the HTTP API 'harvest-api', the dashboard
-- 'harvest-ui'). The spec's audit log knows only api, cli and ui, so any other
-- client (psql, a script) is recorded as cli, the nearest, with its application
-- name kept in the details. A provenance label, not a permission: a session
-- chooses its own application_name.
CREATE OR REPLACE FUNCTION harvest._audit_source(p_application_name text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_application_name WHEN 'harvest-api' THEN 'api' WHEN 'harvest-ui' THEN 'ui' ELSE 'cli' END;
$$;

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

CREATE OR REPLACE FUNCTION harvest.list_workers(
    p_queue text DEFAULT NULL, p_status text DEFAULT NULL, p_health text DEFAULT NULL
)
RETURNS TABLE (
    worker_id text, queues text[], hostname text, pid integer, status text, health text,
    started_at timestamptz, last_heartbeat_at timestamptz, heartbeat_interval_secs double precision,
    drain_deadline timestamptz, in_flight bigint, metadata jsonb
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
    RETURN QUERY
    SELECT w.id, w.queues, w.hostname, w.pid, w.status, harvest._worker_health(w), w.started_at,
           w.last_heartbeat_at, w.heartbeat_interval_secs, w.drain_deadline,
           (SELECT count(*) FROM harvest.tasks AS t WHERE t.status = 'running' AND t.lease_owner = w.id),
           w.metadata
    FROM harvest.workers AS w
    WHERE (p_queue IS NULL OR p_queue = ANY(w.queues))
      AND (p_status IS NULL OR w.status = lower(p_status))
      AND (p_health IS NULL OR harvest._worker_health(w) = lower(p_health))
    -- Stale first within each status group: the ones to look at.
    ORDER BY CASE w.status WHEN 'active' THEN 0 WHEN 'draining' THEN 1 ELSE 2 END,
             harvest._worker_health(w) = 'stale' DESC, w.id;
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
            HINT = 'list workers with harvest.list_workers()';
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
-- counts the same workers per shard (one shard, 0, today).
CREATE OR REPLACE FUNCTION harvest.worker_health()
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
        'by_shard', jsonb_build_object('0', (SELECT count(*) FROM w WHERE w.status <> 'stopped')));
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
    p_worker_id text, p_deadline timestamptz DEFAULT NULL, p_operator text DEFAULT NULL
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
        RAISE EXCEPTION 'drain deadline % is not in the future', p_deadline USING ERRCODE = 'HR001';
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
    PERFORM harvest._audit('worker.drain', p_worker_id, p_operator, jsonb_build_object(
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
CREATE OR REPLACE FUNCTION harvest.drain_preview(p_queue text DEFAULT NULL, p_worker_id text DEFAULT NULL)
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

-- The audit log, newest first (with each row's source: api, cli or ui).
CREATE OR REPLACE FUNCTION harvest.list_audit_log(p_limit integer DEFAULT 100, p_operation text DEFAULT NULL)
RETURNS SETOF harvest.audit_log
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY SELECT * FROM harvest.audit_log AS a
    WHERE p_operation IS NULL OR a.operation = p_operation
    ORDER BY a.id DESC LIMIT p_limit;
END;
$$;
