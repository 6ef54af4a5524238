-- functions/activities.sql: harvest.complete_activity, harvest.fail_activity
-- (retries with backoff, non-retryable resolution, dead letters, schedule_to_close),
-- harvest._fail_activity_attempt, harvest.heartbeat_activity, harvest.complete_activities
-- (a group commit: refused items, the hand-off of the woken workflow task, a decision
-- committed with its result, a run's results gathered into one append),
-- harvest._record_activity_result, harvest._record_activity_results, harvest._store_activity_result,
-- harvest._wake_after_results,
-- harvest._activity_completed, harvest._activity_completed_data, harvest._may_decide_on_result
-- and harvest._decided_answer.
BEGIN;
SELECT plan(247);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- One activity per key: a run on queue wq_<key> schedules activity act_<key> (seq 1,
-- queue aq_<key>, the given options), and worker-a claims it (pg_temp.start_activity).
CREATE FUNCTION pg_temp.act(p_key text, p_options jsonb DEFAULT '{}') RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_activity(p_key, 'act_wf', 'wq_' || p_key, 'act_' || p_key, 'aq_' || p_key,
                                  jsonb_build_array(p_key), p_options);
$fn$;
-- Claim the activity of p_key again (after a retry); returns the attempt.
CREATE FUNCTION pg_temp.reclaim(p_key text) RETURNS integer LANGUAGE sql AS $fn$
    SELECT pg_temp.remember(p_key, c.execution_id, c.task_id, c.fencing_token)
    FROM harvest.claim_tasks('worker-a', ARRAY['aq_' || p_key], 1) AS c;
    SELECT attempt FROM harvest.tasks WHERE id = pg_temp.task(p_key);
$fn$;
CREATE FUNCTION pg_temp.fail(p_key text, p_failure jsonb DEFAULT '{"error_type": "IOError", "message": "flaky"}')
RETURNS text LANGUAGE sql AS $fn$
    SELECT harvest.fail_activity(pg_temp.task(p_key), pg_temp.token(p_key), p_failure);
$fn$;

-- complete_activity: ActivityCompleted, the task gone, the workflow woken.
SELECT pg_temp.act('ok');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s, '{"sent": true}')$$,
                       pg_temp.task('ok'), pg_temp.token('ok')), 'complete_activity() succeeds');
SELECT results_eq($$SELECT event_type, event_data - 'started_at' FROM pg_temp.last_event(pg_temp.run('ok'))$$,
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
SELECT is((SELECT event_data -> 'result' FROM pg_temp.last_event(pg_temp.run('ok_null'))), 'null'::jsonb,
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
SELECT pg_temp.remember('wf_task', c.execution_id, c.task_id, c.fencing_token)
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
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('retry'))), 'ActivityScheduled',
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
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('retry'))), 'ActivityScheduled',
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

-- A late attempt of an unbounded policy: backoff^(attempt-1) would overflow a double at
-- attempt 1025; the delay is max_interval, not an error.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('late_attempt', '{"retry": {"max_attempts": 0, "initial_interval": 1, "backoff": 2, "max_interval": 60}}');
UPDATE harvest.tasks SET attempt = 2000 WHERE id = pg_temp.task('late_attempt');
SELECT is(pg_temp.fail('late_attempt'), 'retry_scheduled', 'attempt 2000 of an unbounded policy fails: retry_scheduled');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('late_attempt')),
          '2030-01-01 00:01:00+00'::timestamptz, 'its delay is max_interval (60 s), no overflow');

-- A failure's next_retry_delay (a 429's Retry-After) replaces the backoff, max_interval too;
-- the attempts still count, and a value that is no duration in seconds is HR001.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('retry_after', '{"retry": {"max_attempts": 2, "initial_interval": 1, "max_interval": 5}}');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '{"error_type": "RateLimited", "next_retry_delay": "3s"}')$$,
                        pg_temp.task('retry_after'), pg_temp.token('retry_after')), 'HR001', NULL,
                 'next_retry_delay that is not a number of seconds: HR001');
SELECT is(pg_temp.fail('retry_after', '{"error_type": "RateLimited", "message": "429", "next_retry_delay": 30}'),
          'retry_scheduled', 'retry_after: attempt 1 fails with next_retry_delay 30');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('retry_after')),
          '2030-01-01 00:00:30+00'::timestamptz, 'retry_after: due after 30 s, not the 1 s backoff nor the 5 s cap');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:30+00';
SELECT is(pg_temp.reclaim('retry_after'), 2, 'retry_after: attempt 2');
SELECT is(pg_temp.fail('retry_after', '{"error_type": "RateLimited", "message": "429", "next_retry_delay": 30}'),
          'dead_lettered', 'retry_after: the attempts still bound it');

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
SELECT results_eq($$SELECT event_type, event_data - 'started_at' FROM pg_temp.last_event(pg_temp.run('nodl'))$$,
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
                 'HR004', format('task %s: the lease expired at 2030-01-01T00:00:16+00:00', pg_temp.task('hb')),
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

-- The lease never outlives schedule_to_close (deadline_at): claim, retry's claim, heartbeat;
-- a result past it is refused.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.act('s2c_lease', '{"start_to_close": 60, "schedule_to_close": 30, "retry": {"initial_interval": 1}}');
SELECT is((SELECT lease_expires_at FROM harvest.tasks WHERE id = pg_temp.task('s2c_lease')),
          '2030-01-01 00:00:30+00'::timestamptz, 'a claim''s lease ends at schedule_to_close when start_to_close is longer');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:20+00';
SELECT is(pg_temp.fail('s2c_lease'), 'retry_scheduled', 's2c_lease: a retry due before the deadline');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:25+00';
SELECT is(pg_temp.reclaim('s2c_lease'), 2, 's2c_lease: claimed again');
SELECT is((SELECT lease_expires_at FROM harvest.tasks WHERE id = pg_temp.task('s2c_lease')),
          '2030-01-01 00:00:30+00'::timestamptz, 'a retry''s claim is leased up to deadline_at, not start_to_close');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:26+00';
SELECT harvest.heartbeat_activity(pg_temp.task('s2c_lease'), pg_temp.token('s2c_lease'));
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, '"late"')$$, pg_temp.task('s2c_lease'), pg_temp.token('s2c_lease')),
                 'HR004', NULL, 'a heartbeat never extends the lease past schedule_to_close: a result after it is refused');

-- ---------------------------------------------------------------- complete_activities
SET LOCAL harvest.fake_now = '2030-01-01 00:05:00+00';
CREATE TEMP TABLE batches (batch text, task_id bigint, outcome text, message text, handed jsonb, decided jsonb)
ON COMMIT DROP;
-- A run on queue wq_<key> decided by p_decider (its decided_by) that scheduled p_n
-- activities (seq 1..p_n, queue aq_<key>); worker-a claims them as acts <key>.<seq>.
CREATE FUNCTION pg_temp.decided(p_key text, p_decider text, p_n integer DEFAULT 1) RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_decided(p_key, 'act_wf', 'wq_' || p_key,
        (SELECT jsonb_agg(jsonb_build_object('type', 'schedule_activity', 'seq', g, 'name', 'act_' || p_key,
                                             'queue', 'aq_' || p_key) ORDER BY g)
         FROM generate_series(1, p_n) AS g),
        p_decided_by => p_decider);
    SELECT pg_temp.remember(p_key || '.' || c.seq, c.execution_id, c.task_id, c.fencing_token)
    FROM harvest.claim_tasks('worker-a', ARRAY['aq_' || p_key], p_n) AS c;
$fn$;
-- Complete the activities p_keys as p_worker in one batch, recorded as batch p_batch.
CREATE FUNCTION pg_temp.batch(p_batch text, p_worker text, p_keys text[], p_hand_off boolean DEFAULT true)
RETURNS void LANGUAGE sql AS $fn$
    INSERT INTO batches
    SELECT p_batch, c.* FROM harvest.complete_activities(
        p_worker,
        (SELECT array_agg(pg_temp.task(k) ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        (SELECT array_agg(pg_temp.token(k) ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        (SELECT array_agg(to_jsonb(k) ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        p_hand_off, 45) AS c;
$fn$;
-- The one-item batch p_batch: its outcome and handed task, and the run's workflow task.
CREATE FUNCTION pg_temp.woken(p_batch text)
RETURNS TABLE (outcome text, handed jsonb, status text, lease_owner text) LANGUAGE sql AS $fn$
    SELECT b.outcome, b.handed, t.status, t.lease_owner
    FROM batches AS b JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run(p_batch || '.1') AND t.kind = 'workflow'
    WHERE b.batch = p_batch;
$fn$;

SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', ARRAY[1, 2]::bigint[], ARRAY[1]::bigint[],
                                                             ARRAY['1', '2']::jsonb[])$$,
                 'HR001', 'task ids, fencing tokens, results (and decisions, if given) must be arrays of one length and one first subscript',
                 'complete_activities() with arrays of different lengths: HR001');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', ARRAY[1]::bigint[], '[0:0]={1}'::bigint[],
                                                             ARRAY['1']::jsonb[])$$,
                 'HR001', 'task ids, fencing tokens, results (and decisions, if given) must be arrays of one length and one first subscript',
                 'complete_activities() with fencing tokens from another first subscript: HR001 (items are read by subscript)');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', ARRAY[1]::bigint[], ARRAY[1]::bigint[],
                                                             ARRAY['1']::jsonb[], true, 45, '[2:2]={"{}"}'::jsonb[])$$,
                 'HR001', 'task ids, fencing tokens, results (and decisions, if given) must be arrays of one length and one first subscript',
                 'complete_activities() with decisions from another first subscript: HR001');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', NULL, ARRAY[1]::bigint[], ARRAY['1']::jsonb[])$$,
                 'HR001', NULL, 'complete_activities() without task ids: HR001');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', ARRAY[1]::bigint[], NULL, ARRAY['1']::jsonb[])$$,
                 'HR001', NULL, 'complete_activities() without fencing tokens: HR001');
SELECT is_empty($$SELECT * FROM harvest.complete_activities('w', ARRAY[]::bigint[], ARRAY[]::bigint[],
                                                            ARRAY[]::jsonb[])$$,
                'complete_activities() of nothing: no rows');

-- A good item commits; a stale, a gone, a wrong-kind and an expired one are refused and change nothing.
SELECT pg_temp.act('ca_good');
SELECT pg_temp.act('ca_stale');
INSERT INTO batches
SELECT 'mix', c.* FROM harvest.complete_activities('worker-a',
    ARRAY[pg_temp.task('ca_stale'), pg_temp.task('ca_good'), -1, pg_temp.task('wf_task'), pg_temp.task('late')],
    ARRAY[pg_temp.token('ca_stale') - 1, pg_temp.token('ca_good'), 1, pg_temp.token('wf_task'), pg_temp.token('late')],
    ARRAY['"s"', '{"n": 1}', '"g"', '"k"', '"l"']::jsonb[]) AS c;
SELECT results_eq(
    $$SELECT task_id, outcome, message, handed FROM batches WHERE batch = 'mix' ORDER BY outcome$$,
    $$VALUES (pg_temp.task('ca_good'), 'completed'::text, NULL::text, NULL::jsonb),
             (pg_temp.task('late'), 'expired',
              format('task %s: the lease expired at 2030-01-01T00:00:10+00:00, so this result is refused',
                     pg_temp.task('late')), NULL),
             (-1, 'gone', 'task -1 is gone: its lease expired or the run ended, and the work was handed on', NULL),
             (pg_temp.task('wf_task'), 'kind',
              format('task %s is a workflow task, not a activity task', pg_temp.task('wf_task')), NULL),
             (pg_temp.task('ca_stale'), 'stale',
              format('task %s was claimed again (fencing token %s is stale)',
                     pg_temp.task('ca_stale'), pg_temp.token('ca_stale') - 1), NULL)$$,
    'complete_activities(): one row per item, completed or the problem with its message');
SELECT results_eq($$SELECT event_type, event_data - 'started_at' FROM pg_temp.last_event(pg_temp.run('ca_good'))$$,
                  $$VALUES ('ActivityCompleted'::text, '{"seq": 1, "result": {"n": 1}, "attempt": 1}'::jsonb)$$,
                  'the good item: ActivityCompleted{seq, result, attempt}');
SELECT results_eq($$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('ca_good')$$,
                  $$VALUES ('workflow'::text, 'pending'::text)$$,
                  'the good item: its task is gone and a pending workflow task wakes the run');
SELECT results_eq(
    $$SELECT t.kind, t.status, t.fencing_token, t.attempt, (SELECT event_type FROM pg_temp.last_event(pg_temp.run('ca_stale')))
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('ca_stale')$$,
    $$VALUES ('activity'::text, 'running'::text, pg_temp.token('ca_stale'), 1, 'ActivityScheduled'::text)$$,
    'the stale item: its task untouched, no event, the run not woken');
SELECT results_eq(
    $$SELECT t.id, t.status, e.last_event_id FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
      WHERE t.id IN (pg_temp.task('wf_task'), pg_temp.task('late')) ORDER BY t.id$$,
    $$VALUES (pg_temp.task('wf_task'), 'running'::text, 1::bigint), (pg_temp.task('late'), 'running', 3::bigint)$$,
    'the wrong-kind and the expired items: their tasks untouched, no event');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s)$$, pg_temp.task('ca_stale'), pg_temp.token('ca_stale')),
                'the stale item''s task still completes under its own token');

-- Hand-off: the run's workflow task goes straight to the worker whose cached run decided last.
SELECT harvest.register_worker('hw', ARRAY['wq_ho', 'wq_ho2', 'wq_ho_other', 'wq_ho_fair', 'wq_ho_prio', 'wq_ho_off'],
                               'host', 1);
SELECT harvest.register_worker('hw_drain', ARRAY['wq_ho_drain'], 'host', 2);
UPDATE harvest.workers SET status = 'draining' WHERE id = 'hw_drain';
SELECT pg_temp.decided('ho', 'hw');
SELECT pg_temp.batch('ho', 'hw', ARRAY['ho.1']);
SELECT results_eq($$SELECT outcome, handed IS NOT NULL, status, lease_owner FROM pg_temp.woken('ho')$$,
                  $$VALUES ('completed'::text, true, 'running'::text, 'hw'::text)$$,
                  'decided_by = the worker: the woken workflow task is handed, running and leased to it');
SELECT results_eq(
    $$SELECT (h ->> 'task_id')::bigint, h ->> 'kind', (h ->> 'execution_id')::uuid, h ->> 'workflow_name',
             h ->> 'workflow_id', h ? 'task_queue', h ->> 'queue', (SELECT r.attempt FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint),
             (h ->> 'fencing_token')::bigint, (SELECT r.lease_expires_at FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint), (h ->> 'new_events_after')::bigint
      FROM (SELECT handed AS h FROM batches WHERE batch = 'ho') AS b$$,
    $$SELECT t.id, 'workflow'::text, t.execution_id, 'act_wf'::text, 'ho'::text, false, 'wq_ho'::text, 1,
             t.fencing_token, '2030-01-01 00:05:45+00'::timestamptz, 3::bigint
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('ho.1') AND t.kind = 'workflow'$$,
    'handed: the workflow task as the worker receives it (its row: attempt 1, its fencing token, lease = p_workflow_lease_secs)');
SELECT cmp_ok((SELECT (handed ->> 'fencing_token')::bigint FROM batches WHERE batch = 'ho'), '>', pg_temp.token('ho.1'),
              'the handed task''s fencing token is new');
SELECT results_eq(
    $$SELECT array_agg(e ->> 'event_type' ORDER BY (e ->> 'event_id')::bigint), max((e ->> 'event_id')::bigint)
      FROM batches AS b, jsonb_array_elements(b.handed -> 'new_events') AS e WHERE b.batch = 'ho'$$,
    $$SELECT ARRAY['ActivityCompleted'], last_event_id
      FROM harvest.executions WHERE id = pg_temp.run('ho.1')$$,
    'handed.new_events: every event after decided_through (past the decision''s own marker and ActivityScheduled), through the ActivityCompleted');
SELECT is((SELECT array_agg(k ORDER BY k) FROM batches AS b, jsonb_object_keys(b.handed) AS k WHERE b.batch = 'ho'),
          (SELECT array_agg(a.name ORDER BY a.name)
           FROM pg_proc AS p, unnest(p.proargnames, p.proargmodes) AS a (name, mode)
           WHERE p.oid = 'harvest.claim_tasks'::regproc AND a.mode = 't'
             AND a.name NOT IN ('seq', 'activity_name', 'input', 'options', 'attempt', 'lease_expires_at',
                                'heartbeat_details')),
          'a handed workflow task''s keys are claim_tasks'' columns the worker reads of one (claim.sql _worker_task)');
SELECT lives_ok(format($$SELECT handed FROM harvest.complete_workflow_task(%s, %s, 4, '[]', 'hw')$$,
                       (SELECT handed ->> 'task_id' FROM batches WHERE batch = 'ho'),
                       (SELECT handed ->> 'fencing_token' FROM batches WHERE batch = 'ho')),
                'the handed workflow task completes under its fencing token');

-- No hand-off: another worker decided; the worker is draining or unknown; the queue
-- is fair or not polled; a higher-priority task is pending there; p_hand_off false.
SELECT pg_temp.decided('ho_other', 'someone-else');
SELECT pg_temp.batch('ho_other', 'hw', ARRAY['ho_other.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_other')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'decided by another worker: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_drain', 'hw_drain');
SELECT pg_temp.batch('ho_drain', 'hw_drain', ARRAY['ho_drain.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_drain')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'a draining worker: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_ghost', 'ghost');
SELECT pg_temp.batch('ho_ghost', 'ghost', ARRAY['ho_ghost.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_ghost')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'a worker that is not registered: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_fair', 'hw');
INSERT INTO harvest.fair_queues (queue) VALUES ('wq_ho_fair');
SELECT pg_temp.batch('ho_fair', 'hw', ARRAY['ho_fair.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_fair')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'a fair queue: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_unpolled', 'hw');
SELECT pg_temp.batch('ho_unpolled', 'hw', ARRAY['ho_unpolled.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_unpolled')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'a queue the worker does not poll: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_prio', 'hw');
SELECT harvest.start_workflow('act_wf', '[]', 'ho_prio_blocker', 'wq_ho_prio', p_priority => 1);
SELECT pg_temp.batch('ho_prio', 'hw', ARRAY['ho_prio.1']);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_prio')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'a pending task of a higher priority on the queue: not handed, a pending workflow task');
SELECT pg_temp.decided('ho_off', 'hw');
SELECT pg_temp.batch('ho_off', 'hw', ARRAY['ho_off.1'], false);
SELECT results_eq($$SELECT * FROM pg_temp.woken('ho_off')$$,
                  $$VALUES ('completed'::text, NULL::jsonb, 'pending'::text, NULL::text)$$,
                  'p_hand_off false: not handed, a pending workflow task');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities('hw', ARRAY[]::bigint[], ARRAY[]::bigint[],
                                                             ARRAY[]::jsonb[], true, 0)$$,
                 'HR001', 'workflow task lease 0 must be positive seconds',
                 'complete_activities(p_hand_off) with a lease of 0: HR001');

-- Two completions of one run in one batch: one handed task carrying both results.
SELECT pg_temp.decided('ho2', 'hw', 2);
SELECT pg_temp.batch('ho2', 'hw', ARRAY['ho2.2', 'ho2.1']);
SELECT results_eq($$SELECT count(*), count(*) FILTER (WHERE outcome = 'completed'), count(handed)
                    FROM batches WHERE batch = 'ho2'$$,
                  $$VALUES (2::bigint, 2::bigint, 1::bigint)$$,
                  'two items of one run: both completed, one row carries the handed task, the other NULL');
SELECT results_eq(
    $$SELECT array_agg((e #>> '{event_data,seq}')::integer ORDER BY (e ->> 'event_id')::bigint),
             array_agg(e #>> '{event_data,result}' ORDER BY (e ->> 'event_id')::bigint)
      FROM batches AS b, jsonb_array_elements(b.handed -> 'new_events') AS e
      WHERE b.batch = 'ho2' AND b.handed IS NOT NULL AND e ->> 'event_type' = 'ActivityCompleted'$$,
    $$VALUES (ARRAY[1, 2], ARRAY['ho2.1', 'ho2.2'])$$,
    'the handed task''s new_events hold both ActivityCompleted events');
SELECT results_eq(
    $$SELECT t.id, t.status, t.lease_owner FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('ho2.1')$$,
    $$SELECT (handed ->> 'task_id')::bigint, 'running'::text, 'hw'::text FROM batches
      WHERE batch = 'ho2' AND handed IS NOT NULL$$,
    'the run has that one workflow task, running, and nothing else');

-- _record_activity_result on its own: records the result, and hands the wake-up
-- only when given the worker's queues.
SELECT pg_temp.decided('rec', 'hw');
SELECT is(harvest._record_activity_result(
              (SELECT t FROM harvest.tasks AS t WHERE t.id = pg_temp.task('rec.1')), '7', 'hw', NULL, 30),
          NULL, '_record_activity_result() without worker queues: nothing handed');
SELECT results_eq(
    $$SELECT (SELECT event_data - 'started_at' FROM pg_temp.last_event(pg_temp.run('rec.1'))), t.kind, t.status
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('rec.1')$$,
    $$VALUES ('{"seq": 1, "result": 7, "attempt": 1}'::jsonb, 'workflow'::text, 'pending'::text)$$,
    '_record_activity_result(): ActivityCompleted and a pending workflow task');

-- _wake_after_results on its own: a worker that did not decide last is not handed the
-- wake-up, which queues (once: a second wake-up finds the task there).
SELECT pg_temp.decided('wake', 'someone-else');
SELECT is(harvest._wake_after_results((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('wake.1')),
                                      'hw', ARRAY['dq_wake'], 30),
          NULL, '_wake_after_results() for a run another worker decided: nothing handed');
SELECT harvest._wake_after_results((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('wake.1')),
                                   'hw', NULL, 30);
SELECT results_eq(
    $$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('wake.1') AND kind = 'workflow'$$,
    $$VALUES ('workflow'::text, 'pending'::text)$$,
    '... its workflow task is queued, once');

-- A run's results in one batch go in as one append: the events in task order, one
-- row update (one new row version), one wake-up; a refused item among them and the
-- results of another run in between change nothing of that.
SELECT pg_temp.decided('grp', 'someone-else', 3);
SELECT pg_temp.decided('grp_b', 'someone-else', 1);
CREATE TEMP TABLE grp_before ON COMMIT DROP AS
SELECT e.last_event_id, e.history_bytes,
       (SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'harvest.executions'::regclass) AS updates
FROM harvest.executions AS e WHERE e.id = pg_temp.run('grp.1');
INSERT INTO batches
SELECT 'grp', c.* FROM harvest.complete_activities('hw',
    ARRAY[pg_temp.task('grp.3'), pg_temp.task('grp_b.1'), pg_temp.task('grp.2'), pg_temp.task('grp.1')],
    ARRAY[pg_temp.token('grp.3'), pg_temp.token('grp_b.1'), pg_temp.token('grp.2') - 1, pg_temp.token('grp.1')],
    ARRAY['"c"', '"b1"', '"stale"', '"a"']::jsonb[], true, 45) AS c;
SELECT results_eq($$SELECT task_id, outcome, handed FROM batches WHERE batch = 'grp' ORDER BY task_id$$,
                  $$VALUES (pg_temp.task('grp.1'), 'completed'::text, NULL::jsonb),
                           (pg_temp.task('grp.2'), 'stale', NULL), (pg_temp.task('grp.3'), 'completed', NULL),
                           (pg_temp.task('grp_b.1'), 'completed', NULL)$$,
                  'a batch over two runs with a refused item: one row each, in any input order');
SELECT results_eq(
    $$SELECT ev.event_id - b.last_event_id, ev.event_data ->> 'seq', ev.event_data ->> 'result'
      FROM harvest.events AS ev, grp_before AS b
      WHERE ev.execution_id = pg_temp.run('grp.1') AND ev.event_id > b.last_event_id ORDER BY ev.event_id$$,
    $$VALUES (1::bigint, '1'::text, 'a'::text), (2, '3', 'c')$$,
    'the run''s two results: ActivityCompleted events in task order, ids after the history''s end, gapless');
SELECT results_eq(
    $$SELECT e.last_event_id - b.last_event_id, e.history_bytes > b.history_bytes,
             (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id AND t.kind = 'workflow'),
             (SELECT t.status FROM harvest.tasks AS t WHERE t.execution_id = e.id AND t.kind = 'workflow')
      FROM harvest.executions AS e, grp_before AS b WHERE e.id = pg_temp.run('grp.1')$$,
    $$VALUES (2::bigint, true, 1::bigint, 'pending'::text)$$,
    'last_event_id and history_bytes moved by both; one pending workflow task wakes the run');
SELECT is((SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'harvest.executions'::regclass)
          - (SELECT updates FROM grp_before), 2::bigint,
          'two runs in the batch: two updates of harvest.executions, one per run, not one per result');
SELECT results_eq(
    $$SELECT t.status, t.fencing_token FROM harvest.tasks AS t WHERE t.id = pg_temp.task('grp.2')$$,
    $$VALUES ('running'::text, pg_temp.token('grp.2'))$$,
    'the refused item of that run: its task untouched');
SELECT results_eq($$SELECT event_type, event_data ->> 'result' FROM pg_temp.last_event(pg_temp.run('grp_b.1'))$$,
                  $$VALUES ('ActivityCompleted'::text, 'b1'::text)$$,
                  'the other run''s result: recorded in its own history');
-- A run's later items in a batch lock their task only (the batch holds the run's row from
-- its first item): each refusal there reads as it does on the full path, and a refused
-- item between good ones of the run changes nothing of them.
SELECT pg_temp.decided('lr', 'someone-else', 5);
UPDATE harvest.tasks SET lease_expires_at = harvest.now() - interval '1 second' WHERE id = pg_temp.task('lr.3');
UPDATE harvest.tasks SET status = 'pending', lease_owner = NULL WHERE id = pg_temp.task('lr.4');
INSERT INTO batches
SELECT 'lr', c.* FROM harvest.complete_activities('hw',
    ARRAY[pg_temp.task('lr.5'), pg_temp.task('lr.4'), pg_temp.task('lr.3'), pg_temp.task('lr.2'), pg_temp.task('lr.1')],
    ARRAY[pg_temp.token('lr.5'), pg_temp.token('lr.4'), pg_temp.token('lr.3'), pg_temp.token('lr.2') - 1,
          pg_temp.token('lr.1')],
    ARRAY['5', '4', '3', '2', '1']::jsonb[], true, 45) AS c;
SELECT results_eq(
    $$SELECT task_id, outcome, message FROM batches WHERE batch = 'lr' ORDER BY task_id$$,
    $$VALUES (pg_temp.task('lr.1'), 'completed'::text, NULL::text),
             (pg_temp.task('lr.2'), 'stale', format('task %s was claimed again (fencing token %s is stale)',
                                                   pg_temp.task('lr.2'), pg_temp.token('lr.2') - 1)),
             (pg_temp.task('lr.3'), 'expired',
              format('task %s: the lease expired at 2030-01-01T00:04:59+00:00, so this result is refused',
                     pg_temp.task('lr.3'))),
             (pg_temp.task('lr.4'), 'stale', format('task %s was claimed again (fencing token %s is stale)',
                                                   pg_temp.task('lr.4'), pg_temp.token('lr.4'))),
             (pg_temp.task('lr.5'), 'completed', NULL)$$,
    'complete_activities(): a run''s later items refused as the full path refuses them, the good ones completed');
SELECT results_eq(
    $$SELECT array_agg(ev.event_data ->> 'seq' ORDER BY ev.event_id)
      FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('lr.1') AND ev.event_type = 'ActivityCompleted'$$,
    $$VALUES (ARRAY['1', '5'])$$,
    'the run''s good items recorded in task order, the refused ones not');

-- The usual item (its task still the worker's, its result within the limit) is taken by one
-- DELETE under its run's lock: the full way's lock functions run only for the items with a
-- problem, which they name. A lease that ends at this very instant has not expired (the
-- full way's test is lease_expires_at < now). A stale item whose result is also over the
-- limit is refused as stale, as before; a good task's result over the limit is too_large
-- and its task stays the worker's.
SELECT pg_temp.decided('fp', 'someone-else', 5);
UPDATE harvest.tasks SET lease_expires_at = harvest.now() WHERE id = pg_temp.task('fp.2');
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
INSERT INTO batches
SELECT 'fp', c.* FROM harvest.complete_activities('hw',
    ARRAY[pg_temp.task('fp.1'), pg_temp.task('fp.2'), pg_temp.task('fp.3'), pg_temp.task('fp.4'), pg_temp.task('fp.5')],
    ARRAY[pg_temp.token('fp.1'), pg_temp.token('fp.2'), pg_temp.token('fp.3') - 1, pg_temp.token('fp.4'),
          pg_temp.token('fp.5')],
    ARRAY['1', '2', to_jsonb(repeat('x', 100)), to_jsonb(repeat('y', 100)), '5']::jsonb[], true, 45) AS c;
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
SELECT results_eq(
    $$SELECT task_id, outcome, message FROM batches WHERE batch = 'fp' ORDER BY task_id$$,
    $$VALUES (pg_temp.task('fp.1'), 'completed'::text, NULL::text),
             (pg_temp.task('fp.2'), 'completed', NULL),
             (pg_temp.task('fp.3'), 'stale', format('task %s was claimed again (fencing token %s is stale)',
                                                   pg_temp.task('fp.3'), pg_temp.token('fp.3') - 1)),
             (pg_temp.task('fp.4'), 'too_large', format('the result of activity task %s is 102 bytes, over the '
                                                       'payload limit of 64 bytes', pg_temp.task('fp.4'))),
             (pg_temp.task('fp.5'), 'completed', NULL)$$,
    'complete_activities(): a lease ending now is taken; stale before too_large; good items completed');
SELECT results_eq(
    $$SELECT t.seq, t.status, t.fencing_token = pg_temp.token('fp.' || t.seq) FROM harvest.tasks AS t
      WHERE t.execution_id = pg_temp.run('fp.1') AND t.kind = 'activity' ORDER BY t.seq$$,
    $$VALUES (3, 'running'::text, true), (4, 'running', true)$$,
    '... the refused items'' tasks untouched, the good ones'' gone');
SELECT results_eq(
    $$SELECT array_agg(ev.event_data ->> 'result' ORDER BY ev.event_id)
      FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('fp.1') AND ev.event_type = 'ActivityCompleted'$$,
    $$VALUES (ARRAY['1', '2', '5'])$$,
    '... and their results recorded in task order');
-- Counted: each further good item of a run in a batch reads harvest.tasks twice through an
-- index (the loop's probe of the task's run and the DELETE), where the task's lock and then
-- the DELETE made it three. (A batch of four against a batch of one, so what a batch does
-- once, its run's first item and its wake-up, drops out: 9 - 3 here, 14 - 5 before.)
SELECT pg_temp.decided('fp_n', 'someone-else', 4);
SELECT pg_temp.decided('fp_1', 'someone-else', 1);
CREATE FUNCTION pg_temp.task_index_scans() RETURNS bigint LANGUAGE sql AS $fn$
    SELECT s.idx_scan FROM pg_stat_xact_user_tables AS s WHERE s.relid = 'harvest.tasks'::regclass;
$fn$;
CREATE TEMP TABLE fp_scans (batch text, scans bigint) ON COMMIT DROP;
INSERT INTO fp_scans VALUES ('one', pg_temp.task_index_scans());
SELECT pg_temp.batch('fp_1', 'hw', ARRAY['fp_1.1']);
UPDATE fp_scans SET scans = pg_temp.task_index_scans() - scans;
INSERT INTO fp_scans VALUES ('four', pg_temp.task_index_scans());
SELECT pg_temp.batch('fp_n', 'hw', ARRAY['fp_n.1', 'fp_n.2', 'fp_n.3', 'fp_n.4']);
UPDATE fp_scans SET scans = pg_temp.task_index_scans() - scans WHERE batch = 'four';
SELECT is((SELECT (f.scans - o.scans) / 3.0 FROM fp_scans AS f, fp_scans AS o WHERE f.batch = 'four' AND o.batch = 'one'),
          2.0, 'each further good item of a run: two index reads of harvest.tasks (the probe and the DELETE)');
SELECT results_eq($$SELECT outcome, count(*) FROM batches WHERE batch IN ('fp_1', 'fp_n') GROUP BY outcome$$,
                  $$VALUES ('completed'::text, 5::bigint)$$, '... and all five completed');

-- _record_activity_results on its own: the events in the order given, the wake-up handed
-- under the hand-off rules, nothing for a run that has ended.
SELECT pg_temp.decided('recs', 'hw', 2);
DELETE FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('recs.1');
SELECT ok(harvest._record_activity_results(pg_temp.run('recs.1'), ARRAY['ActivityCompleted', 'ActivityCompleted'],
              ARRAY['{"seq": 2, "result": 2}', '{"seq": 1, "result": 1}']::jsonb[], 'hw', ARRAY['wq_recs'], 30)
          IS NOT NULL, '_record_activity_results() for the worker that decided last, queues given: a handed task');
SELECT results_eq(
    $$SELECT array_agg(ev.event_data ->> 'seq' ORDER BY ev.event_id), max(ev.event_id) = pg_temp.last_event_id(pg_temp.run('recs.1'))
      FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('recs.1') AND ev.event_type = 'ActivityCompleted'$$,
    $$VALUES (ARRAY['2', '1'], true)$$,
    '_record_activity_results(): the events in the order given, last_event_id at the last');
SELECT results_eq(
    $$SELECT t.status, t.lease_owner FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('recs.1')$$,
    $$VALUES ('running'::text, 'hw'::text)$$,
    '_record_activity_results(): the handed workflow task is leased to the worker');
SELECT pg_temp.decided('recs_q', 'hw');
DELETE FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('recs_q.1');
SELECT is(harvest._record_activity_results(pg_temp.run('recs_q.1'), ARRAY['ActivityCompleted'],
              ARRAY['{"seq": 1}']::jsonb[], 'hw', NULL, 30),
          NULL, '_record_activity_results() without worker queues: nothing handed');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('recs_q.1')), 1::bigint, 'and the run is woken by a pending workflow task');
SELECT pg_temp.decided('recs_end', 'hw');
SELECT lives_ok(format($$SELECT harvest.terminate_workflow('%s')$$, pg_temp.run('recs_end.1')),
                'setup: the run is terminated');
SELECT is(harvest._record_activity_results(pg_temp.run('recs_end.1'), ARRAY['ActivityCompleted'],
              ARRAY['{"seq": 1}']::jsonb[], 'hw', ARRAY['wq_recs_end'], 30),
          NULL, '_record_activity_results() of a run that ended: NULL');
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('recs_end.1'))), 'WorkflowTerminated',
          'and it records nothing');

-- ---------------------------------------------------------------- deciding on a result
-- complete_activities(p_decisions): the decision a worker's cached run made on an
-- activity's result commits with the result when harvest._may_decide_on_result
-- allows it; otherwise the result is recorded alone, as without a decision.
SELECT harvest.register_worker('dw', ARRAY['wq_da', 'wq_da_plain', 'wq_da0', 'wq_da_done', 'wq_da_norm', 'wq_da_after',
                                           'wq_da_other', 'wq_da_open', 'wq_da_text', 'wq_da_prio', 'wq_da_off',
                                           'wq_da_stale', 'wq_da_bad', 'wq_da_once', 'wq_da_twice', 'wq_may', 'wq_store', 'wq_store_end', 'dq_next'],
                               'host', 3);
SELECT harvest.register_worker('dw_drain', ARRAY['wq_da_drain'], 'host', 4);
UPDATE harvest.workers SET status = 'draining' WHERE id = 'dw_drain';
-- The decision a cached run made on activity p_key's result: p_commands, handing
-- up to p_slots activities, after event p_after (by default the run's last event),
-- on the result seen as p_result_text (by default the text of the key as JSON).
CREATE FUNCTION pg_temp.decision(
    p_key text, p_commands jsonb, p_slots integer DEFAULT 0, p_after bigint DEFAULT NULL, p_result_text text DEFAULT NULL
) RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT jsonb_build_object(
        'after', coalesce(p_after, (SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run(p_key))),
        'result_text', coalesce(p_result_text, to_jsonb(p_key)::text),
        'commands', p_commands, 'hand_off_slots', p_slots);
$fn$;
-- Complete activity p_key as p_worker with p_decision, recorded as batch p_batch
-- (its result: p_result, by default the key as JSON).
CREATE FUNCTION pg_temp.decide_with_result(
    p_batch text, p_worker text, p_key text, p_decision jsonb, p_result jsonb DEFAULT NULL,
    p_hand_off boolean DEFAULT true
) RETURNS void LANGUAGE sql AS $fn$
    INSERT INTO batches
    SELECT p_batch, c.* FROM harvest.complete_activities(
        p_worker, ARRAY[pg_temp.task(p_key)], ARRAY[pg_temp.token(p_key)], ARRAY[coalesce(p_result, to_jsonb(p_key))],
        p_hand_off, 45, ARRAY[p_decision]) AS c;
$fn$;
-- A one-item batch refused its decision: its outcome and decided, whether its handed
-- task is the run's workflow task, that task's status and owner, the run's last
-- event and decided_through.
CREATE FUNCTION pg_temp.alone(p_batch text, p_key text)
RETURNS TABLE (
    outcome text, decided jsonb, handed boolean, status text, lease_owner text, last_event text, decided_through bigint
) LANGUAGE sql AS $fn$
    SELECT b.outcome, b.decided, coalesce((b.handed ->> 'task_id')::bigint = t.id, false), t.status, t.lease_owner,
           (SELECT event_type FROM pg_temp.last_event(pg_temp.run(p_key))), e.decided_through
    FROM batches AS b
    JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run(p_key) AND t.kind = 'workflow'
    JOIN harvest.executions AS e ON e.id = pg_temp.run(p_key)
    WHERE b.batch = p_batch;
$fn$;

-- A refused decision: the item completed without it, and the run's workflow task is
-- either handed to the worker (p_handed) or left pending, as without a decision.
CREATE FUNCTION pg_temp.refused(p_batch text, p_handed boolean, p_description text)
RETURNS text LANGUAGE sql AS $fn$
    SELECT results_eq(
        format($$SELECT * FROM pg_temp.alone(%L, %L)$$, p_batch, p_batch || '.1'),
        format($$VALUES ('completed'::text, NULL::jsonb, %L::boolean, %L::text, %L::text,
                         'ActivityCompleted'::text, 3::bigint)$$,
               p_handed, CASE WHEN p_handed THEN 'running' ELSE 'pending' END,
               CASE WHEN p_handed THEN 'dw' END),
        p_description);
$fn$;

-- Accepted: the result, the marker through it and the commands, in one transaction.
-- A second item of the batch, without a decision, is recorded as before.
SELECT pg_temp.decided('da', 'dw');
SELECT pg_temp.decided('da_plain', 'dw');
INSERT INTO batches
SELECT 'da', c.* FROM harvest.complete_activities('dw',
    ARRAY[pg_temp.task('da_plain.1'), pg_temp.task('da.1')], ARRAY[pg_temp.token('da_plain.1'), pg_temp.token('da.1')],
    ARRAY['"da_plain.1"', '"da.1"']::jsonb[], true, 45,
    ARRAY[NULL, pg_temp.decision('da.1', '[{"type": "schedule_activity", "seq": 2, "name": "next", "input": [2],
                                          "queue": "dq_next"}]', 1)]) AS c;
SELECT results_eq(
    $$SELECT outcome, handed, decided - 'handed', jsonb_array_length(decided -> 'handed')
      FROM batches WHERE batch = 'da' AND task_id = pg_temp.task('da.1')$$,
    $$VALUES ('completed'::text, NULL::jsonb, '{"last_event_id": 6, "execution_status": "RUNNING"}'::jsonb, 1)$$,
    'a decision accepted: completed, decided {last_event_id, execution_status RUNNING, handed}, handed NULL');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data - 'started_at' FROM harvest.events
      WHERE execution_id = pg_temp.run('da.1') AND event_id > 3 ORDER BY event_id$$,
    $$VALUES (4::bigint, 'ActivityCompleted'::text, '{"seq": 1, "result": "da.1", "attempt": 1}'::jsonb),
             (5, 'WorkflowTaskCompleted', '{"through": 4, "worker_id": "dw"}'),
             (6, 'ActivityScheduled', '{"seq": 2, "name": "next", "input": [2], "queue": "dq_next", "options": {}}')$$,
    'the history: ActivityCompleted, WorkflowTaskCompleted{through: the result''s event}, then the command''s event');
-- Both results went the one-statement way (the DELETE returns the columns their events
-- read): each ActivityCompleted carries its attempt's started_at, the plain one as well.
SELECT results_eq(
    $$SELECT count(*) FILTER (WHERE (ev.event_data ->> 'started_at')::timestamptz <= harvest.now()
                                AND (ev.event_data ->> 'attempt')::integer = 1 AND (ev.event_data ->> 'seq')::integer = 1)
      FROM harvest.events AS ev
      WHERE ev.execution_id IN (pg_temp.run('da.1'), pg_temp.run('da_plain.1')) AND ev.event_type = 'ActivityCompleted'$$,
    $$VALUES (2::bigint)$$,
    'both results record their attempt''s started_at, attempt and seq');
-- A decision ahead reads its run's row once: the row its lock read serves the decision's
-- checks (_may_decide_on_result) and its application (_apply_decision), which read it
-- again each on their own before. Index scans of executions_pkey across the call: the
-- lock's, the append's row update and the foreign keys' probes of the three events and
-- the handed task: 6, where main's two more reads made 8.
SELECT pg_temp.decided('da_once', 'dw');
CREATE TEMP TABLE da_once_decision ON COMMIT DROP AS
SELECT pg_temp.decision('da_once.1', '[{"type": "schedule_activity", "seq": 2, "name": "next"}]', 1) AS d;
CREATE TEMP TABLE da_once_scans ON COMMIT DROP AS
SELECT pg_stat_get_xact_numscans('harvest.executions_pkey'::regclass) AS n;
SELECT pg_temp.decide_with_result('da_once', 'dw', 'da_once.1', (SELECT d FROM da_once_decision));
SELECT is(pg_stat_get_xact_numscans('harvest.executions_pkey'::regclass) - (SELECT n FROM da_once_scans), 6::bigint,
          'a decision ahead scans executions_pkey 6 times: its run''s row read once');
SELECT results_eq(
    $$SELECT b.outcome, b.decided ->> 'last_event_id', b.decided -> 'handed' -> 0 ->> 'queue', t.status, t.lease_owner
      FROM batches AS b JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('da_once.1')
      WHERE b.batch = 'da_once'$$,
    $$VALUES ('completed'::text, '6'::text, 'wq_da_once'::text, 'running'::text, 'dw'::text)$$,
    'the decision applied, its activity handed on the run''s queue (the hand-off rules asked once)');
-- Two decisions of one run in one batch: the second reads the row the first wrote (its
-- lock was the first item's), so it is through the first's events.
SELECT pg_temp.decided('da_twice', 'dw', 2);
INSERT INTO batches
SELECT 'da_twice', c.* FROM harvest.complete_activities('dw',
    ARRAY[pg_temp.task('da_twice.1'), pg_temp.task('da_twice.2')],
    ARRAY[pg_temp.token('da_twice.1'), pg_temp.token('da_twice.2')],
    ARRAY['"da_twice.1"', '"da_twice.2"']::jsonb[], true, 45,
    ARRAY[pg_temp.decision('da_twice.1', '[]', 0, 4),
          pg_temp.decision('da_twice.2', '[{"type": "complete_workflow", "result": 2}]', 0, 6)]) AS c;
SELECT results_eq(
    $$SELECT b.outcome, b.decided ->> 'last_event_id', b.decided ->> 'execution_status'
      FROM batches AS b WHERE b.batch = 'da_twice' ORDER BY b.task_id$$,
    $$VALUES ('completed'::text, '6'::text, 'RUNNING'::text), ('completed', '9', 'COMPLETED')$$,
    'two decisions of one run in one batch: the second through the first''s events, the run completed');
-- A batch's decisions: each one's last events wait for one INSERT of the batch's
-- (_apply_decision's p_defer_events, core.sql _insert_events), a run's before its next
-- item. The histories are the ones one append per decision wrote: ids gapless from each
-- run's last, in item order, the run's last_event_id, history_bytes and decided_through
-- as the appends left them, a handed task carrying the run's events.
SELECT harvest.register_worker('bw', ARRAY['wq_bw_a', 'wq_bw_b', 'wq_bw_c', 'wq_bw_d', 'wq_bw_e', 'dq_bw'], 'host', 3);
SELECT pg_temp.decided('bw_a', 'bw');
SELECT pg_temp.decided('bw_b', 'bw');
SELECT pg_temp.decided('bw_c', 'bw', 2);
SELECT pg_temp.decided('bw_d', 'bw');
INSERT INTO batches
SELECT 'bw', c.* FROM harvest.complete_activities('bw',
    ARRAY[pg_temp.task('bw_d.1'), pg_temp.task('bw_c.2'), pg_temp.task('bw_b.1'), pg_temp.task('bw_c.1'),
          pg_temp.task('bw_a.1')],
    ARRAY[pg_temp.token('bw_d.1'), pg_temp.token('bw_c.2'), pg_temp.token('bw_b.1'), pg_temp.token('bw_c.1'),
          pg_temp.token('bw_a.1')],
    ARRAY['"bw_d.1"', '"bw_c.2"', '"bw_b.1"', '"bw_c.1"', '"bw_a.1"']::jsonb[], true, 45,
    ARRAY[pg_temp.decision('bw_d.1', '[{"type": "schedule_activity", "seq": 2, "name": "next", "queue": "dq_bw"}]'),
          NULL,
          pg_temp.decision('bw_b.1', '[{"type": "complete_workflow", "result": "b"}]', 1),
          pg_temp.decision('bw_c.1', '[]'),
          pg_temp.decision('bw_a.1', '[{"type": "schedule_activity", "seq": 2, "name": "next", "queue": "dq_bw"}]',
                           1)]) AS c;
SELECT results_eq(
    $$SELECT b.task_id, b.outcome, b.decided - 'handed', b.handed IS NOT NULL
      FROM batches AS b WHERE b.batch = 'bw' ORDER BY b.task_id$$,
    $$VALUES (pg_temp.task('bw_a.1'), 'completed'::text, '{"last_event_id": 6, "execution_status": "RUNNING"}'::jsonb, false),
             (pg_temp.task('bw_b.1'), 'completed', '{"last_event_id": 6, "execution_status": "COMPLETED"}', false),
             (pg_temp.task('bw_c.1'), 'completed', '{"last_event_id": 6, "execution_status": "RUNNING"}', false),
             (pg_temp.task('bw_c.2'), 'completed', NULL, true),
             (pg_temp.task('bw_d.1'), 'completed', '{"last_event_id": 6, "execution_status": "RUNNING"}', false)$$,
    'a batch of four runs'' decisions and a result: every item completed, each decision''s last event id');
SELECT results_eq(
    $$SELECT k, array_agg(ev.event_id::text || ':' || ev.event_type || coalesce(':' || (ev.event_data ->> 'seq'), '')
                          ORDER BY ev.event_id)
      FROM unnest(ARRAY['bw_a', 'bw_b', 'bw_c', 'bw_d']) AS k
      JOIN harvest.events AS ev ON ev.execution_id = pg_temp.run(k || '.1') AND ev.event_id > 3
      GROUP BY k ORDER BY k$$,
    $$VALUES ('bw_a'::text, ARRAY['4:ActivityCompleted:1', '5:WorkflowTaskCompleted', '6:ActivityScheduled:2']),
             ('bw_b', ARRAY['4:ActivityCompleted:1', '5:WorkflowTaskCompleted', '6:WorkflowCompleted']),
             ('bw_c', ARRAY['4:ActivityScheduled:2', '5:ActivityCompleted:1', '6:WorkflowTaskCompleted',
                            '7:ActivityCompleted:2']),
             ('bw_d', ARRAY['4:ActivityCompleted:1', '5:WorkflowTaskCompleted', '6:ActivityScheduled:2'])$$,
    'each run''s history: its decision''s events in order after its last, a later result of the run after them');
SELECT results_eq(
    $$SELECT k, e.last_event_id = (SELECT max(ev.event_id) FROM harvest.events AS ev WHERE ev.execution_id = e.id),
             e.last_event_id = (SELECT count(*) FROM harvest.events AS ev WHERE ev.execution_id = e.id),
             e.history_bytes = (SELECT sum(harvest._event_bytes(ev.event_data))
                                FROM harvest.events AS ev WHERE ev.execution_id = e.id),
             e.decided_by, e.decided_through, e.status
      FROM unnest(ARRAY['bw_a', 'bw_b', 'bw_c', 'bw_d']) AS k JOIN harvest.executions AS e ON e.id = pg_temp.run(k || '.1')
      ORDER BY k$$,
    $$VALUES ('bw_a'::text, true, true, true, 'bw'::text, 6::bigint, 'RUNNING'::text),
             ('bw_b', true, true, true, 'bw', 4, 'COMPLETED'),
             ('bw_c', true, true, true, 'bw', 6, 'RUNNING'),
             ('bw_d', true, true, true, 'bw', 6, 'RUNNING')$$,
    'each run: last_event_id its last event and its count (gapless), history_bytes its events'' sum, decided_through');
SELECT results_eq(
    $$SELECT array_agg(e ->> 'event_id' || ':' || (e ->> 'event_type') ORDER BY (e ->> 'event_id')::bigint)
      FROM batches AS b, jsonb_array_elements(b.handed -> 'new_events') AS e
      WHERE b.batch = 'bw' AND b.task_id = pg_temp.task('bw_c.2')$$,
    $$VALUES (ARRAY['7:ActivityCompleted'])$$,
    'the run woken by its later result: its handed task carries the events after its decision');
SELECT results_eq(
    $$SELECT (h ->> 'task_id')::bigint, h ->> 'workflow_id', h ->> 'queue', (h ->> 'fencing_token')::bigint,
             h ? 'new_events_after', jsonb_array_length(b.decided -> 'handed')
      FROM batches AS b, LATERAL (SELECT b.decided -> 'handed' -> 0 AS h) AS x
      WHERE b.batch = 'bw' AND b.task_id = pg_temp.task('bw_a.1')$$,
    $$SELECT t.id, e.workflow_id, 'dq_bw'::text, t.fencing_token, false, 1
      FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
      WHERE t.execution_id = pg_temp.run('bw_a.1') AND t.kind = 'activity' AND t.status = 'running'
        AND t.lease_owner = 'bw'$$,
    'a decision''s handed activity in the batch: decided.handed is its leased row, described with the run as the decision read it');
-- _apply_decision with p_defer_events, of a decision that goes in one append, leaves that
-- append to its caller: the ids (deferred_last, from the row as read), the row update's
-- counters (deferred_bytes, deferred_through, deferred_hold) and the events, which the
-- caller's _update_held_rows and _insert_events put in.
SELECT pg_temp.decided('bw_e', 'bw');
DELETE FROM harvest.tasks WHERE id = pg_temp.task('bw_e.1');
CREATE TEMP TABLE bw_deferred ON COMMIT DROP AS
SELECT * FROM harvest._apply_decision(pg_temp.run('bw_e.1'), 3, '[{"type": "start_timer", "seq": 2, "duration": 60}]',
                                      'bw', NULL, NULL, 0, p_defer_events => true);
SELECT results_eq(
    $$SELECT d.last_event_id, d.deferred_types, d.deferred_last, pg_temp.last_event_id(pg_temp.run('bw_e.1')),
             (SELECT max(ev.event_id) FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('bw_e.1')),
             d.deferred_bytes = (SELECT sum(harvest._event_bytes(x.data)) FROM unnest(d.deferred_datas) AS x (data)),
             d.deferred_through, d.deferred_hold, d.caps_pending
      FROM bw_deferred AS d$$,
    $$VALUES (5::bigint, ARRAY['WorkflowTaskCompleted', 'TimerStarted'], 5::bigint, 3::bigint, 3::bigint, true,
              5::bigint, false, false)$$,
    '_apply_decision(p_defer_events): ids 4-5 and the row''s update left to the caller (row and events untouched)');
SELECT harvest._update_held_rows(ARRAY[ROW(pg_temp.run('bw_e.1'), d.deferred_last, 2, d.deferred_bytes,
                                     d.deferred_through, d.deferred_hold, NULL, NULL, NULL)::harvest.held_run_row], 'bw')
FROM bw_deferred AS d;
SELECT harvest._insert_events(ARRAY[pg_temp.run('bw_e.1'), pg_temp.run('bw_e.1')], ARRAY[3, 3]::bigint[],
                              d.deferred_types, d.deferred_datas)
FROM bw_deferred AS d;
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data ->> 'through'
      FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('bw_e.1') AND ev.event_id > 3 ORDER BY ev.event_id$$,
    $$VALUES (4::bigint, 'WorkflowTaskCompleted'::text, '3'::text), (5, 'TimerStarted', NULL)$$,
    '_insert_events(): the events at their ids (offset + subscript), in order');
SELECT results_eq(
    $$SELECT e.last_event_id, e.decided_by, e.decided_through, e.wake_hold,
             e.history_bytes = (SELECT sum(harvest._event_bytes(ev.event_data)) FROM harvest.events AS ev
                                WHERE ev.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('bw_e.1')$$,
    $$VALUES (5::bigint, 'bw'::text, 5::bigint, false, true)$$,
    '_update_held_rows(): the run''s row as the one append would have left it');
-- What a batch holds of a run (its decision's row update, events and handed activity) goes
-- in before that run's next item: here a result of the same run after a decision that holds
-- its wake-ups (hold_wakeups) and hands an activity. The result's wake-up reads the run's
-- wake_hold (in the held row) and its open activity tasks (the held handed one): held,
-- it does not wake the run.
SELECT harvest.register_worker('bw', ARRAY['wq_bw_a', 'wq_bw_b', 'wq_bw_c', 'wq_bw_d', 'wq_bw_e', 'wq_bw_h', 'wq_bw_k',
                                     'dq_bw'],
                               'host', 3);
SELECT pg_temp.decided('bw_h', 'bw', 2);
INSERT INTO batches
SELECT 'bw_h', c.* FROM harvest.complete_activities('bw',
    ARRAY[pg_temp.task('bw_h.1'), pg_temp.task('bw_h.2')], ARRAY[pg_temp.token('bw_h.1'), pg_temp.token('bw_h.2')],
    ARRAY['"bw_h.1"', '"bw_h.2"']::jsonb[], true, 45,
    ARRAY[pg_temp.decision('bw_h.1', '[{"type": "hold_wakeups"},
                                       {"type": "schedule_activity", "seq": 3, "name": "next", "queue": "dq_bw"}]', 1),
          NULL]) AS c;
SELECT results_eq(
    $$SELECT b.outcome, b.decided ->> 'last_event_id', jsonb_array_length(b.decided -> 'handed'), b.handed IS NULL
      FROM batches AS b WHERE b.batch = 'bw_h' ORDER BY b.task_id$$,
    $$VALUES ('completed'::text, '7'::text, 1, true), ('completed', NULL, NULL, true)$$,
    'a decision holding its wake-ups and a later result of its run in one batch: the result wakes nothing');
SELECT results_eq(
    $$SELECT e.wake_hold, e.last_event_id,
             (SELECT array_agg(ev.event_id::text || ':' || ev.event_type ORDER BY ev.event_id) FROM harvest.events AS ev
              WHERE ev.execution_id = e.id AND ev.event_id > 4),
             (SELECT array_agg(t.kind || ':' || t.status || ':' || coalesce(t.seq::text, '') ORDER BY t.id)
              FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('bw_h.1')$$,
    $$VALUES (true, 8::bigint, ARRAY['5:ActivityCompleted', '6:WorkflowTaskCompleted', '7:ActivityScheduled',
                                     '8:ActivityCompleted'], ARRAY['activity:running:3'])$$,
    '... the run''s row and history as the decision left them, the result after, no workflow task (its handed activity open)');
-- A decision that ends its run and a later result of the run in one batch: the close (held
-- with the decision's append) goes in before the result is taken, which finds its task gone
-- with the run's, as it would after a close of its own.
SELECT pg_temp.decided('bw_k', 'bw', 2);
INSERT INTO batches
SELECT 'bw_k', c.* FROM harvest.complete_activities('bw',
    ARRAY[pg_temp.task('bw_k.1'), pg_temp.task('bw_k.2')], ARRAY[pg_temp.token('bw_k.1'), pg_temp.token('bw_k.2')],
    ARRAY['"bw_k.1"', '"bw_k.2"']::jsonb[], true, 45,
    ARRAY[pg_temp.decision('bw_k.1', '[{"type": "complete_workflow", "result": "k"}]'), NULL]) AS c;
SELECT results_eq(
    $$SELECT b.outcome, b.decided ->> 'last_event_id', b.decided ->> 'execution_status'
      FROM batches AS b WHERE b.batch = 'bw_k' ORDER BY b.task_id$$,
    $$VALUES ('completed'::text, '7'::text, 'COMPLETED'::text), ('gone', NULL, NULL)$$,
    'a closing decision and a later result of its run in one batch: the result''s task gone with the run''s');
SELECT results_eq(
    $$SELECT e.status, e.last_event_id,
             (SELECT array_agg(ev.event_id::text || ':' || ev.event_type ORDER BY ev.event_id) FROM harvest.events AS ev
              WHERE ev.execution_id = e.id AND ev.event_id > 4),
             (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('bw_k.1')$$,
    $$VALUES ('COMPLETED'::text, 7::bigint, ARRAY['5:ActivityCompleted', '6:WorkflowTaskCompleted', '7:WorkflowCompleted'],
              0::bigint)$$,
    '... the run closed with the decision''s events, no result after them, no task left');
SELECT results_eq(
    $$SELECT decided_by, decided_through, last_event_id, status FROM harvest.executions WHERE id = pg_temp.run('da.1')$$,
    $$VALUES ('dw'::text, 6::bigint, 6::bigint, 'RUNNING'::text)$$,
    'the run: decided_by the worker, decided_through past the decision''s own events (its marker and ActivityScheduled)');
SELECT results_eq(
    $$SELECT kind, seq, status, lease_owner, attempt FROM harvest.tasks WHERE execution_id = pg_temp.run('da.1')$$,
    $$VALUES ('activity'::text, 2, 'running'::text, 'dw'::text, 1)$$,
    'no workflow task: the run''s one task is the new activity, leased to the worker (hand_off_slots 1)');
SELECT results_eq(
    $$SELECT (h ->> 'task_id')::bigint, h ->> 'kind', (h ->> 'execution_id')::uuid, h ->> 'queue', (h ->> 'seq')::integer,
             h ->> 'activity_name', h -> 'input', (h ->> 'attempt')::integer, (h ->> 'fencing_token')::bigint,
             (SELECT r.lease_expires_at FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint)
      FROM (SELECT decided -> 'handed' -> 0 AS h FROM batches WHERE batch = 'da' AND task_id = pg_temp.task('da.1')) AS b$$,
    $$SELECT t.id, 'activity'::text, t.execution_id, 'dq_next'::text, 2, 'next'::text, '[2]'::jsonb, 1, t.fencing_token,
             t.lease_expires_at
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('da.1')$$,
    'decided.handed holds the new activity as the worker receives it');
SELECT results_eq(
    $$SELECT b.decided, (b.handed ->> 'task_id')::bigint, t.status, t.lease_owner
      FROM batches AS b JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('da_plain.1') AND t.kind = 'workflow'
      WHERE b.batch = 'da' AND b.task_id = pg_temp.task('da_plain.1')$$,
    $$VALUES (NULL::jsonb, (SELECT t.id FROM harvest.tasks AS t
                             WHERE t.execution_id = pg_temp.run('da_plain.1') AND t.kind = 'workflow'),
              'running'::text, 'dw'::text)$$,
    'the item without a decision: decided NULL, its woken workflow task handed as before');
-- The worker decides on the handed activity's result in turn, after the event its
-- decision ended with.
SELECT pg_temp.remember('da.2', pg_temp.run('da.1'), (h ->> 'task_id')::bigint, (h ->> 'fencing_token')::bigint)
FROM (SELECT decided -> 'handed' -> 0 AS h FROM batches WHERE batch = 'da' AND task_id = pg_temp.task('da.1')) AS b;
SELECT pg_temp.decide_with_result('da2', 'dw', 'da.2', pg_temp.decision('da.2', '[{"type": "complete_workflow", "result": 2}]'));
SELECT is((SELECT decided FROM batches WHERE batch = 'da2'),
          '{"last_event_id": 9, "execution_status": "COMPLETED", "handed": []}'::jsonb,
          'the handed activity''s result, decided on after the decision''s last event: accepted in turn');

-- hand_off_slots 0: the scheduled activity is queued.
SELECT pg_temp.decided('da0', 'dw');
SELECT pg_temp.decide_with_result('da0', 'dw', 'da0.1', pg_temp.decision('da0.1', '[{"type": "schedule_activity", "seq": 2,
                                                                       "name": "next", "queue": "dq_next"}]'));
SELECT is((SELECT decided FROM batches WHERE batch = 'da0'),
          '{"last_event_id": 6, "execution_status": "RUNNING", "handed": []}'::jsonb,
          'hand_off_slots 0: decided.handed is []');
SELECT results_eq($$SELECT kind, seq, status, lease_owner FROM harvest.tasks WHERE execution_id = pg_temp.run('da0.1')$$,
                  $$VALUES ('activity'::text, 2, 'pending'::text, NULL::text)$$,
                  'hand_off_slots 0: the activity is pending, and there is no workflow task');

-- A decision that completes the workflow.
SELECT pg_temp.decided('da_done', 'dw');
SELECT pg_temp.decide_with_result('da_done', 'dw', 'da_done.1',
                      pg_temp.decision('da_done.1', '[{"type": "complete_workflow", "result": "ok"}]', 1));
SELECT is((SELECT decided FROM batches WHERE batch = 'da_done'),
          '{"last_event_id": 6, "execution_status": "COMPLETED", "handed": []}'::jsonb,
          'a decision that completes the workflow: execution_status COMPLETED');
SELECT results_eq(
    $$SELECT e.status, e.output, (SELECT event_type FROM pg_temp.last_event(pg_temp.run('da_done.1'))),
             (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('da_done.1')$$,
    $$VALUES ('COMPLETED'::text, '"ok"'::jsonb, 'WorkflowCompleted'::text, 0::bigint)$$,
    'the run is COMPLETED with its result, WorkflowCompleted last, no task left');

-- result_text is compared with the stored jsonb text, whatever order the worker's JSON had.
SELECT pg_temp.decided('da_norm', 'dw');
SELECT pg_temp.decide_with_result('da_norm', 'dw', 'da_norm.1', pg_temp.decision('da_norm.1', '[]', 0, NULL, '{"a": 2, "b": 1}'),
                      '{"b": 1, "a": 2}');
SELECT is((SELECT decided FROM batches WHERE batch = 'da_norm'),
          '{"last_event_id": 5, "execution_status": "RUNNING", "handed": []}'::jsonb,
          'result_text equal to the stored jsonb text: accepted');

-- Refused: the result is recorded alone, the run woken as without a decision.
-- (a) Something was appended after the worker's decision (after is not the last event).
SELECT pg_temp.decided('da_after', 'dw');
SELECT is(harvest._append_event(pg_temp.run('da_after.1'), 'SignalReceived', '{"name": "s", "payload": null}'), 4::bigint,
          'setup: a signal is appended after the worker''s decision');
SELECT pg_temp.decide_with_result('da_after', 'dw', 'da_after.1', pg_temp.decision('da_after.1', '[]', 0, 3));
SELECT pg_temp.refused('da_after', true,
                       'after is not the last event: refused; the result alone, its workflow task handed to the worker');
SELECT is((SELECT array_agg(e ->> 'event_type' ORDER BY (e ->> 'event_id')::bigint)
           FROM batches AS b, jsonb_array_elements(b.handed -> 'new_events') AS e WHERE b.batch = 'da_after'),
          ARRAY['SignalReceived', 'ActivityCompleted'],
          'the handed workflow task carries the signal and the result (not the decision''s own events)');
-- (b) Another worker decided last.
SELECT pg_temp.decided('da_other', 'someone-else');
SELECT pg_temp.decide_with_result('da_other', 'dw', 'da_other.1', pg_temp.decision('da_other.1', '[]'));
SELECT pg_temp.refused('da_other', false,
                       'another worker decided last: refused; the result alone, a pending workflow task');
-- (c) The run has a workflow task already.
SELECT pg_temp.decided('da_open', 'dw');
SELECT lives_ok(format($$SELECT harvest._ensure_workflow_task('%s')$$, pg_temp.run('da_open.1')),
                'setup: the run has a pending workflow task');
SELECT pg_temp.decide_with_result('da_open', 'dw', 'da_open.1', pg_temp.decision('da_open.1', '[]'));
SELECT pg_temp.refused('da_open', false,
                       'a workflow task is open: refused; the result alone, the open task left to see it');
-- (d) The run saw the result as another text than the one stored.
SELECT pg_temp.decided('da_text', 'dw');
SELECT pg_temp.decide_with_result('da_text', 'dw', 'da_text.1', pg_temp.decision('da_text.1', '[]', 0, NULL, '{"b": 1, "a": 2}'),
                      '{"a": 2, "b": 1}');
SELECT pg_temp.refused('da_text', true,
                       'result_text is not the stored text: refused; the result alone, handed to the worker');
SELECT is((SELECT event_data -> 'result' FROM pg_temp.last_event(pg_temp.run('da_text.1'))), '{"a": 2, "b": 1}'::jsonb,
          'the refused item''s result is stored as sent');
-- (e) The hand-off rules refuse: a higher-priority task pending on the run's queue,
-- a queue the worker does not poll, a worker that is not active.
SELECT pg_temp.decided('da_prio', 'dw');
SELECT harvest.start_workflow('act_wf', '[]', 'da_prio_blocker', 'wq_da_prio', p_priority => 1);
SELECT pg_temp.decide_with_result('da_prio', 'dw', 'da_prio.1', pg_temp.decision('da_prio.1', '[]'));
SELECT pg_temp.refused('da_prio', false,
                       'a higher-priority task pending on the queue: refused; the result alone, a pending workflow task');
SELECT pg_temp.decided('da_unpolled', 'dw');
SELECT pg_temp.decide_with_result('da_unpolled', 'dw', 'da_unpolled.1', pg_temp.decision('da_unpolled.1', '[]'));
SELECT pg_temp.refused('da_unpolled', false,
                       'a queue the worker does not poll: refused; the result alone, a pending workflow task');
SELECT pg_temp.decided('da_drain', 'dw_drain');
SELECT pg_temp.decide_with_result('da_drain', 'dw_drain', 'da_drain.1', pg_temp.decision('da_drain.1', '[]'));
SELECT pg_temp.refused('da_drain', false, 'a draining worker: refused; the result alone, a pending workflow task');
-- (f) p_hand_off false: no decision is applied.
SELECT pg_temp.decided('da_off', 'dw');
SELECT pg_temp.decide_with_result('da_off', 'dw', 'da_off.1', pg_temp.decision('da_off.1', '[]'), p_hand_off => false);
SELECT pg_temp.refused('da_off', false,
                       'p_hand_off false: the decision is not applied; the result alone, a pending workflow task');

-- A refused item's decision writes nothing either.
SELECT pg_temp.decided('da_stale', 'dw');
INSERT INTO batches
SELECT 'da_stale', c.* FROM harvest.complete_activities('dw', ARRAY[pg_temp.task('da_stale.1')],
    ARRAY[pg_temp.token('da_stale.1') - 1], ARRAY['"da_stale.1"']::jsonb[], true, 45,
    ARRAY[pg_temp.decision('da_stale.1', '[{"type": "complete_workflow", "result": null}]')]) AS c;
SELECT results_eq($$SELECT outcome, handed, decided FROM batches WHERE batch = 'da_stale'$$,
                  $$VALUES ('stale'::text, NULL::jsonb, NULL::jsonb)$$,
                  'a stale item with a decision: refused, decided NULL');
SELECT results_eq(
    $$SELECT t.kind, t.status, t.fencing_token, e.status, e.last_event_id, e.decided_through
      FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
      WHERE t.execution_id = pg_temp.run('da_stale.1')$$,
    $$VALUES ('activity'::text, 'running'::text, pg_temp.token('da_stale.1'), 'RUNNING'::text, 3::bigint, 3::bigint)$$,
    'the stale item: its task untouched, no event, the run still RUNNING');

-- A decision that cannot be applied (an unknown command, no commands) fails the
-- whole call; the worker retries without decisions.
SELECT pg_temp.decided('da_bad', 'dw');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_activities('dw', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
                                                                    ARRAY['"da_bad.1"']::jsonb[], true, 45,
                                                                    ARRAY['%s']::jsonb[])$$,
                        pg_temp.task('da_bad.1'), pg_temp.token('da_bad.1'),
                        pg_temp.decision('da_bad.1', '[{"type": "launch_rocket"}]')),
                 'HR001', 'unknown command type "launch_rocket"',
                 'a decision with an unknown command: HR001 for the whole call');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_activities('dw', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
                                                                    ARRAY['"da_bad.1"']::jsonb[], true, 45,
                                                                    ARRAY['%s']::jsonb[])$$,
                        pg_temp.task('da_bad.1'), pg_temp.token('da_bad.1'),
                        pg_temp.decision('da_bad.1', NULL) - 'commands'),
                 'HR001', 'commands must be a JSON array', 'a decision without commands: HR001 for the whole call');
SELECT throws_like(format($$SELECT * FROM harvest.complete_activities('dw', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
                                                                      ARRAY['"da_bad.1"']::jsonb[], true, 45,
                                                                      ARRAY['%s']::jsonb[])$$,
                          pg_temp.task('da_bad.1'), pg_temp.token('da_bad.1'),
                          pg_temp.decision('da_bad.1', '[]') || '{"after": "x"}'),
                   'the decision sent with task % needs "after" (a JSON number) and "result_text" (a JSON string), got %',
                   'a decision whose "after" is not a number: HR001 naming what it needs');
SELECT results_eq(
    $$SELECT t.status, e.last_event_id, e.decided_through FROM harvest.tasks AS t
      JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.execution_id = pg_temp.run('da_bad.1')$$,
    $$VALUES ('running'::text, 3::bigint, 3::bigint)$$,
    'the failed call wrote nothing: the activity is still running, no event');
SELECT pg_temp.batch('da_bad', 'dw', ARRAY['da_bad.1']);
SELECT results_eq($$SELECT outcome, decided, handed IS NOT NULL FROM batches WHERE batch = 'da_bad'$$,
                  $$VALUES ('completed'::text, NULL::jsonb, true)$$,
                  'retried without decisions: completed, the workflow task handed');

SELECT throws_ok($$SELECT * FROM harvest.complete_activities('w', ARRAY[1, 2]::bigint[], ARRAY[1, 2]::bigint[],
                                                             ARRAY['1', '2']::jsonb[], true, 45, ARRAY['{}']::jsonb[])$$,
                 'HR001', 'task ids, fencing tokens, results (and decisions, if given) must be arrays of one length and one first subscript',
                 'complete_activities() with fewer decisions than items: HR001');

-- _may_decide_on_result on its own.
SELECT pg_temp.decided('may', 'dw');
CREATE FUNCTION pg_temp.may(p_after bigint, p_text text, p_worker text, p_queues text[], p_result jsonb DEFAULT '"r"')
RETURNS boolean LANGUAGE sql AS $fn$
    SELECT harvest._may_decide_on_result((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('may.1')),
                                         p_result, p_after, p_text, p_worker, p_queues);
$fn$;
SELECT results_eq(
    $$VALUES (pg_temp.may(3, '"r"', 'dw', ARRAY['wq_may'])), (pg_temp.may(3, 'null', 'dw', ARRAY['wq_may'], NULL))$$,
    $$VALUES (true), (true)$$,
    '_may_decide_on_result(): true when the run is where the worker left it (a NULL result reads as null)');
SELECT results_eq(
    $$VALUES (pg_temp.may(2, '"r"', 'dw', ARRAY['wq_may'])), (pg_temp.may(3, '"r"', 'someone-else', ARRAY['wq_may'])),
             (pg_temp.may(3, '"R"', 'dw', ARRAY['wq_may'])), (pg_temp.may(3, '"r"', 'dw', ARRAY['wq_other'])),
             (pg_temp.may(3, '"r"', 'dw', NULL))$$,
    $$VALUES (false), (false), (false), (false), (false)$$,
    '_may_decide_on_result(): false for another after, worker, result text, or queues that do not allow the hand-off');
SELECT lives_ok(format($$SELECT harvest._ensure_workflow_task('%s')$$, pg_temp.run('may.1')),
                'setup: the run gets a workflow task');
SELECT is(pg_temp.may(3, '"r"', 'dw', ARRAY['wq_may']), false,
          '_may_decide_on_result(): false once a workflow task is open');

-- _store_activity_result on its own: the result recorded, the task dropped, the run not woken.
SELECT pg_temp.decided('store', 'dw');
SELECT results_eq(
    $$SELECT (s).id, (s).last_event_id, (s).status
      FROM (SELECT harvest._store_activity_result(t, '{"x": 1}') AS s
            FROM harvest.tasks AS t WHERE t.id = pg_temp.task('store.1')) AS r$$,
    $$SELECT pg_temp.run('store.1'), 3::bigint, 'RUNNING'::text$$,
    '_store_activity_result() returns the execution as it was before the result');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data - 'started_at', (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = e.last_event_id
      WHERE e.id = pg_temp.run('store.1')$$,
    $$VALUES (4::bigint, 'ActivityCompleted'::text, '{"seq": 1, "result": {"x": 1}, "attempt": 1}'::jsonb, 0::bigint)$$,
    '_store_activity_result(): ActivityCompleted appended, the task dropped, no workflow task');
SELECT pg_temp.decided('store_end', 'dw');
CREATE TEMP TABLE ended_task ON COMMIT DROP AS SELECT t FROM harvest.tasks AS t WHERE t.id = pg_temp.task('store_end.1');
SELECT lives_ok(format($$SELECT harvest.terminate_workflow('%s')$$, pg_temp.run('store_end.1')),
                'setup: the run is terminated');
SELECT ok(harvest._store_activity_result((SELECT t FROM ended_task), '1') IS NULL,
          '_store_activity_result() of a run that ended: NULL');
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('store_end.1'))), 'WorkflowTerminated',
          'and it records nothing');

-- _activity_completed: the event data both paths write (a result alone, or with its decision).
SELECT is(harvest._activity_completed((SELECT t FROM ended_task), '{"b": [1, 2]}'),
          jsonb_build_object('seq', 1, 'result', '{"b": [1, 2]}'::jsonb, 'attempt', 1,
                             'started_at', (SELECT (t).started_at FROM ended_task)),
          '_activity_completed(): seq, result and attempt of the task, and when the attempt started');
SELECT is(harvest._activity_completed((SELECT t FROM ended_task), NULL) - 'started_at',
          '{"seq": 1, "result": null, "attempt": 1}'::jsonb,
          '_activity_completed() of a NULL result: JSON null');
-- _activity_completed_data: the same object from the task's columns (what complete_activities
-- has of a task its DELETE took): started_at only while a worker held the attempt.
SELECT is(harvest._activity_completed_data(1, 1, 'w', (SELECT (t).started_at FROM ended_task), '{"b": [1, 2]}'),
          harvest._activity_completed((SELECT t FROM ended_task), '{"b": [1, 2]}'),
          '_activity_completed_data() of the task''s columns is _activity_completed() of its row');
SELECT is(harvest._activity_completed_data(2, 3, NULL, '2030-01-01 00:00:00+00', NULL),
          '{"seq": 2, "result": null, "attempt": 3}'::jsonb,
          '_activity_completed_data(): no started_at for an attempt no worker holds; a NULL result is JSON null');
-- _attempt_started: the final attempt's start while a worker holds it; nothing once let go
-- (completed elsewhere by its task token: not worker compute).
SELECT is(harvest._attempt_started((SELECT t FROM ended_task)),
          jsonb_build_object('started_at', (SELECT (t).started_at FROM ended_task)),
          '_attempt_started(): {started_at} of an attempt a worker holds');
SELECT is(harvest._attempt_started(jsonb_populate_record((SELECT t FROM ended_task), '{"lease_owner": null}')), '{}'::jsonb,
          '_attempt_started(): nothing for an attempt a worker let go of');
-- Both are inlined into the expression that calls them (complete_activities' per-result
-- step): declared no less volatile than their bodies, they do not run as statements of their own.
-- (A whole-row variable stands for the caller's row: EXPLAIN (GENERIC_PLAN) is PostgreSQL 16+.)
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_completed(t, t.input) FROM harvest.tasks AS t'),
               '%_activity_completed(%', '_activity_completed() is inlined into its caller''s expression');
SELECT unalike(pg_temp.plan_of('SELECT harvest._attempt_started(t) FROM harvest.tasks AS t'),
               '%_attempt_started(%', '_attempt_started() is inlined into its caller''s expression');
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_completed_data(t.seq, t.attempt, t.lease_owner, t.started_at, t.input)
                                 FROM harvest.tasks AS t'),
               '%_activity_completed_data(%', '_activity_completed_data() is inlined into its caller''s expression');

-- ---------------------------------------------------------------- held wake-ups
-- A decision led by hold_wakeups (the worker's word that the run waits for all of its open
-- activities at once) sets executions.wake_hold with its marker; a result that leaves
-- another activity task of the run open then makes no workflow task (_wake_after_results);
-- the last one does, and so do a final failure and every other wake-up.
-- A held run on queue wq_<key> with p_n activities (seqs 1..p_n) on aq_<key>, each
-- claimed by worker-a as key <key>.<seq>.
CREATE FUNCTION pg_temp.held(p_key text, p_n integer, p_hold boolean DEFAULT true) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    PERFORM pg_temp.start_decided(p_key, 'held_wf', 'wq_' || p_key,
        CASE WHEN p_hold THEN '[{"type": "hold_wakeups"}]'::jsonb ELSE '[]'::jsonb END
        || (SELECT jsonb_agg(jsonb_build_object('type', 'schedule_activity', 'seq', i, 'name', 'act_held',
                                                'input', jsonb_build_array(i), 'queue', 'aq_' || p_key,
                                                'options', '{"dead_letter": false}'::jsonb) ORDER BY i)
            FROM generate_series(1, p_n) AS i));
    FOR v_task IN SELECT * FROM harvest.claim_tasks('worker-a', ARRAY['aq_' || p_key], p_n) LOOP
        PERFORM pg_temp.remember(p_key || '.' || (SELECT t.seq FROM harvest.tasks AS t WHERE t.id = v_task.task_id),
                                 v_task.execution_id, v_task.task_id, v_task.fencing_token);
    END LOOP;
END;
$fn$;
CREATE FUNCTION pg_temp.held_woken(p_key text) RETURNS boolean LANGUAGE sql AS $fn$
    SELECT EXISTS (SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run(p_key || '.1') AND kind = 'workflow');
$fn$;
CREATE FUNCTION pg_temp.complete_held(p_keys text[]) RETURNS void LANGUAGE sql AS $fn$
    SELECT count(*) FROM harvest.complete_activities('worker-a',
        ARRAY(SELECT pg_temp.task(k) FROM unnest(p_keys) AS k), ARRAY(SELECT pg_temp.token(k) FROM unnest(p_keys) AS k),
        ARRAY(SELECT to_jsonb(k) FROM unnest(p_keys) AS k));
$fn$;

SELECT pg_temp.held('hold', 3);
SELECT is((SELECT wake_hold FROM harvest.executions WHERE id = pg_temp.run('hold.1')), true,
          'a decision led by hold_wakeups sets the run''s wake_hold');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('hold.1')
           AND event_type IN ('ActivityScheduled', 'WorkflowTaskCompleted')), 4::bigint,
          '... and writes no event of its own (the marker and three ActivityScheduled)');
SELECT pg_temp.complete_held(ARRAY['hold.1']);
SELECT is(pg_temp.held_woken('hold'), false,
          'held: complete_activities() records a result and makes no workflow task while another activity task is open');
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('hold.1'))), 'ActivityCompleted',
          '... the result is in the history');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s, '"hold.2"')$$, pg_temp.task('hold.2'), pg_temp.token('hold.2')),
                'held: complete_activity() of the second');
SELECT is(pg_temp.held_woken('hold'), false, '... makes no workflow task either (one activity task left)');
SELECT is(pg_temp.fail('hold.3'), 'retry_scheduled', 'held: the last activity''s attempt fails and is retried');
SELECT is(pg_temp.held_woken('hold'), false, '... a retry wakes nothing: the task is still open');
SET LOCAL harvest.fake_now = '2030-01-01 00:05:05+00';  -- (past the retry's backoff)
SELECT is((SELECT pg_temp.remember('hold.3', c.execution_id, c.task_id, c.fencing_token) = pg_temp.run('hold.1')
           FROM harvest.claim_tasks('worker-a', ARRAY['aq_hold'], 1) AS c), true,
          '... and its second attempt is claimed');
SET LOCAL harvest.fake_now = '2030-01-01 00:05:00+00';
SELECT pg_temp.complete_held(ARRAY['hold.3']);
SELECT results_eq($$SELECT status FROM harvest.tasks WHERE execution_id = pg_temp.run('hold.1') AND kind = 'workflow'$$,
                  $$VALUES ('pending'::text)$$, 'held: the result that leaves no activity task open wakes the run');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('hold.1') AND event_type = 'ActivityCompleted'),
          3::bigint, '... with all three results in its history');
SELECT is(pg_temp.decide('hold.1', '[{"type": "schedule_activity", "seq": 4, "name": "act_held", "input": [4], "queue": "aq_hold"}]'),
          'RUNNING', 'a decision without hold_wakeups');
SELECT is((SELECT wake_hold FROM harvest.executions WHERE id = pg_temp.run('hold.1')), false,
          '... clears wake_hold');

SELECT pg_temp.held('nohold', 2, false);
SELECT pg_temp.complete_held(ARRAY['nohold.1']);
SELECT is(pg_temp.held_woken('nohold'), true, 'not held: a result wakes the run while another activity task is open (as before)');

SELECT pg_temp.held('hold_batch', 3);
SELECT pg_temp.complete_held(ARRAY['hold_batch.1', 'hold_batch.2', 'hold_batch.3']);
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('hold_batch.1') AND kind = 'workflow'),
          1::bigint, 'held: one batch with all of a run''s results wakes it');

SELECT pg_temp.held('hold_fail', 2);
SELECT is(pg_temp.fail('hold_fail.1', '{"error_type": "E", "message": "no", "non_retryable": true}'), 'failed',
          'held: an activity fails for good');
SELECT is(pg_temp.held_woken('hold_fail'), true, '... and wakes the run at once, its other activity still open');

SELECT pg_temp.held('hold_sig', 2);
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('hold_sig.1'), 'go', '1')$$, 'held: a signal');
SELECT is(pg_temp.held_woken('hold_sig'), true, '... wakes the run at once');
SELECT pg_temp.complete_held(ARRAY['hold_sig.1']);
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('hold_sig.1') AND kind = 'workflow'),
          1::bigint, '... and a result after it finds the run''s one workflow task');

-- A decision's marker flushed before hold_wakeups is read (a child's start flushes the events
-- before it) does not hold: the worker sends hold_wakeups first.
SELECT pg_temp.start_run('hold_late', 'held_wf', 'wq_hold_late');
SELECT is(pg_temp.decide('hold_late', '[{"type": "start_child_workflow", "seq": 1, "workflow_name": "kid",
                                         "workflow_id": "hold_late_kid", "input": []},
                                        {"type": "hold_wakeups"}]'), 'RUNNING', 'hold_wakeups after a child''s start');
SELECT is((SELECT wake_hold FROM harvest.executions WHERE id = pg_temp.run('hold_late')), false,
          '... holds nothing: the marker went in before it');
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('hold_late'), 'go', '1')$$, 'a signal wakes it');
SELECT throws_ok($$SELECT pg_temp.decide('hold_late', '[{"type": "complete_workflow", "result": 1}, {"type": "hold_wakeups"}]')$$,
                 'HR001', 'command hold_wakeups follows the end of the workflow',
                 'hold_wakeups after the run''s end: HR001');

-- Payload size: an activity's result, failure or heartbeat details over the limit.
SELECT pg_temp.act('big', '{"dead_letter": false}');
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, to_jsonb(repeat('x', 100)))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', format('the result of activity task %s is 102 bytes, over the payload limit of 64 bytes',
                                 pg_temp.task('big')),
                 'complete_activity() of a result over the limit: HR008');
SELECT results_eq(format($$SELECT outcome, message, handed, decided FROM harvest.complete_activities(
                              'worker-a', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[to_jsonb(repeat('x', 100))])$$,
                         pg_temp.task('big'), pg_temp.token('big')),
                  format($$VALUES ('too_large'::text, 'the result of activity task %s is 102 bytes, over the payload '
                                   'limit of 64 bytes'::text, NULL::jsonb, NULL::jsonb)$$, pg_temp.task('big')),
                  'complete_activities(): a result over the limit is refused on its own (outcome too_large)');
SELECT results_eq(format($$SELECT status FROM harvest.tasks WHERE id = %s$$, pg_temp.task('big')),
                  $$VALUES ('running'::text)$$, '... the refused item wrote nothing: the task is still the worker''s');
SELECT throws_ok(format($$SELECT harvest.heartbeat_activity(%s, %s, to_jsonb(repeat('x', 100)))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', format('the heartbeat details of activity task %s is 102 bytes, over the payload limit '
                                 'of 64 bytes', pg_temp.task('big')),
                 'heartbeat_activity() with details over the limit: HR008');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, jsonb_build_object('error_type', 'E',
                              'message', repeat('x', 100)))$$, pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', NULL, 'fail_activity() with a failure over the limit: HR008');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
-- Depth: a result nested deeper than 200 levels (what a worker writes, bounded as what a client sends).
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, (repeat('[', 201) || repeat(']', 201))::jsonb)$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR001', format('the result of activity task %s: arrays and objects nest deeper than 200 levels',
                                 pg_temp.task('big')),
                 'complete_activity() of a result deeper than 200 levels: HR001');
SELECT results_eq(format($$SELECT outcome, message FROM harvest.complete_activities('worker-a', ARRAY[%s]::bigint[],
                              ARRAY[%s]::bigint[], ARRAY[(repeat('[', 201) || repeat(']', 201))::jsonb])$$,
                         pg_temp.task('big'), pg_temp.token('big')),
                  format($$VALUES ('too_deep'::text, 'the result of activity task %s: arrays and objects nest deeper '
                                   'than 200 levels'::text)$$, pg_temp.task('big')),
                  'complete_activities(): a result deeper than 200 levels is refused on its own (outcome too_deep)');
SELECT pg_temp.act('deep200');
SELECT results_eq(format($$SELECT outcome FROM harvest.complete_activities('worker-a', ARRAY[%s]::bigint[],
                              ARRAY[%s]::bigint[], ARRAY[(repeat('[', 200) || repeat(']', 200))::jsonb])$$,
                         pg_temp.task('deep200'), pg_temp.token('deep200')),
                  $$VALUES ('completed'::text)$$, '... and one 200 deep is taken');
SELECT is(pg_temp.fail('big', '{"error_type": "PayloadTooLarge", "message": "too big", "non_retryable": true}'),
          'failed', 'the worker''s typed, non-retryable PayloadTooLarge failure ends the activity');
SELECT is((SELECT event_data #>> '{failure,error_type}' FROM pg_temp.last_event(pg_temp.run('big')) WHERE event_type = 'ActivityFailed'),
          'PayloadTooLarge', '... and the workflow hears ActivityFailed{PayloadTooLarge}');

-- _decided_answer: a decided item's answer, the keys the worker reads, its handed tasks as
-- their worker form (to_jsonb of each row: claim.sql's _worker_activity).
SELECT is(harvest._decided_answer(7, 'RUNNING', ARRAY[harvest._worker_activity(
              41, 'activity', '00000000-0000-0000-0000-000000000001', 'wf', 'wid', 'q', 3, 'act',
              '[1]', '{"start_to_close_timeout": 5}', 1, 9, NULL)]),
          jsonb_build_object('last_event_id', 7, 'execution_status', 'RUNNING', 'handed', jsonb_build_array(
              to_jsonb(harvest._worker_activity(41, 'activity', '00000000-0000-0000-0000-000000000001', 'wf',
                  'wid', 'q', 3, 'act', '[1]', '{"start_to_close_timeout": 5}', 1, 9, NULL)))),
          '_decided_answer(): last_event_id, execution_status and the handed tasks'' worker form');
SELECT is(harvest._decided_answer(8, 'COMPLETED', ARRAY[]::harvest.worker_activity_task[]) -> 'handed',
          '[]'::jsonb, '... and a closing decision''s answer hands nothing');

-- ActivityNotRegistered in a rolling deploy: while a live worker polling the queue has not
-- failed it so, a claim by a worker whose App lacks the activity is no attempt (its attempt
-- given back, the worker kept in details.unknown_to); then the retry policy counts it.
SELECT lives_ok($$SELECT harvest.register_worker('nr-old', ARRAY['aq_nr'], 'host', 1);
                  SELECT harvest.register_worker('nr-new', ARRAY['aq_nr'], 'host', 2)$$,
                'setup: two live workers poll aq_nr');
SELECT isnt(pg_temp.start_activity('nr', 'act_wf', 'wq_nr', 'act_nr', 'aq_nr', '[]',
                                   '{"retry": {"max_attempts": 1, "initial_interval": 2}}', 'nr-old'),
            NULL, 'setup: the old worker claims an activity of one attempt');
CREATE FUNCTION pg_temp.not_registered(p_worker text) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE harvest.tasks SET due_at = harvest.now() WHERE id = pg_temp.task('nr') AND status = 'pending';
    PERFORM pg_temp.remember('nr', c.execution_id, c.task_id, c.fencing_token)
    FROM harvest.claim_tasks(p_worker, ARRAY['aq_nr'], 1) AS c;
    RETURN pg_temp.fail('nr', '{"error_type": "ActivityNotRegistered", "message": "no activity named act_nr"}');
END;
$fn$;
SELECT is(pg_temp.fail('nr', '{"error_type": "ActivityNotRegistered", "message": "no activity named act_nr"}'),
          'retry_scheduled', 'ActivityNotRegistered with a live worker untried: retried');
SELECT results_eq(
    $$SELECT status, attempt, due_at, lease_owner, last_failure FROM harvest.tasks WHERE id = pg_temp.task('nr')$$,
    $$VALUES ('pending'::text, 0, harvest.now() + interval '2 seconds', NULL::text,
              '{"error_type": "ActivityNotRegistered", "message": "no activity named act_nr",
                "details": {"unknown_to": ["nr-old"]}}'::jsonb)$$,
    'its attempt given back (the one attempt not spent), after the policy''s interval, the worker kept');
SELECT is(pg_temp.not_registered('nr-old'), 'retry_scheduled', 'the old worker wins the claim again: retried again');
SELECT results_eq($$SELECT attempt, last_failure -> 'details' -> 'unknown_to' FROM harvest.tasks
                    WHERE id = pg_temp.task('nr')$$,
                  $$VALUES (0, '["nr-old"]'::jsonb)$$, 'still no attempt spent, its id kept once');
SELECT is(pg_temp.not_registered('nr-new'), 'dead_lettered',
          'once every live worker of the queue failed it so, the retry policy counts it (here: its last attempt)');
SELECT results_eq($$SELECT attempts, failure -> 'details' -> 'unknown_to' FROM harvest.dead_letters
                    WHERE execution_id = pg_temp.run('nr')$$,
                  $$VALUES (1, '["nr-old", "nr-new"]'::jsonb)$$, 'dead-lettered after one attempt, naming both workers');

SELECT isnt(pg_temp.start_activity('nr2', 'act_wf', 'wq_nr2', 'act_nr2', 'aq_nr', '[]',
                                   '{"retry": {"max_attempts": 5, "non_retryable_errors": ["ActivityNotRegistered"]}}',
                                   'nr-old'),
            NULL, 'setup: an activity whose policy lists ActivityNotRegistered as non-retryable');
SELECT is(pg_temp.fail('nr2', '{"error_type": "ActivityNotRegistered", "message": "no activity named act_nr2"}'),
          'dead_lettered', 'the policy is honoured: dead-lettered at once, the untried live worker aside');
SELECT * FROM finish();
ROLLBACK;

-- A failed attempt reads its retry policy by the one rule for a JSON field (core.sql,
-- _json_integer): retry.max_attempts 2.0, which the decision's check let through, is 2 (a raw
-- ::integer cast failed every failure of the activity with 22P02, so it could never end).
BEGIN;
SELECT plan(3);
SELECT pg_temp.start_activity('jn_r', 'wf', 'wq_jn_r', 'act', 'aq_jn_r', '[]',
                              '{"retry": {"max_attempts": 2.0, "initial_interval": 0}, "dead_letter": false}');
SELECT is(harvest.fail_activity(pg_temp.task('jn_r'), pg_temp.token('jn_r'), '{"message": "one"}'), 'retry_scheduled',
          'fail_activity(): retry.max_attempts 2.0 retries the first failure');
SELECT pg_temp.remember('jn_r', c.execution_id, c.task_id, c.fencing_token)
FROM harvest.claim_tasks('worker-a', ARRAY['aq_jn_r'], 1) AS c;
SELECT is(harvest.fail_activity(pg_temp.task('jn_r'), pg_temp.token('jn_r'), '{"message": "two"}'), 'failed',
          '... and ends the activity at the second, as max_attempts 2');
SELECT pg_temp.start_activity('jn_b', 'wf', 'wq_jn_b', 'act', 'aq_jn_b');
SELECT throws_ok(format($$SELECT harvest.fail_activity(%s, %s, '{"message": "x", "non_retryable": "yes"}')$$,
                        pg_temp.task('jn_b'), pg_temp.token('jn_b')),
                 'HR001', 'non_retryable must be true or false, got "yes"',
                 'fail_activity(): a failure''s non_retryable that is no boolean is HR001 naming it');
SELECT * FROM finish();
ROLLBACK;
