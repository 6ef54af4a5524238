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
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'register_dags: % is not a DAG', left(v_bad::text, 200)
            USING ERRCODE = 'HR001',
                  HINT = 'each element is {"dag_name", "queue", "tasks": [...], "max_active_runs": null or >= 1}';
    END IF;
    -- The numbers a run reads later, by the one rule for a JSON field (core.sql, _json_integer):
    -- a DAG's max_active_runs, and each task's retry.max_attempts (get_dag_run's retrying state).
    PERFORM harvest._json_integer(d.value -> 'max_active_runs', 'max_active_runs', 1,
                                  p_where => 'DAG ' || (d.value ->> 'dag_name'))
    FROM jsonb_array_elements(p_dags) AS d (value);
    PERFORM harvest._json_integer(t.value #> '{retry,max_attempts}', 'retry.max_attempts', 0,
                                  p_where => format('DAG %s task %s', d.value ->> 'dag_name', t.value ->> 'task'))
    FROM jsonb_array_elements(p_dags) AS d (value), jsonb_array_elements(d.value -> 'tasks') AS t (value)
    WHERE jsonb_typeof(t.value -> 'retry') = 'object';
    WITH registered AS (
        INSERT INTO harvest.dags AS d (dag_name, queue, tasks, max_active_runs, description, schedule,
                                       first_registered_at, last_registered_at)
        SELECT x.value ->> 'dag_name', x.value ->> 'queue', x.value -> 'tasks',
               harvest._json_integer(x.value -> 'max_active_runs', 'max_active_runs'), x.value ->> 'description',
               x.value ->> 'schedule',
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
            WHERE e.workflow_name = d.dag_name AND e.status IN ('RUNNING', 'PAUSED')),
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
        WHERE e.workflow_name = p_dag_name AND e.status IN ('RUNNING', 'PAUSED');
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
    p_dag_name text, p_conf jsonb DEFAULT NULL, p_workflow_id text DEFAULT NULL, p_operator_id text DEFAULT NULL,
    -- The caller's span (W3C traceparent, HR001 when malformed): the run continues it.
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_dag harvest.dags;
    v_existing harvest.executions;
BEGIN
    -- A trigger retried with its workflow_id gets the run it started, running or finished
    -- (docs/dags.md): a retry is not a second run, so max_active_runs, which that run itself
    -- fills, does not refuse it. (A paused DAG still refuses it, HR017, as documented.)
    IF p_workflow_id IS NOT NULL THEN
        SELECT e.* INTO v_existing FROM harvest.executions AS e
        WHERE e.workflow_id = p_workflow_id AND e.workflow_name = p_dag_name
        ORDER BY (e.status = 'RUNNING') DESC, e.created_at DESC
        LIMIT 1;
    END IF;
    BEGIN
        v_dag := harvest._admit_dag_run(p_dag_name);
    EXCEPTION WHEN SQLSTATE 'HR018' THEN
        IF v_existing.id IS NULL THEN
            RAISE;
        END IF;
    END;
    IF v_existing.id IS NOT NULL THEN
        RETURN QUERY SELECT v_existing.id, v_existing.workflow_id, v_existing.status, false;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT s.execution_id, s.workflow_id, s.status, s.started_fresh
    FROM harvest.start_workflow(p_dag_name, jsonb_build_array(coalesce(p_conf, '{}'::jsonb)), p_workflow_id,
                                v_dag.queue, p_search_attributes => jsonb_build_object('dag', p_dag_name),
                                p_traceparent => p_traceparent) AS s;
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
BEGIN
    -- plpgsql, not sql: the statement's plan is cached for the session instead of made per call.
    RETURN (WITH ev AS (
        SELECT e.event_id, e.event_type, e.event_data AS d, e.created_at, (e.event_data ->> 'seq')::integer AS seq
        FROM harvest.events AS e
        WHERE e.execution_id = p_execution.id
          AND e.event_type IN ('WorkflowStarted', 'ActivityScheduled', 'ActivityCompleted', 'ActivityFailed',
                               'ChildWorkflowStarted', 'ChildWorkflowCompleted', 'ChildWorkflowFailed',
                               'MarkerRecorded')
    ),
    by_seq AS (  -- one row per command: its event and its outcome (one pass, no join on seq)
        SELECT ev.seq,
               min(ev.event_id) FILTER (WHERE ev.event_type LIKE '%Started' OR ev.event_type LIKE '%Scheduled')
                   AS event_id,
               min(ev.created_at) FILTER (WHERE ev.event_type LIKE '%Started' OR ev.event_type LIKE '%Scheduled')
                   AS started_at,
               (array_agg(ev.event_type) FILTER (WHERE ev.event_type LIKE '%Started'
                                                    OR ev.event_type LIKE '%Scheduled'))[1] AS command,
               (array_agg(ev.d) FILTER (WHERE ev.event_type LIKE '%Started' OR ev.event_type LIKE '%Scheduled'))[1]
                   AS cmd,
               (array_agg(ev.d) FILTER (WHERE ev.event_type LIKE '%Completed' OR ev.event_type LIKE '%Failed'))[1]
                   AS out,
               min(ev.created_at) FILTER (WHERE ev.event_type LIKE '%Completed' OR ev.event_type LIKE '%Failed')
                   AS finished_at,
               bool_or(ev.event_type LIKE '%Completed') AS completed
        FROM ev
        WHERE ev.event_type NOT IN ('WorkflowStarted', 'MarkerRecorded')
        GROUP BY ev.seq
    ),
    outcome AS (
        SELECT b.*, CASE WHEN b.completed THEN 'success'
                         WHEN b.out IS NULL THEN 'running'
                         WHEN b.out #>> '{failure,error_type}' = 'SkipTask' THEN 'skipped'
                         ELSE 'failed' END AS state
        FROM by_seq AS b
    ),
    reused AS (  -- what a retry carried over: the WorkflowStarted input's [1].results
        SELECT r.key AS task, 0::bigint AS event_id, jsonb_build_object(
            'state', 'success', 'attempts', 0, 'result', r.value, 'reused_from', ev.d #> '{input,1,retry_of}') AS obj
        FROM ev, jsonb_each(CASE WHEN jsonb_typeof(ev.d #> '{input,1,results}') = 'object'
                                 THEN ev.d #> '{input,1,results}' ELSE '{}'::jsonb END) AS r
        WHERE ev.event_type = 'WorkflowStarted'
    ),
    activity AS (  -- an activity task: its ActivityScheduled names it in options.dag_node
        SELECT o.cmd #>> '{options,dag_node}' AS task, o.event_id, jsonb_build_object(
            'state', o.state, 'attempts', coalesce((o.out ->> 'attempt')::integer, k.attempt, 0),
            'scheduled_at', o.started_at, 'started_at', k.started_at, 'finished_at', o.finished_at,
            'result', o.out -> 'result', 'failure', o.out -> 'failure') AS obj
        FROM outcome AS o
        LEFT JOIN harvest.tasks AS k
            ON o.out IS NULL AND k.execution_id = p_execution.id AND k.kind = 'activity' AND k.seq = o.seq
        WHERE o.command = 'ActivityScheduled' AND o.cmd -> 'options' ? 'dag_node'
    ),
    child_start AS (  -- a child task: its child's workflow id is '<run id>/<task>[/<attempt>]'
        SELECT split_part(substr(o.cmd ->> 'workflow_id', length(p_execution.id::text) + 2), '/', 1) AS task, o.*
        FROM outcome AS o
        WHERE o.command = 'ChildWorkflowStarted'
          AND left(o.cmd ->> 'workflow_id', length(p_execution.id::text) + 1) = p_execution.id::text || '/'
    ),
    child AS (  -- its latest start decides; attempts count the starts
        SELECT DISTINCT ON (c.task) c.task, c.event_id, jsonb_build_object(
            'state', c.state, 'attempts', count(*) OVER (PARTITION BY c.task),
            'scheduled_at', min(c.started_at) OVER (PARTITION BY c.task), 'finished_at', c.finished_at,
            'result', c.out -> 'result', 'failure', c.out -> 'failure',
            'child_execution_id', c.cmd -> 'child_execution_id') AS obj
        FROM child_start AS c
        ORDER BY c.task, c.event_id DESC
    ),
    marked AS (  -- a task that ended without running: a dag_node marker
        SELECT m.d #>> '{value,task}' AS task, m.event_id, jsonb_strip_nulls(jsonb_build_object(
            'state', m.d #>> '{value,state}', 'attempts', 0, 'finished_at', m.created_at,
            'failure', m.d #> '{value,failure}', 'reused_from', m.d #> '{value,reused_from}')) AS obj
        FROM ev AS m WHERE m.event_type = 'MarkerRecorded' AND m.d ->> 'kind' = 'dag_node'
    ),
    latest AS (
        SELECT DISTINCT ON (x.task) x.task, x.obj
        FROM (SELECT * FROM reused UNION ALL SELECT * FROM activity UNION ALL SELECT * FROM child
              UNION ALL SELECT * FROM marked) AS x
        ORDER BY x.task, x.event_id DESC
    ),
    spec AS (
        SELECT c.value AS spec, c.n
        FROM harvest.dags AS g, jsonb_array_elements(g.tasks) WITH ORDINALITY AS c (value, n)
        WHERE g.dag_name = p_execution.workflow_name
    ),
    joined AS (
        SELECT s.n, coalesce(s.spec ->> 'task', t.task) AS task, coalesce(s.spec, '{}'::jsonb) AS spec,
               coalesce(t.obj, jsonb_build_object(
                   'state', CASE WHEN p_execution.status NOT IN ('RUNNING', 'PAUSED') THEN 'not_run' ELSE 'pending' END,
                   'attempts', 0)) AS obj
        FROM spec AS s FULL JOIN latest AS t ON t.task = s.spec ->> 'task'
    ),
    merged AS (
        SELECT j.n, j.task, jsonb_build_object('task', j.task) || j.spec || j.obj
            -- A child whose attempt failed while the run goes on and its retry allows more is
            -- retrying (a workflow failure is always recorded non_retryable: the flag is not read).
            || CASE WHEN p_execution.status IN ('RUNNING', 'PAUSED') AND j.obj ->> 'state' = 'failed'
                         AND j.spec ->> 'kind' = 'workflow'
                         AND (j.obj ->> 'attempts')::integer
                             < coalesce(harvest._json_integer(j.spec #> '{retry,max_attempts}', 'retry.max_attempts'), 1)
                    THEN '{"state": "running"}'::jsonb ELSE '{}'::jsonb END AS t
        FROM joined AS j
    )
    -- Every key present; a closed run's running task is abandoned.
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'task', m.t -> 'task', 'kind', m.t -> 'kind', 'target', m.t -> 'target',
        'upstream', coalesce(m.t -> 'upstream', '[]'::jsonb), 'trigger_rule', m.t -> 'trigger_rule',
        'state', CASE WHEN p_execution.status NOT IN ('RUNNING', 'PAUSED') AND m.t ->> 'state' = 'running' THEN 'abandoned'
                      ELSE m.t ->> 'state' END,
        'attempts', coalesce(m.t -> 'attempts', '0'::jsonb),
        'scheduled_at', m.t -> 'scheduled_at', 'started_at', m.t -> 'started_at', 'finished_at', m.t -> 'finished_at',
        'duration_secs', CASE WHEN m.t ? 'scheduled_at' AND m.t ? 'finished_at' THEN
            to_jsonb(round(extract(epoch FROM (m.t ->> 'finished_at')::timestamptz
                                              - (m.t ->> 'scheduled_at')::timestamptz), 3)) END,
        'result', m.t -> 'result', 'failure', m.t -> 'failure',
        'child_execution_id', m.t -> 'child_execution_id', 'reused_from', m.t -> 'reused_from')
        ORDER BY m.n NULLS LAST, m.task), '[]'::jsonb)
    FROM merged AS m);
END;
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
        -- (no conf, or a null one, is {} to the run's tasks: runtime/dags.py)
        'conf', coalesce(nullif(v_exec.input -> 0, 'null'::jsonb), '{}'::jsonb),
        'retry_of', v_exec.input #> '{1,retry_of}',
        'counts', harvest._dag_counts(v_tasks), 'tasks', v_tasks, 'failure', v_exec.failure);
END;
$$;

-- A DAG's runs, newest first; p_status (one status or several, comma-separated, either case;
-- HR001 for an unknown one, as list_executions) keeps the runs in it, before the limit: a
-- filter applied after it missed every matching run older than the newest p_limit.
CREATE OR REPLACE FUNCTION harvest.list_dag_runs(
    p_dag_name text,
    p_limit integer DEFAULT 50,
    p_status text DEFAULT NULL,
    p_before_created_at timestamptz DEFAULT NULL,
    p_before_id uuid DEFAULT NULL
)
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
    PERFORM harvest._execution_filters(p_status, NULL, NULL, NULL, NULL);  -- (HR001: an unknown status)
    IF (p_before_created_at IS NULL) <> (p_before_id IS NULL) THEN
        RAISE EXCEPTION 'a position in the DAG runs is a time and an execution id: give both or neither'
            USING ERRCODE = 'HR001', HINT = 'pass the created_at and execution_id of the last run of the previous page';
    END IF;
    RETURN QUERY
    SELECT e.id, e.workflow_id, e.status, e.created_at, e.completed_at, (e.input #>> '{1,retry_of}')::uuid,
           harvest._dag_counts(harvest._dag_tasks(e))
    FROM harvest.executions AS e
    WHERE e.workflow_name = p_dag_name
      AND (p_status IS NULL OR e.status = ANY(string_to_array(upper(replace(p_status, ' ', '')), ',')))
      -- Keyset paging: the runs after the last one of the previous page, in the same order.
      AND (p_before_created_at IS NULL OR (e.created_at, e.id) < (p_before_created_at, p_before_id))
    ORDER BY e.created_at DESC, e.id DESC  -- as every shard's runs are merged (ties: the greater id)
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
        IF v_newer.status IN ('RUNNING', 'PAUSED', 'COMPLETED') THEN
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
'max_active_runs RUNNING runs (HR018), HR002 when not registered; p_traceparent (the caller''s span, HR001 when '
'malformed) puts the run in the caller''s trace. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.get_dag_run IS
'One DAG run with each task''s state, attempts, timings, result and failure, derived from the run''s history; HR002 '
'when the run is missing or not a DAG''s. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.list_dag_runs IS
'The runs of one DAG, newest first (ties: the greater id), with their task counts per state, optionally of one '
'status or several (p_status, comma-separated; HR001 unknown), after a position (keyset paging: '
'p_before_created_at and p_before_id, the last run''s; one without the other is HR001); HR002 unknown DAG, HR001 '
'limit out of 1..1000. '
'For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.retry_dag_run IS
'Retry a FAILED, CANCELLED, TERMINATED or TIMED_OUT DAG run from its failed tasks: a new run of the same workflow_id '
'carrying the successful tasks'' results (not run again); a newer RUNNING or COMPLETED run is returned instead, '
'HR019 for a run that cannot be retried, HR017/HR018 as a trigger; audited. For operators (role harvest_operator).';
