-- functions/executions.sql: harvest.get_execution, harvest.get_history,
-- harvest.terminate_workflow.
BEGIN;
SELECT plan(22);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE TEMP TABLE run ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('ex_wf', '[7]', 'ex-1', 'ex_q');
CREATE FUNCTION pg_temp.run() RETURNS uuid LANGUAGE sql AS $fn$ SELECT execution_id FROM run $fn$;

-- get_execution
SELECT results_eq(
    $$SELECT id, workflow_name, workflow_id, status, task_queue, input FROM harvest.get_execution(pg_temp.run())$$,
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
