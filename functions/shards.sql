-- Shard identity: which shard this database is (harvest.shard_identity, one row).
-- start_workflow mints ids for this shard and refuses one addressed to another
-- (HR011, start.sql _start_check_shard); a pool checks at boot that the database
-- it reaches is the shard it was configured for (harvest.shard.pools).

-- This database's shard number (0 until set_shard_id says otherwise).
CREATE OR REPLACE FUNCTION harvest.get_shard_id()
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT s.shard_id FROM harvest.shard_identity AS s WHERE s.id;
$$;

-- Make this database shard p_shard_id. Refused (HR011) while it holds an execution
-- whose id was minted for another shard: those ids would route elsewhere. The
-- ACCESS EXCLUSIVE lock waits for every start that already read the identity to
-- commit, and holds back new ones until this commits, so no start can mint an id
-- of the old shard after the check. Audited when the number changes; setting the
-- number the database already has changes nothing (idempotent).
CREATE OR REPLACE FUNCTION harvest.set_shard_id(p_shard_id integer, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous integer;
    v_foreign uuid;
BEGIN
    IF p_shard_id IS NULL OR p_shard_id < 0 OR p_shard_id > 65535 THEN
        RAISE EXCEPTION 'shard % is out of range: a shard number is 0..65535', coalesce(p_shard_id::text, 'NULL')
            USING ERRCODE = 'HR001';
    END IF;
    LOCK TABLE harvest.shard_identity IN ACCESS EXCLUSIVE MODE;
    SELECT s.shard_id INTO v_previous FROM harvest.shard_identity AS s WHERE s.id;
    IF v_previous = p_shard_id THEN
        RETURN jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous, 'changed', false);
    END IF;
    -- The ids of one shard are one range of uuids (its two leading bytes): anything
    -- outside it, found by two probes of the primary key, was minted for another.
    SELECT e.id INTO v_foreign FROM harvest.executions AS e
    WHERE e.id < harvest._shard_low_id(p_shard_id) OR e.id > harvest._shard_high_id(p_shard_id)
    LIMIT 1;
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION 'this database is shard % and holds executions of shard % (e.g. %); it cannot become shard %',
            v_previous, harvest.shard_of(v_foreign), v_foreign, p_shard_id
            USING ERRCODE = 'HR011',
            DETAIL = jsonb_build_object('shard_id', v_previous, 'requested_shard_id', p_shard_id,
                                        'execution_shard_id', harvest.shard_of(v_foreign))::text,
            HINT = 'give a new shard an empty database, or keep this one''s number';
    END IF;
    UPDATE harvest.shard_identity SET shard_id = p_shard_id, updated_at = harvest.now() WHERE id;
    PERFORM harvest._audit('shard.set_id', p_shard_id::text, p_operator_id,
                           jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous));
    RETURN jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous, 'changed', true);
END;
$$;

-- The lowest and highest execution id a shard can mint (its two leading bytes, then
-- all zeros or all ones).
CREATE OR REPLACE FUNCTION harvest._shard_low_id(p_shard integer)
RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (lpad(to_hex(p_shard), 4, '0') || '0000-0000-0000-0000-000000000000')::uuid;
$$;

CREATE OR REPLACE FUNCTION harvest._shard_high_id(p_shard integer)
RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (lpad(to_hex(p_shard), 4, '0') || 'ffff-ffff-ffff-ffff-ffffffffffff')::uuid;
$$;

-- The stranded-work gauge (docs/sharding.md, "Observing stranded work"): claimable
-- tasks (pending, due, not a timer) on each queue that no live worker of this shard
-- polls. A worker's registry row lives on the shard it polls, so "no live row here
-- lists the queue" is "no worker drains it". Healthy steady state: no row.
CREATE OR REPLACE FUNCTION harvest.count_stranded_tasks()
RETURNS TABLE (queue text, pending bigint, oldest_due_at timestamptz)
LANGUAGE sql STABLE
AS $$
    -- Only the queues no live worker polls are counted: the queues with pending work are
    -- found one probe of tasks_claimable each (_pending_queues), and a polled queue's
    -- backlog is not read at all. Checking every claimable task against the workers read a
    -- backlog of 1.8M tasks per call (~0.2 s of CPU), in every metrics sample.
    WITH polled AS MATERIALIZED (
        SELECT DISTINCT u.queue
        FROM harvest.workers AS w CROSS JOIN LATERAL unnest(w.queues) AS u (queue)
        WHERE w.status = 'active' AND harvest._worker_health(w) = 'healthy'
    )

    SELECT q.queue, n.pending, n.oldest_due_at
    FROM harvest._pending_queues() AS q (queue)
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending, min(t.due_at) AS oldest_due_at
        FROM harvest.tasks AS t
        WHERE
            t.queue = q.queue
            AND t.status = 'pending'
            AND t.kind <> 'timer'
            AND t.due_at <= (SELECT harvest.now())
    ) AS n
    WHERE
        NOT EXISTS (SELECT 1 FROM polled AS p WHERE p.queue = q.queue)
        AND n.pending > 0
    ORDER BY q.queue;
$$;

-- What this shard's readiness gates on, in one round trip and a few index probes whatever
-- the backlog: its number and schema version, its workers (live = active and fresh), the
-- declared queues (p_queues, else every queue a worker row here names) no live worker polls,
-- the stranded work (count_stranded_tasks: a probe of tasks_claimable per queue, and a count
-- only on a queue nobody polls) and the unpaused schedules' oldest due time. No per-queue
-- count of the tasks: /health/ready with readiness.require_shard_readiness reads this on
-- every probe; get_shard_health adds the counts for a person.
CREATE OR REPLACE FUNCTION harvest.get_shard_readiness(p_queues text[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH w AS (
        SELECT
            ws.queues,
            ws.status,
            harvest._worker_health(ws) AS health
        FROM harvest.workers AS ws
    ),

    live AS (
        SELECT DISTINCT u.queue
        FROM w CROSS JOIN LATERAL unnest(w.queues) AS u (queue)
        WHERE w.status = 'active' AND w.health = 'healthy'
    ),

    declared AS (
        SELECT DISTINCT d.queue
        FROM unnest(coalesce(p_queues, (
            SELECT array_agg(u.queue) FROM w CROSS JOIN LATERAL unnest(w.queues) AS u (queue)
        ))) AS d (queue)
    ),

    stranded AS MATERIALIZED (
        SELECT s.queue, s.pending FROM harvest.count_stranded_tasks() AS s
    )

    SELECT jsonb_build_object(
        'shard_id', harvest.get_shard_id(),
        'schema_version', harvest.schema_version(),
        'observed_at', harvest.now(),
        'workers', jsonb_build_object(
            'live', (SELECT count(*) FROM w WHERE w.status = 'active' AND w.health = 'healthy'),
            'stale', (SELECT count(*) FROM w WHERE w.health = 'stale'),
            'draining', (SELECT count(*) FROM w WHERE w.status = 'draining'),
            'stopped', (SELECT count(*) FROM w WHERE w.status = 'stopped')
        ),
        'unpolled_queues', coalesce((
            SELECT jsonb_agg(d.queue ORDER BY d.queue) FROM declared AS d
            WHERE NOT EXISTS (SELECT 1 FROM live AS l WHERE l.queue = d.queue)
        ), '[]'::jsonb),
        'stranded', coalesce((
            SELECT jsonb_agg(jsonb_build_object('queue', s.queue, 'pending', s.pending) ORDER BY s.queue)
            FROM stranded AS s
        ), '[]'::jsonb),
        'stranded_pending', (SELECT coalesce(sum(s.pending), 0) FROM stranded AS s),
        'schedules', (
            SELECT jsonb_build_object(
                'active', count(*),
                'oldest_due_at', min(coalesce(s.next_due_at, s.updated_at))
            )
            FROM harvest.schedules AS s
            WHERE NOT s.paused
        )
    );
$$;

-- This shard's facts for `harvest shard health` in one round trip: what its readiness
-- gates on (get_shard_readiness) and its pressure: each queue's live workers and work
-- (pending, claimable now, running, the oldest claimable due time), counted as the metrics
-- sampler counts them (_sample_queue_depths: exact up to 10,000 pending tasks a queue, past
-- that a block sample's estimate, `estimated`; a count of every task was 0.4 s of CPU over a
-- backlog of 2M), and the dead letters parked here; and its cross-shard children both ways,
-- what the retire of a shard waits for (docs/sharding.md, "Retiring the shard of a child"):
-- the children it drives by target shard, the ends it owes by parent shard.
CREATE OR REPLACE FUNCTION harvest.get_shard_health(p_queues text[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH live AS (
        SELECT
            u.queue,
            count(*) AS workers
        FROM harvest.workers AS ws CROSS JOIN LATERAL unnest(ws.queues) AS u (queue)
        WHERE ws.status = 'active' AND harvest._worker_health(ws) = 'healthy'
        GROUP BY u.queue
    ),

    clock AS MATERIALIZED (SELECT harvest.now() AS now),

    -- The sampler's rows (a queue and kind each) summed per queue: the oldest claimable is the
    -- oldest of its kinds' (an age in seconds there, a time again here).
    work AS (
        SELECT
            q.value ->> 'queue' AS queue,
            sum((q.value ->> 'claimable')::bigint + (q.value ->> 'scheduled')::bigint) AS pending,
            sum((q.value ->> 'claimable')::bigint) AS claimable,
            sum((q.value ->> 'running')::bigint) AS running,
            min(c.now) - max((q.value ->> 'oldest_claimable_secs')::double precision) * interval '1 second'
                AS oldest_claimable_at,
            bool_or((q.value ->> 'estimated')::boolean) AS estimated
        FROM clock AS c
        CROSS JOIN LATERAL harvest._sample_queue_depths(c.now) AS d
        CROSS JOIN LATERAL jsonb_array_elements(d.queues) AS q
        GROUP BY q.value ->> 'queue'
    ),

    declared AS (
        SELECT DISTINCT d.queue
        FROM unnest(coalesce(p_queues, (
            SELECT array_agg(u.queue) FROM harvest.workers AS ws CROSS JOIN LATERAL unnest(ws.queues) AS u (queue)
        ))) AS d (queue)
    ),

    queues AS (
        SELECT
            q.queue,
            coalesce(l.workers, 0) AS live_workers,
            coalesce(k.pending, 0) AS pending,
            coalesce(k.claimable, 0) AS claimable,
            coalesce(k.running, 0) AS running,
            k.oldest_claimable_at,
            coalesce(k.estimated, false) AS estimated
        FROM (SELECT d.queue FROM declared AS d UNION SELECT k.queue FROM work AS k) AS q
        LEFT JOIN live AS l ON q.queue = l.queue
        LEFT JOIN work AS k ON q.queue = k.queue
    )

    SELECT harvest.get_shard_readiness(p_queues) || jsonb_build_object(
        'queues', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'queue', q.queue, 'live_workers', q.live_workers, 'pending', q.pending,
                'claimable', q.claimable, 'running', q.running,
                'oldest_claimable_at', q.oldest_claimable_at, 'estimated', q.estimated
            ) ORDER BY q.queue)
            FROM queues AS q
        ), '[]'::jsonb),
        'dead_letters', (SELECT count(*) FROM harvest.dead_letters),
        -- The cross-shard children this shard's pump drives, by the shard each lives on (the
        -- in-flight rows: one goes when its end is released to its child's shard).
        'cross_shard_children', coalesce((
            SELECT jsonb_agg(jsonb_build_object('target_shard', c.target_shard, 'children', c.n)
                ORDER BY c.target_shard)
            FROM (
                SELECT x.target_shard, count(*) AS n
                FROM harvest.cross_shard_children AS x
                GROUP BY x.target_shard
            ) AS c
        ), '[]'::jsonb),
        -- The children here whose ends are owed to a parent on another shard, by parent shard
        -- (the partial index executions_end_owed, as get_retention_status reads it).
        'owed_child_ends', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'parent_shard', o.parent_shard, 'ended', o.ended, 'running', o.running
            ) ORDER BY o.parent_shard)
            FROM harvest._owed_child_ends() AS o
        ), '[]'::jsonb)
    );
$$;

-- The shards of the deployment this database is one of, as far as it knows: its own
-- shard and every shard a worker registered here named (a sharded worker writes the
-- shards it polls, metadata.shard_assignments, and its router's readable shards,
-- metadata.readable_shards, when it registers; a row stays until retention prunes it).
-- Just its own for a database no sharded worker registered on: a one-database
-- deployment. Read at boot by a worker without [shards] (harvest.Worker), which must
-- not declare schedules on one shard of several (they would fire on two).
CREATE OR REPLACE FUNCTION harvest.get_deployment_shards()
RETURNS integer[]
LANGUAGE sql STABLE
AS $$
    SELECT array_agg(DISTINCT k.shard ORDER BY k.shard)
    FROM (
        SELECT i.shard_id AS shard FROM harvest.shard_identity AS i WHERE i.id
        UNION
        SELECT e.value::integer
        FROM harvest.workers AS w
        CROSS JOIN LATERAL unnest(ARRAY['shard_assignments', 'readable_shards']) AS m (key)
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(w.metadata -> m.key) = 'array' THEN w.metadata -> m.key ELSE '[]'::jsonb END
        ) AS e (value)
        WHERE e.value ~ '^[0-9]{1,5}$' AND e.value::integer <= 65535
    ) AS k;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.get_shard_id IS
'This database''s shard number (0..65535; 0 until set_shard_id). Read at boot by clients and workers to check '
'that a pool reaches the shard it was configured for. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.set_shard_id IS
'Make this database shard p_shard_id (harvest migrate run --shard-id N); HR011 while it holds executions minted '
'for another shard, HR001 out of 0..65535; idempotent, audited when the number changes. Returns {shard_id, '
'previous_shard_id, changed}. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.count_stranded_tasks IS
'The stranded-work gauge: claimable tasks (pending, due, not timers) per queue that no live worker of this shard '
'polls, with the oldest due time; no row is the healthy state. Read by harvest shard health and metrics. Roles '
'harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.get_shard_readiness IS
'What this shard''s readiness gates on, at a few index probes whatever the backlog: shard id, schema version, '
'live/stale/draining/stopped workers, the declared queues (p_queues, else the registered ones) no live worker polls, '
'stranded work, and the unpaused schedules with the oldest due time among them; no per-queue count. Read by '
'/health/ready with readiness.require_shard_readiness. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_shard_health IS
'This shard''s health facts in one object: get_shard_readiness''s (shard id, schema version, workers, the declared '
'queues no live worker polls, stranded work, the unpaused schedules and the oldest due time among them: scheduler '
'freshness) and its pressure: per-queue live workers and work (exact up to 10,000 pending tasks a queue, past '
'that a block sample''s estimate, estimated: the metrics sampler''s count) and dead letters; and '
'its cross-shard children: those it drives by target shard (cross_shard_children) and the child ends it owes by '
'parent shard (owed_child_ends). Read by '
'harvest shard health and GET /admin/shards/health. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_deployment_shards IS
'The shards of the deployment this database is one of, as far as it knows: its own and every shard named by a '
'registered worker''s shard_assignments or readable_shards (metadata); its own alone for a one-database deployment. '
'Read at boot by a worker without [shards]. Roles harvest_reader, harvest_worker.';
