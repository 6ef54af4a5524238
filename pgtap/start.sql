-- functions/start.sql: harvest.start_workflow (the engine's own harvest._start_workflow, and
-- start_workflows, the batch, with harvest._start_args, harvest._start_check, harvest._replaced_runs and a gated
-- start's harvest._start_admission and harvest._start_admitted) — minted ids, shards, the first event and task, argument checks,
-- and every reuse_policy x conflict_policy cell.
BEGIN;
SELECT plan(220);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- A fresh start with a minted workflow id.
CREATE TEMP TABLE minted ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('start_wf', '[1, "two"]', NULL, 'start_q',
                                     p_search_attributes => '{"customer": "c1"}', p_priority => 7);
SELECT is((SELECT count(*) FROM minted), 1::bigint, 'start_workflow() returns one row');
SELECT matches((SELECT workflow_id FROM minted),
               '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$',
               'without a workflow_id one is minted (a uuid)');
SELECT is((SELECT status FROM minted), 'RUNNING', 'a fresh start is RUNNING');
SELECT ok((SELECT started_fresh FROM minted), 'a fresh start reports started_fresh');
SELECT is(harvest.shard_of((SELECT execution_id FROM minted)), 0, 'the execution id carries shard 0 by default');
SELECT results_eq(
    $$SELECT workflow_name, workflow_id, status, queue, input, search_attributes, parent_id,
             last_event_id, created_at, completed_at
      FROM harvest.executions WHERE id = (SELECT execution_id FROM minted)$$,
    $$SELECT 'start_wf'::text, (SELECT workflow_id FROM minted), 'RUNNING'::text, 'start_q'::text,
             '[1, "two"]'::jsonb, '{"customer": "c1"}'::jsonb, NULL::uuid, 1::bigint,
             '2030-01-01 00:00:00+00'::timestamptz, NULL::timestamptz$$,
    'the execution row holds name, id, queue, input, search attributes and one event');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM minted)$$,
    $$SELECT 1::bigint, 'WorkflowStarted'::text, jsonb_build_object(
             'workflow_name', 'start_wf', 'workflow_id', (SELECT workflow_id FROM minted),
             'input', '[1, "two"]'::jsonb, 'task_queue', 'start_q', 'parent_id', NULL)$$,
    'event 1 is WorkflowStarted{workflow_name, workflow_id, input, task_queue}');
SELECT results_eq(
    $$SELECT kind, queue, status, priority, due_at, attempt FROM harvest.tasks
      WHERE execution_id = (SELECT execution_id FROM minted)$$,
    $$VALUES ('workflow'::text, 'start_q'::text, 'pending'::text, 7, '2030-01-01 00:00:00+00'::timestamptz, 0)$$,
    'a start enqueues one pending workflow task with the priority, due now');

-- Timeouts: the run's deadline is the earlier of its run and execution timeouts.
CREATE TEMP TABLE timed ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('start_timed', p_execution_timeout_secs => 3600, p_run_timeout_secs => 60);
SELECT results_eq($$SELECT execution_timeout_at, timeout_at FROM harvest.executions
                    WHERE id = (SELECT execution_id FROM timed)$$,
                  $$VALUES ('2030-01-01 01:00:00+00'::timestamptz, '2030-01-01 00:01:00+00'::timestamptz)$$,
                  'p_execution_timeout_secs and p_run_timeout_secs set the deadlines');
SELECT results_eq($$SELECT execution_timeout_at, timeout_at FROM harvest.executions
                    WHERE id = (SELECT execution_id FROM minted)$$,
                  $$VALUES (NULL::timestamptz, NULL::timestamptz)$$, 'without timeouts there is no deadline');

-- Shards and parents.
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_shard => 513)$$, 'HR011',
                 'start addressed to shard 513 reached shard 0', 'p_shard => 513 on shard 0: HR011 (WrongShard)');
CREATE TEMP TABLE child ON COMMIT DROP AS
SELECT * FROM harvest._start_workflow('start_child', p_parent_id => (SELECT execution_id FROM minted));
SELECT is((SELECT parent_id FROM harvest.executions WHERE id = (SELECT execution_id FROM child)),
          (SELECT execution_id FROM minted), 'p_parent_id is stored on the child');
SELECT is((SELECT event_data ->> 'parent_id' FROM harvest.events WHERE execution_id = (SELECT execution_id FROM child)),
          (SELECT execution_id::text FROM minted), 'WorkflowStarted carries the parent_id');
CREATE TEMP TABLE grandchild ON COMMIT DROP AS
SELECT * FROM harvest._start_workflow('start_grandchild', p_parent_id => (SELECT execution_id FROM child));
SELECT is((SELECT string_agg(e.event_data ->> 'trace_root', ',' ORDER BY e.execution_id = (SELECT execution_id FROM child) DESC)
           FROM harvest.events AS e
           WHERE e.event_id = 1 AND e.execution_id IN ((SELECT execution_id FROM child), (SELECT execution_id FROM grandchild))),
          (SELECT execution_id::text || ',' || execution_id::text FROM minted),
          'a child and a grandchild carry the root run as their trace_root');
SELECT is((SELECT event_data ? 'trace_root' FROM harvest.events
           WHERE execution_id = (SELECT execution_id FROM minted) AND event_id = 1), false,
          'a root run carries no trace_root (its trace is its own id)');
-- Trace context: a start's traceparent is kept on WorkflowStarted; a malformed one is refused.
CREATE TEMP TABLE traced ON COMMIT DROP AS
SELECT s.execution_id FROM harvest.start_workflow('start_traced', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') AS s
UNION ALL
SELECT s.execution_id FROM harvest.start_workflows('[{"workflow_name": "start_traced", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}]') AS s;
SELECT is((SELECT array_agg(e.event_data ->> 'traceparent') FROM harvest.events AS e
           WHERE e.event_id = 1 AND e.execution_id IN (SELECT execution_id FROM traced)),
          ARRAY['00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'],
          'start_workflow(p_traceparent), start_workflows(): WorkflowStarted carries the caller''s traceparent');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_traced', p_traceparent => '00-abc-def-01')$$, 'HR001',
                 'traceparent "00-abc-def-01" is not a W3C traceparent', 'a malformed traceparent is HR001');
SELECT throws_ok($$SELECT harvest._check_traceparent('00-00000000000000000000000000000000-b7ad6b7169203331-01')$$,
                 'HR001', NULL, '_check_traceparent(): an all-zero trace id is refused');
SELECT is(harvest._check_traceparent(NULL), NULL, '_check_traceparent(): none is fine');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_shard => 70000)$$, 'HR001', NULL,
                 'a shard out of 0..65535: HR001');
SELECT is(harvest._start_check_shard(NULL), 0, '_start_check_shard(): NULL is this database''s shard (0)');
SELECT is(harvest._start_check_shard(0), 0, '_start_check_shard(): this database''s shard is accepted');
SELECT isnt((SELECT workflow_id FROM harvest.start_workflow('start_wf')),
            (SELECT workflow_id FROM harvest.start_workflow('start_wf')),
            'two starts without a workflow_id mint different ids');

-- Argument checks: HR001 naming what was wrong.
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('')$$, 'HR001', 'workflow name is empty',
                 'an empty workflow name: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow(NULL)$$, 'HR001', 'workflow name is empty',
                 'a NULL workflow name: HR001');
-- Durations and priorities out of range are refused before anything is written (issue 12 items 7, 8).
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_bad', p_execution_timeout_secs => 0)$$, 'HR001',
                 NULL, 'a zero execution timeout: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_bad', p_run_timeout_secs => 'NaN')$$, 'HR001',
                 NULL, 'a NaN run timeout: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_bad', p_run_timeout_secs => 1e300)$$, 'HR001',
                 NULL, 'a run timeout beyond 100 years: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_bad', p_priority => 2000000)$$, 'HR001',
                 'priority 2000000 is out of range -1000000 to 1000000', 'a priority out of range: HR001');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'start_bad'), 0::bigint,
          'a refused start writes nothing');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '[]', '')$$, 'HR001',
                 'workflow_id is empty', 'an empty workflow_id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '[]', 'k', ' ')$$, 'HR001',
                 'task queue is empty', 'a blank task queue: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '[]', md5('a') || repeat('k', 1000))$$, 'HR001',
                 'workflow_id is 1032 bytes, over the limit of 1000', 'a workflow_id over 1000 bytes: HR001 (an index bounds it)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '[]', 'k', repeat('q', 1001))$$, 'HR001',
                 'the task queue is 1001 bytes, over the limit of 1000', 'a task queue over 1000 bytes: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows(jsonb_build_array(jsonb_build_object(
                     'workflow_name', repeat('n', 1001))))$$, 'HR001',
                 'the workflow name is 1001 bytes, over the limit of 1000',
                 'start_workflows() of a workflow name over 1000 bytes: HR001, not the plain batch''s insert');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '{"a": 1}')$$, 'HR001',
                 'input must be a JSON array of positional arguments, got object',
                 'input that is an object, not an array: HR001 naming the type');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', '42')$$, 'HR001',
                 'input must be a JSON array of positional arguments, got number',
                 'input that is a number: HR001 naming the type');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', NULL)$$, 'HR001',
                 'input must be a JSON array of positional arguments, got NULL', 'NULL input: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_search_attributes => '[]')$$, 'HR001',
                 'search attributes must be a JSON object, got array', 'search attributes not an object: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_reuse_policy => 'bogus_policy')$$,
                 'HR001', 'unknown reuse_policy "bogus_policy"', 'an unknown reuse_policy: HR001 naming the value');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_reuse_policy => NULL)$$,
                 'HR001', NULL, 'a NULL reuse_policy: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_conflict_policy => 'Use_Existing')$$,
                 'HR001', 'unknown conflict_policy "Use_Existing"',
                 'an unknown conflict_policy (policies are case-sensitive): HR001 naming the value');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_conflict_policy => NULL)$$,
                 'HR001', NULL, 'a NULL conflict_policy: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_run_timeout_secs => 0)$$, 'HR001',
                 'workflow timeouts must be positive seconds, at most 100 years: got execution_timeout none, run_timeout 0', 'a run timeout of 0: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_wf', p_execution_timeout_secs => -1)$$, 'HR001',
                 'workflow timeouts must be positive seconds, at most 100 years: got execution_timeout -1, run_timeout none', 'a negative execution timeout: HR001');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'start_wf'), 3::bigint,
          'rejected starts (the wrong shard among them) created nothing');

-- HR003 carries a JSON DETAIL.
CREATE FUNCTION pg_temp.start_error(p_sql text) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
BEGIN
    EXECUTE p_sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
    RETURN jsonb_build_object('sqlstate', v_state, 'message', v_message, 'detail', v_detail);
END;
$fn$;
CREATE TEMP TABLE dup ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('start_dup', '[]', 'order-1');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('start_dup', '[]', 'order-1',
                                                       p_reuse_policy => 'reject_duplicate')$$,
                 'HR003', format('workflow start_dup with id "order-1" already exists (execution %s, RUNNING)',
                                 (SELECT execution_id FROM dup)),
                 'reject_duplicate on a RUNNING prior: HR003 naming the key and the execution');
SELECT is((pg_temp.start_error($$SELECT * FROM harvest.start_workflow('start_dup', '[]', 'order-1',
                                  p_reuse_policy => 'reject_duplicate')$$) ->> 'detail')::jsonb,
          jsonb_build_object('existing_execution_id', (SELECT execution_id FROM dup), 'existing_status', 'RUNNING'),
          'HR003 DETAIL is JSON {existing_execution_id, existing_status}');

-- The policy matrix. pg_temp.outcome() makes a prior run in the given state under a
-- key of its own, starts again with the policies and says what happened:
-- attach (the prior answered), start (a new run beside the terminal prior),
-- replace (the prior was terminated and a new run started), reject (HR003 with
-- the right DETAIL). Anything else is spelled out so a failure shows it.
CREATE FUNCTION pg_temp.outcome(p_reuse text, p_conflict text, p_prior_status text)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_key text := format('%s/%s/%s', p_reuse, p_conflict, p_prior_status);
    v_prior uuid;
    v_result record;
    v_error jsonb;
    v_prior_after harvest.executions;
    v_runs bigint;
BEGIN
    SELECT s.execution_id INTO v_prior FROM harvest.start_workflow('start_matrix', '[]', v_key) AS s;
    IF p_prior_status <> 'RUNNING' THEN
        PERFORM harvest._close_execution(v_prior, p_prior_status, NULL, NULL);
    END IF;
    v_error := pg_temp.start_error(format(
        'CREATE TEMP TABLE matrix_result ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('
        '%L, %L, %L, p_reuse_policy => %L, p_conflict_policy => %L)',
        'start_matrix', '["again"]', v_key, p_reuse, p_conflict));
    IF v_error IS NOT NULL THEN
        IF v_error ->> 'sqlstate' = 'HR003'
           AND (v_error ->> 'detail')::jsonb = jsonb_build_object(
               'existing_execution_id', v_prior, 'existing_status', p_prior_status) THEN
            RETURN 'reject';
        END IF;
        RETURN 'error ' || v_error::text;
    END IF;
    SELECT * INTO v_result FROM matrix_result;
    DROP TABLE matrix_result;
    SELECT * INTO v_prior_after FROM harvest.executions WHERE id = v_prior;
    SELECT count(*) INTO v_runs FROM harvest.executions
    WHERE workflow_name = 'start_matrix' AND workflow_id = v_key;
    IF v_result.execution_id = v_prior THEN
        IF NOT v_result.started_fresh AND v_result.status = p_prior_status AND v_runs = 1 THEN
            RETURN 'attach';
        END IF;
        RETURN format('attach with started_fresh=%s status=%s runs=%s', v_result.started_fresh,
                      v_result.status, v_runs);
    END IF;
    IF NOT v_result.started_fresh OR v_result.status <> 'RUNNING' OR v_runs <> 2
       OR harvest.shard_of(v_result.execution_id) <> 0 THEN
        RETURN format('new run with started_fresh=%s status=%s runs=%s', v_result.started_fresh,
                      v_result.status, v_runs);
    END IF;
    IF p_prior_status = 'RUNNING' THEN
        IF v_prior_after.status = 'TERMINATED'
           AND v_prior_after.failure ->> 'error_type' = 'Terminated'
           AND (SELECT event_type = 'WorkflowTerminated'
                       AND event_data ->> 'reason' = format('replaced by a new start (%s, %s)', p_reuse, p_conflict)
                FROM harvest.events WHERE execution_id = v_prior ORDER BY event_id DESC LIMIT 1)
           AND NOT EXISTS (SELECT 1 FROM harvest.tasks WHERE execution_id = v_prior) THEN
            RETURN 'replace';
        END IF;
        RETURN format('new run but the prior is %s', v_prior_after.status);
    END IF;
    IF v_prior_after.status = p_prior_status THEN
        RETURN 'start';
    END IF;
    RETURN format('new run and the prior changed to %s', v_prior_after.status);
END;
$fn$;

-- Prior RUNNING: conflict_policy decides; 'unspecified' follows reuse_policy.
SELECT is(pg_temp.outcome(reuse, conflict, 'RUNNING'), expected,
          format('prior RUNNING, reuse_policy %s, conflict_policy %s: %s', reuse, conflict, expected))
FROM (VALUES
    ('allow_duplicate', 'unspecified', 'attach'),
    ('allow_duplicate_failed_only', 'unspecified', 'attach'),
    ('reject_duplicate', 'unspecified', 'reject'),
    ('terminate_if_running', 'unspecified', 'replace'),
    ('allow_duplicate', 'use_existing', 'attach'),
    ('allow_duplicate_failed_only', 'use_existing', 'attach'),
    ('reject_duplicate', 'use_existing', 'attach'),
    ('terminate_if_running', 'use_existing', 'attach'),
    ('allow_duplicate', 'fail', 'reject'),
    ('allow_duplicate_failed_only', 'fail', 'reject'),
    ('reject_duplicate', 'fail', 'reject'),
    ('terminate_if_running', 'fail', 'reject'),
    ('allow_duplicate', 'terminate_existing', 'replace'),
    ('allow_duplicate_failed_only', 'terminate_existing', 'replace'),
    ('reject_duplicate', 'terminate_existing', 'replace'),
    ('terminate_if_running', 'terminate_existing', 'replace')
) AS cells (reuse, conflict, expected);

-- Prior terminal: reuse_policy decides, for every terminal state.
SELECT is(pg_temp.outcome(reuse, 'unspecified', prior), expected,
          format('prior %s, reuse_policy %s: %s', prior, reuse, expected))
FROM (VALUES ('allow_duplicate'), ('allow_duplicate_failed_only'), ('reject_duplicate'), ('terminate_if_running'))
    AS r (reuse)
CROSS JOIN (VALUES ('COMPLETED'), ('FAILED'), ('CANCELLED'), ('TERMINATED'), ('TIMED_OUT'), ('CONTINUED_AS_NEW'))
    AS p (prior)
CROSS JOIN LATERAL (SELECT CASE reuse
    WHEN 'allow_duplicate' THEN 'attach'
    WHEN 'reject_duplicate' THEN 'reject'
    WHEN 'terminate_if_running' THEN 'start'
    ELSE CASE WHEN prior IN ('COMPLETED', 'CONTINUED_AS_NEW') THEN 'attach' ELSE 'start' END
END AS expected) AS e
ORDER BY r.reuse, p.prior;

-- A terminal prior ignores conflict_policy (it speaks only about a RUNNING prior).
SELECT is(pg_temp.outcome(reuse, conflict, prior), expected,
          format('prior %s, reuse_policy %s, conflict_policy %s: %s (conflict_policy ignored)',
                 prior, reuse, conflict, expected))
FROM (VALUES
    ('terminate_if_running', 'fail', 'COMPLETED', 'start'),
    ('reject_duplicate', 'use_existing', 'FAILED', 'reject'),
    ('allow_duplicate', 'terminate_existing', 'COMPLETED', 'attach'),
    ('allow_duplicate_failed_only', 'fail', 'FAILED', 'start')
) AS cells (reuse, conflict, prior, expected);

-- With a terminal run and a RUNNING run of one key, the RUNNING one answers.
CREATE TEMP TABLE old_run ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('start_two', '[]', 'k');
SELECT harvest._close_execution((SELECT execution_id FROM old_run), 'COMPLETED', '1', NULL);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
CREATE TEMP TABLE new_run ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('start_two', '[]', 'k', p_reuse_policy => 'terminate_if_running');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';
SELECT is((SELECT execution_id FROM harvest.start_workflow('start_two', '[]', 'k')),
          (SELECT execution_id FROM new_run), 'attach picks the RUNNING run over an older terminal one');
SELECT is((SELECT execution_id FROM harvest.start_workflow('start_two', '[]', 'k',
                                                           p_conflict_policy => 'use_existing')),
          (SELECT execution_id FROM new_run), 'use_existing attaches to the RUNNING run');
SELECT is((SELECT execution_id FROM harvest.start_workflow('other_name', '[]', 'k')) <>
          (SELECT execution_id FROM new_run), true, 'the key is (workflow_name, workflow_id): another name starts anew');
SELECT is((SELECT status FROM harvest.executions WHERE id = (SELECT execution_id FROM old_run)), 'COMPLETED',
          'the terminal prior is left as it was');

-- start_workflows: a client's group commit of starts, each as start_workflow.
CREATE TEMP TABLE batch ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows($$[
    {"workflow_name": "batch_wf", "workflow_id": "b-2", "input": [2], "queue": "batch_q",
     "priority": 3, "search_attributes": {"k": "v"}, "run_timeout": 60},
    {"workflow_name": "batch_wf", "workflow_id": "b-1", "input": [1]},
    {"workflow_name": "batch_wf", "input": []},
    {"workflow_name": "batch_wf", "workflow_id": "b-1", "input": [9]}
]$$);
SELECT results_eq(
    $$SELECT n, workflow_id, status, started_fresh FROM batch WHERE n <> 3 ORDER BY n$$,
    $$VALUES (1, 'b-2'::text, 'RUNNING'::text, true), (2, 'b-1'::text, 'RUNNING'::text, true),
             (4, 'b-1'::text, 'RUNNING'::text, false)$$,
    'start_workflows(): one row per start by position; a second start of b-1 attaches (allow_duplicate)');
SELECT is((SELECT execution_id FROM batch WHERE n = 4), (SELECT execution_id FROM batch WHERE n = 2),
          'the attaching start answers with the run the batch started');
SELECT ok((SELECT started_fresh AND workflow_id IS NOT NULL FROM batch WHERE n = 3),
          'a start without a workflow_id gets a minted one');
SELECT results_eq(
    $$SELECT e.queue, e.input, e.search_attributes, t.priority, t.queue,
             e.timeout_at - e.created_at
      FROM batch AS b JOIN harvest.executions AS e ON e.id = b.execution_id
      JOIN harvest.tasks AS t ON t.execution_id = e.id WHERE b.n = 1$$,
    $$VALUES ('batch_q'::text, '[2]'::jsonb, '{"k": "v"}'::jsonb, 3, 'batch_q'::text, interval '60 seconds')$$,
    'each start gets its queue, input, search attributes, priority and timeout; defaults fill the rest');
SELECT is((SELECT queue FROM harvest.executions WHERE id = (SELECT execution_id FROM batch WHERE n = 2)),
          'default', 'a start without a queue goes to "default"');
CREATE TEMP TABLE old_spelling ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows('[
    {"workflow_name": "batch_wf", "workflow_id": "old-1", "task_queue": "old_q"},
    {"workflow_name": "batch_wf", "workflow_id": "old-2", "task_queue": "same_q", "queue": "same_q"}]');
SELECT results_eq(
    $$SELECT e.queue FROM old_spelling AS b JOIN harvest.executions AS e ON e.id = b.execution_id ORDER BY b.n$$,
    ARRAY['old_q', 'same_q'],
    'a start''s "task_queue" is still read as the deprecated spelling of "queue" (alone, or agreeing with it)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "batch_wf", "queue": "a_q",
                                                             "task_queue": "b_q"}]')$$, 'HR001',
                 'start 1 gives "queue" "a_q" and "task_queue" "b_q", which disagree',
                 'a start whose "queue" and "task_queue" disagree is refused (HR001)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "batch_wf", "workflow_id": "b-1",
                                                             "reuse_policy": "reject_duplicate"}]')$$,
                 'HR003', NULL, 'a start the policy refuses fails the call with its own error (HR003)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"input": []}]')$$, 'HR001',
                 'start 1 needs "workflow_name" as a JSON string', 'a start without a name: HR001');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('{"workflow_name": "x"}')$$, 'HR001',
                 'starts must be a JSON array of objects', 'starts that are not an array: HR001');
SELECT is_empty($$SELECT * FROM harvest.start_workflows('[]')$$, 'start_workflows() of nothing: no rows');

-- Registered names (harvest.registered_workflows, harvest._refuse_unregistered): a queue
-- whose workers registered names refuses a start of any other name, writing nothing (HR010).
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('reg_anything', '[]', 'r-0', 'reg_q')$$,
                'a queue with no registered name takes any name (a start before the first worker)');
SELECT is(harvest.register_workflows(ARRAY['reg_q'], ARRAY['reg_known', 'reg_other']), 2,
          'setup: the workers of reg_q registered two names');
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('reg_known', '[]', 'r-1', 'reg_q')$$,
                'a start of a registered name is taken');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('reg_typo', '[]', 'r-2', 'reg_q')$$, 'HR010',
                 'workflow "reg_typo" is not registered on queue "reg_q" (registered there: reg_known, reg_other)',
                 'a start of a name no worker registered on the queue: HR010 naming the name, queue and registered names');
SELECT is((pg_temp.start_error($$SELECT * FROM harvest.start_workflow('reg_typo', '[]', 'r-2', 'reg_q')$$)
           ->> 'detail')::jsonb,
          '{"workflow_name": "reg_typo", "queue": "reg_q", "registered": ["reg_known", "reg_other"]}'::jsonb,
          'HR010 DETAIL is JSON {workflow_name, queue, registered}');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE workflow_name = 'reg_typo'
                  UNION ALL SELECT 1 FROM harvest.events WHERE event_data ->> 'workflow_name' = 'reg_typo'$$,
                'the refused start wrote nothing');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "reg_typo", "queue": "reg_q"}]')$$,
                 'HR010', NULL, 'start_workflows() refuses it too');
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('reg_known', '[]', 'r-3', 'reg_elsewhere')$$,
                'the check is per queue: another queue with no registration takes it');
SELECT lives_ok($$SELECT * FROM harvest._start_workflow('reg_typo', '[]', 'r-4', 'reg_q', p_flow_gates => false)$$,
                'a released deferred start or a continue-as-new successor (p_flow_gates false) is not checked again');
SELECT throws_ok($$SELECT harvest._refuse_unregistered('reg_x', 'reg_none')$$, 'HR010',
                 'workflow "reg_x" is not registered on queue "reg_none" (registered there: none)',
                 '_refuse_unregistered() raises HR010 even with nothing registered');
-- A start naming no queue (NULL p_queue, harvest._start_queue): the one queue the workers
-- registered the workflow on, 'default' when none did, refused (HR001) when several did.
SELECT is(harvest._start_queue('reg_known'), 'reg_q', '_start_queue(): the one queue a name is registered on');
SELECT is(harvest._start_queue('reg_nowhere'), 'default', '_start_queue(): a name registered nowhere goes to default');
CREATE TEMP TABLE unqueued ON COMMIT DROP AS
SELECT execution_id FROM harvest.start_workflow('reg_known', '[]', 'r-5')
UNION ALL SELECT execution_id FROM harvest.start_workflows('[{"workflow_name": "reg_known"}]');
SELECT is((SELECT array_agg(e.queue ORDER BY e.queue) FROM unqueued AS u JOIN harvest.executions AS e ON e.id = u.execution_id),
          ARRAY['reg_q', 'reg_q'],
          'start_workflow() without p_queue and start_workflows() with no "queue" (the plain batch) start on the registered queue');
SELECT harvest.register_workflows(ARRAY['reg_q2'], ARRAY['reg_known']);
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('reg_known', '[]', 'r-6')$$, 'HR001',
                 'workflow "reg_known" is registered on 2 queues (reg_q, reg_q2): say which',
                 'a name registered on several queues and no queue given: HR001 naming them');
SELECT is((pg_temp.start_error($$SELECT * FROM harvest.start_workflow('reg_known', '[]', 'r-6')$$) ->> 'detail')::jsonb,
          '{"workflow_name": "reg_known", "queues": ["reg_q", "reg_q2"]}'::jsonb,
          'its DETAIL is JSON {workflow_name, queues}');
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('reg_known', '[]', 'r-7', 'reg_q2')$$,
                'a queue given is taken as given');
SELECT harvest.register_workflows(ARRAY['default'], ARRAY['reg_known']);
SELECT is(harvest._start_queue('reg_known'), 'default',
          '_start_queue(): several queues with default among them: default (a worker polling several registers on each)');
DELETE FROM harvest.registered_workflows WHERE queue = 'default' AND workflow_name = 'reg_known';
DELETE FROM harvest.registered_workflows WHERE queue = 'reg_q2';
-- Payload size: an input over harvest.engine_settings.max_payload_bytes is refused (HR008).
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('big_wf', jsonb_build_array(repeat('x', 100)), 'big-1')$$,
                 'HR008', 'the input of workflow big_wf is 104 bytes, over the payload limit of 64 bytes',
                 'start_workflow() of an input over the payload limit: HR008 naming the workflow, size and limit');
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('big_wf', jsonb_build_array(repeat('x', 60)), 'big-2')$$,
                'start_workflow() of an input of exactly the limit (64 bytes) starts');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows(jsonb_build_array(
                     jsonb_build_object('workflow_name', 'big_wf', 'workflow_id', 'big-3'),
                     jsonb_build_object('workflow_name', 'big_wf', 'input', jsonb_build_array(repeat('x', 100)))))$$,
                 'HR008', 'the input of workflow big_wf is 104 bytes, over the payload limit of 64 bytes',
                 'start_workflows() with one input over the limit: HR008 for the whole call');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'big_wf'), 1::bigint,
          'only the start within the limit made a run');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
-- A start whose policy can terminate a live run needs harvest_admin (spec 002,
-- "Conflict policies"); the login is what counts (SET SESSION AUTHORIZATION sets it).
SELECT harvest.declare_flow_policies('{"workflows": {"guard_paced": {"throttle": {"rps": 0.001, "burst": 1}}}}');
CREATE TEMP TABLE live ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q');
SELECT * FROM harvest.start_workflow('guard_paced', '[]', 'gp0', 'guard_q');  -- takes the only token
GRANT SELECT ON live TO PUBLIC;
SET LOCAL SESSION AUTHORIZATION harvest_operator;
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q',
                                                       p_conflict_policy => 'terminate_existing')$$,
                 '42501', 'conflict_policy "terminate_existing" can terminate a running execution, which needs '
                          'the harvest_admin role; login harvest_operator does not have it',
                 'an operator''s start with conflict_policy terminate_existing: 42501, naming the policy and role');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q',
                                                       p_reuse_policy => 'terminate_if_running')$$,
                 '42501', 'reuse_policy "terminate_if_running" (with conflict_policy unspecified) can terminate '
                          'a running execution, which needs the harvest_admin role; login harvest_operator does '
                          'not have it',
                 'an operator''s start with reuse_policy terminate_if_running: 42501');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard', '[]', 'g-new', 'guard_q',
                                                       p_conflict_policy => 'terminate_existing')$$,
                 '42501', NULL, 'refused whether or not a run of the key is live (the policy decides)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q',
                                                       p_conflict_policy => 'terminate_existing',
                                                       p_flow_gates => false)$$,
                 '42883', NULL, 'a client''s start takes no p_flow_gates: it cannot pass for the engine''s own');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard_child', '[]', 'gc1', 'guard_q',
                                                       p_parent_id => (SELECT execution_id FROM live))$$,
                 '42883', NULL, '... nor a p_parent_id: it cannot graft a run onto another''s history');
SELECT throws_ok($$SELECT * FROM harvest._start_workflow('guard', '[]', 'g1', 'guard_q',
                                                        p_conflict_policy => 'terminate_existing',
                                                        p_flow_gates => false)$$,
                 '42501', NULL, 'and the engine''s _start_workflow is no role''s to call');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows(
                     '[{"workflow_name": "guard", "workflow_id": "g1", "conflict_policy": "terminate_existing"}]')$$,
                 '42501', NULL, 'start_workflows(): the same refusal');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('guard_paced', '[]', 'gp1', 'guard_q',
                                                       p_reuse_policy => 'terminate_if_running')$$,
                 '42501', NULL, 'a start a throttle would defer is refused before it is queued');
SELECT is((SELECT execution_id FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q',
                                                           p_reuse_policy => 'terminate_if_running',
                                                           p_conflict_policy => 'use_existing')),
          (SELECT execution_id FROM live),
          'terminate_if_running + use_existing cannot end a live run: an operator may use it (it attaches)');
RESET SESSION AUTHORIZATION;
SELECT results_eq(
    $$SELECT id, status, last_event_id FROM harvest.executions WHERE workflow_name = 'guard'$$,
    $$SELECT execution_id, 'RUNNING'::text, 1::bigint FROM live$$,
    'the refused starts left the live run untouched and started nothing');
SELECT is_empty($$SELECT 1 FROM harvest.pending_starts WHERE workflow_name = 'guard_paced'$$,
                'the refused throttled start queued nothing');
SET LOCAL SESSION AUTHORIZATION harvest_admin;
SELECT is((SELECT started_fresh FROM harvest.start_workflow('guard', '[]', 'g1', 'guard_q',
                                                            p_conflict_policy => 'terminate_existing')),
          true, 'an admin''s start with terminate_existing replaces the live run');
SELECT is((SELECT status FROM harvest.start_workflow('guard_paced', '[]', 'gp1', 'guard_q',
                                                     p_reuse_policy => 'terminate_if_running')),
          'DEFERRED', 'an admin''s throttled start with terminate_if_running is deferred');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT status FROM harvest.executions WHERE id = (SELECT execution_id FROM live)), 'TERMINATED',
          'the admin''s start terminated the prior run');
-- The engine's own starts in a worker's session: a released deferred start keeps its
-- vetted policy, and a continue-as-new successor starts (both pass p_flow_gates false).
UPDATE harvest.pending_starts SET release_at = harvest.now() WHERE workflow_name = 'guard_paced';
UPDATE harvest.start_throttle_buckets SET tokens = 1 WHERE workflow_name = 'guard_paced';
SET LOCAL SESSION AUTHORIZATION harvest_worker;
SELECT is(harvest.release_pending_starts(), 1, 'a worker session releases an admin''s deferred terminate_if_running start');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'guard_paced' AND workflow_id = 'gp1'),
          1::bigint, 'the released start created its run');

-- ---------------------------------------------------------------- the gates, one function each
-- start_workflow is a dispatcher over harvest._start_<gate>; each is called directly here.
SELECT lives_ok($$SELECT harvest._start_check_arguments('fn_wf', '[]', 'k', 'q', '{}', 'allow_duplicate', 'unspecified')$$,
                '_start_check_arguments() takes well-formed arguments');
SELECT throws_ok($$SELECT harvest._start_check_arguments(' ', '[]', 'k', 'q', '{}', 'allow_duplicate', 'unspecified')$$,
                 'HR001', 'workflow name is empty', '_start_check_arguments() of a blank name: HR001');
SELECT throws_ok($$SELECT harvest._start_check_arguments('fn_wf', '{}', 'k', 'q', '{}', 'allow_duplicate', 'unspecified')$$,
                 'HR001', 'input must be a JSON array of positional arguments, got object',
                 '_start_check_arguments() of an input that is not an array: HR001');
SELECT throws_ok($$SELECT harvest._start_check_arguments('fn_wf', '[]', 'k', 'q', '{}', 'allow_duplicate', 'nope')$$,
                 'HR001', 'unknown conflict_policy "nope"', '_start_check_arguments() of an unknown conflict_policy: HR001');
SELECT lives_ok($$SELECT harvest._start_check_admin('terminate_if_running', 'unspecified', true)$$,
                '_start_check_admin() lets an admin login start with a terminating policy');
-- (Granted here so an operator's login can call the gate directly; start_workflow runs it as its owner.)
GRANT EXECUTE ON FUNCTION harvest._start_check_admin(text, text, boolean), harvest._session_has_role(text),
    harvest._session_role(), harvest._session_caller() TO harvest_operator;
SET LOCAL SESSION AUTHORIZATION harvest_operator;
SELECT lives_ok($$SELECT harvest._start_check_admin('terminate_if_running', 'use_existing', true)$$,
                '_start_check_admin(): an operator may pass a policy that cannot terminate a live run');
SELECT throws_ok($$SELECT harvest._start_check_admin('allow_duplicate', 'terminate_existing', true)$$,
                 '42501', 'conflict_policy "terminate_existing" can terminate a running execution, which needs '
                          'the harvest_admin role; login harvest_operator does not have it',
                 '_start_check_admin(): not with terminate_existing (42501)');
SELECT throws_ok($$SELECT harvest._start_check_admin('terminate_if_running', 'unspecified', false)$$,
                 '42501', 'reuse_policy "terminate_if_running" (with conflict_policy unspecified) can terminate '
                          'a running execution, which needs the harvest_admin role; login harvest_operator does not have it',
                 '... nor, outside a worker''s session, with p_flow_gates false');
RESET SESSION AUTHORIZATION;
SELECT lives_ok($$SELECT harvest._start_check_ranges(NULL, NULL, 0)$$,
                '_start_check_ranges() takes no timeouts and priority 0');
SELECT throws_ok($$SELECT harvest._start_check_ranges('NaN', NULL, 0)$$, 'HR001',
                 'workflow timeouts must be positive seconds, at most 100 years: got execution_timeout NaN, run_timeout none',
                 '_start_check_ranges() of a NaN timeout: HR001');
SELECT throws_ok($$SELECT harvest._start_check_ranges(NULL, NULL, 1000001)$$, 'HR001',
                 'priority 1000001 is out of range -1000000 to 1000000', '_start_check_ranges() of a priority out of range: HR001');
SELECT lives_ok($$SELECT harvest._start_check_registered('reg_known', 'reg_q', true)$$,
                '_start_check_registered() takes a name registered on the queue');
SELECT throws_ok($$SELECT harvest._start_check_registered('reg_typo', 'reg_q', true)$$, 'HR010', NULL,
                 '_start_check_registered() refuses a name not registered there: HR010');
SELECT lives_ok($$SELECT harvest._start_check_registered('reg_typo', 'reg_q', false)$$,
                '... but not with p_flow_gates false');
SELECT results_eq(
    $$SELECT s.prior, s.reuse, s.conflict, harvest._start_action(s.prior, s.reuse, s.conflict)
      FROM (VALUES (NULL, 'reject_duplicate', 'fail'),
                   ('RUNNING', 'allow_duplicate', 'unspecified'), ('RUNNING', 'reject_duplicate', 'unspecified'),
                   ('RUNNING', 'terminate_if_running', 'unspecified'), ('RUNNING', 'reject_duplicate', 'use_existing'),
                   ('RUNNING', 'allow_duplicate', 'fail'), ('RUNNING', 'allow_duplicate', 'terminate_existing'),
                   ('COMPLETED', 'allow_duplicate', 'fail'), ('COMPLETED', 'reject_duplicate', 'unspecified'),
                   ('COMPLETED', 'terminate_if_running', 'unspecified'),
                   ('COMPLETED', 'allow_duplicate_failed_only', 'unspecified'),
                   ('TIMED_OUT', 'allow_duplicate_failed_only', 'unspecified')) AS s (prior, reuse, conflict)$$,
    $$VALUES (NULL, 'reject_duplicate', 'fail', 'start'),
             ('RUNNING', 'allow_duplicate', 'unspecified', 'attach'), ('RUNNING', 'reject_duplicate', 'unspecified', 'reject'),
             ('RUNNING', 'terminate_if_running', 'unspecified', 'replace'), ('RUNNING', 'reject_duplicate', 'use_existing', 'attach'),
             ('RUNNING', 'allow_duplicate', 'fail', 'reject'), ('RUNNING', 'allow_duplicate', 'terminate_existing', 'replace'),
             ('COMPLETED', 'allow_duplicate', 'fail', 'attach'), ('COMPLETED', 'reject_duplicate', 'unspecified', 'reject'),
             ('COMPLETED', 'terminate_if_running', 'unspecified', 'start'),
             ('COMPLETED', 'allow_duplicate_failed_only', 'unspecified', 'attach'),
             ('TIMED_OUT', 'allow_duplicate_failed_only', 'unspecified', 'start')$$,
    '_start_action(): start without a prior; conflict_policy decides about a RUNNING prior, reuse_policy about a terminal one');
SELECT harvest._lock_start_key('fn_wf', 'fn-lock');
SELECT ok(EXISTS (SELECT 1 FROM pg_locks AS l
                  WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1 AND l.granted
                    AND ((l.classid::bigint << 32) | l.objid::bigint)
                        = hashtextextended('harvest.start:fn_wf:fn-lock', 0)),
          '_lock_start_key(): this transaction holds the key''s start lock (harvest.start:<name>:<id>)');
SELECT is((harvest._start_resolve_prior('fn_wf', 'fn-none', 'allow_duplicate', 'unspecified')).id, NULL,
          '_start_resolve_prior() without a prior: NULL (start a new run)');
CREATE TEMP TABLE fn_prior ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('fn_wf', '[]', 'fn-1', 'fn_q');
SELECT is((harvest._start_resolve_prior('fn_wf', 'fn-1', 'allow_duplicate', 'unspecified')).id,
          (SELECT execution_id FROM fn_prior), '_start_resolve_prior() of attach: the prior run');
SELECT throws_ok($$SELECT harvest._start_resolve_prior('fn_wf', 'fn-1', 'allow_duplicate', 'fail')$$, 'HR003',
                 NULL, '_start_resolve_prior() of reject: HR003');
SELECT is((harvest._start_resolve_prior('fn_wf', 'fn-1', 'allow_duplicate', 'terminate_existing')).id, NULL,
          '_start_resolve_prior() of replace: NULL (start a new run) ...');
SELECT is((SELECT status FROM harvest.executions WHERE id = (SELECT execution_id FROM fn_prior)), 'TERMINATED',
          '... after terminating the running prior');
SELECT results_eq(
    $$SELECT * FROM harvest._start_flow_keys('fn_wf', '[{"t": "acme"}]',
          '{"quota": {"key": "input.t", "max_active_executions": 5}, "concurrency": {"key": "input.t", "limit": 1}}')$$,
    $$VALUES ('acme'::text, 'acme'::text)$$, '_start_flow_keys() resolves the quota and concurrency keys from the input');
SELECT throws_ok($$SELECT * FROM harvest._start_flow_keys('fn_wf', '[{"t": "acme"}]',
                       '{"quota": {"key": "input.t", "max_active_executions": 0}}')$$,
                 'HR006', NULL, '_start_flow_keys() checks the quota: HR006 when exhausted');
INSERT INTO harvest.flow_policies (kind, name, policy, updated_at)
VALUES ('workflow', 'fn_gated', '{"debounce": {"window": 1}}', harvest.now()),
       ('workflow', 'fn_quota', '{"quota": {"key": "input.t", "max_active_executions": 1}}', harvest.now());
SELECT is(ARRAY[harvest._start_gated('fn_gated'), harvest._start_gated('fn_quota')], ARRAY[true, false],
          '_start_gated(): whether the workflow''s policy has a start gate (throttle, debounce, batch)');
SELECT is(harvest._start_gated('no-such-workflow'), false, '_start_gated() of a workflow without a policy: false');
SELECT results_eq($$SELECT * FROM harvest._start_flow_keys('fn_wf', '[]', NULL)$$, $$VALUES (NULL::text, NULL::text)$$,
                  '_start_flow_keys() without a policy: no keys');
CREATE TEMP TABLE fn_new ON COMMIT DROP AS
SELECT harvest._start_insert('fn_wf', '[7]', 'fn-2', 'fn_q', '{}', 3, NULL, 5, NULL, 60,
                             '{"concurrency": {"key": "input", "limit": 2}}', NULL, 'k7') AS id;
SELECT results_eq(
    $$SELECT e.workflow_id, e.status, e.input, e.concurrency_key, e.last_event_id, e.timeout_at - e.created_at,
             harvest.shard_of(e.id)
      FROM harvest.executions AS e WHERE e.id = (SELECT id FROM fn_new)$$,
    $$VALUES ('fn-2'::text, 'RUNNING'::text, '[7]'::jsonb, 'k7'::text, 1::bigint, interval '60 seconds', 5)$$,
    '_start_insert() inserts the run (on its shard, with its deadline and concurrency key) and WorkflowStarted');
SELECT results_eq(
    $$SELECT kind, queue, priority, concurrency_key, concurrency_limit FROM harvest.tasks
      WHERE execution_id = (SELECT id FROM fn_new)$$,
    $$VALUES ('workflow'::text, 'fn_q'::text, 3, 'k7'::text, 2)$$,
    '... and its first workflow task, gated by the key at the claim');
SELECT harvest.declare_flow_policies('{"workflows": {"fn_paced": {"throttle": {"rps": 0.001, "burst": 1}}}}');
SELECT results_eq(
    $$SELECT action, workflow_id, release IS NULL FROM harvest._start_defer('fn_paced',
          (SELECT policy FROM harvest.flow_policies WHERE kind = 'workflow' AND name = 'fn_paced'),
          '[]', 'fp-1', 'fn_q', 'allow_duplicate', 'unspecified', '{}', 0, NULL, NULL)$$,
    $$VALUES ('start'::text, 'fp-1'::text, true)$$,
    '_start_defer() with a token: start now');
SELECT results_eq(
    $$SELECT action, workflow_id, release IS NULL FROM harvest._start_defer('fn_paced',
          (SELECT policy FROM harvest.flow_policies WHERE kind = 'workflow' AND name = 'fn_paced'),
          '[]', 'fp-2', 'fn_q', 'allow_duplicate', 'unspecified', '{}', 0, NULL, NULL)$$,
    $$VALUES ('deferred'::text, 'fp-2'::text, true)$$,
    '_start_defer() without one: deferred, no execution');
SELECT throws_ok($$SELECT * FROM harvest._start_defer('fn_paced', '{"throttle": {}}', '[]', 'fp-3', 'fn_q',
                       'allow_duplicate', 'fail', '{}', 0, NULL, NULL)$$, 'HR001', NULL,
                 '_start_defer() with a conflict_policy: HR001');
-- _start_check: every check of a start, the shard its id is minted for.
SELECT is(harvest._start_check('fn_wf', '[]', NULL, 'fn_q', 'allow_duplicate', 'unspecified', '{}', 0, NULL,
                               NULL, NULL, true, NULL), harvest.get_shard_id(),
          '_start_check(): a start that passes every check gets this database''s shard');
SELECT throws_ok($$SELECT harvest._start_check('fn_wf', '[]', NULL, 'fn_q', 'allow_duplicate', 'unspecified', '{}',
                       0, NULL, NULL, NULL, true, 'not-a-traceparent')$$, 'HR001', NULL,
                 '_start_check(): a malformed traceparent: HR001');
SELECT throws_ok($$SELECT harvest._start_check('fn_wf', '[]', NULL, 'fn_q', 'allow_duplicate', 'unspecified', '{}',
                       2000000, NULL, NULL, NULL, true, NULL)$$, 'HR001', NULL,
                 '_start_check(): a priority out of range: HR001');
-- _start_args: a start_workflows element as start_workflow's arguments.
SELECT results_eq(
    $$SELECT workflow_name, input, workflow_id, queue, reuse_policy, conflict_policy, search_attributes, priority,
             shard, execution_timeout_secs, run_timeout_secs, traceparent
      FROM harvest._start_args('{"workflow_name": "a_wf", "task_queue": "tq", "run_timeout": 5}', 1)$$,
    $$VALUES ('a_wf'::text, '[]'::jsonb, NULL::text, 'tq'::text, 'allow_duplicate'::text, 'unspecified'::text,
              '{}'::jsonb, 0, NULL::integer, NULL::double precision, 5::double precision, NULL::text)$$,
    '_start_args(): the defaults filled in, task_queue read as the queue');
SELECT throws_ok($$SELECT * FROM harvest._start_args('[1]', 2)$$, 'HR001',
                 'start 2 needs "workflow_name" as a JSON string', '_start_args(): not an object: HR001');
SELECT throws_ok($$SELECT * FROM harvest._start_args('{"workflow_name": "a", "queue": "x", "task_queue": "y"}', 3)$$,
                 'HR001', NULL, '_start_args(): queue and task_queue that disagree: HR001');
-- _replaced_runs: the live priors of replacing starts.
SELECT is(harvest._replaced_runs(jsonb_build_array(
              '{"workflow_name": "fn_wf", "workflow_id": "fn-2", "conflict_policy": "terminate_existing"}'::jsonb,
              '{"workflow_name": "fn_wf", "workflow_id": "fn-2"}'::jsonb,
              '{"workflow_name": "fn_wf", "reuse_policy": "terminate_if_running"}'::jsonb, '7'::jsonb)),
          ARRAY(SELECT id FROM harvest.executions WHERE workflow_id = 'fn-2' AND status = 'RUNNING'),
          '_replaced_runs(): a replacing start''s live prior; none for an attaching start or an unnamed one');
-- _start_admission and _start_admitted: a gated start of a batch, admitted before its start.
SELECT harvest.declare_flow_policies('{"workflows": {"fn_paced": {"throttle": {"rps": 0.001, "burst": 1}},
    "fn_open": {"throttle": {"rps": 1, "burst": 5}}, "fn_one": {"batch": {"max_size": 1, "window_secs": 9}}}}');
SELECT is(harvest._start_admission('{"workflow_name": "fn_paced", "workflow_id": "fa-1", "queue": "fn_q"}') - 'release',
          '{"action": "deferred", "workflow_id": "fa-1", "start": null}',
          '_start_admission(): a start its gate defers will start nothing (start: null)');
SELECT is(harvest._start_admission('{"workflow_name": "fn_open", "queue": "fn_q", "input": [1]}') #> '{start,input}',
          '[1]', '_start_admission(): a start its gate lets through starts as given ...');
SELECT is(jsonb_typeof(harvest._start_admission('{"workflow_name": "fn_open", "queue": "fn_q"}') #> '{start,workflow_id}'),
          'string', '... under the workflow id its gate minted');
CREATE TEMP TABLE fn_filled ON COMMIT DROP AS
SELECT harvest._start_admission('{"workflow_name": "fn_one", "workflow_id": "fo-1", "queue": "fn_q",
                                  "input": ["x"], "reuse_policy": "reject_duplicate"}') AS a;
SELECT is((SELECT a -> 'start' FROM fn_filled),
          '{"workflow_name": "fn_one", "workflow_id": "fo-1", "input": [["x"]], "reuse_policy": "reject_duplicate"}',
          '_start_admission(): a start that fills a batch starts that batch''s run');
SELECT throws_ok($$SELECT harvest._start_admission('{"workflow_name": "fn_paced", "queue": "fn_q", "priority": 1.5}')$$,
                 'HR001', 'start 1: priority must be a whole number from -2147483648 to 2147483647, got 1.5',
                 '_start_admission(): the element''s own errors, before its gate (a fraction of a priority: HR001 naming it)');
SELECT results_eq($$SELECT execution_id, workflow_id, status, started_fresh FROM harvest._start_admitted(
        '{"action": "deferred", "workflow_id": "fa-1"}', '{"workflow_name": "fn_paced"}')$$,
    $$VALUES (NULL::uuid, 'fa-1'::text, 'DEFERRED'::text, false)$$, '_start_admitted(): a deferred start: no execution');
-- (Started into temp tables: a query joining the runs its own call inserts does not see them.)
CREATE TEMP TABLE fn_released ON COMMIT DROP AS
SELECT * FROM harvest._start_admitted((SELECT a FROM fn_filled), '{"workflow_name": "fn_one", "input": ["x"]}');
SELECT results_eq($$SELECT e.input, e.workflow_id, s.status FROM fn_released AS s
        JOIN harvest.executions AS e ON e.id = s.execution_id$$,
    $$VALUES ('[["x"]]'::jsonb, 'fo-1'::text, 'RUNNING'::text)$$, '_start_admitted(): a filled batch''s run');
CREATE TEMP TABLE fn_let_through ON COMMIT DROP AS
SELECT * FROM harvest._start_admitted('{"action": "start", "workflow_id": "fa-9"}',
                                      '{"workflow_name": "fn_paced", "queue": "fn_q"}');
SELECT results_eq($$SELECT e.workflow_name, e.workflow_id, s.started_fresh FROM fn_let_through AS s
        JOIN harvest.executions AS e ON e.id = s.execution_id$$,
    $$VALUES ('fn_paced'::text, 'fa-9'::text, true)$$,
    '_start_admitted(): a start let through, under its gate''s id, past its gate (fn_paced has no token left)');

-- _starts_plain and _start_plain_batch: start_workflows' batch of plain starts, one statement
-- per table. Which batches are plain: none given a workflow_id, a policy, a shard, a
-- traceparent, timeouts, a payload over the limit, a flow policy, an unregistered name, or
-- an asserted actor (each goes one by one, with start_workflow's checks and errors).
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_wf", "input": [1], "queue": "pl_q", "priority": 3,
                                   "search_attributes": {"a": 1}, "workflow_id": null}]', 1000), true,
          '_starts_plain(): a minted id, the default policies, an input within the limit: plain');
SELECT is(ARRAY(SELECT harvest._starts_plain(jsonb_build_array(jsonb_build_object('workflow_name', 'pl_wf') || x.v), 1000)
                FROM (VALUES ('{"workflow_id": "k"}'::jsonb), ('{"reuse_policy": "reject_duplicate"}'),
                             ('{"conflict_policy": "fail"}'), ('{"shard": 0}'), ('{"task_queue": "q"}'),
                             ('{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'),
                             ('{"execution_timeout": 5}'), ('{"run_timeout": 5}'), ('{"input": {}}'),
                             (jsonb_build_object('input', jsonb_build_array(repeat('x', 1000)))),
                             ('{"search_attributes": []}'), ('{"priority": 1.5}'), ('{"priority": 2000000}'),
                             ('{"queue": " "}'), ('{"queue": "reg_q"}')) AS x (v)),
          array_fill(false, ARRAY[15]),
          '_starts_plain(): not with a workflow_id, a policy, a shard, task_queue, a traceparent, timeouts, '
          'a non-array input, an input over the limit, bad search attributes or priority, a blank queue, '
          'or a name the queue''s workers did not register');
SELECT is(harvest._starts_plain('[{"workflow_name": "fn_paced"}]', 1000), false,
          '_starts_plain(): not for a name with a flow policy');
-- A worker declares every workflow of its App, {} for one without a policy (so a policy
-- dropped from the code is cleared): start_workflow reads {} as none, so it stays plain.
SELECT harvest.declare_flow_policies('{"workflows": {"pl_wf_declared": {}}}');
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_wf_declared"}]', 1000), true,
          '_starts_plain(): a name declared with an empty policy {} (a worker''s App without one) is plain');
SELECT harvest.declare_flow_policies('{"workflows": {"pl_wf_declared": {"quota": {"max_active_executions": 5}}}}');
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_wf_declared"}]', 1000), false,
          '_starts_plain(): not once that name declares a policy (a quota)');
-- The registrations are read by key (scalar probes, not a hashed scan): a queue whose
-- workers registered names before and after this one in the key's order, and not it.
SELECT harvest.register_workflows(ARRAY['pl_reg_q'], ARRAY['pl_a_other', 'pl_z_other']);
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_m_wf", "queue": "pl_reg_q"}]', 1000), false,
          '_starts_plain(): not for a name the queue''s workers did not register (others before and after it)');
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_m_wf", "queue": "pl_reg_nobody_q"}]', 1000), true,
          '_starts_plain(): a queue no worker registered anything on takes any name');
SELECT harvest.register_workflows(ARRAY['pl_reg_q'], ARRAY['pl_m_wf']);
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_m_wf", "queue": "pl_reg_q"}, '
                                '{"workflow_name": "pl_a_other", "queue": "pl_reg_q"}]', 1000), true,
          '_starts_plain(): names the queue''s workers registered');
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_m_wf", "queue": "pl_reg_q"}, '
                                '{"workflow_name": "pl_b_wf", "queue": "pl_reg_q"}]', 1000), false,
          '_starts_plain(): not when one name of the batch is not registered on its queue');
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_wf"}, 7]', 1000), false,
          '_starts_plain(): not when any element is not an object');
SELECT is(harvest._starts_plain('[]', 1000), false, '_starts_plain(): not for an empty batch');
SELECT set_config('harvest.audit_actor', 'tok', true);
SELECT is(harvest._starts_plain('[{"workflow_name": "pl_wf"}]', 1000), false,
          '_starts_plain(): not with an asserted actor (each start is audited)');
SELECT set_config('harvest.audit_actor', '', true);
-- The batch writes what start_workflow writes for each start, in start_workflows' order
-- (name, then position): executions, WorkflowStarted, the first workflow task.
CREATE TEMP TABLE pl_batch ON COMMIT DROP AS
SELECT * FROM harvest._start_plain_batch('[{"workflow_name": "pl_wf_b", "input": [1], "queue": "pl_q", "priority": 3},
                                          {"workflow_name": "pl_wf_a", "search_attributes": {"s": "x"}},
                                          {"workflow_name": "pl_wf_b", "input": [2], "queue": "pl_q"}]');
CREATE TEMP TABLE pl_one ON COMMIT DROP AS
SELECT 2 AS n, * FROM harvest.start_workflow('pl_wf_a', '[]', NULL, 'default', p_search_attributes => '{"s": "x"}')
UNION ALL SELECT 1, * FROM harvest.start_workflow('pl_wf_b', '[1]', NULL, 'pl_q', p_priority => 3)
UNION ALL SELECT 3, * FROM harvest.start_workflow('pl_wf_b', '[2]', NULL, 'pl_q');
SELECT is(ARRAY(SELECT n FROM pl_batch), ARRAY[2, 1, 3],
          '_start_plain_batch(): one row per start, in (workflow_name, position) order');
SELECT ok((SELECT bool_and(b.status = 'RUNNING' AND b.started_fresh AND b.workflow_id ~ '^[0-9a-f-]{36}$'
                           AND harvest.shard_of(b.execution_id) = harvest.get_shard_id())
           FROM pl_batch AS b),
          '_start_plain_batch(): each RUNNING, fresh, with a minted workflow_id and an id of this shard');
CREATE FUNCTION pg_temp.pl_rows(p_ids uuid[]) RETURNS TABLE (k bigint, execution jsonb, events jsonb, tasks jsonb)
LANGUAGE sql AS $fn$
    SELECT u.k,
           to_jsonb(e) - ARRAY['id', 'workflow_id'],
           (SELECT jsonb_agg(to_jsonb(ev) - ARRAY['execution_id', 'global_id'] - 'event_data'
                             || jsonb_build_object('data', ev.event_data - 'workflow_id') ORDER BY ev.event_id)
            FROM harvest.events AS ev WHERE ev.execution_id = e.id),
           (SELECT jsonb_agg(to_jsonb(t) - ARRAY['id', 'execution_id'] ORDER BY t.id)
            FROM harvest.tasks AS t WHERE t.execution_id = e.id)
    FROM unnest(p_ids) WITH ORDINALITY AS u (id, k) JOIN harvest.executions AS e ON e.id = u.id;
$fn$;
SELECT results_eq(
    $$SELECT * FROM pg_temp.pl_rows(ARRAY(SELECT execution_id FROM pl_batch ORDER BY n)) ORDER BY k$$,
    $$SELECT * FROM pg_temp.pl_rows(ARRAY(SELECT execution_id FROM pl_one ORDER BY n)) ORDER BY k$$,
    '_start_plain_batch(): the rows, events and tasks start_workflow writes for the same starts');
SELECT ok((SELECT bool_and(ev.event_data ->> 'workflow_id' = b.workflow_id) FROM pl_batch AS b
           JOIN harvest.events AS ev ON ev.execution_id = b.execution_id),
          '_start_plain_batch(): WorkflowStarted names the minted workflow_id');
SELECT is(ARRAY(SELECT b.n FROM pl_batch AS b JOIN harvest.events AS ev ON ev.execution_id = b.execution_id
                ORDER BY ev.global_id),
          ARRAY[2, 1, 3], '_start_plain_batch(): events (and their global ids) in the batch''s order');
SELECT is(ARRAY(SELECT b.n FROM pl_batch AS b JOIN harvest.tasks AS t ON t.execution_id = b.execution_id
                ORDER BY t.id),
          ARRAY[2, 1, 3], '_start_plain_batch(): task ids in the batch''s order');
SELECT results_eq(
    $$SELECT n, status, started_fresh FROM harvest.start_workflows('[{"workflow_name": "pl_wf"}, {"workflow_name": "pl_wf"}]')$$,
    $$VALUES (1, 'RUNNING'::text, true), (2, 'RUNNING'::text, true)$$,
    'start_workflows() of plain starts: through _start_plain_batch, one row each');
-- A batch of one start takes its own way (single-row INSERTs): the same rows as start_workflow,
-- with every field given and with none.
CREATE TEMP TABLE pl_batch_one ON COMMIT DROP AS
SELECT 1 AS k, * FROM harvest._start_plain_batch('[{"workflow_name": "pl_wf_c", "input": [7], "queue": "pl_q",
                                                    "priority": 2, "search_attributes": {"s": "y"}}]')
UNION ALL SELECT 2, * FROM harvest._start_plain_batch('[{"workflow_name": "pl_wf_d"}]');
CREATE TEMP TABLE pl_one_single ON COMMIT DROP AS
SELECT 1 AS k, * FROM harvest.start_workflow('pl_wf_c', '[7]', NULL, 'pl_q', p_search_attributes => '{"s": "y"}',
                                             p_priority => 2)
UNION ALL SELECT 2, * FROM harvest.start_workflow('pl_wf_d');
SELECT results_eq(
    $$SELECT * FROM pg_temp.pl_rows(ARRAY(SELECT execution_id FROM pl_batch_one ORDER BY k)) ORDER BY k$$,
    $$SELECT * FROM pg_temp.pl_rows(ARRAY(SELECT execution_id FROM pl_one_single ORDER BY k)) ORDER BY k$$,
    '_start_plain_batch() of one start: the rows, events and tasks start_workflow writes for it');
SELECT ok((SELECT bool_and(b.n = 1 AND b.status = 'RUNNING' AND b.started_fresh AND b.workflow_id ~ '^[0-9a-f-]{36}$'
                           AND harvest.shard_of(b.execution_id) = harvest.get_shard_id()
                           AND ev.event_data ->> 'workflow_id' = b.workflow_id)
           FROM pl_batch_one AS b JOIN harvest.events AS ev ON ev.execution_id = b.execution_id),
          '_start_plain_batch() of one start: n 1, RUNNING, fresh, its minted workflow_id named by WorkflowStarted');

-- A start given "result_waiter" (Client.execute_workflow) marks that waiter for the run it
-- creates, in its own transaction, on every path: a batch of one, a batch, one at a time.
CREATE TEMP TABLE rw_one ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows('[{"workflow_name": "rw_wf", "result_waiter": "00000000-0000-4000-8000-0000000000a1"}]');
SELECT results_eq(
    $$SELECT w.waiter_id, w.since FROM harvest.result_waiters AS w WHERE w.execution_id = (SELECT execution_id FROM rw_one)$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000a1'::uuid, harvest.now())$$,
    'start_workflows() of one plain start with result_waiter marks that waiter for the run');
CREATE TEMP TABLE rw_batch ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows('[{"workflow_name": "rw_wf", "result_waiter": "00000000-0000-4000-8000-0000000000a2"},
                                        {"workflow_name": "rw_wf"},
                                        {"workflow_name": "rw_wf", "result_waiter": "00000000-0000-4000-8000-0000000000a3"}]');
SELECT results_eq(
    $$SELECT b.n, w.waiter_id FROM rw_batch AS b JOIN harvest.result_waiters AS w ON w.execution_id = b.execution_id
      ORDER BY b.n$$,
    $$VALUES (1, '00000000-0000-4000-8000-0000000000a2'::uuid), (3, '00000000-0000-4000-8000-0000000000a3'::uuid)$$,
    'start_workflows() of a plain batch marks each start''s result_waiter, and only where one is given');
CREATE TEMP TABLE rw_keyed ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows('[{"workflow_name": "rw_wf", "workflow_id": "rw-1",
                                         "result_waiter": "00000000-0000-4000-8000-0000000000a4"}]');
SELECT results_eq(
    $$SELECT w.waiter_id FROM harvest.result_waiters AS w WHERE w.execution_id = (SELECT execution_id FROM rw_keyed)$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000a4'::uuid)$$,
    'start_workflows() one start at a time (a workflow_id given) marks the result_waiter of a run it created');
-- Attached to a running run (use_existing): not marked by the start (wait_for_result marks it,
-- ordered with a close in flight), and started_fresh says so.
CREATE TEMP TABLE rw_attached ON COMMIT DROP AS
SELECT * FROM harvest.start_workflows('[{"workflow_name": "rw_wf", "workflow_id": "rw-1", "conflict_policy": "use_existing",
                                         "result_waiter": "00000000-0000-4000-8000-0000000000a5"}]');
SELECT is((SELECT execution_id FROM rw_attached), (SELECT execution_id FROM rw_keyed), 'use_existing attaches to rw-1');
SELECT is_empty($$SELECT 1 FROM harvest.result_waiters WHERE waiter_id = '00000000-0000-4000-8000-0000000000a5'$$,
                'a start that attached to a running run does not mark its result_waiter');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "rw_wf", "result_waiter": "nope"}]')$$,
                 '22P02', NULL, 'a result_waiter that is not a uuid is refused');

-- A start's workflow task has its fairness key answered by the start's INSERT ('' on a fair
-- queue, else none: the insert trigger asks nothing): a batch over a fair and a plain queue,
-- a start of one, and start_workflow's general path (by workflow id).
INSERT INTO harvest.fair_queues (queue) VALUES ('fk_fair');
SELECT * FROM harvest.start_workflows('[{"workflow_name": "fk_wf", "queue": "fk_fair"}, {"workflow_name": "fk_wf", "queue": "fk_plain"},
                                         {"workflow_name": "fk_wf", "queue": "fk_fair"}]');
SELECT * FROM harvest.start_workflows('[{"workflow_name": "fk_one", "queue": "fk_fair"}]');
SELECT * FROM harvest.start_workflow('fk_byid', '[]', 'fk-1', 'fk_fair');
SELECT * FROM harvest.start_workflow('fk_byid', '[]', 'fk-2', 'fk_plain');
SELECT results_eq(
    $$SELECT e.workflow_name, t.queue, t.fairness_key, count(*)::integer FROM harvest.tasks AS t
      JOIN harvest.executions AS e ON e.id = t.execution_id
      WHERE e.workflow_name LIKE 'fk\_%' GROUP BY 1, 2, 3 ORDER BY 1, 2$$,
    $$VALUES ('fk_byid'::text, 'fk_fair'::text, ''::text, 1), ('fk_byid', 'fk_plain', NULL, 1),
             ('fk_one', 'fk_fair', '', 1), ('fk_wf', 'fk_fair', '', 2), ('fk_wf', 'fk_plain', NULL, 1)$$,
    'a start''s workflow task: '''' on a fair queue, none on a plain one (answered by the INSERT)');
SELECT is((SELECT count(*)::integer FROM harvest.tasks WHERE fairness_key = E'\x01'), 0,
          'no workflow task keeps the marker E''\x01'' a start writes for no key');

-- \df+ harvest.* documents the API: every public function of this file has a comment.
SELECT is_empty($$SELECT p.proname FROM pg_catalog.pg_proc AS p
                  WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname IN ('start_workflow', 'start_workflows')
                    AND obj_description(p.oid, 'pg_proc') IS NULL$$,
                'every public function of functions/start.sql has a COMMENT ON FUNCTION');

SELECT * FROM finish();
ROLLBACK;

-- The numbers of a start_workflows element by the one rule for a JSON field (core.sql,
-- _json_integer): HR001 naming the start and the field, not 22P02 at a raw cast.
BEGIN;
SELECT plan(5);
SELECT harvest.start_workflows('[{"workflow_name": "jn", "workflow_id": "jn-1", "priority": 2.0}]');
SELECT is((SELECT t.priority FROM harvest.executions AS e JOIN harvest.tasks AS t ON t.execution_id = e.id
           WHERE e.workflow_id = 'jn-1'),
          2, 'start_workflows(): a priority of 2.0 is 2 (it was 22P02)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "workflow_id": "jn-2"},
                                                          {"workflow_name": "jn", "workflow_id": "jn-3", "priority": "3"}]')$$,
                 'HR001', 'start 2: priority must be a whole number from -2147483648 to 2147483647, got "3"',
                 '... a priority in a string is HR001 naming the start and the field');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "workflow_id": "jn-4", "shard": true}]')$$,
                 'HR001', NULL, '... a shard that is no number too');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "workflow_id": "jn-5", "run_timeout": "30"}]')$$,
                 'HR001', 'start 1: run_timeout must be a number from 0 to 3155760000, got "30"',
                 '... and a timeout in a string (a raw cast took it as 30 s)');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "workflow_id": "jn-6", "execution_timeout": 1e400}]')$$,
                 'HR001', NULL, '... or one no double holds (22003)');
SELECT * FROM finish();
ROLLBACK;
