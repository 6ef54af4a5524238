-- Claiming work. One call fires the due timers of the caller's queues, then
-- claims a batch of workflow and activity tasks with FOR UPDATE SKIP LOCKED.
--
-- The candidate scan reads a bounded window from the head of each queue
-- (tasks_claimable, by priority then due time), so the cost of a claim stays flat
-- however deep the backlog grows. Admission gates of flow control (concurrency
-- keys, rate limits) filter the candidates in the same transaction: when a
-- candidate of the window carries a gate (tasks.concurrency_key or rate_key),
-- harvest._admit_candidates (flow_concurrency.sql) takes the per-key advisory locks
-- (try-lock, sorted: the claim never waits), counts in flight in a statement
-- that starts after the locks are held, and returns the admissible ids; the
-- claim then takes the slots and pays the buckets before it commits. A window
-- without a gated candidate takes the default path, which is the same single
-- claim statement as before flow control: uncapped work pays one extra column
-- read per candidate and nothing else.
--
-- Priority ageing and fairness keys (docs/flow-control.md) add two more bounded
-- windows per queue, read only when the queue holds such tasks (one probe of an
-- empty partial index each otherwise): the oldest ageing tasks by due time
-- (tasks_claimable_aging), and the head of each fairness key, up to 32 keys per
-- claim found by a skip-scan over tasks_claimable_fair that resumes where the
-- last claim stopped (harvest.fair_queues). The union of the windows is
-- ordered round-robin across fairness keys, then by effective priority
-- (priority + floor(age / priority_aging_secs)), then due time.

-- Fire due timers: append TimerFired and wake the workflow. Executions that are
-- locked elsewhere are skipped (their timers fire on the next claim), which
-- keeps the execution-then-task lock order and never waits. A PAUSED run's timers
-- are 'paused' (tasks_timers_due leaves them out) until it is resumed.
CREATE OR REPLACE FUNCTION harvest._fire_due_timers(p_queues text[], p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_timer record;
    v_fired integer := 0;
BEGIN
    FOR v_timer IN
        SELECT t.id, t.execution_id, t.seq
        FROM harvest.tasks AS t
        -- (claim_tasks probes this condition before it calls: keep the two alike)
        WHERE t.kind = 'timer' AND t.status = 'pending' AND t.due_at <= v_now AND t.queue = ANY(p_queues)
        ORDER BY t.due_at
        LIMIT p_limit
    LOOP
        PERFORM 1 FROM harvest.executions AS e
        WHERE e.id = v_timer.execution_id AND (e.status = 'RUNNING') IS TRUE  -- (core.sql: IS TRUE)
        FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM harvest.tasks AS t WHERE t.id = v_timer.id;
        CONTINUE WHEN NOT FOUND;
        PERFORM harvest._append_event(v_timer.execution_id, 'TimerFired',
            jsonb_build_object('seq', v_timer.seq));
        PERFORM harvest._ensure_workflow_task(v_timer.execution_id);
        v_fired := v_fired + 1;
    END LOOP;
    RETURN v_fired;
END;
$$;

-- How long a claim of a task leases it: a workflow task the worker's workflow
-- lease, an activity its start_to_close, or its heartbeat timeout or its
-- schedule_to_close when shorter. An activity's lease never outlives its
-- deadline_at, past which a result is refused (docs/activities.md): a hand-off (the
-- first attempt, due now) is capped here, a claim of a retry by deadline_at too.
CREATE OR REPLACE FUNCTION harvest._lease_secs(
    p_kind text, p_options jsonb, p_workflow_lease_secs double precision
)
RETURNS double precision
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_kind = 'workflow' THEN p_workflow_lease_secs
        ELSE least(
            coalesce((p_options ->> 'start_to_close')::double precision, 300),
            coalesce((p_options ->> 'heartbeat_timeout')::double precision, 'Infinity'),
            coalesce((p_options ->> 'schedule_to_close')::double precision, 'Infinity')
        )
    END;
$$;

-- Lock and lease the pending tasks among p_ids (at most p_limit, in the order of
-- p_ids, skipping rows locked elsewhere and rows no longer due); returns the claimed rows.
CREATE OR REPLACE FUNCTION harvest._claim_ids(
    p_ids bigint[], p_worker_id text, p_limit integer, p_workflow_lease_secs double precision,
    p_now timestamptz
)
RETURNS SETOF harvest.tasks
LANGUAGE sql
ROWS 10  -- a claim batch, not the default 1000: the caller joins executions by key
AS $$
    WITH locked AS (
        -- One primary-key probe per id, in claim order (claim_tasks ordered the
        -- list), each locking as the LIMIT pulls it, so the first p_limit unlocked
        -- ids win. LATERAL keeps it a probe per id: a plain join with the id list
        -- may be cached as a generic plan that scans the whole table
        -- (tests/integration/test_generic_plans.py). The lock re-checks the due time
        -- as well as the status: the candidates were read by an earlier statement, and a
        -- row may have been claimed, failed and made pending again with a backoff since.
        SELECT l.id
        FROM unnest(p_ids) WITH ORDINALITY AS c (id, ord)
        CROSS JOIN LATERAL (
            SELECT t.id FROM harvest.tasks AS t
            WHERE t.id = c.id AND t.status = 'pending' AND t.due_at <= p_now
            FOR UPDATE SKIP LOCKED
        ) AS l
        ORDER BY c.ord
        LIMIT p_limit
    )
    UPDATE harvest.tasks AS t
    SET status = 'running',
        attempt = t.attempt + 1,
        started_at = p_now,
        heartbeat_at = NULL,
        lease_owner = p_worker_id,
        fencing_token = nextval('harvest.fencing_tokens'),
        -- (least skips a NULL deadline_at: no schedule_to_close)
        lease_expires_at = least(p_now + make_interval(
            secs => harvest._lease_secs(t.kind, t.options, p_workflow_lease_secs)), t.deadline_at)
    FROM locked
    WHERE t.id = locked.id
    RETURNING t.*;
$$;

-- The events a worker's cached run has not seen, when that worker decided the run
-- last (decided_through is what its cached run had read), or the whole history of
-- a run nobody has decided yet (after event 0); NULL otherwise.
CREATE OR REPLACE FUNCTION harvest._events_since_decision(
    p_execution harvest.executions, p_kind text, p_worker_id text
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL, not SQL: its statement keeps one cached plan per session, where a
    -- SQL function with a composite argument was planned again on most calls.
    IF p_kind = 'workflow' AND (p_execution.decided_by = p_worker_id OR p_execution.decided_through IS NULL) THEN
        RETURN (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                'event_id', ev.event_id, 'event_type', ev.event_type, 'event_data', ev.event_data
            ) ORDER BY ev.event_id), '[]'::jsonb)
            FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution.id AND ev.event_id > coalesce(p_execution.decided_through, 0)
        );
    END IF;
    RETURN NULL;
END;
$$;

-- The first fairness key of a queue's claimable tasks after p_after (the first
-- of all when p_after is NULL): one step of the skip-scan over tasks_claimable_fair.
CREATE OR REPLACE FUNCTION harvest._next_fairness_key(p_queue text, p_after text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Two statements, not one with "p_after IS NULL OR": a generic plan of that
    -- would walk every row of the queue's first key instead of seeking past it.
    IF p_after IS NULL THEN
        RETURN (
            SELECT t.fairness_key FROM harvest.tasks AS t
            WHERE t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
              AND t.fairness_key IS NOT NULL
            ORDER BY t.fairness_key LIMIT 1
        );
    END IF;
    RETURN (
        SELECT t.fairness_key FROM harvest.tasks AS t
        WHERE t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
          AND t.fairness_key IS NOT NULL AND t.fairness_key > p_after
        ORDER BY t.fairness_key LIMIT 1
    );
END;
$$;

-- The fairness keys one claim visits on a queue: up to p_max distinct keys
-- starting after the queue's cursor and wrapping around. When the queue holds
-- more keys than that, the cursor moves to the last key visited (a cursor row
-- locked by a concurrent claim is left alone: the claim never waits).
CREATE OR REPLACE FUNCTION harvest._fairness_keys(p_queue text, p_max integer)
RETURNS text[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_cursor text;
    v_key text;
    v_keys text[] := ARRAY[]::text[];
    v_wrapped boolean := false;
BEGIN
    SELECT f.cursor_key INTO v_cursor FROM harvest.fair_queues AS f WHERE f.queue = p_queue;
    v_key := harvest._next_fairness_key(p_queue, v_cursor);
    LOOP
        IF v_key IS NULL THEN
            EXIT WHEN v_wrapped OR v_cursor IS NULL;
            v_wrapped := true;
            v_key := harvest._next_fairness_key(p_queue, NULL);
            CONTINUE;
        END IF;
        EXIT WHEN v_wrapped AND v_key > v_cursor;
        v_keys := v_keys || v_key;
        EXIT WHEN cardinality(v_keys) >= p_max;
        v_key := harvest._next_fairness_key(p_queue, v_key);
    END LOOP;
    IF cardinality(v_keys) >= p_max THEN
        UPDATE harvest.fair_queues AS f SET cursor_key = v_keys[p_max]
        WHERE f.queue IN (
            SELECT l.queue FROM harvest.fair_queues AS l WHERE l.queue = p_queue
            FOR UPDATE SKIP LOCKED
        );
    END IF;
    RETURN v_keys;
END;
$$;

-- Whether a task row passes an admission gate (a concurrency key or a rate limit), and
-- the columns the gates judge of it (NULL for an ungated row: one NULL column is all an
-- ungated candidate carries). The claim's windows, its head and claim_named_tasks build
-- each candidate's through these, so what a gate reads is said once. Plain SQL
-- expressions of the row: the planner inlines them into each statement (a field of the
-- whole-row argument becomes the column itself), so the plans are the ones the written-out
-- expressions gave (tests/integration/test_generic_plans.py). Not STRICT, not PL/pgSQL:
-- either would keep them from being inlined.
CREATE OR REPLACE FUNCTION harvest._is_gated(p_task harvest.tasks)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_task.concurrency_key IS NOT NULL OR p_task.rate_key IS NOT NULL;
$$;

CREATE OR REPLACE FUNCTION harvest._gate_of(p_task harvest.tasks)
RETURNS harvest.gated_candidate
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN harvest._is_gated(p_task) THEN ROW(
        p_task.id, p_task.kind, p_task.execution_id, p_task.concurrency_key, p_task.concurrency_limit,
        p_task.rate_key, p_task.priority, p_task.due_at, p_task.activity_name,
        -- Only a rate limit reads the options (its cost per activity name).
        CASE WHEN p_task.rate_key IS NOT NULL THEN p_task.options END
    )::harvest.gated_candidate END;
$$;

-- The candidates of a claim on queues that hold ageing or fairness-keyed work: the
-- head window (the first p_window due tasks of the polled queues in priority order,
-- as _claim_head's), the oldest ageing tasks by due time and the head of each
-- fairness key visited, in claim order (round-robin across (queue, fairness key),
-- then effective priority, due time, id), whether any carries a gate, and the columns
-- the gates read of those that do (in no order; NULL when none does).
CREATE OR REPLACE FUNCTION harvest._order_candidates(
    p_queues text[], p_now timestamptz, p_window integer, p_limit integer,
    OUT ids bigint[], OUT gated boolean, OUT gates harvest.gated_candidate[]
)
LANGUAGE plpgsql
-- The windows' statement planned afresh costs about 0.4 ms, and with LIMITs it does not
-- know the planner may keep doing so on every claim (as _claim_head's did); its generic
-- plan walks the same indexes (tests/integration/test_generic_plans.py).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    -- Most distinct fairness keys one claim visits per queue.
    c_fair_keys constant integer := 32;
    v_queue text;
    v_keys text[];
    v_keyed_queues text[] := ARRAY[]::text[];
    v_visit integer;
    v_fair_queues text[] := ARRAY[]::text[];
    v_fair_keys text[] := ARRAY[]::text[];
    v_fair_take integer[] := ARRAY[]::integer[];
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        IF harvest._next_fairness_key(v_queue, NULL) IS NOT NULL THEN
            v_keyed_queues := v_keyed_queues || v_queue;
        END IF;
    END LOOP;
    -- Each keyed queue visits no more keys than its share of the claim's limit: the
    -- cursor moves past every key visited, so a key visited but not taken (the claim
    -- was full) would wait a whole rotation for its next turn. A claim of 50 over
    -- four keyed queues visits 13 keys a queue, not 32: strict round-robin, and the
    -- skip-scan and the heads' probes, the part of the claim that grew fastest with
    -- the backlog, shrink with it (docs/performance.md, "Fairness keys visited").
    v_visit := least(c_fair_keys, greatest(1, ceil(p_limit::numeric / greatest(1, cardinality(v_keyed_queues)))))::integer;
    -- The fairness keys visited, per queue (the skip-scan moves each queue's cursor).
    -- The ageing window and the fairness heads share p_window across the polled
    -- queues (one queue gets all of it): four queues read a quarter each, not four
    -- windows, so the candidates stay about as many however deep the queues are.
    FOREACH v_queue IN ARRAY v_keyed_queues LOOP
        v_keys := harvest._fairness_keys(v_queue, v_visit);
        CONTINUE WHEN cardinality(v_keys) = 0;
        v_fair_queues := v_fair_queues || array_fill(v_queue, ARRAY[cardinality(v_keys)]);
        v_fair_keys := v_fair_keys || v_keys;
        v_fair_take := v_fair_take || array_fill(least(p_limit, greatest(1, ceil(
            p_window::numeric / (cardinality(v_keys) * cardinality(p_queues)))))::integer,
            ARRAY[cardinality(v_keys)]);
    END LOOP;

    -- One statement: each window reads its rows' ordering columns as it walks its
    -- index, and the ordering uses them. Probing every candidate again by primary key
    -- (as this did) cost a heap page and an index descent per candidate, some 700 a
    -- claim over four queues, each dearer the deeper the table (docs/performance.md,
    -- "Every gate on"). UNION drops the candidates two windows share (one snapshot:
    -- equal rows). The windows carry the gates' columns too (the gated candidates' kind,
    -- run, keys, cap, activity and a rate-keyed one's options): the gates read the
    -- candidates by primary key again for them (docs/performance.md, "claimcols row").
    SELECT coalesce(array_agg(r.id ORDER BY r.fair_rank, r.effective DESC, r.due_at, r.id), ARRAY[]::bigint[]),
           coalesce(bool_or(r.gated), false),
           array_agg(r.gate) FILTER (WHERE r.gated)
    INTO ids, gated, gates
    FROM (
        SELECT e.*,
               row_number() OVER (PARTITION BY e.queue, e.fairness_key
                                  ORDER BY e.effective DESC, e.due_at, e.id) AS fair_rank
        FROM (
            SELECT w.id, w.queue, w.fairness_key, w.due_at, w.gated, w.gate,
                   w.priority + coalesce(floor(extract(EPOCH FROM p_now - w.due_at) / w.priority_aging_secs), 0)
                       AS effective
            FROM (
                -- The head: the first p_window due tasks of the queues, in priority order,
                -- read in two passes. The first merges the queues' heads by their index
                -- keys alone (an index-only scan of tasks_claimable, which visits the heap
                -- only for pages not all-visible) and counts how many of the first p_window
                -- each queue holds; the second reads exactly that many rows of each queue.
                -- One pass reading every queue's first p_window rows from the heap read
                -- four times the rows it kept over four queues, each on its own heap page
                -- in a deep table (docs/performance.md, "claimdepth2 row"). One statement,
                -- one snapshot: both passes see the same rows.
                SELECT h.*
                FROM (
                    SELECT m.queue, count(*) AS n
                    FROM (
                        SELECT q.name AS queue, k.priority, k.due_at, k.id
                        FROM unnest(p_queues) AS q (name)
                        CROSS JOIN LATERAL (
                            SELECT t.priority, t.due_at, t.id
                            FROM harvest.tasks AS t
                            WHERE t.queue = q.name AND t.status = 'pending' AND t.kind <> 'timer'
                              AND t.due_at <= p_now
                            ORDER BY t.priority DESC, t.due_at, t.id
                            LIMIT p_window
                        ) AS k
                        ORDER BY k.priority DESC, k.due_at, k.id
                        LIMIT p_window
                    ) AS m
                    GROUP BY m.queue
                ) AS c
                CROSS JOIN LATERAL (
                    SELECT t.id, t.queue, t.fairness_key, t.priority, t.due_at, t.priority_aging_secs,
                           harvest._is_gated(t) AS gated, harvest._gate_of(t) AS gate
                    FROM harvest.tasks AS t
                    WHERE t.queue = c.queue AND t.status = 'pending' AND t.kind <> 'timer' AND t.due_at <= p_now
                    ORDER BY t.priority DESC, t.due_at, t.id
                    LIMIT c.n
                ) AS h
                UNION
                -- The ageing window: the oldest due tasks that age, whatever their priority.
                SELECT o.*
                FROM unnest(p_queues) AS q (name)
                CROSS JOIN LATERAL (
                    SELECT t.id, t.queue, t.fairness_key, t.priority, t.due_at, t.priority_aging_secs,
                           harvest._is_gated(t) AS gated, harvest._gate_of(t) AS gate
                    FROM harvest.tasks AS t
                    WHERE t.queue = q.name AND t.status = 'pending' AND t.kind <> 'timer'
                      AND t.priority_aging_secs IS NOT NULL AND t.due_at <= p_now
                    ORDER BY t.due_at, t.id
                    LIMIT ceil(p_window::numeric / cardinality(p_queues))
                ) AS o
                UNION
                -- The fairness window: the head of each key visited.
                SELECT f.*
                FROM unnest(v_fair_queues, v_fair_keys, v_fair_take) AS k (queue, fairness_key, take)
                CROSS JOIN LATERAL (
                    SELECT t.id, t.queue, t.fairness_key, t.priority, t.due_at, t.priority_aging_secs,
                           harvest._is_gated(t) AS gated, harvest._gate_of(t) AS gate
                    FROM harvest.tasks AS t
                    WHERE t.queue = k.queue AND t.fairness_key = k.fairness_key AND t.status = 'pending'
                      AND t.kind <> 'timer' AND t.due_at <= p_now
                    ORDER BY t.priority DESC, t.due_at, t.id
                    LIMIT k.take
                ) AS f
            ) AS w
        ) AS e
    ) AS r;
END;
$$;

-- The head of the polled queues: their first p_window due tasks in claim order
-- (tasks_claimable), whether any carries an admission gate, and the columns the
-- gates judge of those that do (harvest.gated_candidate, built only for a gated row:
-- an ungated head pays one NULL column). Inlined into claim_tasks' statement, which
-- PL/pgSQL caches. A custom plan of it, made with the
-- values known, looked cheaper than the generic one (one queue's unnest is one row,
-- not ten; LIMIT 56 is 56 rows, not a tenth of the queue), so the plan cache planned
-- it again on every claim, about 0.15 ms. The three parameters are therefore read
-- through scalar subqueries, which no plan sees into: custom and generic plans cost
-- the same, and after its five custom plans the cache keeps the generic one, the same
-- walk of tasks_claimable (tests/integration/test_generic_plans.py). This replaces a
-- SET plan_cache_mode = force_generic_plan on the function, whose save and restore of
-- the setting (and the SQL function call it kept from being inlined) cost 3-10 us a
-- claim (docs/performance.md, "The claim head inlined").
CREATE OR REPLACE FUNCTION harvest._claim_head(p_queues text[], p_now timestamptz, p_window integer)
RETURNS TABLE (ids bigint[], gated boolean, gates harvest.gated_candidate[])
LANGUAGE sql STABLE
AS $$
    SELECT (coalesce(array_agg(head.id ORDER BY head.priority DESC, head.due_at, head.id),
                     ARRAY[]::bigint[]))[1:p_window],
           coalesce(bool_or(head.gated), false),
           -- The gated candidates' columns, as _order_candidates' (the gates read no
           -- candidate again; they take those among the ids kept).
           array_agg(head.gate) FILTER (WHERE head.gated)
    FROM unnest((SELECT p_queues)) AS q (name)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.due_at, harvest._is_gated(t) AS gated, harvest._gate_of(t) AS gate
        FROM harvest.tasks AS t
        WHERE t.queue = q.name AND t.status = 'pending' AND t.kind <> 'timer'
          AND t.due_at <= (SELECT p_now)
        ORDER BY t.priority DESC, t.due_at, t.id
        LIMIT (SELECT p_window)
    ) AS head;
$$;

-- The end of a claim (claim_tasks, claim_named_tasks): lease up to p_limit of
-- the candidates p_ids (in claim order) through owner mode's partitions and,
-- when any carries one (p_gated), the admission gates, which read the gated
-- candidates' columns from p_gates (as the windows read them); returns the
-- claimed tasks.
CREATE OR REPLACE FUNCTION harvest._claim_candidates(
    p_ids bigint[], p_gated boolean, p_gates harvest.gated_candidate[], p_worker_id text, p_limit integer,
    p_workflow_lease_secs double precision, p_now timestamptz
)
RETURNS TABLE (
    task_id bigint,
    kind text,
    execution_id uuid,
    workflow_name text,
    workflow_id text,
    queue text,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb,
    attempt integer,
    fencing_token bigint,
    lease_expires_at timestamptz,
    heartbeat_details jsonb,
    new_events jsonb,
    new_events_after bigint,
    owner_epoch bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids bigint[] := p_ids;
    v_admitted bigint[];
    v_claimed bigint[];
    v_rows harvest.tasks[];
BEGIN
    IF harvest._owner_mode_on() THEN
        -- Owner mode: leave the workflow tasks of partitions other live owners hold,
        -- and acquire the partitions of those claimed (owners.sql).
        v_ids := harvest._owner_candidates(v_ids, p_worker_id, p_now);
        IF p_gated THEN
            v_admitted := harvest._admit_candidates(v_ids, p_gates, p_now);
            SELECT coalesce(array_agg(u.id ORDER BY u.ord), ARRAY[]::bigint[]) INTO v_ids
            FROM unnest(v_ids) WITH ORDINALITY AS u (id, ord)
            WHERE u.id IN (SELECT a.id FROM unnest(v_admitted) AS a (id));  -- (hashed: see below)
        END IF;
        SELECT coalesce(array_agg(c.id), ARRAY[]::bigint[]), array_agg(c) FILTER (WHERE p_gated)
        INTO v_claimed, v_rows
        FROM harvest._claim_ids(v_ids, p_worker_id, p_limit, p_workflow_lease_secs, p_now) AS c;
        v_claimed := harvest._acquire_partitions(v_claimed, p_worker_id, p_now);
        IF p_gated THEN  -- the rows of the tasks kept (the others' partitions went back)
            PERFORM harvest._after_gated_claim(
                ARRAY(SELECT r FROM unnest(v_rows) AS r WHERE r.id = ANY(v_claimed)), p_now);
        END IF;
        RETURN QUERY  -- (probes per id, as below)
        SELECT c.id, c.kind, c.execution_id, coalesce(c.run_workflow_name, l.workflow_name), coalesce(c.run_workflow_id, l.workflow_id),
               c.queue, c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token,
               c.lease_expires_at, c.heartbeat_details, l.new_events, coalesce(l.decided_through, 0),
               CASE WHEN c.kind = 'workflow' THEN harvest._owner_epoch(l.workflow_id, p_worker_id) END
        FROM unnest(v_claimed) AS k (id)
        CROSS JOIN LATERAL (SELECT t.* FROM harvest.tasks AS t WHERE t.id = k.id OFFSET 0) AS c
        LEFT JOIN LATERAL (SELECT x.workflow_name, x.workflow_id, x.decided_through,
                                  CASE WHEN c.kind = 'workflow' THEN harvest._events_since_decision(x, c.kind, p_worker_id) END
                           FROM harvest.executions AS x
                           WHERE x.id = c.execution_id AND (c.kind = 'workflow' OR c.run_workflow_id IS NULL) OFFSET 0)
            AS l (workflow_name, workflow_id, decided_through, new_events) ON true
        ORDER BY c.priority DESC, c.due_at, c.id;
        RETURN;
    END IF;

    IF NOT p_gated THEN
        -- Executions by one primary-key probe per claimed row (LATERAL, OFFSET 0): a
        -- join may be cached as a generic plan that scans the whole table. A workflow task's
        -- run is read (its decision state and events); a queued activity answers with the
        -- run's name and id its row carries (sql/tasks.sql; a handed one, or one queued before
        -- migration 0099, carries none and reads its run). The condition on the task's
        -- columns is the probe's one-time filter, so such an activity's run is not read at
        -- all: against a deep backlog those probes were a claim's coldest pages
        -- (docs/performance.md, "The claim's answer without the runs of its activities").
        RETURN QUERY
        SELECT c.id, c.kind, c.execution_id, coalesce(c.run_workflow_name, l.workflow_name), coalesce(c.run_workflow_id, l.workflow_id),
               c.queue, c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token,
               c.lease_expires_at, c.heartbeat_details, l.new_events, coalesce(l.decided_through, 0),
               NULL::bigint
        FROM harvest._claim_ids(v_ids, p_worker_id, p_limit, p_workflow_lease_secs, p_now) AS c
        LEFT JOIN LATERAL (SELECT x.workflow_name, x.workflow_id, x.decided_through,
                                  CASE WHEN c.kind = 'workflow' THEN harvest._events_since_decision(x, c.kind, p_worker_id) END
                           FROM harvest.executions AS x
                           WHERE x.id = c.execution_id AND (c.kind = 'workflow' OR c.run_workflow_id IS NULL) OFFSET 0)
            AS l (workflow_name, workflow_id, decided_through, new_events) ON true
        ORDER BY c.priority DESC, c.due_at, c.id;
        RETURN;
    END IF;

    -- The gates return the admissible ids as a set: keep the claim order. IN over
    -- the unnested set is a hashed lookup; "= ANY(v_admitted)" compared every
    -- candidate with every admitted id (a window of hundreds squared).
    v_admitted := harvest._admit_candidates(v_ids, p_gates, p_now);
    SELECT coalesce(array_agg(u.id ORDER BY u.ord), ARRAY[]::bigint[]) INTO v_ids
    FROM unnest(v_ids) WITH ORDINALITY AS u (id, ord)
    WHERE u.id IN (SELECT a.id FROM unnest(v_admitted) AS a (id));
    -- The leased rows are kept for the after-claim steps and the answer: reading them
    -- again by id cost a primary-key probe per claimed task, three times.
    SELECT coalesce(array_agg(c), ARRAY[]::harvest.tasks[]) INTO v_rows
    FROM harvest._claim_ids(v_ids, p_worker_id, p_limit, p_workflow_lease_secs, p_now) AS c;
    PERFORM harvest._after_gated_claim(v_rows, p_now);
    RETURN QUERY  -- (executions probed per id, as above)
    SELECT c.id, c.kind, c.execution_id, coalesce(c.run_workflow_name, l.workflow_name), coalesce(c.run_workflow_id, l.workflow_id),
           c.queue, c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token,
           c.lease_expires_at, c.heartbeat_details, l.new_events, coalesce(l.decided_through, 0),
           NULL::bigint
    FROM unnest(v_rows) AS c
    LEFT JOIN LATERAL (SELECT x.workflow_name, x.workflow_id, x.decided_through,
                              CASE WHEN c.kind = 'workflow' THEN harvest._events_since_decision(x, c.kind, p_worker_id) END
                       FROM harvest.executions AS x
                       WHERE x.id = c.execution_id AND (c.kind = 'workflow' OR c.run_workflow_id IS NULL) OFFSET 0)
        AS l (workflow_name, workflow_id, decided_through, new_events) ON true
    ORDER BY c.priority DESC, c.due_at, c.id;
END;
$$;

-- Claim up to p_limit tasks from p_queues for p_worker_id. Each claimed row gets a
-- lease and a new fencing token; completing with an older token is refused.
CREATE OR REPLACE FUNCTION harvest.claim_tasks(
    p_worker_id text,
    p_queues text[],
    p_limit integer DEFAULT 10,
    p_workflow_lease_secs double precision DEFAULT 30
)
RETURNS TABLE (
    task_id bigint,
    kind text,
    execution_id uuid,
    workflow_name text,
    workflow_id text,
    -- The task's queue; a workflow task's is its execution's queue.
    queue text,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb,
    attempt integer,
    fencing_token bigint,
    lease_expires_at timestamptz,
    heartbeat_details jsonb,
    -- Workflow tasks claimed by the worker that decided the run last (or of a run
    -- never decided): the events after new_events_after. NULL otherwise.
    new_events jsonb,
    -- A workflow task's run's decided_through (0 before its first decision). An activity
    -- reads none: 0, or its run's when the claim read the run (sql/tasks.sql).
    new_events_after bigint,
    -- Owner mode (owners.sql): a workflow task's partition epoch, which its decision
    -- commit must carry. NULL when owner mode is off and for other tasks.
    owner_epoch bigint
)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    -- Look a little past the batch size so rows locked by other claimers do not
    -- starve this one, but never scan the whole backlog.
    -- (least: a limit past 1000, refused below, overflowed here first, as 'integer out of range')
    v_window integer := least(greatest(p_limit, 1), 1001) * 4 + 16;
    v_ids bigint[];
    v_gated boolean;
    v_gates harvest.gated_candidate[];
BEGIN
    IF p_worker_id IS NULL OR p_worker_id = '' THEN
        RAISE EXCEPTION 'worker id is empty' USING ERRCODE = 'HR001';
    END IF;
    IF p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'no queues given' USING ERRCODE = 'HR001',
            HINT = 'pass the task queues this worker polls, e.g. ARRAY[''default'']';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'claim limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_lease('workflow task lease', p_workflow_lease_secs);

    -- Due timers first; a probe of _fire_due_timers' own loop condition, so the usual claim
    -- (no timer due) skips the firing function's call, its clock read and its loop's cursor.
    -- In due order with a LIMIT, not an EXISTS (which drops both): the plan made without
    -- v_now's value guesses a third of the timers due, and an EXISTS was then planned as a
    -- sequential scan of every task, read whole on each claim when none is due; this one
    -- walks tasks_timers_due from its oldest entry (tests/integration/test_generic_plans.py).
    IF (
        SELECT true FROM harvest.tasks AS t
        WHERE t.kind = 'timer' AND t.status = 'pending' AND t.due_at <= v_now AND t.queue = ANY(p_queues)
        ORDER BY t.due_at
        LIMIT 1
    ) THEN
        PERFORM harvest._fire_due_timers(p_queues);
    END IF;

    -- Ageing or fairness-keyed work on these queues: the head, the ageing window and
    -- the fairness heads in claim order. Otherwise two probes of empty partial
    -- indexes, then the head alone.
    IF EXISTS (
        SELECT 1 FROM harvest.tasks AS t
        WHERE t.queue = ANY(p_queues) AND t.status = 'pending' AND t.kind <> 'timer'
          AND t.priority_aging_secs IS NOT NULL
    ) OR EXISTS (
        SELECT 1 FROM harvest.tasks AS t
        WHERE t.queue = ANY(p_queues) AND t.status = 'pending' AND t.kind <> 'timer'
          AND t.fairness_key IS NOT NULL
    ) THEN
        SELECT o.ids, o.gated, o.gates INTO v_ids, v_gated, v_gates
        FROM harvest._order_candidates(p_queues, v_now, v_window, p_limit) AS o;
    ELSE
        SELECT h.ids, h.gated, h.gates INTO v_ids, v_gated, v_gates
        FROM harvest._claim_head(p_queues, v_now, v_window) AS h;
    END IF;

    IF cardinality(v_ids) = 0 THEN
        RETURN;  -- nothing due: an idle claim ends here
    END IF;
    -- The gates and the lease read the first v_window candidates in claim order,
    -- whatever the number of queues and windows: the same slack past the batch as
    -- one queue's head gives. Each candidate costs a few primary-key probes, and
    -- four polled queues with ageing and fairness windows bring some 700, whose
    -- probes cost more the deeper the table (docs/performance.md, "Every gate on").
    v_ids := v_ids[1:v_window];
    RETURN QUERY
    SELECT * FROM harvest._claim_candidates(
        v_ids, v_gated, v_gates, p_worker_id, p_limit, p_workflow_lease_secs, v_now);
END;
$$;

-- Redis dispatch (docs/redis-dispatch.md): claim the tasks named by the
-- references a worker read from Redis. A reference is only a hint: each named
-- row passes the whole claim predicate here (one of p_queues, pending, not a
-- timer, due; a running row's lease and a paused run's 'paused' status keep it
-- out), the order rule of a hand-off (_may_hand_off: no fair queue, no ageing
-- work, no pending task of a higher priority, so a reference never jumps the
-- queue's order), owner mode's partitions and the admission gates
-- (_claim_candidates, as claim_tasks). A row claimed by another worker, finished,
-- paused or not admitted is skipped; it stays with the Postgres claim.
CREATE OR REPLACE FUNCTION harvest.claim_named_tasks(
    p_worker_id text,
    p_queues text[],
    p_task_ids bigint[],
    p_workflow_lease_secs double precision DEFAULT 30
)
RETURNS TABLE (
    task_id bigint,
    kind text,
    execution_id uuid,
    workflow_name text,
    workflow_id text,
    queue text,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb,
    attempt integer,
    fencing_token bigint,
    lease_expires_at timestamptz,
    heartbeat_details jsonb,
    new_events jsonb,
    new_events_after bigint,
    owner_epoch bigint
)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_ids bigint[];
    v_gated boolean;
    v_gates harvest.gated_candidate[];
BEGIN
    IF p_worker_id IS NULL OR p_worker_id = '' THEN
        RAISE EXCEPTION 'worker id is empty' USING ERRCODE = 'HR001';
    END IF;
    IF p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'no queues given' USING ERRCODE = 'HR001',
            HINT = 'pass the task queues this worker polls, e.g. ARRAY[''default'']';
    END IF;
    IF p_task_ids IS NULL OR cardinality(p_task_ids) < 1 OR cardinality(p_task_ids) > 1000 THEN
        RAISE EXCEPTION 'claim_named_tasks takes 1..1000 task ids, got %', coalesce(cardinality(p_task_ids), 0)
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_lease('workflow task lease', p_workflow_lease_secs);

    -- One primary-key probe per distinct id (LATERAL ... OFFSET 0, as everywhere); the
    -- predicate is wrapped in IS TRUE so that no partial index of the queue applies
    -- (see core.sql's note on IS TRUE): a cached generic plan must probe the key. The
    -- gated rows' columns go to the gates, as the claim's windows hand them theirs.
    SELECT coalesce(array_agg(t.id ORDER BY t.priority DESC, t.due_at, t.id), ARRAY[]::bigint[]),
           coalesce(bool_or(harvest._is_gated(t)), false),
           array_agg(harvest._gate_of(t)) FILTER (WHERE harvest._is_gated(t))
    INTO v_ids, v_gated, v_gates
    FROM (SELECT DISTINCT u.id FROM unnest(p_task_ids) AS u (id)) AS k
    CROSS JOIN LATERAL (
        SELECT p.* FROM harvest.tasks AS p
        WHERE p.id = k.id
          AND (p.status = 'pending' AND p.kind <> 'timer' AND p.queue = ANY(p_queues) AND p.due_at <= v_now) IS TRUE
        OFFSET 0
    ) AS t
    WHERE (SELECT h FROM harvest._may_hand_off(t.queue, t.priority, p_queues) AS h);

    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM harvest._claim_candidates(
        v_ids, v_gated, v_gates, p_worker_id, cardinality(v_ids), p_workflow_lease_secs, v_now);
END;
$$;

-- The claimable tasks (pending, not timers) of the given runs, of kind p_kind
-- (NULL: both): what a Redis dispatch publishes after the commit that made them
-- (docs/redis-dispatch.md). An activity result makes only a workflow task, so
-- its publish asks for that kind and does not publish the run's other pending
-- activities again.
CREATE OR REPLACE FUNCTION harvest.list_claimable_tasks(p_execution_ids uuid[], p_kind text DEFAULT NULL)
RETURNS TABLE (task_id bigint, queue text, due_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT t.id, t.queue, t.due_at
    FROM (SELECT DISTINCT u.id FROM unnest(p_execution_ids) AS u (id)) AS k
    CROSS JOIN LATERAL (
        SELECT p.id, p.queue, p.due_at FROM harvest.tasks AS p
        WHERE p.execution_id = k.id AND p.status = 'pending' AND p.kind <> 'timer'
          AND (p_kind IS NULL OR p.kind = p_kind)
        OFFSET 0
    ) AS t
    ORDER BY t.id;
$$;

-- The queues with pending work (not timers), in name order, one probe of tasks_claimable each
-- (a loose index scan): a queue's backlog is not read to name it. Read by count_stranded_tasks
-- and the metrics sampler's queue depths.
CREATE OR REPLACE FUNCTION harvest._pending_queues()
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE queues (queue) AS (
        (
            SELECT t.queue FROM harvest.tasks AS t
            WHERE t.status = 'pending' AND t.kind <> 'timer'
            ORDER BY t.queue LIMIT 1
        )
        UNION ALL
        SELECT (
            SELECT t.queue FROM harvest.tasks AS t
            WHERE t.status = 'pending' AND t.kind <> 'timer' AND t.queue > q.queue
            ORDER BY t.queue LIMIT 1
        )
        FROM queues AS q WHERE q.queue IS NOT NULL
    )

    SELECT q.queue FROM queues AS q WHERE q.queue IS NOT NULL;
$$;

-- When the earliest pending task of one queue (not a timer) is or was due: its priorities are
-- found one probe each of tasks_claimable (ordered by priority, then due time: a loose index
-- scan), then the earliest task of each. A queue of more than 64 priorities is read whole (a
-- probe per priority would cost more). Read by next_due_at (its due time, for an idle worker)
-- and the metrics sampler (due by now: the oldest claimable task of a queue past the depth cap).
CREATE OR REPLACE FUNCTION harvest._earliest_pending_due_at(p_queue text)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE priorities (priority, n) AS (
        (
            SELECT t.priority, 1 FROM harvest.tasks AS t
            WHERE t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
            ORDER BY t.priority DESC LIMIT 1
        )
        UNION ALL
        SELECT
            (
                SELECT t.priority FROM harvest.tasks AS t
                WHERE
                    t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
                    AND t.priority < p.priority
                ORDER BY t.priority DESC LIMIT 1
            ),
            p.n + 1
        FROM priorities AS p WHERE p.priority IS NOT NULL AND p.n <= 64
    ),

    found AS MATERIALIZED (
        SELECT p.priority FROM priorities AS p WHERE p.priority IS NOT NULL
    )

    SELECT CASE
        WHEN (SELECT count(*) FROM found) > 64 THEN (
            SELECT min(t.due_at) FROM harvest.tasks AS t
            WHERE t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
        )
        ELSE (
            SELECT min((
                SELECT t.due_at FROM harvest.tasks AS t
                WHERE
                    t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
                    AND t.priority = f.priority
                ORDER BY t.due_at LIMIT 1
            ))
            FROM found AS f
        )
    END;
$$;

-- When the earliest not-yet-due work of these queues becomes due (timers and
-- retry backoffs), so an idle worker can sleep exactly until then. A few index probes, not
-- a read of the queues' backlog: the earliest timer (tasks_timers_due), and per queue the
-- earliest task of each priority it holds (_earliest_pending_due_at). min() over
-- every pending task read a backlog of 2M retries due later (~0.25 s of CPU) per idle pass.
CREATE OR REPLACE FUNCTION harvest.next_due_at(p_queues text[])
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT min(d.due_at) FROM (
        SELECT (
            SELECT t.due_at FROM harvest.tasks AS t
            WHERE t.kind = 'timer' AND t.status = 'pending' AND t.queue = ANY(p_queues)
            ORDER BY t.due_at LIMIT 1
        ) AS due_at
        UNION ALL
        SELECT harvest._earliest_pending_due_at(q.queue)
        FROM (SELECT DISTINCT u.queue FROM unnest(p_queues) AS u (queue)) AS q
    ) AS d;
$$;

-- Hand-off (docs/internals.md, "Hand-off and group commit"): the transaction
-- that creates a task may lease it at once to the worker that asked, instead of
-- queueing it for a claim: complete_workflow_task hands the activities it
-- schedules to the deciding worker, complete_activities hands the workflow task
-- it wakes to the worker whose cached run decided last. It skips the claim's
-- round trip, its queue scan and a row update, and it is only allowed where a
-- claim would have been free to pick the task next: the worker is active and
-- polls the queue, the queue is not fair, holds no ageing work and no pending
-- task of a higher priority, and the task carries no admission gate.

-- The queues an active worker polls (NULL when it is not active), read once per call.
CREATE OR REPLACE FUNCTION harvest._hand_off_queues(p_worker_id text)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT w.queues FROM harvest.workers AS w WHERE w.id = p_worker_id AND w.status = 'active';
$$;

-- Whether a new task of p_priority on p_queue may skip the queue (see above): one row,
-- true or false. Each probe reads the head of a queue index (ORDER BY its order, LIMIT 1,
-- a scalar subquery: an EXISTS would drop both), a shape no cached generic plan turns into
-- a table scan: an EXISTS over "priority > $n" was planned as a sequential scan that read
-- every pending task. The priority probe is bounded by p_priority in the index condition,
-- so it reads only the entries above it: in a queue of one priority, a descent to the
-- queue's head and no heap page (2 buffers). Unbounded, it read the queue's first live
-- pending task (and any dead entry of a claimed task before it not yet marked dead in the
-- index) from the heap: 5.3 buffers per call in the canonical drain (docs/performance.md,
-- "Hand-off probe, sixth cut"). A SQL set-returning function, STABLE, read as
-- (SELECT h FROM harvest._may_hand_off(...) AS h): the planner inlines it into that query
-- (as _live_event_listeners), so it costs no call and no three statements of its own, about
-- four times a workflow (docs/performance.md, "A batch's closes in one pass"). The
-- conditions are ANDed in this order and each probe runs only when those before it held.
-- Not STRICT, not PL/pgSQL: either would keep it from being inlined.
CREATE OR REPLACE FUNCTION harvest._may_hand_off(p_queue text, p_priority integer, p_worker_queues text[])
RETURNS SETOF boolean
LANGUAGE sql STABLE
ROWS 1
AS $$
    SELECT p_worker_queues IS NOT NULL AND (p_queue = ANY(p_worker_queues)) IS NOT FALSE
       AND NOT EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = p_queue)
       AND (SELECT t.priority FROM harvest.tasks AS t  -- tasks_claimable's head, above p_priority
            WHERE t.queue = p_queue AND t.priority > p_priority AND t.status = 'pending' AND t.kind <> 'timer'
            ORDER BY t.priority DESC
            LIMIT 1) IS NULL
       AND (SELECT t.due_at FROM harvest.tasks AS t  -- tasks_claimable_aging's head
            WHERE t.queue = p_queue AND t.status = 'pending' AND t.kind <> 'timer'
              AND t.priority_aging_secs IS NOT NULL
            ORDER BY t.due_at
            LIMIT 1) IS NULL;
$$;

-- A task as the worker receives it inside a jsonb answer (a handed task, a task claimed
-- inside a result batch): the worker's wire form of claim_tasks' row, with only what the
-- worker reads (docs/internals.md, "The worker's task row"). Both kinds carry task_id,
-- kind, execution_id, workflow_name, workflow_id, queue and fencing_token; a workflow task
-- adds new_events, new_events_after and owner_epoch; an activity task seq, activity_name,
-- input, attempt, heartbeat_details and its options less the keys only the engine reads
-- (_worker_options). Not carried: lease_expires_at (the worker keeps no clock of its lease:
-- the server's is the one that counts), a workflow task's attempt and its activity columns
-- (NULL or {}), an activity task's new_events, new_events_after and owner_epoch (NULL, or
-- the run's decided_through, which no activity reads). About 40% fewer bytes for the
-- worker to parse per handed activity (docs/performance.md, "The worker's task row").
CREATE OR REPLACE FUNCTION harvest._worker_task(
    p_task_id bigint, p_kind text, p_execution_id uuid, p_workflow_name text, p_workflow_id text,
    p_queue text, p_seq integer, p_activity_name text, p_input jsonb, p_options jsonb,
    p_attempt integer, p_fencing_token bigint, p_heartbeat_details jsonb,
    p_new_events jsonb, p_new_events_after bigint, p_owner_epoch bigint
)
RETURNS jsonb
LANGUAGE sql STABLE  -- (jsonb_build_object is STABLE: an IMMUTABLE wrapper would not inline)
AS $$
    SELECT CASE WHEN p_kind = 'workflow'
        THEN jsonb_build_object(
            'task_id', p_task_id, 'kind', p_kind, 'execution_id', p_execution_id,
            'workflow_name', p_workflow_name, 'workflow_id', p_workflow_id, 'queue', p_queue,
            'fencing_token', p_fencing_token, 'new_events', p_new_events,
            'new_events_after', p_new_events_after, 'owner_epoch', p_owner_epoch)
        ELSE to_jsonb(harvest._worker_activity(
            p_task_id, p_kind, p_execution_id, p_workflow_name, p_workflow_id, p_queue, p_seq,
            p_activity_name, p_input, p_options, p_attempt, p_fencing_token, p_heartbeat_details))
        END;
$$;

-- An activity task as the worker receives it (_worker_task's activity keys: its options less
-- the engine's, _worker_options), as a row of harvest.worker_activity_task, whose fields are
-- the keys: to_jsonb of it is _worker_task's object. A decision's handed activities are
-- carried as these (_hand_activities, _apply_decision's handed) to the batch call's answer,
-- which is built once with them inside: a task built as JSON was converted again each time it
-- was wrapped (in its array, in the answer, and by the answer's jsonb_set), and a row is
-- converted once, with the key names from the type and not a key argument each, which
-- jsonb_build_object classifies by type lookups on every call (docs/performance.md, "SQL
-- path, ninth cut"). A SQL function that inlines.
CREATE OR REPLACE FUNCTION harvest._worker_activity(
    p_task_id bigint, p_kind text, p_execution_id uuid, p_workflow_name text, p_workflow_id text,
    p_queue text, p_seq integer, p_activity_name text, p_input jsonb, p_options jsonb,
    p_attempt integer, p_fencing_token bigint, p_heartbeat_details jsonb
)
RETURNS harvest.worker_activity_task
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ROW(p_task_id, p_kind, p_execution_id, p_workflow_name, p_workflow_id, p_queue, p_seq,
               p_activity_name, p_input, harvest._worker_options(p_options), p_attempt, p_fencing_token,
               p_heartbeat_details)::harvest.worker_activity_task;
$$;

-- An activity task's row (and its run's) as the worker receives it, as a row (_worker_activity).
CREATE OR REPLACE FUNCTION harvest._activity_for_worker(p_task harvest.tasks, p_execution harvest.executions)
RETURNS harvest.worker_activity_task
LANGUAGE sql IMMUTABLE
AS $$
    SELECT harvest._worker_activity(
        p_task.id, p_task.kind, p_task.execution_id, p_execution.workflow_name, p_execution.workflow_id,
        p_task.queue, p_task.seq, p_task.activity_name, p_task.input, p_task.options, p_task.attempt,
        p_task.fencing_token, p_task.heartbeat_details);
$$;

-- An activity's options as the worker receives them: less the keys only the engine reads
-- (the retry policy, schedule_to_close, priority, dead letter, the admission gates' limits,
-- fairness, a DAG task's name), so the keys the worker reads stay: start_to_close (its
-- deadline), heartbeat_timeout when set (how often ctx.heartbeat's background sends go out;
-- a null one is dropped), traceparent (its span), concurrency_key and rate_limit (a gated
-- task's end claims again), and any key added later, which reaches the worker unless listed here.
CREATE OR REPLACE FUNCTION harvest._worker_options(p_options jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_options - '{retry,priority,dead_letter,schedule_to_close,max_concurrent,priority_aging_secs,fairness_key,dag_node}'::text[]
        - CASE WHEN p_options -> 'heartbeat_timeout' = 'null'::jsonb THEN 'heartbeat_timeout' ELSE '' END;
$$;

-- A claimed or handed task as the worker receives it (_worker_task), from its row and its run's.
CREATE OR REPLACE FUNCTION harvest._task_for_worker(
    p_task harvest.tasks, p_execution harvest.executions, p_worker_id text
)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT harvest._worker_task(
        p_task.id, p_task.kind, p_task.execution_id, p_execution.workflow_name, p_execution.workflow_id,
        p_task.queue, p_task.seq, p_task.activity_name, p_task.input, p_task.options,
        p_task.attempt, p_task.fencing_token, p_task.heartbeat_details,
        CASE WHEN p_task.kind = 'workflow'
             THEN harvest._events_since_decision(p_execution, p_task.kind, p_worker_id) END,
        coalesce(p_execution.decided_through, 0),
        -- Owner mode: _handed_task sets a handed workflow task's (owners.sql).
        NULL);
$$;

-- A task handed to p_worker_id by the commit that leased it (a result's or a signal's
-- wake-up), as the worker receives it (_worker_task), read after the commit's writes so it
-- carries every event they appended; in owner mode (p_owner_mode, read once by the
-- caller) with the worker's owner_epoch for the run's partition (owners.sql).
CREATE OR REPLACE FUNCTION harvest._handed_task(p_task_id bigint, p_worker_id text, p_owner_mode boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_task harvest.tasks;
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_task FROM harvest.tasks AS t WHERE t.id = p_task_id;
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = v_task.execution_id;
    IF NOT p_owner_mode THEN
        RETURN harvest._task_for_worker(v_task, v_execution, p_worker_id);
    END IF;
    RETURN harvest._task_for_worker(v_task, v_execution, p_worker_id)
        || jsonb_build_object('owner_epoch', harvest._owner_epoch(v_execution.workflow_id, p_worker_id));
END;
$$;

-- Wake a locked, running execution by handing its workflow task straight to
-- p_worker_id (leased as a claim would); returns the task id, or NULL when the
-- execution already has a workflow task (it will see the new events) or is not running.
-- The run's task is read first, without a lock, as core.sql _ensure_workflow_task reads
-- it (see there: an INSERT meeting a claim in flight waited for it, the caller's batch
-- with every run row it holds). A run's pending task is left to the claim: taking it over
-- here made no gain, docs/performance.md, "Signal storms, second cut".
CREATE OR REPLACE FUNCTION harvest._hand_workflow_task(
    p_execution_id uuid, p_worker_id text, p_workflow_lease_secs double precision
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_task_id bigint;
BEGIN
    PERFORM 1 FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'workflow';
    IF FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO harvest.tasks (
        execution_id, kind, queue, due_at, scheduled_at, status, attempt, started_at,
        lease_owner, fencing_token, lease_expires_at, fairness_key
    )
    SELECT e.id, 'workflow', e.queue, v_now, v_now, 'running', 1, v_now,
           p_worker_id, nextval('harvest.fencing_tokens'),
           v_now + make_interval(secs => p_workflow_lease_secs),
           -- ('' on a fair queue, else the marker for none: sql/triggers.sql asks no query of its own)
           coalesce((SELECT '' FROM harvest.fair_queues AS f WHERE f.queue = e.queue), E'\x01')
    FROM harvest.executions AS e
    WHERE e.id = p_execution_id AND (e.status = 'RUNNING') IS TRUE  -- (core.sql: IS TRUE)
    ON CONFLICT (execution_id) WHERE kind = 'workflow' DO NOTHING
    RETURNING id INTO v_task_id;
    RETURN v_task_id;
END;
$$;

-- A worker's group commit of activity results that also claims, in the same
-- transaction, for the slots the results free: complete_activities, then
-- claim_tasks for up to p_claim_limit tasks, never more than the results that
-- complete without handing a task back (no handed workflow task, no activity
-- handed by a decision made ahead): each such result's handler ends and frees
-- its slot, and the worker gives it one claimed task to run instead. The claim
-- is claim_tasks itself (timers, windows, owner mode, admission gates, leases,
-- fencing tokens), after the results, so it takes no lock that could wait while
-- the batch holds its runs' rows (its own are SKIP LOCKED or try-locks). It
-- saves the claim's own round trip and commit per result batch. The rows are
-- complete_activities' rows, then one per claimed task: outcome 'claimed',
-- task_id its id, handed the task as the worker receives it (_worker_task).
CREATE OR REPLACE FUNCTION harvest.complete_activities_with_claim(
    p_worker_id text,
    p_queues text[],
    p_claim_limit integer,
    p_task_ids bigint[],
    p_fencing_tokens bigint[],
    p_results jsonb[],
    p_hand_off boolean DEFAULT false,
    p_workflow_lease_secs double precision DEFAULT 30,
    p_decisions jsonb[] DEFAULT NULL,
    p_event_cap bigint DEFAULT 50000,
    p_byte_cap bigint DEFAULT 52428800
)
RETURNS TABLE (task_id bigint, outcome text, message text, handed jsonb, decided jsonb)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_row record;
    v_freed integer := 0;
BEGIN
    IF p_claim_limit IS NULL OR p_claim_limit < 0 OR p_claim_limit > 1000 THEN
        RAISE EXCEPTION 'claim limit % is out of range 0..1000', p_claim_limit USING ERRCODE = 'HR001';
    END IF;
    FOR v_row IN
        SELECT * FROM harvest.complete_activities(p_worker_id, p_task_ids, p_fencing_tokens, p_results,
            p_hand_off, p_workflow_lease_secs, p_decisions, p_event_cap, p_byte_cap) AS c
    LOOP
        task_id := v_row.task_id;
        outcome := v_row.outcome;
        message := v_row.message;
        handed := v_row.handed;
        decided := v_row.decided;
        IF v_row.outcome = 'completed' AND v_row.handed IS NULL
           AND coalesce(jsonb_array_length(v_row.decided -> 'handed'), 0) = 0 THEN
            v_freed := v_freed + 1;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF least(p_claim_limit, v_freed) > 0 THEN
        RETURN QUERY
        SELECT c.task_id, 'claimed'::text, NULL::text,
               harvest._worker_task(c.task_id, c.kind, c.execution_id, c.workflow_name, c.workflow_id, c.queue,
                   c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token, c.heartbeat_details,
                   c.new_events, c.new_events_after, c.owner_epoch),
               NULL::jsonb
        FROM harvest.claim_tasks(p_worker_id, p_queues, least(p_claim_limit, v_freed), p_workflow_lease_secs) AS c;
    END IF;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.claim_tasks IS
'Claim up to p_limit due tasks of p_queues for p_worker_id: each gets a lease and a new fencing token, and '
'completing it under an older token is refused (HR004). In owner mode it acquires the decision partitions of '
'the workflow tasks it claims and returns their owner_epoch. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.claim_named_tasks IS
'Redis dispatch: claim the tasks p_task_ids names for p_worker_id, each only if claim_tasks could take it next '
'(one of p_queues, pending, due, not jumping its queue''s order, admitted by owner mode and the flow-control gates); '
'the others are skipped and stay with claim_tasks. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_claimable_tasks IS
'The pending tasks (not timers) of p_execution_ids, of kind p_kind when given, with their queue and due time: '
'what a Redis dispatch publishes after the commit that made them. Called by the Python worker and client (roles harvest_operator, harvest_worker).';
COMMENT ON FUNCTION harvest.next_due_at IS
'When the earliest not-yet-due work of p_queues (timers, retry backoffs) becomes due, so an idle worker sleeps '
'exactly until then. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.complete_activities_with_claim IS
'complete_activities, then in the same transaction claim_tasks for up to p_claim_limit tasks, never more than the '
'results that complete without handing a task back (each frees its worker slot); claimed tasks come back as rows '
'with outcome claimed and the task in handed (as the worker receives it: claim_tasks'' columns it reads). Called by the Python worker (role harvest_worker).';
