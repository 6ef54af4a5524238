-- functions/scanner.sql: harvest.scan, the scanner pass every worker runs on a timer:
-- one call runs each domain's sweep (expire_tasks, expire_workflows, deliver_relays,
-- grant_mutexes, release_pending_starts, _repace_rate_buckets) and reports what moved.
BEGIN;
SELECT plan(5);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(harvest.scan(10)) AS k),
          ARRAY['expired_tasks', 'mutex_grants', 'relays_delivered', 'starts_released', 'tasks_repaced',
                'timed_out_workflows'],
          'scan() reports every step');
SELECT is(jsonb_typeof(harvest.scan(10) -> 'expired_tasks'), 'array', 'scan() lists the expired tasks');

-- A workflow task claimed with a 30 s lease, and a run with a 1 s run timeout; 31 s later
-- one pass moves both.
SELECT pg_temp.start_claimed('lease', 'scan_wf', 'sc_lease');
SELECT harvest.start_workflow('scan_wf', '[]', 'late', 'sc_late', p_run_timeout_secs => 1);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
CREATE TEMP TABLE pass ON COMMIT DROP AS SELECT harvest.scan(10) AS moved;
SELECT is((SELECT jsonb_path_query_array(moved, '$.expired_tasks[*].task_id') FROM pass),
          jsonb_build_array(pg_temp.task('lease')), 'scan() runs expire_tasks: the expired lease is listed');
SELECT is((SELECT (moved ->> 'timed_out_workflows')::integer FROM pass), 1,
          'scan() runs expire_workflows: the run past its timeout is counted');
SELECT is((SELECT harvest.scan(10) - 'expired_tasks' || jsonb_build_object('n', jsonb_array_length(
               harvest.scan(10) -> 'expired_tasks')))::text,
          '{"n": 0, "mutex_grants": 0, "tasks_repaced": 0, "starts_released": 0, "relays_delivered": 0, "timed_out_workflows": 0}',
          'a second pass finds nothing left to move');

SELECT * FROM finish();
ROLLBACK;
