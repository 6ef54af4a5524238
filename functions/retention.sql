-- Retention: a janitor that deletes terminal executions older than the
-- configured age (their events, tasks and dead letters go with them through
-- ON DELETE CASCADE), never a RUNNING one nor one _retention_keeps (a run under
-- a legal hold, the earlier runs of a chain that continues, a cross-shard child whose end its
-- parent has not taken), at most one batch per call so no
-- transaction grows without bound. Settings live in harvest.retention_config.
--
-- The worker registry has its own rule (prune_workers): a worker row is never
-- deleted while the worker is live or was seen recently (stale rows stay
-- visible, as the fleet view promises); a stopped or stale row whose last
-- heartbeat is older than worker_max_age (default 7 days; NULL keeps them all)
-- and that leases no task is deleted by the janitor.

-- An interval as text in the postgres style ('30 days 12:30:00.5'), whatever the session's
-- IntervalStyle (sql_standard wrote '30 12:30:00.5', iso_8601 'P30DT12H30M0.5S'): the
-- answers, the audit log and the errors of retention read the same for every session. The
-- SET clause costs a setting's save and restore per call: the retention calls are not hot.
CREATE OR REPLACE FUNCTION harvest._interval_text(p_interval interval)
RETURNS text
LANGUAGE sql IMMUTABLE
SET intervalstyle = 'postgres'
AS $$
    SELECT p_interval::text;
$$;

-- p_age before p_at, its days and months counted in UTC: timestamptz - interval counts them in
-- the session's zone, so across a daylight-saving change (or a month's end) two janitors in
-- different zones cut at different instants (America/New_York's 30 days before 1 April were an
-- hour short of UTC's). Inlined by the planner.
CREATE OR REPLACE FUNCTION harvest._ago(p_at timestamptz, p_age interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (p_at AT TIME ZONE 'UTC' - p_age) AT TIME ZONE 'UTC';
$$;

-- The cutoff p_age before now (_ago), or HR001 naming the setting (p_what) when it falls before
-- the first time PostgreSQL stores (4713 BC): its own 22008 "timestamp out of range" named
-- neither the setting nor what to do. Every age retention is given or keeps goes through it.
-- An infinite age (PostgreSQL 17) is refused too: it kept everything as "configured", with an
-- age in seconds of "Infinity", where off says so.
CREATE OR REPLACE FUNCTION harvest._retention_cutoff(p_age interval, p_what text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_age <= interval '0' THEN
        RAISE EXCEPTION '% % must be positive', p_what, harvest._interval_text(p_age) USING ERRCODE = 'HR001';
    END IF;
    IF NOT isfinite(p_age) THEN
        RAISE EXCEPTION '% % is not a length of time', p_what, harvest._interval_text(p_age)
            USING ERRCODE = 'HR001', HINT = 'give an age, or off (NULL) to keep everything';
    END IF;
    RETURN harvest._ago(harvest.now(), p_age);
EXCEPTION WHEN datetime_field_overflow THEN
    RAISE EXCEPTION '% % is too long: its cutoff falls before the earliest time PostgreSQL stores',
        p_what, harvest._interval_text(p_age)
        USING ERRCODE = 'HR001', HINT = 'give a shorter age, or off (NULL) to keep everything';
END;
$$;

-- An execution id that names no row here: HR002, saying what the database can tell of why. An
-- id this shard minted (shard_of, its first two bytes) at a time (its clock bytes, as
-- _new_execution_id writes them)
-- before the cutoff of the last retention sweep as configured now (last_run_at less max_age)
-- may be a run retention deleted: the message says so and names the setting. Retention that
-- never ran here deleted nothing: the id may be a workflow id. Else (an id minted after the
-- cutoff, another shard's, no max_age now) both are possible and the hint lists both. One
-- row read on an error path; the message holds the id and the setting, nothing else.
CREATE OR REPLACE FUNCTION harvest._execution_not_found(p_execution_id uuid)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_hex text := replace(p_execution_id::text, '-', '');
    v_clock bigint := ('x' || substring(v_hex FROM 5 FOR 12))::bit(48)::bigint;
    v_config harvest.retention_config;
BEGIN
    SELECT * INTO v_config FROM harvest.retention_config AS c WHERE c.id;
    IF v_config.last_run_at IS NULL THEN
        RAISE EXCEPTION 'execution % does not exist', p_execution_id USING ERRCODE = 'HR002',
            HINT = 'the id may be a workflow id, not an execution id: '
                   'harvest.get_execution_by_workflow_id() finds a run by it';
    END IF;
    IF v_config.max_age IS NOT NULL
       AND harvest.shard_of(p_execution_id) = harvest.get_shard_id()
       AND to_timestamp((((v_clock >> 16) << 12) | (v_clock & 4095)) / 1000.0)
           < harvest._ago(v_config.last_run_at, v_config.max_age) THEN
        RAISE EXCEPTION 'execution % does not exist: retention may have deleted it (retention max_age is %: '
            'a run that ended longer ago is deleted, and this id was minted before the cutoff of its last sweep)',
            p_execution_id, harvest._interval_text(v_config.max_age) USING ERRCODE = 'HR002',
            HINT = 'harvest retention status shows the setting; harvest retention set --max-age keeps runs longer, '
                   'a legal hold keeps one run';
    END IF;
    RAISE EXCEPTION 'execution % does not exist', p_execution_id USING ERRCODE = 'HR002',
        HINT = 'the id may be a workflow id, not an execution id (harvest.get_execution_by_workflow_id() finds a '
               'run by it), or the id of a run retention deleted (harvest retention status shows its max_age)';
END;
$$;

-- Whether retention keeps an ended run past its window: a run under a legal hold (payloads.sql:
-- what is held is preserved, the run and its history with its payloads, until an admin releases
-- the hold), a run that continued as new while its successor is still here, and a cross-shard
-- child whose end its parent on another shard has not taken yet (p_end_owed_to_shard, the run's
-- end_owed_to_shard: cross_shard.sql; purged, its parent would wait for ever for a child that
-- ended, or be told not_found; the pump clears it, and release_owed_child_ends for a shard that
-- is gone for good). The chain is
-- known by its first run's id (the handle a start returned, a signal or an update sent by it,
-- update ids, a parent's ChildWorkflowStarted), and the chain is followed forward from it; so a
-- chain goes from its last run back once its last run has ended and passed the window:
-- run_retention's batch that deletes a run takes the runs before it in its chain too. Not inlined (a body with subqueries is not): a call per run it judges, so every
-- read through it is bounded (run_retention) or is a status read (get_retention_status).
-- A run it keeps owes its end, has a hold or CONTINUED_AS_NEW: get_retention_status calls it
-- for those runs alone (a call is about 15 us: 13-25 s for the 814,000 runs of a 30-day window
-- over 2M, docs/performance.md). A new reason to keep a run goes into that test too.
CREATE OR REPLACE FUNCTION harvest._retention_keeps(
    p_id uuid, p_status text, p_output jsonb, p_end_owed_to_shard integer
)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_end_owed_to_shard IS NOT NULL
        OR EXISTS (SELECT 1 FROM harvest.legal_holds AS h WHERE h.execution_id = p_id)
        OR (p_status = 'CONTINUED_AS_NEW' AND EXISTS (
            SELECT 1 FROM harvest.executions AS s
            WHERE s.id = (p_output ->> 'continued_as_new')::uuid));
$$;

CREATE OR REPLACE FUNCTION harvest.set_retention(
    p_max_age interval, p_batch_size integer DEFAULT NULL,
    p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_max_age IS NOT NULL AND p_max_age <= interval '0' THEN
        RAISE EXCEPTION 'retention max age % must be positive (NULL keeps everything)',
            harvest._interval_text(p_max_age)
            USING ERRCODE = 'HR001';
    END IF;
    IF p_batch_size IS NOT NULL AND (p_batch_size < 1 OR p_batch_size > 10000) THEN
        RAISE EXCEPTION 'retention batch size % is out of range 1..10000', p_batch_size USING ERRCODE = 'HR001';
    END IF;
    IF p_max_age IS NOT NULL THEN
        PERFORM harvest._retention_cutoff(p_max_age, 'retention max age');
    END IF;
    INSERT INTO harvest.retention_config (id) VALUES (true) ON CONFLICT DO NOTHING;
    UPDATE harvest.retention_config
    SET max_age = p_max_age, batch_size = coalesce(p_batch_size, batch_size), updated_at = harvest.now();
    PERFORM harvest._audit('retention.set', NULL, p_operator_id,
                           jsonb_build_object('max_age', harvest._interval_text(p_max_age),
                                              'batch_size', p_batch_size));
    RETURN harvest.get_retention_status();
END;
$$;

-- The ends this shard keeps for parents on other shards (end_owed_to_shard, cross_shard.sql),
-- per parent shard: ended (kept by retention until the parent's pump has them), running (to
-- be kept once they end) and the oldest ended one's completed_at. Read through
-- executions_end_owed, which holds the owed runs only. retention status shows it (and the
-- operator's release of a shard gone for good counts by it); the metrics sampler exports it
-- (harvest_cross_shard_child_ends_owed, the alert on a parent whose pump does not take them).
CREATE OR REPLACE FUNCTION harvest._owed_child_ends()
RETURNS TABLE (parent_shard integer, ended bigint, running bigint, oldest_completed_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT e.end_owed_to_shard, count(*) FILTER (WHERE e.completed_at IS NOT NULL),
           count(*) FILTER (WHERE e.completed_at IS NULL), min(e.completed_at)
    FROM harvest.executions AS e
    WHERE e.end_owed_to_shard IS NOT NULL
    GROUP BY e.end_owed_to_shard
    ORDER BY e.end_owed_to_shard;
$$;

-- The settings, the last run, and how many executions a run would delete now. The last run is
-- the last sweep: last_run_deleted adds up its batches (run_retention), last_run_remaining is
-- what its last batch left (above 0: the sweep is under way, or stopped short).
CREATE OR REPLACE FUNCTION harvest.get_retention_status()
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_config harvest.retention_config;
    v_eligible bigint;
    v_workers_eligible bigint;
    v_owed bigint;
    v_owed_by_shard jsonb;
BEGIN
    SELECT * INTO v_config FROM harvest.retention_config WHERE id;
    IF v_config.max_age IS NOT NULL THEN
        -- _retention_keeps asked of the runs it may keep alone (its comment): a CASE, so the
        -- call is made for those runs only; the holds read once (a hashed subplan).
        SELECT count(*) INTO v_eligible FROM harvest.executions AS e
        WHERE e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED') AND e.completed_at < harvest._ago(harvest.now(), v_config.max_age)
          AND e.end_owed_to_shard IS NULL  -- (executions_retention)
          AND CASE WHEN e.status = 'CONTINUED_AS_NEW' OR e.id IN (SELECT h.execution_id FROM harvest.legal_holds AS h)
                   THEN NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard)
                   ELSE true END;
    END IF;
    IF v_config.worker_max_age IS NOT NULL THEN
        SELECT count(*) INTO v_workers_eligible FROM harvest._prunable_workers(v_config.worker_max_age) AS w;
    END IF;
    -- Ended cross-shard children kept for a parent on another shard (executions_end_owed):
    -- the total, and per parent shard.
    SELECT coalesce(sum(o.ended), 0), coalesce(jsonb_agg(jsonb_build_object(
        'parent_shard', o.parent_shard, 'ended', o.ended, 'running', o.running,
        'oldest_completed_at', o.oldest_completed_at) ORDER BY o.parent_shard), '[]'::jsonb)
    INTO v_owed, v_owed_by_shard
    FROM harvest._owed_child_ends() AS o;
    RETURN jsonb_build_object(
        'configured', v_config.max_age IS NOT NULL,
        'worker_max_age', harvest._interval_text(v_config.worker_max_age),
        'workers_eligible', v_workers_eligible,
        'max_age', harvest._interval_text(v_config.max_age),
        'max_age_secs', extract(epoch FROM v_config.max_age),
        'batch_size', coalesce(v_config.batch_size, 500),
        'updated_at', v_config.updated_at,
        'last_run_at', v_config.last_run_at,
        'last_run_deleted', v_config.last_run_deleted,
        'last_run_remaining', v_config.last_run_remaining,
        'eligible', v_eligible,
        'owed_child_ends', v_owed,
        'owed_child_ends_by_shard', v_owed_by_shard);
END;
$$;

-- Delete one batch of expired terminal executions. p_max_age / p_batch_size
-- override the settings for this call. Returns {deleted, remaining, cutoff}:
-- call again while remaining > 0 (counted up to 10,000: 10000 means at least that many).
-- Rows locked by someone else are skipped.
CREATE OR REPLACE FUNCTION harvest.run_retention(
    p_max_age interval DEFAULT NULL,
    p_batch_size integer DEFAULT NULL,
    p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_config harvest.retention_config;
    v_max_age interval;
    v_batch integer;
    v_cutoff timestamptz;
    v_ids uuid[];
    v_remaining bigint;
    v_runless bigint;
    v_held uuid [];
    v_runless_ids uuid [];
    v_front uuid [];  -- the runs the batch's last-taken runs continued from (the walk up chains)
    v_taken uuid [];
BEGIN
    SELECT * INTO v_config FROM harvest.retention_config WHERE id;
    v_max_age := coalesce(p_max_age, v_config.max_age);
    v_batch := coalesce(p_batch_size, v_config.batch_size, 500);
    IF v_max_age IS NULL THEN
        RAISE EXCEPTION 'retention is not configured: no max age' USING ERRCODE = 'HR001',
            -- (The CLI prints this hint too: its command first, the SQL for a psql session.)
            HINT = 'harvest retention set --max-age ''30 days'' (SQL: SELECT harvest.set_retention(''30 days'')), '
                   'or pass a max age (run-now --max-age)';
    END IF;
    v_cutoff := harvest._retention_cutoff(v_max_age, 'retention max age');
    IF v_batch < 1 OR v_batch > 10000 THEN
        RAISE EXCEPTION 'retention batch size % is out of range 1..10000', v_batch USING ERRCODE = 'HR001';
    END IF;
    SELECT array_agg(s.id) INTO v_ids FROM (
        SELECT e.id FROM harvest.executions AS e
        WHERE e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED') AND e.completed_at < v_cutoff
          -- Down executions_retention: a run kept for a parent's shard is not read (migration 0102).
          AND e.end_owed_to_shard IS NULL
          AND NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard)
        ORDER BY e.completed_at
        LIMIT v_batch
        FOR UPDATE SKIP LOCKED
    ) AS s;
    IF v_ids IS NOT NULL THEN
        -- Checked again, in a statement of its own, now that the rows are ours: the lock above
        -- judged each row with its statement's snapshot, so a hold committed between that
        -- snapshot and the row's lock (set_legal_hold locks the row to set it) was not seen;
        -- every hold set before the lock is seen now, and none can be set after it.
        -- v_front: the runs the batch's runs continued from (none for a run that did not).
        SELECT array_agg(e.id), array_agg(e.continued_from) FILTER (WHERE e.continued_from IS NOT NULL)
        INTO v_ids, v_front FROM harvest.executions AS e
        WHERE e.id = ANY(v_ids) AND NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard);
        -- A chain's earlier runs go with its last: each run the batch deletes takes the run it
        -- continued from (kept only while its successor is here), and that one the run before
        -- it, up the chain within the batch size. One run a batch, an ended chain of 5,000 runs
        -- took 5,001 batches (341 s), each reading the chain's runs still kept. A run another
        -- session holds, one under a legal hold (checked, as above, once it is ours) or one a
        -- parent on another shard is owed ends its chain's walk: it and the runs before it
        -- stay, kept by their successor as before.
        WHILE v_front IS NOT NULL AND cardinality(v_ids) < v_batch LOOP
            SELECT array_agg(q.id) INTO v_front FROM (
                SELECT p.id FROM harvest.executions AS p
                WHERE p.id = ANY(v_front) AND p.status = 'CONTINUED_AS_NEW'
                  AND (p.output ->> 'continued_as_new')::uuid = ANY(v_ids)
                  AND p.completed_at < v_cutoff AND p.end_owed_to_shard IS NULL
                LIMIT v_batch - cardinality(v_ids)
                FOR UPDATE SKIP LOCKED
            ) AS q;
            SELECT array_agg(p.id), array_agg(p.continued_from) FILTER (WHERE p.continued_from IS NOT NULL)
            INTO v_taken, v_front FROM harvest.executions AS p
            WHERE p.id = ANY(v_front)
              AND NOT EXISTS (SELECT 1 FROM harvest.legal_holds AS h WHERE h.execution_id = p.id);
            v_ids := v_ids || v_taken;
        END LOOP;
        -- An external signal or cancel keeps its row: its source still hears the
        -- outcome (not_found, once its target is gone). Down relays_target (migration 0119).
        DELETE FROM harvest.relays AS r
        WHERE r.target_execution_id = ANY(v_ids) AND r.source_execution_id IS NULL;
        -- The status re-check guards against a row that changed under us.
        DELETE FROM harvest.executions AS e
        WHERE e.id = ANY(v_ids) AND e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED');
    END IF;
    -- Receipts of relays applied for other shards (relays.sql) past the window, at most a
    -- batch, oldest first down relay_receipts_received (0098: one unbounded delete found by a
    -- scan of every receipt, on every batch, before).
    DELETE FROM harvest.relay_receipts AS r
    WHERE (r.source_shard, r.relay_id) IN (
        SELECT q.source_shard, q.relay_id FROM harvest.relay_receipts AS q
        WHERE q.received_at < v_cutoff ORDER BY q.received_at LIMIT v_batch FOR UPDATE SKIP LOCKED);
    -- A result waiter's mark past the window on a run that is not live, at most a batch: a
    -- client that died between marking itself and re-reading a run that was closing (the close
    -- deletes the marks it sees; a waiter that lives deletes its own when it reads the run ended).
    DELETE FROM harvest.result_waiters AS w
    WHERE (w.execution_id, w.waiter_id, w.login) IN (
        SELECT q.execution_id, q.waiter_id, q.login FROM harvest.result_waiters AS q
        WHERE q.since < v_cutoff AND NOT EXISTS (
            SELECT 1 FROM harvest.executions AS e
            WHERE e.id = q.execution_id AND e.status IN ('RUNNING', 'PAUSED'))
        LIMIT v_batch FOR UPDATE SKIP LOCKED);
    -- Offloaded payloads no run owns (payloads.sql) past the window: a query's large answer
    -- whose run was gone when it was stored (or stored by an earlier worker), a writer that
    -- named no run. A run's own rows go with it (ON DELETE CASCADE); a client's
    -- start input is owned by its run from the start's transaction on, so no live run
    -- references a run-less row. A start a throttle, debounce or batch holds back has no run
    -- yet: the rows its input references are kept until it is released, which hands them to
    -- its run (_release_pending_start).
    -- The references are read twice. Before the lock, so a row a held-back start keeps takes
    -- no place in the batch (locked and judged after, kept rows older than the rest filled
    -- every batch, and a batch's worth of them stopped the sweep for good). After it, in a
    -- statement of their own, to decide: a row an admission is recording as its held-back
    -- start's is locked by it (FOR KEY SHARE) and skipped, and a start admitted and committed
    -- before the lock is seen there (read before the lock only, a start committed in between
    -- lost the row it had just recorded).
    SELECT coalesce(array_agg(DISTINCT r.ref), '{}'::uuid []) INTO v_held
    FROM harvest.pending_starts AS ps, harvest._payload_refs(ps.input) AS r (ref);
    SELECT coalesce(array_agg(l.id), '{}'::uuid []) INTO v_runless_ids FROM (
        SELECT q.id FROM harvest.payloads AS q
        WHERE q.execution_id IS NULL AND q.created_at < v_cutoff AND q.id <> ALL(v_held)
        ORDER BY q.created_at LIMIT v_batch FOR UPDATE SKIP LOCKED
    ) AS l;
    v_runless := 0;
    IF cardinality(v_runless_ids) > 0 THEN
        SELECT coalesce(array_agg(DISTINCT r.ref), '{}'::uuid []) INTO v_held
        FROM harvest.pending_starts AS ps, harvest._payload_refs(ps.input) AS r (ref);
        WITH gone AS (
            DELETE FROM harvest.payloads AS p
            WHERE p.id = ANY(v_runless_ids) AND p.id <> ALL(v_held)
            RETURNING 1
        )
        SELECT count(*) INTO v_runless FROM gone;
    END IF;
    -- What the next call would find, counted up to 10,000 (the largest batch) down
    -- executions_retention: a count of the whole backlog after every batch made a large
    -- backlog's sweep take time quadratic in its size (4 s a batch behind 300,000 runs), and
    -- the batch's rows stayed locked meanwhile. get_retention_status counts them all.
    SELECT count(*) INTO v_remaining FROM (
        SELECT 1 FROM harvest.executions AS e
        WHERE e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED') AND e.completed_at < v_cutoff
          -- Down executions_retention: a run kept for a parent's shard is not read (migration 0102).
          AND e.end_owed_to_shard IS NULL
          AND NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard)
        ORDER BY e.completed_at
        LIMIT 10000
    ) AS r;
    -- The sweep's total: a batch after one that left rows remaining continues its sweep (the
    -- janitor's round, run-now's batches, or a sweep stopped short and taken up by the next), any
    -- other starts a new one (migration 0116: the field held the last batch's count alone).
    UPDATE harvest.retention_config
    SET last_run_at = harvest.now(),
        last_run_deleted = CASE WHEN last_run_remaining > 0 THEN coalesce(last_run_deleted, 0) ELSE 0 END
                           + coalesce(cardinality(v_ids), 0),
        last_run_remaining = v_remaining
    WHERE id;
    IF coalesce(cardinality(v_ids), 0) > 0 OR p_operator_id IS NOT NULL THEN
        PERFORM harvest._audit('retention.run', NULL, p_operator_id, jsonb_build_object(
            'deleted', coalesce(cardinality(v_ids), 0), 'cutoff', v_cutoff));
    END IF;
    RETURN jsonb_build_object('deleted', coalesce(cardinality(v_ids), 0), 'remaining', v_remaining,
                              'cutoff', v_cutoff, 'batch_size', v_batch, 'runless_payloads_deleted', v_runless);
END;
$$;

-- MIGRATED seals (rebalance.sql) and retention. A seal on the shard a run moved away from
-- forwards every by-id lookup, signal, cancel and result wait to the run's new shard, so
-- run_retention never deletes one on this shard's judgement alone: the run may still be live
-- there, however old the move. The janitor (harvest.worker.seals) collects seals in three
-- steps: list_expired_seals here (moved before the window's cutoff), list_moved_runs on the
-- shard each points to (the run gone, or ended past that shard's window with nothing keeping
-- it: a seal there is followed), and delete_seals here for the seals whose run would have been
-- collected. A seal whose home does not answer stays.
--
-- The cutoff the seal pass judges by: p_max_age before now (default: the retention setting),
-- or NULL when neither is set (retention keeps everything); _retention_cutoff refuses a max
-- age that is not positive, as for run_retention.
CREATE OR REPLACE FUNCTION harvest._seal_cutoff(p_max_age interval)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_max_age interval := coalesce(p_max_age, (SELECT c.max_age FROM harvest.retention_config AS c WHERE c.id));
BEGIN
    IF v_max_age IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN harvest._retention_cutoff(v_max_age, 'retention max age');
END;
$$;

-- A page of this shard's seals moved before the cutoff of p_max_age (default: the retention
-- setting; neither: none, retention keeps everything), oldest first, after the keyset
-- (p_after_moved_at, p_after_id), down executions_seals.
CREATE OR REPLACE FUNCTION harvest.list_expired_seals(
    p_max_age interval DEFAULT NULL,
    p_after_moved_at timestamptz DEFAULT NULL,
    p_after_id uuid DEFAULT NULL,
    p_limit integer DEFAULT 500
)
RETURNS TABLE (execution_id uuid, migrated_to_shard integer, moved_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_cutoff timestamptz := harvest._seal_cutoff(p_max_age);
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'seal page size % is out of range 1..10000', p_limit USING ERRCODE = 'HR001';
    END IF;
    IF v_cutoff IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT e.id, e.migrated_to_shard, e.completed_at FROM harvest.executions AS e
    WHERE e.status = 'MIGRATED' AND e.completed_at < v_cutoff
      AND (p_after_moved_at IS NULL OR (e.completed_at, e.id) > (p_after_moved_at, p_after_id))
    ORDER BY e.completed_at, e.id
    LIMIT p_limit;
END;
$$;

-- On the shard a seal points to: for each id, in their order, whether the moved run would
-- have been collected here (collectable: no row, the run gone; or an ended run, completed before the cutoff of
-- p_max_age, default this shard's setting, that retention would not keep), or where it went on
-- (forwarded_to: a seal of its own here). A live run, a staged copy, an ended run still in
-- its window or one kept (a legal hold, an owed end, a chain) is neither. With no max age
-- anywhere, only a run that is gone is collectable.
CREATE OR REPLACE FUNCTION harvest.list_moved_runs(p_ids uuid[], p_max_age interval DEFAULT NULL)
RETURNS TABLE (execution_id uuid, collectable boolean, forwarded_to integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_cutoff timestamptz := harvest._seal_cutoff(p_max_age);
BEGIN
    RETURN QUERY
    SELECT i.id,
           coalesce(e.id IS NULL OR (
               e.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED')
               AND e.completed_at < v_cutoff
               AND NOT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard)), false),
           CASE WHEN e.status = 'MIGRATED' THEN e.migrated_to_shard END
    FROM unnest(p_ids) WITH ORDINALITY AS i (id, at)
    LEFT JOIN harvest.executions AS e ON e.id = i.id
    ORDER BY i.at;
END;
$$;

-- Delete the seals of p_ids that are still seals (a run moved back here is not one any more),
-- rows locked by someone else skipped, audited; returns how many went. Their history goes with
-- them (ON DELETE CASCADE), as a collected run's does.
CREATE OR REPLACE FUNCTION harvest.delete_seals(p_ids uuid[], p_operator_id text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_deleted integer;
BEGIN
    WITH gone AS (
        DELETE FROM harvest.executions AS e
        WHERE e.id IN (SELECT q.id FROM harvest.executions AS q
                       WHERE q.id = ANY(p_ids) AND q.status = 'MIGRATED' FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*) INTO v_deleted FROM gone;
    IF v_deleted > 0 OR p_operator_id IS NOT NULL THEN
        PERFORM harvest._audit('retention.seals', NULL, p_operator_id, jsonb_build_object('deleted', v_deleted));
    END IF;
    RETURN v_deleted;
END;
$$;

-- The worker rows the registry rule lets go: stopped, or stale (no heartbeat
-- within 2 x its interval), last seen before now - p_max_age, holding no lease.
CREATE OR REPLACE FUNCTION harvest._prunable_workers(p_max_age interval)
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
    SELECT w.id FROM harvest.workers AS w
    WHERE w.last_heartbeat_at < harvest._ago(harvest.now(), p_max_age)
      AND harvest._worker_health(w) IN ('stopped', 'stale')
      AND NOT EXISTS (SELECT 1 FROM harvest.tasks AS t WHERE t.lease_owner = w.id);
$$;

-- Set the worker registry rule: rows of stopped or stale workers last seen more
-- than p_max_age ago are deleted by prune_workers (NULL keeps every row).
CREATE OR REPLACE FUNCTION harvest.set_worker_retention(p_max_age interval, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_max_age IS NOT NULL AND p_max_age <= interval '0' THEN
        RAISE EXCEPTION 'worker retention max age % must be positive (NULL keeps every worker row)',
            harvest._interval_text(p_max_age)
            USING ERRCODE = 'HR001';
    END IF;
    IF p_max_age IS NOT NULL THEN
        PERFORM harvest._retention_cutoff(p_max_age, 'worker retention max age');
    END IF;
    INSERT INTO harvest.retention_config (id) VALUES (true) ON CONFLICT DO NOTHING;
    UPDATE harvest.retention_config SET worker_max_age = p_max_age, updated_at = harvest.now() WHERE id;
    PERFORM harvest._audit('retention.set_workers', NULL, p_operator_id, jsonb_build_object('worker_max_age', harvest._interval_text(p_max_age)));
    RETURN harvest.get_retention_status();
END;
$$;

-- Delete the worker rows the registry rule lets go (p_max_age overrides the
-- setting for this call). The janitor calls it on every round. Returns
-- {deleted, cutoff, worker_max_age}; nothing is deleted when no rule is set.
CREATE OR REPLACE FUNCTION harvest.prune_workers(p_max_age interval DEFAULT NULL, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_max_age interval := coalesce(p_max_age, (SELECT c.worker_max_age FROM harvest.retention_config AS c WHERE c.id));
    v_ids text[];
BEGIN
    IF v_max_age IS NULL THEN
        RETURN jsonb_build_object('deleted', 0, 'cutoff', NULL, 'worker_max_age', NULL);
    END IF;
    PERFORM harvest._retention_cutoff(v_max_age, 'worker retention max age');
    WITH gone AS (
        DELETE FROM harvest.workers AS w
        WHERE w.id IN (SELECT p.id FROM harvest._prunable_workers(v_max_age) AS p (id))
          -- re-checked on the latest row version if a late heartbeat updated it meanwhile
          AND w.last_heartbeat_at < harvest._ago(harvest.now(), v_max_age)
        RETURNING w.id
    )
    SELECT array_agg(gone.id ORDER BY gone.id) INTO v_ids FROM gone;
    IF v_ids IS NOT NULL OR p_operator_id IS NOT NULL THEN
        PERFORM harvest._audit('retention.prune_workers', NULL, p_operator_id, jsonb_build_object(
            'deleted', coalesce(cardinality(v_ids), 0), 'workers', to_jsonb(v_ids),
            'worker_max_age', harvest._interval_text(v_max_age)));
    END IF;
    RETURN jsonb_build_object('deleted', coalesce(cardinality(v_ids), 0), 'cutoff', harvest._ago(harvest.now(), v_max_age),
                              'worker_max_age', harvest._interval_text(v_max_age));
END;
$$;

-- Delete up to p_batch_size rows of harvest.flow_keys (sql/flow.sql) that no start needs:
-- one row per quota or cancel_running key ever admitted, so per-tenant or per-user keys grew
-- without bound. A start takes its key's row in one statement (_take_flow_key: an insert or an
-- update, never a read before the lock), so a start is either done (committed)
-- or holds the row, or comes after the delete and inserts the row again: the row is a lock,
-- and a fresh one serialises the key's starts as well. What the row also does is refuse
-- (40001) a start whose transaction snapshot (REPEATABLE READ, SERIALIZABLE) predates another
-- start of the key; once the row is gone that start would insert a fresh one and count the
-- key's runs without the other start's. So a row goes only when
--   1. no session holds it (SKIP LOCKED: a start in progress keeps it),
--   2. its last writer (xmin) is older than the snapshot of every other session of this
--      database (pg_stat_activity's backend_xmin): every start of the key that ever wrote it
--      is visible to every open snapshot, so no open transaction can miss one, and
--   3. no live run (RUNNING, PAUSED) has the key: a key in use keeps its row (no churn).
-- The rows are locked first and the runs read in a later statement, whose snapshot (READ
-- COMMITTED) sees the runs of every start that wrote a locked row (in a snapshot transaction
-- a row written since its snapshot is not locked: 40001). The janitor calls it on every
-- round. Returns {deleted}.
-- Whether a live run (RUNNING, PAUSED) has this flow key (kind quota or concurrency): one
-- probe of executions_live_concurrency_key (led by the key) or executions_live_quota_key (live
-- runs only: no finished run of the key is read). A call per key (a body with subqueries is not
-- inlined).
CREATE OR REPLACE FUNCTION harvest._flow_key_in_use(p_kind text, p_key text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM harvest.executions AS e
        WHERE p_kind = 'quota' AND e.quota_key = p_key AND e.status IN ('RUNNING', 'PAUSED'))
        OR EXISTS (
            SELECT 1 FROM harvest.executions AS e
            WHERE p_kind = 'concurrency' AND e.concurrency_key = p_key AND e.status IN ('RUNNING', 'PAUSED'));
$$;

CREATE OR REPLACE FUNCTION harvest.prune_flow_keys(p_batch_size integer DEFAULT 500)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_horizon_age integer;
    v_kinds text[];
    v_keys text[];
    v_deleted bigint;
    v_unfolded text[];
BEGIN
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
        RAISE EXCEPTION 'flow key batch size % is out of range 1..10000', p_batch_size USING ERRCODE = 'HR001';
    END IF;
    -- The max_history_bytes quota's ended bytes (harvest.quota_ended_bytes) of up to
    -- p_batch_size keys with more than one row, folded into one a key. A key's starts fold its
    -- rows, but at READ COMMITTED only (_fold_quota_bytes, functions/flow_quotas.sql): a key whose
    -- every start runs inside the caller's REPEATABLE READ or SERIALIZABLE transaction kept a row
    -- per ended run, and its check read them all. The janitor's session is READ COMMITTED; the
    -- fold keeps every total and takes only the rows it can lock at once (SKIP LOCKED), so no
    -- close, start or purge waits for it, nor it for them. (One pass over the table: a row a key
    -- once folded.)
    v_unfolded := ARRAY(SELECT b.quota_key FROM harvest.quota_ended_bytes AS b
                        GROUP BY b.quota_key HAVING count(*) > 1 LIMIT p_batch_size);
    IF cardinality(v_unfolded) > 0 THEN
        PERFORM harvest._fold_quota_bytes(v_unfolded);
    END IF;
    -- The age of the oldest snapshot of another login's session of this database (ages are
    -- stable within a transaction; another database's sessions start nothing here, nor does
    -- an autovacuum worker, whose snapshot held every row back while it ran: hours, on a
    -- large table). A login is told by usesysid, which every viewer sees: an owner that is no
    -- superuser sees another role's backend_xmin but not its backend_type.
    SELECT max(age(a.backend_xmin)) INTO v_horizon_age
    FROM pg_stat_activity AS a
    WHERE a.backend_xmin IS NOT NULL AND a.datname = current_database() AND a.pid <> pg_backend_pid()
      AND a.usesysid IS NOT NULL;
    -- (The live-run test here keeps a key in use from taking a place in the batch: without it
    -- the first rows of the table, in use, filled every round's batch and the rest were never
    -- reached. It is made again after the lock, below, where it decides.)
    SELECT array_agg(f.kind), array_agg(f.key) INTO v_kinds, v_keys FROM (
        SELECT k.kind, k.key FROM harvest.flow_keys AS k
        WHERE age(k.xmin) > coalesce(v_horizon_age, -1)  -- (age 0: this transaction wrote it)
          AND NOT harvest._flow_key_in_use(k.kind, k.key)
        LIMIT p_batch_size
        FOR UPDATE SKIP LOCKED
    ) AS f;
    IF v_keys IS NULL THEN
        RETURN jsonb_build_object('deleted', 0);
    END IF;
    WITH gone AS (
        DELETE FROM harvest.flow_keys AS k
        USING unnest(v_kinds, v_keys) AS c (kind, key)
        WHERE k.kind = c.kind AND k.key = c.key AND NOT harvest._flow_key_in_use(c.kind, c.key)
        RETURNING 1
    )
    SELECT count(*) INTO v_deleted FROM gone;
    IF v_deleted > 0 THEN  -- (as prune_workers: a round that deletes nothing writes nothing)
        PERFORM harvest._audit('retention.prune_flow_keys', NULL, NULL, jsonb_build_object('deleted', v_deleted));
    END IF;
    RETURN jsonb_build_object('deleted', v_deleted);
END;
$$;

-- The operator's escape for ends owed to a parent's shard that will never take them (the
-- shard retired, lost, or restored to an instant before the children's starts): on the
-- child's shard, clear end_owed_to_shard on up to p_batch_size runs owed to p_parent_shard
-- (ended ones by default; p_include_running: running ones too, whose ends would otherwise be
-- kept when they end), found through executions_end_owed, audited. The janitor then takes them
-- with their window. Returns how many were released: call again until 0. A parent that is
-- still there and still waits would then miss the end (not_found): release only for a shard
-- that is gone for good. The faces (`harvest shard release-owed-ends`, its route) check first
-- that the parent's shard does not answer as itself; p_force says the caller skipped that check
-- (--force, a shard being restored to before the children's starts), and only goes into the
-- audit row: this function cannot reach another shard, so it checks nothing of it.
CREATE OR REPLACE FUNCTION harvest.release_owed_child_ends(
    p_parent_shard integer, p_batch_size integer DEFAULT 500, p_include_running boolean DEFAULT false,
    p_operator_id text DEFAULT NULL, p_force boolean DEFAULT false
)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_released integer;
BEGIN
    IF p_parent_shard IS NULL OR p_parent_shard NOT BETWEEN 0 AND 65535 THEN
        RAISE EXCEPTION 'parent shard % is not a shard number (0..65535)', p_parent_shard USING ERRCODE = 'HR001';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
        RAISE EXCEPTION 'batch size % is out of range 1..10000', p_batch_size USING ERRCODE = 'HR001';
    END IF;
    WITH released AS (
        UPDATE harvest.executions AS e SET end_owed_to_shard = NULL
        WHERE e.id IN (SELECT q.id FROM harvest.executions AS q
                       WHERE q.end_owed_to_shard = p_parent_shard
                         AND (q.completed_at IS NOT NULL OR coalesce(p_include_running, false))
                       LIMIT p_batch_size FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*) INTO v_released FROM released;
    PERFORM harvest._audit('retention.release_owed_child_ends', NULL, p_operator_id, jsonb_build_object(
        'parent_shard', p_parent_shard, 'released', v_released, 'include_running', coalesce(p_include_running, false),
        'force', coalesce(p_force, false)));
    RETURN v_released;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.set_retention IS
'Set how long terminal executions are kept (p_max_age; NULL keeps everything) and the batch size (1..10000), '
'audited; returns get_retention_status(). For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.get_retention_status IS
'The retention settings, the last run (last_run_deleted: the last sweep''s batches added up), and how many '
'executions (and worker rows) a run would delete now. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.run_retention IS
'Delete one batch of expired terminal executions (never a RUNNING or PAUSED one, one under a legal hold, '
'a cross-shard child whose end its parent has not taken, nor the earlier runs of a chain whose later run is '
'still here, nor a MIGRATED seal: the janitor judges those with delete_seals), audited; returns {deleted, remaining (counted '
'up to 10000), cutoff}: call again while remaining > 0. HR001 when no max age is set. For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.list_expired_seals IS
'A page (p_limit, 1..10000) of this shard''s MIGRATED seals moved before the cutoff of p_max_age (default: the '
'retention setting; none: no rows), oldest first after the keyset (p_after_moved_at, p_after_id): the janitor''s '
'candidates, each judged where it points (list_moved_runs) before delete_seals. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.list_moved_runs IS
'On the shard seals point to: for each of p_ids, collectable (the run gone, or ended before the cutoff of p_max_age '
'and not kept by retention) or forwarded_to (a seal here too). For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.delete_seals IS
'Delete the MIGRATED seals of p_ids (a row that is no seal is kept; locked rows skipped), audited as '
'retention.seals; returns how many went. The janitor calls it for the seals list_moved_runs found collectable. '
'For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.release_owed_child_ends IS
'On a child''s shard: let retention take up to p_batch_size ended cross-shard children (running ones too with '
'p_include_running) whose ends are owed to the parent shard p_parent_shard, gone for good; audited; returns how '
'many were released; p_force (the caller skipped its check that that shard is gone) is recorded in the audit row. '
'For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.set_worker_retention IS
'Set the worker registry rule: rows of stopped or stale workers last seen more than p_max_age ago are deleted by '
'prune_workers (NULL keeps every row); audited. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.prune_workers IS
'Delete the worker rows the registry rule lets go (never a live, recent or task-holding worker), audited; returns'
' {deleted, cutoff, worker_max_age}. Run by the retention janitor (role harvest_admin).';
COMMENT ON FUNCTION harvest.prune_flow_keys IS
'Delete up to p_batch_size (1..10000, default 500) rows of harvest.flow_keys that no start needs: not locked, last '
'written before every open snapshot, and no live run with the key; and fold the max_history_bytes quota''s '
'ended-bytes rows of up to p_batch_size keys with more than one into one a key (their sum kept). Returns '
'{deleted}. Called by the retention janitor on every round (role harvest_admin).';
