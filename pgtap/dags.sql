-- functions/dags.sql: harvest.register_dags, harvest._dag, harvest.list_dags, harvest.pause_dag,
-- harvest.unpause_dag, harvest._admit_dag_run, harvest.trigger_dag, and the run view derived from
-- the history (harvest._dag_tasks, harvest._dag_counts,
-- harvest._dag_execution, harvest.get_dag_run, harvest.list_dag_runs), harvest.retry_dag_run.
-- The runs are decided by hand with the commands the runtime's interpreter issues
-- (runtime/dags.py): an activity whose options carry dag_node, a dag_node marker, a child
-- whose workflow id is '<run id>/<task>'.
BEGIN;
SELECT plan(54);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- A DAG of four tasks: a (activity) -> b (skipped), c (child), d (activity).
CREATE TEMP TABLE dg_spec ON COMMIT DROP AS SELECT jsonb_build_array(jsonb_build_object(
    'dag_name', 'dg_etl', 'queue', 'dg_q', 'max_active_runs', 1, 'description', 'etl', 'schedule', 'daily',
    'tasks', '[{"task": "a", "kind": "activity", "target": "act_a", "upstream": [], "trigger_rule": "all_success"},
               {"task": "b", "kind": "activity", "target": "act_b", "upstream": ["a"], "trigger_rule": "all_failed"},
               {"task": "c", "kind": "workflow", "target": "dg_child", "upstream": ["a"],
                "trigger_rule": "all_success", "retry": {"max_attempts": 1}},
               {"task": "d", "kind": "activity", "target": "act_d", "upstream": ["c"],
                "trigger_rule": "all_success"}]'::jsonb)) AS dags;

-- register_dags
SELECT is(harvest.register_dags((SELECT dags FROM dg_spec)), 1, 'register_dags() registers a new DAG');
SELECT is(harvest.register_dags((SELECT dags FROM dg_spec)), 0, 'registering it again adds nothing new');
SELECT throws_ok($$SELECT harvest.register_dags('{"dag_name": "x"}')$$, 'HR001',
                 'register_dags needs a JSON array of DAGs, got object', 'register_dags() of an object: HR001');
SELECT throws_ok($$SELECT harvest.register_dags('[{"dag_name": "x", "queue": "q", "tasks": {}}]')$$, 'HR001', NULL,
                 'register_dags() of a DAG without a task array: HR001');
SELECT throws_ok($$SELECT harvest.register_dags('[{"dag_name": "x", "queue": "q", "tasks": [], "max_active_runs": 0}]')$$,
                 'HR001', NULL, 'register_dags() with max_active_runs 0: HR001');
SELECT is((SELECT count(*) FROM harvest.dags WHERE dag_name = 'x'), 0::bigint, 'a refused registration writes nothing');

-- _dag, list_dags
SELECT is((harvest._dag('dg_etl')).queue, 'dg_q', '_dag() reads the DAG');
SELECT throws_ok($$SELECT harvest._dag('nope')$$, 'HR002', 'dag nope is not registered', '_dag() of an unknown DAG: HR002');
SELECT results_eq(
    $$SELECT dag_name, queue, paused, max_active_runs, tasks, running_runs, last_run_at, schedule FROM harvest.list_dags()$$,
    $$VALUES ('dg_etl'::text, 'dg_q'::text, false, 1, 4, 0::bigint, NULL::timestamptz, 'daily'::text)$$,
    'list_dags(): the DAG, not paused, four tasks, no run yet');

-- pause_dag, unpause_dag, and the gate of a trigger
SELECT is(harvest.pause_dag('dg_etl', 'ops'), true, 'pause_dag() pauses');
SELECT is(harvest.pause_dag('dg_etl', 'ops'), false, 'pause_dag() of a paused DAG changes nothing');
SELECT is(harvest.register_dags((SELECT dags FROM dg_spec)), 0, 'a worker registering again...');
SELECT is((SELECT paused_by FROM harvest.dags WHERE dag_name = 'dg_etl'), 'ops', '...keeps the pause');
SELECT throws_ok($$SELECT * FROM harvest.trigger_dag('dg_etl')$$, 'HR017', 'dag dg_etl is paused: it starts no run',
                 'trigger_dag() of a paused DAG: HR017');
SELECT throws_ok($$SELECT * FROM harvest._admit_dag_run('dg_etl')$$, 'HR017', NULL, '_admit_dag_run() refuses it');
SELECT is(harvest.unpause_dag('dg_etl', 'ops'), true, 'unpause_dag() unpauses');
SELECT is(harvest.unpause_dag('dg_etl'), false, 'unpause_dag() of a running DAG changes nothing');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation IN ('dag.pause', 'dag.unpause')), 2::bigint,
          'pause and unpause are audited once each');
SELECT throws_ok($$SELECT harvest.pause_dag('nope')$$, 'HR002', NULL, 'pause_dag() of an unknown DAG: HR002');

-- trigger_dag
SELECT pg_temp.remember('dg1', (SELECT execution_id FROM harvest.trigger_dag('dg_etl', '{"date": "d1"}', 'dg-run')));
SELECT results_eq($$SELECT workflow_name, workflow_id, queue, input, search_attributes FROM harvest.executions
                    WHERE id = pg_temp.run('dg1')$$,
                  $$VALUES ('dg_etl'::text, 'dg-run'::text, 'dg_q'::text, '[{"date": "d1"}]'::jsonb,
                            '{"dag": "dg_etl"}'::jsonb)$$,
                  'trigger_dag() starts the DAG''s workflow on its queue with input [conf]');
SELECT throws_ok($$SELECT * FROM harvest.trigger_dag('dg_etl')$$, 'HR018', 'dag dg_etl has 1 running run(s), its max_active_runs',
                 'a second run over max_active_runs 1: HR018');
SELECT results_eq($$SELECT execution_id, workflow_id, status, started_fresh
                    FROM harvest.trigger_dag('dg_etl', '{"date": "d1"}', 'dg-run')$$,
                  $$VALUES (pg_temp.run('dg1'), 'dg-run'::text, 'RUNNING'::text, false)$$,
                  'trigger_dag() retried with its workflow_id at max_active_runs: the run it started, not HR018');
SELECT throws_ok($$SELECT * FROM harvest.trigger_dag('nope')$$, 'HR002', NULL, 'trigger_dag() of an unknown DAG: HR002');
SAVEPOINT traced_trigger;
UPDATE harvest.dags SET max_active_runs = 2 WHERE dag_name = 'dg_etl';
SELECT throws_ok($$SELECT * FROM harvest.trigger_dag('dg_etl', p_traceparent => 'nope')$$, 'HR001', NULL,
                 'trigger_dag() refuses a malformed traceparent');
CREATE TEMP TABLE traced_dag ON COMMIT DROP AS
SELECT execution_id FROM harvest.trigger_dag('dg_etl', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM traced_dag AS t
           JOIN harvest.events AS ev ON ev.execution_id = t.execution_id AND ev.event_type = 'WorkflowStarted'),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'trigger_dag(p_traceparent): the run continues the caller''s span');
ROLLBACK TO SAVEPOINT traced_trigger;

-- The run decides: a scheduled, b skipped by a marker, c started as a child.
SELECT pg_temp.decide('dg1', jsonb_build_array(
    '{"type": "schedule_activity", "seq": 1, "name": "act_a", "input": [], "queue": "dg_aq",
      "options": {"dag_node": "a", "start_to_close": 30}}'::jsonb));
SELECT is((SELECT t ->> 'state' FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg1')) -> 'tasks') AS t
           WHERE t ->> 'task' = 'a'), 'running', 'get_dag_run(): a scheduled activity task is running');
SELECT pg_temp.remember('dg1', c.execution_id, c.task_id, c.fencing_token)
FROM harvest.claim_tasks('w', ARRAY['dg_aq'], 1) AS c;
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT results_eq(
    $$SELECT t ->> 'state', (t ->> 'attempts')::integer, (t ->> 'started_at')::timestamptz
      FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg1')) -> 'tasks') AS t WHERE t ->> 'task' = 'a'$$,
    $$VALUES ('running'::text, 1, '2030-01-01 00:00:00+00'::timestamptz)$$,
    'a claimed task: its attempt and start come from its task row');
SELECT lives_ok($$SELECT harvest.complete_activity(pg_temp.task('dg1'), pg_temp.token('dg1'), '{"rows": 3}')$$,
                'the activity of a completes');
SELECT pg_temp.decide('dg1', jsonb_build_array(
    '{"type": "record_marker", "seq": 2, "kind": "dag_node", "value": {"task": "b", "state": "skipped"}}'::jsonb,
    jsonb_build_object('type', 'start_child_workflow', 'seq', 3, 'workflow_name', 'dg_child', 'input', '[]'::jsonb,
                       'workflow_id', pg_temp.run('dg1')::text || '/c', 'task_queue', 'dg_cq')));

SELECT results_eq(
    $$SELECT t ->> 'task', t ->> 'state', (t ->> 'attempts')::integer, t -> 'result', t ->> 'kind'
      FROM jsonb_array_elements(harvest._dag_tasks((SELECT e FROM harvest.executions AS e
                                                    WHERE e.id = pg_temp.run('dg1')))) AS t$$,
    $$VALUES ('a'::text, 'success'::text, 1, '{"rows": 3}'::jsonb, 'activity'::text),
             ('b', 'skipped', 0, 'null', 'activity'), ('c', 'running', 1, 'null', 'workflow'),
             ('d', 'pending', 0, 'null', 'activity')$$,
    '_dag_tasks(): a success with its result, b skipped by its marker, c a running child, d pending');
SELECT is((SELECT (t ->> 'duration_secs')::numeric FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg1')) -> 'tasks') AS t
           WHERE t ->> 'task' = 'a'), 2.000, 'a task''s duration: scheduled to finished');
SELECT is(harvest.get_dag_run(pg_temp.run('dg1')) -> 'counts', '{"pending": 1, "running": 1, "skipped": 1, "success": 1}',
          'get_dag_run(): the tasks counted by state');
SELECT is(harvest.get_dag_run(pg_temp.run('dg1')) ->> 'conf', '{"date": "d1"}', 'get_dag_run(): the run''s conf');
SELECT isnt((SELECT t ->> 'child_execution_id' FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg1')) -> 'tasks') AS t
             WHERE t ->> 'task' = 'c'), NULL, 'a child task names its child run');
SELECT throws_ok($$SELECT * FROM harvest.retry_dag_run(pg_temp.run('dg1'))$$, 'HR019', NULL,
                 'retry_dag_run() of a RUNNING run: HR019');

-- The child fails: the run fails (as the interpreter does once d is decided upstream_failed).
SELECT harvest.terminate_workflow((SELECT id FROM harvest.executions WHERE workflow_id = pg_temp.run('dg1')::text || '/c'),
                                  'broken');
SELECT pg_temp.decide('dg1', jsonb_build_array(
    '{"type": "record_marker", "seq": 4, "kind": "dag_node", "value": {"task": "d", "state": "upstream_failed"}}'::jsonb,
    '{"type": "fail_workflow", "failure": {"error_type": "DagRunFailed", "message": "c failed"}}'::jsonb));
SELECT results_eq(
    $$SELECT t ->> 'task', t ->> 'state' FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg1')) -> 'tasks') AS t$$,
    $$VALUES ('a'::text, 'success'::text), ('b', 'skipped'), ('c', 'failed'), ('d', 'upstream_failed')$$,
    'the failed run: c failed (its child was terminated), d upstream_failed');
SELECT results_eq(
    $$SELECT workflow_id, status, counts FROM harvest.list_dag_runs('dg_etl')$$,
    $$VALUES ('dg-run'::text, 'FAILED'::text, '{"failed": 1, "skipped": 1, "success": 1, "upstream_failed": 1}'::jsonb)$$,
    'list_dag_runs(): the run with its counts');
SELECT throws_ok($$SELECT * FROM harvest.list_dag_runs('dg_etl', 0)$$, 'HR001', NULL, 'list_dag_runs() limit 0: HR001');
SELECT results_eq($$SELECT workflow_id FROM harvest.list_dag_runs('dg_etl', 1, 'failed, completed')$$,
                  $$VALUES ('dg-run'::text)$$, 'list_dag_runs(p_status): the runs in those statuses, either case');
SELECT throws_ok($$SELECT * FROM harvest.list_dag_runs('dg_etl', 1, 'DONE')$$, 'HR001', NULL,
                 'list_dag_runs() of an unknown status: HR001');

-- retry_dag_run: a new run of the same workflow id carrying a's result and b's skip.
SELECT pg_temp.remember('dg2', (SELECT execution_id FROM harvest.retry_dag_run(pg_temp.run('dg1'), 'ops')));
SELECT results_eq(
    $$SELECT workflow_id, status, input FROM harvest.executions WHERE id = pg_temp.run('dg2')$$,
    $$SELECT 'dg-run'::text, 'RUNNING'::text, jsonb_build_array('{"date": "d1"}'::jsonb, jsonb_build_object(
          'retry_of', pg_temp.run('dg1'), 'results', '{"a": {"rows": 3}}'::jsonb, 'skipped', '["b"]'::jsonb))$$,
    'retry_dag_run(): the old conf, the successful results and the skipped tasks');
SELECT results_eq(
    $$SELECT t ->> 'task', t ->> 'state', t ->> 'reused_from' FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg2')) -> 'tasks') AS t$$,
    $$SELECT * FROM (VALUES ('a'::text, 'success'::text, pg_temp.run('dg1')::text), ('b', 'pending', NULL),
                            ('c', 'pending', NULL), ('d', 'pending', NULL)) AS v$$,
    'the retry''s view: a carried over from the failed run, the rest pending');
SELECT results_eq(
    $$SELECT execution_id, started_fresh FROM harvest.retry_dag_run(pg_temp.run('dg1'))$$,
    $$SELECT pg_temp.run('dg2'), false$$,
    'retrying again returns the running retry (idempotent)');
SELECT is((SELECT details -> 'reused' FROM harvest.audit_log WHERE operation = 'dag.retry'), '["a"]'::jsonb,
          'the retry is audited with the tasks it carried over');
SELECT pg_temp.decide('dg2', jsonb_build_array(
    '{"type": "schedule_activity", "seq": 1, "name": "act_b", "input": [], "queue": "dg_aq",
      "options": {"dag_node": "b"}}'::jsonb));
SELECT harvest.terminate_workflow(pg_temp.run('dg2'), 'again');
SELECT results_eq(
    $$SELECT t ->> 'task', t ->> 'state' FROM jsonb_array_elements(harvest.get_dag_run(pg_temp.run('dg2')) -> 'tasks') AS t$$,
    $$VALUES ('a'::text, 'success'::text), ('b', 'abandoned'), ('c', 'not_run'), ('d', 'not_run')$$,
    'a closed run: the task it was running is abandoned, the undecided ones not_run');
SELECT throws_ok($$SELECT * FROM harvest.retry_dag_run(pg_temp.run('dg1'))$$, 'HR019', NULL,
                 'retrying a run that a newer failed run retried: HR019 (retry the newest)');

-- The helpers and the refusals of the run view.
SELECT is(harvest._dag_counts('[{"state": "success"}, {"state": "success"}, {"state": "failed"}]'),
          '{"failed": 1, "success": 2}'::jsonb, '_dag_counts() counts by state');
SELECT is((harvest._dag_execution(pg_temp.run('dg1'))).workflow_name, 'dg_etl', '_dag_execution() reads the run');
-- A run started with no conf (input [], as a schedule of kind dag with no input starts it) or a
-- null one: its tasks read {} (runtime/dags.py), and its view says {} too; it said null.
SELECT pg_temp.start_run('dg_noconf', 'dg_etl', 'dg_q');
SELECT is(harvest.get_dag_run(pg_temp.run('dg_noconf')) -> 'conf', '{}'::jsonb,
          'get_dag_run() of a run started without a conf: {}, as its tasks read it');
SELECT pg_temp.start_run('dg_nullconf', 'dg_etl', 'dg_q', '[null]');
SELECT is(harvest.get_dag_run(pg_temp.run('dg_nullconf')) -> 'conf', '{}'::jsonb,
          'get_dag_run() of a run started with a null conf: {}');
SELECT pg_temp.start_run('dg_plain', 'dg_not_a_dag', 'dg_q');
SELECT throws_ok($$SELECT harvest.get_dag_run(pg_temp.run('dg_plain'))$$, 'HR002', NULL,
                 'get_dag_run() of a run of a workflow that is no DAG: HR002');
SELECT throws_ok($$SELECT harvest.get_dag_run('00000000-0000-4000-8000-000000000000')$$, 'HR002', NULL,
                 'get_dag_run() of an unknown run: HR002');

-- list_dag_runs' order: the runs above, given one created_at, tie; the greater id comes first.
UPDATE harvest.executions SET created_at = '2030-01-01 00:00:00+00' WHERE workflow_name = 'dg_etl';
SELECT results_eq(
    $$SELECT execution_id FROM harvest.list_dag_runs('dg_etl')$$,
    $$SELECT id FROM harvest.executions WHERE workflow_name = 'dg_etl' ORDER BY created_at DESC, id DESC$$,
    'list_dag_runs(): newest first, ties by the greater id (the order shards'' runs are merged in)');
SELECT results_eq(
    $$SELECT r.execution_id FROM (SELECT * FROM harvest.list_dag_runs('dg_etl') LIMIT 1) AS top,
      LATERAL harvest.list_dag_runs('dg_etl', 50, NULL, top.created_at, top.execution_id) AS r$$,
    $$SELECT id FROM harvest.executions WHERE workflow_name = 'dg_etl' ORDER BY created_at DESC, id DESC OFFSET 1$$,
    'list_dag_runs(p_before_created_at, p_before_id): the runs after that one, in the same order');
SELECT throws_ok($$SELECT * FROM harvest.list_dag_runs('dg_etl', 1, NULL, NULL, pg_temp.run('dg1'))$$, 'HR001',
                 'a position in the DAG runs is a time and an execution id: give both or neither',
                 'list_dag_runs() with an id and no time: HR001');

SELECT * FROM finish();
ROLLBACK;

-- A DAG's numbers by the one rule for a JSON field (core.sql, _json_integer), at registration:
-- max_active_runs 2.0 is 2 (a raw ::integer cast refused it with 22P02), and a task's
-- retry.max_attempts, which get_dag_run reads for every run, is checked there.
BEGIN;
SELECT plan(4);
SELECT is(harvest.register_dags('[{"dag_name": "jn", "queue": "q", "tasks": [], "max_active_runs": 2.0}]'), 1,
          'register_dags(): max_active_runs 2.0 registers');
SELECT is((SELECT d.max_active_runs FROM harvest.dags AS d WHERE d.dag_name = 'jn'), 2, '... as 2');
SELECT throws_ok($$SELECT harvest.register_dags('[{"dag_name": "jn2", "queue": "q", "tasks": [], "max_active_runs": 2.5}]')$$,
                 'HR001', 'DAG jn2: max_active_runs must be a whole number from 1 to 2147483647, got 2.5',
                 '... 2.5 is HR001 naming it (it was 22P02)');
SELECT throws_ok($$SELECT harvest.register_dags('[{"dag_name": "jn2", "queue": "q",
                                                   "tasks": [{"task": "t", "retry": {"max_attempts": "2"}}]}]')$$,
                 'HR001', 'DAG jn2 task t: retry.max_attempts must be a whole number from 0 to 2147483647, got "2"',
                 '... a task''s retry.max_attempts in a string too (get_dag_run cast it at every read)');
SELECT * FROM finish();
ROLLBACK;
