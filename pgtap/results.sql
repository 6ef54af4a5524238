-- functions/results.sql: harvest.wait_for_result, harvest.stop_waiting, and the
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
SELECT harvest.stop_waiting('00000000-0000-0000-0000-0000000000b1');
SELECT is((SELECT count(*) FROM harvest.result_waiters), 0::bigint, 'stop_waiting() drops the waiter''s marks');

SELECT * FROM finish();
ROLLBACK;
