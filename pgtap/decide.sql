-- functions/decide.sql: harvest.complete_workflow_task (the marker, the command
-- events, activity and timer tasks, the run's end, re-enqueue, stale tokens and
-- expired leases, the hand-off of scheduled activities), harvest.fail_workflow_task,
-- harvest._apply_decision (the decision on its own),
-- harvest.complete_workflow_tasks (the group commit of decisions),
-- harvest._try_lock_claimed_task, harvest._try_lock_task_of_locked_run, harvest._claimed_task_problem
-- (the rules both ways of taking a claimed task apply), harvest._lock_claimed_task, harvest._require, the
-- checks of the external signal and cancel commands, harvest._lock_decision_start_keys
-- (the start locks a decision takes before its run's row), harvest._activity_scheduled,
-- harvest._activity_command_ok, harvest._activity_priority, harvest._activity_scheduled_data,
-- harvest._queue_activities and
-- harvest._hand_activities (a decision's queued and handed activities, one INSERT each),
-- harvest._hand_activities_of_runs (several runs' handed activities in one INSERT),
-- harvest._lock_batch_mutexes (a group commit's runs and mutex keys, before its first decision),
-- harvest._lock_runs_and_mutexes (the id-ordered pass of runs, then mutex keys, both use),
-- harvest._lock_superseded_runs (the runs latest-wins starts supersede, before the first).
BEGIN;
SELECT plan(362);
SET LOCAL TimeZone = 'UTC';
SET LOCAL DateStyle = 'ISO, MDY';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Start a run on a queue of its own (dq_<key>) and claim its workflow task as
-- worker-1 (lease 30 s); the key holds the task and its token.
CREATE FUNCTION pg_temp.start_and_claim(p_key text) RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_claimed(p_key, 'decide_wf', 'dq_' || p_key, 'worker-1', '["in"]');
$fn$;

-- Run a statement and roll it back: 'ok', or the error it raised.
CREATE FUNCTION pg_temp.dry_run(p_sql text) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE p_sql;
    RAISE EXCEPTION 'dry run' USING ERRCODE = 'P0099';
EXCEPTION
    WHEN SQLSTATE 'P0099' THEN RETURN 'ok';
    WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM;
END;
$fn$;

-- A batch of commands: the marker first, then one event per command, in order.
SELECT pg_temp.start_and_claim('cmds');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';
CREATE TEMP TABLE answer ON COMMIT DROP AS
SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(pg_temp.task('cmds'), pg_temp.token('cmds'), 1, $$[
    {"type": "schedule_activity", "seq": 1, "name": "send_email", "input": [42], "queue": "mail",
     "options": {"start_to_close": 30, "schedule_to_close": 600, "priority": 4,
                 "retry": {"max_attempts": 5}}},
    {"type": "start_timer", "seq": 2, "duration": 3600},
    {"type": "record_marker", "seq": 3, "kind": "now", "value": "2030-01-01T00:00:10+00:00"},
    {"type": "schedule_activity", "seq": 4, "name": "audit"}
]$$, 'worker-1');
SELECT results_eq($$SELECT last_event_id, execution_status FROM answer$$,
                  $$VALUES (6::bigint, 'RUNNING'::text)$$,
                  'complete_workflow_task() returns the last event id and the run''s status');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events
      WHERE execution_id = pg_temp.run('cmds') AND event_id > 1 ORDER BY event_id$$,
    $$VALUES
      (2::bigint, 'WorkflowTaskCompleted'::text, '{"through": 1, "worker_id": "worker-1"}'::jsonb),
      (3, 'ActivityScheduled', '{"seq": 1, "name": "send_email", "input": [42], "queue": "mail",
          "options": {"start_to_close": 30, "schedule_to_close": 600, "priority": 4,
                      "retry": {"max_attempts": 5}}}'),
      (4, 'TimerStarted', '{"seq": 2, "fire_at": "2030-01-01T01:00:10+00:00"}'),
      (5, 'MarkerRecorded', '{"seq": 3, "kind": "now", "value": "2030-01-01T00:00:10+00:00"}'),
      (6, 'ActivityScheduled', '{"seq": 4, "name": "audit", "input": null, "queue": "dq_cmds", "options": {}}')$$,
    'WorkflowTaskCompleted{through, worker_id} comes first, then one event per command in order');
SELECT is((SELECT count(DISTINCT created_at) FROM harvest.events
           WHERE execution_id = pg_temp.run('cmds') AND event_id > 1), 1::bigint,
          'the batch''s events share the database''s clock');
SELECT is((SELECT min(created_at) FROM harvest.events WHERE execution_id = pg_temp.run('cmds') AND event_id > 1),
          '2030-01-01 00:00:10+00'::timestamptz, 'events are stamped with harvest.now()');
SELECT results_eq(
    $$SELECT kind, queue, status, priority, seq, activity_name, input, options ->> 'start_to_close', due_at,
             scheduled_at, deadline_at, attempt
      FROM harvest.tasks WHERE execution_id = pg_temp.run('cmds') AND kind = 'activity' ORDER BY seq$$,
    $$VALUES ('activity'::text, 'mail'::text, 'pending'::text, 4, 1, 'send_email'::text, '[42]'::jsonb, '30'::text,
              '2030-01-01 00:00:10+00'::timestamptz, '2030-01-01 00:00:10+00'::timestamptz,
              '2030-01-01 00:10:10+00'::timestamptz, 0),
             ('activity', 'dq_cmds', 'pending', 0, 4, 'audit', '[]', NULL,
              '2030-01-01 00:00:10+00', '2030-01-01 00:00:10+00', NULL, 0)$$,
    'schedule_activity: a pending activity task (queue defaults to the run''s, deadline from schedule_to_close)');
SELECT results_eq(
    $$SELECT kind, queue, seq, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('cmds') AND kind = 'timer'$$,
    $$VALUES ('timer'::text, 'dq_cmds'::text, 2, '2030-01-01 01:00:10+00'::timestamptz)$$,
    'start_timer: a timer task on the run''s queue, due at now + duration');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE id = pg_temp.task('cmds')$$,
                'the completed workflow task is deleted');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('cmds') AND kind = 'workflow'$$,
                'no new workflow task when nothing arrived past through');

-- The same task cannot be completed twice.
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('cmds'), pg_temp.token('cmds')), 'HR004', NULL,
                 'completing a task again: HR004 (the task is gone)');

-- Stale tokens and expired leases.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.start_and_claim('stale');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('stale'), pg_temp.token('stale') - 1), 'HR004',
                 format('task %s was claimed again (fencing token %s is stale)',
                        pg_temp.task('stale'), pg_temp.token('stale') - 1),
                 'a superseded fencing token: HR004');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('stale'), pg_temp.token('stale') + 1000), 'HR004', NULL,
                 'a token the task never had: HR004');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:30+00';
SELECT is(pg_temp.dry_run(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                                 pg_temp.task('stale'), pg_temp.token('stale'))), 'ok',
          'completing exactly at the lease end is accepted');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:30.001+00';
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('stale'), pg_temp.token('stale')), 'HR004',
                 format('task %s: the lease expired at 2030-01-01T00:00:30+00:00, so this result is refused',
                        pg_temp.task('stale')),
                 'completing after the lease expired: HR004');
SELECT throws_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{}')$$,
                        pg_temp.task('stale'), pg_temp.token('stale')), 'HR004', NULL,
                 'fail_workflow_task() after the lease expired: HR004');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('stale')), 1::bigint,
          'a refused completion wrote nothing');
SELECT throws_ok($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(-1, 1, 1, '[]')$$, 'HR004',
                 'task -1 is gone: its lease expired or the run ended, and the work was handed on',
                 'an unknown task: HR004');

-- Argument checks.
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT pg_temp.start_and_claim('args');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 0, '[]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'through=0 is outside the history (1..1)', 'through 0: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 2, '[]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'through=2 is outside the history (1..1)', 'through past the last event: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, NULL, '[]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001', NULL, 'through NULL: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '{}')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'commands must be a JSON array', 'commands not an array: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[{"type": "launch_rocket"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'unknown command type "launch_rocket"', 'an unknown command: HR001 naming it');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[{"seq": 1}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'unknown command type "<NULL>"', 'a command without a type: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "schedule_activity", "name": "x"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command schedule_activity needs "seq" as a JSON number, got nothing',
                 'schedule_activity without seq: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "schedule_activity", "seq": 1}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command schedule_activity needs "name" as a JSON string, got nothing',
                 'schedule_activity without name: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "start_timer", "seq": 1, "duration": "1h"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command start_timer needs "duration" as a JSON number, got string',
                 'start_timer with a string duration: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "record_marker", "seq": "1", "kind": "now"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command record_marker needs "seq" as a JSON number, got string',
                 'record_marker with a string seq: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "record_marker", "seq": 1}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command record_marker needs "kind" as a JSON string, got nothing',
                 'record_marker without kind: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "fail_workflow", "failure": "boom"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command fail_workflow needs "failure" as a JSON object, got string',
                 'fail_workflow with a string failure: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "complete_workflow", "result": 1}, {"type": "start_timer", "seq": 1, "duration": 1}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), 'HR001',
                 'command start_timer follows the end of the workflow', 'a command after the end: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "schedule_activity", "seq": 1, "name": "a"},
                            {"type": "schedule_activity", "seq": 1, "name": "b"}]')$$,
                        pg_temp.task('args'), pg_temp.token('args')), '23505', NULL,
                 'two activities with one seq: a unique violation, nothing written');
SELECT results_eq(
    $$SELECT e.last_event_id, t.status FROM harvest.executions AS e JOIN harvest.tasks AS t ON t.execution_id = e.id
      WHERE e.id = pg_temp.run('args')$$,
    $$VALUES (1::bigint, 'running'::text)$$, 'a refused batch wrote nothing and kept the task');

-- The wrong kind of task.
SELECT pg_temp.start_and_claim('kind');
SELECT lives_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                         '[{"type": "schedule_activity", "seq": 1, "name": "act", "queue": "kind_acts"}]')$$,
                       pg_temp.task('kind'), pg_temp.token('kind')), 'setup: schedule an activity');
INSERT INTO keyed SELECT 'kind_act', c.execution_id, c.task_id, c.fencing_token
FROM harvest.claim_tasks('worker-1', ARRAY['kind_acts']) AS c;
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('kind_act'), pg_temp.token('kind_act')), 'HR001',
                 format('task %s is a activity task, not a workflow task', pg_temp.task('kind_act')),
                 'complete_workflow_task() of an activity task: HR001');

-- Events that arrived while the task was in flight: re-enqueued for the next batch.
SELECT pg_temp.start_and_claim('late');
SELECT is(harvest._append_event(pg_temp.run('late'), 'ActivityCompleted', '{"seq": 9, "result": null, "attempt": 1}'),
          2::bigint, 'setup: an event arrives while the workflow task is in flight');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('late') AND kind = 'workflow'),
          1::bigint, 'while a workflow task is in flight there is still only one');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                         pg_temp.task('late'), pg_temp.token('late')),
                  $$VALUES (3::bigint, 'RUNNING'::text)$$, 'completing with through=1 of 2');
SELECT results_eq(
    $$SELECT kind, status, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('late')$$,
    $$VALUES ('workflow'::text, 'pending'::text, '2030-01-01 00:01:00+00'::timestamptz)$$,
    'events past through re-enqueue a pending workflow task');
SELECT isnt((SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('late')), pg_temp.task('late'),
            'the re-enqueued task is a new row');

-- complete_workflow closes the run and drops its open tasks, even ones the batch made.
SELECT pg_temp.start_and_claim('done');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "schedule_activity", "seq": 1, "name": "a"},
                            {"type": "start_timer", "seq": 2, "duration": 5},
                            {"type": "complete_workflow", "result": {"approved": true}}]')$$,
                         pg_temp.task('done'), pg_temp.token('done')),
                  $$VALUES (5::bigint, 'COMPLETED'::text)$$, 'complete_workflow: the answer says COMPLETED');
SELECT results_eq(
    $$SELECT status, output, failure, completed_at FROM harvest.executions WHERE id = pg_temp.run('done')$$,
    $$VALUES ('COMPLETED'::text, '{"approved": true}'::jsonb, NULL::jsonb, '2030-01-01 00:01:00+00'::timestamptz)$$,
    'complete_workflow: the run is COMPLETED with its result');
SELECT results_eq(
    $$SELECT event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('done')
      ORDER BY event_id DESC LIMIT 1$$,
    $$VALUES ('WorkflowCompleted'::text, '{"result": {"approved": true}}'::jsonb)$$,
    'complete_workflow: WorkflowCompleted{result} is the last event');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('done')$$,
                'complete_workflow: no task of the run is left');

-- A closing decision writes the run's row once: its last events and the close in one
-- update (_append_closing_events), not the append's and then the close's (each a row
-- version; the close's is never HOT).
SELECT pg_temp.start_and_claim('done_once');
CREATE TEMP TABLE done_once_updates ON COMMIT DROP AS
SELECT pg_stat_get_xact_tuples_updated('harvest.executions'::regclass) AS n;
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "schedule_activity", "seq": 1, "name": "a"},
                             {"type": "complete_workflow", "result": 1}]')$$,
                         pg_temp.task('done_once'), pg_temp.token('done_once')),
                  $$VALUES (4::bigint, 'COMPLETED'::text)$$, 'complete_workflow: the answer (one row update)');
SELECT is(pg_stat_get_xact_tuples_updated('harvest.executions'::regclass) - (SELECT n FROM done_once_updates), 1::bigint,
          'a closing decision updates the run''s row once');

-- A run that ends is not re-enqueued, whatever arrived past through.
SELECT pg_temp.start_and_claim('done_late');
SELECT is(harvest._append_event(pg_temp.run('done_late'), 'TimerFired', '{"seq": 1}'), 2::bigint,
          'setup: an event arrives while the last workflow task is in flight');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "complete_workflow", "result": null}]')$$,
                         pg_temp.task('done_late'), pg_temp.token('done_late')),
                  $$VALUES (4::bigint, 'COMPLETED'::text)$$, 'complete_workflow with events past through');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('done_late')$$,
                'a closed run gets no new workflow task');

-- fail_workflow
SELECT pg_temp.start_and_claim('failed');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "fail_workflow", "failure": {"error_type": "ValueError", "message": "bad",
                              "non_retryable": true, "details": null}}]')$$,
                         pg_temp.task('failed'), pg_temp.token('failed')),
                  $$VALUES (3::bigint, 'FAILED'::text)$$, 'fail_workflow: the answer says FAILED');
SELECT results_eq(
    $$SELECT status, output, failure ->> 'error_type', failure ->> 'message', completed_at
      FROM harvest.executions WHERE id = pg_temp.run('failed')$$,
    $$VALUES ('FAILED'::text, NULL::jsonb, 'ValueError'::text, 'bad'::text, '2030-01-01 00:01:00+00'::timestamptz)$$,
    'fail_workflow: the run is FAILED with the failure');
SELECT results_eq(
    $$SELECT event_type, event_data -> 'failure' ->> 'error_type' FROM harvest.events
      WHERE execution_id = pg_temp.run('failed') ORDER BY event_id DESC LIMIT 1$$,
    $$VALUES ('WorkflowFailed'::text, 'ValueError'::text)$$, 'fail_workflow: WorkflowFailed{failure} is the last event');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('failed')$$,
                'fail_workflow: no task of the run is left');

-- fail_workflow_task: nothing written, the task retried after a backoff.
SELECT pg_temp.start_and_claim('ft');
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{"error_type": "NonDeterminism", "message": "seq 1"}', 7)$$,
                       pg_temp.task('ft'), pg_temp.token('ft')), 'fail_workflow_task() succeeds');
SELECT results_eq(
    $$SELECT status, lease_owner, lease_expires_at, due_at, last_failure ->> 'error_type', attempt
      FROM harvest.tasks WHERE id = pg_temp.task('ft')$$,
    $$VALUES ('pending'::text, NULL::text, NULL::timestamptz, '2030-01-01 00:01:07+00'::timestamptz,
              'NonDeterminism'::text, 1)$$,
    'fail_workflow_task(): pending again, due after the backoff, the failure kept, the lease dropped');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('ft')), 1::bigint,
          'fail_workflow_task() writes nothing to the history');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]')$$,
                        pg_temp.task('ft'), pg_temp.token('ft')), 'HR004', NULL,
                 'after fail_workflow_task() the old claim cannot complete: HR004');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('worker-2', ARRAY['dq_ft'])$$,
                'the failed workflow task waits out its backoff');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:07+00';
SELECT results_eq($$SELECT task_id, attempt FROM harvest.claim_tasks('worker-2', ARRAY['dq_ft'])$$,
                  $$SELECT pg_temp.task('ft'), 2$$, 'then it is claimed again');
SELECT is((SELECT (last_failure ->> 'failing_since')::timestamptz FROM harvest.tasks WHERE id = pg_temp.task('ft')),
          '2030-01-01 00:01:00+00'::timestamptz, 'fail_workflow_task(): the failure says since when (failing_since)');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:09+00';
SELECT harvest.fail_workflow_task(pg_temp.task('ft'), (SELECT fencing_token FROM harvest.tasks WHERE id = pg_temp.task('ft')),
                                  '{"error_type": "NonDeterminism", "message": "seq 2"}', 7);
SELECT results_eq(
    $$SELECT last_failure ->> 'message', (last_failure ->> 'failing_since')::timestamptz, attempt
      FROM harvest.tasks WHERE id = pg_temp.task('ft')$$,
    $$VALUES ('seq 2'::text, '2030-01-01 00:01:00+00'::timestamptz, 2)$$,
    'a second failure in a row is kept with the first one''s failing_since');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:07+00';
SELECT pg_temp.start_and_claim('ft_neg');
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{}', -5)$$,
                       pg_temp.task('ft_neg'), pg_temp.token('ft_neg')), 'fail_workflow_task() with a negative backoff');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('ft_neg')), '2030-01-01 00:01:07+00'::timestamptz,
          'a negative backoff counts as none');
SELECT pg_temp.start_and_claim('ft_null');
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{}', NULL)$$,
                       pg_temp.task('ft_null'), pg_temp.token('ft_null')), 'fail_workflow_task() with a NULL backoff');
SELECT is((SELECT due_at FROM harvest.tasks WHERE id = pg_temp.task('ft_null')), '2030-01-01 00:01:12+00'::timestamptz,
          'a NULL backoff is 5 s');
SELECT throws_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{}')$$,
                        pg_temp.task('kind_act'), pg_temp.token('kind_act')), 'HR001', NULL,
                 'fail_workflow_task() of an activity task: HR001');

-- fail_workflow_task with UnknownWorkflow (the claiming worker's App lacks the workflow):
-- retried like any failure until the task's 10th attempt, then the run fails typed.
CREATE FUNCTION pg_temp.fail_unknown(p_times integer) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    FOR i IN 1..p_times LOOP
        SELECT * INTO v_task FROM harvest.claim_tasks('worker-u', ARRAY['dq_unknown'], 1, 30);
        PERFORM harvest.fail_workflow_task(v_task.task_id, v_task.fencing_token,
            '{"error_type": "UnknownWorkflow", "message": "no such workflow",
              "details": {"worker_registered": ["decide_wf"]}}', 0);
    END LOOP;
    RETURN v_task.attempt;
END;
$fn$;
CREATE TEMP TABLE unknown_run ON COMMIT DROP AS
    SELECT * FROM harvest.start_workflow('ghost_wf', '[]', 'ghost', 'dq_unknown');
SELECT is(pg_temp.fail_unknown(9), 9, 'nine attempts of an unknown workflow');
SELECT results_eq($$SELECT e.status, t.status FROM harvest.executions AS e JOIN harvest.tasks AS t
                    ON t.execution_id = e.id WHERE e.id = (SELECT execution_id FROM unknown_run)$$,
                  $$VALUES ('RUNNING'::text, 'pending'::text)$$, 'below the bound the run waits for a worker that has it');
SELECT is(pg_temp.fail_unknown(1), 10, 'the tenth attempt');
SELECT results_eq(
    $$SELECT status, failure ->> 'error_type', failure ->> 'reason', (failure ->> 'non_retryable')::boolean,
             failure -> 'details' FROM harvest.executions WHERE id = (SELECT execution_id FROM unknown_run)$$,
    $$VALUES ('FAILED'::text, 'UnknownWorkflow'::text, 'unknown_workflow'::text, true,
              '{"worker_registered": ["decide_wf"], "attempts": 10, "workflow_name": "ghost_wf",
                "queue": "dq_unknown"}'::jsonb)$$,
    'then the run is FAILED with reason unknown_workflow, the attempts and the worker''s details');
SELECT results_eq(
    $$SELECT event_type, event_data -> 'failure' ->> 'reason' FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM unknown_run) ORDER BY event_id DESC LIMIT 1$$,
    $$VALUES ('WorkflowFailed'::text, 'unknown_workflow'::text)$$, 'WorkflowFailed is the last event');
SELECT results_eq(
    $$SELECT kind, workflow_name, queue, attempts, failure ->> 'reason' FROM harvest.dead_letters
      WHERE execution_id = (SELECT execution_id FROM unknown_run)$$,
    $$VALUES ('workflow'::text, 'ghost_wf'::text, 'dq_unknown'::text, 10, 'unknown_workflow'::text)$$,
    'and it is dead-lettered (kind workflow) with its typed reason');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM unknown_run)$$,
                'no task of the run is left');

-- A rolling deploy: a live worker polling the queue that has not failed the task yet may
-- have the workflow, so the 10th attempt and later retry until every live worker of the
-- queue failed it (the ids kept in last_failure.details.unknown_to); a stale or draining
-- worker holds nothing open.
SELECT harvest.register_worker('uw-old', ARRAY['dq_roll'], 'host', 1);
SELECT harvest.register_worker('uw-new', ARRAY['dq_roll', 'other_q'], 'host', 2);
SELECT harvest.register_worker('uw-stale', ARRAY['dq_roll'], 'host', 3);
SELECT harvest.register_worker('uw-drain', ARRAY['dq_roll'], 'host', 4);
UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '21 seconds' WHERE id = 'uw-stale';
UPDATE harvest.workers SET status = 'draining' WHERE id = 'uw-drain';
CREATE FUNCTION pg_temp.fail_roll(p_worker text, p_times integer, p_type text DEFAULT 'UnknownWorkflow')
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    FOR i IN 1..p_times LOOP
        SELECT * INTO v_task FROM harvest.claim_tasks(p_worker, ARRAY['dq_roll'], 1, 30);
        PERFORM harvest.fail_workflow_task(v_task.task_id, v_task.fencing_token,
            jsonb_build_object('error_type', p_type, 'message', 'no such workflow',
                               'details', jsonb_build_object('worker_id', p_worker,
                                                             'worker_registered', '["decide_wf"]'::jsonb)), 0);
    END LOOP;
    RETURN v_task.attempt;
END;
$fn$;
CREATE TEMP TABLE roll_run ON COMMIT DROP AS
    SELECT * FROM harvest.start_workflow('ghost_wf', '[]', 'roll', 'dq_roll');
CREATE FUNCTION pg_temp.roll_state() RETURNS TABLE (run text, task text, unknown_to jsonb) LANGUAGE sql AS $fn$
    SELECT e.status, t.status, t.last_failure -> 'details' -> 'unknown_to'
    FROM harvest.executions AS e LEFT JOIN harvest.tasks AS t ON t.execution_id = e.id
    WHERE e.id = (SELECT execution_id FROM roll_run);
$fn$;
SELECT is(pg_temp.fail_roll('uw-old', 10), 10, 'ten attempts, all by the old worker');
SELECT results_eq($$SELECT * FROM pg_temp.roll_state()$$,
                  $$VALUES ('RUNNING'::text, 'pending'::text, '["uw-old"]'::jsonb)$$,
                  'at the tenth the run waits: a live worker of the queue (uw-new) has not tried it');
SELECT is(pg_temp.fail_roll('uw-old', 5), 15, 'the old worker keeps winning the race');
SELECT results_eq($$SELECT * FROM pg_temp.roll_state()$$,
                  $$VALUES ('RUNNING'::text, 'pending'::text, '["uw-old"]'::jsonb)$$,
                  'and the run still waits for the worker that may have it, its id kept once');
SELECT is(pg_temp.fail_roll('uw-new', 1, 'NonDeterminismError'), 16, 'another kind of failure between');
SELECT is(pg_temp.fail_roll('uw-old', 1), 17, 'then the old worker again');
SELECT results_eq($$SELECT * FROM pg_temp.roll_state()$$,
                  $$VALUES ('RUNNING'::text, 'pending'::text, '["uw-old"]'::jsonb)$$,
                  'the ids are of consecutive UnknownWorkflow failures only');
SELECT is(pg_temp.fail_roll('uw-new', 1), 18, 'the new worker fails it too');
SELECT results_eq(
    $$SELECT status, failure -> 'details' FROM harvest.executions WHERE id = (SELECT execution_id FROM roll_run)$$,
    $$VALUES ('FAILED'::text, '{"worker_id": "uw-new", "worker_registered": ["decide_wf"], "attempts": 18,
                                "workflow_name": "ghost_wf", "queue": "dq_roll"}'::jsonb)$$,
    'once every live worker of the queue failed it the run fails as before (stale and draining ones aside)');

-- At most 64 ids are kept: a task that 64 workers of the queue failed so in a row fails the
-- run even while a 65th live worker has not tried it (a queue's fleet is not a bound).
SELECT count(*) FROM generate_series(1, 65) AS i
CROSS JOIN LATERAL harvest.register_worker(format('cap-%s', i), ARRAY['dq_cap'], 'host', i) AS r;
CREATE FUNCTION pg_temp.fail_cap(p_from integer, p_to integer) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    FOR i IN p_from..p_to LOOP
        SELECT * INTO v_task FROM harvest.claim_tasks(format('cap-%s', i), ARRAY['dq_cap'], 1, 30);
        PERFORM harvest.fail_workflow_task(v_task.task_id, v_task.fencing_token,
            jsonb_build_object('error_type', 'UnknownWorkflow', 'message', 'no such workflow',
                               'details', jsonb_build_object('worker_id', format('cap-%s', i))), 0);
    END LOOP;
    RETURN v_task.attempt;
END;
$fn$;
CREATE TEMP TABLE cap_run ON COMMIT DROP AS
    SELECT * FROM harvest.start_workflow('ghost_wf', '[]', 'cap', 'dq_cap');
CREATE FUNCTION pg_temp.cap_state() RETURNS TABLE (run text, kept integer, oldest text, latest text)
LANGUAGE sql AS $fn$
    SELECT e.status, jsonb_array_length(t.last_failure -> 'details' -> 'unknown_to'),
           t.last_failure -> 'details' -> 'unknown_to' ->> 0, t.last_failure -> 'details' -> 'unknown_to' ->> -1
    FROM harvest.executions AS e LEFT JOIN harvest.tasks AS t ON t.execution_id = e.id
    WHERE e.id = (SELECT execution_id FROM cap_run);
$fn$;
SELECT is(pg_temp.fail_cap(1, 63), 63, '63 workers of the queue fail it in turn');
SELECT results_eq($$SELECT * FROM pg_temp.cap_state()$$,
                  $$VALUES ('RUNNING'::text, 63, 'cap-1'::text, 'cap-63'::text)$$,
                  'with 63 ids kept and two live workers untried the run waits');
SELECT is(pg_temp.fail_cap(64, 64), 64, 'the 64th worker fails it');
SELECT results_eq(
    $$SELECT status, failure -> 'details' ->> 'attempts' FROM harvest.executions
      WHERE id = (SELECT execution_id FROM cap_run)$$,
    $$VALUES ('FAILED'::text, '64'::text)$$,
    'a full unknown_to (64 ids) fails the run although cap-65 is live and untried');
-- The list is bounded however long it came (the latest 64 kept, the oldest dropped).
CREATE TEMP TABLE cap_long ON COMMIT DROP AS
    SELECT * FROM harvest.start_workflow('ghost_wf', '[]', 'cap-long', 'dq_cap');
UPDATE harvest.tasks SET last_failure = jsonb_build_object('error_type', 'UnknownWorkflow', 'details',
    jsonb_build_object('unknown_to', (SELECT jsonb_agg(format('gone-%s', i) ORDER BY i)
                                      FROM generate_series(1, 70) AS i)))
WHERE execution_id = (SELECT execution_id FROM cap_long);
SELECT is(pg_temp.fail_cap(65, 65), 1, 'a first attempt, after a list of 70 ids');
SELECT results_eq(
    $$SELECT jsonb_array_length(u), u ->> 0, u ->> -1
      FROM (SELECT last_failure -> 'details' -> 'unknown_to' AS u FROM harvest.tasks
            WHERE execution_id = (SELECT execution_id FROM cap_long)) AS t$$,
    $$VALUES (64, 'gone-8'::text, 'cap-65'::text)$$, 'keeps 64 ids: the failing worker and the 63 latest before it');

-- release_workflow_task: an accepted update the claiming worker has no handler for. While a
-- live worker of the queue has not tried the task it is handed back (true, nothing written,
-- the ids kept); once every live one has, false and the claim stays the caller's.
SELECT harvest.register_worker('hb-old', ARRAY['dq_hb'], 'host', 1);
SELECT harvest.register_worker('hb-new', ARRAY['dq_hb'], 'host', 2);
CREATE TEMP TABLE hb_run ON COMMIT DROP AS
    SELECT * FROM harvest.start_workflow('ghost_wf', '[]', 'hb', 'dq_hb');
CREATE FUNCTION pg_temp.hand_back(p_worker text) RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    SELECT * INTO v_task FROM harvest.claim_tasks(p_worker, ARRAY['dq_hb'], 1, 30);
    RETURN harvest.release_workflow_task(v_task.task_id, v_task.fencing_token,
        jsonb_build_object('error_type', 'UnknownUpdate', 'message', 'no update handler u',
                           'details', jsonb_build_object('worker_id', p_worker)), 0);
END;
$fn$;
CREATE FUNCTION pg_temp.hb_state() RETURNS TABLE (run text, task text, lease text, error text, unknown_to jsonb)
LANGUAGE sql AS $fn$
    SELECT e.status, t.status, t.lease_owner, t.last_failure ->> 'error_type', t.last_failure -> 'details' -> 'unknown_to'
    FROM harvest.executions AS e LEFT JOIN harvest.tasks AS t ON t.execution_id = e.id
    WHERE e.id = (SELECT execution_id FROM hb_run);
$fn$;
SELECT is(pg_temp.hand_back('hb-old'), true, 'release_workflow_task(): handed back while hb-new has not tried it');
SELECT results_eq($$SELECT * FROM pg_temp.hb_state()$$,
                  $$VALUES ('RUNNING'::text, 'pending'::text, NULL::text, 'UnknownUpdate'::text, '["hb-old"]'::jsonb)$$,
                  'the task is pending again with the worker that tried it kept');
SELECT is(pg_temp.hand_back('hb-new'), false, 'once every live worker tried it: false');
SELECT results_eq($$SELECT * FROM pg_temp.hb_state()$$,
                  $$VALUES ('RUNNING'::text, 'running'::text, 'hb-new'::text, 'UnknownUpdate'::text, '["hb-old"]'::jsonb)$$,
                  'and the claim is unchanged, the caller''s to decide (the run is not failed)');
SELECT is_empty($$SELECT 1 FROM harvest.events WHERE execution_id = (SELECT execution_id FROM hb_run)
                  AND event_id > 1$$, 'release_workflow_task() writes nothing to the history');
SELECT throws_ok(format($$SELECT harvest.release_workflow_task(%s, %s, '{"error_type": "E"}', 0)$$,
                        (SELECT id FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM hb_run)),
                        (SELECT fencing_token FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM hb_run))),
                 'HR001', NULL, 'release_workflow_task() of another error_type: HR001');

-- cancel_timer: the timer task is dropped, TimerCancelled recorded.
SELECT pg_temp.start_and_claim('ct');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "start_timer", "seq": 1, "duration": 60},
                            {"type": "cancel_timer", "seq": 2, "timer_seq": 1}]')$$,
                         pg_temp.task('ct'), pg_temp.token('ct')),
                  $$VALUES (4::bigint, 'RUNNING'::text)$$, 'cancel_timer: accepted');
SELECT results_eq($$SELECT event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('ct') AND event_id = 4$$,
                  $$VALUES ('TimerCancelled'::text, '{"seq": 2, "timer_seq": 1}'::jsonb)$$,
                  'cancel_timer: TimerCancelled{seq, timer_seq}');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('ct')$$,
                'cancel_timer: the timer task is gone');

-- start_child_workflow (harvest._start_child): a child run linked to its parent.
SELECT pg_temp.start_and_claim('parent');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "start_child_workflow", "seq": 1, "workflow_name": "kid", "input": [1]}]')$$,
                         pg_temp.task('parent'), pg_temp.token('parent')),
                  $$VALUES (3::bigint, 'RUNNING'::text)$$, 'start_child_workflow: accepted');
SELECT is((SELECT decided_through FROM harvest.executions WHERE id = pg_temp.run('parent')), 1::bigint,
          'start_child_workflow: decided_through stays at the decision''s through (its event is not one a worker takes as read)');
SELECT results_eq(
    $$SELECT c.workflow_id, c.status, c.queue, c.input, c.parent_seq, c.parent_close_policy,
             harvest.shard_of(c.id) = harvest.shard_of(c.parent_id)
      FROM harvest.executions AS c WHERE c.parent_id = pg_temp.run('parent')$$,
    $$VALUES ('parent/1'::text, 'RUNNING'::text, 'dq_parent'::text, '[1]'::jsonb, 1, 'terminate'::text, true)$$,
    'the child runs on the parent''s queue and shard, workflow_id <parent>/<seq>, parent_close_policy terminate');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'workflow_id', (event_data ->> 'child_execution_id')::uuid
      FROM harvest.events WHERE execution_id = pg_temp.run('parent') AND event_id = 3$$,
    $$SELECT 'ChildWorkflowStarted'::text, 'parent/1'::text, id FROM harvest.executions
      WHERE parent_id = pg_temp.run('parent')$$,
    'the parent records ChildWorkflowStarted with the child''s execution id');
SELECT pg_temp.start_and_claim('parent2');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "start_child_workflow", "seq": 1, "workflow_name": "kid", "parent_close_policy": "orphan"}]')$$,
                        pg_temp.task('parent2'), pg_temp.token('parent2')), 'HR001',
                 'unknown parent_close_policy "orphan"', 'start_child_workflow with an unknown parent_close_policy: HR001');
CREATE TEMP TABLE taken ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('kid', '[]', 'taken');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "start_child_workflow", "seq": 1, "workflow_name": "kid", "workflow_id": "taken"}]')$$,
                         pg_temp.task('parent2'), pg_temp.token('parent2')),
                  $$VALUES (4::bigint, 'RUNNING'::text)$$, 'start_child_workflow of a running workflow_id: accepted');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'status', event_data -> 'failure' ->> 'error_type'
      FROM harvest.events WHERE execution_id = pg_temp.run('parent2') AND event_id = 4$$,
    $$VALUES ('ChildWorkflowFailed'::text, 'START_FAILED'::text, 'WorkflowAlreadyExists'::text)$$,
    'a child whose workflow_id is running: ChildWorkflowFailed (WorkflowAlreadyExists)');
SELECT results_eq($$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('parent2')$$,
                  $$VALUES ('workflow'::text, 'pending'::text)$$, 'and the parent is woken to hear it');
SELECT pg_temp.start_and_claim('parent3');
SELECT harvest.register_workflows(ARRAY['dq_parent3'], ARRAY['decide_wf']);
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "start_child_workflow", "seq": 1, "workflow_name": "no_such_kid"}]')$$,
                         pg_temp.task('parent3'), pg_temp.token('parent3')),
                  $$VALUES (4::bigint, 'RUNNING'::text)$$, 'start_child_workflow of an unregistered name: accepted');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'status', event_data -> 'failure' ->> 'error_type',
             event_data -> 'failure' ->> 'reason', event_data -> 'failure' -> 'details' ->> 'queue'
      FROM harvest.events WHERE execution_id = pg_temp.run('parent3') AND event_id = 4$$,
    $$VALUES ('ChildWorkflowFailed'::text, 'START_FAILED'::text, 'UnknownWorkflow'::text, 'unknown_workflow'::text,
              'dq_parent3'::text)$$,
    'a child no worker registered on its queue: ChildWorkflowFailed (UnknownWorkflow), nothing started');
SELECT pg_temp.start_and_claim('parent4');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           jsonb_build_array(jsonb_build_object('type', 'start_child_workflow', 'seq', 1,
                               'workflow_name', 'kid', 'workflow_id', repeat('k', 1001))))$$,
                         pg_temp.task('parent4'), pg_temp.token('parent4')),
                  $$VALUES (4::bigint, 'RUNNING'::text)$$, 'start_child_workflow whose start is refused (HR001): accepted');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'status', event_data -> 'failure' ->> 'error_type',
             event_data -> 'failure' ->> 'message'
      FROM harvest.events WHERE execution_id = pg_temp.run('parent4') AND event_id = 4$$,
    $$VALUES ('ChildWorkflowFailed'::text, 'START_FAILED'::text, 'InvalidArgument'::text,
              'workflow_id is 1001 bytes, over the limit of 1000'::text)$$,
    'a child whose start arguments are refused: ChildWorkflowFailed (InvalidArgument), not a decision failing on every retry');

-- cancel_workflow closes the run as CANCELLED.
SELECT pg_temp.start_and_claim('cancel');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "cancel_workflow", "details": "user asked"}]')$$,
                         pg_temp.task('cancel'), pg_temp.token('cancel')),
                  $$VALUES (3::bigint, 'CANCELLED'::text)$$, 'cancel_workflow: the answer says CANCELLED');
SELECT results_eq(
    $$SELECT e.failure ->> 'error_type', ev.event_type, ev.event_data FROM harvest.executions AS e
      JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = 3 WHERE e.id = pg_temp.run('cancel')$$,
    $$VALUES ('Cancelled'::text, 'WorkflowCancelled'::text, '{"details": "user asked"}'::jsonb)$$,
    'cancel_workflow: WorkflowCancelled{details} and a Cancelled failure');

-- Trace context: a continue_as_new command's traceparent starts the successor, and a
-- successor of a run started with one keeps it when the command has none.
SELECT pg_temp.start_and_claim('can_tp');
SELECT is((SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('can_tp'), pg_temp.token('can_tp'),
              1, '[{"type": "continue_as_new", "input": [2], "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}]')),
          'CONTINUED_AS_NEW', 'setup: a continue_as_new command with a traceparent');
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM harvest.executions AS n
           JOIN harvest.events AS ev ON ev.execution_id = n.id AND ev.event_id = 1
           WHERE n.continued_from = pg_temp.run('can_tp')),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', '_continue_as_new(): the successor continues the decision''s continue_as_new span');
SELECT lives_ok($$SELECT harvest._continue_as_new(e, '[3]', 1) FROM harvest.executions AS e
                  WHERE e.continued_from = pg_temp.run('can_tp')$$, 'setup: its successor continues as new, untraced');
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM harvest.executions AS n
           JOIN harvest.executions AS m ON n.continued_from = m.id
           JOIN harvest.events AS ev ON ev.execution_id = n.id AND ev.event_id = 1
           WHERE m.continued_from = pg_temp.run('can_tp')),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', '_continue_as_new(): without one, the successor keeps its predecessor''s starting span');

-- continue_as_new (harvest._continue_as_new): this run ends, its successor starts.
SELECT pg_temp.start_and_claim('can');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "continue_as_new", "input": [2]}]')$$,
                         pg_temp.task('can'), pg_temp.token('can')),
                  $$VALUES (3::bigint, 'CONTINUED_AS_NEW'::text)$$, 'continue_as_new: the answer says CONTINUED_AS_NEW');
SELECT results_eq(
    $$SELECT n.workflow_name, n.workflow_id, n.status, n.input, n.queue, o.output ->> 'continued_as_new'
      FROM harvest.executions AS n JOIN harvest.executions AS o ON o.id = n.continued_from
      WHERE o.id = pg_temp.run('can')$$,
    $$SELECT 'decide_wf'::text, 'can'::text, 'RUNNING'::text, '[2]'::jsonb, 'dq_can'::text,
             (SELECT id::text FROM harvest.executions WHERE continued_from = pg_temp.run('can'))$$,
    'the successor has the same name, workflow_id and queue, the new input, and is linked both ways');
SELECT is((SELECT event_type FROM harvest.events WHERE execution_id = pg_temp.run('can') ORDER BY event_id DESC LIMIT 1),
          'WorkflowContinuedAsNew', 'the old run ends with WorkflowContinuedAsNew');

-- The helpers on their own.
SELECT pg_temp.start_and_claim('lock');
SELECT is((harvest._lock_claimed_task(pg_temp.task('lock'), pg_temp.token('lock'), 'workflow')).fencing_token,
          pg_temp.token('lock'), '_lock_claimed_task() returns the claimed row');
SELECT throws_ok(format($$SELECT harvest._lock_claimed_task(%s, %s, 'activity')$$,
                        pg_temp.task('lock'), pg_temp.token('lock')), 'HR001',
                 format('task %s is a workflow task, not a activity task', pg_temp.task('lock')),
                 '_lock_claimed_task() of the wrong kind: HR001');
SELECT is(harvest._require('{"type": "t", "n": 3}', 'n', 'number'), '3'::jsonb, '_require() returns the field');
SELECT throws_ok($$SELECT harvest._require('{"type": "t", "n": 3}', 'n', 'string')$$, 'HR001',
                 'command t needs "n" as a JSON string, got number', '_require() of the wrong type: HR001');

-- ---------------------------------------------------------------- history size and hard caps
-- history_bytes (kept by harvest._append_event) and complete_workflow_task's
-- p_event_cap / p_byte_cap: a run past a cap fails, unless the commands closed it.
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
CREATE FUNCTION pg_temp.bytes(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT history_bytes FROM harvest.executions WHERE id = pg_temp.run(p_key);
$fn$;
SELECT pg_temp.start_and_claim('bytes');
SELECT is(pg_temp.bytes('bytes'),
          (SELECT octet_length(event_data::text)::bigint FROM harvest.events
           WHERE execution_id = pg_temp.run('bytes') AND event_id = 1),
          'history_bytes of a new run: the size of its WorkflowStarted data');
CREATE TEMP TABLE bytes_seen (step text PRIMARY KEY, bytes bigint) ON COMMIT DROP;
INSERT INTO bytes_seen VALUES ('start', pg_temp.bytes('bytes'));
SELECT is(harvest._append_event(pg_temp.run('bytes'), 'TimerFired', '{"seq": 1}'), 2::bigint,
          'setup: append a small event');
SELECT is(pg_temp.bytes('bytes') - (SELECT bytes FROM bytes_seen WHERE step = 'start'),
          octet_length('{"seq": 1}'::jsonb::text)::bigint, 'history_bytes grows by the JSON text bytes of the event data');
INSERT INTO bytes_seen VALUES ('small', pg_temp.bytes('bytes'));
SELECT is(harvest._append_event(pg_temp.run('bytes'), 'TimerFired', NULL), 3::bigint,
          'setup: append an event without data');
SELECT is(pg_temp.bytes('bytes') - (SELECT bytes FROM bytes_seen WHERE step = 'small'),
          octet_length('{}'::jsonb::text)::bigint, 'NULL data counts as the {} it is stored as');
INSERT INTO bytes_seen VALUES ('null', pg_temp.bytes('bytes'));
SELECT is(harvest._append_event(pg_temp.run('bytes'), 'MarkerRecorded',
                                jsonb_build_object('seq', 9, 'kind', 'side_effect', 'value', repeat('x', 5000))),
          4::bigint, 'setup: append a large event');
SELECT is(pg_temp.bytes('bytes') - (SELECT bytes FROM bytes_seen WHERE step = 'null'),
          octet_length(jsonb_build_object('seq', 9, 'kind', 'side_effect', 'value', repeat('x', 5000))::text)::bigint,
          'a large event counts its full JSON text size');
INSERT INTO bytes_seen VALUES ('large', pg_temp.bytes('bytes'));
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 4, '[
                            {"type": "schedule_activity", "seq": 1, "name": "a"},
                            {"type": "start_timer", "seq": 2, "duration": 5}]')$$,
                         pg_temp.task('bytes'), pg_temp.token('bytes')),
                  $$VALUES (7::bigint, 'RUNNING'::text)$$, 'setup: a batch of two commands');
SELECT is(pg_temp.bytes('bytes') - (SELECT bytes FROM bytes_seen WHERE step = 'large'),
          (SELECT sum(octet_length(event_data::text))::bigint FROM harvest.events
           WHERE execution_id = pg_temp.run('bytes') AND event_id > 4),
          'complete_workflow_task(): history_bytes grows by the size of each event it appends');
SELECT is(pg_temp.bytes('bytes'),
          (SELECT sum(octet_length(event_data::text)) FROM harvest.events WHERE execution_id = pg_temp.run('bytes')),
          'history_bytes is the sum of octet_length(event_data::text) over the run''s stored events');

-- The event cap.
SELECT pg_temp.start_and_claim('cap_ev');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "schedule_activity", "seq": 1, "name": "a"},
                            {"type": "start_timer", "seq": 2, "duration": 5}]', p_event_cap => 3)$$,
                         pg_temp.task('cap_ev'), pg_temp.token('cap_ev')),
                  $$VALUES (5::bigint, 'FAILED'::text)$$, 'past the event cap: the answer says FAILED');
SELECT results_eq(
    $$SELECT status, failure ->> 'error_type', failure -> 'non_retryable', (failure -> 'details') - 'bytes',
             (failure #>> '{details,bytes}')::bigint > 0, completed_at
      FROM harvest.executions WHERE id = pg_temp.run('cap_ev')$$,
    $$VALUES ('FAILED'::text, 'HistoryEventCapExceeded'::text, 'true'::jsonb,
              '{"events": 4, "event_cap": 3, "byte_cap": 52428800}'::jsonb, true, '2030-01-01 00:02:00+00'::timestamptz)$$,
    'the run is FAILED: HistoryEventCapExceeded, non-retryable, details {events, bytes, event_cap, byte_cap}');
SELECT matches((SELECT failure ->> 'message' FROM harvest.executions WHERE id = pg_temp.run('cap_ev')),
               '^the history reached 4 events / [0-9]+ bytes \(caps 3 events, 52428800 bytes\); call ctx\.continue_as_new\(\) before the history grows this large$',
               'the failure message names the size, the caps and the remedy');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data FROM harvest.events AS ev
      WHERE ev.execution_id = pg_temp.run('cap_ev') AND ev.event_id > 4$$,
    $$SELECT 5::bigint, 'WorkflowFailed'::text, jsonb_build_object('failure', e.failure)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('cap_ev')$$,
    'the batch''s events are kept, then WorkflowFailed{failure} ends the history');
SELECT is((SELECT failure #>> '{details,bytes}' FROM harvest.executions WHERE id = pg_temp.run('cap_ev'))::bigint,
          pg_temp.bytes('cap_ev') - (SELECT octet_length(event_data::text) FROM harvest.events
                                     WHERE execution_id = pg_temp.run('cap_ev') AND event_id = 5),
          'details.bytes is history_bytes before the WorkflowFailed event');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('cap_ev')$$,
                'the failed run has no task left, not even the ones the batch made');
SELECT pg_temp.start_and_claim('cap_at');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "schedule_activity", "seq": 1, "name": "a"},
                            {"type": "start_timer", "seq": 2, "duration": 5}]', p_event_cap => 4)$$,
                         pg_temp.task('cap_at'), pg_temp.token('cap_at')),
                  $$VALUES (4::bigint, 'RUNNING'::text)$$, 'exactly at the event cap: the run goes on');

-- The byte cap.
SELECT pg_temp.start_and_claim('cap_b');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[
                            {"type": "record_marker", "seq": 1, "kind": "side_effect", "value": "%s"}]',
                            p_byte_cap => 300)$$,
                         pg_temp.task('cap_b'), pg_temp.token('cap_b'), repeat('y', 200)),
                  $$VALUES (4::bigint, 'FAILED'::text)$$, 'past the byte cap: the answer says FAILED');
SELECT results_eq(
    $$SELECT status, failure ->> 'error_type', (failure -> 'details') - 'bytes', (failure #>> '{details,bytes}')::bigint > 300
      FROM harvest.executions WHERE id = pg_temp.run('cap_b')$$,
    $$VALUES ('FAILED'::text, 'HistoryByteCapExceeded'::text, '{"events": 3, "event_cap": 50000, "byte_cap": 300}'::jsonb, true)$$,
    'the run is FAILED: HistoryByteCapExceeded, details name the byte cap');
SELECT is((SELECT event_type FROM harvest.events WHERE execution_id = pg_temp.run('cap_b') AND event_id = 4),
          'WorkflowFailed', 'byte cap: WorkflowFailed ends the history');
SELECT pg_temp.start_and_claim('cap_both');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]', p_event_cap => 1, p_byte_cap => 1)$$,
                         pg_temp.task('cap_both'), pg_temp.token('cap_both')),
                  $$VALUES (3::bigint, 'FAILED'::text)$$, 'past both caps: FAILED');
SELECT is((SELECT failure ->> 'error_type' FROM harvest.executions WHERE id = pg_temp.run('cap_both')),
          'HistoryEventCapExceeded', 'past both caps: the event cap is named');
SELECT pg_temp.start_and_claim('cap_nb');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]', p_event_cap => NULL, p_byte_cap => 1)$$,
                         pg_temp.task('cap_nb'), pg_temp.token('cap_nb')),
                  $$VALUES (3::bigint, 'FAILED'::text)$$, 'no event cap, past the byte cap: FAILED');
SELECT results_eq(
    $$SELECT failure ->> 'error_type', failure #> '{details,event_cap}', failure ->> 'message' LIKE '%(caps none events, 1 bytes)%'
      FROM harvest.executions WHERE id = pg_temp.run('cap_nb')$$,
    $$VALUES ('HistoryByteCapExceeded'::text, 'null'::jsonb, true)$$,
    'a NULL event cap is reported as none');

-- NULL caps mean unlimited.
SELECT pg_temp.start_and_claim('cap_null');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                            '[{"type": "start_timer", "seq": 1, "duration": 5}]', p_event_cap => NULL, p_byte_cap => NULL)$$,
                         pg_temp.task('cap_null'), pg_temp.token('cap_null')),
                  $$VALUES (3::bigint, 'RUNNING'::text)$$, 'NULL caps: unlimited, the run goes on');
SELECT pg_temp.start_and_claim('cap_bnull');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]', p_event_cap => 2, p_byte_cap => NULL)$$,
                         pg_temp.task('cap_bnull'), pg_temp.token('cap_bnull')),
                  $$VALUES (2::bigint, 'RUNNING'::text)$$, 'a NULL byte cap with the event cap not reached: the run goes on');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id IN (pg_temp.run('cap_null'), pg_temp.run('cap_bnull'))
           AND event_type = 'WorkflowFailed'), 0::bigint, 'no WorkflowFailed for runs under their caps');

-- Commands that close the run win over the caps.
SELECT pg_temp.start_and_claim('cap_can');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                            '[{"type": "continue_as_new", "input": [2]}]', p_event_cap => 1, p_byte_cap => 1)$$,
                         pg_temp.task('cap_can'), pg_temp.token('cap_can')),
                  $$VALUES (3::bigint, 'CONTINUED_AS_NEW'::text)$$, 'continue_as_new past the caps: CONTINUED_AS_NEW, not FAILED');
SELECT results_eq(
    $$SELECT o.failure, ev.event_type, n.status, n.last_event_id
      FROM harvest.executions AS o
      JOIN harvest.events AS ev ON ev.execution_id = o.id AND ev.event_id = o.last_event_id
      JOIN harvest.executions AS n ON n.continued_from = o.id
      WHERE o.id = pg_temp.run('cap_can')$$,
    $$VALUES (NULL::jsonb, 'WorkflowContinuedAsNew'::text, 'RUNNING'::text, 1::bigint)$$,
    'the run ends with WorkflowContinuedAsNew and its successor starts fresh');
SELECT pg_temp.start_and_claim('cap_done');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                            '[{"type": "complete_workflow", "result": 1}]', p_event_cap => 1)$$,
                         pg_temp.task('cap_done'), pg_temp.token('cap_done')),
                  $$VALUES (3::bigint, 'COMPLETED'::text)$$, 'complete_workflow past the event cap: COMPLETED');

-- A run failed by a cap is not re-enqueued, whatever arrived past through.
SELECT pg_temp.start_and_claim('cap_late');
SELECT is(harvest._append_event(pg_temp.run('cap_late'), 'TimerFired', '{"seq": 1}'), 2::bigint,
          'setup: an event arrives while the workflow task is in flight');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1, '[]', p_event_cap => 2)$$,
                         pg_temp.task('cap_late'), pg_temp.token('cap_late')),
                  $$VALUES (4::bigint, 'FAILED'::text)$$, 'past the cap with events past through: FAILED');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('cap_late')$$,
                'a run failed by a cap gets no new workflow task');

-- A decision's marker: WorkflowTaskCompleted and who decided, in the same row update.
SELECT pg_temp.start_and_claim('marker');
SELECT lives_ok(format($$SELECT harvest._apply_decision('%s', 1, '[]', 'w-marker', NULL, NULL, 0)$$,
                       pg_temp.run('marker')),
                '_apply_decision() of no commands succeeds');
SELECT results_eq(
    $$SELECT e.last_event_id, e.decided_by, e.decided_through, e.history_bytes, ev.event_type, ev.event_data,
             ev.created_at
      FROM harvest.executions AS e JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = 2
      WHERE e.id = pg_temp.run('marker')$$,
    $$SELECT 2::bigint, 'w-marker'::text, 2::bigint,
             (SELECT sum(octet_length(event_data::text))::bigint FROM harvest.events
              WHERE execution_id = pg_temp.run('marker')),
             'WorkflowTaskCompleted'::text, '{"through": 1, "worker_id": "w-marker"}'::jsonb,
             '2030-01-01 00:02:00+00'::timestamptz$$,
    '_apply_decision(): event 2 WorkflowTaskCompleted{through, worker_id}, decided_by/through (past its own marker) and history_bytes');

-- ---------------------------------------------------------------- _try_lock_claimed_task
-- The non-raising lock: the row and no problem, or a problem (gone, kind, stale,
-- expired) with its message and no row; _lock_claimed_task raises the same.
SET LOCAL harvest.fake_now = '2030-01-01 00:03:00+00';
CREATE FUNCTION pg_temp.try_lock(p_task bigint, p_token bigint, p_kind text)
RETURNS TABLE (task_id bigint, token bigint, problem text, message text) LANGUAGE sql AS $fn$
    SELECT (t.task).id, (t.task).fencing_token, t.problem, t.message
    FROM harvest._try_lock_claimed_task(p_task, p_token, p_kind) AS t;
$fn$;
-- _lock_claimed_task's SQLSTATE and HINT, or 'ok'.
CREATE FUNCTION pg_temp.lock_error(p_task bigint, p_token bigint, p_kind text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_hint text;
BEGIN
    PERFORM harvest._lock_claimed_task(p_task, p_token, p_kind);
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || coalesce(' (hint: ' || nullif(v_hint, '') || ')', '');
END;
$fn$;
SELECT pg_temp.start_and_claim('try');
SELECT results_eq($$SELECT * FROM pg_temp.try_lock(pg_temp.task('try'), pg_temp.token('try'), 'workflow')$$,
                  $$SELECT pg_temp.task('try'), pg_temp.token('try'), NULL::text, NULL::text$$,
                  '_try_lock_claimed_task(): the claimed row and no problem');
SELECT results_eq($$SELECT * FROM pg_temp.try_lock(-1, 1, 'workflow')$$,
                  $$VALUES (NULL::bigint, NULL::bigint, 'gone'::text,
                            'task -1 is gone: its lease expired or the run ended, and the work was handed on'::text)$$,
                  '_try_lock_claimed_task() of an unknown task: gone, no row');
-- The rules both ways of taking a claimed task apply, in the order they are named.
SELECT results_eq($$SELECT harvest._claimed_task_problem(k, s, tok, lease, 'activity', 7, '2030-01-01 00:00:00+00')
                    FROM (VALUES (1, 'activity', 'running', 7::bigint, '2030-01-01 00:00:01+00'::timestamptz),
                                 (2, 'activity', 'running', 7, '2030-01-01 00:00:00+00'),
                                 (3, 'activity', 'running', 7, NULL),
                                 (4, 'workflow', 'pending', 8, '2029-01-01 00:00:00+00'),
                                 (5, 'activity', 'pending', 7, '2030-01-01 00:00:01+00'),
                                 (6, 'activity', 'running', 8, '2030-01-01 00:00:01+00'),
                                 (7, 'activity', 'running', NULL, '2030-01-01 00:00:01+00'),
                                 (8, 'activity', 'running', 7, '2029-12-31 23:59:59+00'),
                                 (9, 'activity', 'pending', 7, '2029-12-31 23:59:59+00'))
                         AS c (n, k, s, tok, lease) ORDER BY n$$,
                  $$VALUES (NULL::text), (NULL), (NULL), ('kind'), ('stale'), ('stale'), ('stale'),
                           ('expired'), ('stale')$$,
                  '_claimed_task_problem(): nothing wrong (a lease ending now or never is live), '
                  'then kind before stale before expired');
SELECT is(harvest._claimed_task_problem('activity', 'running', NULL, NULL, 'activity', NULL, now()), NULL,
          '_claimed_task_problem(): no token on either side is the same token');
SELECT unalike(pg_temp.plan_of($$SELECT t.id FROM harvest.tasks AS t WHERE harvest._claimed_task_problem(
                   t.kind, t.status, t.fencing_token, t.lease_expires_at, 'activity', 1, now()) IS NULL$$),
               '%_claimed_task_problem(%', '_claimed_task_problem() is inlined into its caller''s expression');
-- Its second half, for a caller holding the run's row: the same answers in the same words.
SELECT results_eq($$SELECT (t.task).id, t.problem FROM harvest._try_lock_task_of_locked_run(
                        pg_temp.task('try'), pg_temp.token('try'), 'workflow') AS t$$,
                  $$SELECT pg_temp.task('try'), NULL::text$$,
                  '_try_lock_task_of_locked_run(): the claimed row and no problem');
SELECT results_eq($$SELECT t.task IS NULL, t.problem, t.message FROM harvest._try_lock_task_of_locked_run(
                        pg_temp.task('try'), pg_temp.token('try') - 1, 'workflow') AS t$$,
                  $$SELECT true, 'stale'::text, format('task %s was claimed again (fencing token %s is stale)',
                                                      pg_temp.task('try'), pg_temp.token('try') - 1)$$,
                  '_try_lock_task_of_locked_run() with another fencing token: stale, no row, the same message');
SELECT results_eq($$SELECT * FROM pg_temp.try_lock(pg_temp.task('try'), pg_temp.token('try'), 'activity')$$,
                  $$SELECT NULL::bigint, NULL::bigint, 'kind'::text,
                           format('task %s is a workflow task, not a activity task', pg_temp.task('try'))$$,
                  '_try_lock_claimed_task() of the wrong kind: kind, no row');
SELECT results_eq($$SELECT * FROM pg_temp.try_lock(pg_temp.task('try'), pg_temp.token('try') - 1, 'workflow')$$,
                  $$SELECT NULL::bigint, NULL::bigint, 'stale'::text,
                           format('task %s was claimed again (fencing token %s is stale)',
                                  pg_temp.task('try'), pg_temp.token('try') - 1)$$,
                  '_try_lock_claimed_task() with another fencing token: stale, no row');
SELECT results_eq($$SELECT problem FROM pg_temp.try_lock(pg_temp.task('try'), NULL, 'workflow')$$,
                  $$VALUES ('stale'::text)$$, '_try_lock_claimed_task() with no fencing token: stale');
SELECT pg_temp.start_and_claim('try_pending');
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{}', 60)$$,
                       pg_temp.task('try_pending'), pg_temp.token('try_pending')),
                'setup: the task is pending again, its token unchanged');
SELECT results_eq($$SELECT problem FROM pg_temp.try_lock(pg_temp.task('try_pending'), pg_temp.token('try_pending'),
                                                         'workflow')$$,
                  $$VALUES ('stale'::text)$$, '_try_lock_claimed_task() of a task that is not running: stale');
SET LOCAL harvest.fake_now = '2030-01-01 00:03:30+00';
SELECT is((SELECT problem FROM pg_temp.try_lock(pg_temp.task('try'), pg_temp.token('try'), 'workflow')), NULL,
          '_try_lock_claimed_task() exactly at the lease end: no problem');
SET LOCAL harvest.fake_now = '2030-01-01 00:03:31+00';
SELECT results_eq($$SELECT * FROM pg_temp.try_lock(pg_temp.task('try'), pg_temp.token('try'), 'workflow')$$,
                  $$SELECT NULL::bigint, NULL::bigint, 'expired'::text,
                           format('task %s: the lease expired at 2030-01-01T00:03:30+00:00, so this result is refused',
                                  pg_temp.task('try'))$$,
                  '_try_lock_claimed_task() past the lease: expired, no row');
SELECT results_eq(
    $$SELECT status, fencing_token, lease_owner FROM harvest.tasks WHERE id = pg_temp.task('try')$$,
    $$SELECT 'running'::text, pg_temp.token('try'), 'worker-1'::text$$,
    '_try_lock_claimed_task() refusing changes nothing');
SELECT results_eq(
    $$VALUES (pg_temp.lock_error(-1, 1, 'workflow')),
             (pg_temp.lock_error(pg_temp.task('try'), pg_temp.token('try'), 'activity')),
             (pg_temp.lock_error(pg_temp.task('try'), pg_temp.token('try') - 1, 'workflow')),
             (pg_temp.lock_error(pg_temp.task('try'), pg_temp.token('try'), 'workflow'))$$,
    $$VALUES ('HR004'::text), ('HR001'), ('HR004'),
             ('HR004 (hint: raise the timeout (start_to_close or the workflow task lease) or heartbeat)')$$,
    '_lock_claimed_task() raises: gone and stale HR004, kind HR001, expired HR004 with a hint');

-- ---------------------------------------------------------------- hand-off of scheduled activities
-- complete_workflow_task(p_hand_off_slots): up to that many scheduled activities
-- are leased at once to p_worker_id (an active worker polling their queue) and
-- returned in handed; the rest are queued.
SET LOCAL harvest.fake_now = '2030-01-01 00:04:00+00';
SELECT harvest.register_worker('hander', ARRAY['dq_hand', 'hand_q', 'gq1', 'gq2', 'gq3', 'gq4', 'gq5', 'prio_q'],
                               'host-h', 1);
CREATE TEMP TABLE hand_answers (key text PRIMARY KEY, last_event_id bigint, execution_status text, handed jsonb)
ON COMMIT DROP;
-- Start and claim run p_key, then complete it with p_commands as worker 'hander'.
CREATE FUNCTION pg_temp.hand(p_key text, p_commands jsonb, p_slots integer, p_worker text DEFAULT 'hander')
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_temp.start_and_claim(p_key);
    INSERT INTO hand_answers
    SELECT p_key, a.last_event_id, a.execution_status, a.handed
    FROM harvest.complete_workflow_task(pg_temp.task(p_key), pg_temp.token(p_key), 1, p_commands,
                                        p_worker_id => p_worker, p_hand_off_slots => p_slots) AS a;
END;
$fn$;
CREATE FUNCTION pg_temp.handed(p_key text) RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT handed FROM hand_answers WHERE key = p_key;
$fn$;

SELECT pg_temp.hand('hand', $$[
    {"type": "schedule_activity", "seq": 1, "name": "first", "input": [1], "queue": "hand_q",
     "options": {"start_to_close": 20, "heartbeat_timeout": 5}},
    {"type": "schedule_activity", "seq": 2, "name": "second", "input": [2], "queue": "hand_q",
     "options": {"start_to_close": 20}}]$$, 1);
SELECT results_eq($$SELECT last_event_id, execution_status, jsonb_array_length(handed) FROM hand_answers
                    WHERE key = 'hand'$$,
                  $$VALUES (4::bigint, 'RUNNING'::text, 1)$$,
                  'p_hand_off_slots 1 with two schedule_activity commands: one activity handed');
SELECT results_eq(
    $$SELECT seq, status, attempt, lease_owner, fencing_token > 0, started_at, lease_expires_at
      FROM harvest.tasks WHERE execution_id = pg_temp.run('hand') ORDER BY seq$$,
    $$VALUES (1, 'running'::text, 1, 'hander'::text, true, '2030-01-01 00:04:00+00'::timestamptz,
              '2030-01-01 00:04:05+00'::timestamptz),
             (2, 'pending', 0, NULL, false, NULL, NULL)$$,
    'the first is running, leased to the worker (attempt 1, a fencing token, lease = heartbeat_timeout); the second pending');
SELECT results_eq(
    $$SELECT seq, run_workflow_name, run_workflow_id FROM harvest.tasks WHERE execution_id = pg_temp.run('hand') ORDER BY seq$$,
    $$VALUES (1, NULL::text, NULL::text), (2, 'decide_wf', 'hand')$$,
    'the queued activity carries its run''s workflow name and id (a claim answers it from its row); the handed one none');
SELECT results_eq(
    $$SELECT (h ->> 'task_id')::bigint, h ->> 'kind', (h ->> 'execution_id')::uuid, h ->> 'workflow_name',
             h ->> 'workflow_id', h ? 'task_queue', h ->> 'queue', (h ->> 'seq')::integer, h ->> 'activity_name',
             h -> 'input', h -> 'options', (h ->> 'attempt')::integer, (h ->> 'fencing_token')::bigint,
             (SELECT r.lease_expires_at FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint), h -> 'heartbeat_details', h ? 'new_events'
      FROM (SELECT pg_temp.handed('hand') -> 0 AS h) AS x$$,
    $$SELECT t.id, 'activity'::text, t.execution_id, 'decide_wf'::text, 'hand'::text, false, 'hand_q'::text,
             1, 'first'::text, '[1]'::jsonb, '{"start_to_close": 20, "heartbeat_timeout": 5}'::jsonb, 1,
             t.fencing_token, t.lease_expires_at, 'null'::jsonb, false
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('hand') AND t.seq = 1$$,
    'handed holds the task as the worker receives it: its id, run, queue, input, the options it reads, attempt, token (its row''s lease)');
SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(pg_temp.handed('hand') -> 0) AS k),
          (SELECT array_agg(a.name ORDER BY a.name)
           FROM pg_proc AS p, unnest(p.proargnames, p.proargmodes) AS a (name, mode)
           WHERE p.oid = 'harvest.claim_tasks'::regproc AND a.mode = 't'
             AND a.name NOT IN ('lease_expires_at', 'new_events', 'new_events_after', 'owner_epoch')),
          'a handed activity''s keys are claim_tasks'' columns the worker reads of one (claim.sql _worker_task)');
SELECT results_eq($$SELECT seq FROM harvest.claim_tasks('worker-2', ARRAY['hand_q'])$$, $$VALUES (2)$$,
                  'a claim gets the queued activity, not the handed one');
SELECT lives_ok(format($$SELECT harvest.complete_activity(%s, %s, '"done"')$$,
                       pg_temp.handed('hand') -> 0 ->> 'task_id', pg_temp.handed('hand') -> 0 ->> 'fencing_token'),
                'the handed activity completes under its fencing token');

-- p_hand_off_slots 0 (the default): everything is queued.
SELECT pg_temp.hand('hand0', '[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"}]', 0);
SELECT results_eq(
    $$SELECT a.handed, t.status, t.fencing_token FROM hand_answers AS a
      JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('hand0') WHERE a.key = 'hand0'$$,
    $$VALUES ('[]'::jsonb, 'pending'::text, 0::bigint)$$,
    'p_hand_off_slots 0: handed is [], the activity is pending');
SELECT pg_temp.start_and_claim('hand_def');
SELECT results_eq(
    format($$SELECT handed FROM harvest.complete_workflow_task(%s, %s, 1, '[{"type": "schedule_activity", "seq": 1,
                      "name": "a", "queue": "hand_q"}]', 'hander')$$,
           pg_temp.task('hand_def'), pg_temp.token('hand_def')),
    $$VALUES ('[]'::jsonb)$$, 'without p_hand_off_slots nothing is handed');
-- Queued activities go in as one INSERT before the next other command's work: the
-- rows (ids) and the events keep the commands' order around a timer between them.
SELECT pg_temp.hand('hand_order', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 2, "name": "b", "queue": "hand_q"},
    {"type": "start_timer", "seq": 3, "duration": 60},
    {"type": "schedule_activity", "seq": 4, "name": "c"}]$$, 1);
SELECT results_eq(
    $$SELECT array_agg(t.seq ORDER BY t.id), array_agg(t.kind || ':' || t.status ORDER BY t.id),
             (SELECT array_agg(e.event_type || ':' || coalesce(e.event_data ->> 'seq', '') ORDER BY e.event_id)
              FROM harvest.events AS e WHERE e.execution_id = pg_temp.run('hand_order') AND e.event_data ? 'seq')
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('hand_order')$$,
    $$VALUES (ARRAY[1, 2, 3, 4], ARRAY['activity:running', 'activity:pending', 'timer:pending', 'activity:pending'],
              ARRAY['ActivityScheduled:1', 'ActivityScheduled:2', 'TimerStarted:3', 'ActivityScheduled:4'])$$,
    'one handed, the rest queued: task rows and events in the commands'' order');
-- An activity on a queue the worker does not poll queues at once (gathered), and the one
-- after it on a queue it polls is still handed: rows in the commands' order.
SELECT pg_temp.hand('hand_mix', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "nobody_polls"},
    {"type": "schedule_activity", "seq": 2, "name": "b", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 3, "name": "c", "queue": "nobody_polls"}]$$, 2);
SELECT results_eq(
    $$SELECT array_agg(t.seq ORDER BY t.id), array_agg(t.status ORDER BY t.id),
             (SELECT array_agg(h ->> 'activity_name') FROM jsonb_array_elements(pg_temp.handed('hand_mix')) AS h)
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('hand_mix')$$,
    $$VALUES (ARRAY[1, 2, 3], ARRAY['pending', 'running', 'pending'], ARRAY['b'])$$,
    'a queue the worker does not poll: queued; the polled one between: handed; rows in order');

-- Consecutive handed activities go in as one INSERT (_hand_activities), as queued ones do;
-- a queued one between them sends the gathered ones in first: rows (ids) in the commands'
-- order, and a hand-off slot counts the activities gathered, not yet inserted.
SELECT pg_temp.hand('hand_batch', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 2, "name": "b", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 3, "name": "c", "queue": "nobody_polls"},
    {"type": "schedule_activity", "seq": 4, "name": "d", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 5, "name": "e", "queue": "hand_q"},
    {"type": "schedule_activity", "seq": 6, "name": "f", "queue": "hand_q"}]$$, 4);
SELECT results_eq(
    $$SELECT array_agg(t.seq ORDER BY t.id), array_agg(t.status ORDER BY t.id),
             (SELECT array_agg(h ->> 'activity_name') FROM jsonb_array_elements(pg_temp.handed('hand_batch')) AS h)
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('hand_batch')$$,
    $$VALUES (ARRAY[1, 2, 3, 4, 5, 6], ARRAY['running', 'running', 'pending', 'running', 'running', 'pending'],
              ARRAY['a', 'b', 'd', 'e'])$$,
    'four slots: a, b handed, c queued, d, e handed, f queued (no slot left): rows in the commands'' order');
SELECT results_eq(
    $$SELECT array_agg(t.seq ORDER BY t.id) FROM harvest.tasks AS t
      WHERE t.execution_id = pg_temp.run('hand_batch') GROUP BY t.cmin::text ORDER BY min(t.id)$$,
    $$VALUES (ARRAY[1, 2]), (ARRAY[3]), (ARRAY[4, 5]), (ARRAY[6])$$,
    '... by four INSERTs (rows of one statement share its cmin): a and b, c, d and e, f');

-- Activities with an admission gate or a claim-order key are never handed.
SELECT pg_temp.hand('gate', $$[
    {"type": "schedule_activity", "seq": 1, "name": "conc", "queue": "gq1",
     "options": {"concurrency_key": "k", "max_concurrent": 5}},
    {"type": "schedule_activity", "seq": 2, "name": "rate", "queue": "gq2", "options": {"rate_limit": {"rps": 10, "burst": 10}}},
    {"type": "schedule_activity", "seq": 3, "name": "fair", "queue": "gq3", "input": [{"tenant": "t"}],
     "options": {"fairness_key": "input.tenant"}},
    {"type": "schedule_activity", "seq": 4, "name": "aging", "queue": "gq4", "options": {"priority_aging_secs": 10}},
    {"type": "schedule_activity", "seq": 5, "name": "plain", "queue": "gq5"}]$$, 5);
SELECT results_eq($$SELECT seq, status FROM harvest.tasks WHERE execution_id = pg_temp.run('gate') ORDER BY seq$$,
                  $$VALUES (1, 'pending'::text), (2, 'pending'), (3, 'pending'), (4, 'pending'), (5, 'running')$$,
                  'concurrency_key, rate_limit, fairness_key, priority_aging_secs: queued; a plain one: handed');
SELECT is((SELECT array_agg(h ->> 'activity_name') FROM jsonb_array_elements(pg_temp.handed('gate')) AS h),
          ARRAY['plain'], 'handed lists only the plain activity');

-- Queued activities' fairness key: when no command of the decision names one, the INSERT answers
-- "is the queue fair" itself ('' on a fair queue, else none) and the insert trigger asks nothing
-- per row (the INSERT writes E'\x01' for none, which the trigger turns into NULL); when one does, the trigger
-- answers per row as before, so an unkeyed activity after a keyed one on a queue the keyed one
-- made fair joins the unkeyed group ''.
INSERT INTO harvest.fair_queues (queue) VALUES ('fq_fair');
SELECT pg_temp.hand('fq_plain', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "fq_fair"},
    {"type": "schedule_activity", "seq": 2, "name": "b", "queue": "fq_none"},
    {"type": "schedule_activity", "seq": 3, "name": "c", "queue": "fq_fair", "options": {"priority_aging_secs": 5}}]$$, 0);
SELECT results_eq(
    $$SELECT seq, fairness_key, priority_aging_secs FROM harvest.tasks WHERE execution_id = pg_temp.run('fq_plain') ORDER BY seq$$,
    $$VALUES (1, ''::text, NULL::double precision), (2, NULL, NULL), (3, '', 5)$$,
    'queued activities without a fairness key: '''' on a fair queue, none on another (answered by the INSERT)');
SELECT is((SELECT count(*)::integer FROM harvest.tasks WHERE fairness_key = E'\x01'), 0,
          'no task keeps the marker E''\x01'' the INSERT writes for no key');
SELECT pg_temp.hand('fq_keyed', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "fq_new", "input": [{"tenant": "t"}],
     "options": {"fairness_key": "input.tenant"}},
    {"type": "schedule_activity", "seq": 2, "name": "b", "queue": "fq_new"},
    {"type": "schedule_activity", "seq": 3, "name": "c", "queue": "fq_none"}]$$, 0);
SELECT results_eq(
    $$SELECT seq, fairness_key FROM harvest.tasks WHERE execution_id = pg_temp.run('fq_keyed') ORDER BY seq$$,
    $$VALUES (1, 't'::text), (2, ''), (3, NULL)$$,
    'a decision with a keyed activity: the keyed one makes its queue fair, the unkeyed one after it joins ''''');

-- A pending task of a higher priority on the queue keeps a new one from jumping it;
-- one of the same priority does not. (The gated one queues at priority 5.)
SELECT pg_temp.hand('prio', $$[
    {"type": "schedule_activity", "seq": 1, "name": "gated5", "queue": "prio_q",
     "options": {"concurrency_key": "p", "max_concurrent": 1, "priority": 5}},
    {"type": "schedule_activity", "seq": 2, "name": "low", "queue": "prio_q"},
    {"type": "schedule_activity", "seq": 3, "name": "same", "queue": "prio_q", "options": {"priority": 5}}]$$, 2);
SELECT results_eq(
    $$SELECT seq, priority, status FROM harvest.tasks WHERE execution_id = pg_temp.run('prio') ORDER BY seq$$,
    $$VALUES (1, 5, 'pending'::text), (2, 0, 'pending'), (3, 5, 'running')$$,
    'a higher priority pending on the queue: queued; the same priority: handed');

-- The rules' answer is taken again once a task went in since: a handed one (above the
-- pending 5 of the test before), then a gated one of a higher priority (queued, which sends
-- the handed one in first), then one like the first: not handed (the 7 is ahead of it).
SELECT pg_temp.hand('prio_again', $$[
    {"type": "schedule_activity", "seq": 1, "name": "first", "queue": "prio_q", "options": {"priority": 6}},
    {"type": "schedule_activity", "seq": 2, "name": "gated7", "queue": "prio_q",
     "options": {"concurrency_key": "p7", "max_concurrent": 1, "priority": 7}},
    {"type": "schedule_activity", "seq": 3, "name": "again", "queue": "prio_q", "options": {"priority": 6}}]$$, 3);
SELECT results_eq(
    $$SELECT seq, priority, status FROM harvest.tasks WHERE execution_id = pg_temp.run('prio_again') ORDER BY id$$,
    $$VALUES (1, 6, 'running'::text), (2, 7, 'pending'), (3, 6, 'pending')$$,
    'handed, then a higher priority queued: the next one of the first''s queue and priority is asked again, and queued');

-- Not an active worker polling the queue: nothing handed.
SELECT pg_temp.hand('unpolled', '[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "nobody_polls"}]', 1);
SELECT pg_temp.hand('ghost', '[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"}]', 1, 'ghost');
UPDATE harvest.workers SET status = 'draining' WHERE id = 'hander';
SELECT pg_temp.hand('draining', '[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"}]', 1);
UPDATE harvest.workers SET status = 'active' WHERE id = 'hander';
INSERT INTO harvest.fair_queues (queue) VALUES ('hand_fair_q');
UPDATE harvest.workers SET queues = queues || 'hand_fair_q'::text WHERE id = 'hander';
SELECT pg_temp.hand('fairq', '[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_fair_q"}]', 1);
SELECT results_eq(
    $$SELECT a.key, a.handed, t.status FROM hand_answers AS a
      JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run(a.key) AND t.kind = 'activity'
      WHERE a.key IN ('unpolled', 'ghost', 'draining', 'fairq') ORDER BY a.key$$,
    $$VALUES ('draining'::text, '[]'::jsonb, 'pending'::text), ('fairq', '[]', 'pending'),
             ('ghost', '[]', 'pending'), ('unpolled', '[]', 'pending')$$,
    'no hand-off to a draining or unknown worker, on a queue it does not poll, or on a fair queue');
-- A handed activity's fairness key is answered by its INSERT (the hand-off rules refuse a fair
-- queue, and a handed activity names no key): none, and no marker left behind.
SELECT is((SELECT count(*)::integer FROM harvest.tasks
           WHERE kind = 'activity' AND lease_owner IS NOT NULL AND fairness_key IS NOT NULL), 0,
          'handed activities (one and several a decision) carry no fairness key nor the marker E''\x01''');

-- A run that closes in the same commands hands nothing.
SELECT pg_temp.hand('hand_done', $$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "queue": "hand_q"},
    {"type": "complete_workflow", "result": null}]$$, 1);
SELECT results_eq($$SELECT execution_status, handed FROM hand_answers WHERE key = 'hand_done'$$,
                  $$VALUES ('COMPLETED'::text, '[]'::jsonb)$$,
                  'a workflow that completes in the same commands: handed is []');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('hand_done')$$,
                'and the activity it would have handed is gone with the run');

-- ---------------------------------------------------------------- _apply_decision
-- The decision on its own, as complete_activities applies one with an activity's
-- result: the run's workflow task (if it had one) is already gone.
SELECT pg_temp.start_and_claim('apply');
CREATE FUNCTION pg_temp.apply(p_key text, p_through bigint, p_commands jsonb, p_slots integer DEFAULT 0,
                              p_event_cap bigint DEFAULT 50000)
RETURNS TABLE (last_event_id bigint, execution_status text, handed jsonb) LANGUAGE sql AS $fn$
    SELECT d.last_event_id, d.execution_status, to_jsonb(d.handed)
    FROM harvest._apply_decision(pg_temp.run(p_key), p_through, p_commands, 'hander', p_event_cap, 52428800, p_slots) AS d;
$fn$;
SELECT throws_ok($$SELECT * FROM pg_temp.apply('apply', 0, '[]')$$, 'HR001',
                 'through=0 is outside the history (1..1)', '_apply_decision() with through 0: HR001');
SELECT throws_ok($$SELECT * FROM pg_temp.apply('apply', 2, '[]')$$, 'HR001',
                 'through=2 is outside the history (1..1)', '_apply_decision() with through past the last event: HR001');
SELECT throws_ok($$SELECT * FROM pg_temp.apply('apply', NULL, '[]')$$, 'HR001', NULL,
                 '_apply_decision() with through NULL: HR001');
SELECT throws_ok($$SELECT * FROM pg_temp.apply('apply', 1, '{"type": "complete_workflow"}')$$, 'HR001',
                 'commands must be a JSON array', '_apply_decision() with commands not an array: HR001');
SELECT throws_ok($$SELECT * FROM pg_temp.apply('apply', 1, NULL)$$, 'HR001',
                 'commands must be a JSON array', '_apply_decision() with NULL commands: HR001');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('apply')), 1::bigint,
          '_apply_decision() refusing wrote nothing');
DELETE FROM harvest.tasks WHERE id = pg_temp.task('apply');
SELECT is(harvest._append_event(pg_temp.run('apply'), 'ActivityCompleted', '{"seq": 9, "result": 1, "attempt": 1}'),
          2::bigint, 'setup: the workflow task is gone and a result is appended');
SELECT results_eq(
    $$SELECT last_event_id, execution_status, jsonb_array_length(handed), handed -> 0 ->> 'activity_name'
      FROM pg_temp.apply('apply', 2, '[{"type": "schedule_activity", "seq": 1, "name": "a1", "queue": "hand_q"}]', 1)$$,
    $$VALUES (4::bigint, 'RUNNING'::text, 1, 'a1'::text)$$,
    '_apply_decision(): the last event id, the run''s status and the handed activity');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data, e.decided_by, e.decided_through
      FROM harvest.events AS ev JOIN harvest.executions AS e ON e.id = ev.execution_id
      WHERE ev.execution_id = pg_temp.run('apply') AND ev.event_id > 2 ORDER BY ev.event_id$$,
    $$VALUES (3::bigint, 'WorkflowTaskCompleted'::text, '{"through": 2, "worker_id": "hander"}'::jsonb,
              'hander'::text, 4::bigint),
             (4, 'ActivityScheduled', '{"seq": 1, "name": "a1", "input": null, "queue": "hand_q", "options": {}}',
              'hander', 4)$$,
    '_apply_decision(): the marker through p_through, then the command''s event; decided_by set, decided_through past the decision''s own events');
SELECT results_eq($$SELECT kind, status, lease_owner FROM harvest.tasks WHERE execution_id = pg_temp.run('apply')$$,
                  $$VALUES ('activity'::text, 'running'::text, 'hander'::text)$$,
                  '_apply_decision(): the activity handed, and no workflow task when nothing is past through');
SELECT results_eq($$SELECT last_event_id, execution_status, handed FROM pg_temp.apply('apply', 3, '[]')$$,
                  $$VALUES (5::bigint, 'RUNNING'::text, '[]'::jsonb)$$,
                  '_apply_decision() through an event before the last: accepted');
SELECT results_eq($$SELECT status FROM harvest.tasks WHERE execution_id = pg_temp.run('apply') AND kind = 'workflow'$$,
                  $$VALUES ('pending'::text)$$,
                  '_apply_decision(): events past through wake the run with a pending workflow task');
SELECT results_eq($$SELECT last_event_id, execution_status, handed FROM pg_temp.apply('apply', 5, '[]', 0, 5)$$,
                  $$VALUES (7::bigint, 'FAILED'::text, '[]'::jsonb)$$,
                  '_apply_decision() past the event cap: FAILED');
SELECT results_eq(
    $$SELECT e.failure ->> 'error_type', (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('apply')$$,
    $$VALUES ('HistoryEventCapExceeded'::text, 0::bigint)$$,
    '_apply_decision() past the cap: HistoryEventCapExceeded, no task left');
-- Its answer is one named composite (harvest.applied_decision), not OUT parameters; a caller's
-- clock (p_now) stamps what it writes; the worker's queues come back once it read them (a
-- batch passes them to its next decisions as p_worker_queues), NULL when nothing asked.
SELECT is((SELECT p.prorettype::regtype::text FROM pg_proc AS p
           WHERE p.oid = 'harvest._apply_decision'::regproc), 'harvest.applied_decision',
          '_apply_decision() returns harvest.applied_decision');
SELECT pg_temp.start_and_claim('apply_now');
DELETE FROM harvest.tasks WHERE id = pg_temp.task('apply_now');
CREATE TEMP TABLE apply_now ON COMMIT DROP AS
SELECT d.* FROM harvest._apply_decision(pg_temp.run('apply_now'), 1,
    '[{"type": "schedule_activity", "seq": 1, "name": "a1", "queue": "hand_q"},
      {"type": "schedule_activity", "seq": 2, "name": "a2", "queue": "dq_apply_now"}]', 'hander', 50000, 52428800, 2,
    p_now => '2031-02-03 04:05:06+00') AS d;
SELECT results_eq(
    $$SELECT seq, status, scheduled_at, due_at, started_at FROM harvest.tasks
      WHERE execution_id = pg_temp.run('apply_now') ORDER BY seq$$,
    $$VALUES (1, 'running'::text, '2031-02-03 04:05:06+00'::timestamptz, '2031-02-03 04:05:06+00'::timestamptz,
              '2031-02-03 04:05:06+00'::timestamptz),
             (2, 'pending', '2031-02-03 04:05:06+00', '2031-02-03 04:05:06+00', NULL)$$,
    '_apply_decision(p_now): the handed and the queued activity''s times are the caller''s clock');
SELECT results_eq(
    $$SELECT worker_queues, cardinality(handed), handed[1].activity_name, pg_typeof(handed)::text FROM apply_now$$,
    $$SELECT w.queues, 1, 'a1'::text, 'harvest.worker_activity_task[]'::text FROM harvest.workers AS w WHERE w.id = 'hander'$$,
    '... the worker''s queues as it read them, and the handed activity as a row');
SELECT is((SELECT d.worker_queues FROM harvest._apply_decision(pg_temp.run('apply_now'), 4, '[]', 'hander',
               50000, 52428800, 1) AS d),
          NULL, '... no queues when no activity asked for them');

-- Leading events (complete_activities passes an activity's result this way): they
-- go in before the marker, in the same execution row update, and the decision may
-- be through them.
SELECT pg_temp.start_and_claim('lead');
DELETE FROM harvest.tasks WHERE id = pg_temp.task('lead');
CREATE FUNCTION pg_temp.apply_lead(p_through bigint, p_types text[], p_datas jsonb[])
RETURNS TABLE (last_event_id bigint, execution_status text, handed jsonb) LANGUAGE sql AS $fn$
    SELECT d.last_event_id, d.execution_status, to_jsonb(d.handed)
    FROM harvest._apply_decision(pg_temp.run('lead'), p_through,
        '[{"type": "schedule_activity", "seq": 2, "name": "a2", "queue": "hand_q"}]', 'hander', 50000, 52428800, 0,
        p_types, p_datas) AS d;
$fn$;
SELECT throws_ok($$SELECT * FROM pg_temp.apply_lead(3, ARRAY['ActivityCompleted'], ARRAY['{"seq": 1}'::jsonb])$$,
                 'HR001', 'through=3 is outside the history (1..2)',
                 '_apply_decision() through past its leading events: HR001');
SELECT throws_ok($$SELECT * FROM pg_temp.apply_lead(2, ARRAY['ActivityCompleted'], ARRAY[]::jsonb[])$$,
                 'HR001', 'the leading events need one datum per type',
                 '_apply_decision() with leading types and datas of different lengths: HR001');
SELECT results_eq(
    $$SELECT last_event_id, execution_status, handed FROM pg_temp.apply_lead(
        2, ARRAY['ActivityCompleted'], ARRAY['{"seq": 1, "result": 7, "attempt": 1}'::jsonb])$$,
    $$VALUES (4::bigint, 'RUNNING'::text, '[]'::jsonb)$$,
    '_apply_decision() through its leading event: applied');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data FROM harvest.events AS ev
      WHERE ev.execution_id = pg_temp.run('lead') AND ev.event_id > 1 ORDER BY ev.event_id$$,
    $$VALUES (2::bigint, 'ActivityCompleted'::text, '{"seq": 1, "result": 7, "attempt": 1}'::jsonb),
             (3, 'WorkflowTaskCompleted', '{"through": 2, "worker_id": "hander"}'),
             (4, 'ActivityScheduled', '{"seq": 2, "name": "a2", "input": null, "queue": "hand_q", "options": {}}')$$,
    '_apply_decision(): the leading event, then the marker through it, then the command''s event');
SELECT results_eq(
    $$SELECT e.decided_by, e.decided_through, e.history_bytes = (
          SELECT sum(harvest._event_bytes(ev.event_data)) FROM harvest.events AS ev WHERE ev.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('lead')$$,
    $$VALUES ('hander'::text, 4::bigint, true)$$,
    '_apply_decision() with a leading event: decided_by/through (past the decision''s own events), and history_bytes counts every event');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('lead') AND kind = 'workflow'$$,
                '_apply_decision(): a leading event the decision is through wakes no workflow task');

-- ---------------------------------------------------------------- complete_workflow_tasks
-- The worker's group commit of decisions: each item is applied as
-- complete_workflow_task applies one, or refused on its own (gone, kind, stale,
-- expired: its message, nothing written for it); a bad command fails the whole call.
SET LOCAL harvest.fake_now = '2030-01-01 00:05:00+00';
SELECT harvest.register_worker('batcher', ARRAY['wb_q'], 'host-b', 2);
CREATE TEMP TABLE batch_rows (label text, n bigint, task_id bigint, outcome text, message text,
                              last_event_id bigint, execution_status text, handed jsonb) ON COMMIT DROP;
-- Complete the tasks of p_keys (through 1) in one call as worker 'batcher', keeping
-- the rows in the order they came back (n); p_token_offsets shifts a token.
CREATE FUNCTION pg_temp.batch(p_label text, p_keys text[], p_commands jsonb[], p_slots integer[],
                              p_token_offsets bigint[] DEFAULT '{}')
RETURNS void LANGUAGE sql AS $fn$
    INSERT INTO batch_rows
    SELECT p_label, r.n, r.task_id, r.outcome, r.message, r.last_event_id, r.execution_status, r.handed
    FROM harvest.complete_workflow_tasks(
        'batcher',
        ARRAY(SELECT pg_temp.task(u.k) FROM unnest(p_keys) WITH ORDINALITY AS u (k, i) ORDER BY u.i),
        ARRAY(SELECT pg_temp.token(u.k) + coalesce(p_token_offsets[u.i], 0)
              FROM unnest(p_keys) WITH ORDINALITY AS u (k, i) ORDER BY u.i),
        array_fill(1::bigint, ARRAY[cardinality(p_keys)]),
        p_commands, p_slots)
        WITH ORDINALITY AS r (task_id, outcome, message, last_event_id, execution_status, handed, n);
$fn$;

-- Two runs in one batch, hand-off slots 1 and 0; a third run decides the same as
-- the first through complete_workflow_task.
SELECT pg_temp.start_and_claim('wb_a');
SELECT pg_temp.start_and_claim('wb_b');
SELECT pg_temp.start_and_claim('wb_1');
SELECT pg_temp.batch('pair', ARRAY['wb_a', 'wb_b'],
    ARRAY['[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "input": [1], "queue": "wb_q",
             "options": {"start_to_close": 20}}]',
          '[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "input": [2], "queue": "wb_q",
             "options": {"start_to_close": 20}}]']::jsonb[],
    ARRAY[1, 0]);
CREATE TEMP TABLE wb_single ON COMMIT DROP AS
SELECT * FROM harvest.complete_workflow_task(pg_temp.task('wb_1'), pg_temp.token('wb_1'), 1,
    '[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "input": [1], "queue": "wb_q",
       "options": {"start_to_close": 20}}]', 'batcher', p_hand_off_slots => 1);
SELECT results_eq(
    $$SELECT task_id, outcome, message, last_event_id, execution_status, jsonb_array_length(handed)
      FROM batch_rows WHERE label = 'pair' ORDER BY task_id$$,
    $$SELECT * FROM (VALUES (pg_temp.task('wb_a'), 'completed'::text, NULL::text, 3::bigint, 'RUNNING'::text, 1),
                            (pg_temp.task('wb_b'), 'completed', NULL, 3, 'RUNNING', 0)) AS v ORDER BY 1$$,
    'complete_workflow_tasks() of two runs: a row each, completed, with the last event id and RUNNING');
SELECT results_eq(
    $$SELECT c.key, ev.event_id, ev.event_type, ev.event_data
      FROM harvest.events AS ev JOIN keyed AS c ON c.execution_id = ev.execution_id
      WHERE c.key IN ('wb_a', 'wb_b') AND ev.event_id > 1 ORDER BY c.key, ev.event_id$$,
    $$VALUES ('wb_a'::text, 2::bigint, 'WorkflowTaskCompleted'::text, '{"through": 1, "worker_id": "batcher"}'::jsonb),
             ('wb_a', 3, 'ActivityScheduled', '{"seq": 1, "name": "wb_act", "input": [1], "queue": "wb_q",
                                               "options": {"start_to_close": 20}}'),
             ('wb_b', 2, 'WorkflowTaskCompleted', '{"through": 1, "worker_id": "batcher"}'),
             ('wb_b', 3, 'ActivityScheduled', '{"seq": 1, "name": "wb_act", "input": [2], "queue": "wb_q",
                                               "options": {"start_to_close": 20}}')$$,
    'complete_workflow_tasks(): each run gets WorkflowTaskCompleted{through, worker_id}, then its own ActivityScheduled');
SELECT results_eq(
    $$SELECT (h ->> 'task_id')::bigint, (h ->> 'execution_id')::uuid, h ->> 'activity_name', h -> 'input',
             (h ->> 'attempt')::integer, (h ->> 'fencing_token')::bigint, (SELECT r.lease_expires_at FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint)
      FROM batch_rows AS r, jsonb_array_elements(r.handed) AS h
      WHERE r.label = 'pair' AND r.task_id = pg_temp.task('wb_a')$$,
    $$SELECT t.id, t.execution_id, t.activity_name, t.input, t.attempt, t.fencing_token, t.lease_expires_at
      FROM harvest.tasks AS t
      WHERE t.execution_id = pg_temp.run('wb_a') AND t.status = 'running' AND t.lease_owner = 'batcher'
        AND t.lease_expires_at = '2030-01-01 00:05:20+00'$$,
    'complete_workflow_tasks(): slots 1: handed holds the activity, leased to the batch''s worker');
SELECT results_eq(
    $$SELECT r.handed, t.kind, t.status, t.fencing_token, t.lease_owner
      FROM batch_rows AS r JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('wb_b')
      WHERE r.label = 'pair' AND r.task_id = pg_temp.task('wb_b')$$,
    $$VALUES ('[]'::jsonb, 'activity'::text, 'pending'::text, 0::bigint, NULL::text)$$,
    'complete_workflow_tasks(): slots 0: handed is [], the activity task is pending');
SELECT is_empty(
    $$SELECT 1 FROM harvest.tasks
      WHERE id IN (pg_temp.task('wb_a'), pg_temp.task('wb_b'))
         OR (execution_id IN (pg_temp.run('wb_a'), pg_temp.run('wb_b')) AND kind = 'workflow')$$,
    'complete_workflow_tasks(): the workflow tasks are deleted, and no new one is made');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data, ev.created_at FROM harvest.events AS ev
      WHERE ev.execution_id = pg_temp.run('wb_a') AND ev.event_id > 1 ORDER BY ev.event_id$$,
    $$SELECT ev.event_id, ev.event_type, ev.event_data, ev.created_at FROM harvest.events AS ev
      WHERE ev.execution_id = pg_temp.run('wb_1') AND ev.event_id > 1 ORDER BY ev.event_id$$,
    'complete_workflow_tasks() writes the history complete_workflow_task writes for the same decision');
SELECT results_eq(
    $$SELECT e.last_event_id, e.status, e.decided_by, e.decided_through, e.history_bytes
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('wb_a')$$,
    $$SELECT e.last_event_id, e.status, e.decided_by, e.decided_through, e.history_bytes
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('wb_1')$$,
    'complete_workflow_tasks() leaves the run as complete_workflow_task does (decided_by/through, history_bytes)');
SELECT results_eq(
    $$SELECT r.last_event_id, r.execution_status,
             (r.handed -> 0) - ARRAY['task_id', 'execution_id', 'workflow_id', 'fencing_token'],
             t.kind, t.queue, t.priority, t.status, t.attempt, t.seq, t.activity_name, t.input, t.options,
             t.due_at, t.scheduled_at, t.deadline_at, t.started_at, t.lease_owner, t.lease_expires_at
      FROM batch_rows AS r JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('wb_a')
      WHERE r.label = 'pair' AND r.task_id = pg_temp.task('wb_a')$$,
    $$SELECT s.last_event_id, s.execution_status,
             (s.handed -> 0) - ARRAY['task_id', 'execution_id', 'workflow_id', 'fencing_token'],
             t.kind, t.queue, t.priority, t.status, t.attempt, t.seq, t.activity_name, t.input, t.options,
             t.due_at, t.scheduled_at, t.deadline_at, t.started_at, t.lease_owner, t.lease_expires_at
      FROM wb_single AS s JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('wb_1')$$,
    'complete_workflow_tasks(): the answer, the handed task and its row as complete_workflow_task''s (modulo ids)');

-- Refused items: a stale token and an expired lease; the batch's other item is applied.
SELECT pg_temp.start_and_claim('wb_e');  -- its lease ends at 00:05:30
SET LOCAL harvest.fake_now = '2030-01-01 00:06:00+00';
SELECT pg_temp.start_and_claim('wb_s');
SELECT pg_temp.start_and_claim('wb_f');
SELECT pg_temp.batch('refuse', ARRAY['wb_s', 'wb_e', 'wb_f'],
    ARRAY['[{"type": "start_timer", "seq": 1, "duration": 60}]', '[{"type": "start_timer", "seq": 1, "duration": 60}]',
          '[{"type": "start_timer", "seq": 1, "duration": 60}]']::jsonb[],
    ARRAY[0, 0, 0], ARRAY[-1, 0, 0]);
SELECT results_eq(
    $$SELECT task_id, outcome, message, last_event_id, execution_status, handed
      FROM batch_rows WHERE label = 'refuse' ORDER BY task_id$$,
    $$SELECT * FROM (VALUES
        (pg_temp.task('wb_s'), 'stale'::text,
         format('task %s was claimed again (fencing token %s is stale)', pg_temp.task('wb_s'), pg_temp.token('wb_s') - 1),
         NULL::bigint, NULL::text, NULL::jsonb),
        (pg_temp.task('wb_e'), 'expired',
         format('task %s: the lease expired at 2030-01-01T00:05:30+00:00, so this result is refused', pg_temp.task('wb_e')),
         NULL, NULL, NULL),
        (pg_temp.task('wb_f'), 'completed', NULL, 3, 'RUNNING', '[]')) AS v ORDER BY 1$$,
    'complete_workflow_tasks(): a stale token and an expired lease are refused on their own, with messages naming the task');
SELECT results_eq(
    $$SELECT c.key, e.last_event_id, e.decided_by, t.kind, t.status, t.fencing_token = c.token, t.lease_owner
      FROM keyed AS c JOIN harvest.executions AS e ON e.id = c.execution_id
      JOIN harvest.tasks AS t ON t.execution_id = c.execution_id
      WHERE c.key IN ('wb_e', 'wb_s') ORDER BY c.key$$,
    $$VALUES ('wb_e'::text, 1::bigint, NULL::text, 'workflow'::text, 'running'::text, true, 'worker-1'::text),
             ('wb_s', 1, NULL, 'workflow', 'running', true, 'worker-1')$$,
    'complete_workflow_tasks(): a refused item writes nothing: no event, no timer, its workflow task as it was');
SELECT results_eq(
    $$SELECT ev.event_type, ev.event_data, t.kind, t.due_at
      FROM harvest.events AS ev JOIN harvest.tasks AS t ON t.execution_id = ev.execution_id
      WHERE ev.execution_id = pg_temp.run('wb_f') AND ev.event_id > 1 ORDER BY ev.event_id$$,
    $$VALUES ('WorkflowTaskCompleted'::text, '{"through": 1, "worker_id": "batcher"}'::jsonb,
              'timer'::text, '2030-01-01 00:07:00+00'::timestamptz),
             ('TimerStarted', '{"seq": 1, "fire_at": "2030-01-01T00:07:00+00:00"}', 'timer', '2030-01-01 00:07:00+00')$$,
    'complete_workflow_tasks(): the batch''s good item is applied beside the refused ones');

-- An activity task's id: kind. A decision that completes the run: COMPLETED, handed [].
INSERT INTO keyed
SELECT 'wb_act', t.execution_id, t.id, t.fencing_token FROM harvest.tasks AS t
WHERE t.execution_id = pg_temp.run('wb_b') AND t.kind = 'activity';
SELECT pg_temp.start_and_claim('wb_c');
SELECT pg_temp.batch('end', ARRAY['wb_act', 'wb_c'],
    ARRAY['[]', '[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "queue": "wb_q"},
                  {"type": "complete_workflow", "result": {"ok": true}}]']::jsonb[],
    ARRAY[0, 1]);
SELECT results_eq(
    $$SELECT task_id, outcome, message, last_event_id, execution_status, handed
      FROM batch_rows WHERE label = 'end' ORDER BY task_id$$,
    $$SELECT * FROM (VALUES
        (pg_temp.task('wb_act'), 'kind'::text,
         format('task %s is a activity task, not a workflow task', pg_temp.task('wb_act')),
         NULL::bigint, NULL::text, NULL::jsonb),
        (pg_temp.task('wb_c'), 'completed', NULL, 4, 'COMPLETED', '[]')) AS v ORDER BY 1$$,
    'complete_workflow_tasks(): an activity task''s id: kind; complete_workflow: COMPLETED, handed [] despite slots 1');
SELECT results_eq(
    $$SELECT t.kind, t.status, t.fencing_token, e.last_event_id
      FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
      WHERE t.id = pg_temp.task('wb_act')$$,
    $$VALUES ('activity'::text, 'pending'::text, 0::bigint, 3::bigint)$$,
    'complete_workflow_tasks(): the activity task of a kind item is left as it was');
SELECT results_eq(
    $$SELECT e.status, e.output, ev.event_type, (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = e.last_event_id
      WHERE e.id = pg_temp.run('wb_c')$$,
    $$VALUES ('COMPLETED'::text, '{"ok": true}'::jsonb, 'WorkflowCompleted'::text, 0::bigint)$$,
    'complete_workflow_tasks(): the run is COMPLETED with its result, no task left (not the one it would have handed)');

-- A bad command in one item fails the whole call. The good item's run sorts first,
-- so it is applied before the bad one raises (the input lists the bad one first).
SELECT pg_temp.start_and_claim('wb_x1');
SELECT pg_temp.start_and_claim('wb_x2');
CREATE TEMP TABLE wb_x ON COMMIT DROP AS
SELECT key, row_number() OVER (ORDER BY execution_id) AS pos FROM keyed WHERE key IN ('wb_x1', 'wb_x2');
CREATE FUNCTION pg_temp.x(p_pos integer) RETURNS text LANGUAGE sql AS $fn$
    SELECT key FROM wb_x WHERE pos = p_pos;
$fn$;
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::bigint[],
               '{1, 1}', ARRAY['[{"type": "launch_rocket"}]',
                               '[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "queue": "wb_q"}]']::jsonb[],
               '{1, 1}')$$,
           pg_temp.task(pg_temp.x(2)), pg_temp.task(pg_temp.x(1)), pg_temp.token(pg_temp.x(2)), pg_temp.token(pg_temp.x(1))),
    'HR001', 'unknown command type "launch_rocket"',
    'complete_workflow_tasks(): an unknown command in one item fails the whole call: HR001');
SELECT results_eq(
    $$SELECT c.key, e.last_event_id, e.decided_by, t.kind, t.status, t.fencing_token = c.token
      FROM keyed AS c JOIN harvest.executions AS e ON e.id = c.execution_id
      JOIN harvest.tasks AS t ON t.execution_id = c.execution_id
      WHERE c.key IN ('wb_x1', 'wb_x2') ORDER BY c.key$$,
    $$VALUES ('wb_x1'::text, 1::bigint, NULL::text, 'workflow'::text, 'running'::text, true),
             ('wb_x2', 1, NULL, 'workflow', 'running', true)$$,
    'complete_workflow_tasks(): nothing of the failed call is written, not even the item applied before the bad one');
SELECT results_eq(
    format($$SELECT outcome, last_event_id, jsonb_array_length(handed) FROM harvest.complete_workflow_tasks('batcher',
               ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], '{1}',
               ARRAY['[{"type": "schedule_activity", "seq": 1, "name": "wb_act", "queue": "wb_q"}]']::jsonb[], '{1}')$$,
           pg_temp.task(pg_temp.x(1)), pg_temp.token(pg_temp.x(1))),
    $$VALUES ('completed'::text, 3::bigint, 1)$$,
    'complete_workflow_tasks(): the good item sent again on its own completes');

-- Argument checks.
SELECT pg_temp.start_and_claim('wb_y');
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
               '{}', ARRAY['[]']::jsonb[], '{0}')$$, pg_temp.task('wb_y'), pg_temp.token('wb_y')),
    'HR001', 'task ids, fencing tokens, throughs, commands and hand-off slots must be arrays of one length and one first subscript',
    'complete_workflow_tasks() with p_throughs shorter: HR001');
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
               '{1}', ARRAY['[]']::jsonb[], '{0, 0}')$$, pg_temp.task('wb_y'), pg_temp.token('wb_y')),
    'HR001', 'task ids, fencing tokens, throughs, commands and hand-off slots must be arrays of one length and one first subscript',
    'complete_workflow_tasks() with p_hand_off_slots longer: HR001');
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s]::bigint[], '[0:0]={%s}'::bigint[],
               '{1}', ARRAY['[]']::jsonb[], '{0}')$$, pg_temp.task('wb_y'), pg_temp.token('wb_y')),
    'HR001', 'task ids, fencing tokens, throughs, commands and hand-off slots must be arrays of one length and one first subscript',
    'complete_workflow_tasks() with p_fencing_tokens from another first subscript: HR001 (items are read by subscript)');
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],
               '{1}', ARRAY['[]']::jsonb[], '{0}', 50000, 52428800, '[2:2]={1}'::bigint[])$$,
           pg_temp.task('wb_y'), pg_temp.token('wb_y')),
    'HR001', 'task ids, fencing tokens, throughs, commands and hand-off slots must be arrays of one length and one first subscript',
    'complete_workflow_tasks() with p_owner_epochs from another first subscript: HR001');
SELECT throws_ok(
    $$SELECT * FROM harvest.complete_workflow_tasks('batcher', NULL, NULL, NULL, NULL, NULL)$$,
    'HR001', 'task ids, fencing tokens, throughs, commands and hand-off slots must be arrays of one length and one first subscript',
    'complete_workflow_tasks() with NULL task ids: HR001');
SELECT throws_ok(
    format($$SELECT * FROM harvest.complete_workflow_tasks('batcher', ARRAY[%s]::bigint[], NULL, '{1}',
               ARRAY['[]']::jsonb[], '{0}')$$, pg_temp.task('wb_y')),
    'HR001', NULL, 'complete_workflow_tasks() with NULL fencing tokens: HR001');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('wb_y')), 1::bigint,
          'complete_workflow_tasks(): the refused calls wrote nothing');
SELECT is_empty($$SELECT * FROM harvest.complete_workflow_tasks('batcher', '{}', '{}', '{}', '{}', '{}')$$,
                'complete_workflow_tasks() of empty arrays: no rows');
SELECT is(
    (SELECT outcome FROM harvest.complete_workflow_tasks('batcher', format('[3:3]={%s}', pg_temp.task('wb_y'))::bigint[],
         format('[3:3]={%s}', pg_temp.token('wb_y'))::bigint[], '[3:3]={1}'::bigint[],
         '[3:3]={"[]"}'::jsonb[], '[3:3]={0}'::integer[])),
    'completed',
    'complete_workflow_tasks() with every array from subscript 3: the item completes');

-- One row per item, matched by task id: the items are applied (and the rows come
-- back) in execution-id order, not in the order sent. Sent here in descending
-- execution-id order, an unknown task first and one task twice; run wb_oN's
-- decision starts N timers, so each row's last_event_id tells whose it is.
SET LOCAL harvest.fake_now = '2030-01-01 00:07:00+00';
SELECT pg_temp.start_and_claim('wb_o1');
SELECT pg_temp.start_and_claim('wb_o2');
SELECT pg_temp.start_and_claim('wb_o3');
INSERT INTO keyed VALUES ('wb_gone', NULL, -1, 1);
CREATE TEMP TABLE wb_sent ON COMMIT DROP AS
SELECT row_number() OVER (ORDER BY c.execution_id DESC NULLS FIRST, u.i) AS i, c.key
FROM unnest(ARRAY['wb_o1', 'wb_o1', 'wb_o2', 'wb_o3', 'wb_gone']) WITH ORDINALITY AS u (key, i)
JOIN keyed AS c ON c.key = u.key;
SELECT pg_temp.batch('order',
    ARRAY(SELECT key FROM wb_sent ORDER BY i),
    ARRAY(SELECT coalesce((SELECT jsonb_agg(jsonb_build_object('type', 'start_timer', 'seq', s, 'duration', 60))
                           FROM generate_series(1, CASE key WHEN 'wb_gone' THEN 0 ELSE right(key, 1)::integer END) AS s),
                          '[]')
          FROM wb_sent ORDER BY i),
    array_fill(0, ARRAY[5]));
SELECT results_eq(
    $$SELECT task_id, outcome, last_event_id, execution_status FROM batch_rows WHERE label = 'order'
      ORDER BY task_id, outcome$$,
    $$SELECT * FROM (VALUES (-1::bigint, 'gone'::text, NULL::bigint, NULL::text),
                            (pg_temp.task('wb_o1'), 'completed', 3, 'RUNNING'),
                            (pg_temp.task('wb_o1'), 'gone', NULL, NULL),
                            (pg_temp.task('wb_o2'), 'completed', 4, 'RUNNING'),
                            (pg_temp.task('wb_o3'), 'completed', 5, 'RUNNING')) AS v ORDER BY 1, 2$$,
    'complete_workflow_tasks(): one row per item, each with its own item''s answer (a task sent twice: completed, then gone)');
SELECT results_eq(
    $$SELECT c.key, e.last_event_id FROM keyed AS c JOIN harvest.executions AS e ON e.id = c.execution_id
      WHERE c.key LIKE 'wb_o_' ORDER BY c.key$$,
    $$VALUES ('wb_o1'::text, 3::bigint), ('wb_o2', 4), ('wb_o3', 5)$$,
    'complete_workflow_tasks(): each decision went to its own run');
SELECT is(ARRAY(SELECT task_id FROM batch_rows WHERE label = 'order' ORDER BY n),
          ARRAY(SELECT c.task_id FROM wb_sent AS s JOIN keyed AS c ON c.key = s.key
                ORDER BY c.execution_id NULLS LAST, s.i),
          'complete_workflow_tasks(): the rows come back in execution-id order (an unknown task last)');
SELECT isnt(ARRAY(SELECT task_id FROM batch_rows WHERE label = 'order' ORDER BY n),
            ARRAY(SELECT c.task_id FROM wb_sent AS s JOIN keyed AS c ON c.key = s.key ORDER BY s.i),
            'complete_workflow_tasks(): which is not the order the items were sent in: match rows by task_id');

-- Payload size: a decision whose command carries a payload over the limit is refused (HR008);
-- a child's input over the limit is the parent's typed START_FAILED, like a quota's refusal.
SELECT pg_temp.start_and_claim('big');
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'complete_workflow', 'result', repeat('x', 100))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the result of workflow decide_wf is 102 bytes, over the payload limit of 64 bytes',
                 'complete_workflow with a result over the limit: HR008');
-- (_apply_decision checks the usual result itself and calls _decide_complete_workflow only to
-- raise: a result of exactly the limit completes, and the event and the close are the ones
-- _decide_complete_workflow describes.)
SELECT is(pg_temp.dry_run(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'complete_workflow', 'result', repeat('x', 62))))$$,
                        pg_temp.task('big'), pg_temp.token('big'))),
          'ok', 'complete_workflow with a result of exactly the limit (64 bytes): completed');
SELECT pg_temp.start_and_claim('cw_alike');
SELECT harvest.complete_workflow_task(pg_temp.task('cw_alike'), pg_temp.token('cw_alike'), 1,
                                      '[{"type": "complete_workflow", "result": {"r": [1, "two"]}}]');
SELECT results_eq(
    $$SELECT ev.event_type, ev.event_data, e.status, e.output, e.failure
      FROM harvest.events AS ev JOIN harvest.executions AS e ON e.id = ev.execution_id
      WHERE ev.execution_id = pg_temp.run('cw_alike') AND ev.event_id = 3$$,
    $$SELECT d.event_type, d.event_data, d.close_status, d.close_output, d.close_failure
      FROM harvest._decide_complete_workflow((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('cw_alike')),
                                             '{"type": "complete_workflow", "result": {"r": [1, "two"]}}', 64) AS d$$,
    'complete_workflow: the event and the close _decide_complete_workflow describes');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'fail_workflow', 'failure',
                                                 jsonb_build_object('message', repeat('x', 100)))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the failure of workflow decide_wf is 115 bytes, over the payload limit of 64 bytes',
                 'fail_workflow with a failure over the limit: HR008');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'schedule_activity', 'seq', 1, 'name', 'a',
                                                 'input', jsonb_build_array(repeat('x', 100)))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the input of activity a (command 1) is 104 bytes, over the payload limit of 64 bytes',
                 'schedule_activity with an input over the limit: HR008');
-- A decision checks the options of its activities once while they are equal (_apply_decision),
-- and the name and the input of every one: the third's input, over the limit with the options
-- the first two passed, is refused all the same.
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'schedule_activity', 'seq', 1, 'name', 'a',
                                                 'options', '{"start_to_close": 30}'::jsonb),
                              jsonb_build_object('type', 'schedule_activity', 'seq', 2, 'name', 'a',
                                                 'options', '{"start_to_close": 30}'::jsonb),
                              jsonb_build_object('type', 'schedule_activity', 'seq', 3, 'name', 'a',
                                                 'input', jsonb_build_array(repeat('x', 100)),
                                                 'options', '{"start_to_close": 30}'::jsonb)))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the input of activity a (command 3) is 104 bytes, over the payload limit of 64 bytes',
                 'schedule_activity: an input over the limit after activities of the same options: HR008');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'record_marker', 'seq', 1, 'kind', 'side_effect',
                                                 'value', repeat('x', 100))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the value of marker side_effect (command 1) is 102 bytes, over the payload limit of 64 bytes',
                 'record_marker with a value over the limit: HR008');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'continue_as_new', 'input', jsonb_build_array(repeat('x', 100)))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                 'HR008', 'the continue-as-new input of workflow decide_wf is 104 bytes, over the payload limit of 64 bytes',
                 'continue_as_new with an input over the limit: HR008');
-- harvest._decide_signal_external_workflow and harvest._decide_cancel_external_workflow check
-- their commands (their delivery is tested in pgtap/relays.sql): the payload limit, as a
-- client's signal has it, and the target.
CREATE FUNCTION pg_temp.external(p_command jsonb) RETURNS text LANGUAGE sql AS $fn$
    SELECT format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(%L::jsonb))$$,
                  pg_temp.task('big'), pg_temp.token('big'), p_command);
$fn$;
SELECT throws_ok(pg_temp.external(jsonb_build_object('type', 'signal_external_workflow', 'seq', 1,
                     'workflow_id', 'w', 'signal_name', 'go', 'payload', repeat('x', 100))),
                 'HR008', 'the payload of signal go is 102 bytes, over the payload limit of 64 bytes',
                 'signal_external_workflow with a payload over the limit: HR008, as a client''s signal');
SELECT throws_ok(pg_temp.external(jsonb_build_object('type', 'cancel_external_workflow', 'seq', 1,
                     'workflow_id', 'w', 'reason', repeat('x', 100))),
                 'HR008', 'the reason of an external cancel is 102 bytes, over the payload limit of 64 bytes',
                 'cancel_external_workflow with a reason over the limit: HR008');
SELECT throws_ok(pg_temp.external('{"type": "signal_external_workflow", "seq": 1, "signal_name": "go"}'),
                 'HR001', 'command signal_external_workflow needs its target as exactly one of "execution_id" and '
                          '"workflow_id"', 'an external signal with no target: HR001');
SELECT throws_ok(pg_temp.external('{"type": "cancel_external_workflow", "seq": 1, "workflow_id": "w",
                                    "execution_id": "00000000-0000-4000-8000-000000000001"}'),
                 'HR001', 'command cancel_external_workflow needs its target as exactly one of "execution_id" and '
                          '"workflow_id"', 'an external cancel with two targets: HR001');
SELECT throws_ok(pg_temp.external('{"type": "signal_external_workflow", "seq": 1, "signal_name": "go",
                                    "execution_id": "nope"}'),
                 'HR001', 'command signal_external_workflow needs "execution_id" as a UUID, got nope',
                 'an execution id that is not a UUID: HR001');
SELECT throws_ok(pg_temp.external('{"type": "signal_external_workflow", "seq": 1, "signal_name": "go",
                                    "execution_id": "00000000-0000-4000-8000-000000000001", "workflow_name": "n"}'),
                 'HR001', 'command signal_external_workflow names "workflow_name" with an "execution_id": a name '
                          'goes with a workflow_id', 'a workflow name beside an execution id: HR001');
SELECT throws_ok(pg_temp.external('{"type": "signal_external_workflow", "seq": 1, "workflow_id": "w"}'),
                 'HR001', 'command signal_external_workflow needs "signal_name" as a JSON string, got nothing',
                 'an external signal without a name: HR001');
SELECT throws_ok(pg_temp.external('{"type": "signal_external_workflow", "seq": 1, "workflow_id": "w",
                                    "signal_name": " "}'),
                 'HR001', 'command signal_external_workflow has an empty signal_name', 'an empty signal name: HR001');
SELECT throws_ok(pg_temp.external('{"type": "cancel_external_workflow", "seq": 1, "workflow_id": "w", "reason": 3}'),
                 'HR001', 'command cancel_external_workflow needs "reason" as a JSON string or null, got number',
                 'a cancel reason that is not a string: HR001');
SELECT lives_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                              jsonb_build_object('type', 'start_child_workflow', 'seq', 1, 'workflow_name', 'kid',
                                                 'input', jsonb_build_array(repeat('x', 100)))))$$,
                        pg_temp.task('big'), pg_temp.token('big')),
                'start_child_workflow with an input over the limit: the decision commits');
SELECT results_eq(format($$SELECT event_data ->> 'status', event_data #>> '{failure,error_type}',
                                  event_data #>> '{failure,message}', event_data #>> '{failure,details,bytes}'
                           FROM harvest.events WHERE execution_id = %L AND event_type = 'ChildWorkflowFailed'$$,
                         pg_temp.run('big')),
                  $$VALUES ('START_FAILED', 'PayloadTooLarge',
                            'the input of workflow kid is 104 bytes, over the payload limit of 64 bytes', '104')$$,
                  '... and the parent hears ChildWorkflowFailed{START_FAILED, PayloadTooLarge}; no child run');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;

-- ---------------------------------------------------------------- the commands, one function each
-- _apply_decision is a dispatcher: each command goes to its harvest._decide_<type>,
-- which returns the event to append (or appends its own) and how the run ends.
-- Called directly here on a running run.
SET LOCAL harvest.fake_now = '2030-01-05 00:00:00+00';
SELECT pg_temp.start_and_claim('cmd_fn');
CREATE FUNCTION pg_temp.exec(p_key text) RETURNS harvest.executions LANGUAGE sql AS $fn$
    SELECT * FROM harvest.executions WHERE id = pg_temp.run(p_key);
$fn$;
SELECT harvest.register_worker('fn-worker', ARRAY['fn_hand'], 'host-f', 1);
-- The handed tasks' rows (harvest.worker_activity_task) as the JSON a call's answer makes
-- of them, element by element.
CREATE FUNCTION pg_temp.tasks_json(p harvest.worker_activity_task[]) RETURNS jsonb[] LANGUAGE sql AS $fn$
    SELECT array_agg(to_jsonb(p[i]) ORDER BY i) FROM generate_subscripts(p, 1) AS i;
$fn$;
-- _hand_activities: a decision's handed activities, one INSERT, leased to the worker and
-- returned as the worker receives them (rows of harvest.worker_activity_task: the call's
-- answer makes them JSON once), in command order.
SELECT is(pg_typeof(harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[]::integer[], ARRAY[]::jsonb[],
                                             'fn-worker', harvest.now()))::text,
          'harvest.worker_activity_task[]', '_hand_activities() returns rows of harvest.worker_activity_task');
CREATE TEMP TABLE fn_handed ON COMMIT DROP AS
SELECT pg_temp.tasks_json(harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[2, 1],
           ARRAY['{"type": "schedule_activity", "seq": 2, "name": "h2", "input": [2], "queue": "fn_hand",
                   "options": {"priority": 2, "start_to_close": 20, "schedule_to_close": 60}}'::jsonb,
                 '{"type": "schedule_activity", "seq": 1, "name": "h1"}'::jsonb],
           'fn-worker', harvest.now())) AS handed;
SELECT results_eq(
    $$SELECT h ->> 'activity_name', h ->> 'kind', (h ->> 'seq')::integer, h ->> 'queue', (h ->> 'attempt')::integer,
             (SELECT r.lease_expires_at FROM harvest.tasks AS r WHERE r.id = (h ->> 'task_id')::bigint)
      FROM fn_handed, unnest(handed) WITH ORDINALITY AS x (h, n) ORDER BY n$$,
    $$VALUES ('h2'::text, 'activity'::text, 2, 'fn_hand'::text, 1, '2030-01-05 00:00:20+00'::timestamptz),
             ('h1', 'activity', 1, 'dq_cmd_fn', 1, '2030-01-05 00:05:00+00')$$,
    '_hand_activities() returns the handed tasks in command order: the command''s queue or the run''s, its lease');
SELECT results_eq(
    $$SELECT seq, status, attempt, lease_owner, priority, started_at, deadline_at, input, fencing_token > 0
      FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND kind = 'activity' ORDER BY id$$,
    $$VALUES (2, 'running'::text, 1, 'fn-worker'::text, 2, '2030-01-05 00:00:00+00'::timestamptz,
              '2030-01-05 00:01:00+00'::timestamptz, '[2]'::jsonb, true),
             (1, 'running', 1, 'fn-worker', 0, '2030-01-05 00:00:00+00', NULL, '[]', true)$$,
    '... their rows are running, leased to the worker (attempt 1, a fencing token), ids in command order');
SELECT is((SELECT handed FROM fn_handed),
          (SELECT array_agg(harvest._task_for_worker(t, pg_temp.exec('cmd_fn'), 'fn-worker') ORDER BY t.id)
           FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('cmd_fn') AND t.kind = 'activity'),
          '... each as _task_for_worker describes the stored row');
SELECT isnt((SELECT (handed[1] ->> 'fencing_token')::bigint FROM fn_handed),
            (SELECT (handed[2] ->> 'fencing_token')::bigint FROM fn_handed),
            '... each with its own fencing token');
-- A run of one is inserted by a single-row INSERT ... VALUES (a decision of the canonical
-- drain hands one activity; the INSERT ... SELECT cost it more: docs/performance.md,
-- "Hand-off batching, again"): the same row and the same description as the statement of many.
CREATE TEMP TABLE fn_handed_one ON COMMIT DROP AS
SELECT 3 AS like_seq, pg_temp.tasks_json(harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[3],
           ARRAY['{"type": "schedule_activity", "seq": 3, "name": "h2", "input": [2], "queue": "fn_hand",
                   "options": {"priority": 2, "start_to_close": 20, "schedule_to_close": 60}}'::jsonb],
           'fn-worker', harvest.now())) AS handed
UNION ALL
SELECT 4, pg_temp.tasks_json(harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[4],
           ARRAY['{"type": "schedule_activity", "seq": 4, "name": "h1"}'::jsonb], 'fn-worker', harvest.now()));
SELECT results_eq(
    $$SELECT o.like_seq, cardinality(o.handed), o.handed[1] - 'task_id' - 'fencing_token' - 'seq'
      FROM fn_handed_one AS o ORDER BY o.like_seq$$,
    $$SELECT s.like_seq, 1, f.handed[s.n] - 'task_id' - 'fencing_token' - 'seq'
      FROM fn_handed AS f, (VALUES (3, 1), (4, 2)) AS s (like_seq, n) ORDER BY s.like_seq$$,
    '_hand_activities() of one activity (one row, VALUES) describes it as the statement of many does');
SELECT results_eq(
    $$SELECT to_jsonb(t) - 'id' - 'fencing_token' - 'seq', t.fencing_token > 0
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('cmd_fn') AND t.seq IN (3, 4) ORDER BY t.seq$$,
    $$SELECT to_jsonb(t) - 'id' - 'fencing_token' - 'seq', true
      FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('cmd_fn') AND t.seq IN (2, 1) ORDER BY t.seq DESC$$,
    '... and its row is the one the statement of many inserts (status, lease, deadline, options, queue)');
DELETE FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND kind = 'activity';
SELECT is(harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[]::integer[], ARRAY[]::jsonb[], 'fn-worker',
                                   harvest.now()),
          NULL::harvest.worker_activity_task[], '_hand_activities() of no activities inserts nothing: NULL');
SELECT throws_ok($$SELECT harvest._hand_activities(pg_temp.exec('cmd_fn'), ARRAY[1, 1],
                       ARRAY['{"name": "a"}'::jsonb, '{"name": "b"}'::jsonb], 'fn-worker', harvest.now())$$,
                 '23505', NULL, '_hand_activities() keeps a run''s seqs unique (tasks_execution_seq)');
-- _hand_activities_of_runs: activities of several runs in one INSERT (a result batch's
-- decisions' handed ones), in the arrays' order, each described with its own run's row.
SELECT pg_temp.start_and_claim('cmd_fn2');
CREATE TEMP TABLE fn_of_runs ON COMMIT DROP AS
SELECT pg_temp.tasks_json(harvest._hand_activities_of_runs(ARRAY[pg_temp.exec('cmd_fn2'), pg_temp.exec('cmd_fn')],
           ARRAY[pg_temp.run('cmd_fn2'), pg_temp.run('cmd_fn')], ARRAY[1, 2, 1], ARRAY[21, 22, 23],
           ARRAY['{"name": "r1"}', '{"name": "r2", "queue": "fn_hand"}', '{"name": "r3"}']::jsonb[],
           'fn-worker', harvest.now())) AS handed;
SELECT results_eq(
    $$SELECT t.execution_id, t.seq, t.activity_name, t.queue, t.status, t.lease_owner
      FROM harvest.tasks AS t WHERE t.seq IN (21, 22, 23) AND t.kind = 'activity' ORDER BY t.id$$,
    $$VALUES (pg_temp.run('cmd_fn2'), 21, 'r1'::text, (pg_temp.exec('cmd_fn2')).queue, 'running'::text, 'fn-worker'::text),
             (pg_temp.run('cmd_fn'), 22, 'r2', 'fn_hand', 'running', 'fn-worker'),
             (pg_temp.run('cmd_fn2'), 23, 'r3', (pg_temp.exec('cmd_fn2')).queue, 'running', 'fn-worker')$$,
    '_hand_activities_of_runs(): the rows in the arrays'' order, each on its run (its queue by default), leased');
SELECT is((SELECT handed FROM fn_of_runs),
          (SELECT array_agg(harvest._task_for_worker(t, e, 'fn-worker') ORDER BY t.id)
           FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
           WHERE t.seq IN (21, 22, 23) AND t.kind = 'activity'),
          '... each returned as _task_for_worker describes its row with its own run');
SELECT harvest._hand_activities(pg_temp.exec('cmd_fn2'), ARRAY[31, 32],
                                ARRAY['{"name": "r1"}', '{"name": "r3"}']::jsonb[], 'fn-worker', harvest.now());
SELECT results_eq(
    $$SELECT to_jsonb(t) - 'id' - 'fencing_token' - 'seq' FROM harvest.tasks AS t
      WHERE t.seq IN (21, 23) AND t.kind = 'activity' ORDER BY t.id$$,
    $$SELECT to_jsonb(t) - 'id' - 'fencing_token' - 'seq' FROM harvest.tasks AS t
      WHERE t.seq IN (31, 32) AND t.kind = 'activity' ORDER BY t.id$$,
    '... and their rows are the ones _hand_activities'' statement of many inserts for the same commands');
DELETE FROM harvest.tasks WHERE seq IN (21, 22, 23, 31, 32) AND kind = 'activity';
-- _write_held: what a batch call held goes in, the events at their ids, then the handed
-- activities (each on its own run's row), which come back in the held order; nothing
-- held, nothing written and NULL back.
SELECT pg_temp.start_and_claim('cmd_wh');
UPDATE harvest.executions SET last_event_id = 40 WHERE id = pg_temp.run('cmd_wh');
SELECT is(harvest._write_held(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'fn-worker', harvest.now()),
          NULL::harvest.worker_activity_task[], '_write_held(): nothing held returns NULL');
CREATE TEMP TABLE wh_handed ON COMMIT DROP AS
SELECT pg_temp.tasks_json(harvest._write_held(
           ARRAY[ROW(pg_temp.run('cmd_wh'), 42, 2, 0, 42, false, NULL, NULL, NULL)::harvest.held_run_row],
           ARRAY[pg_temp.run('cmd_wh'), pg_temp.run('cmd_wh')], ARRAY[40, 40]::bigint[],
           ARRAY['MarkerRecorded', 'MarkerRecorded'], ARRAY['{"name": "w1"}', '{"name": "w2"}']::jsonb[],
           ARRAY[pg_temp.exec('cmd_wh'), pg_temp.exec('cmd_fn')], ARRAY[pg_temp.run('cmd_wh'), pg_temp.run('cmd_fn')],
           ARRAY[41, 42], ARRAY['{"name": "h1"}', '{"name": "h2"}']::jsonb[], 'fn-worker', harvest.now())) AS handed;
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'name' FROM harvest.events
      WHERE execution_id = pg_temp.run('cmd_wh') AND event_id > 40 ORDER BY event_id$$,
    $$VALUES (41::bigint, 'w1'::text), (42, 'w2')$$,
    '_write_held(): the held events at their ids (offset + position), in order');
SELECT results_eq(
    $$SELECT last_event_id, decided_by, decided_through FROM harvest.executions WHERE id = pg_temp.run('cmd_wh')$$,
    $$VALUES (42::bigint, 'fn-worker'::text, 42::bigint)$$,
    '_write_held(): the held row updates first (_update_held_rows)');
SELECT is((SELECT array_agg(h - 'new_events_after' ORDER BY n) FROM wh_handed, unnest(handed) WITH ORDINALITY AS u (h, n)),
          (SELECT array_agg(harvest._task_for_worker(t, e, 'fn-worker') - 'new_events_after' ORDER BY t.id)
           FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
           WHERE t.seq IN (41, 42) AND t.kind = 'activity' AND t.activity_name IN ('h1', 'h2')),
          '... then the handed activities, each on its own run, returned in the held order');
DELETE FROM harvest.tasks WHERE seq IN (41, 42) AND kind = 'activity' AND activity_name IN ('h1', 'h2');
-- _activity_scheduled: the one description of a scheduled activity, a named queue kept.
SELECT is(harvest._activity_scheduled(pg_temp.exec('cmd_fn'), 13,
              '{"type": "schedule_activity", "seq": 13, "name": "q3", "queue": "fn_q"}', 1000),
          jsonb_build_object('seq', 13, 'name', 'q3', 'input', NULL, 'queue', 'fn_q', 'options', '{}'::jsonb),
          '_activity_scheduled() returns the ActivityScheduled data (the command''s queue, no options: {})');
-- Its checks at their edges: an input of exactly p_limit bytes passes, one byte over is
-- HR008; a name that is not a string is HR001, as _require words it.
SELECT is(harvest._activity_scheduled(pg_temp.exec('cmd_fn'), 14,
              '{"type": "schedule_activity", "seq": 14, "name": "q4", "input": [12345]}', 7) ->> 'name',
          'q4', '_activity_scheduled(): an input of exactly the limit (7 bytes) passes');
SELECT throws_ok($$SELECT harvest._activity_scheduled(pg_temp.exec('cmd_fn'), 14,
                       '{"type": "schedule_activity", "seq": 14, "name": "q4", "input": [123456]}', 7)$$,
                 'HR008', 'the input of activity q4 (command 14) is 8 bytes, over the payload limit of 7 bytes',
                 '_activity_scheduled(): one byte over the limit: HR008');
SELECT throws_ok($$SELECT harvest._activity_scheduled(pg_temp.exec('cmd_fn'), 14,
                       '{"type": "schedule_activity", "seq": 14, "name": 4}', 1000)$$,
                 'HR001', 'command schedule_activity needs "name" as a JSON string, got number',
                 '_activity_scheduled(): a name that is not a string: HR001');
-- _activity_command_ok: the checks _activity_scheduled raises on, as a yes or no, at their
-- edges (a string name; an input of at most p_limit bytes, or none).
SELECT results_eq(
    $$SELECT harvest._activity_command_ok(c.command, 7) FROM (VALUES
          ('{"name": "a", "input": [12345]}'::jsonb, 1), ('{"name": "a", "input": [123456]}', 2),
          ('{"name": "a"}', 3), ('{"name": 4, "input": [1]}', 4), ('{"input": [1]}', 5),
          ('{"name": null}', 6)) AS c (command, n) ORDER BY c.n$$,
    $$VALUES (true), (false), (true), (false), (false), (false)$$,
    '_activity_command_ok(): a string name and an input of at most the limit (7 bytes), or none');
-- The options of a schedule_activity are read long after the decision by other callers: a
-- claim of the queue casts the timeouts (and a rate limit's rps into its bucket), a failed
-- attempt and the scanner's expiry the retry policy and dead_letter. A value they cannot
-- cast was accepted, and then every claim of the queue failed while the task was pending
-- (and every scan once its attempt expired). Now the decision is refused, HR001 naming the
-- option, and nothing of it is written.
SELECT pg_temp.start_and_claim('bad_opts');
SELECT results_eq(
    format($$SELECT pg_temp.dry_run(format('SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %%L)',
                                           jsonb_build_array(jsonb_build_object(
                                               'type', 'schedule_activity', 'seq', 1, 'name', 'a',
                                               'options', o.options))))
             FROM (VALUES
                 ('{"start_to_close": "30s"}'::jsonb, 1), ('{"start_to_close": 0}', 2),
                 ('{"heartbeat_timeout": 1e300}', 3), ('{"schedule_to_close": [60]}', 4),
                 ('{"priority": 1.5}', 5), ('{"dead_letter": "maybe"}', 6), ('{"retry": "x"}', 7),
                 ('{"retry": {"max_attempts": "x"}}', 8), ('{"retry": {"max_attempts": 2.5}}', 9),
                 ('{"retry": {"max_attempts": 1e12}}', 10), ('{"retry": {"initial_interval": "1s"}}', 11),
                 ('{"retry": {"max_interval": -1e300}}', 12), ('{"retry": {"backoff": "x"}}', 13),
                 ('{"rate_limit": {}}', 14), ('{"rate_limit": {"rps": 0}}', 15),
                 ('{"rate_limit": {"rps": 2, "burst": 0.5}}', 16), ('{"rate_limit": "x"}', 17), ('[]', 18))
                 AS o (options, n) ORDER BY o.n$$, pg_temp.task('bad_opts'), pg_temp.token('bad_opts')),
    $$VALUES
      ('HR001: command schedule_activity (seq 1) needs options.start_to_close as a number of seconds from 1e-300 to 3155760000 (100 years), or null, got "30s"'::text),
      ('HR001: command schedule_activity (seq 1) needs options.start_to_close as a number of seconds from 1e-300 to 3155760000 (100 years), or null, got 0'),
      ('HR001: command schedule_activity (seq 1) needs options.heartbeat_timeout as a number of seconds from 1e-300 to 3155760000 (100 years), or null, got 1' || repeat('0', 300)),
      ('HR001: command schedule_activity (seq 1) needs options.schedule_to_close as a number of seconds from 1e-300 to 3155760000 (100 years), or null, got [60]'),
      ('HR001: command schedule_activity (seq 1) needs options.priority as an integer (a 32-bit one), or null, got 1.5'),
      ('HR001: command schedule_activity (seq 1) needs options.dead_letter as a JSON boolean, or null, got "maybe"'),
      ('HR001: command schedule_activity (seq 1) needs options.retry as a JSON object, or null, got "x"'),
      ('HR001: command schedule_activity (seq 1) needs options.retry.max_attempts as an integer (a 32-bit one; 0: no limit), or null, got "x"'),
      ('HR001: command schedule_activity (seq 1) needs options.retry.max_attempts as an integer (a 32-bit one; 0: no limit), or null, got 2.5'),
      ('HR001: command schedule_activity (seq 1) needs options.retry.max_attempts as an integer (a 32-bit one; 0: no limit), or null, got 1000000000000'),
      ('HR001: command schedule_activity (seq 1) needs options.retry.initial_interval as a number of seconds, 0 or from 1e-300 to 3155760000 (100 years), or null, got "1s"'),
      ('HR001: command schedule_activity (seq 1) needs options.retry.max_interval as a number of seconds, 0 or from 1e-300 to 3155760000 (100 years), or null, got -1' || repeat('0', 300)),
      ('HR001: command schedule_activity (seq 1) needs options.retry.backoff as a number (of a double''s range: 0, or 1e-300 to 1e300 in size), or null, got "x"'),
      ('HR001: command schedule_activity (seq 1) needs options.rate_limit.rps as a number from 1e-300 to 1e300, got nothing'),
      ('HR001: command schedule_activity (seq 1) needs options.rate_limit.rps as a number from 1e-300 to 1e300, got 0'),
      ('HR001: command schedule_activity (seq 1) needs options.rate_limit.burst as a number from 1 to 1e300, or null, got 0.5'),
      ('HR001: command schedule_activity (seq 1) needs options.rate_limit as a JSON object {rps, burst, key}, or null, got "x"'),
      ('HR001: command schedule_activity needs "options" as a JSON object, got array')$$,
    'schedule_activity: options a claim, a retry or the scanner could not cast are refused (HR001 naming the option)');
SELECT is(pg_temp.dry_run(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, '[
              {"type": "schedule_activity", "seq": 1, "name": "a", "options": null},
              {"type": "schedule_activity", "seq": 2, "name": "b", "options": {
                  "start_to_close": 0.5, "schedule_to_close": null, "heartbeat_timeout": 3155760000,
                  "retry": {"max_attempts": 0, "initial_interval": 0, "backoff": 1.5, "max_interval": 3155760000,
                            "non_retryable_errors": ["E"]},
                  "priority": -3, "dead_letter": false, "rate_limit": {"rps": 0.5, "burst": 1, "key": null}}},
              {"type": "schedule_activity", "seq": 3, "name": "c", "options": {"retry": null, "rate_limit": null,
                                                                               "priority": null, "dead_letter": null}}]')$$,
                          pg_temp.task('bad_opts'), pg_temp.token('bad_opts'))),
          'ok', 'schedule_activity: the options at their edges, and null for any of them, are accepted');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('bad_opts') AND kind = 'activity'),
          0::bigint, 'a refused decision wrote no activity task');
SELECT lives_ok($$SELECT * FROM harvest.claim_tasks('other', ARRAY['dq_bad_opts'], 10)$$,
                'and the queue''s claims go on');
SELECT results_eq(
    $$SELECT harvest._activity_command_ok(c.command, 1000) FROM (VALUES
          ('{"name": "a", "options": {"start_to_close": 30, "retry": {"max_attempts": 3}}}'::jsonb, 1),
          ('{"name": "a", "options": {"start_to_close": "30"}}', 2), ('{"name": "a", "options": "x"}', 3),
          ('{"name": "a", "options": {"retry": {"max_interval": 1e10}}}', 4)) AS c (command, n) ORDER BY c.n$$,
    $$VALUES (true), (false), (false), (false)$$,
    '_activity_command_ok(): options every later reader can cast, or not');
-- A number nearer 0 than 1e-300 (other than 0) passed `@ <= 0`, then a reader's cast to a double
-- failed (22003 under about 5e-324: every claim of the queue) or made a timeout of nothing: each
-- is held to _json_number's rule, 0 or 1e-300 to 1e300 in size.
SELECT results_eq(
    $$SELECT c.n, harvest._activity_command_ok(jsonb_build_object('name', 'a', 'options', c.options), 1000)
      FROM (VALUES
          ('{"start_to_close": 1e-400}'::jsonb, 1), ('{"start_to_close": 1e-310}', 2), ('{"start_to_close": 1e-300}', 3),
          ('{"schedule_to_close": 1e-301}', 4), ('{"heartbeat_timeout": 5e-324}', 5),
          ('{"priority_aging_secs": 1e-400}', 6), ('{"retry": {"initial_interval": 1e-400}}', 7),
          ('{"retry": {"initial_interval": 0}}', 8), ('{"retry": {"max_interval": 1e-310}}', 9),
          ('{"retry": {"backoff": -1e-400}}', 10), ('{"retry": {"backoff": 0}}', 11),
          ('{"retry": {"backoff": -1e-300}}', 12), ('{"rate_limit": {"rps": 1e-400}}', 13),
          ('{"rate_limit": {"rps": 1e-300}}', 14)) AS c (options, n) ORDER BY c.n$$,
    $$VALUES (1, false), (2, false), (3, true), (4, false), (5, false), (6, false), (7, false), (8, true),
             (9, false), (10, false), (11, true), (12, true), (13, false), (14, true)$$,
    '_activity_command_ok(): a number nearer 0 than 1e-300 but 0 is refused (a reader''s cast to a double failed)');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1,
                              '[{"type": "schedule_activity", "seq": 1, "name": "a", "options": {"start_to_close": 1e-400}}]')$$,
                        pg_temp.task('bad_opts'), pg_temp.token('bad_opts')),
                 'HR001', 'command schedule_activity (seq 1) needs options.start_to_close as a number of seconds from '
                          '1e-300 to 3155760000 (100 years), or null, got 0.' || repeat('0', 399) || '1',
                 'start_to_close 1e-400: HR001 naming it (it passed, then every claim of the queue failed its cast)');
-- _activity_command_head_ok: the checks that do not read the options (a string name, an input
-- of at most the limit); _apply_decision asks them of every command, the options' only while
-- they differ from ones that passed. So a later command of equal options is refused for its
-- name, and one of other options for them.
SELECT results_eq(
    $$SELECT harvest._activity_command_head_ok(c.command, 7) FROM (VALUES
          ('{"name": "a", "input": [12345], "options": "x"}'::jsonb, 1), ('{"name": "a", "input": [123456]}', 2),
          ('{"name": "a"}', 3), ('{"name": 4, "input": [1]}', 4), ('{"input": [1]}', 5)) AS c (command, n)
      ORDER BY c.n$$,
    $$VALUES (true), (false), (true), (false), (false)$$,
    '_activity_command_head_ok(): a string name and an input of at most the limit (7 bytes), whatever the options');
SELECT results_eq(
    format($$SELECT pg_temp.dry_run(format('SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %%L)', d.commands))
             FROM (VALUES
                 ('[{"type": "schedule_activity", "seq": 1, "name": "a", "options": {"start_to_close": 30}},
                    {"type": "schedule_activity", "seq": 2, "name": "a", "options": {"start_to_close": 30.0}},
                    {"type": "schedule_activity", "seq": 3, "name": 7, "options": {"start_to_close": 30}}]'::jsonb, 1),
                 ('[{"type": "schedule_activity", "seq": 1, "name": "a", "options": {"start_to_close": 30}},
                    {"type": "schedule_activity", "seq": 2, "name": "a", "options": {"start_to_close": 0}}]', 2),
                 ('[{"type": "schedule_activity", "seq": 1, "name": "a", "options": {"priority": 2}},
                    {"type": "schedule_activity", "seq": 2, "name": "a"},
                    {"type": "schedule_activity", "seq": 3, "name": "a", "options": {"priority": 2.5}}]', 3),
                 ('[{"type": "schedule_activity", "seq": 1, "name": "a", "options": {"start_to_close": 30}},
                    {"type": "schedule_activity", "seq": 2, "name": "a", "options": {"start_to_close": 30.0}},
                    {"type": "start_timer", "seq": 3, "duration": 5},
                    {"type": "schedule_activity", "seq": 4, "name": "b", "options": {"start_to_close": 30}}]', 4))
                 AS d (commands, n) ORDER BY d.n$$, pg_temp.task('bad_opts'), pg_temp.token('bad_opts')),
    $$VALUES
      ('HR001: command schedule_activity needs "name" as a JSON string, got number'::text),
      ('HR001: command schedule_activity (seq 2) needs options.start_to_close as a number of seconds from 1e-300 to 3155760000 (100 years), or null, got 0'),
      ('HR001: command schedule_activity (seq 3) needs options.priority as an integer (a 32-bit one), or null, got 2.5'),
      ('ok')$$,
    'schedule_activity: a later command of options equal to ones that passed is checked for its name; other options for themselves');
-- A version marker's value is read across runs by count_versions (its version cast to an
-- integer): one it could not cast made count_versions of that change_id fail for everyone.
SELECT pg_temp.start_and_claim('bad_version');
SELECT results_eq(
    format($$SELECT pg_temp.dry_run(format('SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %%L)',
                                           jsonb_build_array(jsonb_build_object(
                                               'type', 'record_marker', 'seq', 1, 'kind', 'version', 'value', v.value))))
             FROM (VALUES ('{"change_id": "c", "version": "2"}'::jsonb, 1), ('{"change_id": "c", "version": 1.5}', 2),
                          ('{"change_id": "c", "version": 1e10}', 3), ('{"change_id": 5, "version": 1}', 4),
                          ('{"change_id": "c"}', 5), ('"c:1"', 6), ('{"change_id": "c", "version": -1}', 7))
                  AS v (value, n) ORDER BY v.n$$, pg_temp.task('bad_version'), pg_temp.token('bad_version')),
    $$VALUES
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got {"version": "2", "change_id": "c"}'::text),
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got {"version": 1.5, "change_id": "c"}'),
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got {"version": 10000000000, "change_id": "c"}'),
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got {"version": 1, "change_id": 5}'),
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got {"change_id": "c"}'),
      ('HR001: command record_marker (seq 1) of kind version needs "value" as {"change_id": a string, "version": an integer (a 32-bit one)}, got "c:1"'),
      ('ok')$$,
    'record_marker of kind version: a value count_versions could not read is refused (HR001)');
-- _activity_scheduled_data: the event's data on the queue given.
SELECT is(harvest._activity_scheduled_data('dq_cmd_fn', 11,
              '{"type": "schedule_activity", "seq": 11, "name": "q1", "input": [1], "options": {"priority": 3}}'),
          jsonb_build_object('seq', 11, 'name', 'q1', 'input', '[1]'::jsonb, 'queue', 'dq_cmd_fn',
                             'options', '{"priority": 3}'::jsonb),
          '_activity_scheduled_data() returns the ActivityScheduled data');
-- _activity_priority: a checked command's priority, 2.0 as 2, none or null as 0.
SELECT results_eq(
    $$SELECT harvest._activity_priority(c::jsonb) FROM unnest(ARRAY[
        '{"options": {"priority": 2.0}}', '{"options": {"priority": -7}}', '{"options": {"priority": null}}',
        '{"options": {}}', '{}']) WITH ORDINALITY AS u (c, n) ORDER BY n$$,
    $$VALUES (2), (-7), (0), (0), (0)$$,
    '_activity_priority(): 2.0 is 2, a missing or null priority is 0');
-- _acts_on_own_run: a decision whose commands act on its own run only (the held run rows
-- may wait for it); anything else, and anything not an array, may act on another.
SELECT results_eq(
    $$SELECT harvest._acts_on_own_run(c::jsonb) FROM unnest(ARRAY[
        '[]',
        '[{"type": "schedule_activity", "seq": 1}, {"type": "start_timer", "seq": 2}, {"type": "hold_wakeups"}]',
        '[{"type": "cancel_timer", "seq": 1}, {"type": "record_marker", "seq": 2, "name": "m"}]',
        '[{"type": "record_marker", "seq": 2, "kind": "version"}]',
        '[{"type": "record_marker", "seq": 2, "kind": "mutex_acquire"}]',
        '[{"type": "schedule_activity", "seq": 1}, {"type": "complete_workflow"}]',
        '[{"type": "fail_workflow"}]', '[{"type": "cancel_workflow"}]', '[{"type": "continue_as_new"}]',
        '[{"type": "start_child_workflow", "seq": 1}]', '[{"type": "signal_external_workflow", "seq": 1}]',
        '[{"type": "cancel_external_workflow", "seq": 1}]', '[{"type": "complete_update", "seq": 1}]',
        '{"type": "start_timer"}', 'null']) WITH ORDINALITY AS u (c, n) ORDER BY n$$,
    $$VALUES (true), (true), (true), (true), (false), (true), (true), (true), (false), (false), (false), (false),
             (false), (false), (false)$$,
    '_acts_on_own_run(): activities, timers, plain markers, hold_wakeups and closes act on their own run; the rest may not');
SELECT unalike(pg_temp.plan_of('SELECT harvest._acts_on_own_run(t.input) FROM harvest.tasks AS t'),
               '%_acts_on_own_run(%', '_acts_on_own_run() is inlined into its caller''s expression');
-- Both are inlined into the expression that calls them (a decision's per-activity step):
-- no call of their own per queued activity.
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_command_ok(t.input, t.seq) FROM harvest.tasks AS t'),
               '%_activity_command_ok(%', '_activity_command_ok() is inlined into its caller''s expression');
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_command_head_ok(t.input, t.seq) FROM harvest.tasks AS t'),
               '%_activity_command_head_ok(%', '_activity_command_head_ok() is inlined into its caller''s expression');
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_scheduled_data(t.queue, t.seq, t.input) FROM harvest.tasks AS t'),
               '%_activity_scheduled_data(%', '_activity_scheduled_data() is inlined into its caller''s expression');
-- A decision that schedules activities it queues calls no function per activity (the checks
-- and the event's data are inlined expressions): _require, _check_payload and
-- _activity_scheduled are called only to raise.
SET LOCAL track_functions = 'pl';
CREATE FUNCTION pg_temp.calls(p_fn regprocedure) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f WHERE f.funcid = p_fn), 0);
$fn$;
SELECT pg_temp.start_and_claim('no_checks');
CREATE TEMP TABLE checks_before ON COMMIT DROP AS
SELECT pg_temp.calls('harvest._require(jsonb,text,text)') AS requires,
       pg_temp.calls('harvest._check_payload(text,jsonb,integer)') AS payload_checks,
       pg_temp.calls('harvest._activity_scheduled(harvest.executions,integer,jsonb,integer)') AS described;
SELECT lives_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, jsonb_build_array(
                             jsonb_build_object('type', 'schedule_activity', 'seq', 1, 'name', 'a', 'input', '[1]'::jsonb),
                             jsonb_build_object('type', 'schedule_activity', 'seq', 2, 'name', 'b', 'input', '[2]'::jsonb)))$$,
                       pg_temp.task('no_checks'), pg_temp.token('no_checks')),
                'setup: a decision schedules two activities');
SELECT results_eq(
    $$SELECT pg_temp.calls('harvest._require(jsonb,text,text)') - b.requires,
             pg_temp.calls('harvest._check_payload(text,jsonb,integer)') - b.payload_checks,
             pg_temp.calls('harvest._activity_scheduled(harvest.executions,integer,jsonb,integer)') - b.described
      FROM checks_before AS b$$,
    $$VALUES (0::bigint, 0::bigint, 0::bigint)$$,
    'two well-formed queued schedule_activity commands: no call of _require, _check_payload or _activity_scheduled');
SELECT results_eq(
    $$SELECT seq, status, e.event_data
      FROM harvest.tasks AS t
      JOIN harvest.events AS e ON e.execution_id = t.execution_id AND e.event_type = 'ActivityScheduled'
           AND (e.event_data ->> 'seq')::integer = t.seq
      WHERE t.execution_id = pg_temp.run('no_checks') AND t.kind = 'activity' ORDER BY t.seq$$,
    $$VALUES (1, 'pending'::text, jsonb_build_object('seq', 1, 'name', 'a', 'input', '[1]'::jsonb,
                                                     'queue', 'dq_no_checks', 'options', '{}'::jsonb)),
             (2, 'pending', jsonb_build_object('seq', 2, 'name', 'b', 'input', '[2]'::jsonb,
                                               'queue', 'dq_no_checks', 'options', '{}'::jsonb))$$,
    '... and both activities are queued, each with its ActivityScheduled event');
RESET track_functions;
-- The queued way raises what _activity_scheduled raises: an input over the limit (HR008,
-- naming the activity and its command), a command without a name (HR001).
SELECT pg_temp.start_and_claim('queued_big');
UPDATE harvest.engine_settings SET max_payload_bytes = 5;
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "schedule_activity", "seq": 1, "name": "a", "input": [1]},
                            {"type": "schedule_activity", "seq": 2, "name": "big", "input": [12345]}]')$$,
                        pg_temp.task('queued_big'), pg_temp.token('queued_big')),
                 'HR008', 'the input of activity big (command 2) is 7 bytes, over the payload limit of 5 bytes',
                 'a decision''s queued activity over the payload limit: HR008');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1,
                          '[{"type": "schedule_activity", "seq": 1, "name": "a"}, {"type": "schedule_activity", "seq": 2}]')$$,
                        pg_temp.task('queued_big'), pg_temp.token('queued_big')),
                 'HR001', 'command schedule_activity needs "name" as a JSON string, got nothing',
                 'a decision''s queued activity without a name: HR001');
SELECT lives_ok($$SELECT harvest._queue_activities(pg_temp.exec('cmd_fn'), ARRAY[11, 12],
                      ARRAY['{"type": "schedule_activity", "seq": 11, "name": "q1", "input": [1], "options": {"priority": 3}}',
                            '{"type": "schedule_activity", "seq": 12, "name": "q2", "queue": "fn_q",
                              "options": {"schedule_to_close": 60}}']::jsonb[], harvest.now())$$,
                '_queue_activities() inserts the queued activities');
SELECT results_eq(
    $$SELECT seq, queue, status, priority, activity_name, input, options, due_at, scheduled_at, deadline_at, attempt,
             fencing_token, lease_owner
      FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND seq IN (11, 12) ORDER BY id$$,
    $$VALUES (11, 'dq_cmd_fn'::text, 'pending'::text, 3, 'q1'::text, '[1]'::jsonb, '{"priority": 3}'::jsonb,
              '2030-01-05 00:00:00+00'::timestamptz, '2030-01-05 00:00:00+00'::timestamptz, NULL::timestamptz, 0,
              0::bigint, NULL::text),
             (12, 'fn_q', 'pending', 0, 'q2', '[]', '{"schedule_to_close": 60}', '2030-01-05 00:00:00+00',
              '2030-01-05 00:00:00+00', '2030-01-05 00:01:00+00', 0, 0, NULL)$$,
    '... pending rows in command order: queue, priority, input ([] when none), options, due now, the schedule_to_close deadline');
SELECT lives_ok($$SELECT harvest._queue_activities(
                      jsonb_populate_record(pg_temp.exec('cmd_fn'), '{"status": "PAUSED"}'), ARRAY[13],
                      ARRAY['{"type": "schedule_activity", "seq": 13, "name": "q3"}']::jsonb[], harvest.now())$$,
                'setup: _queue_activities() for a PAUSED run');
SELECT is((SELECT status FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND seq = 13), 'paused',
          '_queue_activities() on a PAUSED run: the rows wait, paused');
SELECT results_eq(
    $$SELECT d.event_type, d.event_data, d.ends_run FROM harvest._decide_start_timer(pg_temp.exec('cmd_fn'), 5,
          '{"type": "start_timer", "seq": 5, "duration": 60}', '2030-01-05 00:00:30+00') AS d$$,
    $$VALUES ('TimerStarted'::text, '{"seq": 5, "fire_at": "2030-01-05T00:01:30+00:00"}'::jsonb, NULL::boolean)$$,
    '_decide_start_timer() returns TimerStarted{fire_at}: p_now plus the duration');
SELECT is((SELECT due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND kind = 'timer' AND seq = 5),
          '2030-01-05 00:01:30+00'::timestamptz, '... and its timer task is due then');
SELECT results_eq(
    $$SELECT d.event_type, d.event_data FROM harvest._decide_cancel_timer(pg_temp.exec('cmd_fn'), 6,
          '{"type": "cancel_timer", "seq": 6, "timer_seq": 5}') AS d$$,
    $$VALUES ('TimerCancelled'::text, '{"seq": 6, "timer_seq": 5}'::jsonb)$$,
    '_decide_cancel_timer() returns TimerCancelled');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('cmd_fn') AND kind = 'timer'$$,
                '... and the timer task is gone');
CREATE TEMP TABLE fn_before ON COMMIT DROP AS
SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('cmd_fn');
SELECT results_eq(
    $$SELECT d.event_type, d.event_data FROM harvest._decide_record_marker(pg_temp.exec('cmd_fn'), 7,
          '{"type": "record_marker", "seq": 7, "kind": "side_effect", "value": 42}', 1000) AS d$$,
    $$VALUES ('MarkerRecorded'::text, '{"seq": 7, "kind": "side_effect", "value": 42}'::jsonb)$$,
    '_decide_record_marker() returns MarkerRecorded');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('cmd_fn')),
          (SELECT last_event_id FROM fn_before),
          '... and appends nothing itself (the decision''s one append does, and the command functions above append nothing)');
SELECT results_eq(
    $$SELECT d.event_type, d.event_data, d.ends_run FROM harvest._decide_start_child_workflow(pg_temp.exec('cmd_fn'), 8,
          '{"type": "start_child_workflow", "seq": 8, "workflow_name": "fn_kid", "workflow_id": "fn-kid"}') AS d$$,
    $$VALUES (NULL::text, NULL::jsonb, NULL::boolean)$$,
    '_decide_start_child_workflow() returns no event: it appends its own');
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data ->> 'workflow_id' FROM harvest.events AS ev
      WHERE ev.execution_id = pg_temp.run('cmd_fn') AND ev.event_id > (SELECT last_event_id FROM fn_before)$$,
    $$VALUES ((SELECT last_event_id FROM fn_before) + 1, 'ChildWorkflowStarted'::text, 'fn-kid'::text)$$,
    '... ChildWorkflowStarted, and the child runs');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_name = 'fn_kid' AND workflow_id = 'fn-kid'),
          'RUNNING', '... the child is RUNNING');
SELECT throws_ok($$SELECT * FROM harvest._decide_complete_update(pg_temp.exec('cmd_fn'), 9,
                       '{"type": "complete_update", "seq": 9, "update_id": "u1", "result": [12345]}', 5)$$,
                 'HR008', 'the result of update u1 is 7 bytes, over the payload limit of 5 bytes',
                 '_decide_complete_update() checks the result against p_limit: HR008');
SELECT results_eq(
    $$SELECT * FROM harvest._decide_cancel_workflow('{"type": "cancel_workflow", "details": "stop"}', 1000)$$,
    $$VALUES ('WorkflowCancelled'::text, '{"details": "stop"}'::jsonb, true, 'CANCELLED'::text, NULL::jsonb,
              '{"error_type": "Cancelled", "message": "stop", "non_retryable": true, "details": "stop"}'::jsonb)$$,
    '_decide_cancel_workflow() returns WorkflowCancelled and ends the run CANCELLED');
SELECT results_eq(
    $$SELECT * FROM harvest._decide_complete_workflow(pg_temp.exec('cmd_fn'),
          '{"type": "complete_workflow", "result": 6}', 1000)$$,
    $$VALUES ('WorkflowCompleted'::text, '{"result": 6}'::jsonb, true, 'COMPLETED'::text, '6'::jsonb, NULL::jsonb)$$,
    '_decide_complete_workflow() returns WorkflowCompleted and ends the run COMPLETED with the result');
SELECT results_eq(
    $$SELECT * FROM harvest._decide_fail_workflow(pg_temp.exec('cmd_fn'),
          '{"type": "fail_workflow", "failure": {"error_type": "E"}}', 1000)$$,
    $$VALUES ('WorkflowFailed'::text, '{"failure": {"error_type": "E"}}'::jsonb, true, 'FAILED'::text, NULL::jsonb,
              '{"error_type": "E"}'::jsonb)$$,
    '_decide_fail_workflow() returns WorkflowFailed and ends the run FAILED with the failure');
SELECT throws_ok($$SELECT * FROM harvest._decide_fail_workflow(pg_temp.exec('cmd_fn'), '{"type": "fail_workflow"}', 1000)$$,
                 'HR001', 'command fail_workflow needs "failure" as a JSON object, got nothing',
                 '_decide_fail_workflow() without a failure: HR001');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('cmd_fn')), 'RUNNING',
          'the closing commands'' functions leave the closing to the dispatcher: the run is still RUNNING');
SELECT results_eq(
    $$SELECT d.capped, d.last_event_id, d.execution_status
      FROM harvest._decide_history_caps(pg_temp.run('cmd_fn'), NULL, NULL, harvest.now()) AS d$$,
    $$SELECT false, last_event_id, 'RUNNING'::text FROM harvest.executions WHERE id = pg_temp.run('cmd_fn')$$,
    '_decide_history_caps() without caps: not capped, the run''s last event id and status');
SELECT results_eq(
    $$SELECT d.capped, d.last_event_id, d.execution_status
      FROM harvest._decide_history_caps(pg_temp.run('cmd_fn'), 1, NULL, harvest.now()) AS d$$,
    $$SELECT true, (SELECT last_event_id FROM fn_before) + 2, 'FAILED'::text$$,
    '_decide_history_caps() past the event cap: capped, WorkflowFailed appended, the run FAILED');
SELECT results_eq(
    $$SELECT kind, failure ->> 'error_type', failed_at FROM harvest.dead_letters
      WHERE execution_id = pg_temp.run('cmd_fn')$$,
    $$VALUES ('workflow'::text, 'HistoryEventCapExceeded'::text, '2030-01-05 00:00:00+00'::timestamptz)$$,
    '... and dead-lettered, typed');
SELECT pg_temp.start_and_claim('cmd_can');
SELECT results_eq(
    $$SELECT d.event_type, d.ends_run, d.close_status FROM harvest._decide_continue_as_new(pg_temp.exec('cmd_can'),
          '{"type": "continue_as_new", "input": ["next"]}', 1, 1000) AS d$$,
    $$VALUES (NULL::text, true, NULL::text)$$,
    '_decide_continue_as_new() ends the run and closes it itself: no event, no close status for the dispatcher');
SELECT results_eq(
    $$SELECT status, output ? 'continued_as_new' FROM harvest.executions WHERE id = pg_temp.run('cmd_can')$$,
    $$VALUES ('CONTINUED_AS_NEW'::text, true)$$,
    '... the run is CONTINUED_AS_NEW');
SELECT results_eq(
    $$SELECT status, input FROM harvest.executions
      WHERE continued_from = pg_temp.run('cmd_can')$$,
    $$VALUES ('RUNNING'::text, '["next"]'::jsonb)$$,
    '... and its successor runs with the new input');

-- The start locks of a decision's starts, taken before any row: the run's own key for a
-- continue_as_new, a child's given or derived workflow_id, nothing for other commands. (The
-- run is renamed first: its start took its key's lock in this transaction already.)
SELECT pg_temp.start_and_claim('lk');
UPDATE harvest.executions SET workflow_id = 'lk-renamed' WHERE id = pg_temp.run('lk');
CREATE FUNCTION pg_temp.start_lock_held(p_name text, p_id text) RETURNS boolean LANGUAGE sql AS $fn$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks AS l,
            LATERAL (SELECT hashtextextended('harvest.start:' || p_name || ':' || p_id, 0) AS k) AS h
        WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1
          AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid);
$fn$;
CREATE TEMP TABLE advisory_before ON COMMIT DROP AS
SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT harvest._lock_decision_start_keys(ARRAY[pg_temp.task('lk')], ARRAY[$$[
    {"type": "schedule_activity", "seq": 1, "name": "a", "input": []},
    {"type": "record_marker", "seq": 2, "kind": "now", "value": "x"}]$$::jsonb]);
SELECT results_eq(
    $$SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()$$,
    $$SELECT n FROM advisory_before$$,
    '_lock_decision_start_keys() of a decision that starts nothing takes no lock');
SELECT results_eq(
    $$SELECT pg_temp.start_lock_held('decide_wf', 'lk-renamed'), pg_temp.start_lock_held('kid_wf', 'kid-lk'),
             pg_temp.start_lock_held('kid_wf', 'lk-renamed/4')$$,
    $$VALUES (false, false, false)$$,
    '... none of the keys below is held before');
SELECT harvest._lock_decision_start_keys(ARRAY[pg_temp.task('lk'), NULL], ARRAY[$$[
    {"type": "start_child_workflow", "seq": 3, "workflow_name": "kid_wf", "workflow_id": "kid-lk"},
    {"type": "start_child_workflow", "seq": 4, "workflow_name": "kid_wf"},
    {"type": "continue_as_new", "input": []}]$$::jsonb, '"not an array"'::jsonb]);
SELECT results_eq(
    $$SELECT pg_temp.start_lock_held('decide_wf', 'lk-renamed'), pg_temp.start_lock_held('kid_wf', 'kid-lk'),
             pg_temp.start_lock_held('kid_wf', 'lk-renamed/4')$$,
    $$VALUES (true, true, true)$$,
    '... a continue_as_new locks its run''s key, a child its workflow_id or the derived one; a malformed item nothing');

-- The expression the commits ask before any lock call: does a decision start a run?
SELECT results_eq(
    $$SELECT harvest._starts_runs('[{"type": "continue_as_new", "input": []}]'),
             harvest._starts_runs('[{"type": "schedule_activity", "seq": 1}, {"type": "start_child_workflow", "seq": 2}]'),
             harvest._starts_runs('[{"type": "schedule_activity", "seq": 1}]'), harvest._starts_runs('[]'),
             harvest._starts_runs('{"type": "continue_as_new"}'), harvest._starts_runs('"continue_as_new"'),
             harvest._starts_runs(NULL)$$,
    $$VALUES (true, true, false, false, false, false, false)$$,
    '_starts_runs(): a continue_as_new or a start_child_workflow in a command array; nothing else, no non-array, not NULL');

-- A close waits for the messages it has not seen: a signal or an update accepted while the
-- run's last workflow task was in flight (past through) is read by the run's next task, not
-- dropped with the close; nothing of the refused decision is written. A continue-as-new
-- carries unread signals to the next run, so only an update stops it.
SELECT pg_temp.start_and_claim('close_signal');
SELECT is(harvest._append_event(pg_temp.run('close_signal'), 'SignalReceived', '{"name": "late", "payload": 1}'),
          2::bigint, 'setup: a signal lands while the last workflow task is in flight');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "complete_workflow", "result": null}]')$$,
                         pg_temp.task('close_signal'), pg_temp.token('close_signal')),
                  $$VALUES (2::bigint, 'RUNNING'::text)$$,
                  'complete_workflow with a signal past through: the close is refused, the run RUNNING');
SELECT results_eq($$SELECT e.last_event_id, e.status, t.kind, t.status
                    FROM harvest.executions AS e JOIN harvest.tasks AS t ON t.execution_id = e.id
                    WHERE e.id = pg_temp.run('close_signal')$$,
                  $$VALUES (2::bigint, 'RUNNING'::text, 'workflow'::text, 'pending'::text)$$,
                  'a refused close writes nothing of its decision and queues the run''s next workflow task');
SELECT pg_temp.start_and_claim('fail_signal');
SELECT is(harvest._append_event(pg_temp.run('fail_signal'), 'SignalReceived', '{"name": "late", "payload": 1}'),
          2::bigint, 'setup: a signal lands while a failing workflow task is in flight');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "fail_workflow", "failure": {"error_type": "ValueError", "message": "bad"}}]')$$,
                         pg_temp.task('fail_signal'), pg_temp.token('fail_signal')),
                  $$VALUES (2::bigint, 'RUNNING'::text)$$, 'fail_workflow with a signal past through: refused too');
SELECT pg_temp.start_and_claim('can_signal');
SELECT is(harvest._append_event(pg_temp.run('can_signal'), 'SignalReceived', '{"name": "late", "payload": 1}'),
          2::bigint, 'setup: a signal lands while a rotating workflow task is in flight');
SELECT is((SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('can_signal'),
              pg_temp.token('can_signal'), 1, '[{"type": "continue_as_new", "input": [1]}]')),
          'CONTINUED_AS_NEW', 'continue_as_new with a signal past through goes on: the signal goes to the next run');
SELECT pg_temp.start_and_claim('can_update');
SELECT is(harvest._append_event(pg_temp.run('can_update'), 'UpdateAccepted',
                                '{"update_id": "u1", "name": "hit", "input": null}'),
          2::bigint, 'setup: an update is accepted while a rotating workflow task is in flight');
SELECT pg_temp.batch('can_update', ARRAY['can_update'], ARRAY['[{"type": "continue_as_new", "input": [1]}]']::jsonb[],
                     ARRAY[0]);
SELECT results_eq($$SELECT outcome, last_event_id, execution_status FROM batch_rows WHERE label = 'can_update'$$,
                  $$VALUES ('completed'::text, 2::bigint, 'RUNNING'::text)$$,
                  'complete_workflow_tasks(): continue_as_new with an update past through is refused, the run RUNNING');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE continued_from = pg_temp.run('can_update')$$,
                'a refused continue-as-new starts no successor');
-- A cancel request stops a rotation too: a successor does not carry it.
SELECT pg_temp.start_and_claim('can_cancel');
SELECT ok(harvest.cancel_workflow(pg_temp.run('can_cancel'), 'stop'),
          'setup: a cancel is requested while a rotating workflow task is in flight');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 1,
                           '[{"type": "continue_as_new", "input": [1]}]')$$,
                         pg_temp.task('can_cancel'), pg_temp.token('can_cancel')),
                  $$VALUES (2::bigint, 'RUNNING'::text)$$,
                  'continue_as_new with a cancel request past through is refused, the run RUNNING');
SELECT results_eq($$SELECT e.cancel_requested, t.status,
                           (SELECT count(*) FROM harvest.executions AS n WHERE n.continued_from = e.id)
                    FROM harvest.executions AS e JOIN harvest.tasks AS t ON t.execution_id = e.id
                    WHERE e.id = pg_temp.run('can_cancel')$$,
                  $$VALUES (true, 'pending'::text, 0::bigint)$$,
                  '... no successor; the run keeps its request and its next workflow task is queued');
SELECT pg_temp.start_and_claim('done_cancel');
SELECT ok(harvest.cancel_workflow(pg_temp.run('done_cancel'), 'stop'),
          'setup: a cancel is requested while a completing workflow task is in flight');
SELECT is((SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('done_cancel'),
              pg_temp.token('done_cancel'), 1, '[{"type": "complete_workflow", "result": 1}]')),
          'COMPLETED', 'complete_workflow with a cancel request past through goes on: the run ends either way');

-- continue_as_new: a signal the old run never saw, its payload offloaded, goes to the successor
-- with a copy of that payload the successor owns: the old run's retention must not take it.
SELECT pg_temp.start_and_claim('can_off');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES ('00000000-0000-4000-8000-0000000000c1', pg_temp.run('can_off'), now(), 13, '"a big payload"');
SELECT is(harvest._append_event(pg_temp.run('can_off'), 'SignalReceived',
              '{"name": "late", "payload": {"_harvest_ref": "00000000-0000-4000-8000-0000000000c1"}}'),
          2::bigint, 'setup: a signal with an offloaded payload lands while a rotating task is in flight');
SELECT is((SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('can_off'),
              pg_temp.token('can_off'), 1, '[{"type": "continue_as_new", "input": [1]}]')),
          'CONTINUED_AS_NEW', 'setup: the run continues as new');
CREATE TEMP TABLE can_off_next ON COMMIT DROP AS
SELECT id FROM harvest.executions WHERE continued_from = pg_temp.run('can_off');
DELETE FROM harvest.executions WHERE id = pg_temp.run('can_off');  -- (as retention deletes it)
SELECT results_eq(
    $$SELECT ev.event_data ->> 'name', p.execution_id = n.id, p.data
      FROM can_off_next AS n
      JOIN harvest.events AS ev ON ev.execution_id = n.id AND ev.event_type = 'SignalReceived'
      JOIN harvest.payloads AS p ON p.id = (ev.event_data -> 'payload' ->> '_harvest_ref')::uuid$$,
    $$VALUES ('late'::text, true, '"a big payload"'::jsonb)$$,
    '_continue_as_new(): a late signal''s offloaded payload is the successor''s own copy, kept when the old run goes');
-- A late signal whose payload forges a reference to another run's row (a signal's payload is
-- what its sender wrote): no copy of that row for the successor, which would outlive the other
-- run's erasure. The reference stays as sent.
SELECT pg_temp.start_and_claim('can_forged');
SELECT pg_temp.start_run('can_victim', 'wf', 'can_victim_q');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES ('00000000-0000-4000-8000-0000000000c2', pg_temp.run('can_victim'), now(), 8, '"theirs"');
SELECT is(harvest._append_event(pg_temp.run('can_forged'), 'SignalReceived',
              '{"name": "late", "payload": {"_harvest_ref": "00000000-0000-4000-8000-0000000000c2"}}'),
          2::bigint, 'setup: a late signal naming another run''s offloaded row');
SELECT is((SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('can_forged'),
              pg_temp.token('can_forged'), 1, '[{"type": "continue_as_new", "input": [1]}]')),
          'CONTINUED_AS_NEW', 'setup: that run continues as new');
SELECT results_eq(
    $$SELECT ev.event_data -> 'payload' ->> '_harvest_ref',
             (SELECT count(*) FROM harvest.payloads AS p WHERE p.execution_id = n.id)
      FROM harvest.executions AS n
      JOIN harvest.events AS ev ON ev.execution_id = n.id AND ev.event_type = 'SignalReceived'
      WHERE n.continued_from = pg_temp.run('can_forged')$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000c2'::text, 0::bigint)$$,
    '_continue_as_new(): a row another run owns is not copied for the successor through a forged reference');

-- \df+ harvest.* documents the API: every public function of this file has a comment.
SELECT is_empty($$SELECT p.proname FROM pg_catalog.pg_proc AS p
                  WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname IN ('complete_workflow_task', 'complete_workflow_tasks', 'fail_workflow_task')
                    AND obj_description(p.oid, 'pg_proc') IS NULL$$,
                'every public function of functions/decide.sql has a COMMENT ON FUNCTION');

SELECT * FROM finish();
ROLLBACK;

-- A usual item of complete_workflow_tasks (its task still the worker's) is taken by its run's
-- lock and one DELETE, not by _try_lock_claimed_task's four statements; a refused item still
-- goes that way, which names its problem (the refusals above). In a transaction of its own:
-- a PL/pgSQL expression counts its calls only if it was first run while tracking was on.
BEGIN;
SELECT plan(2);
SET LOCAL track_functions = 'pl';
SELECT pg_temp.start_claimed('one_take', 'decide_wf', 'dq_one_take', 'worker-1');
SELECT results_eq(
    format($$SELECT outcome, last_event_id, execution_status FROM harvest.complete_workflow_tasks('worker-1',
               ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[1]::bigint[],
               ARRAY['[{"type": "complete_workflow", "result": 1}]']::jsonb[], ARRAY[0])$$,
           pg_temp.task('one_take'), pg_temp.token('one_take')),
    $$VALUES ('completed'::text, 3::bigint, 'COMPLETED'::text)$$,
    'complete_workflow_tasks() of one usual item: completed');
SELECT results_eq(
    $$SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                       WHERE f.funcid = 'harvest._try_lock_claimed_task(bigint,bigint,text)'::regprocedure), 0),
             (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = pg_temp.run('one_take'))$$,
    $$VALUES (0::bigint, 0::bigint)$$,
    '... taken without _try_lock_claimed_task, and its task is gone');
SELECT * FROM finish();
ROLLBACK;

-- A batch's decisions that each go in one append leave their runs' row updates (a close's
-- too) to one _update_held_rows, where each was an _append_events or _append_closing_events
-- of its own; before a decision that may act on another run (here a signal to another
-- workflow) the held rows go in first. Items by run: the first queues an activity, the
-- second completes its run, the third starts a timer, the fourth signals a workflow. A batch past the event cap fails its runs as the caps say, a
-- held handed activity dropped. In a transaction of its own (tracking, as above).
BEGIN;
SELECT plan(5);
SET LOCAL track_functions = 'pl';
CREATE FUNCTION pg_temp.calls(p_fn regprocedure) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f WHERE f.funcid = p_fn), 0);
$fn$;
SELECT pg_temp.start_claimed(k, 'decide_wf', 'dq_' || k, 'worker-1')
FROM unnest(ARRAY['held_1', 'held_2', 'held_3', 'held_4', 'capped_1', 'capped_2']) AS k;
CREATE TEMP TABLE held_items ON COMMIT DROP AS
SELECT k, pg_temp.task(k) AS task, pg_temp.token(k) AS token, row_number() OVER (ORDER BY pg_temp.run(k)) AS n
FROM unnest(ARRAY['held_1', 'held_2', 'held_3', 'held_4']) AS k;
CREATE TEMP TABLE held_before ON COMMIT DROP AS
SELECT pg_temp.calls('harvest._update_held_rows(harvest.held_run_row[],text)')
           AS held,
       pg_temp.calls('harvest._append_closing_events(uuid,text[],jsonb[],text,bigint,text,jsonb,jsonb,boolean)') AS closes;
CREATE TEMP TABLE held_done ON COMMIT DROP AS
SELECT i.n, c.outcome, c.last_event_id, c.execution_status
FROM harvest.complete_workflow_tasks('worker-1',
         (SELECT array_agg(task ORDER BY n) FROM held_items), (SELECT array_agg(token ORDER BY n) FROM held_items),
         ARRAY[1, 1, 1, 1]::bigint[],
         ARRAY['[{"type": "schedule_activity", "seq": 1, "name": "a"}]',
               '[{"type": "complete_workflow", "result": 2}]',
               '[{"type": "start_timer", "seq": 1, "duration": 60}]',
               jsonb_build_array(jsonb_build_object('type', 'signal_external_workflow', 'seq', 1, 'signal_name', 'go',
                                                    'workflow_id', (SELECT k FROM held_items WHERE n = 1)))]::jsonb[],
         ARRAY[0, 0, 0, 0]) AS c
JOIN held_items AS i ON i.task = c.task_id;
SELECT results_eq(
    $$SELECT n, outcome, last_event_id, execution_status FROM held_done ORDER BY n$$,
    $$VALUES (1::bigint, 'completed'::text, 3::bigint, 'RUNNING'::text), (2, 'completed', 3, 'COMPLETED'),
             (3, 'completed', 3, 'RUNNING'), (4, 'completed', 4, 'RUNNING')$$,
    'complete_workflow_tasks(): four runs'' decisions, each answered as its appends would have left it');
SELECT results_eq(
    $$SELECT pg_temp.calls('harvest._update_held_rows(harvest.held_run_row[],text)')
             - b.held,
             pg_temp.calls('harvest._append_closing_events(uuid,text[],jsonb[],text,bigint,text,jsonb,jsonb,boolean)')
             - b.closes
      FROM held_before AS b$$,
    $$VALUES (1::bigint, 0::bigint)$$,
    '... the first three''s row updates and close in one _update_held_rows, before the signal; none by _append_closing_events');
SELECT results_eq(
    $$SELECT i.n, e.last_event_id, (SELECT max(ev.event_id) FROM harvest.events AS ev WHERE ev.execution_id = e.id),
             (SELECT count(*) FROM harvest.events AS ev WHERE ev.execution_id = e.id),
             e.history_bytes = (SELECT sum(harvest._event_bytes(ev.event_data)) FROM harvest.events AS ev
                                WHERE ev.execution_id = e.id),
             e.decided_by, e.decided_through, e.status,
             (SELECT array_agg(ev.event_type ORDER BY ev.event_id) FROM harvest.events AS ev
              WHERE ev.execution_id = e.id AND ev.event_id > 2)
      FROM held_items AS i JOIN harvest.executions AS e ON e.id = pg_temp.run(i.k) ORDER BY i.n$$,
    $$VALUES (1::bigint, 4::bigint, 4::bigint, 4::bigint, true, 'worker-1'::text, 3::bigint, 'RUNNING'::text,
              ARRAY['ActivityScheduled', 'SignalReceived']),
             (2, 3, 3, 3, true, 'worker-1', 1, 'COMPLETED', ARRAY['WorkflowCompleted']),
             (3, 3, 3, 3, true, 'worker-1', 3, 'RUNNING', ARRAY['TimerStarted']),
             (4, 4, 4, 4, true, 'worker-1', 1, 'RUNNING', ARRAY['ExternalSignalRequested', 'ExternalSignalDelivered'])$$,
    '... each run''s row: its last event and count, its bytes, decided_by, decided_through, the signal after the first''s decision');
CREATE TEMP TABLE capped_done ON COMMIT DROP AS
SELECT c.* FROM harvest.complete_workflow_tasks('worker-1',
    ARRAY[pg_temp.task('capped_1'), pg_temp.task('capped_2')], ARRAY[pg_temp.token('capped_1'), pg_temp.token('capped_2')],
    ARRAY[1, 1]::bigint[],
    ARRAY['[{"type": "schedule_activity", "seq": 1, "name": "a", "queue": "dq_capped_1"}]',
          '[{"type": "start_timer", "seq": 1, "duration": 60}]']::jsonb[], ARRAY[1, 1], 2) AS c;
SELECT results_eq(
    $$SELECT c.outcome, c.last_event_id, c.execution_status, c.handed,
             (SELECT array_agg(ev.event_type ORDER BY ev.event_id) FROM harvest.events AS ev
              WHERE ev.execution_id = t.run),
             (SELECT count(*) FROM harvest.tasks AS x WHERE x.execution_id = t.run),
             (SELECT count(*) FROM harvest.dead_letters AS d WHERE d.execution_id = t.run AND d.kind = 'workflow')
      FROM capped_done AS c
      JOIN (VALUES (pg_temp.task('capped_1'), pg_temp.run('capped_1'), 1), (pg_temp.task('capped_2'), pg_temp.run('capped_2'), 2))
          AS t (task, run, n) ON t.task = c.task_id
      ORDER BY t.n$$,
    $$VALUES ('completed'::text, 4::bigint, 'FAILED'::text, '[]'::jsonb,
              ARRAY['WorkflowStarted', 'WorkflowTaskCompleted', 'ActivityScheduled', 'WorkflowFailed'], 0::bigint, 1::bigint),
             ('completed', 4, 'FAILED', '[]', ARRAY['WorkflowStarted', 'WorkflowTaskCompleted', 'TimerStarted',
                                                    'WorkflowFailed'], 0, 1)$$,
    'complete_workflow_tasks() past the event cap: each run failed by the caps, its handed activity dropped');
SELECT results_eq(
    $$SELECT e.last_event_id, e.history_bytes = (SELECT sum(harvest._event_bytes(ev.event_data)) FROM harvest.events AS ev
                                                  WHERE ev.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id IN (pg_temp.run('capped_1'), pg_temp.run('capped_2'))$$,
    $$VALUES (4::bigint, true), (4, true)$$,
    '... their rows counting every event');
SELECT * FROM finish();
ROLLBACK;

-- A batch that closes several runs: their tails go in one _after_closes (core.sql), after
-- the batch's held rows, and leave the rows the same decisions leave one call each (the
-- one-item form, _append_closing_events and _after_close per run). Per group (b: the batch,
-- s: one call per item, in the batch's item order): two children of a parent (par) that
-- complete and fail, a parent (boss) of a live child (min, terminated by its policy) that
-- completes, and a run with a result waiter (waited) that cancels itself. In a transaction
-- of its own (tracking, as above).
BEGIN;
SELECT plan(5);
SET LOCAL track_functions = 'pl';
CREATE TEMP TABLE cb_runs (g text, k text, commands jsonb, parent text, seq integer) ON COMMIT DROP;
INSERT INTO cb_runs
SELECT g, v.*
FROM unnest(ARRAY['b', 's']) AS g
CROSS JOIN (VALUES ('kid_1', '[{"type": "complete_workflow", "result": 1}]'::jsonb, 'par', 3),
                   ('kid_2', '[{"type": "fail_workflow", "failure": {"message": "no"}}]', 'par', 4),
                   ('boss', '[{"type": "complete_workflow", "result": "b"}]', NULL, NULL),
                   ('waited', '[{"type": "cancel_workflow"}]', NULL, NULL),
                   ('par', NULL, NULL, NULL),
                   ('min', NULL, 'boss', 1)) AS v (k, commands, parent, seq);
SELECT CASE WHEN r.commands IS NULL THEN pg_temp.start_run('cb' || r.g || '_' || r.k, 'decide_wf', 'cbq_' || r.k)
            ELSE pg_temp.start_claimed('cb' || r.g || '_' || r.k, 'decide_wf', 'cbq_' || r.g || '_' || r.k, 'worker-1') END
FROM cb_runs AS r;
UPDATE harvest.executions AS e SET parent_id = pg_temp.run('cb' || r.g || '_' || r.parent), parent_seq = r.seq
FROM cb_runs AS r WHERE e.id = pg_temp.run('cb' || r.g || '_' || r.k) AND r.parent IS NOT NULL;
INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
SELECT pg_temp.run('cb' || g || '_waited'), '00000000-0000-4000-8000-00000000000c', now()
FROM unnest(ARRAY['b', 's']) AS g;
-- The batch's item order (complete_workflow_tasks takes a batch's items in run order), for both groups.
CREATE TEMP TABLE cb_order ON COMMIT DROP AS
SELECT r.k, row_number() OVER (ORDER BY pg_temp.run('cbb_' || r.k)) AS n
FROM cb_runs AS r WHERE r.g = 'b' AND r.commands IS NOT NULL;
CREATE TEMP TABLE cb_before ON COMMIT DROP AS
SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                 WHERE f.funcid = 'harvest._after_closes(uuid[],text[],jsonb[],jsonb[],uuid[],integer[])'::regprocedure), 0)
           AS batch,
       coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                 WHERE f.funcid = 'harvest._after_close(uuid,text,jsonb,jsonb,uuid,integer)'::regprocedure), 0) AS single;
SELECT is((SELECT array_agg(c.execution_status ORDER BY o.n)
           FROM harvest.complete_workflow_tasks('worker-1',
                    (SELECT array_agg(pg_temp.task('cbb_' || o.k) ORDER BY o.n) FROM cb_order AS o),
                    (SELECT array_agg(pg_temp.token('cbb_' || o.k) ORDER BY o.n) FROM cb_order AS o),
                    ARRAY[1, 1, 1, 1]::bigint[],
                    (SELECT array_agg(r.commands ORDER BY o.n) FROM cb_order AS o JOIN cb_runs AS r ON r.k = o.k AND r.g = 'b'),
                    ARRAY[0, 0, 0, 0]) AS c
           JOIN cb_order AS o ON pg_temp.task('cbb_' || o.k) = c.task_id),
          (SELECT array_agg(CASE o.k WHEN 'kid_2' THEN 'FAILED' WHEN 'waited' THEN 'CANCELLED' ELSE 'COMPLETED' END
                            ORDER BY o.n) FROM cb_order AS o),
          'complete_workflow_tasks(): a batch of four closing decisions, each run closed');
SELECT is((SELECT c.execution_status FROM cb_order AS o JOIN cb_runs AS r ON r.k = o.k AND r.g = 's'
           CROSS JOIN LATERAL harvest.complete_workflow_tasks('worker-1', ARRAY[pg_temp.task('cbs_' || o.k)],
                                                              ARRAY[pg_temp.token('cbs_' || o.k)], ARRAY[1]::bigint[],
                                                              ARRAY[r.commands], ARRAY[0]) AS c
           ORDER BY o.n LIMIT 1 OFFSET 3),
          (SELECT CASE o.k WHEN 'kid_2' THEN 'FAILED' WHEN 'waited' THEN 'CANCELLED' ELSE 'COMPLETED' END
           FROM cb_order AS o WHERE o.n = 4),
          '... the same decisions one call each');
SELECT results_eq(
    $$SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                       WHERE f.funcid = 'harvest._after_closes(uuid[],text[],jsonb[],jsonb[],uuid[],integer[])'::regprocedure), 0)
             - b.batch,
             coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                       WHERE f.funcid = 'harvest._after_close(uuid,text,jsonb,jsonb,uuid,integer)'::regprocedure), 0)
             - b.single
      FROM cb_before AS b$$,
    $$VALUES (1::bigint, 6::bigint)$$,
    '... the batch''s four tails in one _after_closes; an _after_close per one-item close, and per terminated child');
-- A group's rows, its runs' ids and names written as their keys.
CREATE FUNCTION pg_temp.cb_keyed(p_g text, p_text text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT r.k, pg_temp.run('cb' || p_g || '_' || r.k) AS id FROM cb_runs AS r WHERE r.g = p_g LOOP
        p_text := replace(p_text, v.id::text, v.k);
    END LOOP;
    RETURN replace(replace(p_text, 'cb' || p_g || '_', ''), 'cbq_' || p_g || '_', 'cbq_');
END;
$fn$;
CREATE FUNCTION pg_temp.cb_rows(p_g text) RETURNS TABLE (what text, k text, detail text) LANGUAGE sql AS $fn$
    SELECT 'run', r.k, pg_temp.cb_keyed(p_g, concat_ws(' ', e.status, e.output, e.failure, e.last_event_id,
                                                      e.history_bytes, e.decided_by, e.decided_through))
    FROM cb_runs AS r JOIN harvest.executions AS e ON e.id = pg_temp.run('cb' || p_g || '_' || r.k) WHERE r.g = p_g
    UNION ALL
    SELECT 'event', r.k, pg_temp.cb_keyed(p_g, concat_ws(' ', ev.event_id, ev.event_type, ev.event_data))
    FROM cb_runs AS r JOIN harvest.events AS ev ON ev.execution_id = pg_temp.run('cb' || p_g || '_' || r.k)
    WHERE r.g = p_g
    UNION ALL
    SELECT 'task', r.k, concat_ws(' ', t.kind, t.status, t.seq)
    FROM cb_runs AS r JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run('cb' || p_g || '_' || r.k)
    WHERE r.g = p_g
    UNION ALL
    SELECT 'waiter', r.k, w.waiter_id::text
    FROM cb_runs AS r JOIN harvest.result_waiters AS w ON w.execution_id = pg_temp.run('cb' || p_g || '_' || r.k)
    WHERE r.g = p_g
    UNION ALL
    SELECT 'relay', r.k, pg_temp.cb_keyed(p_g, concat_ws(' ', l.kind, l.payload))
    FROM cb_runs AS r JOIN harvest.relays AS l ON l.target_execution_id = pg_temp.run('cb' || p_g || '_' || r.k)
    WHERE r.g = p_g;
$fn$;
SELECT set_eq($$SELECT * FROM pg_temp.cb_rows('b')$$, $$SELECT * FROM pg_temp.cb_rows('s')$$,
              '... and the batch leaves the rows the one-item calls leave');
SELECT results_eq(
    $$SELECT what, k, regexp_replace(regexp_replace(detail, ' \d+( worker-1 1)?$', ''), '^\d+ ', '') AS detail
      FROM pg_temp.cb_rows('b')
      WHERE (what = 'event' AND k = 'par' AND detail NOT LIKE '1 %') OR (what = 'run' AND k IN ('min', 'waited'))
         OR what IN ('task', 'waiter', 'relay')
      ORDER BY what, k, detail$$,
    $$VALUES ('event', 'par', 'ChildWorkflowCompleted {"seq": 3, "result": 1, "child_execution_id": "kid_1"}'),
             ('event', 'par', 'ChildWorkflowFailed {"seq": 4, "status": "FAILED", "failure": {"message": "no"}, "child_execution_id": "kid_2"}'),
             ('run', 'min', 'TERMINATED {"details": null, "message": "the parent workflow closed", "error_type": "Terminated", "non_retryable": true} 2'),
             ('run', 'waited', 'CANCELLED {"details": null, "message": "cancelled", "error_type": "Cancelled", "non_retryable": true} 3'),
             ('task', 'par', 'workflow pending')$$,
    '... the parent hears of both children, the live child of the closed parent is terminated, the waiter and every closed run''s task gone');
SELECT * FROM finish();
ROLLBACK;

-- _lock_flow_keys_of: the quota and cancel_running keys of the starts a decision (or a batch of
-- starts) will make, locked before any execution row; a successor's quota key is not.
BEGIN;
SELECT plan(4);
SELECT harvest.declare_flow_policies('{"workflows": {"fk_q": {"quota": {"key": "input.t", "max_active_executions": 9}},
    "fk_c": {"concurrency": {"key": "input.d", "limit": 1, "on_conflict": "cancel_running"},
             "quota": {"key": "input.t", "max_active_executions": 9}}}}');
SELECT harvest._lock_flow_keys_of('[{"workflow_name": "fk_q", "input": [{"t": "b"}], "quota": true},
    {"workflow_name": "fk_c", "input": [{"t": "a", "d": "x"}], "quota": false},
    {"workflow_name": "fk_q", "input": [{"t": "b"}], "quota": true},
    {"workflow_name": "nope", "input": [{"t": "z"}], "quota": true}, 7, {"workflow_name": 1}]');
SELECT results_eq($$SELECT kind, key FROM harvest.flow_keys ORDER BY kind, key$$,
                  $$VALUES ('concurrency'::text, 'x'::text), ('quota', 'b')$$,
                  '_lock_flow_keys_of(): each key once; no quota key for a successor');
SELECT is((SELECT count(*) FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
           AND l.objid::integer = hashtext('x')), 1::bigint,
          '_lock_flow_keys_of(): a cancel_running key''s advisory lock, as _supersede takes it');
SELECT lives_ok($$SELECT harvest._lock_flow_keys_of('{"not": "an array"}')$$,
                '_lock_flow_keys_of() of anything but an array: nothing');
-- A decision's pass (_lock_decision_start_keys) takes the keys its starts will: a local
-- child's quota and cancel_running keys, a successor's cancel_running key but not its quota
-- key, nothing for a child on another shard.
SELECT pg_temp.start_claimed('fk_run', 'fk_c', 'fkq', 'worker-1', '[{"t": "p", "d": "own"}]');
DELETE FROM harvest.flow_keys;
SELECT harvest._lock_decision_start_keys(ARRAY[pg_temp.task('fk_run')], ARRAY[$$[
    {"type": "continue_as_new", "input": [{"t": "s", "d": "next"}]},
    {"type": "start_child_workflow", "seq": 1, "workflow_name": "fk_q", "input": [{"t": "kq"}]},
    {"type": "start_child_workflow", "seq": 2, "workflow_name": "fk_c", "input": [{"t": "kt", "d": "kd"}]},
    {"type": "start_child_workflow", "seq": 3, "workflow_name": "fk_q", "input": [{"t": "far"}], "shard": 99}]$$::jsonb]);
SELECT results_eq($$SELECT kind, key FROM harvest.flow_keys ORDER BY kind, key$$,
                  $$VALUES ('concurrency'::text, 'kd'::text), ('concurrency', 'next'), ('quota', 'kq'), ('quota', 'kt')$$,
                  '_lock_decision_start_keys(): its starts'' flow keys; a successor''s quota key and a remote child''s keys not');
SELECT * FROM finish();
ROLLBACK;

-- _lock_superseded_runs: the runs latest-wins starts may supersede and the tasks' runs, then
-- their mutex keys and the markers', before the first start; nothing where none is superseded.
BEGIN;
SELECT plan(5);
SELECT harvest.declare_flow_policies('{"workflows": {
    "ls_c": {"concurrency": {"key": "input.d", "limit": 1, "on_conflict": "cancel_running"}},
    "ls_d": {"concurrency": {"key": "input.d", "limit": 1}}}}');
SELECT pg_temp.start_claimed('ls_own', 'decide_wf', 'lsq_own', 'worker-1', '["in"]');
CREATE TEMP TABLE ls ON COMMIT DROP AS
SELECT k, (harvest.start_workflow(w, jsonb_build_array(jsonb_build_object('d', d)), 'ls-' || k, 'lsq')).execution_id
FROM (VALUES ('a', 'ls_c', 'a'), ('b', 'ls_c', 'b'), ('x', 'ls_c', 'x'), ('y', 'ls_d', 'a')) AS v (k, w, d);
INSERT INTO harvest.mutex_locks (lock_key, holder_execution_id, acquired_at)
VALUES ('n2', (SELECT execution_id FROM ls WHERE k = 'a'), harvest.now()),
       ('n3', pg_temp.run('ls_own'), harvest.now()),
       ('n4', (SELECT execution_id FROM ls WHERE k = 'x'), harvest.now());
-- (The mutex keys only: the rows' locks do not show in pg_locks, and the runs' xmax is set
-- already by their tasks' and events' foreign keys. n2 is a's, n3 the task's run's: those runs
-- were among the locked; tests/integration/test_row_lock_order.py races the rows' order.)
CREATE FUNCTION pg_temp.ls_locked() RETURNS text[] LANGUAGE sql AS $fn$
    SELECT array_agg(k ORDER BY k) FROM unnest(ARRAY['n1', 'n2', 'n3', 'n4']) AS k
    WHERE EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                  AND l.objid::integer = hashtext('harvest.mutex:' || k));
$fn$;
SELECT is(pg_temp.ls_locked(), NULL, 'setup: no mutex key locked');
SELECT harvest._lock_superseded_runs('[{"workflow_name": "ls_d", "input": [{"d": "a"}]}]',
    ARRAY[pg_temp.task('ls_own')], ARRAY['[{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "n1"}}]'::jsonb]);
SELECT is(pg_temp.ls_locked(), NULL, '_lock_superseded_runs(): starts that supersede nothing: nothing locked');
SELECT harvest._lock_superseded_runs('[{"workflow_name": "ls_c", "input": [{"d": "a"}]}, {"workflow_name": "ls_c", "input": [{"d": "b"}]}]',
    ARRAY[pg_temp.task('ls_own')], ARRAY['[{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "n1"}}]'::jsonb]);
SELECT is(pg_temp.ls_locked(), ARRAY['n1', 'n2', 'n3'],
          '_lock_superseded_runs(): the keys the superseded runs and the task''s run hold, and the marker''s; not another run''s');
SELECT lives_ok($$SELECT harvest._lock_superseded_runs('{"not": "an array"}'), harvest._lock_superseded_runs(NULL, NULL, NULL, NULL)$$,
                '_lock_superseded_runs() of no starts: nothing');
SELECT harvest._lock_superseded_runs('[{"workflow_name": "ls_d", "input": [{"d": "a"}]}]',
    p_runs => ARRAY[(SELECT execution_id FROM ls WHERE k = 'x')]);
SELECT is(pg_temp.ls_locked(), ARRAY['n1', 'n2', 'n3', 'n4'],
          '_lock_superseded_runs(): p_runs locked with them (a batch''s priors), and the keys they hold, where the starts supersede nothing');
SELECT * FROM finish();
ROLLBACK;

-- _lock_batch_mutexes: a group commit's runs, then every mutex key its decisions may take (their
-- markers' keys, those its runs hold or wait for), in key order; nothing in a batch without mutexes.
BEGIN;
SELECT plan(4);
SELECT pg_temp.start_claimed(k, 'decide_wf', 'dq_' || k, 'worker-1', '["in"]') FROM unnest(ARRAY['bm1', 'bm2', 'bm3']) AS k;
CREATE FUNCTION pg_temp.mutex_keys_locked() RETURNS text[] LANGUAGE sql AS $fn$
    SELECT array_agg(k ORDER BY k) FROM unnest(ARRAY['m1', 'm2', 'm3', 'm4', 'm5']) AS k
    WHERE EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                  AND l.objid::integer = hashtext('harvest.mutex:' || k));
$fn$;
SELECT harvest._lock_batch_mutexes(ARRAY[pg_temp.task('bm1'), pg_temp.task('bm2')],
    ARRAY['[{"type": "start_timer", "seq": 1, "duration": 5}]'::jsonb, NULL]);
SELECT is(pg_temp.mutex_keys_locked(), NULL, '_lock_batch_mutexes(): no mutex named, held or awaited: no key locked');
INSERT INTO harvest.mutex_locks (lock_key, holder_execution_id, acquired_at) VALUES ('m3', pg_temp.run('bm1'), harvest.now());
INSERT INTO harvest.mutex_waiters (lock_key, execution_id, seq, enqueued_at) VALUES ('m4', pg_temp.run('bm2'), 7, harvest.now());
INSERT INTO harvest.mutex_locks (lock_key, holder_execution_id, acquired_at) VALUES ('m5', pg_temp.run('bm3'), harvest.now());
SELECT harvest._lock_batch_mutexes(ARRAY[pg_temp.task('bm1'), pg_temp.task('bm2')], ARRAY[NULL, $$[
    {"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "m2"}},
    {"type": "record_marker", "seq": 2, "kind": "mutex_release", "value": {"key": "m1"}},
    {"type": "record_marker", "seq": 3, "kind": "other", "value": {"key": "m5"}}]$$::jsonb]);
SELECT is(pg_temp.mutex_keys_locked(), ARRAY['m1', 'm2', 'm3', 'm4'],
          '_lock_batch_mutexes(): the markers'' keys and the keys the batch''s runs hold or wait for; not another run''s');
SELECT lives_ok($$SELECT harvest._lock_batch_mutexes(ARRAY[1, 2]::bigint[], ARRAY['{"not": "an array"}'::jsonb, '7'])$$,
                '_lock_batch_mutexes() of commands that are not arrays: nothing');
SELECT harvest._lock_runs_and_mutexes(ARRAY[pg_temp.run('bm3')], NULL, NULL);
SELECT is(pg_temp.mutex_keys_locked(), ARRAY['m1', 'm2', 'm3', 'm4', 'm5'],
          '_lock_runs_and_mutexes(p_runs): those runs too, and the keys they hold (their shared pass)');
SELECT * FROM finish();
ROLLBACK;

-- Numbers of a decision's commands by the one rule for a JSON field (core.sql, _json_integer):
-- an integral 2.0 is 2 wherever it is read later; a fraction, a string or a number out of range
-- is HR001 naming the field, where it was cast raw (22P02) or rounded.
BEGIN;
SELECT plan(7);
SELECT pg_temp.start_activity('jn_p', 'wf', 'wq_jn_p', 'act', 'aq_jn_p', '[]', '{"priority": 2.0}', p_claim => false);
SELECT is((SELECT t.priority FROM harvest.tasks AS t WHERE t.id = pg_temp.task('jn_p')), 2,
          'schedule_activity: options.priority 2.0 queues the task at priority 2 (it was 22P02 at the insert)');
SELECT pg_temp.start_run('jn_s', 'wf', 'wq_jn_s');
SELECT throws_ok($$SELECT pg_temp.decide('jn_s', '[{"type": "start_timer", "seq": 2.5, "duration": 5}]')$$,
                 'HR001', 'command start_timer: seq must be a whole number from -2147483648 to 2147483647, got 2.5',
                 'a command''s seq of 2.5 is HR001 (a jsonb cast rounded it to 3)');
SELECT throws_ok($$SELECT pg_temp.decide('jn_s', '[{"type": "start_timer", "seq": 1, "duration": -1}]')$$,
                 'HR001', 'command start_timer (seq 1): duration must be a number from 0 to 3155760000, got -1',
                 'start_timer: a duration out of range is HR001 naming it');
SELECT throws_ok($$SELECT pg_temp.decide('jn_s', '[{"type": "start_timer", "seq": 1, "duration": 1e400}]')$$,
                 'HR001', NULL, '... and one no interval holds (it overflowed make_interval)');
SELECT throws_ok($$SELECT pg_temp.decide('jn_s', '[{"type": "start_child_workflow", "seq": 1, "workflow_name": "c",
                                                    "shard": "0"}]')$$,
                 'HR001', 'command start_child_workflow (seq 1): shard must be a whole number from 0 to 65535, got "0"',
                 'start_child_workflow: a shard in a string is HR001 (it was ignored: the child started here)');
SELECT is(pg_temp.decide('jn_s', '[{"type": "start_timer", "seq": 1.0, "duration": 60.0},
                                   {"type": "cancel_timer", "seq": 2, "timer_seq": 1.0}]'), 'RUNNING',
          'start_timer: seq 1.0 and duration 60.0 are taken as 1 and 60');
SELECT is((SELECT (e.event_type, e.event_data ->> 'timer_seq')::text FROM pg_temp.last_event(pg_temp.run('jn_s')) AS e),
          '(TimerCancelled,1)', 'cancel_timer: timer_seq 1.0 cancels timer 1 (it was 22P02)');
SELECT * FROM finish();
ROLLBACK;

-- The await_signals directive (docs/internals.md, "Awaited signals"), read by
-- harvest._awaited_signals_of: no event, its waits kept in the decision's marker, a new wait's
-- since the marker's own id; a decision without one writes the marker as before.
BEGIN;
SELECT plan(10);
SELECT is(harvest._awaited_signals_of('{"signals": [{"name": "a", "timer_seq": 3}, {"name": "b", "since": 4}]}', 9),
          '[{"name": "a", "since": 9, "timer_seq": 3}, {"name": "b", "since": 4, "timer_seq": null}]'::jsonb,
          '_awaited_signals_of(): each wait, since the marker when not given');
SELECT throws_ok($$SELECT harvest._awaited_signals_of('{"signals": {"name": "a"}}', 1)$$, 'HR001',
                 'await_signals: signals must be an array of at most 1000 waits',
                 '_awaited_signals_of(): signals not an array is HR001');
SELECT throws_ok($$SELECT harvest._awaited_signals_of('{"signals": [{"name": "a"}, {"name": " "}]}', 1)$$, 'HR001',
                 'await_signals: each wait needs a name, a non-empty string of at most 1000 characters',
                 '_awaited_signals_of(): a blank name is HR001');
SELECT throws_ok($$SELECT harvest._awaited_signals_of('{"signals": [{"name": "a", "since": 10}]}', 9)$$, 'HR001',
                 NULL, '_awaited_signals_of(): a wait since after the decision''s marker is HR001');
SELECT pg_temp.start_decided('as', 'as_wf', 'as_q', '[{"type": "await_signals", "signals": [{"name": "go"}]}]');
SELECT is((SELECT event_data - 'worker_id' FROM harvest.events
           WHERE execution_id = pg_temp.run('as') AND event_type = 'WorkflowTaskCompleted'),
          '{"through": 1, "awaiting": [{"name": "go", "since": 2, "timer_seq": null}]}'::jsonb,
          'await_signals: the marker keeps the waits, a new one since the marker itself');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('as')), 2::bigint,
          'await_signals: no event of its own');
SELECT harvest.signal_workflow(pg_temp.run('as'), 'other');
SELECT pg_temp.decide('as', '[{"type": "await_signals", "signals": [{"name": "go", "since": 2}]}]');
SELECT is((SELECT event_data -> 'awaiting' FROM harvest.events
           WHERE execution_id = pg_temp.run('as') AND event_type = 'WorkflowTaskCompleted' ORDER BY event_id DESC LIMIT 1),
          '[{"name": "go", "since": 2, "timer_seq": null}]'::jsonb, 'await_signals: a wait begun earlier keeps its since');
SELECT pg_temp.start_decided('as_plain', 'as_wf', 'as_q', '[]');
SELECT ok(NOT (SELECT event_data ? 'awaiting' FROM harvest.events
               WHERE execution_id = pg_temp.run('as_plain') AND event_type = 'WorkflowTaskCompleted'),
          'a decision without await_signals: its marker as before');
SELECT pg_temp.start_claimed('as_bad', 'as_wf', 'as_q');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1,
                 '[{"type": "await_signals", "signals": [{"name": ""}]}]')$$, pg_temp.task('as_bad'), pg_temp.token('as_bad')),
                 'HR001', NULL, 'await_signals: an empty name is HR001');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1,
                 '[{"type": "hold_wakeups"}, {"type": "await_signals", "signals": []}]')$$,
                 pg_temp.task('as_bad'), pg_temp.token('as_bad')),
                 'HR001', 'await_signals must be the decision''s first command', 'await_signals after another command: HR001');
SELECT * FROM finish();
ROLLBACK;
