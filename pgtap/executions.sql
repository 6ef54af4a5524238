-- functions/executions.sql: harvest.get_execution, harvest.get_history,
-- harvest.terminate_workflow; then the list and the stack, then waiting for a
-- result, each in a transaction of its own.
BEGIN;
SELECT plan(22);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE TEMP TABLE run ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('ex_wf', '[7]', 'ex-1', 'ex_q');
CREATE FUNCTION pg_temp.run() RETURNS uuid LANGUAGE sql AS $fn$ SELECT execution_id FROM run $fn$;

-- get_execution
SELECT results_eq(
    $$SELECT id, workflow_name, workflow_id, status, queue, input FROM harvest.get_execution(pg_temp.run())$$,
    $$SELECT pg_temp.run(), 'ex_wf'::text, 'ex-1'::text, 'RUNNING'::text, 'ex_q'::text, '[7]'::jsonb$$,
    'get_execution() returns the execution row');
SELECT throws_ok($$SELECT * FROM harvest.get_execution('00000000-0000-4000-8000-00000000abcd')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist',
                 'get_execution() of an unknown id: HR002');
SELECT throws_ok($$SELECT * FROM harvest.get_execution(NULL)$$, 'HR002', NULL, 'get_execution(NULL): HR002');

-- get_history: in event order, after a given id.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT is(harvest._append_event(pg_temp.run(), 'MarkerRecorded', '{"seq": 1}'), 2::bigint, 'setup: event 2');
SELECT is(harvest._append_event(pg_temp.run(), 'MarkerRecorded', '{"seq": 2}'), 3::bigint, 'setup: event 3');
SELECT results_eq($$SELECT event_id, event_type FROM harvest.get_history(pg_temp.run())$$,
                  $$VALUES (1::bigint, 'WorkflowStarted'::text), (2, 'MarkerRecorded'), (3, 'MarkerRecorded')$$,
                  'get_history(): the whole history in event order');
SELECT results_eq($$SELECT event_id, event_data, created_at FROM harvest.get_history(pg_temp.run(), 1)$$,
                  $$VALUES (2::bigint, '{"seq": 1}'::jsonb, '2030-01-01 00:00:01+00'::timestamptz),
                           (3, '{"seq": 2}', '2030-01-01 00:00:01+00')$$,
                  'get_history(p_after_event_id => 1): the events after 1, with data and time');
SELECT is_empty($$SELECT * FROM harvest.get_history(pg_temp.run(), 3)$$, 'get_history() after the last event: empty');
SELECT is((SELECT count(*) FROM harvest.get_history(pg_temp.run(), NULL)), 3::bigint,
          'get_history(p_after_event_id => NULL) starts at the beginning');
SELECT is_empty($$SELECT * FROM harvest.get_history('00000000-0000-4000-8000-00000000abcd')$$,
                'get_history() of an unknown id: empty');

-- terminate_workflow: ends the run at once, open tasks dropped.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run(), 'operator said so')$$, 'terminate_workflow()');
SELECT results_eq(
    $$SELECT status, output, failure, completed_at FROM harvest.executions WHERE id = pg_temp.run()$$,
    $$VALUES ('TERMINATED'::text, NULL::jsonb, '{"error_type": "Terminated", "message": "operator said so",
              "non_retryable": true, "details": null}'::jsonb, '2030-01-01 00:00:02+00'::timestamptz)$$,
    'the run is TERMINATED with a Terminated failure carrying the reason');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.get_history(pg_temp.run(), 3)$$,
    $$VALUES (4::bigint, 'WorkflowTerminated'::text, '{"reason": "operator said so"}'::jsonb)$$,
    'WorkflowTerminated{reason} is appended');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run()$$, 'its tasks are dropped');
SELECT throws_ok($$SELECT harvest.terminate_workflow(pg_temp.run())$$, 'HR005',
                 format('cannot terminate execution %s: it is already TERMINATED', pg_temp.run()), 'terminating it again: HR005');
SELECT throws_ok($$SELECT harvest.terminate_workflow('00000000-0000-4000-8000-00000000abcd')$$, 'HR002', NULL,
                 'terminate_workflow() of an unknown id: HR002');
SELECT is((harvest.get_execution(pg_temp.run())).status, 'TERMINATED', 'get_execution() sees the end');

CREATE TEMP TABLE quiet ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('ex_wf', '[]', 'ex-2');
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM quiet))$$,
                'terminate_workflow() without a reason');
SELECT results_eq(
    $$SELECT e.failure ->> 'message', h.event_data FROM harvest.executions AS e,
             harvest.get_history(e.id, 1) AS h WHERE e.id = (SELECT execution_id FROM quiet)$$,
    $$VALUES ('terminated'::text, '{"reason": null}'::jsonb)$$,
    'without a reason: the message says terminated, the event''s reason is null');
SELECT throws_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM quiet))$$, 'HR005', NULL,
                 'a terminated run cannot be terminated: HR005');

-- terminate_workflow is audited: one workflow.terminate row, in the same transaction.
SET LOCAL application_name = 'harvest-cli';
CREATE TEMP TABLE audited_run ON COMMIT DROP AS
SELECT s.execution_id FROM harvest.start_workflow('audit_wf', '[]', 'audit-terminate') AS s;
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM audited_run), 'cleanup')$$,
                'setup: terminate a run from the CLI');
SELECT results_eq($$SELECT operation, target, actor = session_user, operator_id, source, details FROM harvest.audit_log
                    WHERE operation = 'workflow.terminate' AND target = (SELECT execution_id::text FROM audited_run)$$,
                  $$SELECT 'workflow.terminate'::text, execution_id::text, true, NULL::text, 'cli'::text,
                           '{"reason": "cleanup", "workflow_name": "audit_wf"}'::jsonb FROM audited_run$$,
                  'terminate_workflow() writes one audit row: operation, target, actor and source cli');
RESET application_name;

SELECT * FROM finish();
ROLLBACK;

-- harvest.list_executions, harvest.get_execution_stack and their helpers.
BEGIN;
SELECT plan(21);
SET LOCAL TimeZone = 'UTC';

CREATE TEMP TABLE runs ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('op_wf', '[]', 'op-' || n, 'op_q',
           p_search_attributes => jsonb_build_object('tenant', CASE WHEN n % 2 = 0 THEN 'acme' ELSE 'other' END,
                                                     'amount', n, 'vip', n = 3))).execution_id AS id
FROM generate_series(1, 5) AS n;

SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf')), 5::bigint,
          'lists every run of a workflow');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant=acme'])), 2::bigint, 'search attribute equality');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant:acme', 'amount>=4'])), 1::bigint, 'key:value and a numeric comparison');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['vip=true'])), 1::bigint, 'boolean equality');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_status => 'completed,running',
           p_workflow_name => 'op_wf')), 5::bigint, 'states are case-insensitive and comma-separated');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_status => 'DONE')$$, 'HR001',
                 'unknown state "DONE": use RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, '
                 'CONTINUED_AS_NEW, MIGRATING or MIGRATED (comma-separated for several)', 'an unknown state is refused, not matched against nothing');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_search_attributes => ARRAY['tenant'])$$, 'HR001',
                 'search attribute filter "tenant" is malformed', 'a filter without an operator is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_page_size => 1001)$$, 'HR001',
                 'page size 1001 is out of range 1..1000', 'page size is bounded');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_cursor => 'garbage')$$, 'HR001', NULL,
                 'a malformed cursor is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_order => 'sideways')$$, 'HR001', NULL,
                 'order is asc or desc');

-- Keyset pages of 2: the last row of a page carries the cursor; the last page carries none.
CREATE TEMP TABLE page1 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc');
CREATE TEMP TABLE page2 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page1 WHERE next_cursor IS NOT NULL));
CREATE TEMP TABLE page3 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page2 WHERE next_cursor IS NOT NULL));
SELECT is((SELECT array_agg(execution_id ORDER BY created_at, execution_id) FROM (
           SELECT execution_id, created_at FROM page1 UNION ALL SELECT execution_id, created_at FROM page2
           UNION ALL SELECT execution_id, created_at FROM page3) AS p),
          (SELECT array_agg(e.id ORDER BY e.created_at, e.id) FROM harvest.executions e WHERE e.workflow_name = 'op_wf'),
          'three pages hold every run once, in order');
SELECT is((SELECT count(*) FROM page3 WHERE next_cursor IS NOT NULL), 0::bigint, 'the last page has no cursor');

SELECT is((harvest.get_execution_stack((SELECT id FROM runs WHERE n = 1)) ->> 'status'), 'RUNNING',
          'stack reports the status');
SELECT throws_ok(format('SELECT harvest.get_execution_stack(%L)', gen_random_uuid()), 'HR002', NULL,
                 'stack of an unknown execution is not found');

-- The helpers, directly.
SELECT is((SELECT id FROM harvest._decode_cursor(harvest._encode_cursor('2030-01-01 00:00:00+00',
           '00000000-0000-0000-0000-000000000001'))), '00000000-0000-0000-0000-000000000001'::uuid,
          'a cursor round-trips');
SELECT is(harvest._parse_search_filter('amount >= 10'), '{"key": "amount", "op": ">=", "value": "10"}'::jsonb,
          'a filter parses into key, operator and value');
SELECT ok(harvest._search_predicate('{"key": "a", "op": "=", "value": "x''y"}') LIKE '%''x''''y''%',
          'predicate literals are quoted');
SELECT is(harvest._try_timestamptz('not a time'), NULL, 'an unparseable time compares as NULL');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant!=acme', 'amount<5'])), 2::bigint, 'typed != and <');

-- One key holding booleans, numbers and strings across runs: each typed filter
-- matches its own type and never casts another (whatever order the planner picks).
SELECT harvest.start_workflow('mix_wf', '[]', 'mix-' || n, 'mix_q',
                              p_search_attributes => jsonb_build_object('flag', v))
FROM (VALUES (1, 'true'::jsonb), (2, '5'), (3, '"yes"'), (4, 'false'), (5, '7.5'), (6, '"5"'), (7, 'null'))
    AS m (n, v);
CREATE TEMP TABLE mixed ON COMMIT DROP AS
SELECT f.filter, (SELECT array_agg(l.workflow_id ORDER BY l.workflow_id)
                  FROM harvest.list_executions(p_workflow_name => 'mix_wf',
                                               p_search_attributes => ARRAY[f.filter]) AS l) AS ids
FROM unnest(ARRAY['flag=true', 'flag!=false', 'flag>3', 'flag=5', 'flag!=5', 'flag<6', 'flag=yes',
                  'flag>=x']) AS f (filter);
SELECT results_eq($$SELECT filter, ids FROM mixed$$,
    $$VALUES ('flag=true'::text, ARRAY['mix-1']), ('flag!=false', ARRAY['mix-1']),
             ('flag>3', ARRAY['mix-2', 'mix-5']), ('flag=5', ARRAY['mix-2', 'mix-6']),
             ('flag!=5', ARRAY['mix-5']), ('flag<6', ARRAY['mix-2']), ('flag=yes', ARRAY['mix-3']),
             ('flag>=x', ARRAY['mix-3'])$$,
    'typed filters over a key of mixed JSON types: each matches its own type, none fails a cast');
SELECT lives_ok($$SELECT * FROM harvest.list_executions(p_status => 'RUNNING',
                      p_search_attributes => ARRAY['flag=true', 'flag>1', 'flag!=false'])$$,
                'several typed filters of one mixed key compose without a cast error');

SELECT * FROM finish();
ROLLBACK;

-- harvest.wait_for_result, harvest.stop_waiting_for_result, and the
-- waiter marks _close_execution consumes (it notifies harvest_done only for them).
BEGIN;
SELECT plan(8);

CREATE TEMP TABLE runs (key text PRIMARY KEY, execution_id uuid) ON COMMIT DROP;
INSERT INTO runs SELECT 'a', execution_id FROM harvest.start_workflow('res_wf', '[]', 'res-a');
INSERT INTO runs SELECT 'b', execution_id FROM harvest.start_workflow('res_wf', '[]', 'res-b');
CREATE FUNCTION pg_temp.run(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT execution_id FROM runs WHERE key = p_key;
$fn$;

SELECT is((harvest.wait_for_result(pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a1')).status,
          'RUNNING', 'wait_for_result() returns the run as it is');
SELECT is((SELECT count(*) FROM harvest.result_waiters WHERE execution_id = pg_temp.run('a')), 1::bigint,
          'and marks the waiter');
SELECT lives_ok($$SELECT harvest.wait_for_result(pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a1')$$,
                'waiting again is idempotent');
SELECT is((SELECT count(*) FROM harvest.result_waiters), 1::bigint, 'one mark per waiter and run');
SELECT throws_ok($$SELECT harvest.wait_for_result(gen_random_uuid(), gen_random_uuid())$$, 'HR002', NULL,
                 'an unknown run: HR002');

-- Closing the run consumes its marks (and notifies, which pgTAP cannot observe).
SELECT harvest.terminate_workflow(pg_temp.run('a'), 'done');
SELECT is((SELECT count(*) FROM harvest.result_waiters WHERE execution_id = pg_temp.run('a')), 0::bigint,
          'a closed run has no waiter marks left');
SELECT is((harvest.wait_for_result(pg_temp.run('a'), gen_random_uuid())).status, 'TERMINATED',
          'waiting on a finished run answers at once and marks nothing');

SELECT harvest.wait_for_result(pg_temp.run('b'), '00000000-0000-0000-0000-0000000000b1');
SELECT harvest.stop_waiting_for_result('00000000-0000-0000-0000-0000000000b1');
SELECT is((SELECT count(*) FROM harvest.result_waiters), 0::bigint, 'stop_waiting_for_result() drops the waiter''s marks');

SELECT * FROM finish();
ROLLBACK;
