-- functions/activities.sql: harvest.complete_activity, harvest.fail_activity
-- (retries with backoff, non-retryable resolution, dead letters, schedule_to_close),
-- harvest._fail_activity_attempt, harvest.heartbeat_activity.
BEGIN;
SELECT plan(69);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- One activity per key: a run on queue wq_<key> schedules activity act_<key> (seq 1,
-- queue aq_<key>, the given options), and worker-a claims it.
CREATE TEMP TABLE acts (key text PRIMARY KEY, execution_id uuid, task_id bigint, token bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.act(p_key text, p_options jsonb DEFAULT '{}') RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    PERFORM harvest.start_workflow('act_wf', '[]', p_key, 'wq_' || p_key);
    SELECT * INTO v_task FROM harvest.claim_tasks('decider', ARRAY['wq_' || p_key], 1);
    PERFORM harvest.complete_workflow_task(v_task.task_id, v_task.fencing_token, 1, jsonb_build_array(
        jsonb_build_object('type', 'schedule_activity', 'seq', 1, 'name', 'act_' || p_key,
                           'input', jsonb_build_array(p_key), 'queue', 'aq_' || p_key, 'options', p_options)));
    -- The workflow task is done; only the activity is left to claim.
    INSERT INTO acts SELECT p_key, c.execution_id, c.task_id, c.fencing_token
    FROM harvest.claim_tasks('worker-a', ARRAY['aq_' || p_key], 1) AS c;
END;
$fn$;
-- Claim the key's activity again (after a retry backoff); returns the attempt.
CREATE FUNCTION pg_temp.reclaim(p_key text) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    SELECT * INTO v_task FROM harvest.claim_tasks('worker-a', ARRAY['aq_' || p_key], 1);
    UPDATE acts SET task_id = v_task.task_id, token = v_task.fencing_token WHERE key = p_key;
    RETURN v_task.attempt;
END;
$fn$;
CREATE FUNCTION pg_temp.task(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT task_id FROM acts WHERE key = p_key;
$fn$;
CREATE FUNCTION pg_temp.token(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT token FROM acts WHERE key = p_key;
$fn$;
CREATE FUNCTION pg_temp.run(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT execution_id FROM acts WHERE key = p_key;
$fn$;
CREATE FUNCTION pg_temp.fail(p_key text, p_failure jsonb DEFAULT '{"error_type": "IOError", "message": "flaky"}')
RETURNS text LANGUAGE sql AS $fn$
    SELECT harvest.fail_activity(pg_temp.task(p_key), pg_temp.token(p_key), p_failure);
$fn$;
CREATE FUNCTION pg_temp.last_event(p_key text) RETURNS TABLE (event_type text, event_data jsonb) LANGUAGE sql AS $fn$
    SELECT event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run(p_key)
    ORDER BY event_id DESC LIMIT 1;
$fn$;

-- complete_activity: ActivityCompleted, the task gone, the workflow woken.
SELECT pg_temp.act('ok');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s, '{"sent": true}')$$,
                       pg_temp.task('ok'), pg_temp.token('ok')), 'complete_activity() succeeds');
SELECT results_eq($$SELECT * FROM pg_temp.last_event('ok')$$,
                  $$VALUES ('ActivityCompleted'::text, '{"seq": 1, "result": {"sent": true}, "attempt": 1}'::jsonb)$$,
                  'complete_activity(): ActivityCompleted{seq, result, attempt}');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE id = pg_temp.task('ok')$$, 'the activity task is deleted');
SELECT results_eq($$SELECT kind, status, queue FROM harvest.tasks WHERE execution_id = pg_temp.run('ok')$$,
                  $$VALUES ('workflow'::text, 'pending'::text, 'wq_ok'::text)$$,
                  'complete_activity() wakes the workflow with a workflow task on its queue');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, '1')$$, pg_temp.task('ok'), pg_temp.token('ok')),
                 'HR004', NULL, 'completing an activity twice: HR004');
SELECT pg_temp.act('ok_null');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s, NULL)$$,
                       pg_temp.task('ok_null'), pg_temp.token('ok_null')), 'complete_activity() with a NULL result');
SELECT is((SELECT event_data -> 'result' FROM pg_temp.last_event('ok_null')), 'null'::jsonb,
          'a NULL result is stored as JSON null');

SELECT pg_temp.act('stale');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('stale'), pg_temp.token('stale') - 1),
                 'HR004', format('task %s was claimed again (fencing token %s is stale)',
                                 pg_temp.task('stale'), pg_temp.token('stale') - 1),
                 'complete_activity() with a stale token: HR004');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '{"error_type": "E"}')$$,
                        pg_temp.task('stale'), pg_temp.token('stale') + 1000), 'HR004', NULL,
                 'fail_activity() with a stale token: HR004');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '"boom"')$$,
                        pg_temp.task('stale'), pg_temp.token('stale')), 'HR001',
                 'failure must be a JSON object {error_type, message, non_retryable, details}',
                 'fail_activity() with a failure that is not an object: HR001');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, NULL)$$,
                        pg_temp.task('stale'), pg_temp.token('stale')), 'HR001', NULL,
                 'fail_activity() with a NULL failure: HR001');
CREATE TEMP TABLE wf_task ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('act_wf', '[]', 'wf_task', 'wq_wf_task');
INSERT INTO acts SELECT 'wf_task', c.execution_id, c.task_id, c.fencing_token
FROM harvest.claim_tasks('worker-a', ARRAY['wq_wf_task']) AS c;
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('wf_task'), pg_temp.token('wf_task')),
                 'HR001', format('task %s is a workflow task, not a activity task', pg_temp.task('wf_task')),
                 'complete_activity() of a workflow task: HR001');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '{}')$$, pg_temp.task('wf_task'), pg_temp.token('wf_task')),
                 'HR001', NULL, 'fail_activity() of a workflow task: HR001');

-- An expired lease refuses the result.
SELECT pg_temp.act('late', '{"start_to_close": 10}');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:11+00';
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('late'), pg_temp.token('late')),
                 'HR004', NULL, 'complete_activity() after the lease expired: HR004');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '{}')$$, pg_temp.task('late'), pg_temp.token('late')),
                 'HR004', NULL, 'fail_activity() after the lease expired: HR004');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Retries with exponential backoff until max_attempts, then a dead letter.
SELECT pg_temp.act('retry', '{"retry": {"max_attempts": 3, "initial_interval": 2, "backoff": 3, "max_interval": 100}}');
SELECT is(pg_temp.fail('retry'), 'retry_scheduled', 'attempt 1 of 3 fails: retry_scheduled');
SELECT results_eq(
    $$SELECT status, attempt, due_at, lease_owner, lease_expires_at, last_failure FROM harvest.tasks
      WHERE id = pg_temp.task('retry')$$,
    $$VALUES ('pending'::text, 1, '2030-01-01 00:00:02+00'::timestamptz, NULL::text, NULL::timestamptz,
              '{"error_type": "IOError", "message": "flaky"}'::jsonb)$$,
    'the same row waits initial_interval (2 s), lease dropped, failure kept');
SELECT is((SELECT event_type FROM pg_temp.last_event('retry')), 'ActivityScheduled',
          'a scheduled retry writes no event');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('retry') AND kind = 'workflow'$$,
                'a scheduled retry does not wake the workflow');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT is(pg_temp.reclaim('retry'), 2, 'the retry is claimed as attempt 2');
SELECT is(pg_temp.fail('retry'), 'retry_scheduled', 'attempt 2 of 3 fails: retry_scheduled');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('retry')), '2030-01-01 00:00:08+00'::timestamptz,
          'the second delay is initial_interval * backoff (6 s)');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:08+00';
SELECT is(pg_temp.reclaim('retry'), 3, 'attempt 3');
SELECT is(pg_temp.fail('retry', '{"error_type": "IOError", "message": "still flaky", "non_retryable": false}'),
          'dead_lettered', 'attempt 3 of 3 fails: dead_lettered');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('retry')$$,
                'a dead-lettered activity leaves no task, and the workflow is not woken');
SELECT results_eq(
    $$SELECT execution_id, workflow_name, seq, activity_name, queue, input, options, priority, attempts,
             failure ->> 'message', scheduled_at, failed_at
      FROM harvest.dead_letters WHERE execution_id = pg_temp.run('retry')$$,
    $$SELECT pg_temp.run('retry'), 'act_wf'::text, 1, 'act_retry'::text, 'aq_retry'::text, '["retry"]'::jsonb,
             '{"retry": {"max_attempts": 3, "initial_interval": 2, "backoff": 3, "max_interval": 100}}'::jsonb,
             0, 3, 'still flaky'::text, '2030-01-01 00:00:00+00'::timestamptz, '2030-01-01 00:00:08+00'::timestamptz$$,
    'the dead letter keeps the invocation, the attempts and the last failure');
SELECT is((SELECT event_type FROM pg_temp.last_event('retry')), 'ActivityScheduled',
          'a dead letter writes no ActivityFailed: the workflow keeps waiting');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('retry')), 'RUNNING', 'the run stays RUNNING');

-- The backoff is capped by max_interval.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('cap', '{"retry": {"max_attempts": 5, "initial_interval": 10, "backoff": 10, "max_interval": 15}}');
SELECT is(pg_temp.fail('cap'), 'retry_scheduled', 'cap: attempt 1 fails');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('cap')), '2030-01-01 00:00:10+00'::timestamptz,
          'cap: first delay 10 s');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';
SELECT is(pg_temp.reclaim('cap'), 2, 'cap: attempt 2');
SELECT is(pg_temp.fail('cap'), 'retry_scheduled', 'cap: attempt 2 fails');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('cap')), '2030-01-01 00:00:25+00'::timestamptz,
          'cap: the second delay (100 s) is capped at max_interval (15 s)');

-- The default policy: 3 attempts, 1 s then doubling.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('defaults');
SELECT is(pg_temp.fail('defaults'), 'retry_scheduled', 'defaults: attempt 1 fails');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('defaults')), '2030-01-01 00:00:01+00'::timestamptz,
          'defaults: retried after 1 s');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT is(pg_temp.reclaim('defaults'), 2, 'defaults: attempt 2');
SELECT is(pg_temp.fail('defaults'), 'retry_scheduled', 'defaults: attempt 2 fails');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('defaults')), '2030-01-01 00:00:03+00'::timestamptz,
          'defaults: then after 2 s');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:03+00';
SELECT is(pg_temp.reclaim('defaults'), 3, 'defaults: attempt 3');
SELECT is(pg_temp.fail('defaults'), 'dead_lettered', 'defaults: the third failure is final');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- max_attempts 0 means no limit.
SELECT pg_temp.act('unlimited', '{"retry": {"max_attempts": 0, "initial_interval": 0}}');
SELECT is(pg_temp.fail('unlimited'), 'retry_scheduled', 'max_attempts 0: retried');
SELECT is(pg_temp.reclaim('unlimited'), 2, 'max_attempts 0 with no delay: claimable at once');
SELECT is(pg_temp.fail('unlimited'), 'retry_scheduled', 'max_attempts 0: retried again');

-- Non-retryable: by the failure's flag, by error_type, by the full message.
SELECT pg_temp.act('flag', '{"retry": {"max_attempts": 5}}');
SELECT is(pg_temp.fail('flag', '{"error_type": "IOError", "message": "m", "non_retryable": true}'), 'dead_lettered',
          'non_retryable: true in the failure: no retry');
SELECT pg_temp.act('etype', '{"retry": {"max_attempts": 5, "non_retryable_errors": ["ValueError"]}}');
SELECT is(pg_temp.fail('etype', '{"error_type": "ValueError", "message": "bad value"}'), 'dead_lettered',
          'error_type listed in retry.non_retryable_errors: no retry');
SELECT pg_temp.act('etype_other', '{"retry": {"max_attempts": 5, "non_retryable_errors": ["ValueError"]}}');
SELECT is(pg_temp.fail('etype_other', '{"error_type": "KeyError", "message": "ValueError"}'), 'dead_lettered',
          'the message alone matching a listed entry: no retry');
SELECT pg_temp.act('etype_retry', '{"retry": {"max_attempts": 5, "non_retryable_errors": ["ValueError"]}}');
SELECT is(pg_temp.fail('etype_retry', '{"error_type": "KeyError", "message": "k"}'), 'retry_scheduled',
          'an error_type not listed: retried');
SELECT pg_temp.act('msg', '{"retry": {"max_attempts": 5, "non_retryable_errors": ["KeyError: ''missing''"]}}');
SELECT is(pg_temp.fail('msg', '{"error_type": "KeyError", "message": "''missing''"}'), 'dead_lettered',
          '"error_type: message" listed: no retry');
SELECT pg_temp.act('msg_other', '{"retry": {"max_attempts": 5, "non_retryable_errors": ["KeyError: ''missing''"]}}');
SELECT is(pg_temp.fail('msg_other', '{"error_type": "KeyError", "message": "''other''"}'), 'retry_scheduled',
          'the same error_type with another message: retried');
SELECT pg_temp.act('flag_false', '{"retry": {"max_attempts": 5}}');
SELECT is(pg_temp.fail('flag_false', '{"error_type": "E", "message": "m", "non_retryable": false}'), 'retry_scheduled',
          'non_retryable: false: retried');

-- dead_letter = false: the workflow gets ActivityFailed at once.
SELECT pg_temp.act('nodl', '{"dead_letter": false, "retry": {"max_attempts": 1}}');
SELECT is(pg_temp.fail('nodl', '{"error_type": "E", "message": "no luck", "non_retryable": false, "details": null}'),
          'failed', 'dead_letter=false, attempts exhausted: failed');
SELECT results_eq($$SELECT * FROM pg_temp.last_event('nodl')$$,
    $$VALUES ('ActivityFailed'::text, '{"seq": 1, "attempt": 1, "failure": {"error_type": "E", "message": "no luck",
              "non_retryable": false, "details": null}}'::jsonb)$$,
    'dead_letter=false: ActivityFailed{seq, failure, attempt} is appended');
SELECT results_eq($$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('nodl')$$,
                  $$VALUES ('workflow'::text, 'pending'::text)$$, 'dead_letter=false: the workflow is woken');
SELECT is_empty($$SELECT 1 FROM harvest.dead_letters WHERE execution_id = pg_temp.run('nodl')$$,
                'dead_letter=false: no dead letter');

-- schedule_to_close: no retry that would start after the deadline.
SELECT pg_temp.act('stc', '{"schedule_to_close": 5, "retry": {"max_attempts": 10, "initial_interval": 10}}');
SELECT is((SELECT deadline_at FROM harvest.tasks WHERE id = pg_temp.task('stc')), '2030-01-01 00:00:05+00'::timestamptz,
          'schedule_to_close sets the deadline from the scheduling time');
SELECT is(pg_temp.fail('stc'), 'dead_lettered', 'a retry due after the schedule_to_close deadline is not made');
SELECT pg_temp.act('stc_ok', '{"schedule_to_close": 60, "retry": {"max_attempts": 10, "initial_interval": 10}}');
SELECT is(pg_temp.fail('stc_ok'), 'retry_scheduled', 'a retry due before the deadline is made');

-- _fail_activity_attempt with retries refused: final at once.
SELECT pg_temp.act('direct', '{"retry": {"max_attempts": 10}}');
SELECT is(harvest._fail_activity_attempt(
              (SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('direct')),
              (SELECT t FROM harvest.tasks AS t WHERE t.id = pg_temp.task('direct')),
              '{"error_type": "E", "message": "m"}', false),
          'dead_lettered', '_fail_activity_attempt(p_allow_retry => false) is final');

-- heartbeat_activity: extends the lease, never past start_to_close; keeps details; says cancel.
SELECT pg_temp.act('hb', '{"start_to_close": 60, "heartbeat_timeout": 10}');
SELECT is((SELECT lease_expires_at FROM harvest.tasks WHERE id = pg_temp.task('hb')), '2030-01-01 00:00:10+00'::timestamptz,
          'setup: the lease is the heartbeat timeout');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb'), pg_temp.token('hb'), '{"done": 10}'), false,
          'heartbeat_activity() returns false when no cancel was asked');
SELECT results_eq(
    $$SELECT heartbeat_at, lease_expires_at, heartbeat_details FROM harvest.tasks WHERE id = pg_temp.task('hb')$$,
    $$VALUES ('2030-01-01 00:00:05+00'::timestamptz, '2030-01-01 00:00:15+00'::timestamptz, '{"done": 10}'::jsonb)$$,
    'a heartbeat extends the lease by heartbeat_timeout and stores the details');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:06+00';
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb'), pg_temp.token('hb')), false, 'a heartbeat without details');
SELECT is((SELECT heartbeat_details FROM harvest.tasks WHERE id = pg_temp.task('hb')), '{"done": 10}'::jsonb,
          'a heartbeat without details keeps the earlier ones');
UPDATE harvest.executions SET cancel_requested = true WHERE id = pg_temp.run('hb');
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb'), pg_temp.token('hb')), true,
          'heartbeat_activity() returns true once the run is asked to cancel');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:55+00';
SELECT throws_ok(format($$SELECT harvest.heartbeat_activity(%s, %s)$$, pg_temp.task('hb'), pg_temp.token('hb')),
                 'HR004', format('task %s: the lease expired at 2030-01-01 00:00:16+00', pg_temp.task('hb')),
                 'a heartbeat after the lease expired: HR004');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('hb_cap', '{"start_to_close": 60, "heartbeat_timeout": 50}');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:45+00';
SELECT is(harvest.heartbeat_activity(pg_temp.task('hb_cap'), pg_temp.token('hb_cap')), false, 'hb_cap: heartbeat');
SELECT is((SELECT lease_expires_at FROM harvest.tasks WHERE id = pg_temp.task('hb_cap')),
          '2030-01-01 00:01:00+00'::timestamptz, 'a heartbeat never extends the lease past start_to_close');
SELECT throws_ok(format($$SELECT harvest.heartbeat_activity(%s, %s)$$, pg_temp.task('hb_cap'), pg_temp.token('hb_cap') - 1),
                 'HR004', format('task %s is no longer held by this worker', pg_temp.task('hb_cap')),
                 'a heartbeat with a stale token: HR004');
SELECT throws_ok(format($$SELECT harvest.heartbeat_activity(%s, %s)$$, pg_temp.task('wf_task'), pg_temp.token('wf_task')),
                 'HR004', NULL, 'a heartbeat for a workflow task: HR004');

SELECT * FROM finish();
ROLLBACK;
