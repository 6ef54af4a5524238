-- functions/retention.sql: set_retention, retention_status, run_retention.
BEGIN;
SELECT plan(9);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE TEMP TABLE rt ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('rt_wf', '[]', 'rt-' || n, 'rt_q')).execution_id AS id
FROM generate_series(1, 4) AS n;
SELECT harvest.terminate_workflow(id, 'old') FROM rt WHERE n <= 3;
UPDATE harvest.executions SET completed_at = '2029-01-01' WHERE id IN (SELECT id FROM rt WHERE n <= 3);
UPDATE harvest.executions SET created_at = '2028-01-01' WHERE id = (SELECT id FROM rt WHERE n = 4);

SELECT throws_ok($$SELECT harvest.run_retention()$$, 'HR001', NULL, 'not configured: refused');
SELECT throws_ok($$SELECT harvest.set_retention('-1 day')$$, 'HR001', NULL, 'a negative age is refused');
SELECT is((harvest.set_retention('30 days', 2) ->> 'eligible')::int, 3, 'status counts eligible runs');
SELECT is((harvest.run_retention() ->> 'deleted')::int, 2, 'one batch at most');
SELECT is((harvest.run_retention() ->> 'remaining')::int, 0, 'the next batch takes the rest');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'rt_wf'), 1::bigint,
          'only the running one is left');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_name = 'rt_wf'), 'RUNNING',
          'a running execution is never deleted, however old');
SELECT is((SELECT count(*) FROM harvest.events e JOIN rt ON rt.id = e.execution_id WHERE rt.n <= 3), 0::bigint,
          'events go with their execution');
SELECT ok((harvest.retention_status() ->> 'last_run_at') IS NOT NULL, 'the last run is recorded');

SELECT * FROM finish();
ROLLBACK;
