-- DAGs (sql/dags.sql, docs/dags.md). A DAG run is a workflow run of the DAG's name,
-- whose code (harvest_py/harvest/runtime/dags.py) interprets the graph; these functions
-- keep the declared DAGs and their pause, gate the starts an operator asks for (trigger,
-- retry), and derive each task's state, attempts and timings from the run's history:
--   an activity task: its ActivityScheduled carries options.dag_node = the task's name;
--     its ActivityCompleted / ActivityFailed (failure SkipTask: skipped) has the attempt;
--     a running one's attempt and start are its harvest.tasks row's;
--   a child workflow task: ChildWorkflowStarted with workflow_id '<run id>/<task>' (and
--     '/<attempt>' from the second attempt), then ChildWorkflowCompleted / Failed;
--   a task that did not run: a MarkerRecorded of kind dag_node {task, state[, failure]};
--   a task a retry carried over: the WorkflowStarted input's [1].results.

-- ------------------------------------------------------------------ declaration
-- Upsert the DAGs of a worker's App (an array of {dag_name, queue, tasks, max_active_runs,
-- description, schedule}); a DAG's pause is kept. Returns how many were new.
CREATE OR REPLACE FUNCTION harvest.register_dags(p_dags jsonb)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_new integer;
    v_bad jsonb;
BEGIN
    IF p_dags IS NULL OR jsonb_typeof(p_dags) <> 'array' THEN
        RAISE EXCEPTION 'register_dags needs a JSON array of DAGs, got %', coalesce(jsonb_typeof(p_dags), 'NULL')
            USING ERRCODE = 'HR001';
    END IF;
    SELECT d.value INTO v_bad FROM jsonb_array_elements(p_dags) AS d (value)
    WHERE jsonb_typeof(d.value) <> 'object'
       OR coalesce(btrim(d.value ->> 'dag_name'), '') = '' OR coalesce(btrim(d.value ->> 'queue'), '') = ''
       OR jsonb_typeof(d.value -> 'tasks') IS DISTINCT FROM 'array'
       OR (d.value ? 'max_active_runs' AND jsonb_typeof(d.value -> 'max_active_runs') <> 'null'
           AND (jsonb_typeof(d.value -> 'max_active_runs') <> 'number' OR (d.value ->> 'max_active_runs')::numeric < 1))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'register_dags: % is not a DAG', left(v_bad::text, 200)
            USING ERRCODE = 'HR001',
                  HINT = 'each element is {"dag_name", "queue", "tasks": [...], "max_active_runs": null or >= 1}';
    END IF;
    WITH registered AS (
        INSERT INTO harvest.dags AS d (dag_name, queue, tasks, max_active_runs, description, schedule,
                                       first_registered_at, last_registered_at)
        SELECT x.value ->> 'dag_name', x.value ->> 'queue', x.value -> 'tasks',
               (x.value ->> 'max_active_runs')::integer, x.value ->> 'description', x.value ->> 'schedule',
               v_now, v_now
        FROM jsonb_array_elements(p_dags) AS x (value)
        ORDER BY x.value ->> 'dag_name'  -- one lock order for two workers registering at once
        ON CONFLICT (dag_name) DO UPDATE SET
            queue = excluded.queue, tasks = excluded.tasks, max_active_runs = excluded.max_active_runs,
            description = excluded.description, schedule = excluded.schedule,
            last_registered_at = excluded.last_registered_at
        RETURNING d.xmax = 0 AS fresh  -- inserted, not updated
    )
    SELECT count(*) FILTER (WHERE fresh) INTO v_new FROM registered;
    RETURN v_new;
END;
$$;

-- The DAG row of p_dag_name, or HR002.
CREATE OR REPLACE FUNCTION harvest._dag(p_dag_name text, p_lock boolean DEFAULT false)
RETURNS harvest.dags
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags;
BEGIN
    IF p_lock THEN
        SELECT * INTO v_dag FROM harvest.dags WHERE dag_name = p_dag_name FOR UPDATE;
    ELSE
        SELECT * INTO v_dag FROM harvest.dags WHERE dag_name = p_dag_name;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dag % is not registered', coalesce(p_dag_name, 'NULL')
            USING ERRCODE = 'HR002', HINT = 'a worker whose App has App(dags=[...]) registers its DAGs when it starts';
    END IF;
    RETURN v_dag;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.list_dags()
RETURNS TABLE (
    dag_name text, queue text, paused boolean, max_active_runs integer, tasks integer, running_runs bigint,
    last_run_at timestamptz, last_run_status text, schedule text, description text, paused_at timestamptz,
    paused_by text, last_registered_at timestamptz
)
LANGUAGE sql STABLE
AS $$
    SELECT d.dag_name, d.queue, d.paused, d.max_active_runs, jsonb_array_length(d.tasks),
           (SELECT count(*) FROM harvest.executions AS e
            WHERE e.workflow_name = d.dag_name AND e.status = 'RUNNING'),
           l.created_at, l.status, d.schedule, d.description, d.paused_at, d.paused_by, d.last_registered_at
    FROM harvest.dags AS d
    LEFT JOIN LATERAL (
        SELECT e.created_at, e.status FROM harvest.executions AS e
        WHERE e.workflow_name = d.dag_name ORDER BY e.created_at DESC LIMIT 1
    ) AS l ON true
    ORDER BY d.dag_name;
$$;

-- ------------------------------------------------------------------ controls
CREATE OR REPLACE FUNCTION harvest.pause_dag(p_dag_name text, p_operator_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags := harvest._dag(p_dag_name, true);
BEGIN
    IF v_dag.paused THEN
        RETURN false;
    END IF;
    UPDATE harvest.dags SET paused = true, paused_at = harvest.now(), paused_by = p_operator_id
    WHERE dag_name = p_dag_name;
    PERFORM harvest._audit('dag.pause', p_dag_name, p_operator_id, NULL);
    RETURN true;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.unpause_dag(p_dag_name text, p_operator_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags := harvest._dag(p_dag_name, true);
BEGIN
    IF NOT v_dag.paused THEN
        RETURN false;
    END IF;
    UPDATE harvest.dags SET paused = false, paused_at = NULL, paused_by = NULL WHERE dag_name = p_dag_name;
    PERFORM harvest._audit('dag.unpause', p_dag_name, p_operator_id, NULL);
    RETURN true;
END;
$$;

-- The gate of a trigger and a retry: the DAG row locked (so two starts of one DAG
-- count its runs one after the other), refused when paused (HR017) or at its
-- max_active_runs (HR018).
CREATE OR REPLACE FUNCTION harvest._admit_dag_run(p_dag_name text)
RETURNS harvest.dags
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags := harvest._dag(p_dag_name, true);
    v_running bigint;
BEGIN
    IF v_dag.paused THEN
        RAISE EXCEPTION 'dag % is paused: it starts no run', p_dag_name
            USING ERRCODE = 'HR017', HINT = format('unpause it first: harvest dag unpause %s', p_dag_name);
    END IF;
    IF v_dag.max_active_runs IS NOT NULL THEN
        SELECT count(*) INTO v_running FROM harvest.executions AS e
        WHERE e.workflow_name = p_dag_name AND e.status = 'RUNNING';
        IF v_running >= v_dag.max_active_runs THEN
            RAISE EXCEPTION 'dag % has % running run(s), its max_active_runs', p_dag_name, v_running
                USING ERRCODE = 'HR018',
                      HINT = 'wait for a run to end, or cancel one (harvest dag runs lists them)',
                      DETAIL = jsonb_build_object('dag_name', p_dag_name, 'running', v_running,
                                                  'max_active_runs', v_dag.max_active_runs)::text;
        END IF;
    END IF;
    RETURN v_dag;
END;
$$;

-- Start a run of DAG p_dag_name with conf p_conf (NULL: {}); p_workflow_id NULL mints
-- one, a RUNNING run of the same id is attached to (started_fresh false).
CREATE OR REPLACE FUNCTION harvest.trigger_dag(
    p_dag_name text, p_conf jsonb DEFAULT NULL, p_workflow_id text DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags := harvest._admit_dag_run(p_dag_name);
BEGIN
    RETURN QUERY
    SELECT s.execution_id, s.workflow_id, s.status, s.started_fresh
    FROM harvest.start_workflow(p_dag_name, jsonb_build_array(coalesce(p_conf, '{}'::jsonb)), p_workflow_id,
                                v_dag.queue, p_search_attributes => jsonb_build_object('dag', p_dag_name)) AS s;
END;
$$;

-- ------------------------------------------------------------------ runs
-- The tasks of a DAG run, derived from its history (see the top of this file), in
-- the DAG's declared order, then any task the history names that the DAG no longer
-- declares. Each: {task, kind, target, upstream, trigger_rule, state, attempts,
-- scheduled_at, started_at, finished_at, duration_secs, result, failure,
-- child_execution_id, reused_from}.
CREATE OR REPLACE FUNCTION harvest._dag_tasks(p_execution harvest.executions)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_prefix text := p_execution.id::text || '/';
    v_closed boolean := p_execution.status <> 'RUNNING';
    v_tasks jsonb := '{}'::jsonb;
    v_of_seq jsonb := '{}'::jsonb;
    v_ev record;
    v_task text;
    v_obj jsonb;
    v_value jsonb;
    v_spec jsonb;
    v_out jsonb := '[]'::jsonb;
    v_failure jsonb;
BEGIN
    FOR v_ev IN
        SELECT e.event_type, e.event_data AS d, e.created_at FROM harvest.events AS e
        WHERE e.execution_id = p_execution.id
          AND e.event_type IN ('WorkflowStarted', 'ActivityScheduled', 'ActivityCompleted', 'ActivityFailed',
                               'ChildWorkflowStarted', 'ChildWorkflowCompleted', 'ChildWorkflowFailed',
                               'MarkerRecorded')
        ORDER BY e.event_id
    LOOP
        IF v_ev.event_type = 'WorkflowStarted' THEN
            IF jsonb_typeof(v_ev.d #> '{input,1,results}') = 'object' THEN
                FOR v_task, v_value IN SELECT r.key, r.value FROM jsonb_each(v_ev.d #> '{input,1,results}') AS r LOOP
                    v_tasks := v_tasks || jsonb_build_object(v_task, jsonb_build_object(
                        'state', 'success', 'attempts', 0, 'result', v_value,
                        'reused_from', v_ev.d #> '{input,1,retry_of}'));
                END LOOP;
            END IF;
        ELSIF v_ev.event_type = 'ActivityScheduled' THEN
            v_task := v_ev.d #>> '{options,dag_node}';
            CONTINUE WHEN v_task IS NULL;
            v_of_seq := v_of_seq || jsonb_build_object(v_ev.d ->> 'seq', v_task);
            v_tasks := v_tasks || jsonb_build_object(v_task, jsonb_build_object(
                'state', 'running', 'attempts', 0, 'scheduled_at', v_ev.created_at, 'seq', v_ev.d -> 'seq'));
        ELSIF v_ev.event_type = 'ChildWorkflowStarted' THEN
            CONTINUE WHEN left(v_ev.d ->> 'workflow_id', length(v_prefix)) IS DISTINCT FROM v_prefix;
            v_task := split_part(substr(v_ev.d ->> 'workflow_id', length(v_prefix) + 1), '/', 1);
            v_of_seq := v_of_seq || jsonb_build_object(v_ev.d ->> 'seq', v_task);
            v_obj := coalesce(v_tasks -> v_task, '{}'::jsonb);
            v_tasks := v_tasks || jsonb_build_object(v_task, (v_obj - 'failure' - 'finished_at') || jsonb_build_object(
                'state', 'running', 'attempts', coalesce((v_obj ->> 'attempts')::integer, 0) + 1,
                'scheduled_at', coalesce(v_obj -> 'scheduled_at', to_jsonb(v_ev.created_at)),
                'child_execution_id', v_ev.d -> 'child_execution_id'));
        ELSIF v_ev.event_type = 'MarkerRecorded' THEN
            CONTINUE WHEN v_ev.d ->> 'kind' IS DISTINCT FROM 'dag_node';
            v_tasks := v_tasks || jsonb_build_object(v_ev.d #>> '{value,task}', jsonb_strip_nulls(jsonb_build_object(
                'state', v_ev.d #>> '{value,state}', 'attempts', 0, 'finished_at', v_ev.created_at,
                'failure', v_ev.d #> '{value,failure}', 'reused_from', v_ev.d #> '{value,reused_from}')));
        ELSE  -- an activity's or a child's outcome
            v_task := v_of_seq ->> (v_ev.d ->> 'seq');
            CONTINUE WHEN v_task IS NULL;
            v_obj := v_tasks -> v_task;
            IF v_ev.event_type IN ('ActivityCompleted', 'ChildWorkflowCompleted') THEN
                v_obj := v_obj || jsonb_build_object('state', 'success', 'result', v_ev.d -> 'result');
            ELSE
                v_failure := v_ev.d -> 'failure';
                v_obj := v_obj || jsonb_build_object(
                    'state', CASE WHEN v_failure ->> 'error_type' = 'SkipTask' THEN 'skipped' ELSE 'failed' END,
                    'failure', v_failure);
            END IF;
            IF v_ev.event_type LIKE 'Activity%' THEN
                v_obj := v_obj || jsonb_build_object('attempts', coalesce((v_ev.d ->> 'attempt')::integer, 1));
            END IF;
            v_tasks := v_tasks || jsonb_build_object(v_task, v_obj || jsonb_build_object('finished_at', v_ev.created_at));
        END IF;
    END LOOP;
    -- A running activity task: its attempt so far and when it started, from its task row.
    FOR v_task, v_obj IN SELECT t.key, t.value FROM jsonb_each(v_tasks) AS t
                         WHERE t.value ->> 'state' = 'running' AND t.value ? 'seq' LOOP
        SELECT v_obj || jsonb_build_object('attempts', k.attempt, 'started_at', k.started_at)
        INTO v_obj FROM harvest.tasks AS k
        WHERE k.execution_id = p_execution.id AND k.kind = 'activity' AND k.seq = (v_obj ->> 'seq')::integer;
        v_tasks := v_tasks || jsonb_build_object(v_task, v_obj);
    END LOOP;
    FOR v_spec IN
        SELECT c.value FROM harvest.dags AS g, jsonb_array_elements(g.tasks) WITH ORDINALITY AS c (value, n)
        WHERE g.dag_name = p_execution.workflow_name ORDER BY c.n
    LOOP
        v_task := v_spec ->> 'task';
        v_obj := coalesce(v_tasks -> v_task,
                          jsonb_build_object('state', CASE WHEN v_closed THEN 'not_run' ELSE 'pending' END,
                                             'attempts', 0));
        -- A child whose attempt failed while the run goes on and its retry allows more is
        -- retrying (a workflow failure is always recorded non_retryable: the flag is not read).
        IF NOT v_closed AND v_obj ->> 'state' = 'failed' AND v_spec ->> 'kind' = 'workflow'
           AND (v_obj ->> 'attempts')::integer < coalesce((v_spec #>> '{retry,max_attempts}')::integer, 1) THEN
            v_obj := v_obj || jsonb_build_object('state', 'running');
        END IF;
        v_out := v_out || jsonb_build_array(harvest._dag_task_view(v_spec || v_obj, v_closed));
        v_tasks := v_tasks - v_task;
    END LOOP;
    FOR v_task, v_obj IN SELECT t.key, t.value FROM jsonb_each(v_tasks) AS t ORDER BY t.key LOOP
        v_out := v_out || jsonb_build_array(harvest._dag_task_view(jsonb_build_object('task', v_task) || v_obj, v_closed));
    END LOOP;
    RETURN v_out;
END;
$$;

-- One task of the run view: every key present, a closed run's running task abandoned.
CREATE OR REPLACE FUNCTION harvest._dag_task_view(p_task jsonb, p_closed boolean)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'task', p_task -> 'task', 'kind', p_task -> 'kind', 'target', p_task -> 'target',
        'upstream', coalesce(p_task -> 'upstream', '[]'::jsonb), 'trigger_rule', p_task -> 'trigger_rule',
        'state', CASE WHEN p_closed AND p_task ->> 'state' = 'running' THEN 'abandoned' ELSE p_task ->> 'state' END,
        'attempts', coalesce(p_task -> 'attempts', '0'::jsonb),
        'scheduled_at', p_task -> 'scheduled_at', 'started_at', p_task -> 'started_at',
        'finished_at', p_task -> 'finished_at',
        'duration_secs', CASE WHEN p_task ? 'scheduled_at' AND p_task ? 'finished_at' THEN
            to_jsonb(round(extract(epoch FROM (p_task ->> 'finished_at')::timestamptz
                                              - (p_task ->> 'scheduled_at')::timestamptz), 3)) END,
        'result', p_task -> 'result', 'failure', p_task -> 'failure',
        'child_execution_id', p_task -> 'child_execution_id', 'reused_from', p_task -> 'reused_from');
$$;

-- State -> how many tasks, over a run view's tasks.
CREATE OR REPLACE FUNCTION harvest._dag_counts(p_tasks jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb)
    FROM (SELECT t.value ->> 'state' AS state, count(*) AS n FROM jsonb_array_elements(p_tasks) AS t
          GROUP BY 1 ORDER BY 1) AS s;
$$;

-- The execution of a DAG run, or HR002 (no such run, or a run of a workflow that is no DAG).
CREATE OR REPLACE FUNCTION harvest._dag_execution(p_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_exec harvest.executions;
BEGIN
    SELECT * INTO v_exec FROM harvest.executions WHERE id = p_execution_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dag run % not found', coalesce(p_execution_id::text, 'NULL') USING ERRCODE = 'HR002';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM harvest.dags WHERE dag_name = v_exec.workflow_name) THEN
        RAISE EXCEPTION 'execution % is a run of workflow %, which is not a registered DAG', p_execution_id,
            v_exec.workflow_name USING ERRCODE = 'HR002', HINT = 'harvest dag list shows the DAGs';
    END IF;
    RETURN v_exec;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.get_dag_run(p_execution_id uuid)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_exec harvest.executions := harvest._dag_execution(p_execution_id);
    v_tasks jsonb := harvest._dag_tasks(v_exec);
BEGIN
    RETURN jsonb_build_object(
        'execution_id', v_exec.id, 'dag_name', v_exec.workflow_name, 'workflow_id', v_exec.workflow_id,
        'status', v_exec.status, 'created_at', v_exec.created_at, 'completed_at', v_exec.completed_at,
        'conf', v_exec.input -> 0, 'retry_of', v_exec.input #> '{1,retry_of}',
        'counts', harvest._dag_counts(v_tasks), 'tasks', v_tasks, 'failure', v_exec.failure);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.list_dag_runs(p_dag_name text, p_limit integer DEFAULT 50)
RETURNS TABLE (
    execution_id uuid, workflow_id text, status text, created_at timestamptz, completed_at timestamptz,
    retry_of uuid, counts jsonb
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM harvest._dag(p_dag_name);
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'p_limit % is out of range: 1 to 1000', coalesce(p_limit::text, 'NULL') USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY
    SELECT e.id, e.workflow_id, e.status, e.created_at, e.completed_at, (e.input #>> '{1,retry_of}')::uuid,
           harvest._dag_counts(harvest._dag_tasks(e))
    FROM harvest.executions AS e
    WHERE e.workflow_name = p_dag_name
    ORDER BY e.created_at DESC, e.id
    LIMIT p_limit;
END;
$$;

-- Retry a failed (cancelled, terminated, timed-out) DAG run from its failed tasks: a
-- new run of the same workflow_id whose input carries the old run's conf, the
-- results of its successful tasks, which it does not run again, and its skipped
-- tasks (kept skipped when all they wait for is carried over, runtime/dags.py). Idempotent: when a
-- newer run of that workflow_id exists and is RUNNING or COMPLETED, it is returned
-- (started_fresh false); a newer failed one is refused (retry that one).
CREATE OR REPLACE FUNCTION harvest.retry_dag_run(p_execution_id uuid, p_operator_id text DEFAULT NULL)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_exec harvest.executions := harvest._dag_execution(p_execution_id);
    v_newer harvest.executions;
    v_dag harvest.dags;
    v_tasks jsonb;
    v_results jsonb;
    v_skipped jsonb;
    v_started record;
BEGIN
    IF v_exec.status NOT IN ('FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT') THEN
        RAISE EXCEPTION 'dag run % is %: only a FAILED, CANCELLED, TERMINATED or TIMED_OUT run is retried',
            p_execution_id, v_exec.status USING ERRCODE = 'HR019';
    END IF;
    SELECT * INTO v_newer FROM harvest.executions AS e
    WHERE e.workflow_name = v_exec.workflow_name AND e.workflow_id = v_exec.workflow_id
      AND e.created_at > v_exec.created_at
    ORDER BY e.created_at DESC LIMIT 1;
    IF FOUND THEN
        IF v_newer.status IN ('RUNNING', 'COMPLETED') THEN
            RETURN QUERY SELECT v_newer.id, v_newer.workflow_id, v_newer.status, false;
            RETURN;
        END IF;
        RAISE EXCEPTION 'dag run % was already retried by run %, which is %', p_execution_id, v_newer.id,
            v_newer.status USING ERRCODE = 'HR019', HINT = format('retry the newest run: harvest dag retry %s', v_newer.id);
    END IF;
    v_dag := harvest._admit_dag_run(v_exec.workflow_name);
    v_tasks := harvest._dag_tasks(v_exec);
    SELECT coalesce(jsonb_object_agg(t.value ->> 'task', t.value -> 'result'), '{}'::jsonb) INTO v_results
    FROM jsonb_array_elements(v_tasks) AS t
    WHERE t.value ->> 'state' = 'success';
    SELECT coalesce(jsonb_agg(t.value -> 'task'), '[]'::jsonb) INTO v_skipped
    FROM jsonb_array_elements(v_tasks) AS t
    WHERE t.value ->> 'state' = 'skipped';
    SELECT * INTO v_started
    FROM harvest.start_workflow(
        v_exec.workflow_name,
        jsonb_build_array(coalesce(v_exec.input -> 0, '{}'::jsonb),
                          jsonb_build_object('retry_of', v_exec.id, 'results', v_results, 'skipped', v_skipped)),
        v_exec.workflow_id, v_dag.queue, 'allow_duplicate_failed_only',
        p_search_attributes => v_exec.search_attributes || jsonb_build_object('dag_retry_of', v_exec.id)) AS s;
    PERFORM harvest._audit('dag.retry', v_exec.workflow_name, p_operator_id, jsonb_build_object(
        'execution_id', v_exec.id, 'new_execution_id', v_started.execution_id, 'reused', (SELECT coalesce(jsonb_agg(k ORDER BY k), '[]'::jsonb) FROM jsonb_object_keys(v_results) AS k)));
    RETURN QUERY SELECT v_started.execution_id, v_started.workflow_id, v_started.status, v_started.started_fresh;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.register_dags IS
'Upsert the DAGs of a worker''s App (JSON array of {dag_name, queue, tasks, max_active_runs, description, schedule}; '
'HR001 on a malformed element), keeping each DAG''s pause; returns how many were new. Called by the Python worker at '
'start (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_dags IS
'The registered DAGs with their pause, max_active_runs, task count, running runs and last run. For operators (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.pause_dag IS
'Pause a DAG: triggers and retries are refused (HR017) until it is unpaused; returns whether it changed; HR002 for an '
'unknown DAG; audited. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.unpause_dag IS
'Unpause a DAG; returns whether it changed; HR002 for an unknown DAG; audited. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.trigger_dag IS
'Start a run of a DAG with a conf (its workflow run, input [conf]); refused when the DAG is paused (HR017) or has '
'max_active_runs RUNNING runs (HR018), HR002 when not registered. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.get_dag_run IS
'One DAG run with each task''s state, attempts, timings, result and failure, derived from the run''s history; HR002 '
'when the run is missing or not a DAG''s. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.list_dag_runs IS
'The runs of one DAG, newest first, with their task counts per state (HR002 unknown DAG, HR001 limit out of 1..1000). '
'For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.retry_dag_run IS
'Retry a FAILED, CANCELLED, TERMINATED or TIMED_OUT DAG run from its failed tasks: a new run of the same workflow_id '
'carrying the successful tasks'' results (not run again); a newer RUNNING or COMPLETED run is returned instead, '
'HR019 for a run that cannot be retried, HR017/HR018 as a trigger; audited. For operators (role harvest_operator).';
