-- functions/dead_letters.sql: harvest.list_dead_letters, harvest.get_dead_letter,
-- harvest.replay_dead_letter, harvest.discard_dead_letter, harvest._lock_dead_letter.
-- The aggregate and bulk functions (harvest.count_dead_letters, harvest.replay_dead_letters,
-- harvest.discard_dead_letters, harvest._select_dead_letters, harvest._bulk_dead_letters) are
-- tested in pgtap/dead_letters_bulk.sql.
BEGIN;
SELECT plan(43);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- A run of <workflow> (key <key>) whose activity <activity> (seq 1) fails
-- non-retryably and is dead-lettered (pg_temp.dead_letter); parked keeps its id.
CREATE TEMP TABLE parked (key text PRIMARY KEY, dead_letter_id bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.park(p_key text, p_workflow text, p_activity text, p_options jsonb DEFAULT '{}')
RETURNS void LANGUAGE sql AS $fn$
    INSERT INTO parked VALUES (p_key, pg_temp.dead_letter(p_key, p_workflow, p_activity, p_options));
$fn$;
CREATE FUNCTION pg_temp.dl(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT dead_letter_id FROM parked WHERE key = p_key;
$fn$;

SELECT pg_temp.park('a', 'orders', 'charge', '{"schedule_to_close": 600, "priority": 2}');
SELECT pg_temp.park('b', 'orders', 'ship');
SELECT pg_temp.park('c', 'refunds', 'charge');
SELECT pg_temp.park('d', 'refunds', 'notify');

-- list_dead_letters: newest first, filters, keyset pages, a bounded limit.
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters()$$,
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['d', 'c', 'b', 'a']) AS k$$,
                  'list_dead_letters(): every dead letter, newest first');
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters(p_activity_name => 'charge')$$,
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['c', 'a']) AS k$$,
                  'list_dead_letters(p_activity_name): that activity only');
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters(p_workflow_name => 'orders')$$,
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['b', 'a']) AS k$$,
                  'list_dead_letters(p_workflow_name): that workflow only');
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters(p_activity_name => 'charge', p_workflow_name => 'refunds')$$,
                  $$SELECT pg_temp.dl('c')$$, 'both filters combine');
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters(2)$$,
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['d', 'c']) AS k$$, 'list_dead_letters(2): the first page');
SELECT results_eq(format($$SELECT id FROM harvest.list_dead_letters(2, p_before_id => %s)$$, pg_temp.dl('c')),
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['b', 'a']) AS k$$,
                  'p_before_id: the next page');
-- Ids and failure times that disagree (a long transaction's row gets its id last): the failure
-- time orders, and a page goes on after a (failed_at, id) position, even one whose row is gone.
UPDATE harvest.dead_letters SET failed_at = failed_at + interval '1 minute' WHERE id = pg_temp.dl('b');
SELECT results_eq($$SELECT id FROM harvest.list_dead_letters()$$,
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['b', 'd', 'c', 'a']) AS k$$,
                  'list_dead_letters(): newest failure first, then the greater id');
SELECT results_eq(format($$SELECT id FROM harvest.list_dead_letters(2, p_before_id => %s)$$, pg_temp.dl('b')),
                  $$SELECT pg_temp.dl(k) FROM unnest(ARRAY['d', 'c']) AS k$$,
                  'p_before_id alone: after that dead letter in the list''s order');
SELECT results_eq(format($$SELECT id FROM harvest.list_dead_letters(5, p_before_id => %s,
                              p_before_failed_at => '2030-01-01 00:00:00+00')$$, pg_temp.dl('c')),
                  $$SELECT pg_temp.dl('a')$$, 'p_before_failed_at with p_before_id: the keyset position');
SELECT throws_ok($$SELECT * FROM harvest.list_dead_letters(2, p_before_id => 999999)$$, 'HR002', NULL,
                 'p_before_id of a dead letter that is gone, without its time: HR002');
UPDATE harvest.dead_letters SET failed_at = failed_at - interval '1 minute' WHERE id = pg_temp.dl('b');
SELECT throws_ok($$SELECT * FROM harvest.list_dead_letters(0)$$, 'HR001', 'limit 0 is out of range 1..1000',
                 'list_dead_letters(0): HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_dead_letters(1001)$$, 'HR001', NULL, 'list_dead_letters(1001): HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_dead_letters(NULL)$$, 'HR001', NULL, 'list_dead_letters(NULL): HR001');

-- get_dead_letter
SELECT results_eq(
    format($$SELECT execution_id, workflow_name, seq, activity_name, queue, input, priority, attempts,
                    failure ->> 'message' FROM harvest.get_dead_letter(%s)$$, pg_temp.dl('a')),
    $$SELECT pg_temp.run('a'), 'orders'::text, 1, 'charge'::text, 'aq_a'::text, '["x"]'::jsonb, 2, 1, 'failed a'::text$$,
    'get_dead_letter() returns the invocation and its failure');
SELECT throws_ok($$SELECT * FROM harvest.get_dead_letter(-1)$$, 'HR002', 'dead letter -1 does not exist',
                 'get_dead_letter() of an unknown id: HR002');

-- replay_dead_letter: a fresh activity task with a fresh attempt budget, its attempts counted on
-- from the dead letter's (retry.attempts_before_replay: the budget starts there).
SET LOCAL harvest.fake_now = '2030-01-01 00:05:00+00';
CREATE TEMP TABLE replayed ON COMMIT DROP AS SELECT harvest.replay_dead_letter(pg_temp.dl('a')) AS task_id;
SELECT results_eq(
    $$SELECT execution_id, kind, status, queue, priority, seq, activity_name, input, options, attempt, due_at,
             scheduled_at, deadline_at, run_workflow_name, run_workflow_id
      FROM harvest.tasks WHERE id = (SELECT task_id FROM replayed)$$,
    $$SELECT pg_temp.run('a'), 'activity'::text, 'pending'::text, 'aq_a'::text, 2, 1, 'charge'::text, '["x"]'::jsonb,
             '{"schedule_to_close": 600, "priority": 2, "retry": {"attempts_before_replay": 1}}'::jsonb, 1,
             '2030-01-01 00:05:00+00'::timestamptz,
             '2030-01-01 00:05:00+00'::timestamptz, '2030-01-01 00:15:00+00'::timestamptz,
             'orders'::text, x.workflow_id FROM harvest.executions AS x WHERE x.id = pg_temp.run('a')$$,
    'replay_dead_letter() returns a new pending activity task: same invocation, the attempts so far, a new deadline, its run''s name and id');
SELECT is_empty(format($$SELECT 1 FROM harvest.dead_letters WHERE id = %s$$, pg_temp.dl('a')),
                'a replayed dead letter is removed');
SELECT is((SELECT event_type FROM harvest.events WHERE execution_id = pg_temp.run('a') ORDER BY event_id DESC LIMIT 1),
          'ActivityScheduled', 'replay writes no event');
SELECT results_eq($$SELECT task_id, attempt FROM harvest.claim_tasks('worker', ARRAY['aq_a'])$$,
                  $$SELECT task_id, 2 FROM replayed$$, 'the replayed activity is claimed as attempt 2 (1 before it)');
SELECT is(harvest._fail_activity_attempt((SELECT x FROM harvest.executions AS x WHERE x.id = pg_temp.run('a')),
                                         (SELECT t FROM harvest.tasks AS t WHERE t.id = (SELECT task_id FROM replayed)),
                                         '{"error_type": "Boom", "message": "again"}'),
          'retry_scheduled', 'attempt 2 is the first of the fresh budget (max_attempts 3): retry_scheduled');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = (SELECT task_id FROM replayed)),
          '2030-01-01 00:05:01+00'::timestamptz, 'and backs off as a first attempt does (initial_interval 1 s)');
SELECT throws_ok(format($$SELECT harvest.replay_dead_letter(%s)$$, pg_temp.dl('a')), 'HR002',
                 format('dead letter %s does not exist', pg_temp.dl('a')), 'replaying it twice: HR002');
SELECT throws_ok($$SELECT harvest.replay_dead_letter(-1)$$, 'HR002', NULL, 'replay_dead_letter() of an unknown id: HR002');
SELECT is((SELECT options FROM harvest.tasks WHERE queue = 'aq_b'), NULL::jsonb, 'b has no task before its replay');
SELECT is((SELECT deadline_at FROM harvest.tasks WHERE id = harvest.replay_dead_letter(pg_temp.dl('b'))), NULL::timestamptz,
          'a replay without schedule_to_close has no deadline');

-- A run that is not RUNNING: no replay (HR005), discard still clears it.
SELECT harvest.terminate_workflow(pg_temp.run('c'), 'operator');
SELECT throws_ok(format($$SELECT harvest.replay_dead_letter(%s)$$, pg_temp.dl('c')), 'HR005',
                 format('dead letter %s: its execution %s is TERMINATED, so nothing waits for the activity',
                        pg_temp.dl('c'), pg_temp.run('c')),
                 'replay_dead_letter() when the run is not RUNNING: HR005');
SELECT is((SELECT count(*) FROM harvest.dead_letters WHERE id = pg_temp.dl('c')), 1::bigint,
          'the refused replay kept the dead letter');
SELECT lives_ok(format($$SELECT harvest.discard_dead_letter(%s)$$, pg_temp.dl('c')),
                'discard_dead_letter() of a finished run''s dead letter');
SELECT is_empty(format($$SELECT 1 FROM harvest.dead_letters WHERE id = %s$$, pg_temp.dl('c')), 'it is removed');
SELECT is((SELECT event_type FROM harvest.events WHERE execution_id = pg_temp.run('c') ORDER BY event_id DESC LIMIT 1),
          'WorkflowTerminated', 'a finished run gets no ActivityFailed');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('c')$$, 'nor a workflow task');

-- discard_dead_letter: the workflow receives ActivityFailed and is woken.
SET LOCAL harvest.fake_now = '2030-01-01 00:06:00+00';
SELECT lives_ok(format($$SELECT harvest.discard_dead_letter(%s)$$, pg_temp.dl('d')), 'discard_dead_letter()');
SELECT is_empty(format($$SELECT 1 FROM harvest.dead_letters WHERE id = %s$$, pg_temp.dl('d')),
                'a discarded dead letter is removed');
SELECT results_eq(
    $$SELECT event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('d')
      ORDER BY event_id DESC LIMIT 1$$,
    $$VALUES ('ActivityFailed'::text, '{"seq": 1, "attempt": 1, "failure": {"error_type": "Boom", "message": "failed d",
              "non_retryable": true, "details": null}}'::jsonb)$$,
    'discard appends ActivityFailed{seq, failure, attempt} with the last failure');
SELECT results_eq($$SELECT kind, status, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('d')$$,
                  $$VALUES ('workflow'::text, 'pending'::text, '2030-01-01 00:06:00+00'::timestamptz)$$,
                  'discard wakes the workflow');
SELECT throws_ok(format($$SELECT harvest.discard_dead_letter(%s)$$, pg_temp.dl('d')), 'HR002', NULL,
                 'discarding it twice: HR002');
SELECT throws_ok($$SELECT harvest.discard_dead_letter(-1)$$, 'HR002', 'dead letter -1 does not exist',
                 'discard_dead_letter() of an unknown id: HR002');

-- _lock_dead_letter
SELECT pg_temp.park('e', 'orders', 'pack');
SELECT is((harvest._lock_dead_letter(pg_temp.dl('e'))).activity_name, 'pack', '_lock_dead_letter() returns the row');
SELECT throws_ok($$SELECT harvest._lock_dead_letter(-1)$$, 'HR002', NULL, '_lock_dead_letter() of an unknown id: HR002');

-- One dead letter replayed or discarded is audited (operation, target, actor, source);
-- a client that is no Harvest face (psql here) is recorded as cli with its name kept.
SET LOCAL application_name = 'psql';
SELECT pg_temp.park('ra', 'audited', 'charge');
SELECT pg_temp.park('da', 'audited', 'charge');
SELECT lives_ok(format($$SELECT harvest.replay_dead_letter(%s)$$, pg_temp.dl('ra')), 'setup: replay one from psql');
SELECT lives_ok(format($$SELECT harvest.discard_dead_letter(%s)$$, pg_temp.dl('da')), 'setup: discard one from psql');
SELECT results_eq($$SELECT operation, target, actor = session_user, source, details ->> 'execution_id',
                           details ->> 'application_name'
                    FROM harvest.audit_log WHERE target IN (pg_temp.dl('ra')::text, pg_temp.dl('da')::text)
                    ORDER BY id$$,
                  $$VALUES ('dead_letter.replay'::text, pg_temp.dl('ra')::text, true, 'cli'::text,
                            pg_temp.run('ra')::text, 'psql'::text),
                           ('dead_letter.discard', pg_temp.dl('da')::text, true, 'cli', pg_temp.run('da')::text,
                            'psql')$$,
                  'replay_dead_letter() and discard_dead_letter() each write one audit row; psql is source cli');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'dead_letter.%'
           AND target IN (pg_temp.dl('a')::text)), 1::bigint,
          'the earlier replay of a was audited too (harvest._replay_dead_letter and '
          'harvest._discard_dead_letter do the work, unaudited, for the bulk actions)');
RESET application_name;

SELECT * FROM finish();
ROLLBACK;
