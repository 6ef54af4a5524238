-- Shard rebalancing: moving a quiescent execution to another shard (docs/sharding.md
-- "Rebalancing"). There is no cross-shard transaction: each step is one call on one
-- database, driven by harvest.shard.rebalance, and the record (shard_migrations, on
-- the source) says which step is outstanding:
--
--   source: begin_migration      quiescence checked under the row lock, record 'planned'
--   source: get_migration_copy    the execution, its history and its task rows, as JSON
--   target: accept_migration_copy    a staged MIGRATING copy (idempotent); tasks parked in
--                               shard_arrivals until activation
--   source: set_migration_copied                          -> 'copied'
--   both:   history_digest      byte identity of the two histories (+ a replay in Python)
--   source: verify_migration    records the high-water mark     -> 'verified'
--   source: cut_over_migration  THE atomic cutover: re-checks quiescence and the
--                               high-water mark under the row lock, seals MIGRATED,
--                               writes the forwarding pointer -> 'cut_over'
--   target: activate_migration  MIGRATING -> RUNNING, tasks inserted (idempotent)
--   source: complete_migration                              -> 'completed'
--
-- Only the cutover changes which shard is authoritative. Before it the source runs
-- the execution and a staged copy is inert; after it the source is a sealed,
-- read-only forwarding pointer. A wake (signal, cancel, timer) and the cutover both
-- take the execution's row lock: a wake first appends an event or a task, so the
-- cutover declines; the cutover first, and the wake finds MIGRATED (HR013, naming
-- the shard to follow). Nothing appends to or rewrites a history here.

-- Why an execution cannot move now: one name per unmet condition, all of them at
-- once, so a dry run explains itself. Empty: quiescent. A run parked on a timer
-- (a timer task due later) or waiting for a signal (no task at all) is quiescent;
-- anything that would write to the run while it moves is a blocker.
CREATE OR REPLACE FUNCTION harvest._migration_blockers(
    p_execution harvest.executions, p_migration_id bigint DEFAULT NULL
)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT array_remove(ARRAY[
        -- (A PAUSED run is not running: resume it, move it, pause it again.)
        CASE WHEN p_execution.status <> 'RUNNING' THEN 'not_running' END,
        -- A child's end reaches its parent through a relay on its own database.
        CASE WHEN p_execution.parent_id IS NOT NULL THEN 'has_parent' END,
        -- A child on another shard too: its end is pulled into the parent's row here
        -- (its cross_shard_children row, which a move does not carry).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.executions AS c
                          WHERE c.parent_id = p_execution.id
                            AND c.status IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED'))
                  OR EXISTS (SELECT 1 FROM harvest.cross_shard_children AS x
                             WHERE x.parent_execution_id = p_execution.id)
            THEN 'open_children' END,
        -- A pending wake (signal, cancel, fired timer, activity result) or a decision
        -- in flight.
        CASE WHEN EXISTS (SELECT 1 FROM harvest.tasks AS t
                          WHERE t.execution_id = p_execution.id AND t.kind = 'workflow')
            THEN 'workflow_task_pending' END,
        CASE WHEN EXISTS (SELECT 1 FROM harvest.tasks AS t
                          WHERE t.execution_id = p_execution.id AND t.kind = 'activity')
            THEN 'activity_in_flight' END,
        CASE WHEN EXISTS (SELECT 1 FROM harvest.tasks AS t
                          WHERE t.execution_id = p_execution.id AND t.kind = 'timer'
                            AND t.due_at <= harvest.now())
            THEN 'timer_due' END,
        -- A relay addressed to the run, or an external signal or cancel it sent whose
        -- outcome is still to be reported to it here (on this shard's relay row). A probe of
        -- relays_target and relays_source each (migration 0119: a read of every relay before).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.relays AS r WHERE r.target_execution_id = p_execution.id)
                  OR EXISTS (SELECT 1 FROM harvest.relays AS r WHERE r.source_execution_id = p_execution.id)
            THEN 'relay_pending' END,
        CASE WHEN EXISTS (SELECT 1 FROM harvest.query_requests AS q
                          WHERE q.execution_id = p_execution.id AND q.kind = 'update'
                            AND q.status IN ('pending', 'running', 'waiting', 'accepted'))
            THEN 'update_in_flight' END,
        CASE WHEN EXISTS (SELECT 1 FROM harvest.mutex_locks AS m WHERE m.holder_execution_id = p_execution.id)
                  OR EXISTS (SELECT 1 FROM harvest.mutex_waiters AS w WHERE w.execution_id = p_execution.id)
            THEN 'mutex' END,
        CASE WHEN EXISTS (SELECT 1 FROM harvest.workflow_slots AS s WHERE s.execution_id = p_execution.id)
            THEN 'concurrency_slot' END,
        -- An activity parked in the dead-letter queue: the run waits for its replay or
        -- discard, which act on this shard's dead letter (a move does not carry it: moved,
        -- the run would wait for ever, its replay refused on the seal).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.dead_letters AS d
                          WHERE d.execution_id = p_execution.id AND d.kind = 'activity')
            THEN 'dead_letter' END,
        -- A schedule's live run: its overlap and max_active_runs count this shard's
        -- executions (_schedule_active_runs), so, moved, the schedule would start another
        -- beside it. A firing's run (or its continue-as-new chain: the same workflow_id),
        -- and any run of a scheduled DAG (its schedule counts them all).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.schedule_firings AS f
                          INNER JOIN harvest.schedules AS s ON f.schedule_id = s.id
                          WHERE f.status = 'started' AND f.workflow_id = p_execution.workflow_id
                            AND (s.workflow_name = p_execution.workflow_name OR f.execution_id = p_execution.id))
                  OR EXISTS (SELECT 1 FROM harvest.schedules AS s
                             WHERE s.kind = 'dag' AND s.workflow_name = p_execution.workflow_name)
            THEN 'schedule_run' END,
        -- A run of a DAG with max_active_runs, which a trigger counts on this shard (_admit_dag_run).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.dags AS d
                          WHERE d.dag_name = p_execution.workflow_name AND d.max_active_runs IS NOT NULL)
            THEN 'dag_run' END,
        -- Another move of the run still open (its offloaded payloads, by contrast, move with
        -- it: get_migration_copy).
        CASE WHEN EXISTS (SELECT 1 FROM harvest.shard_migrations AS m
                          WHERE m.execution_id = p_execution.id
                            AND m.phase IN ('planned', 'copied', 'verified', 'cut_over')
                            AND m.id IS DISTINCT FROM p_migration_id)
            THEN 'migration_in_progress' END
    ], NULL);
$$;

-- Raise HR013 for a refused move or a move-related conflict. DETAIL is JSON
-- {reason, execution_id, shard_id (the live residence when known), blockers}.
CREATE OR REPLACE FUNCTION harvest._raise_migration(
    p_reason text, p_message text, p_execution_id uuid, p_shard integer DEFAULT NULL,
    p_blockers text[] DEFAULT '{}', p_hint text DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION '%', p_message
        USING ERRCODE = 'HR013',
        DETAIL = jsonb_build_object('reason', p_reason, 'execution_id', p_execution_id, 'shard_id', p_shard,
                                    'blockers', to_jsonb(coalesce(p_blockers, '{}')))::text,
        HINT = coalesce(p_hint, 'see docs/sharding.md, "Rebalancing"');
END;
$$;

-- The record, locked; HR002 when it does not exist.
CREATE OR REPLACE FUNCTION harvest._lock_migration(p_migration_id bigint)
RETURNS harvest.shard_migrations
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations;
BEGIN
    SELECT * INTO v_migration FROM harvest.shard_migrations WHERE id = p_migration_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard migration % does not exist on this shard', p_migration_id
            USING ERRCODE = 'HR002', HINT = 'list them with harvest.list_migrations()';
    END IF;
    RETURN v_migration;
END;
$$;

CREATE OR REPLACE FUNCTION harvest._migration_json(p_migration harvest.shard_migrations)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT to_jsonb(p_migration);
$$;

-- The executions of this shard a rebalance would consider, oldest first, each with
-- its blockers (empty: it can move). A dry run and a real run read the same rows.
CREATE OR REPLACE FUNCTION harvest.list_migration_candidates(
    p_workflow_name text DEFAULT NULL, p_execution_id uuid DEFAULT NULL, p_limit integer DEFAULT 100
)
RETURNS TABLE (
    execution_id uuid, workflow_name text, workflow_id text, status text, created_at timestamptz,
    blockers text[]
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY
    SELECT e.id, e.workflow_name, e.workflow_id, e.status, e.created_at, harvest._migration_blockers(e)
    FROM harvest.executions AS e
    WHERE (p_execution_id IS NULL AND e.status = 'RUNNING' OR e.id = p_execution_id)
      AND (p_workflow_name IS NULL OR e.workflow_name = p_workflow_name)
    ORDER BY e.created_at, e.id
    LIMIT p_limit;
END;
$$;

-- Open a move of p_execution_id to p_target_shard: the record, 'planned'. Refused
-- (HR013, DETAIL.blockers) unless the run is quiescent, and while another move of
-- it is open (of two rebalancers, exactly one plans it); HR001 for a target that is
-- this shard. Writes nothing else.
CREATE OR REPLACE FUNCTION harvest.begin_migration(
    p_execution_id uuid, p_target_shard integer, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard integer := harvest.get_shard_id();
    v_execution harvest.executions;
    v_blockers text[];
    v_migration harvest.shard_migrations;
BEGIN
    IF p_target_shard IS NULL OR p_target_shard < 0 OR p_target_shard > 65535 THEN
        RAISE EXCEPTION 'target shard % is out of range: a shard number is 0..65535',
            coalesce(p_target_shard::text, 'NULL') USING ERRCODE = 'HR001';
    END IF;
    IF p_target_shard = v_shard THEN
        RAISE EXCEPTION 'execution % is already on shard %: pick another target shard', p_execution_id, v_shard
            USING ERRCODE = 'HR001';
    END IF;
    v_execution := harvest._lock_execution(p_execution_id);
    v_blockers := harvest._migration_blockers(v_execution);
    IF cardinality(v_blockers) > 0 THEN
        PERFORM harvest._raise_migration(
            CASE WHEN 'migration_in_progress' = ANY(v_blockers) THEN 'migration_in_progress' ELSE 'not_quiescent' END,
            format('execution %s cannot move now: %s', p_execution_id, array_to_string(v_blockers, ', ')),
            p_execution_id, NULL, v_blockers,
            'a move takes only a quiescent root run (waiting on a timer or a signal); retry later');
    END IF;
    INSERT INTO harvest.shard_migrations (
        execution_id, workflow_name, workflow_id, source_shard, target_shard, operator_id, created_at, updated_at
    ) VALUES (
        p_execution_id, v_execution.workflow_name, v_execution.workflow_id, v_shard, p_target_shard,
        p_operator_id, harvest.now(), harvest.now()
    ) RETURNING * INTO v_migration;
    RETURN to_jsonb(v_migration);
END;
$$;

-- What a move copies, read from the source without a lock (the cutover re-checks):
-- the record, the execution row, its history and its task rows, each as to_jsonb of
-- its row, so a column added later is carried without a list to maintain.
CREATE OR REPLACE FUNCTION harvest.get_migration_copy(p_migration_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_migration harvest.shard_migrations;
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_migration FROM harvest.shard_migrations WHERE id = p_migration_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard migration % does not exist on this shard', p_migration_id USING ERRCODE = 'HR002';
    END IF;
    IF v_migration.phase NOT IN ('planned', 'copied', 'verified') THEN
        PERFORM harvest._raise_migration('phase', format('shard migration %s is %s: there is nothing to copy',
            p_migration_id, v_migration.phase), v_migration.execution_id);
    END IF;
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_migration.execution_id;
    -- A double column goes into the copy as numeric (harvest._execution_json): its float
    -- text follows the session's extra_float_digits (-15 moved a run timeout of 1800.25 s
    -- as 2000), numeric's does not.
    RETURN jsonb_build_object(
        'migration', to_jsonb(v_migration),
        'schema_version', harvest.schema_version(),
        'execution', harvest._execution_json(v_execution),
        'events', coalesce((SELECT jsonb_agg(to_jsonb(ev) ORDER BY ev.event_id) FROM harvest.events AS ev
                            WHERE ev.execution_id = v_migration.execution_id), '[]'::jsonb),
        'tasks', coalesce((SELECT jsonb_agg((to_jsonb(t) - 'id')
                                            || jsonb_build_object('priority_aging_secs', t.priority_aging_secs::numeric)
                                            ORDER BY t.id)
                           FROM harvest.tasks AS t
                           WHERE t.execution_id = v_migration.execution_id), '[]'::jsonb),
        -- The offloaded payloads the run owns: the history's references to them must resolve
        -- there. No other row, as a reset fork's and a successor's copies (reset.sql,
        -- decide.sql): a reference is JSON a starter or a sender wrote, and a copy the moved
        -- run owned there of another run's row, or of a run-less one (another client's
        -- held-back start's input), would outlive its erasure.
        'payloads', coalesce((SELECT jsonb_agg(to_jsonb(p) ORDER BY p.id) FROM harvest.payloads AS p
                              WHERE p.execution_id = v_migration.execution_id), '[]'::jsonb),
        -- Its legal hold (payloads.sql): the hold goes with the run, where erasure judges it. No
        -- hold can be set or released while the move is open, so this is the one at the cutover.
        'legal_hold', (SELECT to_jsonb(h) FROM harvest.legal_holds AS h WHERE h.execution_id = v_migration.execution_id),
        'history', harvest.history_digest(v_migration.execution_id));
END;
$$;

-- An execution row as JSON that reads back the same in any session: to_jsonb with its one
-- double column (run_timeout_secs) as numeric, whose text extra_float_digits does not change.
CREATE OR REPLACE FUNCTION harvest._execution_json(p_execution harvest.executions)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT to_jsonb(p_execution) || jsonb_build_object('run_timeout_secs', p_execution.run_timeout_secs::numeric);
$$;

-- The columns of the tables a move copies, and the schema version: the rebalancer
-- refuses a target whose columns differ from the source's (a copy into a table
-- lacking a column would drop it silently).
CREATE OR REPLACE FUNCTION harvest.get_copy_schema()
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'schema_version', harvest.schema_version(),
        'tables', (SELECT jsonb_object_agg(c.relname, c.cols) FROM (
            SELECT cl.relname, jsonb_agg(a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod)
                                         ORDER BY a.attnum) AS cols
            FROM pg_catalog.pg_class AS cl
            JOIN pg_catalog.pg_namespace AS n ON n.oid = cl.relnamespace AND n.nspname = 'harvest'
            JOIN pg_catalog.pg_attribute AS a ON a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped
            WHERE cl.relname IN ('executions', 'events', 'tasks')
            GROUP BY cl.relname) AS c));
$$;

-- The identity of a history, the same on any database: the event count, the
-- highest event id, the execution's last_event_id and an md5 over every event's
-- (id, type, data text, UTC time) in order. Two copies with the same digest hold
-- byte-identical histories.
CREATE OR REPLACE FUNCTION harvest.history_digest(p_execution_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'event_count', count(ev.event_id),
        'max_event_id', coalesce(max(ev.event_id), 0),
        'last_event_id', (SELECT e.last_event_id FROM harvest.executions AS e WHERE e.id = p_execution_id),
        'digest', md5(coalesce(string_agg(
            ev.event_id::text || E'\x1f' || ev.event_type || E'\x1f' || ev.event_data::text || E'\x1f'
            || to_char(ev.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
            E'\x1e' ORDER BY ev.event_id), '')))
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id;
$$;

-- Insert rows of a copied table from their to_jsonb form, every column but p_skip.
CREATE OR REPLACE FUNCTION harvest._insert_copied_rows(p_table text, p_rows jsonb, p_skip text[], p_conflict text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_cols text;
BEGIN
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_cols
    FROM pg_catalog.pg_attribute AS a
    WHERE a.attrelid = ('harvest.' || p_table)::regclass AND a.attnum > 0 AND NOT a.attisdropped
      AND NOT a.attname = ANY(p_skip);
    EXECUTE format('INSERT INTO harvest.%I (%s) SELECT %s FROM jsonb_populate_recordset(NULL::harvest.%I, $1) %s',
                   p_table, v_cols, v_cols, p_table, p_conflict)
    USING p_rows;
END;
$$;

-- Stage the copy a source's get_migration_copy produced, on the target: the execution
-- as MIGRATING (claimable by no worker, in the uniqueness index), its events, and
-- its task rows parked in shard_arrivals. Idempotent: a repeated import of the same
-- move changes nothing; an import over a stale staged copy replaces it; over this
-- shard's own MIGRATED seal (a move back) the seal's row is kept in prior_seal and
-- its pointer kept until activation, so ids routed here keep resolving. Refused
-- (HR013) over a live or terminal run of the id, or when a live run of another id
-- holds the business key here. Returns the staged copy's history_digest.
CREATE OR REPLACE FUNCTION harvest.accept_migration_copy(p_copy jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard integer := harvest.get_shard_id();
    v_migration harvest.shard_migrations;
    v_incoming harvest.executions;
    v_existing harvest.executions;
    v_arrival harvest.shard_arrivals;
    v_prior_seal jsonb;
BEGIN
    IF p_copy IS NULL OR jsonb_typeof(p_copy -> 'execution') IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_copy -> 'migration') IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_copy -> 'events') IS DISTINCT FROM 'array'
       OR jsonb_typeof(p_copy -> 'tasks') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'not a migration copy: expected the object harvest.get_migration_copy returns'
            USING ERRCODE = 'HR001';
    END IF;
    v_migration := jsonb_populate_record(NULL::harvest.shard_migrations, p_copy -> 'migration');
    v_incoming := jsonb_populate_record(NULL::harvest.executions, p_copy -> 'execution');
    IF v_migration.target_shard IS DISTINCT FROM v_shard THEN
        RAISE EXCEPTION 'this copy is addressed to shard %, and this database is shard %',
            v_migration.target_shard, v_shard USING ERRCODE = 'HR011',
            DETAIL = jsonb_build_object('requested_shard_id', v_migration.target_shard, 'shard_id', v_shard)::text,
            HINT = 'import a copy on the database of its target shard';
    END IF;
    IF v_incoming.id IS DISTINCT FROM v_migration.execution_id OR v_incoming.status <> 'RUNNING' THEN
        RAISE EXCEPTION 'migration copy % is inconsistent: its execution is % (%)', v_migration.id,
            v_incoming.id, v_incoming.status USING ERRCODE = 'HR001';
    END IF;
    -- Serialise with other starts of the key (start.sql takes the same lock).
    PERFORM harvest._lock_start_key(v_incoming.workflow_name, v_incoming.workflow_id);
    SELECT * INTO v_existing FROM harvest.executions WHERE id = v_incoming.id FOR UPDATE;
    SELECT * INTO v_arrival FROM harvest.shard_arrivals WHERE execution_id = v_incoming.id FOR UPDATE;
    IF FOUND AND v_existing.status = 'MIGRATING' THEN
        v_prior_seal := v_arrival.prior_seal;
        IF v_arrival.migration_id <> v_migration.id THEN
            -- A stale staged copy of an abandoned move: never authoritative, replace it.
            DELETE FROM harvest.events AS ev WHERE ev.execution_id = v_incoming.id
              AND ev.event_id > coalesce((v_prior_seal ->> 'last_event_id')::bigint, 0);
        END IF;
    ELSIF v_existing.id IS NOT NULL AND v_existing.status = 'MIGRATED' THEN
        v_prior_seal := harvest._execution_json(v_existing);
    ELSIF v_existing.id IS NOT NULL THEN
        PERFORM harvest._raise_migration('exists_on_target',
            format('execution %s already exists on shard %s (%s): it cannot be staged here',
                   v_incoming.id, v_shard, v_existing.status), v_incoming.id, v_shard);
    END IF;
    IF EXISTS (SELECT 1 FROM harvest.executions AS e
               WHERE e.workflow_name = v_incoming.workflow_name AND e.workflow_id = v_incoming.workflow_id
                 AND e.status IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED') AND e.id <> v_incoming.id) THEN
        PERFORM harvest._raise_migration('key_taken_on_target',
            format('shard %s already has a live run of %s with workflow_id "%s": execution %s cannot move there',
                   v_shard, v_incoming.workflow_name, v_incoming.workflow_id, v_incoming.id),
            v_incoming.id, v_shard, '{}', 'end that run, or move this one to another shard');
    END IF;
    v_incoming.status := 'MIGRATING';
    v_incoming.completed_at := NULL;
    v_incoming.decided_by := NULL;
    v_incoming.decided_through := NULL;
    v_incoming.migrated_to_shard := (v_prior_seal ->> 'migrated_to_shard')::integer;
    IF v_existing.id IS NULL THEN
        INSERT INTO harvest.executions SELECT v_incoming.*;
    ELSE
        UPDATE harvest.executions AS e SET (
            workflow_name, workflow_id, status, queue, input, output, failure, search_attributes, parent_id,
            last_event_id, cancel_requested, created_at, completed_at, parent_seq, parent_close_policy,
            continued_from, execution_timeout_at, timeout_at, concurrency_key, quota_key, history_bytes,
            decided_by, decided_through, run_timeout_secs, migrated_to_shard, migrated_from_shards
        ) = (
            v_incoming.workflow_name, v_incoming.workflow_id, v_incoming.status, v_incoming.queue,
            v_incoming.input, v_incoming.output, v_incoming.failure, v_incoming.search_attributes,
            v_incoming.parent_id, v_incoming.last_event_id, v_incoming.cancel_requested, v_incoming.created_at,
            v_incoming.completed_at, v_incoming.parent_seq, v_incoming.parent_close_policy,
            v_incoming.continued_from, v_incoming.execution_timeout_at, v_incoming.timeout_at,
            v_incoming.concurrency_key, v_incoming.quota_key, v_incoming.history_bytes, v_incoming.decided_by,
            v_incoming.decided_through, v_incoming.run_timeout_secs, v_incoming.migrated_to_shard,
            v_incoming.migrated_from_shards
        ) WHERE e.id = v_incoming.id;
    END IF;
    -- The copies take this shard's next global ids (its event stream's cursor).
    PERFORM harvest._insert_copied_rows('events', p_copy -> 'events', '{global_id}', 'ON CONFLICT DO NOTHING');
    -- Its offloaded payloads, owned here by the moved run (whoever wrote them on the source: the
    -- row must belong to a run of this database); a copy from before 0037 has none.
    INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, erased_at)
    SELECT p.id, v_incoming.id, p.created_at, p.bytes, p.data, p.erased_at
    FROM jsonb_populate_recordset(NULL::harvest.payloads, coalesce(p_copy -> 'payloads', '[]'::jsonb)) AS p
    ON CONFLICT (id) DO NOTHING;
    -- Its legal hold, as the copy has it (a hold row left from an earlier stay here is not the
    -- run's hold now); a copy from before the hold was carried has none.
    IF jsonb_typeof(p_copy -> 'legal_hold') = 'object' THEN
        INSERT INTO harvest.legal_holds (execution_id, reason, set_at, set_by)
        SELECT v_incoming.id, h.reason, h.set_at, h.set_by
        FROM jsonb_populate_record(NULL::harvest.legal_holds, p_copy -> 'legal_hold') AS h
        ON CONFLICT (execution_id) DO UPDATE SET reason = excluded.reason, set_at = excluded.set_at,
            set_by = excluded.set_by;
    ELSE
        DELETE FROM harvest.legal_holds WHERE execution_id = v_incoming.id;
    END IF;
    INSERT INTO harvest.shard_arrivals (
        execution_id, migration_id, source_shard, tasks, prior_seal, staged_at, copied_events
    ) VALUES (
        v_incoming.id, v_migration.id, v_migration.source_shard, p_copy -> 'tasks', v_prior_seal, harvest.now(),
        int8multirange(int8range(coalesce((v_prior_seal ->> 'last_event_id')::bigint, 0) + 1,
                                 v_incoming.last_event_id + 1))
    )
    ON CONFLICT (execution_id) DO UPDATE
    SET migration_id = excluded.migration_id, source_shard = excluded.source_shard, tasks = excluded.tasks,
        prior_seal = excluded.prior_seal, staged_at = excluded.staged_at, activated_at = NULL,
        copied_events = harvest.shard_arrivals.copied_events + excluded.copied_events;
    RETURN harvest.history_digest(v_incoming.id);
END;
$$;

-- The staged copy is on the target: 'planned' -> 'copied' (idempotent).
CREATE OR REPLACE FUNCTION harvest.set_migration_copied(p_migration_id bigint)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations := harvest._lock_migration(p_migration_id);
BEGIN
    IF v_migration.phase = 'planned' THEN
        UPDATE harvest.shard_migrations SET phase = 'copied', updated_at = harvest.now()
        WHERE id = p_migration_id RETURNING * INTO v_migration;
    ELSIF v_migration.phase <> 'copied' THEN
        PERFORM harvest._raise_migration('phase', format('shard migration %s is %s, not planned',
            p_migration_id, v_migration.phase), v_migration.execution_id);
    END IF;
    RETURN to_jsonb(v_migration);
END;
$$;

-- The copy's history (the target's history_digest) matched the source's: record the
-- source's high-water mark, 'copied' -> 'verified'. A mismatch fails the move
-- ('failed', last_error) and returns it; the target's staged copy is then discarded.
CREATE OR REPLACE FUNCTION harvest.verify_migration(p_migration_id bigint, p_target_digest jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations := harvest._lock_migration(p_migration_id);
    v_source jsonb;
BEGIN
    IF v_migration.phase = 'verified' THEN
        RETURN to_jsonb(v_migration);
    END IF;
    IF v_migration.phase <> 'copied' THEN
        PERFORM harvest._raise_migration('phase', format('shard migration %s is %s, not copied',
            p_migration_id, v_migration.phase), v_migration.execution_id);
    END IF;
    PERFORM 1 FROM harvest.executions WHERE id = v_migration.execution_id FOR SHARE;
    v_source := harvest.history_digest(v_migration.execution_id);
    IF p_target_digest IS NULL OR v_source -> 'digest' IS DISTINCT FROM p_target_digest -> 'digest'
       OR v_source -> 'event_count' IS DISTINCT FROM p_target_digest -> 'event_count'
       OR v_source -> 'last_event_id' IS DISTINCT FROM p_target_digest -> 'last_event_id' THEN
        UPDATE harvest.shard_migrations
        SET phase = 'failed', updated_at = harvest.now(),
            last_error = format('the copy''s history does not match the source''s (source %s events, copy %s)',
                                v_source ->> 'event_count', coalesce(p_target_digest ->> 'event_count', 'none'))
        WHERE id = p_migration_id RETURNING * INTO v_migration;
        RETURN to_jsonb(v_migration);
    END IF;
    UPDATE harvest.shard_migrations
    SET phase = 'verified', updated_at = harvest.now(),
        verified_event_count = (v_source ->> 'event_count')::bigint,
        verified_max_event_id = (v_source ->> 'max_event_id')::bigint,
        verified_digest = v_source ->> 'digest'
    WHERE id = p_migration_id RETURNING * INTO v_migration;
    RETURN to_jsonb(v_migration);
END;
$$;

-- THE cutover, one transaction on the source: under the execution's row lock,
-- re-check quiescence and that the history is still the verified one (count,
-- highest event id, digest), then seal the row MIGRATED with the forwarding
-- pointer, drop its task rows (the target holds them), answer its open queries
-- failed ExecutionMigrated (asked again where the run lives), 'verified' -> 'cut_over',
-- and audit. A record that no longer matches (the run woke since) is declined:
-- 'failed' with the reason, returned with cut_over false, so the run is moved
-- later from its current history. Idempotent on a record already cut over.
CREATE OR REPLACE FUNCTION harvest.cut_over_migration(p_migration_id bigint, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations := harvest._lock_migration(p_migration_id);
    v_execution harvest.executions;
    v_blockers text[];
    v_now jsonb;
    v_reason text;
    v_request_id bigint;
BEGIN
    IF v_migration.phase IN ('cut_over', 'completed') THEN
        RETURN to_jsonb(v_migration) || jsonb_build_object('cut_over', true);
    END IF;
    IF v_migration.phase <> 'verified' THEN
        PERFORM harvest._raise_migration('phase', format('shard migration %s is %s: only a verified move is cut '
            'over', p_migration_id, v_migration.phase), v_migration.execution_id);
    END IF;
    v_execution := harvest._lock_execution(v_migration.execution_id);
    v_blockers := harvest._migration_blockers(v_execution, p_migration_id);
    v_now := harvest.history_digest(v_migration.execution_id);
    IF cardinality(v_blockers) > 0 THEN
        v_reason := 'the run is no longer quiescent: ' || array_to_string(v_blockers, ', ');
    ELSIF (v_now ->> 'event_count')::bigint IS DISTINCT FROM v_migration.verified_event_count
          OR (v_now ->> 'max_event_id')::bigint IS DISTINCT FROM v_migration.verified_max_event_id
          OR v_execution.last_event_id IS DISTINCT FROM v_migration.verified_max_event_id
          OR v_now ->> 'digest' IS DISTINCT FROM v_migration.verified_digest THEN
        v_reason := format('the history moved on since it was verified (%s events then, %s now)',
                           v_migration.verified_event_count, v_now ->> 'event_count');
    END IF;
    IF v_reason IS NOT NULL THEN
        UPDATE harvest.shard_migrations SET phase = 'failed', last_error = 'cutover declined: ' || v_reason,
            updated_at = harvest.now()
        WHERE id = p_migration_id RETURNING * INTO v_migration;
        PERFORM harvest._audit('shard.rebalance.migrate', v_migration.execution_id::text, p_operator_id,
            jsonb_build_object('migration_id', p_migration_id, 'outcome', 'declined', 'reason', v_reason,
                               'from', v_migration.source_shard, 'to', v_migration.target_shard));
        RETURN to_jsonb(v_migration) || jsonb_build_object('cut_over', false);
    END IF;
    UPDATE harvest.executions
    SET status = 'MIGRATED', migrated_to_shard = v_migration.target_shard, completed_at = harvest.now()
    WHERE id = v_execution.id;
    DELETE FROM harvest.tasks WHERE execution_id = v_execution.id;
    -- Its legal hold went with the copy: the seal keeps none (erasure judges the live run's).
    DELETE FROM harvest.legal_holds WHERE execution_id = v_execution.id;
    -- Its open queries (pending, claimed, or waiting for the first workflow task; an update in
    -- flight blocks the move) are not carried: answered now, failed ExecutionMigrated naming the
    -- shard, so the caller asks again there (a client routed by id does so within its timeout)
    -- instead of waiting out its timeout on the seal, or being answered from its stale copy.
    FOR v_request_id IN
        UPDATE harvest.query_requests AS r
        SET status = 'failed', answer = NULL, claimed_by = NULL, lease_expires_at = NULL,
            answered_at = harvest.now(),
            error = jsonb_build_object('error_type', 'ExecutionMigrated', 'non_retryable', false,
                'message', format('execution %s moved to shard %s before the %s was answered: ask again '
                                  '(a call routed by the execution id follows the forwarding pointer)',
                                  v_execution.id, v_migration.target_shard, r.kind),
                'details', jsonb_build_object('reason', 'migrated', 'execution_id', v_execution.id,
                                              'shard_id', v_migration.target_shard))
        WHERE r.execution_id = v_execution.id AND r.status IN ('pending', 'running', 'waiting')
        RETURNING r.id
    LOOP
        PERFORM harvest._notify_query_answer(v_request_id);
    END LOOP;
    UPDATE harvest.shard_migrations SET phase = 'cut_over', updated_at = harvest.now()
    WHERE id = p_migration_id RETURNING * INTO v_migration;
    PERFORM harvest._audit('shard.rebalance.cut_over', v_migration.execution_id::text, p_operator_id,
        jsonb_build_object('migration_id', p_migration_id, 'from', v_migration.source_shard,
                           'to', v_migration.target_shard, 'event_count', v_migration.verified_event_count));
    RETURN to_jsonb(v_migration) || jsonb_build_object('cut_over', true);
END;
$$;

-- On the target, after the source's cutover: the staged copy becomes the live run
-- (MIGRATING -> RUNNING), its parked task rows are inserted (a timer fires here from
-- now on), the pointer a move back kept is cleared and the source joins the
-- residence chain. Idempotent: an activated copy returns activated false. HR013
-- when there is no staged copy of this move.
CREATE OR REPLACE FUNCTION harvest.activate_migration(p_execution_id uuid, p_migration_id bigint)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions := harvest._lock_execution(p_execution_id);
    v_arrival harvest.shard_arrivals;
BEGIN
    SELECT * INTO v_arrival FROM harvest.shard_arrivals WHERE execution_id = p_execution_id FOR UPDATE;
    IF NOT FOUND OR v_arrival.migration_id <> p_migration_id THEN
        PERFORM harvest._raise_migration('no_staged_copy', format('shard %s holds no staged copy of migration %s '
            'of execution %s', harvest.get_shard_id(), p_migration_id, p_execution_id), p_execution_id);
    END IF;
    IF v_arrival.activated_at IS NOT NULL THEN
        RETURN jsonb_build_object('execution_id', p_execution_id, 'activated', false, 'status', v_execution.status);
    END IF;
    UPDATE harvest.executions
    SET status = 'RUNNING', migrated_to_shard = NULL, completed_at = NULL,
        migrated_from_shards = migrated_from_shards || v_arrival.source_shard
    WHERE id = p_execution_id;
    PERFORM harvest._insert_copied_rows('tasks', v_arrival.tasks, '{id}', '');
    UPDATE harvest.shard_arrivals SET activated_at = harvest.now(), tasks = '[]'::jsonb, prior_seal = NULL
    WHERE execution_id = p_execution_id;
    PERFORM harvest._notify_queue(v_execution.queue);
    RETURN jsonb_build_object('execution_id', p_execution_id, 'activated', true, 'status', 'RUNNING');
END;
$$;

-- On the target, for a move that ended before its cutover: drop the staged copy
-- (or, over a move back, restore this shard's seal in place). Idempotent; HR013 over
-- an activated copy (the run lives here now).
CREATE OR REPLACE FUNCTION harvest.discard_migration_copy(p_execution_id uuid, p_migration_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_arrival harvest.shard_arrivals;
    v_seal harvest.executions;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id FOR UPDATE;
    SELECT * INTO v_arrival FROM harvest.shard_arrivals WHERE execution_id = p_execution_id FOR UPDATE;
    IF NOT FOUND OR v_arrival.migration_id <> p_migration_id THEN
        RETURN false;
    END IF;
    IF v_arrival.activated_at IS NOT NULL OR v_execution.status <> 'MIGRATING' THEN
        PERFORM harvest._raise_migration('activated', format('execution %s is live on shard %s: its copy is '
            'not discarded', p_execution_id, harvest.get_shard_id()), p_execution_id, harvest.get_shard_id());
    END IF;
    -- The hold the staged copy brought (the run stays where it was, with its own).
    DELETE FROM harvest.legal_holds WHERE execution_id = p_execution_id;
    IF v_arrival.prior_seal IS NULL THEN
        DELETE FROM harvest.executions WHERE id = p_execution_id;
        RETURN true;
    END IF;
    v_seal := jsonb_populate_record(NULL::harvest.executions, v_arrival.prior_seal);
    DELETE FROM harvest.events AS ev WHERE ev.execution_id = p_execution_id AND ev.event_id > v_seal.last_event_id;
    UPDATE harvest.executions AS e
    SET status = v_seal.status, migrated_to_shard = v_seal.migrated_to_shard, last_event_id = v_seal.last_event_id,
        history_bytes = v_seal.history_bytes, completed_at = v_seal.completed_at,
        migrated_from_shards = v_seal.migrated_from_shards
    WHERE e.id = p_execution_id;
    DELETE FROM harvest.shard_arrivals WHERE execution_id = p_execution_id;
    RETURN true;
END;
$$;

-- The move is done: 'cut_over' -> 'completed', with its audit row
-- (shard.rebalance.migrate, or shard.rebalance.auto_resume when a worker's resume
-- scanner settled it). Idempotent on a completed record.
CREATE OR REPLACE FUNCTION harvest.complete_migration(
    p_migration_id bigint, p_operator_id text DEFAULT NULL, p_automatic boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations := harvest._lock_migration(p_migration_id);
BEGIN
    IF v_migration.phase = 'completed' THEN
        RETURN to_jsonb(v_migration) || jsonb_build_object('completed_now', false);
    END IF;
    IF v_migration.phase <> 'cut_over' THEN
        PERFORM harvest._raise_migration('phase', format('shard migration %s is %s: only a cut-over move '
            'completes', p_migration_id, v_migration.phase), v_migration.execution_id);
    END IF;
    UPDATE harvest.shard_migrations SET phase = 'completed', updated_at = harvest.now(), last_error = NULL
    WHERE id = p_migration_id RETURNING * INTO v_migration;
    PERFORM harvest._audit(
        CASE WHEN p_automatic THEN 'shard.rebalance.auto_resume' ELSE 'shard.rebalance.migrate' END,
        v_migration.execution_id::text,
        CASE WHEN p_automatic THEN 'system' ELSE p_operator_id END,
        jsonb_build_object('migration_id', p_migration_id, 'outcome', 'completed',
                           'from', v_migration.source_shard, 'to', v_migration.target_shard)
        || CASE WHEN p_automatic THEN jsonb_build_object('route', format(
               'background.rebalance_resume_scanner %s -> %s', v_migration.source_shard, v_migration.target_shard))
           ELSE '{}'::jsonb END);
    RETURN to_jsonb(v_migration) || jsonb_build_object('completed_now', true);
END;
$$;

-- End a move before its cutover: 'failed' with the reason, audited; the source
-- keeps running the execution. HR013 past the cutover (the run lives on the target:
-- finish the move with rebalance-resume instead). Idempotent on a failed record.
CREATE OR REPLACE FUNCTION harvest.fail_migration(
    p_migration_id bigint, p_error text, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_migration harvest.shard_migrations := harvest._lock_migration(p_migration_id);
BEGIN
    IF v_migration.phase = 'failed' THEN
        RETURN to_jsonb(v_migration);
    END IF;
    IF v_migration.phase IN ('cut_over', 'completed') THEN
        PERFORM harvest._raise_migration('past_cutover', format('shard migration %s is %s: the run lives on shard '
            '%s; finish the move with harvest shard rebalance-resume', p_migration_id, v_migration.phase,
            v_migration.target_shard), v_migration.execution_id, v_migration.target_shard);
    END IF;
    UPDATE harvest.shard_migrations
    SET phase = 'failed', last_error = coalesce(p_error, 'failed'), updated_at = harvest.now()
    WHERE id = p_migration_id RETURNING * INTO v_migration;
    PERFORM harvest._audit('shard.rebalance.migrate', v_migration.execution_id::text, p_operator_id,
        jsonb_build_object('migration_id', p_migration_id, 'outcome', 'failed', 'error', p_error,
                           'from', v_migration.source_shard, 'to', v_migration.target_shard));
    RETURN to_jsonb(v_migration);
END;
$$;

-- The worker's resume scanner: claim up to p_limit cut-over records older than
-- p_stall_after_secs (at least 5) whose target is one of p_target_shards, each
-- claim moving its updated_at to now and counting an attempt, so replicas do not
-- settle one record together. Records before the cutover are never claimed.
CREATE OR REPLACE FUNCTION harvest.claim_stalled_migrations(
    p_stall_after_secs double precision, p_target_shards integer[], p_limit integer DEFAULT 10
)
RETURNS SETOF jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY
    UPDATE harvest.shard_migrations AS m SET updated_at = harvest.now(), attempts = m.attempts + 1
    WHERE m.id IN (
        SELECT s.id FROM harvest.shard_migrations AS s
        WHERE s.phase = 'cut_over' AND s.target_shard = ANY(p_target_shards)
          AND s.updated_at < harvest.now() - make_interval(secs => greatest(coalesce(p_stall_after_secs, 30), 5))
        ORDER BY s.updated_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED)
    RETURNING to_jsonb(m);
END;
$$;

-- Note why a resume step failed (the target was down, ...), keeping the record's phase.
CREATE OR REPLACE FUNCTION harvest.set_migration_error(p_migration_id bigint, p_error text)
RETURNS void
LANGUAGE sql
AS $$
    UPDATE harvest.shard_migrations SET last_error = p_error, updated_at = harvest.now()
    WHERE id = p_migration_id;
$$;

-- The records of this shard's moves, newest first; p_phases filters ('open': every
-- phase before completed/failed).
CREATE OR REPLACE FUNCTION harvest.list_migrations(p_phases text[] DEFAULT NULL, p_limit integer DEFAULT 100)
RETURNS SETOF jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_phases text[] := p_phases;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001';
    END IF;
    IF v_phases = ARRAY['open'] THEN
        v_phases := ARRAY['planned', 'copied', 'verified', 'cut_over'];
    END IF;
    RETURN QUERY
    SELECT to_jsonb(m) FROM harvest.shard_migrations AS m
    WHERE v_phases IS NULL OR m.phase = ANY(v_phases)
    ORDER BY m.id DESC
    LIMIT p_limit;
END;
$$;

-- Where an execution lives, as seen from this shard: {execution_id, found, status,
-- migrated_to_shard}. A MIGRATED row (or a staged copy over one) names the shard to
-- follow; the router follows at most MAX_FORWARD_HOPS of them.
CREATE OR REPLACE FUNCTION harvest.get_residence(p_execution_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('execution_id', p_execution_id, 'shard_id', harvest.get_shard_id(),
        'found', e.id IS NOT NULL, 'status', e.status, 'migrated_to_shard', e.migrated_to_shard,
        'migrated_from_shards', to_jsonb(e.migrated_from_shards))
    FROM (SELECT 1) AS one
    LEFT JOIN harvest.executions AS e ON e.id = p_execution_id;
$$;

-- Collapse a forwarding chain: point this shard's MIGRATED seal of p_execution_id
-- straight at p_shard (the run's newest home), so A -> B -> C resolves in one hop.
-- Best effort: returns false when there is no such seal or it already points there.
CREATE OR REPLACE FUNCTION harvest.set_migration_forward(p_execution_id uuid, p_shard integer)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_shard IS NULL OR p_shard < 0 OR p_shard > 65535 OR p_shard = harvest.get_shard_id() THEN
        RAISE EXCEPTION 'shard % cannot be the forwarding target of this shard''s seal', p_shard
            USING ERRCODE = 'HR001';
    END IF;
    UPDATE harvest.executions SET migrated_to_shard = p_shard
    WHERE id = p_execution_id AND status = 'MIGRATED' AND migrated_to_shard IS DISTINCT FROM p_shard;
    RETURN FOUND;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.list_migration_candidates IS
'The executions of this shard a rebalance would consider (RUNNING, or the one p_execution_id), oldest first, each '
'with its quiescence blockers (empty: it can move); dry and real runs read the same rows. For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.begin_migration IS
'Open a move of a quiescent execution to p_target_shard: the shard_migrations record, phase planned. HR013 with '
'the blockers when the run is not quiescent or another move of it is open; HR001 for this shard. For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.get_migration_copy IS
'The copy a move carries (record, execution row, history, task rows, each as to_jsonb) from the source shard. For '
'admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.get_copy_schema IS
'The schema version and the column lists of the tables a move copies, for the rebalancer''s schema-parity check. '
'Role harvest_reader.';
COMMENT ON FUNCTION harvest.history_digest IS
'The identity of an execution''s history on any database: event count, highest event id, last_event_id and an md5 '
'over every event in order. Role harvest_reader.';
COMMENT ON FUNCTION harvest.accept_migration_copy IS
'Stage a move''s copy on its target shard as MIGRATING (claimable by no worker; tasks parked until activation); '
'idempotent, keeps a seal a move back replaces; HR013 over a live run of the id or its key, HR011 on the wrong '
'shard. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.set_migration_copied IS
'Record that a move''s staged copy is on the target: planned -> copied (idempotent). For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.verify_migration IS
'Compare the target''s history_digest with the source''s: copied -> verified with the high-water mark '
'(verified_event_count), or failed on a mismatch. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.cut_over_migration IS
'The one atomic cutover on the source: under the row lock re-check quiescence and the verified history, seal the '
'run MIGRATED with its forwarding pointer, its open queries answered failed ExecutionMigrated (details.shard_id: ask '
'again there), verified -> cut_over, audited; a stale record is declined (failed). For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.activate_migration IS
'On the target after the cutover: the staged copy becomes RUNNING and its task rows are inserted; idempotent. '
'Roles harvest_admin (rebalance) and harvest_worker (the resume scanner).';
COMMENT ON FUNCTION harvest.discard_migration_copy IS
'On the target, for a move that ended before its cutover: drop the staged copy, or restore the seal a move back '
'replaced; HR013 over an activated copy. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.complete_migration IS
'cut_over -> completed with its audit row (shard.rebalance.migrate, or shard.rebalance.auto_resume from a '
'worker); idempotent. Roles harvest_admin (rebalance) and harvest_worker (the resume scanner).';
COMMENT ON FUNCTION harvest.fail_migration IS
'End a move before its cutover (failed, audited); HR013 past the cutover. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.claim_stalled_migrations IS
'The resume scanner''s claim: cut-over records idle longer than p_stall_after_secs (floor 5) whose target is in '
'p_target_shards, each claim bumping updated_at and attempts. Roles harvest_admin and harvest_worker.';
COMMENT ON FUNCTION harvest.set_migration_error IS
'Note why a resume step of a move failed, keeping its phase. Roles harvest_admin and harvest_worker.';
COMMENT ON FUNCTION harvest.list_migrations IS
'This shard''s move records, newest first, filtered by phase (''open'' for every unfinished one). Role '
'harvest_reader.';
COMMENT ON FUNCTION harvest.get_residence IS
'Where an execution lives as seen from this shard: found, status and the forwarding pointer (migrated_to_shard). '
'Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.set_migration_forward IS
'Collapse a forwarding chain: point this shard''s MIGRATED seal straight at the run''s newest shard; best effort. '
'Roles harvest_admin and harvest_worker.';
