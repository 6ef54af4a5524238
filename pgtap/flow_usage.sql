-- functions/flow_usage.sql: harvest.count_usage.
BEGIN;
SELECT plan(11);
SET LOCAL harvest.fake_now = '2030-03-01 00:00:00+00';
CREATE TEMP TABLE u ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('wf_u', '[]', 'u' || n, 'uq',
    p_search_attributes => CASE WHEN n < 3 THEN jsonb_build_object('tenant', 'acme') ELSE '{}' END)).execution_id
FROM generate_series(1, 3) AS n;
-- run 1 schedules an activity, which completes 10 s later; run 2 fails; run 3 is terminated
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w', ARRAY['uq'], 10);
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, CASE u.n WHEN 1 THEN
    '[{"type": "schedule_activity", "seq": 1, "name": "a", "input": [], "options": {}}]'::jsonb
    ELSE '[{"type": "fail_workflow", "failure": {"message": "no"}}]' END)
FROM c JOIN u ON u.execution_id = c.execution_id WHERE u.n < 3;
SELECT set_config('harvest.fake_now', '2030-03-01 00:00:10+00', true);
SELECT harvest.complete_activity(c.task_id, c.fencing_token, '1')
FROM harvest.claim_tasks('w', ARRAY['uq'], 10) AS c WHERE c.kind = 'activity';
SELECT harvest.terminate_workflow(execution_id, 'x') FROM u WHERE n = 3;

SELECT results_eq($$SELECT group_name, workflow_starts, completed, failed, cancelled, timed_out,
                           activity_executions, activity_executions_failed, activity_span_seconds
                    FROM harvest.count_usage('2030-03-01', '2030-03-02')$$,
    $$VALUES ('wf_u'::text, 3::bigint, 0::bigint, 1::bigint, 0::bigint, 0::bigint, 1::bigint, 0::bigint, 10::double precision)$$,
    'count_usage(): by workflow name, from the events');
SELECT results_eq($$SELECT group_name, workflow_starts, failed FROM harvest.count_usage('2030-03-01', '2030-03-02', 'search_attr:tenant')$$,
    $$VALUES ('(unattributed)'::text, 1::bigint, 0::bigint), ('acme', 2, 1)$$,
    'by a search attribute; runs without it are (unattributed)');
SELECT is_empty($$SELECT * FROM harvest.count_usage('2030-03-02', '2030-03-03')$$, 'a window with no events is empty');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01')$$, 'HR001', NULL,
                 'a window wider than 90 days is refused');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01', 'workflow_name', interval '200 days')$$,
                 'HR001', 'usage report: the window 2030-01-01 00:00:00+00 .. 2030-06-01 00:00:00+00 (5 mons 1 day) '
                          'is wider than the ceiling of 90 days',
                 'a caller cannot lift the ceiling with p_max_window');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01', 'workflow_name', interval '10000 days')$$,
                 'HR001', NULL, 'nor can a harvest_reader (the issue''s report)');
RESET ROLE;
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-01', '2030-03-02', 'workflow_name', interval '1 hour')$$,
                 'HR001', NULL, 'a caller may ask for a narrower ceiling');
UPDATE harvest.engine_settings SET usage_max_window = interval '200 days';
SELECT lives_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01')$$,
                'the owner sets the server''s ceiling (engine_settings.usage_max_window)');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01', 'workflow_name', interval '90 days')$$,
                 'HR001', NULL, 'and a caller may still narrow it');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-02', '2030-03-01')$$, 'HR001', NULL, 'to before from');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-01', '2030-03-02', 'tenant')$$, 'HR001', NULL,
                 'an unknown group_by');
SELECT * FROM finish();
ROLLBACK;
