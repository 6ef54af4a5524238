-- functions/timeouts.sql: harvest.expire_tasks — workflow task leases, activity
-- StartToCloseTimeout / HeartbeatTimeout, schedule_to_close deadlines, the bound —
-- and harvest.expire_workflows; then (a second transaction) harvest.expire_lost_workers, whose
-- rows harvest._expire_attempt makes as it makes expire_tasks'. The scanner pass that runs them is
-- pgtap/scanner.sql.
BEGIN;
SELECT plan(56);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- A workflow task claimed by worker-w (lease 30 s) and activities claimed by
-- worker-a (or left pending), each run of to_wf on a queue of its own (wq_<key>).
CREATE FUNCTION pg_temp.workflow(p_key text) RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_claimed(p_key, 'to_wf', 'wq_' || p_key, 'worker-w');
$fn$;
CREATE FUNCTION pg_temp.act(p_key text, p_options jsonb, p_claim boolean DEFAULT true)
RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_activity(p_key, 'to_wf', 'wq_' || p_key, 'act_' || p_key, 'aq_' || p_key,
                                  p_options => p_options, p_claim => p_claim);
$fn$;
-- expire_tasks() once; its rows kept in `swept` for the assertions that follow.
CREATE TEMP TABLE swept (
    task_id bigint, kind text, outcome text, workflow_type text, activity text, error_type text,
    execution_id uuid, attempt integer
) ON COMMIT DROP;
CREATE FUNCTION pg_temp.sweep(p_limit integer DEFAULT 100) RETURNS bigint LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM swept;
    INSERT INTO swept SELECT * FROM harvest.expire_tasks(p_limit);
    RETURN (SELECT count(*) FROM swept);
END;
$fn$;

SELECT pg_temp.workflow('wf');
SELECT pg_temp.act('s2c', '{"start_to_close": 10}');
SELECT pg_temp.act('hb', '{"start_to_close": 60, "heartbeat_timeout": 10}');
SELECT pg_temp.act('hb_beat', '{"start_to_close": 60, "heartbeat_timeout": 10}');
SELECT pg_temp.act('hb_s2c', '{"start_to_close": 20, "heartbeat_timeout": 10}');
SELECT pg_temp.act('last', '{"start_to_close": 10, "retry": {"max_attempts": 1}}');
SELECT pg_temp.act('last_nodl', '{"start_to_close": 10, "dead_letter": false, "retry": {"max_attempts": 1}}');
SELECT pg_temp.act('deadline', '{"schedule_to_close": 45, "start_to_close": 100}');
SELECT pg_temp.act('deadline_pending', '{"schedule_to_close": 45}', false);
SELECT pg_temp.act('deadline_nodl', '{"schedule_to_close": 45, "start_to_close": 100, "dead_letter": false}');

SELECT is(pg_temp.sweep(), 0::bigint, 'expire_tasks(): nothing expired, nothing done');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';
SELECT is(pg_temp.sweep(), 0::bigint, 'a lease that ends now has not expired yet');

-- Heartbeats keep hb_beat alive; hb_s2c heartbeats up to its start_to_close.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb_beat'), pg_temp.token('hb_beat')), false, 'setup: hb_beat heartbeats');
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb_s2c'), pg_temp.token('hb_s2c')), false, 'setup: hb_s2c heartbeats');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:14+00';
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb_s2c'), pg_temp.token('hb_s2c')), false,
          'setup: hb_s2c heartbeats again (its lease is now capped at start_to_close, 20 s)');

-- 10.5 s: the 10 s leases of s2c, hb, last and last_nodl have expired.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10.5+00';
SELECT is(pg_temp.sweep(), 4::bigint, 'expire_tasks() handles the four expired activity leases');
SELECT results_eq($$SELECT kind, outcome FROM swept WHERE task_id = pg_temp.task('s2c')$$,
                  $$VALUES ('activity'::text, 'retry_scheduled'::text)$$,
                  'an expired activity attempt is retried per its policy');
SELECT results_eq(
    $$SELECT status, attempt, lease_owner, due_at, last_failure ->> 'error_type',
             (last_failure ->> 'non_retryable')::boolean, last_failure ->> 'message'
      FROM harvest.tasks WHERE id = pg_temp.task('s2c')$$,
    $$VALUES ('pending'::text, 1, NULL::text, '2030-01-01 00:00:11.5+00'::timestamptz, 'StartToCloseTimeout'::text,
              false, 'attempt 1 of act_s2c held by worker-a timed out (StartToCloseTimeout)'::text)$$,
    'start_to_close passed: StartToCloseTimeout, retryable, the attempt counted once, retried after the backoff');
SELECT is((SELECT last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('hb')), 'HeartbeatTimeout',
          'no heartbeat within heartbeat_timeout: HeartbeatTimeout');
SELECT results_eq($$SELECT workflow_type, activity, error_type FROM swept
                    WHERE task_id IN (pg_temp.task('s2c'), pg_temp.task('hb')) ORDER BY task_id$$,
                  $$VALUES ('to_wf'::text, 'act_s2c'::text, 'StartToCloseTimeout'::text),
                           ('to_wf', 'act_hb', 'HeartbeatTimeout')$$,
                  'each expired attempt names its workflow_type, activity and error_type (the scanner counts them)');
SELECT results_eq($$SELECT execution_id, attempt FROM swept
                    WHERE task_id IN (pg_temp.task('s2c'), pg_temp.task('hb')) ORDER BY task_id$$,
                  $$VALUES (pg_temp.run('s2c'), 1), (pg_temp.run('hb'), 1)$$,
                  'each expired attempt names its run and attempt (the scanner logs them)');
SELECT results_eq($$SELECT outcome FROM swept WHERE task_id IN (pg_temp.task('last'), pg_temp.task('last_nodl'))
                    ORDER BY task_id$$,
                  ARRAY['dead_lettered', 'failed'],
                  'an expired last attempt: dead-lettered, or failed with dead_letter=false');
SELECT is((SELECT failure ->> 'error_type' FROM harvest.dead_letters WHERE execution_id = pg_temp.run('last')),
          'StartToCloseTimeout', 'the dead letter keeps the timeout failure');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'seq', event_data -> 'failure' ->> 'error_type', event_data ->> 'attempt'
      FROM harvest.events WHERE execution_id = pg_temp.run('last_nodl') ORDER BY event_id DESC LIMIT 1$$,
    $$VALUES ('ActivityFailed'::text, '1'::text, 'StartToCloseTimeout'::text, '1'::text)$$,
    'dead_letter=false: the workflow receives ActivityFailed with the timeout');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.task('hb_beat')), 'running',
          'an activity that heartbeats keeps its lease');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('s2c'), pg_temp.token('s2c')),
                 'HR004', NULL, 'the timed-out attempt can no longer complete: HR004');

-- 15.5 s: hb_beat missed its next heartbeat (due by 15 s).
SET LOCAL harvest.fake_now = '2030-01-01 00:00:15.5+00';
SELECT is(pg_temp.sweep(), 1::bigint, 'expire_tasks() at 15.5 s: one more');
SELECT results_eq($$SELECT task_id, outcome FROM swept$$,
                  $$SELECT pg_temp.task('hb_beat'), 'retry_scheduled'::text$$, 'hb_beat expired');
SELECT is((SELECT last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('hb_beat')),
          'HeartbeatTimeout', 'a missed heartbeat after earlier ones: HeartbeatTimeout');

-- 20.5 s: hb_s2c heartbeated at 14 s, but start_to_close (20 s) ended first.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:20.5+00';
SELECT is(pg_temp.sweep(), 1::bigint, 'expire_tasks() at 20.5 s: one more');
SELECT is((SELECT last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('hb_s2c')),
          'StartToCloseTimeout', 'heartbeats cannot outlive start_to_close: StartToCloseTimeout');

-- 31 s: the workflow task's 30 s lease expired: back to pending, nothing counted as failed.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT is(pg_temp.sweep(), 1::bigint, 'expire_tasks() at 31 s: the workflow task');
SELECT results_eq($$SELECT task_id, kind, outcome FROM swept$$,
                  $$SELECT pg_temp.task('wf'), 'workflow'::text, 'released'::text$$,
                  'an expired workflow task is released');
SELECT results_eq($$SELECT workflow_type, activity, error_type FROM swept$$,
                  $$VALUES ('to_wf'::text, NULL::text, NULL::text)$$,
                  'a released workflow task names its workflow_type and no error_type: no attempt failed');
SELECT results_eq(
    $$SELECT status, lease_owner, lease_expires_at, due_at, attempt FROM harvest.tasks WHERE id = pg_temp.task('wf')$$,
    $$VALUES ('pending'::text, NULL::text, NULL::timestamptz, '2030-01-01 00:00:31+00'::timestamptz, 1)$$,
    'the released workflow task is pending and due now');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('wf')), 1::bigint,
          'releasing a workflow task writes no event');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('wf'), pg_temp.token('wf')), 'HR004', NULL,
                 'the crashed decider cannot complete it any more: HR004');
SELECT results_eq($$SELECT task_id, attempt FROM harvest.claim_tasks('worker-x', ARRAY['wq_wf'])$$,
                  $$SELECT pg_temp.task('wf'), 2$$, 'another worker claims it');

-- 46 s: schedule_to_close (45 s) passed: ScheduleToCloseTimeout, running or pending, no retry.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:46+00';
SELECT is(pg_temp.sweep(), 3::bigint, 'expire_tasks() at 46 s: the three past their deadline');
SELECT results_eq(
    $$SELECT outcome FROM swept WHERE task_id IN (pg_temp.task('deadline'), pg_temp.task('deadline_pending'),
                                                   pg_temp.task('deadline_nodl')) ORDER BY task_id$$,
    ARRAY['dead_lettered', 'dead_lettered', 'failed'],
    'past the deadline: dead-lettered (running or pending), or failed with dead_letter=false');
SELECT results_eq($$SELECT DISTINCT workflow_type, error_type FROM swept$$,
                  $$VALUES ('to_wf'::text, 'ScheduleToCloseTimeout'::text)$$,
                  'past the deadline: each row names the ScheduleToCloseTimeout it failed with');
SELECT results_eq(
    $$SELECT failure ->> 'error_type', (failure ->> 'non_retryable')::boolean, failure ->> 'message', attempts
      FROM harvest.dead_letters WHERE execution_id = pg_temp.run('deadline')$$,
    $$VALUES ('ScheduleToCloseTimeout'::text, true,
              'activity act_deadline did not finish within its schedule_to_close of 45s'::text, 1)$$,
    'ScheduleToCloseTimeout is non-retryable and names the activity and the limit');
SELECT is((SELECT attempts FROM harvest.dead_letters WHERE execution_id = pg_temp.run('deadline_pending')), 0,
          'a pending activity that never ran is dead-lettered with 0 attempts');
SELECT is((SELECT event_data -> 'failure' ->> 'error_type' FROM harvest.events
           WHERE execution_id = pg_temp.run('deadline_nodl') ORDER BY event_id DESC LIMIT 1),
          'ScheduleToCloseTimeout', 'dead_letter=false: ActivityFailed with ScheduleToCloseTimeout');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE kind = 'activity'
                  AND id IN (pg_temp.task('deadline'), pg_temp.task('deadline_pending'), pg_temp.task('deadline_nodl'))$$,
                'the activities past their deadline are gone');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('deadline'), pg_temp.token('deadline')),
                 'HR004', NULL, 'the running attempt past its deadline can no longer complete: HR004');

-- A retry that would start past the deadline is not made: the expired lease is final.
SET LOCAL harvest.fake_now = '2030-01-01 01:00:00+00';
SELECT is(pg_temp.sweep(), 1::bigint, 'later the re-claimed workflow task expires too');
SELECT pg_temp.act('tight', '{"schedule_to_close": 12, "start_to_close": 10, "retry": {"initial_interval": 5}}');
SET LOCAL harvest.fake_now = '2030-01-01 01:00:10.5+00';
SELECT is(pg_temp.sweep(), 1::bigint, 'expire_tasks(): the tight activity''s lease expired');
SELECT is((SELECT outcome FROM swept), 'dead_lettered', 'its retry would start after the deadline: dead-lettered');

-- The bound: at most p_limit tasks per call.
SET LOCAL harvest.fake_now = '2030-01-01 02:00:00+00';
SELECT pg_temp.workflow('bound1');
SELECT pg_temp.workflow('bound2');
SELECT pg_temp.workflow('bound3');
SET LOCAL harvest.fake_now = '2030-01-01 02:01:00+00';
SELECT is(pg_temp.sweep(2), 2::bigint, 'expire_tasks(2) handles two of three expired leases');
SELECT is(pg_temp.sweep(2), 1::bigint, 'the next call handles the third');

-- The bound covers lease expiries and deadlines together.
SET LOCAL harvest.fake_now = '2030-01-01 03:00:00+00';
SELECT pg_temp.workflow('mixed_lease');
SELECT pg_temp.act('mixed_deadline', '{"schedule_to_close": 5}', false);
SET LOCAL harvest.fake_now = '2030-01-01 03:01:00+00';
SELECT is(pg_temp.sweep(1), 1::bigint, 'expire_tasks(1) with an expired lease and a passed deadline handles one task');

-- expire_workflows: runs past their run or execution timeout end TIMED_OUT.
SET LOCAL harvest.fake_now = '2030-01-01 04:00:00+00';
CREATE TEMP TABLE timed (key text PRIMARY KEY, execution_id uuid) ON COMMIT DROP;
INSERT INTO timed SELECT 'run', execution_id
FROM harvest.start_workflow('to_timed', '[]', 'run', p_run_timeout_secs => 60);
INSERT INTO timed SELECT 'execution', execution_id
FROM harvest.start_workflow('to_timed', '[]', 'execution', p_execution_timeout_secs => 30, p_run_timeout_secs => 100);
INSERT INTO timed SELECT 'none', execution_id FROM harvest.start_workflow('to_timed', '[]', 'none');
SET LOCAL harvest.fake_now = '2030-01-01 04:00:30+00';
SELECT is(harvest.expire_workflows(), 0, 'expire_workflows(): a timeout that ends now has not passed');
SET LOCAL harvest.fake_now = '2030-01-01 04:01:01+00';
SELECT is(harvest.expire_workflows(), 2, 'expire_workflows() ends the two runs past their timeouts');
SELECT results_eq(
    $$SELECT t.key, e.status, e.failure ->> 'error_type', e.completed_at FROM timed AS t
      JOIN harvest.executions AS e ON e.id = t.execution_id ORDER BY t.key$$,
    $$VALUES ('execution'::text, 'TIMED_OUT'::text, 'WorkflowTimedOut'::text, '2030-01-01 04:01:01+00'::timestamptz),
             ('none', 'RUNNING', NULL, NULL),
             ('run', 'TIMED_OUT', 'WorkflowTimedOut', '2030-01-01 04:01:01+00')$$,
    'timed-out runs are TIMED_OUT with a WorkflowTimedOut failure; a run without timeouts runs on');
SELECT results_eq(
    $$SELECT t.key, ev.event_type, ev.event_data FROM timed AS t
      JOIN LATERAL (SELECT * FROM harvest.events AS ev WHERE ev.execution_id = t.execution_id
                    ORDER BY ev.event_id DESC LIMIT 1) AS ev ON true
      WHERE t.key <> 'none' ORDER BY t.key$$,
    $$VALUES ('execution'::text, 'WorkflowTimedOut'::text, '{"timeout": "execution"}'::jsonb),
             ('run', 'WorkflowTimedOut', '{"timeout": "run"}')$$,
    'WorkflowTimedOut{timeout} names which timeout passed');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id IN (SELECT execution_id FROM timed WHERE key <> 'none')$$,
                'a timed-out run keeps no task');
INSERT INTO timed SELECT 'bound' || i, s.execution_id
FROM generate_series(1, 2) AS i, harvest.start_workflow('to_timed', '[]', 'bound' || i, p_run_timeout_secs => 1) AS s;
SET LOCAL harvest.fake_now = '2030-01-01 04:01:03+00';
SELECT is(harvest.expire_workflows(1), 1, 'expire_workflows(1) ends one run per call');
SELECT is(harvest.expire_workflows(1), 1, 'the next call ends the other');

-- heartbeat_workflow_task: a workflow task its worker still decides keeps its lease.
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
SELECT pg_temp.workflow('kept');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:20+00';
SELECT is(harvest.heartbeat_workflow_task(pg_temp.task('kept'), pg_temp.token('kept'), 30), true,
          'heartbeat_workflow_task(): the claim''s worker extends its running workflow task ...');
SELECT is((SELECT lease_expires_at FROM harvest.tasks WHERE id = pg_temp.task('kept')),
          '2030-01-02 00:00:50+00'::timestamptz, '... to now + the lease');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:40+00';
SELECT is((SELECT count(*) FROM harvest.expire_tasks() AS x WHERE x.task_id = pg_temp.task('kept')), 0::bigint,
          'past the claim''s 30 s, the scanner leaves the extended task');
SELECT is(harvest.heartbeat_workflow_task(pg_temp.task('kept'), pg_temp.token('kept') + 1, 30), false,
          'another fencing token extends nothing');
SELECT is(harvest.heartbeat_workflow_task(pg_temp.task('s2c'), pg_temp.token('s2c'), 30), false,
          'an activity task is not a workflow task (heartbeat_activity extends those)');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:51+00';
SELECT is(harvest.heartbeat_workflow_task(pg_temp.task('kept'), pg_temp.token('kept'), 30), false,
          'a lease that ran out is not revived (the scanner may have released the task)');
SELECT throws_ok(format($$SELECT harvest.heartbeat_workflow_task(%s, %s, 0)$$,
                        pg_temp.task('kept'), pg_temp.token('kept')), 'HR001', NULL,
                 'a lease out of 0.1 to 86400 s is refused (HR001)');

SELECT * FROM finish();
ROLLBACK;

-- harvest.expire_lost_workers: a worker silent past its lost_after_secs (default 6 x its
-- heartbeat interval) has its running activities fail that attempt with WorkerLost and its
-- workflow tasks go back to pending, long before their leases; a late completion under the old
-- claim's fencing token is refused; the sweep is bounded; a worker that heartbeats is kept.
BEGIN;
SELECT plan(30);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.register_worker('lw-dead', ARRAY['lq'], 'h', 1, 5);
SELECT harvest.register_worker('lw-live', ARRAY['lq'], 'h', 2, 5);
SELECT harvest.register_worker('lw-many', ARRAY['lq'], 'h', 3, 5, '{}', 20);
SELECT pg_temp.start_activity('lw_act', 'lw_wf', 'lwq_act', 'lw_a', 'laq_act',
                              p_options => '{"start_to_close": 600}', p_worker => 'lw-dead');
SELECT pg_temp.start_activity('lw_live', 'lw_wf', 'lwq_live', 'lw_a', 'laq_live',
                              p_options => '{"start_to_close": 600}', p_worker => 'lw-live');
SELECT pg_temp.start_claimed('lw_wft', 'lw_wf', 'lwq_wft', 'lw-dead', p_lease_secs => 600);
SELECT pg_temp.start_activity('lw_m' || i, 'lw_wf', 'lwq_m' || i, 'lw_a', 'laq_m' || i,
                              p_options => '{"start_to_close": 600}', p_worker => 'lw-many')
FROM generate_series(1, 3) AS i;
CREATE TEMP TABLE lost ON COMMIT DROP AS SELECT * FROM harvest.expire_lost_workers() WHERE false;
CREATE FUNCTION pg_temp.sweep_lost(p_limit integer DEFAULT 100) RETURNS bigint LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM lost;
    INSERT INTO lost SELECT * FROM harvest.expire_lost_workers(p_limit);
    RETURN (SELECT count(*) FROM lost);
END;
$fn$;

SELECT results_eq($$SELECT lost_after_secs, lost_at FROM harvest.workers WHERE id IN ('lw-dead', 'lw-many') ORDER BY id$$,
                  $$VALUES (30::double precision, '2030-01-01 00:00:30+00'::timestamptz),
                           (20, '2030-01-01 00:00:20+00')$$,
                  'register_worker(): lost 6 x the heartbeat interval after its last heartbeat, or after the bound it names');
SELECT throws_ok($$SELECT harvest.register_worker('lw-x', ARRAY['lq'], 'h', 4, 5, '{}', 14.9)$$, 'HR001',
                 'lost_after_secs 14.9 is out of range for a heartbeat interval of 5 s',
                 'a bound under 3 x the heartbeat interval is refused (HR001)');

SET LOCAL harvest.fake_now = '2030-01-01 00:00:25+00';
SELECT is(harvest.heartbeat_worker('lw-live'), 'active', 'setup: lw-live heartbeats at 25 s');
SELECT is(harvest.heartbeat_worker('lw-many'), 'active', 'setup: lw-many heartbeats at 25 s');
SELECT is((SELECT lost_at FROM harvest.workers WHERE id = 'lw-live'), '2030-01-01 00:00:55+00'::timestamptz,
          'heartbeat_worker() moves lost_at to lost_after_secs from now');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:30+00';
SELECT is(pg_temp.sweep_lost(), 0::bigint, 'expire_lost_workers(): a worker whose lost_at is now is not lost yet');

SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT is(jsonb_array_length(harvest.scan(100, 0) -> 'expired_tasks'), 0,
          'scan(p_scanned_secs => 0) leaves lost workers alone (a worker whose own scans just came back) ...');
SELECT is(jsonb_array_length(harvest.scan(100, 29.9) -> 'expired_tasks'), 0,
          '... and so does a scanner whose scans have answered for less than the lost worker''s lost_after (30 s) ...');
SELECT throws_ok($$SELECT harvest.expire_lost_workers(100, -1)$$, 'HR001', 'scanned_secs -1 is out of range',
                 'expire_lost_workers(): a negative p_scanned_secs is refused (HR001)');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE id IN (pg_temp.task('lw_act'), pg_temp.task('lw_wft'))$$,
                  $$VALUES ('running'::text, 'lw-dead'::text), ('running', 'lw-dead')$$,
                  '... their tasks still running');
SELECT is(pg_temp.sweep_lost(), 2::bigint, 'at 31 s lw-dead is lost (no bound on the scans): its two tasks come back, 9.5 minutes before their leases');
SELECT results_eq($$SELECT kind, outcome, activity, error_type, attempt FROM lost ORDER BY kind$$,
                  $$VALUES ('activity'::text, 'retry_scheduled'::text, 'lw_a'::text, 'WorkerLost'::text, 1),
                           ('workflow', 'released', NULL, 'WorkerLost', 1)$$,
                  'the activity fails its attempt with WorkerLost and retries; the workflow task is released (WorkerLost: the scanner logs why)');
SELECT results_eq($$SELECT status, lease_owner, last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('lw_act')$$,
                  $$VALUES ('pending'::text, NULL::text, 'WorkerLost'::text)$$,
                  'the activity task waits for its retry with the failure WorkerLost');
SELECT matches((SELECT last_failure ->> 'message' FROM harvest.tasks WHERE id = pg_temp.task('lw_act')),
               '^attempt 1 of lw_a held by lw-dead was lost \(WorkerLost: no worker heartbeat since 2030-01-01T00:00:00\+00:00, lost after 30 s\)$',
               'its message names the worker, its last heartbeat and the bound');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE id = pg_temp.task('lw_wft')$$,
                  $$VALUES ('pending'::text, NULL::text)$$, 'the workflow task is pending again');
SELECT is((SELECT lost_at FROM harvest.workers WHERE id = 'lw-dead'), NULL, 'the lost worker is marked done ...');
SELECT is(pg_temp.sweep_lost(), 0::bigint, '... so the next pass does nothing');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.task('lw_live')), 'running',
          'the worker that heartbeated keeps its activity');

-- Fencing: the lost worker comes back and reports; its claim's token is no longer the task's.
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, '"late"')$$, pg_temp.task('lw_act'), pg_temp.token('lw_act')),
                 'HR004', NULL, 'a late completion from the lost worker is refused (HR004) ...');
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT is((SELECT count(*) FROM harvest.claim_tasks('lw-live', ARRAY['laq_act'], 1)), 1::bigint,
          'setup: lw-live claims the retry (attempt 2)');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, '"late"')$$, pg_temp.task('lw_act'), pg_temp.token('lw_act')),
                 'HR004', NULL, '... and after another worker claimed the retry');
SELECT throws_ok(format($$SELECT harvest.heartbeat_activity(%s, %s)$$, pg_temp.task('lw_act'), pg_temp.token('lw_act')),
                 'HR004', NULL, 'so is its heartbeat');
SELECT results_eq($$SELECT status, lease_owner, attempt FROM harvest.tasks WHERE id = pg_temp.task('lw_act')$$,
                  $$VALUES ('running'::text, 'lw-live'::text, 2)$$, 'the new attempt is untouched');

-- The bound: lw-many (lost at 45 s, its last heartbeat at 25 s) holds three activities.
SET LOCAL harvest.fake_now = '2030-01-01 00:02:10+00';
SELECT is(harvest.heartbeat_worker('lw-live'), 'active', 'setup: lw-live heartbeats');
SELECT is(pg_temp.sweep_lost(2), 2::bigint, 'expire_lost_workers(2) takes two of lw-many''s three activities ...');
SELECT isnt((SELECT lost_at FROM harvest.workers WHERE id = 'lw-many'), NULL, '... and keeps watching it');
SELECT is((SELECT jsonb_array_length(harvest.scan() -> 'expired_tasks')), 1, 'scan() takes the third, as expired_tasks');
SELECT is((SELECT lost_at FROM harvest.workers WHERE id = 'lw-many'), NULL, 'then lw-many is done');
SELECT is(harvest.stop_worker('lw-live'), 2, 'setup: lw-live stops (releasing its two activities)');
SELECT is((SELECT lost_at FROM harvest.workers WHERE id = 'lw-live'), NULL, 'a stopped worker is never lost');

SELECT * FROM finish();
ROLLBACK;

-- harvest._take_back_worker_tasks (register_worker's, when another process registers the id):
-- every task the id holds comes back now, an activity's attempt failing with WorkerLost and a
-- workflow task released; another worker's tasks are not touched; an id holding none, no rows.
BEGIN;
SELECT plan(4);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.start_activity('tb_act', 'tb_wf', 'tbq_act', 'tb_a', 'tbaq',
                              p_options => '{"start_to_close": 600}', p_worker => 'tb-old');
SELECT pg_temp.start_claimed('tb_wft', 'tb_wf', 'tbq_wft', 'tb-old', p_lease_secs => 600);
SELECT pg_temp.start_activity('tb_other', 'tb_wf', 'tbq_other', 'tb_a', 'tbaq_other',
                              p_options => '{"start_to_close": 600}', p_worker => 'tb-other');
SELECT is((SELECT count(*) FROM harvest._take_back_worker_tasks('tb-nobody', 'x')), 0::bigint,
          '_take_back_worker_tasks(): an id that holds nothing, no rows');
SELECT results_eq($$SELECT kind, outcome, error_type FROM harvest._take_back_worker_tasks('tb-old', 'was lost (test)') ORDER BY kind$$,
                  $$VALUES ('activity'::text, 'retry_scheduled'::text, 'WorkerLost'::text), ('workflow', 'released', 'WorkerLost')$$,
                  'every task the id holds comes back: the activity''s attempt fails (WorkerLost), the workflow task is released');
SELECT is((SELECT last_failure ->> 'message' FROM harvest.tasks WHERE id = pg_temp.task('tb_act')),
          'attempt 1 of tb_a held by tb-old was lost (test)', 'the attempt''s message ends with p_what');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.task('tb_other')), 'running', 'another worker''s task runs on');
SELECT * FROM finish();
ROLLBACK;
