-- functions/reset.sql: harvest.reset_workflow (the dry-run plan, the boundary rules of
-- harvest._reset_problems, argument and state errors, the source's end, the fork's
-- history, WorkflowResetFork, signal re-application, its workflow task and
-- history_bytes). harvest.count_versions is tested in pgtap/executions.sql; here, only
-- that a fork carries the version markers it copied.
BEGIN;
SELECT plan(105);
SET LOCAL TimeZone = 'UTC';
SET LOCAL DateStyle = 'ISO, MDY';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Runs of reset_wf with workflow_id r-<key> on a queue of their own (rq_<key>);
-- their activities go to ra_<key>.
CREATE FUNCTION pg_temp.start(p_key text, p_input jsonb DEFAULT '["in"]') RETURNS uuid LANGUAGE sql AS $fn$
    SELECT pg_temp.start_run(p_key, 'reset_wf', 'rq_' || p_key, p_input, 'r-' || p_key);
$fn$;
-- pg_temp.decide(key, commands) settles the workflow task of a run's queue.
-- Claim and complete every pending activity on ra_<key>; returns how many.
CREATE FUNCTION pg_temp.finish_activities(p_key text) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
    v_count integer := 0;
BEGIN
    FOR v_task IN SELECT * FROM harvest.claim_tasks('acts', ARRAY['ra_' || p_key], 100) LOOP
        PERFORM harvest.complete_activity(v_task.task_id, v_task.fencing_token, '"done"');
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END;
$fn$;
-- The dry-run plan of resetting a run to an event.
CREATE FUNCTION pg_temp.dry(p_key text, p_to bigint, p_reapply text DEFAULT 'drop') RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT harvest.reset_workflow(pg_temp.run(p_key), p_to, 'dry', NULL, p_reapply, true);
$fn$;
CREATE FUNCTION pg_temp.problems(p_key text, p_to bigint) RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT pg_temp.dry(p_key, p_to) -> 'problems';
$fn$;
-- Everything reset could touch, as one comparable row.
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $fn$
    SELECT concat_ws(' | ',
        (SELECT count(*) FROM harvest.events),
        (SELECT string_agg(id || ':' || status || ':' || last_event_id || ':' || history_bytes, ',' ORDER BY id)
         FROM harvest.executions),
        (SELECT string_agg(id || ':' || kind || ':' || status, ',' ORDER BY id) FROM harvest.tasks));
$fn$;

-- ---------------------------------------------------------------- the main history
-- 1 WorkflowStarted
-- 2 WorkflowTaskCompleted, 3 ActivityScheduled(1), 4 MarkerRecorded(2, version c=2)
-- 5 ActivityCompleted(1)
-- 6 WorkflowTaskCompleted, 7 TimerStarted(3)
-- 8 SignalReceived(sig-a)
-- 9 WorkflowTaskCompleted, 10 TimerCancelled(4, timer 3)
-- 11 SignalReceived(sig-b)
-- 12 WorkflowTaskCompleted, 13 ChildWorkflowStarted(5)
-- 14 SignalReceived(sig-c)
SELECT isnt(pg_temp.start('main', '[{"order": 7}]'), NULL, 'setup: start the main run');
SELECT is(pg_temp.decide('main', '[
    {"type": "schedule_activity", "seq": 1, "name": "charge", "queue": "ra_main"},
    {"type": "record_marker", "seq": 2, "kind": "version", "value": {"change_id": "c", "version": 2}}]'),
    'RUNNING', 'setup: schedule an activity and record a version marker');
SELECT is(pg_temp.finish_activities('main'), 1, 'setup: the activity completes');
SELECT is(pg_temp.decide('main', '[{"type": "start_timer", "seq": 3, "duration": 60}]'), 'RUNNING',
          'setup: start a timer');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
SELECT is(harvest.signal_workflow(pg_temp.run('main'), 'go', '{"n": 1}', 'sig-a'), 8::bigint, 'setup: signal a');
SELECT is(pg_temp.decide('main', '[{"type": "cancel_timer", "seq": 4, "timer_seq": 3}]'), 'RUNNING',
          'setup: cancel the timer');
SELECT is(harvest.signal_workflow(pg_temp.run('main'), 'go', '{"n": 2}', 'sig-b'), 11::bigint, 'setup: signal b');
SELECT is(pg_temp.decide('main', '[{"type": "start_child_workflow", "seq": 5, "workflow_name": "reset_kid",
                                    "task_queue": "rq_kid"}]'), 'RUNNING', 'setup: start a child');
SELECT is(harvest.signal_workflow(pg_temp.run('main'), 'go', '{"n": 3}', 'sig-c'), 14::bigint, 'setup: signal c');
SELECT results_eq(
    $$SELECT event_id, event_type FROM harvest.events WHERE execution_id = pg_temp.run('main') ORDER BY event_id$$,
    $$VALUES (1::bigint, 'WorkflowStarted'::text), (2, 'WorkflowTaskCompleted'), (3, 'ActivityScheduled'),
             (4, 'MarkerRecorded'), (5, 'ActivityCompleted'), (6, 'WorkflowTaskCompleted'), (7, 'TimerStarted'),
             (8, 'SignalReceived'), (9, 'WorkflowTaskCompleted'), (10, 'TimerCancelled'), (11, 'SignalReceived'),
             (12, 'WorkflowTaskCompleted'), (13, 'ChildWorkflowStarted'), (14, 'SignalReceived')$$,
    'setup: the main history is the one the tests below assume');

-- ---------------------------------------------------------------- dry run: the plan
CREATE TEMP TABLE before_dry ON COMMIT DROP AS SELECT pg_temp.state() AS state;
SELECT is(harvest.reset_workflow(pg_temp.run('main'), 5, 'looking', 'ops-1', 'buffer', true),
          jsonb_build_object('valid', true, 'problems', '[]'::jsonb, 'source_execution_id', pg_temp.run('main'),
                             'to_event', 5, 'carried_events', 5, 'discarded_events', 9,
                             'signal_reapply', 'buffer', 'pending_signals', 3, 'dry_run', true,
                             'new_execution_id', NULL),
          'dry_run: the plan (valid, no problems, carried/discarded events, pending signals, no new execution)');
SELECT is(harvest.reset_workflow(pg_temp.run('main'), 14, 'looking', p_dry_run => true) - 'problems',
          jsonb_build_object('valid', false, 'source_execution_id', pg_temp.run('main'),
                             'to_event', 14, 'carried_events', 14, 'discarded_events', 0,
                             'signal_reapply', 'drop', 'pending_signals', 0, 'dry_run', true,
                             'new_execution_id', NULL),
          'dry_run of an invalid boundary still returns the plan, valid false (signal_reapply defaults to drop)');
SELECT results_eq(
    $$SELECT n, (pg_temp.dry('main', n) ->> 'valid')::boolean FROM generate_series(1, 14) AS n ORDER BY n$$,
    $$VALUES (1, true), (2, false), (3, false), (4, false), (5, true), (6, false), (7, false), (8, false),
             (9, false), (10, true), (11, true), (12, false), (13, false), (14, false)$$,
    'the valid boundaries of the main history: 1, 5, 10 and 11');
SELECT is(pg_temp.problems('main', 4),
          '["ActivityScheduled (seq 1, event 3) is unresolved at event 4"]'::jsonb,
          'an activity scheduled and not resolved by the boundary is a problem');
SELECT is(pg_temp.problems('main', 8),
          '["TimerStarted (seq 3, event 7) is unresolved at event 8"]'::jsonb,
          'a timer started and neither fired nor cancelled by the boundary is a problem');
SELECT is(pg_temp.problems('main', 10), '[]'::jsonb, 'a timer resolved by TimerCancelled is fine');
SELECT is(pg_temp.problems('main', 14),
          '["ChildWorkflowStarted (seq 5, event 13) is unresolved at event 14"]'::jsonb,
          'a child started and not finished by the boundary is a problem');
SELECT is(pg_temp.problems('main', 2),
          '["event 2 is inside a workflow task''s commands (ActivityScheduled follows); pick the last event of that group"]'::jsonb,
          'a boundary followed by a command event of the same task is a problem');
SELECT is(pg_temp.problems('main', 3),
          '["event 3 is inside a workflow task''s commands (MarkerRecorded follows); pick the last event of that group",
            "ActivityScheduled (seq 1, event 3) is unresolved at event 3"]'::jsonb,
          'a MarkerRecorded next is a command too; every problem is listed');
SELECT is(pg_temp.problems('main', 9),
          '["event 9 is inside a workflow task''s commands (TimerCancelled follows); pick the last event of that group",
            "TimerStarted (seq 3, event 7) is unresolved at event 9"]'::jsonb,
          'a TimerCancelled next is a command; the timer is still open at its WorkflowTaskCompleted');
SELECT is(pg_temp.problems('main', 12),
          '["event 12 is inside a workflow task''s commands (ChildWorkflowStarted follows); pick the last event of that group"]'::jsonb,
          'a ChildWorkflowStarted next is a command');
SELECT is(pg_temp.problems('main', 15), '["event 15 is outside the history (1..14)"]'::jsonb,
          'an event past the history is a problem');
SELECT is(pg_temp.problems('main', 0), '["event 0 is outside the history (1..14)"]'::jsonb,
          'event 0 is a problem');
SELECT is(pg_temp.problems('main', NULL), '["event NULL is outside the history (1..14)"]'::jsonb,
          'a NULL event is a problem');
SELECT results_eq(
    $$SELECT p ->> 'valid', p ->> 'carried_events', p ->> 'discarded_events', p ->> 'pending_signals'
      FROM (VALUES (pg_temp.dry('main', 15)), (pg_temp.dry('main', 0)), (pg_temp.dry('main', -3))) AS v (p)$$,
    $$VALUES ('false'::text, '14'::text, '0'::text, '0'::text), ('false', '0', '14', '3'), ('false', '0', '14', '3')$$,
    'out-of-range plans: carried and discarded events are clamped to the history');
SELECT is(harvest._reset_problems((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('main')), 5),
          ARRAY[]::text[], '_reset_problems() of a valid boundary: none');
SELECT is(harvest._reset_problems((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('main')), 7),
          ARRAY['TimerStarted (seq 3, event 7) is unresolved at event 7'],
          '_reset_problems() returns the problems as text lines');
SELECT is(pg_temp.state(), (SELECT state FROM before_dry), 'dry runs wrote nothing: events, runs and tasks unchanged');

-- A timer resolved by TimerFired, a child resolved by ChildWorkflowFailed.
SELECT isnt(pg_temp.start('fired'), NULL, 'setup: a run with a timer');
SELECT is(pg_temp.decide('fired', '[{"type": "start_timer", "seq": 1, "duration": 10}]'), 'RUNNING',
          'setup: start a 10 s timer');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:15+00';
SELECT is(pg_temp.decide('fired'), 'RUNNING', 'setup: the timer fires (TimerFired 4) and the workflow sees it');
SELECT results_eq(
    $$SELECT n, pg_temp.problems('fired', n) FROM generate_series(3, 5) AS n ORDER BY n$$,
    $$VALUES (3, '["TimerStarted (seq 1, event 3) is unresolved at event 3"]'::jsonb), (4, '[]'), (5, '[]')$$,
    'a timer resolved by TimerFired is fine from the TimerFired on');
SELECT isnt((SELECT s.execution_id FROM harvest.start_workflow('reset_kid', '[]', 'taken-kid', 'rq_taken') AS s), NULL,
            'setup: a running reset_kid holds workflow_id taken-kid');
SELECT isnt(pg_temp.start('kidfail'), NULL, 'setup: a run whose child cannot start');
SELECT is(pg_temp.decide('kidfail', '[{"type": "start_child_workflow", "seq": 1, "workflow_name": "reset_kid",
                                       "workflow_id": "taken-kid"}]'), 'RUNNING',
          'setup: ChildWorkflowStarted 3, ChildWorkflowFailed 4');
SELECT results_eq(
    $$SELECT n, pg_temp.problems('kidfail', n) FROM generate_series(3, 4) AS n ORDER BY n$$,
    $$VALUES (3, '["ChildWorkflowStarted (seq 1, event 3) is unresolved at event 3"]'::jsonb), (4, '[]')$$,
    'a child resolved by ChildWorkflowFailed is fine from the ChildWorkflowFailed on');

-- An external signal is open from its ExternalSignalRequested to its outcome (here in the same
-- decision: the target was free).
SELECT isnt(pg_temp.start('extsig'), NULL, 'setup: a run that signals another');
SELECT isnt(pg_temp.start('extsig_t'), NULL, 'setup: the run it signals');
SELECT is(pg_temp.decide('extsig', jsonb_build_array(jsonb_build_object('type', 'signal_external_workflow',
              'seq', 1, 'execution_id', pg_temp.run('extsig_t'), 'signal_name', 'poke'))), 'RUNNING',
          'setup: ExternalSignalRequested 3, ExternalSignalDelivered 4');
SELECT results_eq(
    $$SELECT n, pg_temp.problems('extsig', n) FROM generate_series(3, 4) AS n ORDER BY n$$,
    $$VALUES (3, '["ExternalSignalRequested (seq 1, event 3) is unresolved at event 3"]'::jsonb), (4, '[]')$$,
    'an external signal is fine from its ExternalSignalDelivered on');

-- ---------------------------------------------------------------- runs that cannot be reset
CREATE TEMP TABLE kid ON COMMIT DROP AS
SELECT id FROM harvest.executions WHERE parent_id = pg_temp.run('main');
INSERT INTO keyed SELECT 'kid', id FROM kid;
SELECT is(pg_temp.problems('kid', 1),
          jsonb_build_array('the run is a child of ' || pg_temp.run('main') || '; reset its top-level parent instead'),
          'a child run is refused: reset its top-level parent');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 1, 'fix')$$, pg_temp.run('kid')), 'HR001',
                 format('cannot reset execution %s to event 1: the run is a child of %s; reset its top-level parent instead',
                        pg_temp.run('kid'), pg_temp.run('main')),
                 'resetting a child run: HR001 listing the problem');

SELECT isnt(pg_temp.start('can'), NULL, 'setup: a run that continues as new');
SELECT is(pg_temp.decide('can', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'setup: continue as new');
INSERT INTO keyed SELECT 'can2', id FROM harvest.executions WHERE continued_from = pg_temp.run('can');
SELECT is(pg_temp.problems('can2', 1),
          jsonb_build_array('the run continued from ' || pg_temp.run('can') || '; continue-as-new histories cannot be reset'),
          'a continue-as-new successor is refused');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 1, 'fix')$$, pg_temp.run('can2')), 'HR001', NULL,
                 'resetting a continue-as-new successor: HR001');
SELECT is(pg_temp.problems('can', 1), '["the run is CONTINUED_AS_NEW; only running runs can be reset"]'::jsonb,
          'the run that continued as new is terminal and refused');

SELECT isnt(pg_temp.start('done'), NULL, 'setup: a run that completes');
SELECT is(pg_temp.decide('done', '[{"type": "complete_workflow", "result": 1}]'), 'COMPLETED', 'setup: it completes');
SELECT is(pg_temp.dry('done', 1) - 'source_execution_id',
          '{"valid": false, "problems": ["the run is COMPLETED; only running runs can be reset"], "to_event": 1,
            "carried_events": 1, "discarded_events": 2, "signal_reapply": "drop", "pending_signals": 0,
            "dry_run": true, "new_execution_id": null}'::jsonb,
          'dry_run of a terminal run: the plan names its state');
SELECT is(pg_temp.problems('done', 9),
          '["the run is COMPLETED; only running runs can be reset", "event 9 is outside the history (1..3)"]'::jsonb,
          'a terminal run and an out-of-range event: both listed');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 1, 'fix')$$, pg_temp.run('done')), 'HR005',
                 format('cannot reset execution %s to event 1: the run is COMPLETED; only running runs can be reset',
                        pg_temp.run('done')),
                 'resetting a terminal run: HR005');

-- ---------------------------------------------------------------- argument errors
CREATE TEMP TABLE before_refused ON COMMIT DROP AS SELECT pg_temp.state() AS state;
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 4, 'fix')$$, pg_temp.run('main')), 'HR001',
                 format('cannot reset execution %s to event 4: ActivityScheduled (seq 1, event 3) is unresolved at event 4',
                        pg_temp.run('main')),
                 'an invalid boundary: HR001 naming the problem');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 3, 'fix')$$, pg_temp.run('main')), 'HR001',
                 format('cannot reset execution %s to event 3: event 3 is inside a workflow task''s commands '
                        '(MarkerRecorded follows); pick the last event of that group; '
                        'ActivityScheduled (seq 1, event 3) is unresolved at event 3', pg_temp.run('main')),
                 'several problems: HR001 listing them all, separated by "; "');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 99, 'fix')$$, pg_temp.run('main')), 'HR001',
                 format('cannot reset execution %s to event 99: event 99 is outside the history (1..14)', pg_temp.run('main')),
                 'an event out of range: HR001');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 5, '')$$, pg_temp.run('main')), 'HR001',
                 'a reset needs a reason', 'an empty reason: HR001');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 5, '  ')$$, pg_temp.run('main')), 'HR001',
                 'a reset needs a reason', 'a blank reason: HR001');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 5, NULL, p_dry_run => true)$$, pg_temp.run('main')), 'HR001',
                 'a reset needs a reason', 'a NULL reason: HR001, even for a dry run');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 5, 'fix', NULL, 'keep')$$, pg_temp.run('main')), 'HR001',
                 'unknown signal_reapply "keep"', 'an unknown signal_reapply: HR001');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 5, 'fix', NULL, NULL)$$, pg_temp.run('main')), 'HR001',
                 'unknown signal_reapply "<NULL>"', 'a NULL signal_reapply: HR001');
SELECT throws_ok($$SELECT harvest.reset_workflow('00000000-0000-4000-8000-00000000abcd', 1, 'fix')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist', 'an unknown execution: HR002');
SELECT throws_ok($$SELECT harvest.reset_workflow('00000000-0000-4000-8000-00000000abcd', 1, 'fix', p_dry_run => true)$$,
                 'HR002', NULL, 'an unknown execution, dry run: HR002');
SELECT is(pg_temp.state(), (SELECT state FROM before_refused), 'refused resets wrote nothing');

-- ---------------------------------------------------------------- a valid reset (signal_reapply buffer)
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00+00';
CREATE TEMP TABLE reset_main ON COMMIT DROP AS
SELECT harvest.reset_workflow(pg_temp.run('main'), 10, 'bad deploy', 'ops-1', 'buffer') AS plan;
INSERT INTO keyed SELECT 'fork', (plan ->> 'new_execution_id')::uuid FROM reset_main;
SELECT is((SELECT plan - 'new_execution_id' FROM reset_main),
          jsonb_build_object('valid', true, 'problems', '[]'::jsonb, 'source_execution_id', pg_temp.run('main'),
                             'to_event', 10, 'carried_events', 10, 'discarded_events', 4,
                             'signal_reapply', 'buffer', 'pending_signals', 2, 'dry_run', false),
          'reset_workflow() returns the plan');
SELECT results_eq(
    $$SELECT count(*), bool_and(id <> pg_temp.run('main')) FROM harvest.executions WHERE id = pg_temp.run('fork')$$,
    $$VALUES (1::bigint, true)$$, 'with new_execution_id: the fork, a new run');

-- The source ends TERMINATED.
SELECT results_eq(
    $$SELECT status, failure ->> 'error_type', failure ->> 'message', failure -> 'details', completed_at, last_event_id
      FROM harvest.executions WHERE id = pg_temp.run('main')$$,
    $$VALUES ('TERMINATED'::text, 'Reset'::text, 'reset to event 10: bad deploy'::text, '{"operator_id": "ops-1"}'::jsonb,
              '2030-01-01 00:10:00+00'::timestamptz, 15::bigint)$$,
    'the source is TERMINATED with a Reset failure');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('main') AND event_id > 14$$,
    $$VALUES (15::bigint, 'WorkflowTerminated'::text, '{"reason": "reset to event 10: bad deploy", "operator_id": "ops-1"}'::jsonb)$$,
    'the source''s last event is WorkflowTerminated naming the event, the reason and the operator');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('main')$$,
                'the source has no task left');

-- The fork.
SELECT results_eq(
    $$SELECT f.workflow_name, f.workflow_id, f.queue, f.input, f.search_attributes, f.status,
             f.parent_id, f.continued_from, f.created_at, f.last_event_id, harvest.shard_of(f.id)
      FROM harvest.executions AS f WHERE f.id = pg_temp.run('fork')$$,
    $$SELECT s.workflow_name, s.workflow_id, s.queue, s.input, s.search_attributes, 'RUNNING'::text,
             NULL::uuid, NULL::uuid, '2030-01-01 00:10:00+00'::timestamptz, 13::bigint, harvest.shard_of(s.id)
      FROM harvest.executions AS s WHERE s.id = pg_temp.run('main')$$,
    'the fork: same name, workflow_id, queue, input and shard; RUNNING, created now, 13 events');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data, created_at FROM harvest.events
      WHERE execution_id = pg_temp.run('fork') AND event_id <= 10 ORDER BY event_id$$,
    $$SELECT event_id, event_type, event_data, created_at FROM harvest.events
      WHERE execution_id = pg_temp.run('main') AND event_id <= 10 ORDER BY event_id$$,
    'events 1..10 are copied with the same ids, types, data and times');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data, created_at FROM harvest.events
      WHERE execution_id = pg_temp.run('fork') AND event_id = 11$$,
    $$VALUES (11::bigint, 'WorkflowResetFork'::text,
              jsonb_build_object('source_execution_id', pg_temp.run('main'), 'to_event', 10, 'reason', 'bad deploy',
                                 'operator_id', 'ops-1', 'signal_reapply', 'buffer'),
              '2030-01-01 00:10:00+00'::timestamptz)$$,
    'then WorkflowResetFork{source_execution_id, to_event, reason, operator_id, signal_reapply}');
SELECT results_eq(
    $$SELECT event_type, event_data FROM harvest.events
      WHERE execution_id = pg_temp.run('fork') AND event_id > 11 ORDER BY event_id$$,
    $$SELECT event_type, event_data FROM harvest.events
      WHERE execution_id = pg_temp.run('main') AND event_id > 10 AND event_type = 'SignalReceived' ORDER BY event_id$$,
    'buffer: the source''s signals after the boundary follow, in order');
SELECT results_eq(
    $$SELECT event_data ->> 'signal_id' FROM harvest.events
      WHERE execution_id = pg_temp.run('fork') AND event_type = 'SignalReceived' ORDER BY event_id$$,
    $$VALUES ('sig-a'::text), ('sig-b'), ('sig-c')$$,
    'the fork holds each signal once: the carried one, then the re-applied ones');
SELECT results_eq(
    $$SELECT kind, status, queue, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('fork')$$,
    $$VALUES ('workflow'::text, 'pending'::text, 'rq_main'::text, '2030-01-01 00:10:00+00'::timestamptz)$$,
    'the fork has one pending workflow task on its queue, and nothing else');
SELECT is((SELECT history_bytes FROM harvest.executions WHERE id = pg_temp.run('fork')),
          (SELECT sum(octet_length(event_data::text)) FROM harvest.events WHERE execution_id = pg_temp.run('fork')),
          'the fork''s history_bytes is the sum of octet_length(event_data::text) over its events');
SELECT is((SELECT history_bytes FROM harvest.executions WHERE id = pg_temp.run('fork'))
          - (SELECT sum(octet_length(event_data::text)) FROM harvest.events
             WHERE execution_id = pg_temp.run('fork') AND event_id <= 10),
          (SELECT sum(octet_length(event_data::text)) FROM harvest.events
           WHERE execution_id = pg_temp.run('fork') AND event_id > 10),
          'history_bytes: the carried events as stored, plus each appended event as _append_event counts it');
SELECT is(pg_temp.decide('main'), 'RUNNING', 'the fork''s workflow task can be claimed and completed');
SELECT results_eq(
    $$SELECT status, count(*) FROM harvest.executions WHERE workflow_name = 'reset_wf' AND workflow_id = 'r-main'
      GROUP BY status ORDER BY status$$,
    $$VALUES ('RUNNING'::text, 1::bigint), ('TERMINATED', 1)$$,
    'r-main has one running run, the fork');
SELECT throws_ok(format($$SELECT harvest.reset_workflow(%L, 10, 'again')$$, pg_temp.run('main')), 'HR005', NULL,
                 'the reset source is terminal: resetting it again is HR005');

-- ---------------------------------------------------------------- signal_reapply drop
SET LOCAL harvest.fake_now = '2030-01-01 00:20:00+00';
SELECT isnt(pg_temp.start('drop'), NULL, 'setup: a run for a drop reset');
SELECT is(pg_temp.decide('drop'), 'RUNNING', 'setup: its first task');
SELECT is(harvest.signal_workflow(pg_temp.run('drop'), 'go', '1', 'd-1'), 3::bigint, 'setup: a signal');
SELECT is(pg_temp.decide('drop'), 'RUNNING', 'setup: the workflow sees it');
SELECT is(harvest.signal_workflow(pg_temp.run('drop'), 'go', '2', 'd-2'), 5::bigint, 'setup: a signal after the boundary');
CREATE TEMP TABLE reset_drop ON COMMIT DROP AS
SELECT harvest.reset_workflow(pg_temp.run('drop'), 4, 'retry') AS plan;
INSERT INTO keyed SELECT 'drop_fork', (plan ->> 'new_execution_id')::uuid FROM reset_drop;
SELECT is((SELECT plan - 'new_execution_id' - 'source_execution_id' FROM reset_drop),
          '{"valid": true, "problems": [], "to_event": 4, "carried_events": 4, "discarded_events": 1,
            "signal_reapply": "drop", "pending_signals": 1, "dry_run": false}'::jsonb,
          'a drop reset: the plan counts the pending signal');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('drop_fork') AND event_id > 4$$,
    $$VALUES (5::bigint, 'WorkflowResetFork'::text,
              jsonb_build_object('source_execution_id', pg_temp.run('drop'), 'to_event', 4, 'reason', 'retry',
                                 'operator_id', NULL, 'signal_reapply', 'drop'))$$,
    'drop: WorkflowResetFork is the last event, no signal re-applied');
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'signal_id' FROM harvest.events
      WHERE execution_id = pg_temp.run('drop_fork') AND event_type = 'SignalReceived'$$,
    $$VALUES (3::bigint, 'd-1'::text)$$, 'drop: only the carried signal is in the fork');
SELECT is((SELECT event_data FROM harvest.events WHERE execution_id = pg_temp.run('drop') AND event_id = 6),
          '{"reason": "reset to event 4: retry", "operator_id": null}'::jsonb,
          'without an operator, WorkflowTerminated says operator_id null');
SELECT results_eq(
    $$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('drop_fork')$$,
    $$VALUES ('workflow'::text, 'pending'::text)$$, 'the drop fork has a pending workflow task');
SELECT is((SELECT history_bytes FROM harvest.executions WHERE id = pg_temp.run('drop_fork')),
          (SELECT sum(octet_length(event_data::text)) FROM harvest.events WHERE execution_id = pg_temp.run('drop_fork')),
          'the drop fork''s history_bytes is the sum of octet_length(event_data::text) over its events');

-- A reset fork carries the version markers it copied: it counts as active, its source as terminal.
SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids FROM harvest.count_versions('c', NULL, 'all')$$,
    $$VALUES (2, 'active'::text, 1::bigint, ARRAY[pg_temp.run('fork')]), (2, 'terminal', 1, ARRAY[pg_temp.run('main')])$$,
    'a reset fork carries the version markers it copied: it counts as active, its source as terminal');

-- The fork keeps the source's flow-control keys and run timeout.
SELECT pg_temp.start('keyed');
UPDATE harvest.executions SET concurrency_key = 'tenant-a', quota_key = 'tenant-a', run_timeout_secs = 60
WHERE id = pg_temp.run('keyed');
INSERT INTO keyed SELECT 'keyed_fork', (harvest.reset_workflow(pg_temp.run('keyed'), 1, 'keys') ->> 'new_execution_id')::uuid;
SELECT results_eq(
    $$SELECT concurrency_key, quota_key, run_timeout_secs FROM harvest.executions
      WHERE id = pg_temp.run('keyed_fork')$$,
    $$VALUES ('tenant-a'::text, 'tenant-a'::text, 60::double precision)$$,
    'the fork keeps concurrency_key, quota_key and run_timeout_secs');

-- Per-key concurrency counts the fork like the run it replaces: an admitted source's slot
-- moves to the fork; a source not admitted yet leaves the fork's first task gated like its own.
SELECT pg_temp.start('slotted');
INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)
VALUES (pg_temp.run('slotted'), 'tenant-s', 'reset_wf', '2029-12-31 00:00:00+00');
INSERT INTO keyed SELECT 'slotted_fork',
    (harvest.reset_workflow(pg_temp.run('slotted'), 1, 'slot') ->> 'new_execution_id')::uuid;
SELECT results_eq($$SELECT execution_id, concurrency_key, admitted_at FROM harvest.workflow_slots
                    WHERE execution_id IN (pg_temp.run('slotted'), pg_temp.run('slotted_fork'))$$,
    $$VALUES (pg_temp.run('slotted_fork'), 'tenant-s'::text, '2029-12-31 00:00:00+00'::timestamptz)$$,
    'reset_workflow() moves an admitted source''s workflow slot to the fork');
SELECT pg_temp.start('gated');
UPDATE harvest.tasks SET concurrency_key = 'tenant-g', concurrency_limit = 1
WHERE execution_id = pg_temp.run('gated') AND kind = 'workflow';
INSERT INTO keyed SELECT 'gated_fork',
    (harvest.reset_workflow(pg_temp.run('gated'), 1, 'gate') ->> 'new_execution_id')::uuid;
SELECT results_eq($$SELECT status, concurrency_key, concurrency_limit FROM harvest.tasks
                    WHERE execution_id = pg_temp.run('gated_fork') AND kind = 'workflow'$$,
    $$VALUES ('pending'::text, 'tenant-g'::text, 1)$$,
    'the fork of a run not admitted yet gets its first task''s concurrency gate');
SELECT is_empty($$SELECT 1 FROM harvest.workflow_slots WHERE execution_id = pg_temp.run('gated_fork')$$,
    '... and no slot: it waits for one like the run it replaces');

-- A durable mutex held or awaited at the boundary: refused (the fork would replay its grant
-- while the source's close hands the key to the next waiter). One released by then is fine.
-- 1 WorkflowStarted, 2 WorkflowTaskCompleted, 3 MarkerRecorded(acquire mk), 4 MutexAcquired,
-- 5 WorkflowTaskCompleted, 6 MarkerRecorded(release mk)
SELECT pg_temp.start('mx');
SELECT is(pg_temp.decide('mx', '[{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "mk"}}]'),
          'RUNNING', 'setup: mx takes the mutex mk');
SELECT is(pg_temp.problems('mx', 4),
          jsonb_build_array('mutex ''mk'' (asked for at event 3) is held or awaited at event 4; a fork cannot take '
                            'a mutex over: reset to before event 3 or to after the block released it'),
          '_reset_problems(): a mutex held at the boundary is a problem, saying where to reset instead');
SELECT throws_ok($$SELECT harvest.reset_workflow(pg_temp.run('mx'), 4, 'inside')$$, 'HR001', NULL,
                 'reset_workflow() refuses a boundary inside a mutex block (HR001)');
SELECT is(pg_temp.decide('mx', '[{"type": "record_marker", "seq": 2, "kind": "mutex_release", "value": {"key": "mk"}}]'),
          'RUNNING', 'setup: mx releases mk');
SELECT is(pg_temp.problems('mx', 6), '[]'::jsonb, '_reset_problems(): a mutex released by the boundary is none');

-- Resets are audited: one workflow.reset row per real reset (the reset of main, from
-- this session), none for dry runs or refused resets.
SELECT results_eq($$SELECT operation, target, operator_id, actor = session_user, source, details - 'application_name'
                    FROM harvest.audit_log WHERE target = pg_temp.run('main')::text$$,
                  $$SELECT 'workflow.reset'::text, pg_temp.run('main')::text, 'ops-1'::text, true,
                           'cli'::text, jsonb_build_object('reason', 'bad deploy', 'to_event', 10,
                                                           'signal_reapply', 'buffer',
                                                           'new_execution_id', pg_temp.run('fork'))$$,
                  'reset_workflow() writes one audit row: operation, target, operator, actor, source');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.reset'),
          (SELECT count(*) FROM harvest.events WHERE event_type = 'WorkflowResetFork'),
          'one workflow.reset row per fork: dry runs and refused resets write none');

-- A fork's offload references are renamed to its own copies; nothing inside a string moves.
SELECT is(harvest._renamed_refs(
              '{"result": {"_harvest_ref": "00000000-0000-4000-8000-000000000001", "bytes": 9},
                "note": "\"_harvest_ref\": \"00000000-0000-4000-8000-000000000001\""}'::jsonb,
              '{"00000000-0000-4000-8000-000000000001": "00000000-0000-4000-8000-000000000002"}'),
          '{"result": {"_harvest_ref": "00000000-0000-4000-8000-000000000002", "bytes": 9},
            "note": "\"_harvest_ref\": \"00000000-0000-4000-8000-000000000001\""}'::jsonb,
          '_renamed_refs() renames a reference and leaves the same text inside a string alone');
SELECT is(harvest._renamed_refs('{"a": 1}'::jsonb, '{}'::jsonb), '{"a": 1}'::jsonb,
          '_renamed_refs() with nothing to rename returns the data');
-- A reference in the source's input is what its starter wrote: one naming another run's row, or
-- a run-less one (another client's held-back start's input), is not copied for the fork (a copy
-- would outlive that row's erasure); it stays as written.
SELECT pg_temp.start_run('rs_victim', 'wf', 'rs_victim_q');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-4000-8000-0000000000e1', pg_temp.run('rs_victim'), now(), 8, '"theirs"', NULL),
       ('00000000-0000-4000-8000-0000000000e2', NULL, now(), 6, '"held"', 'someone_else');
SELECT pg_temp.start_run('rs_forger', 'wf', 'rs_forger_q',
                         '[{"_harvest_ref": "00000000-0000-4000-8000-0000000000e1", "bytes": 8},
                           {"_harvest_ref": "00000000-0000-4000-8000-0000000000e2", "bytes": 6}]');
CREATE TEMP TABLE rs_forged ON COMMIT DROP AS
SELECT (harvest.reset_workflow(pg_temp.run('rs_forger'), 1, 'forged') ->> 'new_execution_id')::uuid AS fork;
SELECT results_eq(
    $$SELECT f.input -> 0 ->> '_harvest_ref', f.input -> 1 ->> '_harvest_ref',
             (SELECT count(*) FROM harvest.payloads AS p WHERE p.execution_id = f.id)
      FROM harvest.executions AS f WHERE f.id = (SELECT fork FROM rs_forged)$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000e1'::text, '00000000-0000-4000-8000-0000000000e2'::text, 0::bigint)$$,
    'reset_workflow(): neither another run''s row nor a run-less one is copied for the fork through a forged reference');

SELECT * FROM finish();
ROLLBACK;

-- A FAILED run is terminal and refused (the spec: "Terminal workflows ... are rejected"): HR005,
-- as for any other terminal run. A bad deploy's activity failures park as dead letters (replayed
-- after the fix) before the run fails; a run failed by a dead_letter=False activity is started again.
BEGIN;
SELECT plan(12);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT lives_ok($$SELECT harvest._check_signal_reapply('buffer')$$, '_check_signal_reapply: buffer is one');
SELECT throws_ok($$SELECT harvest._check_signal_reapply('keep')$$, 'HR001', 'unknown signal_reapply "keep"',
                 '_check_signal_reapply: another is HR001');
SELECT pg_temp.start_activity('ff', 'ff_wf', 'ff_q', 'ship', 'ff_aq',
                              p_options => '{"dead_letter": false, "retry": {"max_attempts": 1}}');
SELECT harvest.fail_activity(pg_temp.task('ff'), pg_temp.token('ff'), '{"error_type": "Bug", "message": "bad deploy"}');
SELECT pg_temp.decide('ff', '[{"type": "fail_workflow", "failure": {"error_type": "ActivityFailure", "message": "x"}}]');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('ff')), 'FAILED', 'setup: the run failed');
SELECT is(harvest._reset_run_problems((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('ff'))),
          ARRAY['the run is FAILED; only running runs can be reset'], '_reset_run_problems: the run''s own');
SELECT is(harvest._reset_boundary_problems((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('ff')), 3),
          ARRAY['ActivityScheduled (seq 1, event 3) is unresolved at event 3'], '_reset_boundary_problems: the boundary''s');
SELECT is(harvest._reset_point((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('ff')),
                               'first_workflow_task', NULL), 1::bigint, '_reset_point: the first valid boundary');
SELECT is((harvest._reset_points(ARRAY[pg_temp.run('ff')], 'first_workflow_task', NULL, NULL) -> 0) - 'at',
          jsonb_build_object('execution_id', pg_temp.run('ff'), 'event_id', 1, 'why', NULL),
          '_reset_points: each run''s point (a dry run''s preview)');
SELECT is(harvest._reset_points(ARRAY[pg_temp.run('ff')], 'before_time', NULL, NULL) -> 0 -> 'why',
          '"no time given: before_time needs the bad deploy''s time"'::jsonb, '_reset_points: or why it has none');
SELECT is((SELECT jsonb_build_array(p.p_point, p.p_outcome, p.p_why)
           FROM harvest._reset_plan((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('ff')),
                                    'first_workflow_task', NULL, NULL) AS p),
          '[1, "reset", null]'::jsonb, '_reset_plan: a run with a point is reset to it (the step''s and the dry run''s rule)');
SELECT is((SELECT jsonb_build_array(p.p_point, p.p_outcome)
           FROM harvest._reset_plan((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('ff')),
                                    'before_time', NULL, NULL) AS p),
          '[null, "no_time"]'::jsonb, '_reset_plan: before_time without a time has no point');
-- (reset_workflow is harvest._reset_execution with no batch: the refusal below is its.)
SELECT throws_ok(format('SELECT harvest.reset_workflow(%L, 1, %L)', pg_temp.run('ff'), 'fixed'), 'HR005',
                 format('cannot reset execution %s to event 1: the run is FAILED; only running runs can be reset',
                        pg_temp.run('ff')),
                 'resetting a FAILED run: HR005, as any terminal run');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_id = 'ff'), 1::bigint, 'no fork');
SELECT * FROM finish();
ROLLBACK;
