-- Schedules (sql/schedules.sql, docs/schedules.md): a workflow started on a cron
-- or an interval. PL/pgSQL cannot evaluate a cron expression, so the scheduler
-- (harvest/worker/scheduler.py, run by the scanner loop) computes the slots in
-- Python from a row list_due_schedules returns and hands them to fire_schedule,
-- the tick: one transaction that locks the schedule (SKIP LOCKED), checks that
-- the row is still at the revision the slots were computed from, records each
-- slot's firing under the unique (schedule, slot), starts its run with the
-- workflow id sched:{name}:{unix seconds} and stores the next slot. A doubled or
-- crashed tick therefore starts no slot twice and loses none: the loser of a race
-- finds the row locked or its revision gone, and a killed transaction leaves the
-- row as it was for the next tick.
--
-- Overlap (max_active_runs reached): skip, buffer_one, buffer_all, cancel_other,
-- terminate_other, allow_all. Catch-up: a slot older than catchup_window_secs
-- when the tick sees it is missed (schedule_misses, with the reason), not started.

-- The spec of a schedule as a JSON object (the keys create_schedule takes without
-- p_), checked and completed with the defaults: HR001 naming the bad field.
CREATE OR REPLACE FUNCTION harvest._check_schedule_spec(p_spec jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := p_spec ->> 'name';
    v_catchup boolean;
    v_window bigint;
    v_interval bigint;
    v_max_active integer;
    v_jitter double precision;
    v_spec jsonb;
    v_unknown text;
BEGIN
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_unknown FROM jsonb_object_keys(p_spec) AS k
    WHERE k NOT IN ('name', 'kind', 'workflow_name', 'queue', 'input', 'cron', 'interval_secs', 'timezone',
                    'max_active_runs', 'overlap', 'catchup', 'catchup_window_secs', 'jitter_secs', 'paused');
    IF v_unknown IS NOT NULL THEN
        RAISE EXCEPTION 'schedule: unknown field(s) %', v_unknown USING ERRCODE = 'HR001',
            HINT = 'the fields are name, kind, workflow_name, queue, input, cron, interval_secs, timezone, '
                   'max_active_runs, overlap, catchup, catchup_window_secs, jitter_secs, paused';
    END IF;
    IF v_name IS NULL OR v_name = '' OR length(v_name) > 200 THEN
        -- (an over-long name is named by its first characters and its length, not echoed whole)
        RAISE EXCEPTION 'schedule name must be 1 to 200 characters, got %',
            coalesce(CASE WHEN length(v_name) > 200 THEN harvest._clipped(v_name) ELSE quote_literal(v_name) END,
                     'none')
            USING ERRCODE = 'HR001', HINT = 'give the schedule a name of 1 to 200 characters';
    END IF;
    -- The numbers and booleans by the one rule for a JSON field (core.sql, _json_integer):
    -- HR001 naming the field for a string, a fraction or a value out of range.
    v_catchup := coalesce(harvest._json_boolean(p_spec -> 'catchup', 'catchup', 'schedule ' || v_name), false);
    PERFORM harvest._json_boolean(p_spec -> 'paused', 'paused', 'schedule ' || v_name);
    v_interval := harvest._json_bigint(p_spec -> 'interval_secs', 'interval_secs', 1, 3155760000,
                                        'schedule ' || v_name);
    v_max_active := coalesce(harvest._json_integer(p_spec -> 'max_active_runs', 'max_active_runs', 1,
                                                   p_where => 'schedule ' || v_name), 1);
    v_window := harvest._json_bigint(p_spec -> 'catchup_window_secs', 'catchup_window_secs', 1, 3155760000,
                                      'schedule ' || v_name);
    v_jitter := coalesce(harvest._json_number(p_spec -> 'jitter_secs', 'jitter_secs', p_where => 'schedule ' || v_name), 0);
    IF coalesce(p_spec ->> 'workflow_name', '') = '' THEN
        RAISE EXCEPTION 'schedule %: workflow_name is required', v_name USING ERRCODE = 'HR001';
    END IF;
    IF coalesce(p_spec ->> 'kind', 'workflow') NOT IN ('workflow', 'dag') THEN
        RAISE EXCEPTION 'schedule %: kind must be workflow or dag, got %', v_name, p_spec ->> 'kind'
            USING ERRCODE = 'HR001';
    END IF;
    IF (nullif(p_spec ->> 'cron', '') IS NULL) = (v_interval IS NULL) THEN
        RAISE EXCEPTION 'schedule %: give exactly one of cron and interval_secs', v_name USING ERRCODE = 'HR001';
    END IF;
    IF length(p_spec ->> 'cron') > 200 THEN
        RAISE EXCEPTION 'schedule %: cron is longer than 200 characters', v_name USING ERRCODE = 'HR001';
    END IF;
    -- Durations are bounded (above) as the Python side bounds them (harvest.core.durations: 100
    -- years), whose datetime arithmetic computes the slots: past that it overflows.
    BEGIN
        PERFORM now() AT TIME ZONE coalesce(p_spec ->> 'timezone', 'UTC');
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'schedule %: timezone % is unknown', v_name, quote_literal(p_spec ->> 'timezone')
            USING ERRCODE = 'HR001', HINT = 'use an IANA zone name, exactly, such as Europe/Paris or UTC';
    END;
    IF coalesce(p_spec ->> 'overlap', 'skip') NOT IN (
        'skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all'
    ) THEN
        RAISE EXCEPTION 'schedule %: overlap % is unknown', v_name, quote_literal(p_spec ->> 'overlap')
            USING ERRCODE = 'HR001',
                HINT = 'use skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all';
    END IF;
    v_window := coalesce(v_window, CASE WHEN v_catchup THEN 365 * 86400 ELSE 60 END);
    IF jsonb_typeof(coalesce(p_spec -> 'input', '[]'::jsonb)) <> 'array' THEN
        RAISE EXCEPTION 'schedule %: input must be a JSON array of the workflow''s arguments', v_name
            USING ERRCODE = 'HR001';
    END IF;
    -- Each run's start would refuse it (HR008): say so now, not with one failed firing a slot.
    PERFORM harvest._check_sent(format('the input of schedule %s', v_name), p_spec -> 'input',
                                   harvest._payload_limit());
    v_spec := jsonb_build_object(
        'name', v_name,
        'kind', coalesce(p_spec ->> 'kind', 'workflow'),
        'workflow_name', p_spec ->> 'workflow_name',
        -- None given: the queue the workers registered the workflow on (start.sql, _start_queue),
        -- resolved once, here, so the schedule shows where its runs go.
        'queue', coalesce(p_spec ->> 'queue', CASE WHEN coalesce(p_spec ->> 'kind', 'workflow') = 'workflow'
                                                   THEN harvest._start_queue(p_spec ->> 'workflow_name')
                                                   ELSE 'default' END),
        'input', coalesce(p_spec -> 'input', '[]'::jsonb),
        'cron', nullif(p_spec ->> 'cron', ''),
        'interval_secs', v_interval,
        'timezone', coalesce(p_spec ->> 'timezone', 'UTC'),
        'max_active_runs', v_max_active,
        'overlap', coalesce(p_spec ->> 'overlap', 'skip'),
        'catchup', v_catchup,
        'catchup_window_secs', v_window,
        -- A double goes into JSON as numeric: its float output follows the session's
        -- extra_float_digits (-15 wrote 2.5 as 2), numeric's does not.
        'jitter_secs', v_jitter::numeric);
    RETURN v_spec;
END;
$$;

-- Insert or change a schedule from a checked spec. A change of when it fires (cron,
-- interval, zone, jitter) drops the computed next slot: the scheduler computes it
-- again from now. Every change moves the revision on. Returns the row and whether
-- anything changed.
CREATE OR REPLACE FUNCTION harvest._put_schedule(
    p_spec jsonb, p_declared boolean, p_create_only boolean, OUT schedule harvest.schedules, OUT changed boolean
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_spec jsonb := harvest._check_schedule_spec(p_spec);
    v_old harvest.schedules;
    v_now timestamptz := harvest.now();
    v_timing_changed boolean;
BEGIN
    -- A zone the scheduler's zoneinfo reads: an IANA name, exactly (AT TIME ZONE, above, also
    -- takes another case, an abbreviation such as PST or a POSIX rule such as UTC+3, which the
    -- scheduler cannot compute). pg_timezone_names reads every zone (~20 ms): asked only for a
    -- zone this schedule does not have already (a worker's boot declares unchanged ones).
    IF v_spec ->> 'timezone' <> 'UTC'
       AND NOT EXISTS (SELECT 1 FROM harvest.schedules AS s
                       WHERE s.name = v_spec ->> 'name' AND s.timezone = v_spec ->> 'timezone')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names AS z WHERE z.name = v_spec ->> 'timezone') THEN
        RAISE EXCEPTION 'schedule %: timezone % is unknown', v_spec ->> 'name', quote_literal(v_spec ->> 'timezone')
            USING ERRCODE = 'HR001', HINT = 'use an IANA zone name, exactly, such as Europe/Paris or UTC';
    END IF;
    -- Two sessions putting one new name at once (two workers booting, two operators): the
    -- insert of the second waits for the first and, once it committed, inserts nothing; the
    -- second then finds the row, locks it, and goes on as for a schedule that existed.
    LOOP
        SELECT * INTO v_old FROM harvest.schedules AS s WHERE s.name = v_spec ->> 'name' FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO harvest.schedules AS s (
            name, kind, workflow_name, queue, input, cron, interval_secs, timezone, max_active_runs, overlap,
            catchup, catchup_window_secs, jitter_secs, paused, declared, anchor_at, created_at, updated_at
        ) VALUES (
            v_spec ->> 'name', v_spec ->> 'kind', v_spec ->> 'workflow_name', v_spec ->> 'queue', v_spec -> 'input',
            v_spec ->> 'cron', (v_spec ->> 'interval_secs')::bigint, v_spec ->> 'timezone',
            (v_spec ->> 'max_active_runs')::integer, v_spec ->> 'overlap', (v_spec ->> 'catchup')::boolean,
            (v_spec ->> 'catchup_window_secs')::bigint, (v_spec ->> 'jitter_secs')::double precision,
            coalesce(harvest._json_boolean(p_spec -> 'paused', 'paused'), false), p_declared, v_now, v_now, v_now
        ) ON CONFLICT ON CONSTRAINT schedules_name_key DO NOTHING
        RETURNING * INTO schedule;
        IF FOUND THEN
            changed := true;
            RETURN;
        END IF;
    END LOOP;
    IF p_create_only THEN
        RAISE EXCEPTION 'schedule % already exists', v_spec ->> 'name' USING ERRCODE = 'HR014',
            DETAIL = jsonb_build_object('name', v_spec ->> 'name')::text,
            HINT = 'update it (harvest schedule update), or delete it first';
    END IF;
    IF v_spec = harvest._schedule_spec(v_old) AND v_old.declared = (v_old.declared OR p_declared) THEN
        schedule := v_old;
        changed := false;
        RETURN;
    END IF;
    v_timing_changed := (v_spec ->> 'cron') IS DISTINCT FROM v_old.cron
        OR (v_spec ->> 'interval_secs')::bigint IS DISTINCT FROM v_old.interval_secs
        OR (v_spec ->> 'timezone') IS DISTINCT FROM v_old.timezone
        OR (v_spec ->> 'jitter_secs')::double precision IS DISTINCT FROM v_old.jitter_secs;
    UPDATE harvest.schedules AS s SET
        kind = v_spec ->> 'kind', workflow_name = v_spec ->> 'workflow_name', queue = v_spec ->> 'queue',
        input = v_spec -> 'input', cron = v_spec ->> 'cron', interval_secs = (v_spec ->> 'interval_secs')::bigint,
        timezone = v_spec ->> 'timezone', max_active_runs = (v_spec ->> 'max_active_runs')::integer,
        overlap = v_spec ->> 'overlap', catchup = (v_spec ->> 'catchup')::boolean,
        catchup_window_secs = (v_spec ->> 'catchup_window_secs')::bigint,
        jitter_secs = (v_spec ->> 'jitter_secs')::double precision,
        declared = s.declared OR p_declared,
        superseded_specs = harvest._supersede_spec(s.superseded_specs, harvest._schedule_spec(v_old), v_spec),
        anchor_at = CASE WHEN v_timing_changed THEN v_now ELSE s.anchor_at END,
        next_fire_at = CASE WHEN v_timing_changed THEN NULL ELSE s.next_fire_at END,
        next_due_at = CASE WHEN v_timing_changed THEN NULL ELSE s.next_due_at END,
        revision = s.revision + 1, updated_at = v_now
    WHERE s.id = v_old.id
    RETURNING * INTO schedule;
    changed := true;
END;
$$;

-- A schedule's superseded specs after a change from p_old to p_new (either may be equal, a
-- declared flag's change): p_old added last (once), p_new removed (an operator putting an
-- older spec back makes it current again), the latest 8 kept.
CREATE OR REPLACE FUNCTION harvest._supersede_spec(p_superseded jsonb, p_old jsonb, p_new jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_agg(k.spec ORDER BY k.ord), '[]'::jsonb)
    FROM (
        SELECT x.spec, x.ord
        FROM (
            SELECT e.value AS spec, e.ord
            FROM jsonb_array_elements(p_superseded) WITH ORDINALITY AS e (value, ord)
            WHERE e.value <> p_old
            UNION ALL
            SELECT p_old, 1000000 WHERE p_old <> p_new
        ) AS x
        WHERE x.spec <> p_new
        ORDER BY x.ord DESC
        LIMIT 8
    ) AS k;
$$;

-- The spec of a stored schedule, as _check_schedule_spec returns it.
CREATE OR REPLACE FUNCTION harvest._schedule_spec(p_schedule harvest.schedules)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'name', p_schedule.name, 'kind', p_schedule.kind, 'workflow_name', p_schedule.workflow_name,
        'queue', p_schedule.queue, 'input', p_schedule.input, 'cron', p_schedule.cron,
        'interval_secs', p_schedule.interval_secs, 'timezone', p_schedule.timezone,
        'max_active_runs', p_schedule.max_active_runs, 'overlap', p_schedule.overlap,
        'catchup', p_schedule.catchup, 'catchup_window_secs', p_schedule.catchup_window_secs,
        'jitter_secs', p_schedule.jitter_secs::numeric);  -- numeric: see _check_schedule_spec
$$;

-- A schedule's spec (or an update's changes) as the audit log keeps it: its input, which is
-- stored as declared (plain, never encoded) and may hold a customer's data, replaced by its
-- size, as a redacted export shows a payload. The audit log outlives the schedule, erasure and
-- retention: it records what was done, never a payload (docs/payloads.md, "Erasure").
CREATE OR REPLACE FUNCTION harvest._schedule_audit(p_spec jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_spec ? 'input' AND p_spec -> 'input' <> 'null'::jsonb
            THEN p_spec || jsonb_build_object('input', jsonb_build_object(
                'redacted', true, 'bytes', octet_length((p_spec -> 'input')::text)))
        ELSE p_spec
    END;
$$;

-- A schedule row as the API answers it (JSON).
CREATE OR REPLACE FUNCTION harvest._schedule_json(p_schedule harvest.schedules)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT harvest._schedule_spec(p_schedule) || jsonb_build_object(
        'paused', p_schedule.paused, 'paused_note', p_schedule.paused_note, 'declared', p_schedule.declared,
        'anchor_at', p_schedule.anchor_at, 'next_fire_at', p_schedule.next_fire_at,
        'next_due_at', p_schedule.next_due_at, 'last_slot_at', p_schedule.last_slot_at,
        'missed_slots', p_schedule.missed_slots, 'revision', p_schedule.revision,
        'created_at', p_schedule.created_at, 'updated_at', p_schedule.updated_at);
$$;

-- Lock a schedule by name, or raise HR002.
CREATE OR REPLACE FUNCTION harvest._lock_schedule(p_name text)
RETURNS harvest.schedules
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules;
BEGIN
    SELECT * INTO v_schedule FROM harvest.schedules AS s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % does not exist', coalesce(quote_literal(p_name), 'NULL') USING ERRCODE = 'HR002',
            HINT = 'harvest schedule list shows the schedules of this database';
    END IF;
    RETURN v_schedule;
END;
$$;

-- How many runs a schedule started are still running (a continue-as-new chain
-- counts as its live run: the key is the workflow id). A DAG's schedule counts every
-- live run of the DAG, triggered ones too, as the DAG's max_active_runs does
-- (_admit_dag_run; the caller holds the DAG's row, _lock_schedule_dag).
CREATE OR REPLACE FUNCTION harvest._schedule_active_runs(p_schedule harvest.schedules)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_schedule.kind = 'dag' THEN (
        SELECT count(*)::integer FROM harvest.executions AS e
        WHERE e.workflow_name = p_schedule.workflow_name AND e.status IN ('RUNNING', 'PAUSED')
    ) ELSE (
        SELECT count(*)::integer
        FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule.id AND f.status = 'started'
          AND harvest._firing_live(p_schedule, f)
    ) END;
$$;

-- The workflow names a firing's runs go by: the schedule's, and the one its run was started
-- under, which update_schedule may have changed since. Those runs still count against
-- max_active_runs, give way to overlap cancel_other and show in get_schedule.
CREATE OR REPLACE FUNCTION harvest._firing_workflow_names(
    p_schedule harvest.schedules, p_firing harvest.schedule_firings
)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY[p_schedule.workflow_name,
                 (SELECT e.workflow_name FROM harvest.executions AS e WHERE e.id = p_firing.execution_id)];
$$;

-- Whether a started firing's run is live: RUNNING or PAUSED, or its start still
-- deferred by a throttle, debounce or batch (pending_starts: a run to come).
CREATE OR REPLACE FUNCTION harvest._firing_live(p_schedule harvest.schedules, p_firing harvest.schedule_firings)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM harvest.executions AS e
                   WHERE e.workflow_name = ANY (harvest._firing_workflow_names(p_schedule, p_firing))
                     AND e.workflow_id = p_firing.workflow_id
                     AND e.status IN ('RUNNING', 'PAUSED'))
        OR (p_firing.reason = 'deferred'
            AND EXISTS (SELECT 1 FROM harvest.pending_starts AS p
                        WHERE p.workflow_name = p_schedule.workflow_name AND p.workflow_id = p_firing.workflow_id));
$$;

-- A DAG schedule's firing holds its DAG's row, as a trigger does (_admit_dag_run): the
-- count of the DAG's live runs and its pause are read after a trigger or a pause of the
-- DAG in flight has committed. Lock order: the schedule's row, then the DAG's.
CREATE OR REPLACE FUNCTION harvest._lock_schedule_dag(p_schedule harvest.schedules)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_schedule.kind = 'dag' THEN
        PERFORM 1 FROM harvest.dags AS d WHERE d.dag_name = p_schedule.workflow_name FOR UPDATE;
    END IF;
END;
$$;

-- A firing as the API answers it.
CREATE OR REPLACE FUNCTION harvest._firing_json(p_firing harvest.schedule_firings)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'slot_at', p_firing.slot_at, 'origin', p_firing.origin, 'status', p_firing.status,
        'reason', p_firing.reason, 'workflow_id', p_firing.workflow_id, 'execution_id', p_firing.execution_id,
        'recorded_at', p_firing.recorded_at, 'started_at', p_firing.started_at);
$$;

-- The start of a firing's run, as start_workflows' elements spell one (start.sql _start_args):
-- what _start_firing starts, and what a terminate_other slot admits at its gate first.
CREATE OR REPLACE FUNCTION harvest._firing_start(p_schedule harvest.schedules, p_firing harvest.schedule_firings)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'workflow_name', p_schedule.workflow_name, 'input', p_schedule.input,
        'workflow_id', p_firing.workflow_id, 'queue', p_schedule.queue, 'traceparent', p_firing.traceparent);
$$;

-- Start the run of a recorded firing (status started, or failed with the error when
-- the start raised: an unregistered workflow, a quota, ...; the tick goes on). A
-- failure that passes (a deadlock, ...) is raised: the whole tick rolls back.
-- p_admission: the firing's start admitted at its gate already (a terminate_other slot of a
-- gated workflow, _fire_slot: start.sql _start_admission), started as admitted, or its
-- refusal there ({refused: {sqlstate, message}}), recorded as the start's.
CREATE OR REPLACE FUNCTION harvest._start_firing(
    p_schedule harvest.schedules, p_firing_id bigint, p_admission jsonb DEFAULT NULL
)
RETURNS harvest.schedule_firings
LANGUAGE plpgsql
AS $$
DECLARE
    v_firing harvest.schedule_firings;
    v_start record;
    v_now timestamptz := harvest.now();
BEGIN
    SELECT * INTO v_firing FROM harvest.schedule_firings AS f WHERE f.id = p_firing_id;
    -- A paused DAG's slots are skipped, not queued (docs/dags.md "Pausing").
    IF p_schedule.kind = 'dag' AND EXISTS (SELECT 1 FROM harvest.dags AS d
                                           WHERE d.dag_name = p_schedule.workflow_name AND d.paused) THEN
        UPDATE harvest.schedule_firings AS f SET status = 'skipped', reason = 'dag_paused'
        WHERE f.id = p_firing_id
        RETURNING * INTO v_firing;
        RETURN v_firing;
    END IF;
    BEGIN
        IF p_admission IS NULL THEN
            SELECT * INTO v_start FROM harvest.start_workflow(
                p_workflow_name => p_schedule.workflow_name, p_input => p_schedule.input,
                p_workflow_id => v_firing.workflow_id, p_queue => p_schedule.queue,
                p_traceparent => v_firing.traceparent);
        ELSIF p_admission ? 'refused' THEN  -- (refused at its admission: _fire_slot)
            RAISE EXCEPTION USING ERRCODE = p_admission #>> '{refused,sqlstate}',
                MESSAGE = p_admission #>> '{refused,message}';
        ELSE
            SELECT * INTO v_start
            FROM harvest._start_admitted(p_admission, harvest._firing_start(p_schedule, v_firing)) AS s;
        END IF;
        UPDATE harvest.schedule_firings AS f SET
            status = 'started', execution_id = v_start.execution_id, started_at = v_now,
            reason = CASE WHEN v_start.status = 'DEFERRED' THEN 'deferred'
                          WHEN NOT v_start.started_fresh THEN 'already_started' ELSE f.reason END
        WHERE f.id = p_firing_id
        RETURNING * INTO v_firing;
    EXCEPTION WHEN OTHERS THEN
        -- A failure that passes (a deadlock, a serialization failure, a lock wait, the server's
        -- resources or shutdown) is not the start's answer: it rolls the tick back, and the next
        -- tick fires the slot again. Recorded failed, the slot would never start a run.
        IF left(SQLSTATE, 2) IN ('40', '53', '57', '58', 'XX') OR SQLSTATE = '55P03' THEN
            RAISE;
        END IF;
        UPDATE harvest.schedule_firings AS f SET status = 'failed', reason = SQLSTATE || ': ' || SQLERRM
        WHERE f.id = p_firing_id
        RETURNING * INTO v_firing;
    END;
    RETURN v_firing;
END;
$$;

-- The most firings one schedule keeps waiting (buffered). A schedule whose runs do not
-- end (a stuck run under buffer_all, a long catch-up) would otherwise add a row each
-- slot without end; past this, a slot that would wait is skipped (buffer_full), and a
-- backfill that would pass it is refused before it fires anything. Equal to the most
-- slots one backfill takes, so a backfill into an empty buffer always fits.
CREATE OR REPLACE FUNCTION harvest._max_buffered_firings()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 10000 $$;

-- How many firings of a schedule wait (buffered), counting at most the limit.
CREATE OR REPLACE FUNCTION harvest._buffered_firings(p_schedule_id bigint, p_except bigint DEFAULT NULL)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT count(*)::integer FROM (
        SELECT 1 FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule_id AND f.status = 'buffered' AND f.id IS DISTINCT FROM p_except
        LIMIT harvest._max_buffered_firings()
    ) AS waiting;
$$;

-- Start the buffered firings of a locked schedule, oldest slot first, while it has
-- fewer live runs than max_active_runs (p_except: a firing being decided now).
CREATE OR REPLACE FUNCTION harvest._start_buffered(p_schedule harvest.schedules, p_except bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_free integer;
    v_id bigint;
    v_started integer := 0;
BEGIN
    -- A paused schedule's buffered slots wait for its resume (docs/schedules.md), whoever asks:
    -- a trigger or a backfill of it fires its own slot, not these.
    IF p_schedule.paused OR NOT EXISTS (
        SELECT 1 FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule.id AND f.status = 'buffered' AND f.id IS DISTINCT FROM p_except) THEN
        RETURN 0;
    END IF;
    PERFORM harvest._lock_schedule_dag(p_schedule);
    v_free := p_schedule.max_active_runs - harvest._schedule_active_runs(p_schedule);
    WHILE v_free > 0 LOOP
        SELECT f.id INTO v_id FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule.id AND f.status = 'buffered' AND f.id IS DISTINCT FROM p_except
        ORDER BY f.slot_at LIMIT 1;
        EXIT WHEN NOT FOUND;
        IF (harvest._start_firing(p_schedule, v_id)).status = 'started' THEN
            v_free := v_free - 1;
        END IF;
        v_started := v_started + 1;
    END LOOP;
    RETURN v_started;
END;
$$;

-- Fire one slot of a locked schedule under an overlap policy: record the firing
-- (a slot already recorded is answered as status duplicate and nothing happens),
-- start older buffered firings first, then start, skip or buffer this one.
-- p_traceparent: the firing's span (its run continues it, whenever it starts).
-- p_room_checked: the caller made sure every slot it fires fits under the waiting limit
-- (a backfill's check), so no slot counts the waiting ones again.
CREATE OR REPLACE FUNCTION harvest._fire_slot(
    p_schedule harvest.schedules, p_slot timestamptz, p_origin text, p_overlap text,
    p_traceparent text DEFAULT NULL, p_room_checked boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_id bigint;
    v_firing harvest.schedule_firings;
    v_now timestamptz := harvest.now();
    v_runs uuid[];
    v_locked uuid[];  -- v_runs and the runs the slot's start supersedes
    v_going jsonb;  -- a terminate_other slot's start, as it will start (JSON null: none, deferred)
    v_admission jsonb;  -- its admission at its gate (a gated workflow's)
    v_run_id uuid;
    v_waiting boolean;
BEGIN
    PERFORM harvest._lock_schedule_dag(p_schedule);
    INSERT INTO harvest.schedule_firings AS f (
        schedule_id, slot_at, origin, status, workflow_id, recorded_at, traceparent
    )
    VALUES (p_schedule.id, p_slot, p_origin, 'buffered',
            'sched:' || p_schedule.name || ':' || floor(extract(EPOCH FROM p_slot))::bigint, v_now,
            p_traceparent)
    ON CONFLICT (schedule_id, slot_at) DO NOTHING
    RETURNING f.id INTO v_id;
    IF v_id IS NULL THEN
        SELECT * INTO v_firing FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule.id AND f.slot_at = p_slot;
        RETURN harvest._firing_json(v_firing) || jsonb_build_object('duplicate', true);
    END IF;
    -- A paused DAG's slot is skipped before any overlap rule: it starts nothing, so it must not
    -- end the runs in flight (cancel_other, terminate_other), and its reason is the pause, not
    -- max_active_runs (docs/dags.md "Pausing"). (_start_firing checks it too, for buffered ones.)
    IF p_schedule.kind = 'dag' AND EXISTS (SELECT 1 FROM harvest.dags AS d
                                           WHERE d.dag_name = p_schedule.workflow_name AND d.paused) THEN
        UPDATE harvest.schedule_firings AS f SET status = 'skipped', reason = 'dag_paused'
        WHERE f.id = v_id RETURNING * INTO v_firing;
        RETURN harvest._firing_json(v_firing);
    END IF;
    IF p_overlap = 'allow_all' THEN  -- no limit: nothing to count (buffered ones: start_buffered_firings)
        RETURN harvest._firing_json(harvest._start_firing(p_schedule, v_id));
    END IF;
    PERFORM harvest._start_buffered(p_schedule, v_id);
    v_waiting := EXISTS (SELECT 1 FROM harvest.schedule_firings AS f
                         WHERE f.schedule_id = p_schedule.id AND f.status = 'buffered' AND f.id <> v_id);
    IF harvest._schedule_active_runs(p_schedule) < p_schedule.max_active_runs THEN
        v_firing := harvest._start_firing(p_schedule, v_id);
    ELSIF p_overlap = 'skip' THEN
        UPDATE harvest.schedule_firings AS f SET status = 'skipped', reason = 'max_active_runs'
        WHERE f.id = v_id RETURNING * INTO v_firing;
    ELSIF (p_overlap = 'buffer_one' AND v_waiting)
          OR (p_overlap = 'buffer_all' AND v_waiting
              AND NOT p_room_checked
              AND harvest._buffered_firings(p_schedule.id, v_id) >= harvest._max_buffered_firings()) THEN
        UPDATE harvest.schedule_firings AS f SET status = 'skipped', reason = 'buffer_full'
        WHERE f.id = v_id RETURNING * INTO v_firing;
    ELSIF p_overlap IN ('buffer_one', 'buffer_all') THEN
        SELECT * INTO v_firing FROM harvest.schedule_firings AS f WHERE f.id = v_id;
    ELSE
        -- cancel_other / terminate_other: the newest slot wins; older waiting ones give way.
        UPDATE harvest.schedule_firings AS f SET status = 'skipped', reason = 'superseded'
        WHERE f.schedule_id = p_schedule.id AND f.status = 'buffered' AND f.id <> v_id;
        -- A terminate_other slot starts its run after it ends the live ones, whose closes
        -- release their mutexes: so first, in the start's order, its gate (a gated workflow's:
        -- the start is admitted there, _start_admission), its lock and flow keys (a quota key,
        -- a cancel_running key) (docs/internals.md, "Lock order", 1 to 3). Taken by the start,
        -- after the runs' rows and keys, the key waited in a cycle (40P01) with a start of the
        -- key superseding those runs, and so did the gate, with such a start holding it
        -- (tests/integration/test_mutex_flow_key_order.py). A start its gate defers locks none.
        IF p_overlap = 'terminate_other' THEN
            SELECT harvest._firing_start(p_schedule, f) INTO v_going
            FROM harvest.schedule_firings AS f WHERE f.id = v_id;
            IF harvest._start_gated(p_schedule.workflow_name) THEN
                BEGIN
                    v_admission := harvest._start_admission(v_going);
                    v_going := v_admission -> 'start';
                EXCEPTION WHEN OTHERS THEN
                    -- (As _start_firing: a start's own refusal is the firing's, which _start_firing
                    -- records failed after the runs end, as it did when it started it.)
                    IF left(SQLSTATE, 2) IN ('40', '53', '57', '58', 'XX') OR SQLSTATE = '55P03' THEN
                        RAISE;
                    END IF;
                    v_admission := jsonb_build_object('refused', jsonb_build_object(
                        'sqlstate', SQLSTATE, 'message', SQLERRM));
                    v_going := 'null';
                END;
            END IF;
            IF jsonb_typeof(v_going) = 'object' THEN
                PERFORM harvest._lock_start_key(v_going ->> 'workflow_name', v_going ->> 'workflow_id');
                PERFORM harvest._lock_flow_keys_of(jsonb_build_array(v_going || '{"quota": true}'));
            END IF;
        END IF;
        -- The live runs _schedule_active_runs counts: a DAG's schedule, every live run of the DAG.
        -- All locked first, in id order (docs/internals.md, "Lock order"), then ended oldest
        -- first: ended one by one in created_at order, which is not id order, the firing held
        -- one run while it waited on the next, and a group commit of their decisions, locking
        -- them in id order, held that one and waited on the first (40P01;
        -- tests/integration/test_row_lock_order.py).
        v_runs := ARRAY(
            SELECT r.id FROM (
                SELECT e.id, e.created_at FROM harvest.executions AS e
                WHERE p_schedule.kind = 'dag'
                  AND e.workflow_name = p_schedule.workflow_name AND e.status IN ('RUNNING', 'PAUSED')
                UNION
                SELECT e.id, e.created_at
                FROM harvest.schedule_firings AS f
                INNER JOIN harvest.executions AS e
                    ON e.workflow_id = f.workflow_id
                    AND e.workflow_name = ANY (harvest._firing_workflow_names(p_schedule, f))
                WHERE p_schedule.kind <> 'dag' AND f.schedule_id = p_schedule.id AND f.status = 'started'
                  AND e.status IN ('RUNNING', 'PAUSED')
            ) AS r
            ORDER BY r.created_at
        );
        v_locked := v_runs;
        IF jsonb_typeof(v_going) = 'object' THEN
            -- With them the runs the slot's start supersedes (a cancel_running key, read under
            -- the key's lock, taken above) and the prior it replaces (a filled batch's run under
            -- terminate_if_running): locked by its _supersede after these rows and their
            -- mutex keys, the firing met a group commit of those runs' decisions (rows in id
            -- order, then mutex keys) in a cycle (40P01; tests/integration/
            -- test_mutex_flow_key_order.py).
            v_locked := v_runs || harvest._superseded_runs(jsonb_build_array(v_going))
                || harvest._replaced_runs(jsonb_build_array(v_going));
        END IF;
        PERFORM 1 FROM harvest.executions AS e
        WHERE e.id = ANY (v_locked) AND e.status IN ('RUNNING', 'PAUSED')
        ORDER BY e.id FOR UPDATE;
        IF p_overlap = 'terminate_other' THEN  -- (then the mutex keys their ends release, in key order)
            PERFORM harvest._lock_mutex_keys(v_locked);
        END IF;
        FOREACH v_run_id IN ARRAY v_runs LOOP
            -- (One that ended while this waited for it is passed.)
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM harvest.executions AS e
                                      WHERE e.id = v_run_id AND e.status IN ('RUNNING', 'PAUSED'));
            IF p_overlap = 'cancel_other' THEN
                PERFORM harvest.cancel_workflow(v_run_id, 'schedule ' || p_schedule.name || ': a newer slot ('
                    || harvest._iso_time(p_slot) || ') cancels it (overlap cancel_other)');
            ELSE
                PERFORM harvest.terminate_workflow(v_run_id, 'schedule ' || p_schedule.name || ': a newer slot ('
                    || harvest._iso_time(p_slot) || ') terminates it (overlap terminate_other)');
            END IF;
        END LOOP;
        IF p_overlap = 'terminate_other' THEN
            v_firing := harvest._start_firing(p_schedule, v_id, v_admission);
        ELSE
            SELECT * INTO v_firing FROM harvest.schedule_firings AS f WHERE f.id = v_id;
        END IF;
    END IF;
    RETURN harvest._firing_json(v_firing);
END;
$$;

-- Keep the newest 1000 firings and misses of a schedule (and every buffered firing
-- and every firing whose run is still live or deferred, which the overlap count reads).
CREATE OR REPLACE FUNCTION harvest._prune_schedule_history(p_schedule harvest.schedules)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_keep_from timestamptz;
    v_miss_from bigint;
BEGIN
    SELECT f.slot_at INTO v_keep_from FROM harvest.schedule_firings AS f
    WHERE f.schedule_id = p_schedule.id ORDER BY f.slot_at DESC OFFSET 999 LIMIT 1;
    IF v_keep_from IS NOT NULL THEN
        DELETE FROM harvest.schedule_firings AS f
        WHERE f.schedule_id = p_schedule.id AND f.slot_at < v_keep_from AND f.status <> 'buffered'
          AND NOT harvest._firing_live(p_schedule, f);
    END IF;
    SELECT m.id INTO v_miss_from FROM harvest.schedule_misses AS m
    WHERE m.schedule_id = p_schedule.id ORDER BY m.id DESC OFFSET 999 LIMIT 1;
    IF v_miss_from IS NOT NULL THEN
        DELETE FROM harvest.schedule_misses AS m WHERE m.schedule_id = p_schedule.id AND m.id < v_miss_from;
    END IF;
END;
$$;

-- ---------------------------------------------------------------------------------
-- The operator's API

-- A schedule whose overlap is terminate_other terminates the live runs it counts when a slot
-- fires (a DAG's schedule: every live run of the DAG), so making, changing or firing one by
-- hand needs harvest_admin, as terminate_workflow and a start with a terminating policy do
-- (start.sql _start_check_admin): whether or not a run is live at the moment (42501), checked
-- before anything is written. The scheduler's own firings (fire_schedule, a worker's) are
-- exempt: the policy was checked when it was set, or declared by the application's code.
CREATE OR REPLACE FUNCTION harvest._schedule_check_admin(p_overlap text, p_schedule text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_overlap = 'terminate_other' AND NOT harvest._session_has_role('harvest_admin') THEN
        RAISE EXCEPTION 'schedule %: overlap "terminate_other" can terminate running executions, which needs the '
            'harvest_admin role; % does not have it', p_schedule, harvest._session_caller()
            USING ERRCODE = '42501',
            HINT = 'use overlap cancel_other (asks the runs to cancel) or another, or ask a harvest_admin';
    END IF;
END;
$$;


-- Refuse a schedule whose every firing would fail, where the database knows it (HR010): a
-- workflow schedule whose workflow no worker registered on its queue while that queue's workers
-- registered others (as a start's check, start.sql _start_check_registered; a queue no worker
-- registered anything on cannot be checked, and passes), a DAG schedule whose DAG no worker
-- registered. create_schedule and update_schedule call it unless p_allow_unregistered (a
-- schedule made before the deploy that brings its workflow); a worker's boot declares its own
-- App's schedules and is not checked.
CREATE OR REPLACE FUNCTION harvest._check_schedule_target(p_schedule harvest.schedules)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_dags text[];
    v_hint text := 'pass p_allow_unregistered => true to keep the schedule anyway (it fires once a worker registers it)';
BEGIN
    IF p_schedule.kind = 'dag' THEN
        IF NOT EXISTS (SELECT 1 FROM harvest.dags AS d WHERE d.dag_name = p_schedule.workflow_name) THEN
            SELECT array_agg(d.dag_name ORDER BY d.dag_name) INTO v_dags FROM harvest.dags AS d;
            RAISE EXCEPTION 'schedule %: kind dag names "%", which no worker registered as a DAG (registered DAGs: %)',
                p_schedule.name, p_schedule.workflow_name,
                coalesce(array_to_string(v_dags[1:20], ', ') || CASE WHEN cardinality(v_dags) > 20
                    THEN ', ... ' || cardinality(v_dags) - 20 || ' more' ELSE '' END, 'none')
                USING ERRCODE = 'HR010',
                DETAIL = jsonb_build_object('workflow_name', p_schedule.workflow_name, 'queue', NULL,
                                            'registered', to_jsonb(v_dags))::text,
                HINT = 'check the name (a DAG''s name; kind workflow starts a workflow), start a worker whose '
                       'App declares the DAG, or ' || v_hint;
        END IF;
    ELSIF (SELECT r FROM harvest._workflow_registered(p_schedule.workflow_name, p_schedule.queue) AS r) IS FALSE THEN
        PERFORM harvest._refuse_unregistered(p_schedule.workflow_name, p_schedule.queue,
            'schedule ' || p_schedule.name,
            'check the name and the queue, start a worker whose App registers the workflow, or ' || v_hint);
    END IF;
END;
$$;

-- Create a schedule (HR014 when the name is taken; HR010 when its workflow or DAG is not
-- registered, _check_schedule_target, unless p_allow_unregistered). The scheduler computes its
-- first slot: the first one after now.
CREATE OR REPLACE FUNCTION harvest.create_schedule(
    p_name text,
    p_workflow_name text,
    p_cron text DEFAULT NULL,
    p_interval_secs bigint DEFAULT NULL,
    p_timezone text DEFAULT 'UTC',
    p_input jsonb DEFAULT '[]'::jsonb,
    p_queue text DEFAULT NULL,  -- NULL: the workflow's registered queue (_check_schedule_spec)
    p_max_active_runs integer DEFAULT 1,
    p_overlap text DEFAULT 'skip',
    p_catchup boolean DEFAULT false,
    p_catchup_window_secs bigint DEFAULT NULL,
    p_jitter_secs double precision DEFAULT 0,
    p_kind text DEFAULT 'workflow',
    p_paused boolean DEFAULT false,
    p_operator_id text DEFAULT NULL,
    p_allow_unregistered boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_put record;
BEGIN
    PERFORM harvest._schedule_check_admin(p_overlap, p_name);
    v_put := harvest._put_schedule(jsonb_strip_nulls(jsonb_build_object(
        'name', p_name, 'workflow_name', p_workflow_name, 'cron', p_cron, 'interval_secs', p_interval_secs,
        'timezone', p_timezone, 'input', p_input, 'queue', p_queue, 'max_active_runs', p_max_active_runs,
        'overlap', p_overlap, 'catchup', p_catchup, 'catchup_window_secs', p_catchup_window_secs,
        'jitter_secs', p_jitter_secs::numeric, 'kind', p_kind, 'paused', p_paused)), false, true);
    -- (after the spec's checks and the queue it resolved; a refusal rolls the insert back)
    IF NOT coalesce(p_allow_unregistered, false) THEN
        PERFORM harvest._check_schedule_target(v_put.schedule);
    END IF;
    PERFORM harvest._audit('schedule.create', p_name, p_operator_id,
        harvest._schedule_audit(harvest._schedule_spec(v_put.schedule)));
    RETURN harvest._schedule_json(v_put.schedule);
END;
$$;

-- Change some fields of a schedule: p_changes is a JSON object of create_schedule's
-- fields without p_ (HR001 for an unknown one, HR002 for an unknown schedule). A
-- change of cron, interval, zone or jitter computes the next slot again from now;
-- a paused schedule stays paused. A change of its workflow, queue or kind is checked
-- as a create is (HR010, unless p_allow_unregistered).
CREATE OR REPLACE FUNCTION harvest.update_schedule(
    p_name text, p_changes jsonb, p_operator_id text DEFAULT NULL, p_allow_unregistered boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_old harvest.schedules;
    v_put record;
    v_changes jsonb := coalesce(p_changes, '{}'::jsonb);
BEGIN
    IF jsonb_typeof(v_changes) <> 'object' OR v_changes ? 'name' OR v_changes ? 'paused' THEN
        RAISE EXCEPTION 'schedule changes must be a JSON object of fields other than name and paused'
            USING ERRCODE = 'HR001', HINT = 'pause and resume with pause_schedule and resume_schedule';
    END IF;
    v_old := harvest._lock_schedule(p_name);
    -- A schedule that terminates after the change is an admin's to change (its kind, name or
    -- workflow decide which runs it ends), one that does not stays the operator's.
    PERFORM harvest._schedule_check_admin(
        CASE WHEN v_changes ? 'overlap' THEN v_changes ->> 'overlap' ELSE v_old.overlap END, p_name);
    -- Switching between cron and interval: the other one goes.
    IF v_changes ? 'cron' AND v_changes -> 'cron' <> 'null'::jsonb THEN
        v_changes := v_changes || '{"interval_secs": null}';
    ELSIF v_changes ? 'interval_secs' AND v_changes -> 'interval_secs' <> 'null'::jsonb THEN
        v_changes := v_changes || '{"cron": null}';
    END IF;
    -- Turning catch-up on or off without a window takes that mode's default window.
    IF v_changes ? 'catchup' AND NOT v_changes ? 'catchup_window_secs' THEN
        v_changes := v_changes || '{"catchup_window_secs": null}';
    END IF;
    v_put := harvest._put_schedule(
        jsonb_strip_nulls(harvest._schedule_spec(v_old) || v_changes), v_old.declared, false);
    IF NOT coalesce(p_allow_unregistered, false)
       AND (v_changes ? 'workflow_name' OR v_changes ? 'queue' OR v_changes ? 'kind') THEN
        PERFORM harvest._check_schedule_target(v_put.schedule);
    END IF;
    PERFORM harvest._audit('schedule.update', p_name, p_operator_id,
        jsonb_build_object('changes', harvest._schedule_audit(p_changes)));
    RETURN harvest._schedule_json(v_put.schedule);
END;
$$;

-- Delete a schedule and its firing history (its runs are not touched). A declared
-- schedule comes back at the next worker boot. Returns false when there was none.
CREATE OR REPLACE FUNCTION harvest.delete_schedule(p_name text, p_operator_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_deleted boolean;
BEGIN
    DELETE FROM harvest.schedules AS s WHERE s.name = p_name;
    v_deleted := FOUND;
    PERFORM harvest._audit('schedule.delete', p_name, p_operator_id, jsonb_build_object('deleted', v_deleted));
    RETURN v_deleted;
END;
$$;

-- Pause a schedule: no slot fires while it is paused and none is counted missed.
-- A worker's boot (declare_schedules) keeps a runtime pause.
CREATE OR REPLACE FUNCTION harvest.pause_schedule(
    p_name text, p_note text DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules := harvest._lock_schedule(p_name);
BEGIN
    UPDATE harvest.schedules AS s SET paused = true, paused_note = p_note, revision = s.revision + 1,
        updated_at = harvest.now()
    WHERE s.id = v_schedule.id RETURNING * INTO v_schedule;
    PERFORM harvest._audit('schedule.pause', p_name, p_operator_id, jsonb_build_object('note', p_note));
    RETURN harvest._schedule_json(v_schedule);
END;
$$;

-- Resume a paused schedule: the slots it skipped while paused are neither fired
-- nor missed; the next one is the first after now. Resuming a running schedule
-- changes nothing.
CREATE OR REPLACE FUNCTION harvest.resume_schedule(p_name text, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules := harvest._lock_schedule(p_name);
BEGIN
    IF v_schedule.paused THEN
        UPDATE harvest.schedules AS s SET paused = false, paused_note = NULL, anchor_at = harvest.now(),
            next_fire_at = NULL, next_due_at = NULL, revision = s.revision + 1, updated_at = harvest.now()
        WHERE s.id = v_schedule.id RETURNING * INTO v_schedule;
    END IF;
    PERFORM harvest._audit('schedule.resume', p_name, p_operator_id, '{}'::jsonb);
    RETURN harvest._schedule_json(v_schedule);
END;
$$;

-- Fire a schedule now (a paused one too): the slot is the current second, under
-- the schedule's overlap policy or p_overlap. A second that already has a firing
-- answers that firing (duplicate true).
CREATE OR REPLACE FUNCTION harvest.trigger_schedule(
    p_name text, p_overlap text DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules := harvest._lock_schedule(p_name);
    v_overlap text := coalesce(p_overlap, v_schedule.overlap);
    v_firing jsonb;
BEGIN
    IF v_overlap NOT IN ('skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all') THEN
        RAISE EXCEPTION 'overlap % is unknown', quote_literal(v_overlap) USING ERRCODE = 'HR001',
            HINT = 'use skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all';
    END IF;
    PERFORM harvest._schedule_check_admin(v_overlap, p_name);
    v_firing := harvest._fire_slot(v_schedule, date_trunc('second', harvest.now()), 'trigger', v_overlap);
    PERFORM harvest._audit('schedule.trigger', p_name, p_operator_id,
        jsonb_build_object('overlap', v_overlap, 'slot_at', v_firing -> 'slot_at'));
    RETURN v_firing;
END;
$$;

-- Fire past slots on request (the caller computes them from the schedule's cron,
-- harvest schedule backfill): each slot not already recorded is fired under
-- p_overlap (default buffer_all: they run max_active_runs at a time, oldest
-- first). Slots must be whole seconds, not in the future, at most 10000. Returns
-- the count of each outcome.
CREATE OR REPLACE FUNCTION harvest.backfill_schedule(
    p_name text, p_slots timestamptz[], p_overlap text DEFAULT 'buffer_all', p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules := harvest._lock_schedule(p_name);
    v_slot timestamptz;
    v_firing jsonb;
    v_counts jsonb := '{"started": 0, "buffered": 0, "skipped": 0, "failed": 0, "duplicate": 0}';
    v_failures jsonb := '[]';
    v_key text;
    v_new integer;
    v_waiting integer;
    v_free integer;
BEGIN
    IF coalesce(p_overlap, '') NOT IN (
        'skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all'
    ) THEN
        RAISE EXCEPTION 'overlap % is unknown', coalesce(quote_literal(p_overlap), 'NULL') USING ERRCODE = 'HR001',
            HINT = 'use skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all';
    END IF;
    PERFORM harvest._schedule_check_admin(p_overlap, p_name);
    IF coalesce(cardinality(p_slots), 0) > 10000 THEN
        RAISE EXCEPTION 'a backfill takes at most 10000 slots, got %', cardinality(p_slots)
            USING ERRCODE = 'HR001', HINT = 'backfill a shorter range at a time';
    END IF;
    SELECT u.s INTO v_slot FROM unnest(p_slots) AS u (s)
    WHERE u.s IS NULL OR u.s <> date_trunc('second', u.s) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'backfill slot % is not a whole second', coalesce(harvest._iso_time(v_slot), 'NULL') USING ERRCODE = 'HR001',
            HINT = 'pass the slots of the schedule (harvest schedule backfill computes them)';
    END IF;
    SELECT max(u.s) INTO v_slot FROM unnest(p_slots) AS u (s);
    IF v_slot > harvest.now() THEN
        RAISE EXCEPTION 'backfill slot % is in the future', harvest._iso_time(v_slot) USING ERRCODE = 'HR001',
            HINT = 'a backfill fires past slots: end the range at or before now';
    END IF;
    IF p_overlap = 'buffer_all' THEN
        -- Refused whole rather than cut short: the slots that would not fit are the newest,
        -- and skipping them would leave a gap the operator did not ask for.
        SELECT count(DISTINCT u.s)::integer INTO v_new FROM unnest(p_slots) AS u (s)
        WHERE NOT EXISTS (SELECT 1 FROM harvest.schedule_firings AS f
                          WHERE f.schedule_id = v_schedule.id AND f.slot_at = u.s);
        v_free := greatest(v_schedule.max_active_runs - harvest._schedule_active_runs(v_schedule), 0);
        -- Counted far enough past the limit to decide (a schedule holding more than the limit
        -- from before it is refused too), no further.
        SELECT count(*)::integer INTO v_waiting FROM (
            SELECT 1 FROM harvest.schedule_firings AS f
            WHERE f.schedule_id = v_schedule.id AND f.status = 'buffered'
            LIMIT harvest._max_buffered_firings() + v_free + 1
        ) AS waiting;
        IF v_waiting + v_new - v_free > harvest._max_buffered_firings() THEN
            RAISE EXCEPTION 'backfill of % new slot(s) of schedule % would leave % waiting, over the limit of %',
                v_new, p_name, v_waiting + v_new - v_free, harvest._max_buffered_firings()
                USING ERRCODE = 'HR001',
                HINT = format('%s slot(s) of it are already waiting for a free run: backfill a shorter range, '
                              'or again once they have run, or pass another overlap (skip, allow_all)', v_waiting);
        END IF;
    END IF;
    FOR v_slot IN SELECT DISTINCT u.s FROM unnest(p_slots) AS u (s) ORDER BY 1 LOOP
        v_firing := harvest._fire_slot(v_schedule, v_slot, 'backfill', p_overlap, NULL, p_overlap = 'buffer_all');
        v_key := CASE WHEN v_firing ? 'duplicate' THEN 'duplicate' ELSE v_firing ->> 'status' END;
        v_counts := jsonb_set(v_counts, ARRAY[v_key], to_jsonb((v_counts ->> v_key)::integer + 1));
        IF v_key = 'failed' THEN  -- (why, as its firing recorded it: the caller says it)
            v_failures := v_failures || jsonb_build_array(
                jsonb_build_object('slot_at', v_firing -> 'slot_at', 'reason', v_firing -> 'reason'));
        END IF;
    END LOOP;
    PERFORM harvest._audit('schedule.backfill', p_name, p_operator_id,
        jsonb_build_object('slots', coalesce(cardinality(p_slots), 0), 'overlap', p_overlap) || v_counts);
    RETURN v_counts || CASE WHEN v_failures <> '[]' THEN jsonb_build_object('failures', v_failures)
                            ELSE '{}' END;
END;
$$;

-- ---------------------------------------------------------------------------------
-- Reads

-- The schedules of this database (one kind, or both), by name; workflow_registered
-- says whether a worker registered the workflow on its queue (NULL: none registered
-- anything there), which preflight reads.
CREATE OR REPLACE FUNCTION harvest.list_schedules(
    p_kind text DEFAULT NULL, p_after_name text DEFAULT NULL, p_limit integer DEFAULT NULL,
    p_paused boolean DEFAULT NULL
)
RETURNS TABLE (
    name text, kind text, workflow_name text, cron text, interval_secs bigint, timezone text,
    max_active_runs integer, overlap text, catchup boolean, paused boolean, declared boolean,
    next_fire_at timestamptz, last_slot_at timestamptz, missed_slots bigint, active_runs integer, queue text,
    workflow_registered boolean, anchor_at timestamptz, next_due_at timestamptz, now timestamptz
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001',
            HINT = 'pass NULL for every schedule';
    END IF;
    -- By name down schedules_name_key from the position, at most p_limit (NULL: every one; a
    -- schedule a tenant is 100,000 rows, migration 0100). Planned with the values at each call
    -- (EXECUTE): a cached generic plan of `$2 IS NULL OR s.name > $2` reads every schedule.
    RETURN QUERY EXECUTE $q$
    SELECT s.name, s.kind, s.workflow_name, s.cron, s.interval_secs, s.timezone, s.max_active_runs, s.overlap,
           s.catchup, s.paused, s.declared, s.next_fire_at, s.last_slot_at, s.missed_slots,
           harvest._schedule_active_runs(s), s.queue,
           -- As a start's check: NULL when no worker registered the queue.
           (SELECT r FROM harvest._workflow_registered(s.workflow_name, s.queue) AS r),
           -- What a reader computes the next slot from while the scheduler has not stored one
           -- (harvest.declare.schedules.listed_schedule), and whether a stored one is overdue:
           -- its due time (the slot plus its jitter, when the scheduler fires it) is past.
           s.anchor_at, s.next_due_at, harvest.now()
    FROM harvest.schedules AS s
    WHERE ($1::text IS NULL OR s.kind = lower($1))
      AND ($2::text IS NULL OR s.name > $2)
      AND ($4::boolean IS NULL OR s.paused = $4)
    ORDER BY s.name
    LIMIT $3
    $q$ USING p_kind, p_after_name, p_limit, p_paused;
END;
$$;

-- One schedule with its last p_limit firings (each with its run's current status)
-- and misses, its live and buffered runs (HR002 when it does not exist).
CREATE OR REPLACE FUNCTION harvest.get_schedule(p_name text, p_limit integer DEFAULT 20)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_schedule harvest.schedules;
    v_limit integer := least(greatest(coalesce(p_limit, 20), 1), 1000);
BEGIN
    SELECT * INTO v_schedule FROM harvest.schedules AS s WHERE s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % does not exist', coalesce(quote_literal(p_name), 'NULL') USING ERRCODE = 'HR002',
            HINT = 'harvest schedule list shows the schedules of this database';
    END IF;
    RETURN harvest._schedule_json(v_schedule) || jsonb_build_object(
        'active_runs', harvest._schedule_active_runs(v_schedule),
        'buffered', (SELECT count(*) FROM harvest.schedule_firings AS f
                     WHERE f.schedule_id = v_schedule.id AND f.status = 'buffered'),
        'firings', coalesce((
            SELECT jsonb_agg(x.j ORDER BY x.slot_at DESC) FROM (
                SELECT f.slot_at, harvest._firing_json(f) || jsonb_build_object('run_status', (
                    SELECT e.status FROM harvest.executions AS e
                    WHERE e.workflow_name = ANY (harvest._firing_workflow_names(v_schedule, f))
                      AND e.workflow_id = f.workflow_id
                    ORDER BY e.created_at DESC LIMIT 1)) AS j
                FROM harvest.schedule_firings AS f WHERE f.schedule_id = v_schedule.id
                ORDER BY f.slot_at DESC LIMIT v_limit) AS x), '[]'::jsonb),
        'misses', coalesce((
            SELECT jsonb_agg(x.j ORDER BY x.id DESC) FROM (
                SELECT m.id, jsonb_build_object(
                    'first_slot_at', m.first_slot_at, 'last_slot_at', m.last_slot_at, 'slots', m.slots,
                    'reason', m.reason, 'recorded_at', m.recorded_at) AS j
                FROM harvest.schedule_misses AS m WHERE m.schedule_id = v_schedule.id
                ORDER BY m.id DESC LIMIT v_limit) AS x), '[]'::jsonb));
END;
$$;

-- Missed slots per schedule: since p_since (from the misses kept), or ever (the
-- schedule's counter) when p_since is NULL. The missed-schedules signal of the
-- alert pack.
CREATE OR REPLACE FUNCTION harvest.count_schedule_misses(p_since timestamptz DEFAULT NULL)
RETURNS TABLE (schedule_name text, kind text, missed_slots bigint, last_missed_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT s.name, s.kind,
           CASE WHEN p_since IS NULL THEN s.missed_slots
                ELSE coalesce((SELECT sum(m.slots) FROM harvest.schedule_misses AS m
                               WHERE m.schedule_id = s.id AND m.recorded_at >= p_since), 0)::bigint END,
           (SELECT max(m.recorded_at) FROM harvest.schedule_misses AS m WHERE m.schedule_id = s.id)
    FROM harvest.schedules AS s
    ORDER BY s.name;
$$;

-- ---------------------------------------------------------------------------------
-- The scheduler's API (harvest/worker/scheduler.py)

-- Upsert the schedules an App declares (a worker's boot): a JSON array of specs
-- (create_schedule's fields without p_). An unchanged schedule is left as it is;
-- a changed one is updated; a runtime pause is never undone. A spec that a later
-- change replaced (superseded_specs: a rolling deploy's old worker restarting, whose
-- App still has it) changes nothing and is audited (schedule.declare_superseded):
-- the newer one stays until an operator's update_schedule puts the old one back.
-- Returns {changed: how many changed, kept: [{name, declared, current}] the schedules
-- whose declared spec was refused so}, for the worker to warn of each (a deploy that
-- means to go back to a spec must say so with harvest schedule update).
CREATE OR REPLACE FUNCTION harvest.declare_app_schedules(p_schedules jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_spec jsonb;
    v_checked jsonb;
    v_current harvest.schedules;
    v_changed integer := 0;
    v_kept jsonb := '[]'::jsonb;
BEGIN
    IF jsonb_typeof(p_schedules) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'schedules must be a JSON array of schedule specs' USING ERRCODE = 'HR001';
    END IF;
    FOR v_spec IN SELECT x.value FROM jsonb_array_elements(p_schedules) AS x ORDER BY x.value ->> 'name' LOOP
        v_checked := harvest._check_schedule_spec(v_spec - 'paused');
        SELECT * INTO v_current FROM harvest.schedules AS s WHERE s.name = v_checked ->> 'name' FOR UPDATE;
        IF FOUND AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_current.superseded_specs) AS e
                             WHERE e.value = v_checked) THEN
            PERFORM harvest._audit('schedule.declare_superseded', v_current.name, NULL, jsonb_build_object(
                'spec', harvest._schedule_audit(v_checked), 'kept', harvest._schedule_audit(harvest._schedule_spec(v_current)),
                'reason', 'a later change replaced this spec (an older deploy''s worker declared it); '
                          'harvest schedule update puts it back'));
            v_kept := v_kept || jsonb_build_array(jsonb_build_object(
                'name', v_current.name, 'declared', v_checked, 'current', harvest._schedule_spec(v_current)));
            CONTINUE;
        END IF;
        IF (harvest._put_schedule(v_spec - 'paused', true, false)).changed THEN
            v_changed := v_changed + 1;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('changed', v_changed, 'kept', v_kept);
END;
$$;

-- declare_app_schedules' count of changed schedules: what a worker of an earlier release
-- calls (a rolling deploy keeps it working).
CREATE OR REPLACE FUNCTION harvest.declare_schedules(p_schedules jsonb)
RETURNS integer
LANGUAGE sql
AS $$
    SELECT (harvest.declare_app_schedules(p_schedules) ->> 'changed')::integer;
$$;

-- Delete the declared schedules of p_homes' names here ({name: the shard that is its home
-- now}): a worker whose router homes a schedule of its App on another shard (a reshard moved
-- the home) removes the copy left on the old one, so it does not fire beside the new home's.
-- A schedule an operator created (not declared) is kept; each deletion is audited. Returns
-- how many were deleted.
CREATE OR REPLACE FUNCTION harvest.delete_moved_schedules(p_homes jsonb)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text;
    v_deleted integer := 0;
BEGIN
    IF jsonb_typeof(p_homes) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'homes must be a JSON object of schedule name -> home shard' USING ERRCODE = 'HR001';
    END IF;
    FOR v_name IN
        DELETE FROM harvest.schedules AS s WHERE s.declared AND p_homes ? s.name RETURNING s.name
    LOOP
        v_deleted := v_deleted + 1;
        PERFORM harvest._audit('schedule.delete_moved', v_name, NULL, jsonb_build_object(
            'reason', 'its home is another shard', 'home_shard', p_homes -> v_name));
    END LOOP;
    RETURN v_deleted;
END;
$$;

-- The unpaused schedules whose next slot is due or not computed yet, most overdue
-- first, with what the scheduler needs to compute slots, and the engine's clock.
CREATE OR REPLACE FUNCTION harvest.list_due_schedules(p_limit integer DEFAULT 100)
RETURNS TABLE (
    schedule_id bigint, name text, cron text, interval_secs bigint, timezone text, jitter_secs double precision,
    catchup_window_secs bigint, anchor_at timestamptz, next_fire_at timestamptz, last_slot_at timestamptz,
    revision bigint, now timestamptz
)
LANGUAGE sql STABLE
AS $$
    SELECT s.id, s.name, s.cron, s.interval_secs, s.timezone, s.jitter_secs, s.catchup_window_secs, s.anchor_at,
           s.next_fire_at, s.last_slot_at, s.revision, harvest.now()
    FROM harvest.schedules AS s
    WHERE NOT s.paused AND (s.next_due_at IS NULL OR s.next_due_at <= harvest.now())
    ORDER BY s.next_due_at NULLS FIRST
    LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000);
$$;

-- The tick of one schedule: lock it (SKIP LOCKED: another scheduler has it ->
-- 'busy'), refuse a row no longer at p_revision ('stale': the slots were computed
-- from an older row, or it was paused), then fire each slot of p_slots (ascending,
-- after last_slot_at, not in the future) that is inside the catch-up window,
-- record the older ones and p_missed_* as one miss, and store the next slot. One
-- transaction: a killed tick leaves the row as it was.
CREATE OR REPLACE FUNCTION harvest.fire_schedule(
    p_schedule_id bigint,
    p_revision bigint,
    p_slots timestamptz[],
    p_next_fire_at timestamptz,
    p_next_due_at timestamptz,
    p_missed_first_at timestamptz DEFAULT NULL,
    p_missed_last_at timestamptz DEFAULT NULL,
    p_missed_slots integer DEFAULT 0,
    -- The scheduler's harvest.schedule.fire span (W3C traceparent, HR001 when malformed):
    -- the runs of the slots it fires continue it.
    p_traceparent text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules;
    v_now timestamptz := harvest.now();
    v_cutoff timestamptz;
    v_slot timestamptz;
    v_previous timestamptz;
    v_firings jsonb := '[]'::jsonb;
    v_missed integer := coalesce(p_missed_slots, 0);
    v_missed_first timestamptz := p_missed_first_at;
    v_missed_last timestamptz := p_missed_last_at;
BEGIN
    IF p_next_fire_at IS NULL OR p_next_due_at IS NULL OR p_next_due_at < p_next_fire_at THEN
        RAISE EXCEPTION 'fire_schedule needs the next slot and its due time (due at or after the slot)'
            USING ERRCODE = 'HR001';
    END IF;
    IF v_missed < 0 OR (v_missed > 0) <> (p_missed_first_at IS NOT NULL AND p_missed_last_at IS NOT NULL) THEN
        RAISE EXCEPTION 'fire_schedule: p_missed_slots > 0 goes with the first and last missed slot'
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_traceparent(p_traceparent);
    SELECT * INTO v_schedule FROM harvest.schedules AS s WHERE s.id = p_schedule_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'busy');
    END IF;
    IF v_schedule.revision <> p_revision OR v_schedule.paused THEN
        RETURN jsonb_build_object('outcome', 'stale');
    END IF;
    v_previous := coalesce(p_missed_last_at, v_schedule.last_slot_at);
    IF p_missed_first_at > p_missed_last_at OR p_missed_first_at <= v_schedule.last_slot_at THEN
        RAISE EXCEPTION 'fire_schedule: the missed slots must follow the last slot (%)',
            harvest._iso_time(v_schedule.last_slot_at)
            USING ERRCODE = 'HR001';
    END IF;
    -- A slot's jitter is not lateness: the window counts from its latest due time.
    v_cutoff := v_now - make_interval(secs => v_schedule.catchup_window_secs + v_schedule.jitter_secs);
    FOREACH v_slot IN ARRAY coalesce(p_slots, '{}') LOOP
        IF v_slot IS NULL OR v_slot > v_now OR v_slot <= v_previous THEN
            RAISE EXCEPTION 'fire_schedule: slot % is not after % or is in the future',
                harvest._iso_time(v_slot), harvest._iso_time(v_previous)
                USING ERRCODE = 'HR001', HINT = 'pass ascending slots after the last one, none after now';
        END IF;
        v_previous := v_slot;
        IF v_slot < v_cutoff THEN
            v_missed := v_missed + 1;
            v_missed_first := least(v_missed_first, v_slot);
            v_missed_last := greatest(v_missed_last, v_slot);
        ELSE
            v_firings := v_firings || harvest._fire_slot(v_schedule, v_slot, 'schedule', v_schedule.overlap,
                                                          p_traceparent);
        END IF;
    END LOOP;
    IF p_next_fire_at <= v_previous THEN
        RAISE EXCEPTION 'fire_schedule: the next slot % is not after the last one %',
            harvest._iso_time(p_next_fire_at), harvest._iso_time(v_previous)
            USING ERRCODE = 'HR001';
    END IF;
    IF v_missed > 0 THEN
        INSERT INTO harvest.schedule_misses (schedule_id, first_slot_at, last_slot_at, slots, reason, recorded_at)
        VALUES (v_schedule.id, v_missed_first, v_missed_last, v_missed,
                CASE WHEN v_schedule.catchup THEN 'outside_catchup_window' ELSE 'catchup_off' END, v_now);
    END IF;
    UPDATE harvest.schedules AS s SET
        next_fire_at = p_next_fire_at, next_due_at = p_next_due_at,
        last_slot_at = coalesce(v_previous, s.last_slot_at), missed_slots = s.missed_slots + v_missed,
        revision = s.revision + 1, updated_at = v_now
    WHERE s.id = v_schedule.id;
    IF v_firings <> '[]'::jsonb OR v_missed > 0 THEN
        PERFORM harvest._prune_schedule_history(v_schedule);
    END IF;
    RETURN jsonb_build_object('outcome', 'fired', 'firings', v_firings, 'missed', v_missed);
END;
$$;

-- Start the buffered firings of schedules that have a free run again (a run ended),
-- oldest slot first; schedules another scheduler holds are skipped. Returns how
-- many firings it started or failed.
CREATE OR REPLACE FUNCTION harvest.start_buffered_firings(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_schedule harvest.schedules;
    v_started integer := 0;
BEGIN
    PERFORM harvest._check_limit('start_buffered_firings', p_limit, 10000);
    FOR v_schedule IN
        SELECT s.* FROM harvest.schedules AS s
        WHERE NOT s.paused AND EXISTS (SELECT 1 FROM harvest.schedule_firings AS f
                                       WHERE f.schedule_id = s.id AND f.status = 'buffered')
        ORDER BY s.id
        LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000)
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        v_started := v_started + harvest._start_buffered(v_schedule);
    END LOOP;
    RETURN v_started;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.create_schedule IS
'Create a schedule (cron in a time zone, or an interval) that starts workflow_name as sched:{name}:{unix_ts}; '
'HR014 when the name is taken, HR001 naming a bad field, HR010 when its workflow (or DAG) is not registered '
'where the database can tell (p_allow_unregistered skips that). Called by the CLI (harvest schedule '
'create-workflow) and psql (role harvest_operator).';
COMMENT ON FUNCTION harvest.update_schedule IS
'Change fields of a schedule (a JSON object); a new cron, interval, zone or jitter computes the next slot again '
'from now, a pause stays. HR002 for an unknown schedule; a new workflow, queue or kind is checked as '
'create_schedule checks it (HR010 unless p_allow_unregistered). Called by the CLI (role harvest_operator).';
COMMENT ON FUNCTION harvest.delete_schedule IS
'Delete a schedule and its firing history (its runs go on); false when there was none. Called by the CLI '
'(role harvest_operator).';
COMMENT ON FUNCTION harvest.pause_schedule IS
'Pause a schedule: nothing fires and nothing is counted missed until resume; a worker boot keeps the pause. '
'Called by the CLI (role harvest_operator).';
COMMENT ON FUNCTION harvest.resume_schedule IS
'Resume a paused schedule from now: the slots skipped while paused neither fire nor count as missed. Called by '
'the CLI (role harvest_operator).';
COMMENT ON FUNCTION harvest.trigger_schedule IS
'Fire a schedule now (slot = the current second) under its overlap policy or p_overlap; a second already fired '
'answers that firing. Called by the CLI (role harvest_operator).';
COMMENT ON FUNCTION harvest.backfill_schedule IS
'Fire past slots the caller computed (at most 10000, whole seconds, not in the future) under p_overlap (default '
'buffer_all); a slot already recorded is not fired again. Answers the counts by outcome and, when some failed, '
'failures: each failed slot''s slot_at and recorded reason. Called by the CLI (role harvest_operator).';
COMMENT ON FUNCTION harvest.list_schedules IS
'The schedules of this database (workflow and dag kinds, paused or not) by name with their next slot, last slot, '
'missed slots, live runs, whether their workflow is registered on its queue, the anchor a next slot not yet '
'stored is computed from, the stored slot''s due time (plus its jitter) and the engine''s now; at most p_limit '
'(1..10000) after p_after_name, NULL: every one. Called by the CLI, preflight and the dashboard (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_schedule IS
'One schedule with its last firings (run ids and run statuses), misses with reasons, live and buffered runs; '
'HR002 when it does not exist. Called by the CLI (role harvest_reader).';
COMMENT ON FUNCTION harvest.count_schedule_misses IS
'Missed slots per schedule, since a time or ever: the missed-schedules signal for metrics and alerts. Called by '
'telemetry and the CLI (role harvest_reader).';
COMMENT ON FUNCTION harvest.declare_app_schedules IS
'Upsert the schedules an App declares at worker boot: unchanged ones stay as they are, a runtime pause is '
'never undone, a spec a later change replaced (superseded_specs: an older deploy''s) changes nothing and is '
'audited as schedule.declare_superseded; returns {changed, kept: [{name, declared, current}]}. Called by the '
'worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.declare_schedules IS
'declare_app_schedules, answering how many changed: what a worker of an earlier release calls. Called by the '
'worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.delete_moved_schedules IS
'Delete the declared schedules of these names here, whose home is now another shard (p_homes: name -> home '
'shard), so a schedule moved by a reshard does not fire on both; operator-created ones are kept; audited as '
'schedule.delete_moved. Called by the worker at boot (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_due_schedules IS
'The unpaused schedules whose next slot is due or not computed yet, with the engine clock, for the scheduler to '
'compute slots from. Called by the scheduler (role harvest_worker).';
COMMENT ON FUNCTION harvest.fire_schedule IS
'The scheduler tick of one schedule in one transaction: lock it (busy when another scheduler has it), check '
'the revision (stale), fire the due slots inside the catch-up window under the overlap policy, record missed '
'ones, store the next slot; (schedule, slot) is unique so nothing fires twice; p_traceparent (the scheduler''s '
'fire span, HR001 when malformed) is kept on each firing and continued by its run. Called by the scheduler (role '
'harvest_worker).';
COMMENT ON FUNCTION harvest.start_buffered_firings IS
'Start buffered firings of schedules whose live runs fell below max_active_runs, oldest slot first. Called by '
'the scheduler each tick (role harvest_worker).';
