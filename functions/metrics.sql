-- Metrics: the gauges a metrics sampler publishes (docs/observability.md), read in one
-- round trip. Counters and histograms are counted by each process on its hot paths
-- (harvest/telemetry/metrics.py); what only the database knows (queue depth and age,
-- dead letters, the worker fleet, concurrency keys, stranded work, relay backlogs,
-- retention lag) is sampled here by one placed sampler per database.

-- One sampler per database: the session that holds this session advisory lock samples (it
-- goes with the session; harvest/worker/sampler.py). Taken here, as the owner, rather than by
-- the sampler's login calling pg_try_advisory_lock itself, so that an operator may revoke the
-- advisory-lock functions from PUBLIC (docs/security.md, "Advisory locks") and the sampler
-- still leads. The key is "harv" "metr", the one the sampler used before. A session that
-- leads and does not sample stops the gauges for everyone, so this is a worker's and an
-- admin's (a web process's login holds admin), not a reader's.
CREATE OR REPLACE FUNCTION harvest.claim_sampler_lead()
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.pg_try_advisory_lock(7521418705652511858);  -- 0x686172766D657472
$$;

-- The busiest p_max_keys of the keys p_keys (NULL: every key), by in flight, then pending, then
-- key and task type, as get_metric_samples exports them; and the live keyed runs' in flight and
-- pending sums over every key: the keys counted and, on the same pass, the others' runs
-- (_count_concurrency_keys' NULL-key row). (The keyed activities' sums come with the queue depths.)
CREATE OR REPLACE FUNCTION harvest._busiest_concurrency_keys(
    p_keys text[], p_max_keys integer, OUT busiest jsonb, OUT runs_in_flight bigint, OUT runs_pending bigint
)
LANGUAGE sql STABLE
AS $$
    WITH c AS MATERIALIZED (
        SELECT c.key, c.task_type, c.in_flight, c.pending
        FROM harvest._count_concurrency_keys(p_keys, NULL, true) AS c
    )
    SELECT
        (SELECT coalesce(jsonb_agg(jsonb_build_object(
             'key', b.key, 'task_type', b.task_type, 'in_flight', b.in_flight, 'pending', b.pending
         ) ORDER BY b.in_flight DESC, b.pending DESC, b.key, b.task_type), '[]'::jsonb)
         FROM (
             SELECT c.key, c.task_type, c.in_flight, c.pending FROM c
             WHERE c.key IS NOT NULL
             ORDER BY c.in_flight DESC, c.pending DESC, c.key, c.task_type
             LIMIT p_max_keys
         ) AS b),
        coalesce(sum(c.in_flight) FILTER (WHERE c.task_type = 'workflow'), 0)::bigint,
        coalesce(sum(c.pending) FILTER (WHERE c.task_type = 'workflow'), 0)::bigint
    FROM c;
$$;

-- The queue depths the sampler exports, at a cost that stops growing with the backlog
-- (docs/observability.md, "Queue depths past the cap"): per queue and kind the claimable,
-- scheduled and running tasks and the oldest claimable task's due time; the keyed activities'
-- running and pending totals; the timers not fired. Counting every task, grouped, read a 2M-task
-- backlog whole each sample (0.54 s of CPU). Now a table of at most p_sample_pages pages is
-- still counted whole, exactly (as cheap as a sample of it would be); a bigger one:
-- - the queues with pending work are found one probe each of tasks_claimable
--   (_pending_queues), and each is read in claim order up to p_cap + 1 tasks: a queue of at most p_cap
--   pending tasks is counted exactly from them, per kind, as before (estimated false);
-- - a queue past p_cap: its claimable and scheduled per kind are a block sample of the table
--   (TABLESAMPLE SYSTEM over about p_sample_pages pages, scaled by the fraction read; never
--   below what its head counted), estimated true, a row for each kind of claimable task
--   (workflow, activity) whether or not the head or the sample met one (a rare kind's series
--   stays; 0 when neither did); its oldest claimable due time stays exact
--   (_earliest_pending_due_at: a probe per priority), the queue's whatever the kind (on each kind with claimable tasks);
-- - running tasks from tasks_running_lease, a paused run's tasks through its PAUSED row, the
--   pending timers from tasks_timers_due: exact (a fleet's slots, paused runs, sleeping runs);
-- - the keyed pending activities counted up to p_cap + 1 under tasks_activity_concurrency_key,
--   past it the same sample's estimate (keyed_pending_estimated).
-- A row is a (queue, kind) with pending, running or paused tasks, as the grouped count's were
-- (and past the cap, both kinds of a queue).
-- The cap and the sample's pages are the sampler's (get_metric_samples) and `harvest shard
-- health`'s (get_shard_health) by default: 10,000 pending tasks, about 1,000 pages; the seed,
-- p_now's epoch (a test passes its own).
CREATE OR REPLACE FUNCTION harvest._sample_queue_depths(
    p_now timestamptz, p_cap integer DEFAULT 10000, p_sample_pages integer DEFAULT 1000,
    p_seed double precision DEFAULT NULL,
    OUT queues jsonb, OUT keyed_running bigint, OUT keyed_pending bigint,
    OUT keyed_pending_estimated boolean, OUT timers bigint
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_heads jsonb;
    v_deep text[];
    v_percent double precision;
    v_sample jsonb := '[]';
    v_pages bigint := pg_catalog.pg_relation_size('harvest.tasks') / current_setting('block_size')::integer;
BEGIN
    IF v_pages <= p_sample_pages THEN
        -- A small table: every task read once, grouped, exact (the sampler's pass before the cap).
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'queue', q.queue, 'kind', q.kind, 'claimable', q.claimable, 'scheduled', q.scheduled,
                   'running', q.running,
                   'oldest_claimable_secs', extract(epoch FROM p_now - q.oldest_claimable_at),
                   'estimated', false
               ) ORDER BY q.queue, q.kind) FILTER (WHERE q.kind <> 'timer'), '[]'::jsonb),
               coalesce(sum(q.keyed_running), 0), coalesce(sum(q.keyed_pending), 0), false,
               coalesce(sum(q.tasks) FILTER (WHERE q.kind = 'timer'), 0)
        INTO queues, keyed_running, keyed_pending, keyed_pending_estimated, timers
        FROM (
            SELECT
                t.queue,
                t.kind,
                count(*) FILTER (WHERE t.status = 'pending' AND t.due_at <= p_now) AS claimable,
                count(*) FILTER (WHERE t.status = 'pending' AND t.due_at > p_now) AS scheduled,
                count(*) FILTER (WHERE t.status = 'running') AS running,
                min(t.due_at) FILTER (WHERE t.status = 'pending' AND t.due_at <= p_now) AS oldest_claimable_at,
                count(*) FILTER (WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL
                                   AND t.status = 'running') AS keyed_running,
                count(*) FILTER (WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL
                                   AND t.status = 'pending') AS keyed_pending,
                count(*) AS tasks
            FROM harvest.tasks AS t
            GROUP BY t.queue, t.kind
        ) AS q;
        RETURN;
    END IF;
    -- Each queue's head, in claim order (tasks_claimable), at most p_cap + 1 tasks.
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'queue', f.queue, 'kind', h.kind, 'claimable', h.claimable, 'scheduled', h.scheduled,
        'oldest_claimable_at', h.oldest_claimable_at, 'deep', h.head > p_cap
    )), '[]'::jsonb)
    INTO v_heads
    FROM harvest._pending_queues() AS f (queue)
    CROSS JOIN LATERAL (
        SELECT
            x.kind,
            count(*) FILTER (WHERE x.due_at <= p_now) AS claimable,
            count(*) FILTER (WHERE x.due_at > p_now) AS scheduled,
            min(x.due_at) FILTER (WHERE x.due_at <= p_now) AS oldest_claimable_at,
            sum(count(*)) OVER () AS head
        FROM (
            SELECT t.kind, t.due_at FROM harvest.tasks AS t
            WHERE t.queue = f.queue AND t.status = 'pending' AND t.kind <> 'timer'
            ORDER BY t.priority DESC, t.due_at, t.id
            LIMIT p_cap + 1
        ) AS x
        GROUP BY x.kind
    ) AS h;
    v_deep := ARRAY(SELECT DISTINCT h.value ->> 'queue' FROM jsonb_array_elements(v_heads) AS h
                    WHERE (h.value ->> 'deep')::boolean);
    SELECT count(*) INTO keyed_pending FROM (
        SELECT 1 FROM harvest.tasks AS t
        WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL AND t.status = 'pending'
        LIMIT p_cap + 1
    ) AS k;
    keyed_pending_estimated := keyed_pending > p_cap;
    -- Past the cap: one block sample of the table, about p_sample_pages pages, each block read with probability v_percent % (the blocks chosen by p_seed: the
    -- sampler passes its time): a count in it, scaled by 100 / v_percent, estimates the
    -- table's without bias.
    IF cardinality(v_deep) > 0 OR keyed_pending_estimated THEN
        v_percent := 100.0 * p_sample_pages / v_pages;
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'queue', s.queue, 'kind', s.kind, 'claimable', s.claimable, 'scheduled', s.scheduled,
                   'keyed', s.keyed)), '[]'::jsonb)
        INTO v_sample
        FROM (
            SELECT
                t.queue,
                t.kind,
                round(count(*) FILTER (WHERE t.due_at <= p_now) * 100 / v_percent)::bigint AS claimable,
                round(count(*) FILTER (WHERE t.due_at > p_now) * 100 / v_percent)::bigint AS scheduled,
                round(count(*) FILTER (WHERE t.kind = 'activity' AND t.concurrency_key IS NOT NULL)
                      * 100 / v_percent)::bigint AS keyed
            FROM harvest.tasks AS t TABLESAMPLE SYSTEM (v_percent) REPEATABLE (coalesce(p_seed, extract(epoch FROM p_now)))
            WHERE t.status = 'pending' AND t.kind <> 'timer'
            GROUP BY t.queue, t.kind
        ) AS s;
        IF keyed_pending_estimated THEN
            keyed_pending := greatest(
                keyed_pending,
                (SELECT coalesce(sum((s.value ->> 'keyed')::bigint), 0) FROM jsonb_array_elements(v_sample) AS s)
            );
        END IF;
    END IF;
    WITH heads AS (
        SELECT
            h.value ->> 'queue' AS queue,
            h.value ->> 'kind' AS kind,
            (h.value ->> 'claimable')::bigint AS claimable,
            (h.value ->> 'scheduled')::bigint AS scheduled,
            (h.value ->> 'oldest_claimable_at')::timestamptz AS oldest_claimable_at
        FROM jsonb_array_elements(v_heads) AS h
    ),

    sampled AS (
        SELECT
            s.value ->> 'queue' AS queue,
            s.value ->> 'kind' AS kind,
            (s.value ->> 'claimable')::bigint AS claimable,
            (s.value ->> 'scheduled')::bigint AS scheduled
        FROM jsonb_array_elements(v_sample) AS s
        WHERE s.value ->> 'queue' = ANY(v_deep)
    ),

    -- Running tasks (tasks_running_lease) and a paused run's tasks (its PAUSED row, then its
    -- tasks by execution): every (queue, kind) with tasks appears, as the grouped count's rows.
    others AS MATERIALIZED (
        SELECT
            t.queue,
            t.kind,
            count(*) FILTER (WHERE t.status = 'running') AS running,
            count(*) FILTER (WHERE t.status = 'running' AND t.kind = 'activity'
                               AND t.concurrency_key IS NOT NULL) AS keyed_running,
            count(*) AS tasks
        FROM (
            SELECT r.queue, r.kind, r.status, r.concurrency_key FROM harvest.tasks AS r
            WHERE r.status = 'running'
            UNION ALL
            SELECT p.queue, p.kind, p.status, p.concurrency_key
            FROM harvest.executions AS e
            JOIN harvest.tasks AS p ON p.execution_id = e.id
            WHERE e.status = 'PAUSED' AND p.status = 'paused'
        ) AS t
        GROUP BY t.queue, t.kind
    ),

    deep AS (
        SELECT q.queue, harvest._earliest_pending_due_at(q.queue) AS earliest
        FROM unnest(v_deep) AS q (queue)
    ),

    depths AS (
        SELECT
            k.queue,
            k.kind,
            d.queue IS NOT NULL AS estimated,
            CASE WHEN d.queue IS NULL THEN coalesce(h.claimable, 0)
                 ELSE greatest(coalesce(h.claimable, 0), coalesce(s.claimable, 0)) END AS claimable,
            CASE WHEN d.queue IS NULL THEN coalesce(h.scheduled, 0)
                 ELSE greatest(coalesce(h.scheduled, 0), coalesce(s.scheduled, 0)) END AS scheduled,
            coalesce(o.running, 0) AS running,
            -- (past the cap the queue's oldest, on each kind's series that has claimable tasks: a
            -- kind with none, its tasks running or scheduled, has no oldest wait, as below the cap)
            CASE WHEN d.queue IS NULL THEN h.oldest_claimable_at
                 WHEN d.earliest <= p_now AND greatest(coalesce(h.claimable, 0), coalesce(s.claimable, 0)) > 0
                     THEN d.earliest END AS oldest_claimable_at
        FROM (
            SELECT heads.queue, heads.kind FROM heads
            UNION
            SELECT sampled.queue, sampled.kind FROM sampled
            UNION
            SELECT others.queue, others.kind FROM others WHERE others.kind <> 'timer'
            UNION
            -- A queue past the cap: a row for each kind of claimable task, whether or not its
            -- head or the sample met one, so that a rare kind's series does not come and go
            -- with the blocks drawn (its estimate is 0 then; nothing is read for it).
            SELECT q.queue, c.kind
            FROM unnest(v_deep) AS q (queue)
            CROSS JOIN (VALUES ('workflow'), ('activity')) AS c (kind)
        ) AS k
        LEFT JOIN heads AS h ON h.queue = k.queue AND h.kind = k.kind
        LEFT JOIN sampled AS s ON s.queue = k.queue AND s.kind = k.kind
        LEFT JOIN others AS o ON o.queue = k.queue AND o.kind = k.kind
        LEFT JOIN deep AS d ON d.queue = k.queue
    )

    SELECT
        coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'queue', r.queue, 'kind', r.kind, 'claimable', r.claimable, 'scheduled', r.scheduled,
                'running', r.running,
                'oldest_claimable_secs', extract(epoch FROM p_now - r.oldest_claimable_at),
                'estimated', r.estimated
            ) ORDER BY r.queue, r.kind)
            FROM depths AS r
        ), '[]'::jsonb),
        (SELECT coalesce(sum(o.keyed_running), 0) FROM others AS o),
        (SELECT count(*) FROM harvest.tasks AS t WHERE t.kind = 'timer' AND t.status = 'pending')
        + (SELECT coalesce(sum(o.tasks), 0) FROM others AS o WHERE o.kind = 'timer')
    INTO queues, keyed_running, timers;
END;
$$;

-- Every label this returns is bounded: queue names, task kinds, workflow and activity
-- names (code-defined), worker health, concurrency keys (at most p_max_keys, the busiest
-- first; the rest summed under other_keys). Never an execution or task id.
CREATE OR REPLACE FUNCTION harvest.get_metric_samples(p_max_keys integer DEFAULT 50)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_max_age interval;
    v_queues jsonb;
    v_in_flight bigint;
    v_pending bigint;
    v_timers bigint;
    c_max_in_flight_rows constant integer := 10000;
    v_pending_estimated boolean;
    v_keys text[];
    v_ranked boolean := false;
    v_concurrency jsonb := '[]';
    v_runs_in_flight bigint;
    v_runs_pending bigint;
    v_exported_in_flight bigint;
    v_exported_pending bigint;
BEGIN
    IF p_max_keys IS NULL OR p_max_keys < 0 OR p_max_keys > 1000 THEN
        RAISE EXCEPTION 'get_metric_samples: p_max_keys = % is out of range'
        , coalesce(p_max_keys::text, 'NULL')
        USING ERRCODE = 'HR001', HINT = 'pass a number of concurrency keys from 0 to 1000';
    END IF;
    SELECT r.max_age INTO v_max_age FROM harvest.retention_config AS r WHERE r.id;
    -- The queue depths, exact up to 10,000 pending tasks a queue, past it a block sample of
    -- about 1,000 pages of the tasks estimates them (_sample_queue_depths' defaults,
    -- docs/observability.md).
    SELECT d.queues, d.keyed_running, d.keyed_pending, d.keyed_pending_estimated, d.timers
    INTO v_queues, v_in_flight, v_pending, v_pending_estimated, v_timers
    FROM harvest._sample_queue_depths(v_now) AS d;
    -- The concurrency keys: the busiest p_max_keys (in flight, then pending, then key), and the
    -- others' sums, exact: every key's in flight and pending less the exported keys'. Ranking
    -- every key's counts (list_concurrency_keys(NULL)) read each keyed task a second time and
    -- grouped and sorted every key, 100,000 for 100,000 tenants, to keep p_max_keys. A key with
    -- work in flight outranks every key without, so when p_max_keys keys have work in flight the
    -- busiest are all among them, and only those keys are ranked. They are the keys of the
    -- in-flight rows: running keyed activities (tasks_concurrency_running), admitted runs' slots
    -- (the slot holds its run's key, and goes when the run ends), the live runs of a
    -- cancel_running workflow. That is read while there are at most c_max_in_flight_rows of those
    -- rows (a fleet's running activities are its workers' slots; a run admitted per tenant is a
    -- row per tenant): past it, or with fewer than p_max_keys keys in flight (the rest rank by
    -- pending, which only every key's counts say), every key is counted. Either way the live keyed
    -- runs are read once, on the pass that counts the keys (_count_concurrency_keys, by
    -- _live_keyed_runs' in-flight rule), the others' runs summed on it; the keyed activities'
    -- totals came with the queue depths. The keys found are a superset at most (a key's counts
    -- are _live_keyed_runs'), never short of a key in flight.
    IF p_max_keys > 0 THEN
        v_keys := ARRAY(
            SELECT f.key FROM (
                SELECT t.concurrency_key AS key FROM harvest.tasks AS t
                WHERE t.status = 'running' AND t.concurrency_key IS NOT NULL AND t.kind = 'activity'
                UNION ALL
                SELECT s.concurrency_key FROM harvest.workflow_slots AS s
                UNION ALL
                SELECT e.concurrency_key FROM harvest.flow_policies AS p
                JOIN harvest.executions AS e ON e.workflow_name = p.name
                WHERE p.kind = 'workflow' AND p.policy #>> '{concurrency,on_conflict}' = 'cancel_running'
                  AND e.status IN ('RUNNING', 'PAUSED') AND e.concurrency_key IS NOT NULL
            ) AS f
            LIMIT c_max_in_flight_rows + 1
        );
        IF cardinality(v_keys) <= c_max_in_flight_rows THEN
            v_keys := ARRAY(SELECT DISTINCT k FROM unnest(v_keys) AS k);
            IF cardinality(v_keys) >= p_max_keys THEN
                SELECT b.busiest, b.runs_in_flight, b.runs_pending INTO v_concurrency, v_runs_in_flight, v_runs_pending
                FROM harvest._busiest_concurrency_keys(v_keys, p_max_keys) AS b;
                v_ranked := coalesce((v_concurrency -> (p_max_keys - 1) ->> 'in_flight')::bigint > 0, false);
            END IF;
        END IF;
    END IF;
    IF p_max_keys > 0 AND NOT v_ranked THEN
        SELECT b.busiest, b.runs_in_flight, b.runs_pending INTO v_concurrency, v_runs_in_flight, v_runs_pending
        FROM harvest._busiest_concurrency_keys(NULL, p_max_keys) AS b;
    ELSIF p_max_keys = 0 THEN
        -- No key exported: the keyed runs' totals alone, by the status view's rule.
        SELECT n.in_flight, n.runs - n.in_flight INTO v_runs_in_flight, v_runs_pending
        FROM (SELECT count(*) FILTER (WHERE r.in_flight) AS in_flight, count(*) AS runs
              FROM harvest._live_keyed_runs(NULL) AS r) AS n;
    END IF;
    v_in_flight := v_in_flight + v_runs_in_flight;
    v_pending := v_pending + v_runs_pending;
    SELECT coalesce(sum((c.value ->> 'in_flight')::bigint), 0), coalesce(sum((c.value ->> 'pending')::bigint), 0)
    INTO v_exported_in_flight, v_exported_pending
    FROM jsonb_array_elements(v_concurrency) AS c;
    RETURN jsonb_build_object(
        'shard_id', harvest.get_shard_id(),
        'schema_version', harvest.schema_version(),
        'observed_at', v_now,
        'queues', v_queues,
        'timers_pending', v_timers,
        'dead_letters', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'workflow_name', d.workflow_name, 'activity_name', d.activity_name, 'kind', d.kind,
                'count', d.n
            ) ORDER BY d.workflow_name, d.activity_name)
            FROM (
                SELECT
                    dl.workflow_name,
                    coalesce(dl.activity_name, '') AS activity_name,
                    dl.kind,
                    count(*) AS n
                FROM harvest.dead_letters AS dl
                GROUP BY 1, 2, 3
            ) AS d
        ), '[]'::jsonb),
        'workers', coalesce((
            SELECT jsonb_agg(jsonb_build_object('queue', w.queue, 'health', w.health, 'count', w.n)
                             ORDER BY w.queue, w.health)
            FROM (
                SELECT
                    u.queue,
                    CASE WHEN ws.status = 'draining' THEN 'draining' ELSE harvest._worker_health(ws) END AS health,
                    count(*) AS n
                FROM harvest.workers AS ws CROSS JOIN LATERAL unnest(ws.queues) AS u (queue)
                WHERE ws.status <> 'stopped'
                GROUP BY 1, 2
            ) AS w
        ), '[]'::jsonb),
        'concurrency', v_concurrency,
        -- The keys not exported, summed (their number is not counted: that is every key's).
        -- (The keyed activities' pending past the cap is an estimate: never below 0 then.)
        'other_keys', jsonb_build_object(
            'in_flight', v_in_flight - v_exported_in_flight,
            'pending', greatest(v_pending - v_exported_pending, 0),
            'pending_estimated', v_pending_estimated),
        'stranded', coalesce((
            SELECT jsonb_agg(jsonb_build_object('queue', s.queue, 'pending', s.pending) ORDER BY s.queue)
            FROM harvest.count_stranded_tasks() AS s
        ), '[]'::jsonb),
        'relays', (
            SELECT jsonb_build_object(
                'local', count(*) FILTER (WHERE NOT r.remote),
                'remote', count(*) FILTER (WHERE r.remote),
                'remote_oldest_secs', extract(epoch FROM v_now - min(r.created_at) FILTER (WHERE r.remote)),
                -- Signals and cancels to another shard (by execution id, or by business key: the
                -- guide's "by-id" is by workflow_id) that a delivery attempt left pending
                -- (released with an error: a shard could not be inspected, ...).
                'by_id_indeterminate_signal_oldest_secs', extract(epoch FROM v_now - min(r.created_at) FILTER (
                    WHERE r.remote AND r.kind = 'external_signal' AND r.last_error IS NOT NULL)),
                'by_id_indeterminate_cancel_oldest_secs', extract(epoch FROM v_now - min(r.created_at) FILTER (
                    WHERE r.remote AND r.kind = 'external_cancel' AND r.last_error IS NOT NULL))
            )
            FROM harvest.relays AS r
        ),
        'cross_shard_children', (
            SELECT jsonb_build_object(
                'in_flight', count(*),
                'oldest_secs', extract(epoch FROM v_now - min(c.created_at))
            )
            FROM harvest.cross_shard_children AS c
        ),
        -- Ends of cross-shard children this shard keeps for parents on other shards, per
        -- parent shard: an old one is a parent whose pump does not take its child's end.
        'owed_child_ends', (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                'parent_shard', o.parent_shard, 'ended', o.ended, 'running', o.running,
                'oldest_secs', extract(epoch FROM v_now - o.oldest_completed_at)) ORDER BY o.parent_shard),
                '[]'::jsonb)
            FROM harvest._owed_child_ends() AS o
        ),
        'retention', jsonb_build_object(
            'configured', v_max_age IS NOT NULL,
            -- How long the oldest run the janitor would delete has waited for it: the runs
            -- retention keeps (a legal hold, a chain's earlier runs) are not behind, and
            -- counting them made a held run's lag (and HarvestRetentionLagging) grow for good.
            -- A MIGRATED seal is the janitor's too, but judged where its run lives (delete_seals).
            'lag_secs', CASE WHEN v_max_age IS NOT NULL THEN coalesce((
                SELECT extract(epoch FROM harvest._ago(v_now, v_max_age) - e.completed_at)
                FROM harvest.executions AS e
                WHERE e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED')
                  AND e.completed_at < harvest._ago(v_now, v_max_age)
                  AND e.end_owed_to_shard IS NULL  -- (executions_retention)
                  AND NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard)
                ORDER BY e.completed_at
                LIMIT 1
            ), 0) END
        )
    );
END;
$$;

-- The runs closed outside any worker's decision, after a keyset cursor: TERMINATED
-- (an operator, a parent's close policy, a reuse policy), TIMED_OUT (the scanner) and
-- CANCELLED by a concurrency supersede (on_conflict = cancel_running). A decision's own
-- closes are counted by the worker that made it (harvest_workflow_terminal); these are
-- counted by the placed sampler (harvest/worker/sampler.py), which keeps the cursor.
-- Rows after (p_after_at, p_after_id) in (completed_at, id) order, closed at or before
-- p_until, at most p_limit; history_size is the run's event count.
CREATE OR REPLACE FUNCTION harvest.list_forced_closes(
    p_after_at timestamptz, p_after_id uuid, p_until timestamptz, p_limit integer DEFAULT 1000
)
RETURNS TABLE (
    execution_id uuid, workflow_name text, status text, superseded boolean, history_size bigint,
    completed_at timestamptz
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_after_at IS NULL OR p_until IS NULL THEN
        RAISE EXCEPTION 'list_forced_closes needs a cursor time and an upper bound' USING ERRCODE = 'HR001',
            HINT = 'pass p_after_at and p_until (the sampler''s cursor and the database''s now)';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'list_forced_closes: p_limit = % is out of range', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'HR001', HINT = 'pass a limit from 1 to 10000';
    END IF;
    -- Ended runs by completion time are indexed in two parts (migration 0102): those that owe
    -- no parent their end (executions_retention, nearly all) and those that do
    -- (executions_end_owed, a few cross-shard children): each part is read in order, then merged.
    RETURN QUERY
    SELECT f.id, f.workflow_name, f.status, f.status = 'CANCELLED', f.last_event_id, f.completed_at
    FROM (
        (SELECT e.id, e.workflow_name, e.status, e.last_event_id, e.completed_at
         FROM harvest.executions AS e
         WHERE e.status NOT IN ('RUNNING', 'MIGRATED') AND e.end_owed_to_shard IS NULL  -- (executions_retention)
           AND e.completed_at >= p_after_at AND e.completed_at <= p_until
           AND (e.completed_at, e.id)
               > (p_after_at, coalesce(p_after_id, '00000000-0000-0000-0000-000000000000'::uuid))
           AND (e.status IN ('TERMINATED', 'TIMED_OUT')
                OR (e.status = 'CANCELLED' AND e.failure ->> 'error_type' = 'Superseded'))
         ORDER BY e.completed_at, e.id
         LIMIT p_limit)
        UNION ALL
        (SELECT e.id, e.workflow_name, e.status, e.last_event_id, e.completed_at
         FROM harvest.executions AS e
         WHERE e.end_owed_to_shard IS NOT NULL
           AND e.completed_at >= p_after_at AND e.completed_at <= p_until
           AND (e.completed_at, e.id)
               > (p_after_at, coalesce(p_after_id, '00000000-0000-0000-0000-000000000000'::uuid))
           AND (e.status IN ('TERMINATED', 'TIMED_OUT')
                OR (e.status = 'CANCELLED' AND e.failure ->> 'error_type' = 'Superseded'))
         ORDER BY e.completed_at, e.id
         LIMIT p_limit)
    ) AS f
    ORDER BY f.completed_at, f.id
    LIMIT p_limit;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.claim_sampler_lead IS
'Whether this session now leads the database''s metrics sampler (a session advisory lock, held until the session '
'ends; true again while it holds it): one sampler per database. Called by the metrics sampler (roles '
'harvest_worker, harvest_admin).';
COMMENT ON FUNCTION harvest.get_metric_samples IS
'The sampled gauges of this database in one read-only round trip (docs/observability.md): per queue and kind the '
'claimable, scheduled and running tasks and the oldest claimable age (claimable and scheduled exact up to 10,000 '
'pending tasks a queue, past that a block sample''s estimate marked estimated); dead letters per workflow and activity; live '
'workers per queue and health; the busiest p_max_keys concurrency keys (the rest summed); stranded work; relay and '
'cross-shard child backlogs; retention lag. HR001 for p_max_keys outside 0..1000. Called by the metrics sampler '
'(roles harvest_reader, harvest_worker).';
COMMENT ON FUNCTION harvest.list_forced_closes IS
'The runs closed outside any worker''s decision (TERMINATED, TIMED_OUT, CANCELLED by a concurrency supersede) after a '
'(completed_at, id) cursor up to p_until, at most p_limit, with their history size; HR001 for a missing bound or a '
'limit outside 1..10000. Called by the metrics sampler (roles harvest_reader, harvest_worker).';
